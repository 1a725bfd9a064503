/* wk_dl.c: optional shared libraries opened on first use (see wk_dl.h). */
#include "lib/wk_dl.h"

#include <dlfcn.h>
#include <string.h>

#include "lib/wk_err.h"

typedef void (*wk_dl_fn)(void);
_Static_assert(sizeof(void *) == sizeof(wk_dl_fn), "dlsym's pointers fit a function pointer");

static bool load_locked(wk_dl_lib *lib) {
  if (lib->fns_size != lib->n * sizeof(wk_dl_fn)) {
    wk_errf(lib->why, sizeof lib->why, "%s: a table of %zu bytes for %zu functions", lib->soname,
            lib->fns_size, lib->n);
    return false;
  }
  void *h = dlopen(lib->soname, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char *e = dlerror();
    wk_errf(lib->why, sizeof lib->why, "cannot load %s: %s", lib->soname, e ? e : "dlopen failed");
    return false;
  }
  unsigned char *table = lib->fns;
  for (size_t i = 0; i < lib->n; i++) {
    void *sym = dlsym(h, lib->names[i]);
    if (!sym) {
      wk_errf(lib->why, sizeof lib->why, "%s has no function %s", lib->soname, lib->names[i]);
      memset(lib->fns, 0, lib->fns_size);
      dlclose(h);
      return false;
    }
    /* POSIX: a function's address from dlsym converts to a function pointer; copied
     * (not cast) because ISO C has no conversion between the two kinds of pointer */
    memcpy(table + i * sizeof(wk_dl_fn), &sym, sizeof sym);
  }
  return true; /* kept open for the life of the process */
}

bool wk_dl_load(wk_dl_lib *lib, char *err, size_t err_len) {
  pthread_mutex_lock(&lib->mu);
  if (lib->state == 0) lib->state = load_locked(lib) ? 1 : -1;
  bool ok = lib->state == 1;
  if (!ok) wk_errf(err, err_len, "%s", lib->why);
  pthread_mutex_unlock(&lib->mu);
  return ok;
}

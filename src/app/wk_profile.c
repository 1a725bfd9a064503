/* wk_profile.c: Profile checks. */
#include "app/wk_profile.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "plugins/wk_builders.h"
#include "plugins/wk_writers.h"

const char *wk_deployment_name(wk_deployment d) {
  switch (d) {
    case WK_DEPLOYMENT_BLOCK: return "block";
    case WK_DEPLOYMENT_BUNDLE: return "bundle";
  }
  return "unknown";
}

__attribute__((format(printf, 4, 5))) static void add(char *err, size_t len, int *n,
                                                      const char *fmt, ...) {
  size_t used = strlen(err);
  va_list ap;
  va_start(ap, fmt);
  if (used < len) vsnprintf(err + used, len - used, fmt, ap);
  va_end(ap);
  (*n)++;
}

int wk_profile_validate(const wk_profile *p, char *err, size_t len) {
  int n = 0;
  err[0] = '\0';
  if (p->deployment != WK_DEPLOYMENT_BLOCK && p->deployment != WK_DEPLOYMENT_BUNDLE) {
    add(err, len, &n, "profile: deployment must be block or bundle\n");
  }
  if (!p->service || !p->service[0]) add(err, len, &n, "profile: a service name is required\n");
  size_t pl = p->registry_prefix ? strlen(p->registry_prefix) : 0;
  if (pl < 2 || p->registry_prefix[0] != '/' || p->registry_prefix[pl - 1] != '/') {
    add(err, len, &n, "profile: registry_prefix must start and end with '/', got '%s'\n",
        p->registry_prefix ? p->registry_prefix : "");
  }
  if (!p->builders[0]) add(err, len, &n, "profile: at least one call builder must be enabled\n");
  for (size_t i = 0; i < WK_PROFILE_NAMES_MAX && p->builders[i]; i++) {
    if (!wk_builder_find_builtin(p->builders[i])) {
      add(err, len, &n, "profile: no call builder named '%s' (known: single, map, range)\n",
          p->builders[i]);
    }
  }
  for (size_t i = 0; i < WK_PROFILE_NAMES_MAX && p->plugins[i]; i++) {
    if (!wk_writer_find(p->plugins[i])) {
      add(err, len, &n, "profile: no writer plugin named '%s' (known: %s)\n", p->plugins[i],
          wk_writer_names());
    }
  }
  return n;
}

/* wk_alloc.c: see wk_alloc.h. */
#include "lib/wk_alloc.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

void *wk_xmalloc(size_t size) {
  void *p = malloc(size ? size : 1);
  if (!p) abort();
  return p;
}

void *wk_xcalloc(size_t count, size_t size) {
  if (count == 0 || size == 0) count = size = 1;
  if (count > SIZE_MAX / size) abort();
  void *p = calloc(count, size);
  if (!p) abort();
  return p;
}

void *wk_xrealloc(void *ptr, size_t size) {
  void *p = realloc(ptr, size ? size : 1);
  if (!p) abort();
  return p;
}

char *wk_xstrdup(const char *s) { return wk_xmemdup(s, strlen(s) + 1); }

char *wk_xstrndup(const char *s, size_t n) {
  const char *nul = memchr(s, '\0', n);
  size_t len = nul ? (size_t)(nul - s) : n;
  char *d = wk_xmalloc(len + 1);
  memcpy(d, s, len);
  d[len] = '\0';
  return d;
}

void *wk_xmemdup(const void *p, size_t n) {
  void *d = wk_xmalloc(n);
  if (n) memcpy(d, p, n);
  return d;
}

void *wk_allocator_calloc(const wk_allocator *a, size_t count, size_t size) {
  if (count == 0 || size == 0) return NULL;
  if (count > SIZE_MAX / size) abort();
  size_t total = count * size;
  if (!(a && a->alloc)) {
    /* calloc, not malloc + memset: a large table comes zeroed from fresh pages that stay
     * untouched (no resident memory) until used */
    void *z = calloc(count, size);
    if (!z) abort();
    return z;
  }
  void *p = a->alloc(a->ud, total);
  if (!p) abort();
  memset(p, 0, total);
  return p;
}

void *wk_allocator_memdup(const wk_allocator *a, const void *p, size_t n) {
  if (n == 0) return NULL;
  void *d = (a && a->alloc) ? a->alloc(a->ud, n) : malloc(n);
  if (!d) abort();
  memcpy(d, p, n);
  return d;
}

void wk_allocator_free(const wk_allocator *a, void *ptr, size_t size) {
  if (!ptr) return;
  if (a && a->free) {
    a->free(a->ud, ptr, size);
  } else {
    free(ptr);
  }
}

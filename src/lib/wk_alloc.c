#include "lib/wk_alloc.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

void *wk_xcalloc(const wk_allocator *a, size_t count, size_t size) {
  if (count == 0 || size == 0) return NULL;
  if (count > SIZE_MAX / size) abort();
  size_t total = count * size;
  void *p = (a && a->alloc) ? a->alloc(a->ud, total) : malloc(total);
  if (!p) abort();
  memset(p, 0, total);
  return p;
}

void wk_xfree(const wk_allocator *a, void *ptr, size_t size) {
  if (!ptr) return;
  if (a && a->free) {
    a->free(a->ud, ptr, size);
  } else {
    free(ptr);
  }
}

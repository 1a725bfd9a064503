/* wk_alloc.h: allocation through caller-supplied hooks; out of memory aborts. */
#ifndef WK_ALLOC_H
#define WK_ALLOC_H

#include <stddef.h>

/* Memory hooks; NULL alloc/free mean malloc/free. `ud` is passed through. */
typedef struct wk_allocator {
  void *(*alloc)(void *ud, size_t size);
  void (*free)(void *ud, void *ptr, size_t size);
  void *ud;
} wk_allocator;

/** Allocates `size` bytes (zeroed) through `a`; aborts the process when memory is
 * exhausted, so callers never check. size 0 returns NULL. */
void *wk_xcalloc(const wk_allocator *a, size_t count, size_t size);

/** Frees `ptr` of `size` bytes allocated by wk_xcalloc(a, ...); NULL is a no-op. */
void wk_xfree(const wk_allocator *a, void *ptr, size_t size);

#endif

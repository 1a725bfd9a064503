/* wk_alloc.h: the one allocation family. Out of memory aborts the process, so callers
 * never check for NULL. Two flavours:
 *  - wk_x*: the C library heap (malloc/free), for adapters, app, plugins and cmd;
 *  - wk_allocator_*: through caller-supplied hooks, for the cores and the frame codec,
 *    whose owners may account for or replace the memory. */
#ifndef WK_ALLOC_H
#define WK_ALLOC_H

#include <stddef.h>

/** Allocates `size` bytes (uninitialised); release with free(). Never returns NULL: size 0
 * allocates 1 byte, and out of memory aborts the process. */
void *wk_xmalloc(size_t size);

/** Allocates `count` * `size` zeroed bytes; release with free(). Never returns NULL: a zero
 * count or size allocates 1 byte; out of memory or an overflowing product aborts. */
void *wk_xcalloc(size_t count, size_t size);

/** Resizes `ptr` (NULL: allocates) to `size` bytes like realloc(), keeping the contents;
 * the old pointer must no longer be used. Never returns NULL: size 0 keeps 1 byte, and out
 * of memory aborts the process. */
void *wk_xrealloc(void *ptr, size_t size);

/** Copies the NUL-terminated `s` into a new string; release with free(). Aborts when out
 * of memory. */
char *wk_xstrdup(const char *s);

/** Copies at most `n` bytes of `s` (stopping at a NUL) into a new NUL-terminated string;
 * release with free(). Aborts when out of memory. */
char *wk_xstrndup(const char *s, size_t n);

/** Copies the `n` bytes at `p` into a new buffer (1 byte when n is 0); release with free().
 * Aborts when out of memory. */
void *wk_xmemdup(const void *p, size_t n);

/* Memory hooks; NULL alloc/free mean malloc/free. `ud` is passed through. */
typedef struct wk_allocator {
  void *(*alloc)(void *ud, size_t size);
  void (*free)(void *ud, void *ptr, size_t size);
  void *ud;
} wk_allocator;

/** Allocates `count` * `size` bytes (zeroed) through `a` (NULL: malloc); aborts the process
 * when memory is exhausted or the product overflows, so callers never check. A zero count
 * or size returns NULL. Release with wk_allocator_free(a, ptr, count * size). */
void *wk_allocator_calloc(const wk_allocator *a, size_t count, size_t size);

/** Copies the `n` bytes at `p` into memory from `a` (NULL: malloc), not zeroed first: for
 * byte buffers every byte of which is written at once (a 64 KiB output is not cleared
 * only to be overwritten). Aborts when memory is exhausted; n == 0 returns NULL. Release
 * with wk_allocator_free(a, ptr, n). */
void *wk_allocator_memdup(const wk_allocator *a, const void *p, size_t n);

/** Frees `ptr` of `size` bytes allocated by wk_allocator_calloc(a, ...) or
 * wk_allocator_memdup; NULL is a no-op. */
void wk_allocator_free(const wk_allocator *a, void *ptr, size_t size);

#endif

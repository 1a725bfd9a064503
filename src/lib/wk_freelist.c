/* wk_freelist.c: see wk_freelist.h. */
#include "lib/wk_freelist.h"

#include <stdlib.h>
#include <string.h>

#include "lib/wk_alloc.h"
#include "lib/wk_assert.h"

#if defined(__SANITIZE_ADDRESS__)
#define WK_FREELIST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define WK_FREELIST_ASAN 1
#endif
#endif

#ifdef WK_FREELIST_ASAN
#include <sanitizer/asan_interface.h>
#define POISON(p, n) ASAN_POISON_MEMORY_REGION((p), (n))
#define UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION((p), (n))
#else
#define POISON(p, n) ((void)(p), (void)(n))
#define UNPOISON(p, n) ((void)(p), (void)(n))
#endif

void wk_freelist_init(wk_freelist *f, size_t size, uint32_t max) {
  *f = (wk_freelist){.size = size < sizeof(void *) ? sizeof(void *) : size, .max = max};
}

void *wk_freelist_take(wk_freelist *f) {
  void *p = f->head;
  if (!p) return wk_xmalloc(f->size);
  UNPOISON(p, f->size);
  memcpy(&f->head, p, sizeof f->head);
  f->count--;
  f->reused++;
  return p;
}

void *wk_freelist_calloc(wk_freelist *f) {
  if (!f->head) return wk_xcalloc(1, f->size);
  void *p = wk_freelist_take(f);
  memset(p, 0, f->size);
  return p;
}

void wk_freelist_put(wk_freelist *f, void *p) {
  if (!p) return;
  if (f->count >= f->max) {
    free(p);
    return;
  }
  WK_ASSERT(p != f->head); /* given back twice in a row */
  memcpy(p, &f->head, sizeof f->head);
  POISON(p, f->size);
  f->head = p;
  f->count++;
}

void wk_freelist_drain(wk_freelist *f) {
  while (f->head) {
    void *p = f->head;
    UNPOISON(p, f->size);
    memcpy(&f->head, p, sizeof f->head);
    free(p);
  }
  f->count = 0;
}

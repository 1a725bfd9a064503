#include "lib/wk_shared.h"

#include <stdlib.h>
#include <string.h>

#include "lib/wk_alloc.h"
#include "lib/wk_assert.h"

wk_shared *wk_shared_take(wk_buf *buf) {
  wk_shared *s = wk_xcalloc(1, sizeof *s);
  atomic_init(&s->refs, 1);
  s->len = buf->len;
  s->data = buf->data != NULL ? buf->data : wk_xmalloc(1);
  buf->data = NULL;
  buf->len = 0;
  buf->cap = 0;
  return s;
}

wk_shared *wk_shared_copy(const void *data, size_t len) {
  wk_shared *s = wk_xcalloc(1, sizeof *s);
  atomic_init(&s->refs, 1);
  s->len = len;
  s->data = wk_xmemdup(data, len);
  return s;
}

wk_shared *wk_shared_ref(wk_shared *s) {
  size_t before = atomic_fetch_add_explicit(&s->refs, 1, memory_order_relaxed);
  WK_ASSERT(before > 0);
  (void)before;
  return s;
}

void wk_shared_unref(wk_shared *s) {
  if (s == NULL) return;
  size_t before = atomic_fetch_sub_explicit(&s->refs, 1, memory_order_acq_rel);
  WK_ASSERT(before > 0);
  if (before != 1) return;
  WK_ASSERT(s->held == 0);
  free(s->data);
  free(s);
}

size_t wk_shared_refs(const wk_shared *s) {
  return atomic_load_explicit(&s->refs, memory_order_acquire);
}

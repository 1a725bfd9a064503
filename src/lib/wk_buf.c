#include "lib/wk_buf.h"

#include <stdlib.h>
#include <string.h>

#include "lib/wk_alloc.h"

uint8_t *wk_buf__grow(wk_buf *b, size_t n) {
  /* only wk_buf_reserve calls it, when the room is short */
  size_t cap = b->cap ? b->cap : 256;
  while (cap - b->len < n) cap *= 2;
  b->data = wk_xrealloc(b->data, cap);
  b->cap = cap;
  return b->data + b->len;
}

uint8_t *wk_buf_reserve_exact(wk_buf *b, size_t n) {
  if (b->cap - b->len < n) {
    b->data = wk_xrealloc(b->data, b->len + n);
    b->cap = b->len + n;
  }
  return b->data + b->len;
}

void wk_buf_append(wk_buf *b, const void *p, size_t n) {
  if (n == 0) return;
  memcpy(wk_buf_reserve(b, n), p, n);
  b->len += n;
}

size_t wk_varint_put(uint8_t *p, uint64_t v) {
  size_t n = 0;
  while (v >= 0x80) {
    p[n++] = (uint8_t)(v | 0x80);
    v >>= 7;
  }
  p[n++] = (uint8_t)v;
  return n;
}

void wk_buf_append_varint(wk_buf *b, uint64_t v) {
  b->len += wk_varint_put(wk_buf_reserve(b, 10), v);
}

void wk_buf_free(wk_buf *b) {
  free(b->data);
  b->data = NULL;
  b->len = b->cap = 0;
}

/* wk_buf.h: a growable byte buffer for building messages. Out of memory aborts. */
#ifndef WK_BUF_H
#define WK_BUF_H

#include <stddef.h>
#include <stdint.h>

typedef struct wk_buf {
  uint8_t *data;
  size_t len;
  size_t cap;
} wk_buf;

/** wk_buf_reserve's growing half (not to be called directly). */
uint8_t *wk_buf__grow(wk_buf *b, size_t n);
/** Makes room for `n` more bytes; returns where they go (len unchanged). Inline: the
 * buffers of a hot path (records, encodings) almost always have the room already. */
static inline uint8_t *wk_buf_reserve(wk_buf *b, size_t n) {
  if (b->cap - b->len >= n) return b->data + b->len;
  return wk_buf__grow(b, n);
}
/** As wk_buf_reserve, but a buffer that must grow gets room for exactly `n` more
 * bytes (no doubling): for a buffer filled once and then kept. */
uint8_t *wk_buf_reserve_exact(wk_buf *b, size_t n);
/** Appends `n` bytes. */
void wk_buf_append(wk_buf *b, const void *p, size_t n);
/** Writes v as a base-128 varint at p (room for 10 bytes); returns its length. */
size_t wk_varint_put(uint8_t *p, uint64_t v);
/** Appends a base-128 varint. */
void wk_buf_append_varint(wk_buf *b, uint64_t v);
/** Empties the buffer, keeping its memory. */
static inline void wk_buf_clear(wk_buf *b) { b->len = 0; }
/** Frees the memory; the buffer is empty and reusable afterwards. */
void wk_buf_free(wk_buf *b);

#endif

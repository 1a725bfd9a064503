/* wk_shared.h: an immutable, reference-counted byte buffer, shared between threads.
 *
 * An encoded event that goes to many WatchTasks streams is built once into a wk_shared
 * and every stream (and gRPC's slices over it) holds a reference instead of a copy.
 * The bytes never change after creation; the count is atomic, so references may be
 * taken and dropped on any thread. `held` is not the lifetime count: it belongs to
 * wk_send_budget (how many stream queues count the buffer as unsent) and is read and
 * written only under that budget's lock. */
#ifndef WK_SHARED_H
#define WK_SHARED_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "lib/wk_buf.h"

typedef struct wk_shared {
  atomic_size_t refs;
  size_t len;
  uint32_t held; /* wk_send_budget's: stream queues charging these bytes */
  uint8_t *data;
} wk_shared;

/** A buffer holding the bytes of `buf` (taken, not copied: `buf` is left empty and
 * reusable), with one reference for the caller. Aborts when out of memory. */
wk_shared *wk_shared_take(wk_buf *buf);
/** A buffer holding a copy of the `len` bytes at `data`, one reference for the caller. */
wk_shared *wk_shared_copy(const void *data, size_t len);
/** Takes one more reference; returns `s`. */
wk_shared *wk_shared_ref(wk_shared *s);
/** Drops one reference; the last frees the buffer. NULL is a no-op. */
void wk_shared_unref(wk_shared *s);
/** The current number of references (a snapshot: others may change it at once). */
size_t wk_shared_refs(const wk_shared *s);

#endif

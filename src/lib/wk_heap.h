/* wk_heap.h: an indexed binary min-heap of small integer handles keyed by int64.
 *
 * Each handle (0..capacity-1) is in the heap at most once; its position is tracked
 * so that update and removal are O(log n). Used for timers: lease expiries, task
 * deadlines, watch grace. The heap owns its arrays; the caller owns the struct. */
#ifndef WK_HEAP_H
#define WK_HEAP_H

#include <stdbool.h>
#include <stdint.h>

#include "lib/wk_alloc.h"

#define WK_HEAP_ABSENT UINT32_MAX

typedef struct wk_heap {
  uint32_t *order; /* handles in heap order, size entries */
  uint32_t *pos;   /* pos[handle] = index into order, or WK_HEAP_ABSENT */
  int64_t *key;    /* key[handle] */
  int64_t *okey;   /* okey[i] == key[order[i]]: sifts compare neighbours in one array */
  uint32_t size;
  uint32_t capacity;
} wk_heap;

/** Allocates arrays for `capacity` handles through `a`; the heap starts empty. */
void wk_heap_init(wk_heap *h, uint32_t capacity, const wk_allocator *a);
/** Frees the arrays (same allocator as init). */
void wk_heap_free(wk_heap *h, const wk_allocator *a);

/** Inserts `handle` with `key`, or moves it to `key` when already present. */
void wk_heap_set(wk_heap *h, uint32_t handle, int64_t key);
/** Removes `handle`; a no-op when absent. */
void wk_heap_remove(wk_heap *h, uint32_t handle);

static inline bool wk_heap_contains(const wk_heap *h, uint32_t handle) {
  return h->pos[handle] != WK_HEAP_ABSENT;
}
static inline bool wk_heap_empty(const wk_heap *h) { return h->size == 0; }
/** The handle with the smallest key; the heap must not be empty. */
static inline uint32_t wk_heap_top(const wk_heap *h) { return h->order[0]; }
static inline int64_t wk_heap_top_key(const wk_heap *h) { return h->okey[0]; }

#define WK_HEAP_COLLECT_MAX 256u

/** Copies up to `max` (at most WK_HEAP_COLLECT_MAX) handles whose key <= `limit` into
 * `out`, smallest keys first, without changing the heap; returns how many. Cost
 * O(k log k) for k results. */
uint32_t wk_heap_collect_le(const wk_heap *h, int64_t limit, uint32_t *out, uint32_t max);

/** Checks the heap property and the position index; returns NULL or a description. */
const char *wk_heap_check(const wk_heap *h);

#endif

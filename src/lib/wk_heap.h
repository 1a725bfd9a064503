/* wk_heap.h: an indexed min-priority queue of small integer handles keyed by int64,
 * for timers (lease expiries, task deadlines, watch grace, call retries).
 *
 * Each handle (0..capacity-1) is present at most once; its position is tracked so
 * that update and removal never search. A queue made by wk_heap_init is a 4-ary heap;
 * one made by wk_heap_init_with_run has two parts:
 *
 * - the run: a ring of entries in non-decreasing key order. A key no smaller than
 *   the run's last one is appended; removal leaves a hole (skipped, and dropped once
 *   it reaches either end: O(1) amortized, a removal at the front may drop many).
 *   Timers mostly arrive in deadline order (now + the same duration), and then
 *   insert and remove touch one or two cache lines whatever the size, where a heap
 *   walks (and at scale misses on) a path of levels.
 * - a 4-ary heap for every other key (out of order, or the run is full), whose four
 *   children share a 64-byte line: O(log n).
 *
 * The smallest key is the smaller of the run's first and the heap's top. Equal keys
 * come out in no promised order (with a run, mostly first in, first out). The queue
 * owns its arrays; the caller owns the struct. */
#ifndef WK_HEAP_H
#define WK_HEAP_H

#include <stdbool.h>
#include <stdint.h>

#include "lib/wk_alloc.h"

#define WK_HEAP_ABSENT UINT32_MAX
#define WK_HEAP_IN_RUN 0x80000000u /* pos flag: the low bits are a run slot */
#define WK_HEAP_CAPACITY_MAX 0x7fffffffu

typedef struct wk_heap_entry {
  int64_t key;
  uint32_t handle; /* WK_HEAP_ABSENT for a hole in the run */
  uint32_t unused_;
} wk_heap_entry;

typedef struct wk_heap {
  wk_heap_entry *ent; /* the heap part, heap_size entries: children of i are 4i+1 .. 4i+4 */
  wk_heap_entry *run; /* the run: a ring of capacity slots, run_len used from run_head;
                         NULL without one */
  uint32_t *pos;      /* per handle, complemented (~p: zeroed memory reads ABSENT, so the
                    array stays untouched, costing no RSS, until used): heap index,
                    WK_HEAP_IN_RUN | run slot, or ABSENT */
  void *mem;          /* the allocation behind ent (aligned inside it) */
  uint32_t size;      /* handles present, both parts */
  uint32_t capacity;
  uint32_t heap_size;
  uint32_t run_head, run_len, run_live; /* run_len counts holes, run_live does not */
} wk_heap;

/** Allocates arrays for `capacity` (1..WK_HEAP_CAPACITY_MAX) handles through `a`; the
 * queue starts empty and is a heap only (20 bytes per handle). */
void wk_heap_init(wk_heap *h, uint32_t capacity, const wk_allocator *a);
/** Like wk_heap_init, with a sorted run in front of the heap (36 bytes per handle):
 * for keys that mostly arrive in order. */
void wk_heap_init_with_run(wk_heap *h, uint32_t capacity, const wk_allocator *a);
/** Frees the arrays (same allocator as init). */
void wk_heap_free(wk_heap *h, const wk_allocator *a);

/** Inserts `handle` with `key`, or moves it to `key` when already present. */
void wk_heap_set(wk_heap *h, uint32_t handle, int64_t key);
/** Removes `handle`; a no-op when absent. */
void wk_heap_remove(wk_heap *h, uint32_t handle);

/* The position of `handle` (pos[] holds it complemented). */
static inline uint32_t wk_heap_pos_(const wk_heap *h, uint32_t handle) { return ~h->pos[handle]; }

static inline bool wk_heap_contains(const wk_heap *h, uint32_t handle) {
  return wk_heap_pos_(h, handle) != WK_HEAP_ABSENT;
}
static inline bool wk_heap_empty(const wk_heap *h) { return h->size == 0; }

/* The entry with the smallest key; the queue must not be empty. */
static inline const wk_heap_entry *wk_heap_min_(const wk_heap *h) {
  if (h->run_live == 0) return &h->ent[0];
  const wk_heap_entry *first = &h->run[h->run_head]; /* never a hole */
  if (h->heap_size == 0 || first->key <= h->ent[0].key) return first;
  return &h->ent[0];
}
/** The handle with the smallest key; the queue must not be empty. */
static inline uint32_t wk_heap_top(const wk_heap *h) { return wk_heap_min_(h)->handle; }
/** The smallest key; the queue must not be empty. */
static inline int64_t wk_heap_top_key(const wk_heap *h) { return wk_heap_min_(h)->key; }
/** The key of `handle`, which must be present. */
static inline int64_t wk_heap_key(const wk_heap *h, uint32_t handle) {
  uint32_t p = wk_heap_pos_(h, handle);
  return (p & WK_HEAP_IN_RUN) ? h->run[p & ~WK_HEAP_IN_RUN].key : h->ent[p].key;
}

/** Visits every present handle once, in no particular order: start with *cursor = 0
 * and call while it returns true (the handle in *handle). Any change to the queue
 * ends the walk. */
bool wk_heap_walk(const wk_heap *h, uint32_t *cursor, uint32_t *handle);

#define WK_HEAP_COLLECT_MAX 256u

/** Copies up to `max` (at most WK_HEAP_COLLECT_MAX) handles whose key <= `limit` into
 * `out`, smallest keys first, without changing the queue; returns how many. Cost
 * O(k log k) for k results, plus the holes the run skips among them. */
uint32_t wk_heap_collect_le(const wk_heap *h, int64_t limit, uint32_t *out, uint32_t max);

/** Checks the order of both parts and the position index; returns NULL or a description. */
const char *wk_heap_check(const wk_heap *h);

#endif

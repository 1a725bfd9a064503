/* wk_arena.h: a bump allocator for objects that all die together, such as a request
 * message decoded into many small pieces (strings, arrays, sub-messages) that lives
 * exactly as long as its RPC: one block from malloc for all of them, and one free.
 *
 * Blocks come from malloc as they are needed: the first of at least the size the owner
 * expects (wk_arena_init's hint), each later one twice the previous or the request,
 * whichever is larger, so n bytes take O(log n) blocks and at most about twice n.
 * Nothing is freed before wk_arena_release. Not thread-safe: one owner at a time (the
 * owner may change threads, with the usual hand-off of its memory). */
#ifndef WK_ARENA_H
#define WK_ARENA_H

#include <stddef.h>

typedef struct wk_arena_block wk_arena_block;

typedef struct wk_arena {
  wk_arena_block *blocks; /* newest first; NULL before the first allocation */
  size_t first;           /* the first block's usable size (the hint) */
  size_t held;            /* usable bytes of every block, for figures and tests */
} wk_arena;

/** An empty arena whose first block will hold at least `hint` bytes (0: a small
 * default). Allocates nothing yet. */
void wk_arena_init(wk_arena *a, size_t hint);

/** `n` bytes (n == 0 counts as 1) aligned for any type, uninitialised, valid until
 * wk_arena_release. Aborts when out of memory, like wk_xmalloc. */
void *wk_arena_alloc(wk_arena *a, size_t n);

/** Frees every block; the arena is empty again (and may be used again). */
void wk_arena_release(wk_arena *a);

#endif

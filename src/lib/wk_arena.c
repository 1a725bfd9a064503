#include "lib/wk_arena.h"

#include <stdalign.h>
#include <stdint.h>
#include <stdlib.h>

#include "lib/wk_alloc.h"
#include "lib/wk_assert.h"

enum { ALIGN = alignof(max_align_t), DEFAULT_FIRST = 512 };

struct wk_arena_block {
  wk_arena_block *next; /* the older block */
  size_t size, used;    /* usable bytes after the header, and how many are handed out */
  alignas(max_align_t) unsigned char data[];
};

void wk_arena_init(wk_arena *a, size_t hint) {
  WK_ASSERT(a != NULL);
  a->blocks = NULL;
  a->first = hint ? hint : DEFAULT_FIRST;
  a->held = 0;
}

/* A new block of at least `need` usable bytes, in front of the others. */
static wk_arena_block *grow(wk_arena *a, size_t need) {
  size_t size = a->blocks ? a->blocks->size * 2 : a->first;
  if (size < need) size = need;
  if (size > SIZE_MAX - sizeof(wk_arena_block)) abort();
  wk_arena_block *b = wk_xmalloc(sizeof *b + size);
  b->next = a->blocks;
  b->size = size;
  b->used = 0;
  a->blocks = b;
  a->held += size;
  return b;
}

void *wk_arena_alloc(wk_arena *a, size_t n) {
  WK_ASSERT(a != NULL);
  if (n == 0) n = 1;
  if (n > SIZE_MAX - ALIGN) abort();
  n = (n + ALIGN - 1) & ~(size_t)(ALIGN - 1);
  wk_arena_block *b = a->blocks;
  if (b == NULL || b->size - b->used < n) b = grow(a, n);
  void *p = b->data + b->used;
  b->used += n;
  return p;
}

void wk_arena_release(wk_arena *a) {
  WK_ASSERT(a != NULL);
  wk_arena_block *b = a->blocks;
  while (b != NULL) {
    wk_arena_block *next = b->next;
    free(b);
    b = next;
  }
  a->blocks = NULL;
  a->held = 0;
}

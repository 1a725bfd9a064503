#include "lib/wk_heap.h"

#include <assert.h>

void wk_heap_init(wk_heap *h, uint32_t capacity, const wk_allocator *a) {
  assert(capacity > 0);
  h->order = wk_xcalloc(a, capacity, sizeof *h->order);
  h->pos = wk_xcalloc(a, capacity, sizeof *h->pos);
  h->key = wk_xcalloc(a, capacity, sizeof *h->key);
  h->okey = wk_xcalloc(a, capacity, sizeof *h->okey);
  for (uint32_t i = 0; i < capacity; i++) h->pos[i] = WK_HEAP_ABSENT;
  h->size = 0;
  h->capacity = capacity;
}

void wk_heap_free(wk_heap *h, const wk_allocator *a) {
  wk_xfree(a, h->order, (size_t)h->capacity * sizeof *h->order);
  wk_xfree(a, h->pos, (size_t)h->capacity * sizeof *h->pos);
  wk_xfree(a, h->key, (size_t)h->capacity * sizeof *h->key);
  wk_xfree(a, h->okey, (size_t)h->capacity * sizeof *h->okey);
  h->order = h->pos = NULL;
  h->key = h->okey = NULL;
  h->size = h->capacity = 0;
}

static void place(wk_heap *h, uint32_t i, uint32_t handle, int64_t key) {
  h->order[i] = handle;
  h->okey[i] = key;
  h->pos[handle] = i;
}

static void sift_up(wk_heap *h, uint32_t i) {
  uint32_t handle = h->order[i];
  int64_t k = h->okey[i];
  while (i > 0) {
    uint32_t parent = (i - 1) / 2;
    if (h->okey[parent] <= k) break;
    place(h, i, h->order[parent], h->okey[parent]);
    i = parent;
  }
  place(h, i, handle, k);
}

static void sift_down(wk_heap *h, uint32_t i) {
  uint32_t handle = h->order[i];
  int64_t k = h->okey[i];
  for (;;) {
    uint32_t child = 2 * i + 1;
    if (child >= h->size) break;
    if (child + 1 < h->size && h->okey[child + 1] < h->okey[child]) child++;
    if (h->okey[child] >= k) break;
    place(h, i, h->order[child], h->okey[child]);
    i = child;
  }
  place(h, i, handle, k);
}

void wk_heap_set(wk_heap *h, uint32_t handle, int64_t key) {
  assert(handle < h->capacity);
  uint32_t i = h->pos[handle];
  if (i == WK_HEAP_ABSENT) {
    assert(h->size < h->capacity);
    h->key[handle] = key;
    place(h, h->size, handle, key);
    h->size++;
    sift_up(h, h->size - 1);
    return;
  }
  int64_t old = h->key[handle];
  h->key[handle] = key;
  h->okey[i] = key;
  if (key < old) {
    sift_up(h, i);
  } else if (key > old) {
    sift_down(h, i);
  }
}

void wk_heap_remove(wk_heap *h, uint32_t handle) {
  assert(handle < h->capacity);
  uint32_t i = h->pos[handle];
  if (i == WK_HEAP_ABSENT) return;
  h->pos[handle] = WK_HEAP_ABSENT;
  h->size--;
  if (i == h->size) return;
  place(h, i, h->order[h->size], h->okey[h->size]);
  /* the moved element may need to go either way */
  if (i > 0 && h->okey[i] < h->okey[(i - 1) / 2]) {
    sift_up(h, i);
  } else {
    sift_down(h, i);
  }
}

/* A best-first walk: a small min-heap of candidate positions (children of what was
 * taken), so results come out smallest key first and a cut at `max` keeps the
 * smallest. Each take adds at most two candidates: the frontier stays <= max + 1. */
uint32_t wk_heap_collect_le(const wk_heap *h, int64_t limit, uint32_t *out, uint32_t max) {
  uint32_t frontier[2 * WK_HEAP_COLLECT_MAX + 2];
  if (max > WK_HEAP_COLLECT_MAX) max = WK_HEAP_COLLECT_MAX;
  if (max == 0 || h->size == 0 || h->okey[0] > limit) return 0;
  uint32_t nf = 0, n = 0;
  frontier[nf++] = 0;
  while (nf > 0 && n < max) {
    /* pop the candidate with the smallest key (sift down in `frontier`) */
    uint32_t best = frontier[0];
    frontier[0] = frontier[--nf];
    for (uint32_t i = 0;;) {
      uint32_t c = 2 * i + 1, m = i;
      if (c < nf && h->okey[frontier[c]] < h->okey[frontier[m]]) m = c;
      if (c + 1 < nf && h->okey[frontier[c + 1]] < h->okey[frontier[m]]) m = c + 1;
      if (m == i) break;
      uint32_t t = frontier[i];
      frontier[i] = frontier[m];
      frontier[m] = t;
      i = m;
    }
    out[n++] = h->order[best];
    for (uint32_t c = 2 * best + 1; c <= 2 * best + 2 && c < h->size; c++) {
      if (h->okey[c] > limit) continue;
      /* push (sift up in `frontier`) */
      uint32_t i = nf++;
      frontier[i] = c;
      while (i > 0 && h->okey[frontier[(i - 1) / 2]] > h->okey[frontier[i]]) {
        uint32_t p = (i - 1) / 2, t = frontier[p];
        frontier[p] = frontier[i];
        frontier[i] = t;
        i = p;
      }
    }
  }
  return n;
}

const char *wk_heap_check(const wk_heap *h) {
  if (h->size > h->capacity) return "heap: size over capacity";
  uint32_t present = 0;
  for (uint32_t handle = 0; handle < h->capacity; handle++) {
    uint32_t p = h->pos[handle];
    if (p == WK_HEAP_ABSENT) continue;
    present++;
    if (p >= h->size || h->order[p] != handle) return "heap: position index disagrees with order";
    if (h->okey[p] != h->key[handle]) return "heap: ordered key copy disagrees with the key";
  }
  if (present != h->size) return "heap: position index counts differ from size";
  for (uint32_t i = 1; i < h->size; i++) {
    if (h->okey[(i - 1) / 2] > h->okey[i]) return "heap: order property broken";
  }
  return NULL;
}

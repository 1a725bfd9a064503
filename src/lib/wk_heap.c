/* wk_heap.c: the timer queue of wk_heap.h: a sorted run (ring) for keys that arrive in
 * order, a 4-ary heap for the rest. */
#include "lib/wk_heap.h"

#include "lib/wk_assert.h"

#define ARITY 4u
#define LINE 64u
/* ent[0] sits PAD entries before a line boundary, so that every group of siblings
 * 4i+1 .. 4i+4 starts on one */
#define PAD (ARITY - 1u)

/* ---- memory ------------------------------------------------------------------ */

/* The heap part, aligned (up to LINE - 1 bytes go to alignment), then the run if any. */
static size_t mem_bytes(uint32_t capacity, bool with_run) {
  return ((size_t)capacity + PAD) * sizeof(wk_heap_entry) + LINE +
         (with_run ? (size_t)capacity * sizeof(wk_heap_entry) : 0u);
}

static void init(wk_heap *h, uint32_t capacity, bool with_run, const wk_allocator *a) {
  WK_ASSERT(capacity > 0 && capacity <= WK_HEAP_CAPACITY_MAX);
  h->mem = wk_allocator_calloc(a, 1, mem_bytes(capacity, with_run));
  uintptr_t base = ((uintptr_t)h->mem + (LINE - 1u)) & ~(uintptr_t)(LINE - 1u);
  h->ent = (wk_heap_entry *)base + PAD; /* &ent[1] is line-aligned */
  h->run = with_run ? h->ent + capacity : NULL;
  WK_ASSERT((uintptr_t)(h->ent + capacity) + (with_run ? capacity * sizeof(wk_heap_entry) : 0u) <=
            (uintptr_t)h->mem + mem_bytes(capacity, with_run));
  h->pos = wk_allocator_calloc(a, capacity, sizeof *h->pos); /* zeroed: every handle ABSENT */
  h->size = h->heap_size = 0;
  h->run_head = h->run_len = h->run_live = 0;
  h->capacity = capacity;
}

void wk_heap_init(wk_heap *h, uint32_t capacity, const wk_allocator *a) {
  init(h, capacity, false, a);
}

void wk_heap_init_with_run(wk_heap *h, uint32_t capacity, const wk_allocator *a) {
  init(h, capacity, true, a);
}

void wk_heap_free(wk_heap *h, const wk_allocator *a) {
  wk_allocator_free(a, h->mem, mem_bytes(h->capacity, h->run != NULL));
  wk_allocator_free(a, h->pos, (size_t)h->capacity * sizeof *h->pos);
  h->mem = NULL;
  h->ent = h->run = NULL;
  h->pos = NULL;
  h->size = h->capacity = h->heap_size = 0;
  h->run_head = h->run_len = h->run_live = 0;
}

/* ---- the run ------------------------------------------------------------------ */

/* The ring slot `k` places after the run's first. */
static uint32_t run_slot(const wk_heap *h, uint32_t k) {
  uint32_t s = h->run_head + k;
  return s >= h->capacity ? s - h->capacity : s;
}

static void set_pos(wk_heap *h, uint32_t handle, uint32_t p) { h->pos[handle] = ~p; }

static bool run_takes(const wk_heap *h, int64_t key) {
  if (h->run == NULL) return false;
  if (h->run_len == 0) return true;
  return h->run_len < h->capacity && key >= h->run[run_slot(h, h->run_len - 1)].key;
}

static void run_append(wk_heap *h, uint32_t handle, int64_t key) {
  WK_ASSERT(h->run_len < h->capacity);
  WK_DEBUG_ASSERT(h->run_len == 0 || h->run[run_slot(h, h->run_len - 1)].key <= key);
  uint32_t s = run_slot(h, h->run_len);
  h->run[s] = (wk_heap_entry){.key = key, .handle = handle};
  set_pos(h, handle, WK_HEAP_IN_RUN | s);
  h->run_len++;
  h->run_live++;
}

/* Leaves a hole at slot s; holes at either end are dropped. */
static void run_remove(wk_heap *h, uint32_t s) {
  WK_ASSERT(h->run[s].handle != WK_HEAP_ABSENT);
  h->run[s].handle = WK_HEAP_ABSENT; /* the key stays: it still orders what is appended */
  h->run_live--;
  if (h->run_live == 0) {
    h->run_head = h->run_len = 0;
    return;
  }
  while (h->run[h->run_head].handle == WK_HEAP_ABSENT) {
    h->run_head = h->run_head + 1 == h->capacity ? 0 : h->run_head + 1;
    h->run_len--;
  }
  while (h->run[run_slot(h, h->run_len - 1)].handle == WK_HEAP_ABSENT) h->run_len--;
}

/* ---- the heap ------------------------------------------------------------------ */

static void place(wk_heap *h, uint32_t i, wk_heap_entry e) {
  h->ent[i] = e;
  set_pos(h, e.handle, i);
}

/* Whether the entry at i sits in heap order with its parent and its children (a debug
 * check: it reads up to five more entries). */
static bool ordered_at(const wk_heap *h, uint32_t i) {
  if (i > 0 && h->ent[(i - 1) / ARITY].key > h->ent[i].key) return false;
  for (uint32_t c = ARITY * i + 1; c <= ARITY * i + ARITY && c < h->heap_size; c++) {
    if (h->ent[c].key < h->ent[i].key) return false;
  }
  return true;
}

static void sift_up(wk_heap *h, uint32_t i) {
  wk_heap_entry e = h->ent[i];
  while (i > 0) {
    uint32_t parent = (i - 1) / ARITY;
    if (h->ent[parent].key <= e.key) break;
    place(h, i, h->ent[parent]);
    i = parent;
  }
  place(h, i, e);
  WK_DEBUG_ASSERT(ordered_at(h, i));
}

static void sift_down(wk_heap *h, uint32_t i) {
  wk_heap_entry e = h->ent[i];
  for (;;) {
    uint32_t first = ARITY * i + 1;
    if (first >= h->heap_size) break;
    uint32_t end = first + ARITY < h->heap_size ? first + ARITY : h->heap_size;
    uint32_t best = first;
    for (uint32_t c = first + 1; c < end; c++) {
      if (h->ent[c].key < h->ent[best].key) best = c;
    }
    if (h->ent[best].key >= e.key) break;
    place(h, i, h->ent[best]);
    i = best;
  }
  place(h, i, e);
  WK_DEBUG_ASSERT(ordered_at(h, i));
}

static void heap_remove(wk_heap *h, uint32_t i) {
  h->heap_size--;
  if (i == h->heap_size) return;
  place(h, i, h->ent[h->heap_size]);
  /* the moved element may need to go either way */
  if (i > 0 && h->ent[i].key < h->ent[(i - 1) / ARITY].key) {
    sift_up(h, i);
  } else {
    sift_down(h, i);
  }
}

/* ---- both ---------------------------------------------------------------------- */

static void insert(wk_heap *h, uint32_t handle, int64_t key) {
  WK_ASSERT(h->size < h->capacity);
  h->size++;
  if (run_takes(h, key)) {
    run_append(h, handle, key);
    return;
  }
  place(h, h->heap_size, (wk_heap_entry){.key = key, .handle = handle});
  h->heap_size++;
  sift_up(h, h->heap_size - 1);
}

void wk_heap_set(wk_heap *h, uint32_t handle, int64_t key) {
  WK_ASSERT(handle < h->capacity);
  uint32_t i = wk_heap_pos_(h, handle);
  if (i == WK_HEAP_ABSENT) {
    insert(h, handle, key);
    return;
  }
  if (i & WK_HEAP_IN_RUN) {
    uint32_t s = i & ~WK_HEAP_IN_RUN;
    if (h->run[s].key == key) return;
    run_remove(h, s);
    h->size--;
    insert(h, handle, key);
    return;
  }
  int64_t old = h->ent[i].key;
  h->ent[i].key = key;
  if (key < old) {
    sift_up(h, i);
  } else if (key > old) {
    sift_down(h, i);
  }
}

void wk_heap_remove(wk_heap *h, uint32_t handle) {
  WK_ASSERT(handle < h->capacity);
  uint32_t i = wk_heap_pos_(h, handle);
  if (i == WK_HEAP_ABSENT) return;
  set_pos(h, handle, WK_HEAP_ABSENT);
  h->size--;
  if (i & WK_HEAP_IN_RUN) {
    run_remove(h, i & ~WK_HEAP_IN_RUN);
  } else {
    WK_ASSERT(i < h->heap_size);
    WK_ASSERT(h->ent[i].handle == handle);
    heap_remove(h, i);
  }
  WK_ASSERT(h->size == h->heap_size + h->run_live);
}

bool wk_heap_walk(const wk_heap *h, uint32_t *cursor, uint32_t *handle) {
  while (*cursor < h->heap_size + h->run_len) {
    uint32_t c = (*cursor)++;
    const wk_heap_entry *e = c < h->heap_size ? &h->ent[c] : &h->run[run_slot(h, c - h->heap_size)];
    if (e->handle != WK_HEAP_ABSENT) {
      *handle = e->handle;
      return true;
    }
  }
  return false;
}

/* Up to `max` heap entries with key <= limit, smallest first: a best-first walk with
 * a small binary min-heap of candidate positions (children of what was taken). Each
 * take adds at most ARITY candidates: the frontier stays below (ARITY - 1) * max + 2. */
static uint32_t heap_collect_le(const wk_heap *h, int64_t limit, wk_heap_entry *out, uint32_t max) {
  uint32_t frontier[(ARITY - 1) * WK_HEAP_COLLECT_MAX + 2];
  if (h->heap_size == 0 || h->ent[0].key > limit) return 0;
  const wk_heap_entry *ent = h->ent;
  uint32_t nf = 0, n = 0;
  frontier[nf++] = 0;
  while (nf > 0 && n < max) {
    /* pop the candidate with the smallest key (sift down in `frontier`) */
    uint32_t best = frontier[0];
    frontier[0] = frontier[--nf];
    for (uint32_t i = 0;;) {
      uint32_t c = 2 * i + 1, m = i;
      if (c < nf && ent[frontier[c]].key < ent[frontier[m]].key) m = c;
      if (c + 1 < nf && ent[frontier[c + 1]].key < ent[frontier[m]].key) m = c + 1;
      if (m == i) break;
      uint32_t t = frontier[i];
      frontier[i] = frontier[m];
      frontier[m] = t;
      i = m;
    }
    out[n++] = ent[best];
    uint32_t first = ARITY * best + 1;
    for (uint32_t c = first; c < first + ARITY && c < h->heap_size; c++) {
      if (ent[c].key > limit) continue;
      /* push (sift up in `frontier`) */
      WK_ASSERT(nf < sizeof frontier / sizeof frontier[0]);
      uint32_t i = nf++;
      frontier[i] = c;
      while (i > 0 && ent[frontier[(i - 1) / 2]].key > ent[frontier[i]].key) {
        uint32_t p = (i - 1) / 2, t = frontier[p];
        frontier[p] = frontier[i];
        frontier[i] = t;
        i = p;
      }
    }
  }
  return n;
}

uint32_t wk_heap_collect_le(const wk_heap *h, int64_t limit, uint32_t *out, uint32_t max) {
  wk_heap_entry from_heap[WK_HEAP_COLLECT_MAX];
  if (max > WK_HEAP_COLLECT_MAX) max = WK_HEAP_COLLECT_MAX;
  if (max == 0 || h->size == 0) return 0;
  uint32_t nh = heap_collect_le(h, limit, from_heap, max);
  /* merge with the run, which is in key order already */
  uint32_t n = 0, k = 0, j = 0;
  while (n < max) {
    const wk_heap_entry *r = NULL;
    while (k < h->run_len) {
      const wk_heap_entry *e = &h->run[run_slot(h, k)];
      if (e->key > limit) {
        k = h->run_len;
        break;
      }
      if (e->handle != WK_HEAP_ABSENT) {
        r = e;
        break;
      }
      k++;
    }
    if (r && (j == nh || r->key <= from_heap[j].key)) {
      out[n++] = r->handle;
      k++;
    } else if (j < nh) {
      out[n++] = from_heap[j++].handle;
    } else {
      break;
    }
  }
  return n;
}

const char *wk_heap_check(const wk_heap *h) {
  if (h->heap_size > h->capacity || h->run_len > h->capacity || h->run_head >= h->capacity) {
    return "heap: a part is over capacity";
  }
  if (h->size != h->heap_size + h->run_live) return "heap: size differs from its parts";
  if (h->run_live > h->run_len || (h->run_live == 0 && h->run_len != 0)) {
    return "heap: run counts disagree";
  }
  uint32_t live = 0;
  for (uint32_t k = 0; k < h->run_len; k++) {
    uint32_t s = run_slot(h, k);
    const wk_heap_entry *e = &h->run[s];
    if (k > 0 && h->run[run_slot(h, k - 1)].key > e->key) return "heap: run out of order";
    if (e->handle == WK_HEAP_ABSENT) {
      if (k == 0 || k + 1 == h->run_len) return "heap: run starts or ends with a hole";
      continue;
    }
    live++;
    if (e->handle >= h->capacity || wk_heap_pos_(h, e->handle) != (WK_HEAP_IN_RUN | s)) {
      return "heap: position index disagrees with the run";
    }
  }
  if (live != h->run_live) return "heap: run live count is wrong";
  uint32_t present = 0, in_heap = 0;
  for (uint32_t handle = 0; handle < h->capacity; handle++) {
    uint32_t p = wk_heap_pos_(h, handle);
    if (p == WK_HEAP_ABSENT) continue;
    present++;
    if (p & WK_HEAP_IN_RUN) continue; /* checked from the run's side */
    in_heap++;
    if (p >= h->heap_size || h->ent[p].handle != handle)
      return "heap: position index disagrees with order";
  }
  if (present != h->size || in_heap != h->heap_size)
    return "heap: position index counts differ from size";
  for (uint32_t i = 1; i < h->heap_size; i++) {
    if (h->ent[(i - 1) / ARITY].key > h->ent[i].key) return "heap: order property broken";
  }
  return NULL;
}

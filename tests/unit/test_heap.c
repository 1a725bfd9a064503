/* test_heap.c: the timer queue of lib/wk_heap.h: its sorted run, its 4-ary heap, and
 * both together against a model. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "lib/wk_heap.h"

#define HEAP_OK(h)                                      \
  do {                                                  \
    const char *why_ = wk_heap_check(h);                \
    if (why_ != NULL) fail_msg("heap check: %s", why_); \
  } while (0)

static const wk_allocator plain = {NULL, NULL, NULL};

static int setup(void **state) {
  wk_heap *h = calloc(1, sizeof *h);
  if (h == NULL) return -1;
  wk_heap_init(h, 16, &plain);
  *state = h;
  return 0;
}
static int setup64(void **state) {
  wk_heap *h = calloc(1, sizeof *h);
  if (h == NULL) return -1;
  wk_heap_init(h, 64, &plain);
  *state = h;
  return 0;
}
/* The same with a sorted run in front of the heap. */
static int setup_run(void **state) {
  wk_heap *h = calloc(1, sizeof *h);
  if (h == NULL) return -1;
  wk_heap_init_with_run(h, 16, &plain);
  *state = h;
  return 0;
}
static int setup_run64(void **state) {
  wk_heap *h = calloc(1, sizeof *h);
  if (h == NULL) return -1;
  wk_heap_init_with_run(h, 64, &plain);
  *state = h;
  return 0;
}
static int teardown(void **state) {
  wk_heap *h = *state;
  wk_heap_free(h, &plain);
  free(h);
  return 0;
}

static void test_init_is_empty(void **state) {
  wk_heap *h = *state;
  assert_int_equal(h->capacity, 16);
  assert_int_equal(h->size, 0);
  assert_true(wk_heap_empty(h));
  for (uint32_t i = 0; i < 16; i++) assert_false(wk_heap_contains(h, i));
  HEAP_OK(h);
  uint32_t out[4];
  assert_int_equal(wk_heap_collect_le(h, INT64_MAX, out, 4), 0);
}

static void test_set_keeps_minimum_on_top(void **state) {
  wk_heap *h = *state;
  wk_heap_set(h, 3, 300);
  HEAP_OK(h);
  assert_int_equal(wk_heap_top(h), 3);
  assert_int_equal(wk_heap_top_key(h), 300);
  wk_heap_set(h, 7, 100);
  HEAP_OK(h);
  assert_int_equal(wk_heap_top(h), 7);
  wk_heap_set(h, 0, 200);
  wk_heap_set(h, 15, -5);
  HEAP_OK(h);
  assert_int_equal(wk_heap_top(h), 15);
  assert_int_equal(wk_heap_top_key(h), -5);
  assert_int_equal(h->size, 4);
  assert_false(wk_heap_empty(h));
  assert_true(wk_heap_contains(h, 0));
  assert_true(wk_heap_contains(h, 3));
  assert_true(wk_heap_contains(h, 7));
  assert_true(wk_heap_contains(h, 15));
  assert_false(wk_heap_contains(h, 1));
  assert_int_equal(wk_heap_key(h, 3), 300);
}

static void test_set_existing_moves_it(void **state) {
  wk_heap *h = *state;
  for (uint32_t i = 0; i < 8; i++) wk_heap_set(h, i, 1000 + (int64_t)i * 10);
  HEAP_OK(h);
  assert_int_equal(wk_heap_top(h), 0);
  /* decrease a leaf below the top */
  wk_heap_set(h, 7, 5);
  HEAP_OK(h);
  assert_int_equal(h->size, 8);
  assert_int_equal(wk_heap_top(h), 7);
  assert_int_equal(wk_heap_top_key(h), 5);
  /* increase the top past everyone */
  wk_heap_set(h, 7, 99999);
  HEAP_OK(h);
  assert_int_equal(h->size, 8);
  assert_int_equal(wk_heap_top(h), 0);
  /* same key: nothing moves */
  wk_heap_set(h, 0, 1000);
  HEAP_OK(h);
  assert_int_equal(wk_heap_top(h), 0);
  assert_int_equal(h->size, 8);
}

static void test_remove(void **state) {
  wk_heap *h = *state;
  for (uint32_t i = 0; i < 10; i++) wk_heap_set(h, i, (int64_t)(10 - i)); /* 9 is smallest */
  HEAP_OK(h);
  assert_int_equal(wk_heap_top(h), 9);
  wk_heap_remove(h, 9); /* the top */
  HEAP_OK(h);
  assert_int_equal(h->size, 9);
  assert_false(wk_heap_contains(h, 9));
  assert_int_equal(wk_heap_top(h), 8);
  wk_heap_remove(h, 3); /* a middle one */
  HEAP_OK(h);
  assert_int_equal(h->size, 8);
  assert_false(wk_heap_contains(h, 3));
  wk_heap_remove(h, h->ent[h->heap_size - 1].handle); /* the heap's last position */
  HEAP_OK(h);
  assert_int_equal(h->size, 7);
  wk_heap_remove(h, 9); /* absent: no-op */
  wk_heap_remove(h, 15);
  HEAP_OK(h);
  assert_int_equal(h->size, 7);
  /* drain in key order */
  int64_t last = INT64_MIN;
  while (!wk_heap_empty(h)) {
    int64_t k = wk_heap_top_key(h);
    assert_true(k >= last);
    last = k;
    wk_heap_remove(h, wk_heap_top(h));
    HEAP_OK(h);
  }
  assert_int_equal(h->size, 0);
  for (uint32_t i = 0; i < 16; i++) assert_false(wk_heap_contains(h, i));
}

/* A removal that must sift the moved element up, not down. */
static void test_remove_sifts_up(void **state) {
  wk_heap *h = *state;
  /* 4-ary: position 0 has children 1..4, position 1 has children 5..8.
   *   0:1
   *   1:100  2:2  3:3  4:4
   *   5:101 6:102 7:103 8:104 (under 100)   9:5 (under 2)
   * removing the handle at position 6 moves the last one (key 5) under 100, and it
   * must rise above it. Keys in position order insert without moving. */
  static const int64_t keys[10] = {1, 100, 2, 3, 4, 101, 102, 103, 104, 5};
  for (uint32_t i = 0; i < 10; i++) wk_heap_set(h, i, keys[i]);
  HEAP_OK(h);
  assert_int_equal(h->heap_size, 10);
  assert_int_equal(h->ent[6].handle, 6);
  wk_heap_remove(h, 6);
  HEAP_OK(h);
  assert_int_equal(h->heap_size, 9);
  assert_true(wk_heap_contains(h, 9));
  assert_int_equal(h->ent[1].key, 5);
}

/* Keys in order go to the run; removals leave holes that the ends drop. */
static void test_run_takes_keys_in_order(void **state) {
  wk_heap *h = *state;
  for (uint32_t i = 0; i < 8; i++) wk_heap_set(h, i, 100 + (int64_t)i);
  HEAP_OK(h);
  assert_int_equal(h->run_live, 8);
  assert_int_equal(h->heap_size, 0);
  wk_heap_set(h, 8, 107); /* equal to the last: still in order */
  assert_int_equal(h->run_live, 9);
  wk_heap_set(h, 9, 50); /* smaller: the heap, and the new minimum */
  assert_int_equal(h->heap_size, 1);
  assert_int_equal(wk_heap_top(h), 9);
  wk_heap_remove(h, 9);
  assert_int_equal(wk_heap_top(h), 0);
  wk_heap_remove(h, 3); /* a hole in the middle */
  HEAP_OK(h);
  assert_int_equal(h->run_live, 8);
  assert_int_equal(h->run_len, 9);
  wk_heap_remove(h, 0); /* the first: the run starts at 1 now */
  wk_heap_remove(h, 1);
  wk_heap_remove(h, 2); /* ... and skips the hole to 4 */
  HEAP_OK(h);
  assert_int_equal(wk_heap_top(h), 4);
  assert_int_equal(h->run_len, 5);
  wk_heap_remove(h, 8); /* the last */
  HEAP_OK(h);
  assert_int_equal(h->run_len, 4);
  wk_heap_set(h, 5, 99); /* a move out of order: leaves the run for the heap */
  HEAP_OK(h);
  assert_int_equal(wk_heap_top(h), 5);
  assert_int_equal(wk_heap_top_key(h), 99);
  assert_int_equal(h->heap_size, 1);
  /* the check sees a run out of order */
  int64_t saved = h->run[h->run_head].key;
  h->run[h->run_head].key = 1000;
  assert_non_null(wk_heap_check(h));
  h->run[h->run_head].key = saved;
  HEAP_OK(h);
  uint32_t out[8];
  assert_int_equal(wk_heap_collect_le(h, 1000, out, 8), 4);
  assert_int_equal(out[0], 5);
  assert_int_equal(out[1], 4);
  assert_int_equal(out[2], 6);
  assert_int_equal(out[3], 7);
  uint32_t cursor = 0, handle, seen = 0;
  while (wk_heap_walk(h, &cursor, &handle)) seen |= 1u << handle;
  assert_int_equal(seen, (1u << 4) | (1u << 5) | (1u << 6) | (1u << 7));
}

/* A full run sends further keys to the heap; the ring wraps around. */
static void test_run_full_and_wrapping(void **state) {
  wk_heap *h = *state; /* capacity 16 */
  for (uint32_t round = 0; round < 5; round++) {
    for (uint32_t i = 0; i < 16; i++) {
      if (!wk_heap_contains(h, i)) wk_heap_set(h, i, (int64_t)(round * 100 + i));
    }
    HEAP_OK(h);
    assert_int_equal(h->size, 16);
    for (uint32_t k = 0; k < 11; k++) {
      wk_heap_remove(h, wk_heap_top(h));
      HEAP_OK(h);
    }
  }
  /* hold the first, drop the others: the run stays full of holes, keys go to the heap */
  while (h->size > 1) {
    uint32_t cursor = 0, handle, last = 0;
    while (wk_heap_walk(h, &cursor, &handle)) last = handle;
    if (last == wk_heap_top(h)) break;
    wk_heap_remove(h, last);
  }
  HEAP_OK(h);
}

/* Siblings share a cache line: the layout the heap promises. */
static void test_siblings_share_a_line(void **state) {
  wk_heap *h = *state;
  for (uint32_t i = 1; i + 3 < h->capacity; i += 4) {
    uintptr_t first = (uintptr_t)&h->ent[i], last = (uintptr_t)&h->ent[i + 3];
    assert_int_equal(first / 64, last / 64);
    assert_int_equal(first % 64, 0);
  }
}

static void test_collect_le_smallest_first(void **state) {
  wk_heap *h = *state;
  /* inserted so that heap order is not key order: [1000, 3000, 2000] */
  wk_heap_set(h, 0, 3000);
  wk_heap_set(h, 1, 1000);
  wk_heap_set(h, 2, 2000);
  HEAP_OK(h);
  uint32_t out[8];
  memset(out, 0xff, sizeof out);
  assert_int_equal(wk_heap_collect_le(h, 5000, out, 8), 3);
  assert_int_equal(out[0], 1);
  assert_int_equal(out[1], 2);
  assert_int_equal(out[2], 0);
  memset(out, 0xff, sizeof out);
  assert_int_equal(wk_heap_collect_le(h, 5000, out, 2), 2);
  assert_int_equal(out[0], 1);
  assert_int_equal(out[1], 2);
  assert_int_equal(out[2], UINT32_MAX);
  assert_int_equal(wk_heap_collect_le(h, 2500, out, 8), 2);
  assert_int_equal(out[0], 1);
  assert_int_equal(out[1], 2);
  assert_int_equal(wk_heap_collect_le(h, 1000, out, 8), 1);
  assert_int_equal(out[0], 1);
  assert_int_equal(wk_heap_collect_le(h, 999, out, 8), 0);
  assert_int_equal(wk_heap_collect_le(h, 5000, out, 0), 0);
  HEAP_OK(h);
}

static void test_collect_le_is_read_only(void **state) {
  wk_heap *h = *state;
  for (uint32_t i = 0; i < 12; i++) wk_heap_set(h, i, (int64_t)((i * 7) % 12));
  wk_heap_entry ent[12];
  uint32_t pos[16];
  wk_heap_entry run[16];
  memset(run, 0, sizeof run);
  memcpy(ent, h->ent, sizeof ent);
  memcpy(pos, h->pos, sizeof pos);
  if (h->run != NULL) memcpy(run, h->run, sizeof run);
  uint32_t size = h->size;
  uint32_t out[16];
  assert_int_equal(wk_heap_collect_le(h, 5, out, 16), 6);
  assert_int_equal(h->size, size);
  assert_memory_equal(ent, h->ent, sizeof ent);
  assert_memory_equal(pos, h->pos, sizeof pos);
  if (h->run != NULL) assert_memory_equal(run, h->run, sizeof run);
}

/* A small deterministic PRNG for the model test. */
static uint64_t lcg(uint64_t *s) {
  *s = *s * 6364136223846793005ull + 1442695040888963407ull;
  return *s >> 33;
}

static void run_model(void **state, bool in_order) {
  enum { CAP = 64 };
  wk_heap *h = *state; /* capacity CAP, freed by teardown even when a check fails */
  assert_int_equal(h->capacity, CAP);
  bool present[CAP];
  int64_t model[CAP];
  memset(present, 0, sizeof present);
  uint64_t seed = 12345;
  for (int step = 0; step < 20000; step++) {
    uint32_t handle = (uint32_t)(lcg(&seed) % CAP);
    uint64_t op = lcg(&seed) % 10;
    if (op < 6) {
      /* in order: keys mostly follow the step (timers: now + a fixed duration) */
      int64_t k =
          in_order ? (int64_t)step / 4 + (int64_t)(lcg(&seed) % 3) - (lcg(&seed) % 16 == 0 ? 40 : 0)
                   : (int64_t)(lcg(&seed) % 200) - 50;
      wk_heap_set(h, handle, k);
      present[handle] = true;
      model[handle] = k;
    } else if (op < 9) {
      wk_heap_remove(h, handle);
      present[handle] = false;
    } else {
      /* collect against the model: the n smallest keys <= limit, in key order */
      int64_t limit = in_order ? (int64_t)step / 4 - (int64_t)(lcg(&seed) % 40)
                               : (int64_t)(lcg(&seed) % 200) - 50;
      uint32_t max = (uint32_t)(lcg(&seed) % 10);
      uint32_t out[CAP];
      uint32_t n = wk_heap_collect_le(h, limit, out, max);
      int64_t sorted[CAP];
      uint32_t m = 0;
      for (uint32_t i = 0; i < CAP; i++) {
        if (!present[i] || model[i] > limit) continue;
        uint32_t j = m++;
        while (j > 0 && sorted[j - 1] > model[i]) {
          sorted[j] = sorted[j - 1];
          j--;
        }
        sorted[j] = model[i];
      }
      assert_int_equal(n, m < max ? m : max);
      for (uint32_t i = 0; i < n; i++) {
        assert_true(out[i] < CAP);
        assert_true(present[out[i]]);
        for (uint32_t j = 0; j < i; j++) assert_int_not_equal(out[i], out[j]);
        if (model[out[i]] != sorted[i]) {
          fail_msg("step %d: collect_le[%u] has key %lld, the %u-th smallest is %lld", step, i,
                   (long long)model[out[i]], i, (long long)sorted[i]);
        }
      }
    }
    const char *why = wk_heap_check(h);
    if (why != NULL) fail_msg("step %d: %s", step, why);
    uint32_t count = 0;
    int64_t min = INT64_MAX;
    for (uint32_t i = 0; i < CAP; i++) {
      assert_int_equal(wk_heap_contains(h, i), present[i]);
      if (present[i]) {
        count++;
        if (model[i] < min) min = model[i];
        assert_int_equal(wk_heap_key(h, i), model[i]);
      }
    }
    assert_int_equal(h->size, count);
    if (count > 0) assert_int_equal(wk_heap_top_key(h), min);
  }
}

static void test_against_model(void **state) { run_model(state, false); }
static void test_against_model_in_order(void **state) { run_model(state, true); }

static void test_check_detects_corruption(void **state) {
  wk_heap *h = *state;
  for (uint32_t i = 0; i < 6; i++) wk_heap_set(h, i, (int64_t)(5 - i) * 10);
  HEAP_OK(h);
  assert_int_equal(h->heap_size, 6);
  /* break the order property behind the heap's back */
  int64_t saved = h->ent[0].key;
  h->ent[0].key = 1000;
  assert_non_null(wk_heap_check(h));
  h->ent[0].key = saved;
  HEAP_OK(h);
  /* break the position index */
  uint32_t p = h->pos[h->ent[1].handle];
  h->pos[h->ent[1].handle] = 5;
  assert_non_null(wk_heap_check(h));
  h->pos[h->ent[1].handle] = p;
  HEAP_OK(h);
  /* a size that disagrees with the index */
  h->size--;
  assert_non_null(wk_heap_check(h));
  h->size++;
  HEAP_OK(h);
}

typedef struct counting {
  size_t live_bytes, allocs, frees;
} counting;
static void *count_alloc(void *ud, size_t size) {
  counting *c = ud;
  c->live_bytes += size;
  c->allocs++;
  return malloc(size);
}
static void count_free(void *ud, void *ptr, size_t size) {
  counting *c = ud;
  c->live_bytes -= size;
  c->frees++;
  free(ptr);
}

static void test_allocator_hooks(void **state) {
  (void)state;
  counting c = {0, 0, 0};
  const wk_allocator a = {count_alloc, count_free, &c};
  wk_heap h;
  wk_heap_init(&h, 100, &a);
  assert_int_equal(c.allocs, 2); /* entries, positions */
  assert_true(c.live_bytes >= 100 * (sizeof(wk_heap_entry) + sizeof(uint32_t)));
  for (uint32_t i = 0; i < 100; i++) wk_heap_set(&h, i, (int64_t)(i % 7));
  const char *why = wk_heap_check(&h);
  assert_null(why);
  wk_heap_free(&h, &a);
  assert_int_equal(c.frees, 2);
  assert_int_equal(c.live_bytes, 0);
  assert_null(h.ent);
  assert_null(h.pos);
  assert_int_equal(h.size, 0);
  assert_int_equal(h.capacity, 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_init_is_empty, setup, teardown),
      cmocka_unit_test_setup_teardown(test_set_keeps_minimum_on_top, setup, teardown),
      cmocka_unit_test_setup_teardown(test_set_existing_moves_it, setup, teardown),
      cmocka_unit_test_setup_teardown(test_remove, setup, teardown),
      cmocka_unit_test_setup_teardown(test_remove_sifts_up, setup, teardown),
      cmocka_unit_test_setup_teardown(test_siblings_share_a_line, setup64, teardown),
      cmocka_unit_test_setup_teardown(test_run_takes_keys_in_order, setup_run, teardown),
      cmocka_unit_test_setup_teardown(test_run_full_and_wrapping, setup_run, teardown),
      cmocka_unit_test_setup_teardown(test_collect_le_smallest_first, setup, teardown),
      cmocka_unit_test_setup_teardown(test_collect_le_is_read_only, setup, teardown),
      cmocka_unit_test_setup_teardown(test_against_model, setup64, teardown),
      cmocka_unit_test_setup_teardown(test_against_model_in_order, setup64, teardown),
      cmocka_unit_test_setup_teardown(test_check_detects_corruption, setup, teardown),
      cmocka_unit_test(test_allocator_hooks),
      /* the same behaviour with a sorted run in front */
      cmocka_unit_test_setup_teardown(test_init_is_empty, setup_run, teardown),
      cmocka_unit_test_setup_teardown(test_set_keeps_minimum_on_top, setup_run, teardown),
      cmocka_unit_test_setup_teardown(test_set_existing_moves_it, setup_run, teardown),
      cmocka_unit_test_setup_teardown(test_remove, setup_run, teardown),
      cmocka_unit_test_setup_teardown(test_collect_le_smallest_first, setup_run, teardown),
      cmocka_unit_test_setup_teardown(test_collect_le_is_read_only, setup_run, teardown),
      cmocka_unit_test_setup_teardown(test_against_model, setup_run64, teardown),
      cmocka_unit_test_setup_teardown(test_against_model_in_order, setup_run64, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

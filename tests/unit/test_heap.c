/* test_heap.c: the indexed binary min-heap of lib/wk_heap.h. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "lib/wk_heap.h"

#define HEAP_OK(h)                                         \
  do {                                                     \
    const char *why_ = wk_heap_check(h);                   \
    if (why_ != NULL) fail_msg("heap check: %s", why_);    \
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
  assert_int_equal(h->key[3], 300);
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
  wk_heap_remove(h, h->order[h->size - 1]); /* the last position */
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
  /*            0:1
   *       1:100      2:2
   *     3:101 4:102 5:3 6:4          remove handle at position 4 → last (6:4) moves
   * under 100 and must rise above it. */
  static const int64_t keys[7] = {1, 100, 2, 101, 102, 3, 4};
  for (uint32_t i = 0; i < 7; i++) wk_heap_set(h, i, keys[i]);
  HEAP_OK(h);
  assert_int_equal(h->order[4], 4);
  wk_heap_remove(h, 4);
  HEAP_OK(h);
  assert_int_equal(h->size, 6);
  assert_true(wk_heap_contains(h, 6));
  assert_int_equal(h->key[h->order[1]], 4);
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
  uint32_t order[16], pos[16];
  int64_t key[16];
  memcpy(order, h->order, sizeof order);
  memcpy(pos, h->pos, sizeof pos);
  memcpy(key, h->key, sizeof key);
  uint32_t size = h->size;
  uint32_t out[16];
  assert_int_equal(wk_heap_collect_le(h, 5, out, 16), 6);
  assert_int_equal(h->size, size);
  assert_memory_equal(order, h->order, sizeof order);
  assert_memory_equal(pos, h->pos, sizeof pos);
  assert_memory_equal(key, h->key, sizeof key);
}

/* A small deterministic PRNG for the model test. */
static uint64_t lcg(uint64_t *s) {
  *s = *s * 6364136223846793005ull + 1442695040888963407ull;
  return *s >> 33;
}

static void test_against_model(void **state) {
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
      int64_t k = (int64_t)(lcg(&seed) % 200) - 50;
      wk_heap_set(h, handle, k);
      present[handle] = true;
      model[handle] = k;
    } else if (op < 9) {
      wk_heap_remove(h, handle);
      present[handle] = false;
    } else {
      /* collect against the model: the n smallest keys <= limit, in key order */
      int64_t limit = (int64_t)(lcg(&seed) % 200) - 50;
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
        assert_int_equal(h->key[i], model[i]);
      }
    }
    assert_int_equal(h->size, count);
    if (count > 0) assert_int_equal(wk_heap_top_key(h), min);
  }
}

static void test_check_detects_corruption(void **state) {
  wk_heap *h = *state;
  for (uint32_t i = 0; i < 6; i++) wk_heap_set(h, i, (int64_t)i * 10);
  HEAP_OK(h);
  /* break the order property behind the heap's back */
  int64_t saved = h->key[h->order[0]];
  h->key[h->order[0]] = 1000;
  assert_non_null(wk_heap_check(h));
  h->key[h->order[0]] = saved;
  HEAP_OK(h);
  /* break the position index */
  uint32_t p = h->pos[h->order[1]];
  h->pos[h->order[1]] = 5;
  assert_non_null(wk_heap_check(h));
  h->pos[h->order[1]] = p;
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
  assert_int_equal(c.allocs, 4); /* order, pos, key, okey */
  assert_true(c.live_bytes >= 100 * (2 * sizeof(uint32_t) + 2 * sizeof(int64_t)));
  for (uint32_t i = 0; i < 100; i++) wk_heap_set(&h, i, (int64_t)(i % 7));
  const char *why = wk_heap_check(&h);
  assert_null(why);
  wk_heap_free(&h, &a);
  assert_int_equal(c.frees, 4);
  assert_int_equal(c.live_bytes, 0);
  assert_null(h.order);
  assert_null(h.pos);
  assert_null(h.key);
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
      cmocka_unit_test_setup_teardown(test_collect_le_smallest_first, setup, teardown),
      cmocka_unit_test_setup_teardown(test_collect_le_is_read_only, setup, teardown),
      cmocka_unit_test_setup_teardown(test_against_model, setup64, teardown),
      cmocka_unit_test_setup_teardown(test_check_detects_corruption, setup, teardown),
      cmocka_unit_test(test_allocator_hooks),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

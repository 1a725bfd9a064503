/* test_arena.c: the bump allocator of lib/wk_arena.h: aligned pieces that never
 * overlap, blocks that grow (the first from the hint, then doubling, or as big as one
 * request), release and reuse. AddressSanitizer (the test build) reports any use of a
 * released block. */
#include <setjmp.h>
#include <stdalign.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "lib/wk_arena.h"

/* Pieces of every size from 1 to 300, each filled with its own byte: all aligned, none
 * overwriting another; a few blocks hold them all. */
static void test_pieces_aligned_and_apart(void **state) {
  (void)state;
  wk_arena a;
  wk_arena_init(&a, 256);
  unsigned char *p[301];
  for (size_t n = 1; n <= 300; n++) {
    p[n] = wk_arena_alloc(&a, n);
    assert_int_equal((uintptr_t)p[n] % alignof(max_align_t), 0);
    memset(p[n], (int)(n & 0xff), n);
  }
  for (size_t n = 1; n <= 300; n++) {
    for (size_t i = 0; i < n; i++) assert_int_equal(p[n][i], n & 0xff);
  }
  size_t asked = 0;
  for (size_t n = 1; n <= 300; n++) asked += n;
  assert_true(a.held >= asked);
  assert_true(a.held <= 4 * asked); /* doubling: at most about twice, plus rounding */
  wk_arena_release(&a);
  assert_int_equal(a.held, 0);
}

/* The first block is the hint's size: what fits in it takes one block; a request larger
 * than the next doubling gets a block of its own size. */
static void test_hint_and_growth(void **state) {
  (void)state;
  wk_arena a;
  wk_arena_init(&a, 1000);
  (void)wk_arena_alloc(&a, 10);
  assert_int_equal(a.held, 1000);
  (void)wk_arena_alloc(&a, 900);
  assert_int_equal(a.held, 1000); /* still the first block */
  (void)wk_arena_alloc(&a, 200);
  assert_int_equal(a.held, 1000 + 2000); /* doubled */
  (void)wk_arena_alloc(&a, 100000);
  assert_int_equal(a.held, 1000 + 2000 + 100000); /* as big as the request */
  wk_arena_release(&a);
  /* empty again, and usable */
  char *s = wk_arena_alloc(&a, 6);
  memcpy(s, "again", 6);
  assert_string_equal(s, "again");
  assert_int_equal(a.held, 1000);
  wk_arena_release(&a);
}

/* Zero bytes still give a distinct piece; the default hint applies with 0. */
static void test_zero_sizes(void **state) {
  (void)state;
  wk_arena a;
  wk_arena_init(&a, 0);
  void *x = wk_arena_alloc(&a, 0), *y = wk_arena_alloc(&a, 0);
  assert_ptr_not_equal(x, y);
  assert_true(a.held > 0);
  wk_arena_release(&a);
  wk_arena_release(&a); /* twice is harmless */
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_pieces_aligned_and_apart),
      cmocka_unit_test(test_hint_and_growth),
      cmocka_unit_test(test_zero_sizes),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

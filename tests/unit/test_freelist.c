/* test_freelist.c: the bounded free list of lib/wk_freelist.h: objects come back zeroed
 * and are reused, at most `max` are kept (the rest freed), drain empties it, and under
 * AddressSanitizer a kept object is poisoned (a use after put is reported). */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "lib/wk_freelist.h"

#if defined(__SANITIZE_ADDRESS__)
#define ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define ASAN 1
#endif
#endif
#ifdef ASAN
#include <sanitizer/asan_interface.h>
#endif

typedef struct rec {
  uint64_t a, b;
  char text[40];
} rec;

static bool all_zero(const void *p, size_t n) {
  const unsigned char *c = p;
  for (size_t i = 0; i < n; i++)
    if (c[i]) return false;
  return true;
}

/* A put object is the next one handed out, zeroed again; the most recent first. */
static void test_reuse_zeroed(void **state) {
  (void)state;
  wk_freelist f;
  wk_freelist_init(&f, sizeof(rec), 4);
  rec *x = wk_freelist_calloc(&f), *y = wk_freelist_calloc(&f);
  assert_true(all_zero(x, sizeof *x));
  assert_int_equal(f.reused, 0);
  memset(x, 0xab, sizeof *x);
  memset(y, 0xcd, sizeof *y);
  wk_freelist_put(&f, x);
  wk_freelist_put(&f, y);
  assert_int_equal(f.count, 2);
  rec *p = wk_freelist_calloc(&f);
  assert_ptr_equal(p, y);
  assert_true(all_zero(p, sizeof *p));
  rec *q = wk_freelist_calloc(&f);
  assert_ptr_equal(q, x);
  assert_true(all_zero(q, sizeof *q));
  assert_int_equal(f.reused, 2);
  assert_int_equal(f.count, 0);
  /* take: a kept object as it is (its owner sets every field), or a new one */
  wk_freelist_put(&f, p);
  rec *t = wk_freelist_take(&f);
  assert_ptr_equal(t, p);
  assert_int_equal(f.reused, 3);
  rec *fresh = wk_freelist_take(&f);
  assert_non_null(fresh);
  assert_int_equal(f.reused, 3);
  free(fresh);
  p = t;
  wk_freelist_put(&f, NULL); /* no-op */
  assert_int_equal(f.count, 0);
  free(p);
  free(q);
}

/* At most max objects are kept; the others are freed (LeakSanitizer would see a loss). */
static void test_bounded(void **state) {
  (void)state;
  wk_freelist f;
  wk_freelist_init(&f, sizeof(rec), 3);
  rec *r[10];
  for (int i = 0; i < 10; i++) r[i] = wk_freelist_calloc(&f);
  for (int i = 0; i < 10; i++) wk_freelist_put(&f, r[i]);
  assert_int_equal(f.count, 3);
  for (int i = 0; i < 10; i++) r[i] = wk_freelist_calloc(&f);
  assert_int_equal(f.reused, 3);
  for (int i = 0; i < 10; i++) wk_freelist_put(&f, r[i]);
  wk_freelist_drain(&f);
  assert_int_equal(f.count, 0);
  assert_null(f.head);
  /* usable after a drain; max 0 keeps nothing */
  free(wk_freelist_calloc(&f));
  wk_freelist g;
  wk_freelist_init(&g, 1, 0); /* objects at least a pointer big */
  assert_true(g.size >= sizeof(void *));
  void *o = wk_freelist_calloc(&g);
  wk_freelist_put(&g, o);
  assert_int_equal(g.count, 0);
  assert_null(g.head);
}

/* Under ASan, a kept object is poisoned until it is handed out again. */
static void test_kept_objects_poisoned(void **state) {
  (void)state;
#ifdef ASAN
  wk_freelist f;
  wk_freelist_init(&f, sizeof(rec), 2);
  rec *x = wk_freelist_calloc(&f);
  assert_false(__asan_address_is_poisoned(&x->text[10]));
  wk_freelist_put(&f, x);
  assert_true(__asan_address_is_poisoned(x));
  assert_true(__asan_address_is_poisoned(&x->text[39]));
  rec *y = wk_freelist_calloc(&f);
  assert_ptr_equal(x, y);
  assert_false(__asan_address_is_poisoned(&y->text[39]));
  wk_freelist_put(&f, y);
  wk_freelist_drain(&f);
#else
  skip();
#endif
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_reuse_zeroed),
      cmocka_unit_test(test_bounded),
      cmocka_unit_test(test_kept_objects_poisoned),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

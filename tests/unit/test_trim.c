/* test_trim.c: wk_trim asks for a trim once after a mass close (the estimate fell
 * drop_bytes below its high-water mark and has not fallen for settle_ms), never under a
 * steady or growing load, at most once per min_gap_ms, and anyway after max_wait_ms of
 * falling; and once idle after a load whose memory stayed (wk_trim_idle_due). Ticks every
 * 500 ms, as the worker's default tick_ms. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "lib/wk_trim.h"

#define MIB (1024u * 1024u)

static wk_trim make(void) {
  wk_trim t;
  wk_trim_init(
      &t, (wk_trim_config){
              .drop_bytes = 8 * MIB, .settle_ms = 1000, .min_gap_ms = 2000, .max_wait_ms = 10000});
  return t;
}

static void test_steady_and_growing_never(void **state) {
  (void)state;
  wk_trim t = make();
  uint64_t now = 1000;
  for (int i = 0; i < 1000; i++, now += 500) { /* growing, then a steady level with jitter */
    uint64_t held = i < 500 ? (uint64_t)i * MIB : 500u * MIB - (uint64_t)(i % 3) * MIB;
    assert_false(wk_trim_due(&t, held, now));
  }
}

static void test_mass_close_once(void **state) {
  (void)state;
  wk_trim t = make();
  assert_false(wk_trim_due(&t, 120 * MIB, 1000)); /* 10,000 streams open */
  assert_false(wk_trim_due(&t, 120 * MIB, 1500));
  assert_false(wk_trim_due(&t, 60 * MIB, 2000)); /* closing: seen */
  assert_false(wk_trim_due(&t, 0, 2500));        /* still falling */
  assert_false(wk_trim_due(&t, 0, 3000));        /* quiet for 0.5 s */
  assert_true(wk_trim_due(&t, 0, 3500));         /* quiet for 1 s: trim */
  for (uint64_t now = 4000; now < 60000; now += 500) assert_false(wk_trim_due(&t, 0, now));
}

static void test_ticks_close_together_do_not_cut_a_fall(void **state) {
  (void)state;
  wk_trim t = make();
  assert_false(wk_trim_due(&t, 40 * MIB, 1000));
  assert_false(wk_trim_due(&t, 30 * MIB, 1500)); /* results expiring, tick after tick */
  assert_false(wk_trim_due(&t, 30 * MIB, 1510)); /* an extra tick (a deadline): no fall */
  assert_false(wk_trim_due(&t, 20 * MIB, 2000));
  assert_false(wk_trim_due(&t, 10 * MIB, 2500));
  assert_false(wk_trim_due(&t, 0, 3000));
  assert_false(wk_trim_due(&t, 0, 3500));
  assert_true(wk_trim_due(&t, 0, 4000)); /* one trim, after all of it */
  assert_false(wk_trim_due(&t, 0, 4500));
}

static void test_small_drop_never(void **state) {
  (void)state;
  wk_trim t = make();
  assert_false(wk_trim_due(&t, 20 * MIB, 1000));
  for (uint64_t now = 1500; now < 30000; now += 500) {
    assert_false(wk_trim_due(&t, 13 * MIB, now)); /* 7 MiB below the mark: not enough */
  }
}

static void test_min_gap(void **state) {
  (void)state;
  wk_trim t = make();
  assert_false(wk_trim_due(&t, 40 * MIB, 1000));
  assert_false(wk_trim_due(&t, 0, 1500));
  assert_false(wk_trim_due(&t, 0, 2000));
  assert_true(wk_trim_due(&t, 0, 2500));
  /* a second mass close right after: seen only 2 s after the first trim */
  assert_false(wk_trim_due(&t, 40 * MIB, 3000));
  assert_false(wk_trim_due(&t, 0, 3500));
  assert_false(wk_trim_due(&t, 0, 4000));
  assert_false(wk_trim_due(&t, 0, 4500)); /* 2 s since: seen now, quiet since 3500 */
  assert_true(wk_trim_due(&t, 0, 5000));
}

static void test_long_fall_trimmed_anyway(void **state) {
  (void)state;
  wk_trim t = make();
  uint64_t held = 400 * MIB, now = 1000;
  assert_false(wk_trim_due(&t, held, now));
  int trims = 0;
  for (int i = 0; i < 60; i++) { /* falls a little every tick for 30 s */
    held -= 5 * MIB;
    now += 500;
    if (wk_trim_due(&t, held, now)) trims++;
  }
  assert_true(trims >= 2); /* not held back until the fall ends */
  assert_true(trims <= 3); /* at most one per max_wait_ms of falling */
}

/* ---- idle after a load (wk_trim_idle_due) ---- */

static void test_idle_after_a_load_once(void **state) {
  (void)state;
  wk_trim t = make();
  assert_false(wk_trim_idle_due(&t, true, 20 * MIB, 1000)); /* started: the base */
  assert_false(wk_trim_idle_due(&t, false, 0, 1500));       /* a burst of large tasks */
  assert_false(wk_trim_idle_due(&t, false, 0, 2000));
  assert_false(wk_trim_idle_due(&t, true, 60 * MIB, 2500)); /* idle: not for 1 s yet */
  assert_false(wk_trim_idle_due(&t, true, 60 * MIB, 3000));
  assert_true(wk_trim_idle_due(&t, true, 60 * MIB, 3500)); /* idle 1 s, 40 MiB up */
  wk_trim_done(&t, 22 * MIB);
  for (uint64_t now = 4000; now < 60000; now += 500) { /* stays idle: never again */
    assert_false(wk_trim_idle_due(&t, true, 22 * MIB, now));
  }
}

static void test_idle_growth_that_stays_trimmed_once(void **state) {
  (void)state;
  wk_trim t = make();
  assert_false(wk_trim_idle_due(&t, true, 20 * MIB, 1000));
  assert_false(wk_trim_idle_due(&t, false, 0, 1500));
  assert_false(wk_trim_idle_due(&t, true, 280 * MIB, 2000)); /* retained results */
  assert_true(wk_trim_idle_due(&t, true, 280 * MIB, 3000));
  wk_trim_done(&t, 279 * MIB); /* they are live: almost nothing freed */
  for (uint64_t now = 3500; now < 60000; now += 500) {
    if (now % 5000 == 0) assert_false(wk_trim_idle_due(&t, false, 0, now)); /* tasks */
    assert_false(wk_trim_idle_due(&t, true, 283 * MIB, now)); /* within 8 MiB of the base */
  }
}

static void test_idle_small_growth_or_busy_never(void **state) {
  (void)state;
  wk_trim t = make();
  assert_false(wk_trim_idle_due(&t, true, 20 * MIB, 1000));
  for (uint64_t now = 1500; now < 30000; now += 500) {
    assert_false(wk_trim_idle_due(&t, true, 27 * MIB, now)); /* 7 MiB up: not enough */
    assert_false(wk_trim_idle_due(&t, false, 0, now + 250)); /* and never idle 1 s */
  }
  assert_false(wk_trim_idle_due(&t, true, 200 * MIB, 30000)); /* grown, idle only now */
  assert_false(wk_trim_idle_due(&t, false, 0, 30500));        /* busy again */
  assert_false(wk_trim_idle_due(&t, true, 200 * MIB, 31000)); /* the second starts over */
  assert_true(wk_trim_idle_due(&t, true, 200 * MIB, 32000));
}

static void test_idle_and_mass_close_share_the_gap(void **state) {
  (void)state;
  wk_trim t = make();
  assert_false(wk_trim_idle_due(&t, true, 20 * MIB, 500));
  assert_false(wk_trim_due(&t, 40 * MIB, 1000));
  assert_false(wk_trim_due(&t, 0, 1500));
  assert_false(wk_trim_due(&t, 0, 2000));
  assert_true(wk_trim_due(&t, 0, 2500));                    /* streams closed: trimmed */
  assert_false(wk_trim_idle_due(&t, true, 90 * MIB, 2500)); /* not in the same tick */
  wk_trim_done(&t, 60 * MIB);                               /* the base: what it left */
  assert_false(wk_trim_idle_due(&t, true, 80 * MIB, 3000));
  assert_false(wk_trim_idle_due(&t, true, 80 * MIB, 4000)); /* 1.5 s after the trim */
  assert_true(wk_trim_idle_due(&t, true, 80 * MIB, 4500));  /* 2 s after it */
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_steady_and_growing_never),
      cmocka_unit_test(test_mass_close_once),
      cmocka_unit_test(test_ticks_close_together_do_not_cut_a_fall),
      cmocka_unit_test(test_small_drop_never),
      cmocka_unit_test(test_min_gap),
      cmocka_unit_test(test_long_fall_trimmed_anyway),
      cmocka_unit_test(test_idle_after_a_load_once),
      cmocka_unit_test(test_idle_growth_that_stays_trimmed_once),
      cmocka_unit_test(test_idle_small_growth_or_busy_never),
      cmocka_unit_test(test_idle_and_mass_close_share_the_gap),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

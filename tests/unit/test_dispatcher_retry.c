/* test_dispatcher_retry.c: retries and backoff: which results are retried, the
 * exponential delay and its cap, equal and full jitter from the seeded PRNG (fixed
 * seeds, replayable), attempt limits, no retry past the task deadline, and the
 * PRNG of lib/wk_rng.h itself. */
#include "test_dispatcher_fixture.h"

#include "lib/wk_rng.h"

static wk_disp_task_params retry_params(uint32_t attempts, int64_t initial, int64_t max) {
  wk_disp_task_params p = dfx_params();
  p.failure_policy = WK_CALL_CONTINUE;
  p.max_failed_calls = 1000;
  p.retry.max_attempts = attempts;
  p.retry.initial_backoff_ms = initial;
  p.retry.max_backoff_ms = max;
  p.retry.backoff_multiplier_milli = 2000;
  return p;
}

/* Fails the single in-flight attempt `id` with `r` at `now`; returns the retry time
 * (next_deadline) or INT64_MAX when no retry was scheduled. */
static int64_t fail_at(dfx *fx, uint64_t id, wk_disp_result r, int64_t now) {
  assert_int_equal(DFX_FINISH(fx, id, r, now), WK_OK);
  return wk_disp_next_deadline(fx->d);
}

/* Waits out the backoff: nothing before `due`, the new attempt at `due`. */
static uint64_t resend_at(dfx *fx, uint32_t task, uint32_t index, int64_t due, uint32_t attempt) {
  DFX_TICK(fx, due - 1);
  DFX_KINDS(fx, "");
  DFX_TICK(fx, due);
  DFX_KINDS(fx, "S");
  const wk_disp_action *s = dfx_send_of(fx, task, index);
  assert_non_null(s);
  assert_int_equal(s->attempt, attempt);
  return s->call_id;
}

static void test_backoff_grows_and_is_capped(void **state) {
  dfx *fx = *state;
  wk_disp_task_params p = retry_params(6, 100, 500);
  uint32_t t = DFX_TASK(fx, 1, &p);
  DFX_ADD(fx, t, 1, true, 0);
  uint64_t id = DFX_SEND_ID(fx, t, 0);
  int64_t now = 0;
  const int64_t delays[5] = {100, 200, 400, 500, 500};
  for (uint32_t k = 0; k < 5; k++) {
    int64_t due = fail_at(fx, id, WK_DISP_RETRYABLE, now);
    DFX_KINDS(fx, "");
    assert_int_equal(due, now + delays[k]);
    assert_int_equal(DFX_INFO(fx, t).backoff, 1);
    id = resend_at(fx, t, 0, due, k + 2);
    now = due;
  }
  /* sixth attempt fails: attempts exhausted, final with the last result */
  (void)fail_at(fx, id, WK_DISP_RETRYABLE, now + 1);
  DFX_KINDS(fx, "DT");
  const wk_disp_action *d = &fx->out.items[0];
  assert_int_equal(d->result, WK_DISP_RETRYABLE);
  assert_int_equal(d->attempt, 6);
  assert_int_equal(d->call_id, id);
  assert_int_equal(DFX_INFO(fx, t).retried, 5);
  assert_int_equal(wk_disp_stats_get(fx->d).retries, 5);
  assert_int_equal(wk_disp_next_deadline(fx->d), INT64_MAX);
}

static void test_multiplier_defaults_and_backoff_zero(void **state) {
  dfx *fx = *state;
  wk_disp_task_params p = retry_params(4, 10, 0); /* max 0 = one hour */
  p.retry.backoff_multiplier_milli = 0;           /* x2 */
  uint32_t t = DFX_TASK(fx, 1, &p);
  DFX_ADD(fx, t, 1, true, 0);
  uint64_t id = DFX_SEND_ID(fx, t, 0);
  assert_int_equal(fail_at(fx, id, WK_DISP_RETRYABLE, 0), 10);
  id = resend_at(fx, t, 0, 10, 2);
  assert_int_equal(fail_at(fx, id, WK_DISP_RETRYABLE, 10), 30);
  id = resend_at(fx, t, 0, 30, 3);
  (void)id;
  /* initial 0: the retry goes straight back to the queue and out in the same call */
  wk_disp_task_params z = retry_params(3, 0, 0);
  uint32_t t2 = DFX_TASK(fx, 2, &z);
  DFX_ADD(fx, t2, 1, true, 40);
  uint64_t id2 = DFX_SEND_ID(fx, t2, 0);
  (void)DFX_FINISH(fx, id2, WK_DISP_RETRYABLE, 41);
  DFX_KINDS(fx, "S");
  assert_int_equal(fx->out.items[0].attempt, 2);
  /* max_attempts 0 means one attempt */
  wk_disp_task_params one = retry_params(0, 5, 5);
  uint32_t t3 = DFX_TASK(fx, 3, &one);
  DFX_ADD(fx, t3, 1, true, 50);
  (void)DFX_FINISH(fx, DFX_SEND_ID(fx, t3, 0), WK_DISP_RETRYABLE, 51);
  DFX_KINDS(fx, "DT");
}

static void test_which_results_are_retried(void **state) {
  dfx *fx = *state;
  wk_disp_config cfg = dfx_config();
  cfg.max_inflight = 16;
  cfg.window_initial = 8;
  dfx_reconfigure(fx, &cfg);
  /* ERROR never; EXECUTOR_LOST and TIMEOUT only with their flags */
  wk_disp_task_params off = retry_params(3, 10, 10);
  wk_disp_task_params on = off;
  on.retry_on_executor_lost = true;
  on.retry.retry_on_timeout = true;
  on.call_timeout_ms = 100;
  off.call_timeout_ms = 100;
  uint32_t a = DFX_TASK(fx, 1, &off), b = DFX_TASK(fx, 2, &on);
  DFX_ADD(fx, a, 3, true, 0);
  uint64_t a0 = DFX_SEND_ID(fx, a, 0), a1 = DFX_SEND_ID(fx, a, 1);
  DFX_ADD(fx, b, 3, true, 0);
  uint64_t b0 = DFX_SEND_ID(fx, b, 0), b1 = DFX_SEND_ID(fx, b, 1);
  (void)DFX_FINISH(fx, a0, WK_DISP_ERROR, 1);
  DFX_KINDS(fx, "D");
  (void)DFX_FINISH(fx, a1, WK_DISP_EXECUTOR_LOST, 1);
  DFX_KINDS(fx, "D");
  assert_int_equal(fx->out.items[0].result, WK_DISP_EXECUTOR_LOST);
  (void)DFX_FINISH(fx, b0, WK_DISP_ERROR, 1);
  DFX_KINDS(fx, "D");
  (void)DFX_FINISH(fx, b1, WK_DISP_EXECUTOR_LOST, 1);
  DFX_KINDS(fx, ""); /* retried after 10 ms */
  assert_int_equal(DFX_INFO(fx, b).backoff, 1);
  /* timeouts at 100: a's call 2 is final, b's call 2 is retried */
  DFX_TICK(fx, 100);
  assert_int_equal(dfx_count(fx, WK_DISP_CANCEL), 2);
  assert_int_equal(dfx_count(fx, WK_DISP_CALL_DONE), 1);
  const wk_disp_action *d = dfx_nth(fx, WK_DISP_CALL_DONE, 0);
  assert_int_equal(d->task, a);
  assert_int_equal(d->index, 2);
  assert_int_equal(d->result, WK_DISP_TIMEOUT);
  assert_int_equal(dfx_count(fx, WK_DISP_TASK_DONE), 1);
  assert_true(DFX_INFO(fx, a).ended);
  assert_int_equal(DFX_INFO(fx, a).failed, 3);
  assert_true(DFX_INFO(fx, a).ok); /* CONTINUE with 1000 tolerated */
  /* b: call 1 (lost) was due at 11 and is sent now; call 2 backs off after its timeout */
  assert_int_equal(dfx_count(fx, WK_DISP_SEND), 1);
  assert_int_equal(dfx_nth(fx, WK_DISP_SEND, 0)->index, 1);
  assert_int_equal(dfx_nth(fx, WK_DISP_SEND, 0)->deadline_ms, 200);
  assert_int_equal(DFX_INFO(fx, b).retried, 2);
  assert_int_equal(wk_disp_next_deadline(fx->d), 110);
  DFX_TICK(fx, 110);
  DFX_KINDS(fx, "S");
  assert_int_equal(fx->out.items[0].index, 2);
  assert_int_equal(fx->out.items[0].attempt, 2);
}

static void test_no_retry_past_task_deadline(void **state) {
  dfx *fx = *state;
  wk_disp_task_params p = retry_params(5, 400, 400);
  p.task_deadline_ms = 1000;
  uint32_t t = DFX_TASK(fx, 1, &p);
  DFX_ADD(fx, t, 1, true, 0);
  uint64_t id = DFX_SEND_ID(fx, t, 0);
  assert_int_equal(dfx_send_of(fx, t, 0)->deadline_ms, 1000);
  assert_int_equal(fail_at(fx, id, WK_DISP_RETRYABLE, 100), 500); /* 100 + 400 < 1000 */
  id = resend_at(fx, t, 0, 500, 2);
  /* at 600 a retry would be due at 1400 >= 1000: final now */
  (void)DFX_FINISH(fx, id, WK_DISP_RETRYABLE, 600);
  DFX_KINDS(fx, "DT");
  assert_int_equal(fx->out.items[0].attempt, 2);
}

/* Collects `n` backoff delays of a fresh dispatcher with `jitter` and `seed`: n tasks
 * of one call each (so that no window holds a retry back), all failing RETRYABLE at
 * 0; each retry's SEND time is its delay. */
static void draw_delays(wk_disp_jitter jitter, uint64_t seed, int64_t base, int64_t *out,
                        uint32_t n) {
  wk_disp_config cfg = dfx_config();
  cfg.jitter = jitter;
  cfg.rng_seed = seed;
  cfg.max_inflight = 64;
  cfg.max_tasks = 64;
  cfg.max_calls = 256;
  dfx *fx = dfx_new_cfg(&cfg);
  wk_disp_task_params p = retry_params(2, base, base);
  uint32_t t[64];
  uint64_t ids[64];
  assert_true(n <= 64);
  for (uint32_t i = 0; i < n; i++) {
    t[i] = DFX_TASK(fx, i, &p);
    DFX_ADD(fx, t[i], 1, true, 0);
    ids[i] = DFX_SEND_ID(fx, t[i], 0);
  }
  for (uint32_t i = 0; i < n; i++) {
    (void)DFX_FINISH(fx, ids[i], WK_DISP_RETRYABLE, 0);
    DFX_KINDS(fx, "");
  }
  uint32_t got = 0;
  for (int64_t now = 0; now <= base && got < n; now++) {
    DFX_TICK(fx, now);
    for (uint32_t k = 0; k < fx->out.count; k++) {
      const wk_disp_action *s = &fx->out.items[k];
      assert_int_equal(s->kind, WK_DISP_SEND);
      out[s->task_key] = now;
      got++;
    }
  }
  assert_int_equal(got, n);
  wk_disp_destroy(fx->d);
  free(fx);
}

static void test_equal_jitter_is_seeded_and_bounded(void **state) {
  (void)state;
  int64_t a[64], b[64], c[64];
  draw_delays(WK_DISP_JITTER_EQUAL, 7, 1000, a, 64);
  draw_delays(WK_DISP_JITTER_EQUAL, 7, 1000, b, 64);
  draw_delays(WK_DISP_JITTER_EQUAL, 8, 1000, c, 64);
  bool differs = false, spread = false;
  for (uint32_t i = 0; i < 64; i++) {
    assert_true(a[i] >= 500 && a[i] <= 1000);
    assert_int_equal(a[i], b[i]); /* same seed, same delays */
    differs |= a[i] != c[i];
    spread |= a[i] != a[0];
  }
  assert_true(differs);
  assert_true(spread);
}

static void test_full_jitter_is_seeded_and_bounded(void **state) {
  (void)state;
  int64_t a[64], b[64];
  draw_delays(WK_DISP_JITTER_FULL, 99, 1000, a, 64);
  draw_delays(WK_DISP_JITTER_FULL, 99, 1000, b, 64);
  uint32_t low = 0;
  for (uint32_t i = 0; i < 64; i++) {
    assert_true(a[i] >= 0 && a[i] <= 1000);
    assert_int_equal(a[i], b[i]);
    low += a[i] < 500;
  }
  /* below half of the base happens with full jitter (about half of the draws) */
  assert_true(low >= 16 && low <= 48);
}

/* ---- lib/wk_rng.h ---------------------------------------------------------------------- */

static void test_rng_is_deterministic_and_uniform(void **state) {
  (void)state;
  wk_rng r1, r2, r3;
  wk_rng_seed(&r1, 0);
  wk_rng_seed(&r2, 0);
  wk_rng_seed(&r3, 1);
  bool differs = false;
  for (int i = 0; i < 100; i++) {
    uint64_t x = wk_rng_next(&r1);
    assert_true(x == wk_rng_next(&r2));
    differs |= x != wk_rng_next(&r3);
  }
  assert_true(differs);
  uint32_t hist[10] = {0};
  for (int i = 0; i < 100000; i++) {
    uint64_t v = wk_rng_below(&r1, 10);
    assert_true(v < 10);
    hist[v]++;
  }
  for (int i = 0; i < 10; i++) assert_true(hist[i] > 9000 && hist[i] < 11000);
  assert_int_equal(wk_rng_below(&r1, 0), 0);
  assert_int_equal(wk_rng_below(&r1, 1), 0);
  bool lo = false, hi = false;
  for (int i = 0; i < 1000; i++) {
    int64_t v = wk_rng_range(&r1, -3, 3);
    assert_true(v >= -3 && v <= 3);
    lo |= v == -3;
    hi |= v == 3;
  }
  assert_true(lo && hi);
  assert_int_equal(wk_rng_range(&r1, 5, 5), 5);
  (void)wk_rng_range(&r1, INT64_MIN, INT64_MAX);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_backoff_grows_and_is_capped, dfx_setup, dfx_teardown),
      cmocka_unit_test_setup_teardown(test_multiplier_defaults_and_backoff_zero, dfx_setup,
                                      dfx_teardown),
      cmocka_unit_test_setup_teardown(test_which_results_are_retried, dfx_setup, dfx_teardown),
      cmocka_unit_test_setup_teardown(test_no_retry_past_task_deadline, dfx_setup, dfx_teardown),
      cmocka_unit_test(test_equal_jitter_is_seeded_and_bounded),
      cmocka_unit_test(test_full_jitter_is_seeded_and_bounded),
      cmocka_unit_test(test_rng_is_deterministic_and_uniform),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

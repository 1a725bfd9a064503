/* test_dispatcher_deadline.c: attempt deadlines: min(now + call_timeout, task
 * deadline) on every SEND, the tick turning a silent attempt into CANCEL + TIMEOUT,
 * timeouts retried with a fresh deadline, late answers ignored, next_deadline. */
#include "test_dispatcher_fixture.h"

static void test_send_carries_the_deadline(void **state) {
  dfx *fx = *state;
  wk_disp_task_params p = dfx_params();
  p.failure_policy = WK_CALL_CONTINUE;
  p.max_failed_calls = 100;
  p.call_timeout_ms = 100;
  p.task_deadline_ms = 250;
  uint32_t t = DFX_TASK(fx, 1, &p);
  DFX_ADD(fx, t, 3, true, 0);
  assert_int_equal(dfx_send_of(fx, t, 0)->deadline_ms, 100);
  uint64_t c0 = DFX_SEND_ID(fx, t, 0);
  assert_int_equal(wk_disp_next_deadline(fx->d), 100);
  (void)DFX_FINISH(fx, c0, WK_DISP_OK, 200);
  DFX_KINDS(fx, "DS");
  assert_int_equal(fx->out.items[1].deadline_ms, 250); /* capped by the task deadline */

  /* no timeout, no task deadline: INT64_MAX and nothing in the timer heap */
  wk_disp_task_params q = dfx_params();
  uint32_t t2 = DFX_TASK(fx, 2, &q);
  DFX_ADD(fx, t2, 1, true, 0);
  DFX_KINDS(fx, "S");
  assert_int_equal(fx->out.items[0].deadline_ms, INT64_MAX);
  /* only a task deadline */
  q.task_deadline_ms = 5000;
  uint32_t t3 = DFX_TASK(fx, 3, &q);
  DFX_ADD(fx, t3, 1, true, 0);
  assert_int_equal(fx->out.items[0].deadline_ms, 5000);
}

static void test_tick_times_out_a_silent_call(void **state) {
  dfx *fx = *state;
  wk_disp_task_params p = dfx_params();
  p.call_timeout_ms = 100;
  uint32_t t = DFX_TASK(fx, 8, &p);
  DFX_ADD(fx, t, 1, true, 10);
  uint64_t c0 = DFX_SEND_ID(fx, t, 0);
  assert_int_equal(wk_disp_next_deadline(fx->d), 110);
  DFX_TICK(fx, 109);
  DFX_KINDS(fx, "");
  DFX_TICK(fx, 110);
  DFX_KINDS(fx, "XDT");
  assert_int_equal(fx->out.items[0].call_id, c0);
  assert_int_equal(fx->out.items[0].reason, WK_DISP_CANCEL_DEADLINE);
  assert_int_equal(fx->out.items[1].result, WK_DISP_TIMEOUT);
  assert_int_equal(fx->out.items[1].call_id, c0);
  assert_false(fx->out.items[2].ok);
  assert_int_equal(wk_disp_stats_get(fx->d).timeouts, 1);
  /* the executor answers after all: ignored */
  assert_int_equal(DFX_FINISH(fx, c0, WK_DISP_OK, 120), WK_ERR_STALE);
  DFX_KINDS(fx, "");
  assert_int_equal(wk_disp_next_deadline(fx->d), INT64_MAX);
}

static void test_timeout_retry_gets_a_fresh_deadline(void **state) {
  dfx *fx = *state;
  wk_disp_task_params p = dfx_params();
  p.call_timeout_ms = 100;
  p.retry.max_attempts = 3;
  p.retry.retry_on_timeout = true;
  p.retry.initial_backoff_ms = 20;
  uint32_t t = DFX_TASK(fx, 8, &p);
  DFX_ADD(fx, t, 1, true, 0);
  uint64_t c0 = DFX_SEND_ID(fx, t, 0);
  DFX_TICK(fx, 100);
  DFX_KINDS(fx, "X");
  assert_int_equal(wk_disp_next_deadline(fx->d), 120);
  DFX_TICK(fx, 120);
  DFX_KINDS(fx, "S");
  uint64_t c1 = fx->out.items[0].call_id;
  assert_int_not_equal(c1, c0);
  assert_int_equal(fx->out.items[0].attempt, 2);
  assert_int_equal(fx->out.items[0].deadline_ms, 220);
  /* the first attempt's late answer does not complete the call */
  assert_int_equal(DFX_FINISH(fx, c0, WK_DISP_OK, 130), WK_ERR_STALE);
  DFX_KINDS(fx, "");
  assert_int_equal(DFX_FINISH(fx, c1, WK_DISP_OK, 140), WK_OK);
  DFX_KINDS(fx, "DT");
  assert_int_equal(fx->out.items[0].attempt, 2);
  assert_true(fx->out.items[1].ok);
}

static void test_next_deadline_takes_the_earliest_timer(void **state) {
  dfx *fx = *state;
  wk_disp_config cfg = dfx_config();
  cfg.window_initial = 8; /* the retry's halving leaves room for it */
  dfx_reconfigure(fx, &cfg);
  assert_int_equal(wk_disp_next_deadline(fx->d), INT64_MAX);
  wk_disp_task_params p = dfx_params();
  p.failure_policy = WK_CALL_CONTINUE;
  p.max_failed_calls = 10;
  p.call_timeout_ms = 1000;
  p.retry.max_attempts = 2;
  p.retry.initial_backoff_ms = 300;
  uint32_t t = DFX_TASK(fx, 8, &p);
  DFX_ADD(fx, t, 2, true, 0);
  uint64_t c0 = DFX_SEND_ID(fx, t, 0), c1 = DFX_SEND_ID(fx, t, 1);
  assert_int_equal(wk_disp_next_deadline(fx->d), 1000);
  (void)DFX_FINISH(fx, c0, WK_DISP_RETRYABLE, 50); /* backoff to 350 */
  assert_int_equal(wk_disp_next_deadline(fx->d), 350);
  DFX_TICK(fx, 350);
  DFX_KINDS(fx, "S"); /* deadline 1350 */
  assert_int_equal(wk_disp_next_deadline(fx->d), 1000);
  (void)DFX_FINISH(fx, c1, WK_DISP_OK, 400);
  assert_int_equal(wk_disp_next_deadline(fx->d), 1350);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_send_carries_the_deadline, dfx_setup, dfx_teardown),
      cmocka_unit_test_setup_teardown(test_tick_times_out_a_silent_call, dfx_setup, dfx_teardown),
      cmocka_unit_test_setup_teardown(test_timeout_retry_gets_a_fresh_deadline, dfx_setup,
                                      dfx_teardown),
      cmocka_unit_test_setup_teardown(test_next_deadline_takes_the_earliest_timer, dfx_setup,
                                      dfx_teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

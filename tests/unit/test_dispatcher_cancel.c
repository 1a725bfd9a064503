/* test_dispatcher_cancel.c: cancelling a task (CANCEL for every attempt in flight,
 * waiting parents and children included; everything else dropped; nothing but those
 * CANCELs afterwards, even actions decided before but not yet emitted), removing
 * tasks, and the capacity a cancel frees going to other tasks. */
#include "test_dispatcher_fixture.h"

static void test_cancel_task_cancels_and_silences(void **state) {
  dfx *fx = *state;
  wk_disp_config cfg = dfx_config();
  cfg.max_inflight = 4;
  cfg.window_initial = 8;
  dfx_reconfigure(fx, &cfg);
  wk_disp_task_params p = dfx_params();
  p.failure_policy = WK_CALL_CONTINUE;
  p.max_failed_calls = 100;
  p.retry.max_attempts = 3;
  p.retry.initial_backoff_ms = 100;
  p.call_timeout_ms = 1000;
  uint32_t t = DFX_TASK(fx, 77, &p);
  DFX_ADD(fx, t, 20, false, 0);
  uint64_t c[4];
  for (uint32_t i = 0; i < 4; i++) c[i] = DFX_SEND_ID(fx, t, i);
  (void)DFX_FINISH(fx, c[0], WK_DISP_RETRYABLE, 1); /* backoff */
  uint64_t c4 = dfx_nth(fx, WK_DISP_SEND, 0)->call_id;
  (void)DFX_SUBCALLS(fx, c[1], 3, 2); /* waiting parent, children in flight */
  wk_disp_task_info before = DFX_INFO(fx, t);
  assert_int_equal(before.backoff, 1);
  assert_int_equal(before.waiting, 1);
  assert_int_equal(before.inflight, 4); /* c2 c3 c4 + one child (window 4 after the halving) */

  DFX_CANCEL(fx, t);
  /* in flight: c2, c3, c4, one child; the waiting parent c1: five CANCELs, no more */
  assert_int_equal(dfx_count(fx, WK_DISP_CANCEL), 5);
  assert_int_equal(fx->out.count, 5);
  bool parent_cancelled = false;
  for (uint32_t i = 0; i < 5; i++) {
    const wk_disp_action *x = &fx->out.items[i];
    assert_int_equal(x->task, t);
    assert_int_equal(x->task_key, 77);
    parent_cancelled |= x->call_id == c[1];
  }
  assert_true(parent_cancelled);
  wk_disp_task_info info = DFX_INFO(fx, t);
  assert_true(info.cancelled);
  assert_false(info.ended);
  assert_int_equal(info.inflight + info.waiting + info.backoff + info.ready + info.queued, 0);
  assert_int_equal(info.live_calls, 0);
  assert_int_equal(wk_disp_stats_get(fx->d).inflight, 0);
  assert_int_equal(wk_disp_next_deadline(fx->d), INT64_MAX);
  assert_int_equal(wk_disp_task_queued(fx->d, t), 0);

  /* afterwards: answers are stale, additions refused, ticks and polls silent */
  assert_int_equal(DFX_FINISH(fx, c[2], WK_DISP_OK, 3), WK_ERR_STALE);
  assert_int_equal(DFX_FINISH(fx, c4, WK_DISP_ERROR, 3), WK_ERR_STALE);
  DFX_KINDS(fx, "");
  dfx_reset(fx);
  assert_int_equal(wk_disp_add_calls(fx->d, t, 5, true, 3, &fx->out), WK_ERR_STALE);
  DFX_TICK(fx, 5000);
  DFX_KINDS(fx, "");
  DFX_POLL(fx, 5000);
  DFX_KINDS(fx, "");
  /* idempotent */
  DFX_CANCEL(fx, t);
  DFX_KINDS(fx, "");
  assert_int_equal(wk_disp_remove_task(fx->d, t), WK_OK);
  dfx_reset(fx);
  assert_int_equal(wk_disp_cancel_task(fx->d, t, &fx->out), WK_ERR_NOT_FOUND);
  assert_int_equal(wk_disp_stats_get(fx->d).tasks, 0);
}

static void test_cancel_drops_actions_not_yet_emitted(void **state) {
  dfx *fx = *state;
  wk_disp_task_params p = dfx_params();
  uint32_t t = DFX_TASK(fx, 1, &p);
  DFX_ADD(fx, t, 2, true, 0);
  uint64_t a = DFX_SEND_ID(fx, t, 0), b = DFX_SEND_ID(fx, t, 1);
  fx->out.capacity = 0; /* hold everything back */
  (void)DFX_FINISH(fx, a, WK_DISP_OK, 1);
  (void)DFX_FINISH(fx, b, WK_DISP_OK, 1); /* CALL_DONE x2 and TASK_DONE decided */
  assert_true(wk_disp_pending(fx->d));
  assert_true(DFX_INFO(fx, t).ended);
  DFX_CANCEL(fx, t);
  fx->out.capacity = DFX_BUF;
  DFX_POLL(fx, 2);
  DFX_KINDS(fx, ""); /* neither the CALL_DONEs nor the TASK_DONE come out */
  assert_false(wk_disp_pending(fx->d));

  /* the same for a removed task */
  uint32_t t2 = DFX_TASK(fx, 2, &p);
  DFX_ADD(fx, t2, 1, true, 3);
  uint64_t x = DFX_SEND_ID(fx, t2, 0);
  fx->out.capacity = 0;
  (void)DFX_FINISH(fx, x, WK_DISP_OK, 4);
  assert_int_equal(wk_disp_remove_task(fx->d, t2), WK_OK);
  fx->out.capacity = DFX_BUF;
  DFX_POLL(fx, 5);
  DFX_KINDS(fx, "");
}

static void test_cancel_frees_capacity_for_other_tasks(void **state) {
  dfx *fx = *state;
  wk_disp_config cfg = dfx_config();
  cfg.max_inflight = 2;
  dfx_reconfigure(fx, &cfg);
  wk_disp_task_params p = dfx_params();
  uint32_t a = DFX_TASK(fx, 1, &p), b = DFX_TASK(fx, 2, &p);
  DFX_ADD(fx, a, 5, true, 0);
  DFX_KINDS(fx, "SS");
  DFX_ADD(fx, b, 5, true, 0);
  DFX_KINDS(fx, "");
  DFX_CANCEL(fx, a);
  DFX_KINDS(fx, "XX"); /* no `now`: SENDs wait for the poll it asks for */
  assert_true(fx->out.more);
  DFX_POLL(fx, 1);
  DFX_KINDS(fx, "SS");
  assert_int_equal(fx->out.items[0].task, b);
  assert_int_equal(fx->out.items[1].task, b);
}

static void test_remove_live_task_cancels_it(void **state) {
  dfx *fx = *state;
  wk_disp_task_params p = dfx_params();
  uint32_t t = DFX_TASK(fx, 1, &p);
  DFX_ADD(fx, t, 5, true, 0);
  uint64_t a = DFX_SEND_ID(fx, t, 0), b = DFX_SEND_ID(fx, t, 1);
  assert_int_equal(wk_disp_remove_task(fx->d, t), WK_OK);
  DFX_INV(fx);
  assert_true(wk_disp_pending(fx->d));
  DFX_POLL(fx, 1);
  DFX_KINDS(fx, "XX"); /* the executors still hear about it */
  assert_int_equal(fx->out.items[0].task_key, 1);
  assert_true((fx->out.items[0].call_id == a && fx->out.items[1].call_id == b) ||
              (fx->out.items[0].call_id == b && fx->out.items[1].call_id == a));
  assert_int_equal(DFX_FINISH(fx, a, WK_DISP_OK, 2), WK_ERR_STALE);
  /* the handle is gone; the record is reused under a new generation */
  wk_disp_task_info info;
  assert_int_equal(wk_disp_task_info_get(fx->d, t, &info), WK_ERR_NOT_FOUND);
  uint32_t t2 = DFX_TASK(fx, 2, &p);
  assert_int_not_equal(t2, t);
}

static void test_cancel_after_task_done(void **state) {
  dfx *fx = *state;
  wk_disp_task_params p = dfx_params();
  uint32_t t = DFX_TASK(fx, 1, &p);
  DFX_ADD(fx, t, 1, true, 0);
  (void)DFX_FINISH(fx, DFX_SEND_ID(fx, t, 0), WK_DISP_OK, 1);
  DFX_KINDS(fx, "DT");
  DFX_CANCEL(fx, t);
  DFX_KINDS(fx, "");
  assert_true(DFX_INFO(fx, t).cancelled);
  assert_int_equal(wk_disp_remove_task(fx->d, t), WK_OK);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_cancel_task_cancels_and_silences, dfx_setup,
                                      dfx_teardown),
      cmocka_unit_test_setup_teardown(test_cancel_drops_actions_not_yet_emitted, dfx_setup,
                                      dfx_teardown),
      cmocka_unit_test_setup_teardown(test_cancel_frees_capacity_for_other_tasks, dfx_setup,
                                      dfx_teardown),
      cmocka_unit_test_setup_teardown(test_remove_live_task_cancels_it, dfx_setup, dfx_teardown),
      cmocka_unit_test_setup_teardown(test_cancel_after_task_done, dfx_setup, dfx_teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

/* test_dispatcher_failure.c: the task failure policies. FAIL_FAST: the first call that
 * ends without OK cancels the rest and ends the task; CONTINUE: failures up to
 * max_failed_calls are tolerated, one more ends the task at once; the end needs
 * `last`; each index gets exactly one CALL_DONE, all before the TASK_DONE. */
#include "test_dispatcher_fixture.h"

static wk_disp_config roomy(void) {
  wk_disp_config cfg = dfx_config();
  cfg.max_inflight = 4;
  cfg.window_initial = 8;
  return cfg;
}

static void test_fail_fast_cancels_the_rest(void **state) {
  dfx *fx = *state;
  wk_disp_config cfg = roomy();
  dfx_reconfigure(fx, &cfg);
  wk_disp_task_params p = dfx_params();
  uint32_t t = DFX_TASK(fx, 42, &p);
  DFX_ADD(fx, t, 10, true, 0);
  uint64_t id[4];
  for (uint32_t i = 0; i < 4; i++) id[i] = DFX_SEND_ID(fx, t, i);

  assert_int_equal(DFX_FINISH(fx, id[2], WK_DISP_ERROR, 5), WK_OK);
  DFX_KINDS(fx, "DXXXT");
  const wk_disp_action *d = &fx->out.items[0];
  assert_int_equal(d->index, 2);
  assert_int_equal(d->result, WK_DISP_ERROR);
  assert_int_equal(d->attempt, 1);
  assert_int_equal(d->task_key, 42);
  bool cancelled[4] = {false, false, false, false};
  for (uint32_t k = 0; k < 3; k++) {
    const wk_disp_action *x = dfx_nth(fx, WK_DISP_CANCEL, k);
    assert_int_equal(x->reason, WK_DISP_CANCEL_TASK);
    assert_int_equal(x->task, t);
    for (uint32_t i = 0; i < 4; i++) {
      if (x->call_id == id[i]) {
        assert_false(cancelled[i]);
        cancelled[i] = true;
        assert_int_equal(x->index, i);
      }
    }
  }
  assert_true(cancelled[0] && cancelled[1] && cancelled[3] && !cancelled[2]);
  const wk_disp_action *td = dfx_nth(fx, WK_DISP_TASK_DONE, 0);
  assert_false(td->ok);
  assert_int_equal(td->failed, 1);
  assert_int_equal(td->task_key, 42);

  wk_disp_task_info info = DFX_INFO(fx, t);
  assert_true(info.ended);
  assert_false(info.ok);
  assert_int_equal(info.inflight, 0);
  assert_int_equal(info.queued, 0);
  assert_int_equal(info.live_calls, 0);
  assert_int_equal(wk_disp_stats_get(fx->d).inflight, 0);
  /* cancelled attempts answering late are ignored; nothing more is sent */
  assert_int_equal(DFX_FINISH(fx, id[0], WK_DISP_OK, 6), WK_ERR_STALE);
  DFX_KINDS(fx, "");
  DFX_POLL(fx, 7);
  DFX_KINDS(fx, "");
  assert_int_equal(wk_disp_remove_task(fx->d, t), WK_OK);
  DFX_POLL(fx, 7);
  DFX_KINDS(fx, "");
}

static void test_fail_fast_on_exhausted_retries_drops_backoffs(void **state) {
  dfx *fx = *state;
  wk_disp_config cfg = roomy();
  dfx_reconfigure(fx, &cfg);
  wk_disp_task_params p = dfx_params();
  p.retry.max_attempts = 2;
  p.retry.initial_backoff_ms = 50;
  uint32_t t = DFX_TASK(fx, 1, &p);
  DFX_ADD(fx, t, 3, true, 0);
  uint64_t c0 = DFX_SEND_ID(fx, t, 0), c1 = DFX_SEND_ID(fx, t, 1), c2 = DFX_SEND_ID(fx, t, 2);
  (void)DFX_FINISH(fx, c0, WK_DISP_RETRYABLE, 1); /* backoff until 51 */
  DFX_KINDS(fx, "");
  assert_int_equal(wk_disp_next_deadline(fx->d), 51);
  (void)DFX_FINISH(fx, c1, WK_DISP_OK, 2);
  DFX_KINDS(fx, "D");
  DFX_TICK(fx, 51);
  DFX_KINDS(fx, "S");
  uint64_t c0b = fx->out.items[0].call_id;
  (void)DFX_FINISH(fx, c0b, WK_DISP_RETRYABLE, 60); /* second attempt: exhausted */
  DFX_KINDS(fx, "DXT");
  assert_int_equal(fx->out.items[0].result, WK_DISP_RETRYABLE);
  assert_int_equal(fx->out.items[0].attempt, 2);
  assert_int_equal(fx->out.items[1].call_id, c2);
  assert_int_equal(wk_disp_next_deadline(fx->d), INT64_MAX);

  /* a call in backoff when another fails permanently is dropped with the task */
  uint32_t t2 = DFX_TASK(fx, 2, &p);
  DFX_ADD(fx, t2, 2, true, 100);
  uint64_t d0 = DFX_SEND_ID(fx, t2, 0), d1 = DFX_SEND_ID(fx, t2, 1);
  (void)DFX_FINISH(fx, d0, WK_DISP_RETRYABLE, 101);
  assert_int_equal(DFX_INFO(fx, t2).backoff, 1);
  (void)DFX_FINISH(fx, d1, WK_DISP_ERROR, 102);
  DFX_KINDS(fx, "DT"); /* nothing in flight to cancel */
  assert_int_equal(DFX_INFO(fx, t2).backoff, 0);
  assert_int_equal(wk_disp_next_deadline(fx->d), INT64_MAX);
  DFX_TICK(fx, 1000);
  DFX_KINDS(fx, "");
}

static void test_continue_tolerates_then_fails(void **state) {
  dfx *fx = *state;
  wk_disp_config cfg = roomy();
  dfx_reconfigure(fx, &cfg);
  wk_disp_task_params p = dfx_params();
  p.failure_policy = WK_CALL_CONTINUE;
  p.max_failed_calls = 2;
  uint32_t t = DFX_TASK(fx, 9, &p);
  dfx_q q = {{0}, 0, 0};
  DFX_ADD(fx, t, 10, true, 0);
  dfx_q_sends(&q, fx);
  (void)DFX_FINISH(fx, dfx_q_pop(&q), WK_DISP_ERROR, 1);
  DFX_KINDS(fx, "DS");
  dfx_q_sends(&q, fx);
  (void)DFX_FINISH(fx, dfx_q_pop(&q), WK_DISP_EXECUTOR_LOST, 1);
  DFX_KINDS(fx, "DS");
  dfx_q_sends(&q, fx);
  assert_false(DFX_INFO(fx, t).ended);
  assert_int_equal(DFX_INFO(fx, t).failed, 2);
  /* the third failure passes max_failed_calls: cancel the 3 others, fail at once */
  (void)DFX_FINISH(fx, dfx_q_pop(&q), WK_DISP_ERROR, 2);
  DFX_KINDS(fx, "DXXXT");
  const wk_disp_action *td = dfx_nth(fx, WK_DISP_TASK_DONE, 0);
  assert_false(td->ok);
  assert_int_equal(td->failed, 3);
}

static void test_continue_ends_ok_with_tolerated_failures(void **state) {
  dfx *fx = *state;
  wk_disp_config cfg = roomy();
  dfx_reconfigure(fx, &cfg);
  wk_disp_task_params p = dfx_params();
  p.failure_policy = WK_CALL_CONTINUE;
  p.max_failed_calls = 2;
  uint32_t t = DFX_TASK(fx, 9, &p);
  dfx_q q = {{0}, 0, 0};
  DFX_ADD(fx, t, 12, false, 0);
  dfx_q_sends(&q, fx);
  uint32_t done_count[12] = {0};
  uint32_t n = 0, tasks_done = 0;
  while (dfx_q_len(&q) > 0) {
    wk_disp_result r = (n == 3 || n == 7) ? WK_DISP_ERROR : WK_DISP_OK;
    (void)DFX_FINISH(fx, dfx_q_pop(&q), r, 1);
    n++;
    for (uint32_t k = 0; k < fx->out.count; k++) {
      const wk_disp_action *a = &fx->out.items[k];
      if (a->kind == WK_DISP_CALL_DONE) done_count[a->index]++;
      if (a->kind == WK_DISP_TASK_DONE) tasks_done++;
    }
    dfx_q_sends(&q, fx);
  }
  /* every call final, but `last` not given: not over yet */
  assert_int_equal(tasks_done, 0);
  assert_int_equal(DFX_INFO(fx, t).finished, 12);
  DFX_ADD(fx, t, 0, true, 2);
  DFX_KINDS(fx, "T");
  assert_true(fx->out.items[0].ok);
  assert_int_equal(fx->out.items[0].failed, 2);
  for (uint32_t i = 0; i < 12; i++) assert_int_equal(done_count[i], 1);
  wk_disp_task_info info = DFX_INFO(fx, t);
  assert_int_equal(info.succeeded, 10);
  assert_int_equal(info.failed, 2);
}

static void test_task_done_comes_after_its_call_dones(void **state) {
  dfx *fx = *state;
  wk_disp_task_params p = dfx_params();
  p.failure_policy = WK_CALL_CONTINUE;
  p.max_failed_calls = 5;
  uint32_t t = DFX_TASK(fx, 3, &p);
  DFX_ADD(fx, t, 2, true, 0);
  uint64_t a = DFX_SEND_ID(fx, t, 0), b = DFX_SEND_ID(fx, t, 1);
  /* with no room, both results are decided before anything is emitted */
  fx->out.capacity = 0;
  (void)DFX_FINISH(fx, a, WK_DISP_OK, 1);
  assert_true(fx->out.more);
  (void)DFX_FINISH(fx, b, WK_DISP_ERROR, 1);
  assert_true(fx->out.more);
  fx->out.capacity = DFX_BUF;
  DFX_POLL(fx, 2);
  DFX_KINDS(fx, "DDT");
  assert_int_equal(fx->out.items[0].index, 0);
  assert_int_equal(fx->out.items[1].index, 1);
  assert_true(fx->out.items[2].ok);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_fail_fast_cancels_the_rest, dfx_setup, dfx_teardown),
      cmocka_unit_test_setup_teardown(test_fail_fast_on_exhausted_retries_drops_backoffs, dfx_setup,
                                      dfx_teardown),
      cmocka_unit_test_setup_teardown(test_continue_tolerates_then_fails, dfx_setup, dfx_teardown),
      cmocka_unit_test_setup_teardown(test_continue_ends_ok_with_tolerated_failures, dfx_setup,
                                      dfx_teardown),
      cmocka_unit_test_setup_teardown(test_task_done_comes_after_its_call_dones, dfx_setup,
                                      dfx_teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

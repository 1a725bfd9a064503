/* test_dispatcher_admission.c: configuration, tasks and their errors, the global
 * admission limit and its changes, the per-task window (start, growth, halving),
 * streaming additions and backpressure, and the bounded but resumable output buffer. */
#include "test_dispatcher_fixture.h"

/* ---- configuration ------------------------------------------------------------------- */

static void test_config_validation(void **state) {
  (void)state;
  wk_disp_config cfg;
  wk_disp_config_default(&cfg);
  const char *why = "x";
  assert_int_equal(wk_disp_config_validate(&cfg, &why), WK_OK);
  assert_null(why);

  wk_disp_config bad = cfg;
  bad.window_initial = 0;
  assert_int_equal(wk_disp_config_validate(&bad, &why), WK_ERR_INVALID_ARGUMENT);
  assert_non_null(why);
  assert_null(wk_disp_create(&bad));
  bad = cfg;
  bad.window_max = bad.window_initial - 1;
  assert_int_equal(wk_disp_config_validate(&bad, &why), WK_ERR_INVALID_ARGUMENT);
  bad = cfg;
  bad.max_depth = WK_DISP_DEPTH_MAX + 1;
  assert_int_equal(wk_disp_config_validate(&bad, &why), WK_ERR_INVALID_ARGUMENT);
  bad = cfg;
  bad.max_tasks = 0;
  assert_int_equal(wk_disp_config_validate(&bad, &why), WK_ERR_INVALID_ARGUMENT);
  bad = cfg;
  bad.max_tasks = WK_DISP_TASKS_MAX + 1;
  assert_int_equal(wk_disp_config_validate(&bad, &why), WK_ERR_INVALID_ARGUMENT);
  bad = cfg;
  bad.max_calls = 0;
  assert_int_equal(wk_disp_config_validate(&bad, &why), WK_ERR_INVALID_ARGUMENT);
  bad = cfg;
  bad.jitter = (wk_disp_jitter)7;
  assert_int_equal(wk_disp_config_validate(&bad, &why), WK_ERR_INVALID_ARGUMENT);
  assert_int_equal(wk_disp_config_validate(NULL, NULL), WK_ERR_INVALID_ARGUMENT);

  /* max_inflight 0 is allowed: an empty pool sends nothing until it grows */
  bad = cfg;
  bad.max_inflight = 0;
  assert_int_equal(wk_disp_config_validate(&bad, NULL), WK_OK);
  assert_string_equal(wk_disp_result_name(WK_DISP_EXECUTOR_LOST), "EXECUTOR_LOST");
  assert_string_equal(wk_disp_result_name((wk_disp_result)99), "UNKNOWN");
  assert_string_equal(wk_disp_action_kind_name(WK_DISP_SUBCALLS_COMPLETE), "SUBCALLS_COMPLETE");
  assert_string_equal(wk_disp_action_kind_name((wk_disp_action_kind)0), "UNKNOWN");
}

static void test_empty_pool_sends_nothing_until_capacity(void **state) {
  dfx *fx = *state;
  wk_disp_config cfg = dfx_config();
  cfg.max_inflight = 0;
  dfx_reconfigure(fx, &cfg);
  wk_disp_task_params p = dfx_params();
  uint32_t t = DFX_TASK(fx, 1, &p);
  DFX_ADD(fx, t, 3, true, 0);
  DFX_KINDS(fx, "");
  assert_false(fx->out.more);
  wk_disp_set_capacity(fx->d, 1);
  DFX_POLL(fx, 1);
  DFX_KINDS(fx, "S");
  assert_int_equal(wk_disp_stats_get(fx->d).capacity, 1);
}

/* ---- tasks --------------------------------------------------------------------------- */

static void test_add_task_errors_and_limits(void **state) {
  dfx *fx = *state;
  uint32_t h = 0;
  wk_disp_task_params p = dfx_params();
  assert_int_equal(wk_disp_add_task(fx->d, 1, NULL, &h), WK_ERR_INVALID_ARGUMENT);
  assert_int_equal(wk_disp_add_task(fx->d, 1, &p, NULL), WK_ERR_INVALID_ARGUMENT);
  wk_disp_task_params bad = p;
  bad.failure_policy = (wk_call_failure_policy)5;
  assert_int_equal(wk_disp_add_task(fx->d, 1, &bad, &h), WK_ERR_INVALID_ARGUMENT);
  bad = p;
  bad.retry.max_attempts = WK_DISP_ATTEMPTS_MAX + 1;
  assert_int_equal(wk_disp_add_task(fx->d, 1, &bad, &h), WK_ERR_INVALID_ARGUMENT);
  bad = p;
  bad.retry.initial_backoff_ms = -1;
  assert_int_equal(wk_disp_add_task(fx->d, 1, &bad, &h), WK_ERR_INVALID_ARGUMENT);
  bad = p;
  bad.retry.backoff_multiplier_milli = 500;
  assert_int_equal(wk_disp_add_task(fx->d, 1, &bad, &h), WK_ERR_INVALID_ARGUMENT);
  bad = p;
  bad.call_timeout_ms = -5;
  assert_int_equal(wk_disp_add_task(fx->d, 1, &bad, &h), WK_ERR_INVALID_ARGUMENT);
  bad = p;
  bad.task_deadline_ms = -5;
  assert_int_equal(wk_disp_add_task(fx->d, 1, &bad, &h), WK_ERR_INVALID_ARGUMENT);
  assert_int_equal(h, 0);
  assert_int_equal(wk_disp_stats_get(fx->d).tasks, 0);
  DFX_INV(fx);

  /* max_tasks = 8: the ninth is NO_SLOT; removing one makes room */
  uint32_t hs[8];
  for (uint32_t i = 0; i < 8; i++) hs[i] = DFX_TASK(fx, 100 + i, &p);
  assert_int_equal(wk_disp_add_task(fx->d, 999, &p, &h), WK_ERR_NO_SLOT);
  assert_int_equal(wk_disp_remove_task(fx->d, hs[3]), WK_OK);
  DFX_INV(fx);
  assert_int_equal(wk_disp_remove_task(fx->d, hs[3]), WK_ERR_NOT_FOUND);
  uint32_t again = DFX_TASK(fx, 999, &p);
  assert_int_not_equal(again, hs[3]); /* same record, new generation */
  wk_disp_task_info info;
  assert_int_equal(wk_disp_task_info_get(fx->d, hs[3], &info), WK_ERR_NOT_FOUND);
  assert_int_equal(DFX_INFO(fx, again).task_key, 999);
  assert_int_equal(wk_disp_task_info_get(fx->d, 0, &info), WK_ERR_NOT_FOUND);
  assert_int_equal(wk_disp_task_info_get(fx->d, 0xffffffffu, &info), WK_ERR_NOT_FOUND);
  /* the parameters as registered (normalised), by handle; none for a freed handle */
  wk_disp_task_params got;
  assert_int_equal(wk_disp_task_params_get(fx->d, again, &got), WK_OK);
  assert_int_equal(got.task_deadline_ms, p.task_deadline_ms);
  assert_int_equal(got.call_timeout_ms, p.call_timeout_ms);
  assert_int_equal(got.failure_policy, p.failure_policy);
  assert_int_equal(wk_disp_task_params_get(fx->d, hs[3], &got), WK_ERR_NOT_FOUND);
}

static void test_add_calls_errors(void **state) {
  dfx *fx = *state;
  wk_disp_task_params p = dfx_params();
  uint32_t t = DFX_TASK(fx, 7, &p);
  dfx_reset(fx);
  assert_int_equal(wk_disp_add_calls(fx->d, t ^ (1u << 25), 1, false, 0, &fx->out),
                   WK_ERR_NOT_FOUND);
  assert_int_equal(wk_disp_add_calls(fx->d, t, 1, false, 0, NULL), WK_ERR_INVALID_ARGUMENT);
  DFX_ADD(fx, t, 2, false, 0);
  DFX_KINDS(fx, "SS");
  assert_int_equal(wk_disp_add_calls(fx->d, t, UINT32_MAX, false, 0, &fx->out),
                   WK_ERR_INVALID_ARGUMENT);
  DFX_ADD(fx, t, 1, true, 0);
  dfx_reset(fx);
  assert_int_equal(wk_disp_add_calls(fx->d, t, 1, false, 0, &fx->out), WK_ERR_INVALID_ARGUMENT);
  assert_int_equal(wk_disp_add_calls(fx->d, t, 0, true, 0, &fx->out), WK_ERR_INVALID_ARGUMENT);
  assert_int_equal(DFX_INFO(fx, t).added, 3);
  DFX_INV(fx);
}

static void test_empty_task_ends_at_once(void **state) {
  dfx *fx = *state;
  wk_disp_task_params p = dfx_params();
  uint32_t t = DFX_TASK(fx, 77, &p);
  DFX_ADD(fx, t, 0, true, 5);
  DFX_KINDS(fx, "T");
  const wk_disp_action *a = dfx_nth(fx, WK_DISP_TASK_DONE, 0);
  assert_true(a->ok);
  assert_int_equal(a->task, t);
  assert_int_equal(a->task_key, 77);
  assert_int_equal(a->failed, 0);
  assert_true(DFX_INFO(fx, t).ended);
  /* ended: more calls are STALE, nothing is queued */
  dfx_reset(fx);
  assert_int_equal(wk_disp_add_calls(fx->d, t, 1, false, 6, &fx->out), WK_ERR_STALE);
  assert_int_equal(wk_disp_task_queued(fx->d, t), 0);
  assert_int_equal(wk_disp_remove_task(fx->d, t), WK_OK);
  DFX_INV(fx);
}

static void test_streaming_and_backpressure(void **state) {
  dfx *fx = *state;
  wk_disp_config cfg = dfx_config();
  cfg.max_inflight = 2;
  dfx_reconfigure(fx, &cfg);
  wk_disp_task_params p = dfx_params();
  uint32_t t = DFX_TASK(fx, 5, &p);
  dfx_q q = {{0}, 0, 0};
  DFX_ADD(fx, t, 10, false, 0);
  DFX_KINDS(fx, "SS");
  dfx_q_sends(&q, fx);
  assert_int_equal(wk_disp_task_queued(fx->d, t), 8);
  assert_int_equal(DFX_FINISH(fx, dfx_q_pop(&q), WK_DISP_OK, 1), WK_OK);
  DFX_KINDS(fx, "DS");
  assert_non_null(dfx_send_of(fx, t, 2));
  dfx_q_sends(&q, fx);
  assert_int_equal(wk_disp_task_queued(fx->d, t), 7);
  /* the producer adds more while below its low-water mark: indices continue */
  DFX_ADD(fx, t, 5, false, 2);
  DFX_KINDS(fx, "");
  assert_int_equal(wk_disp_task_queued(fx->d, t), 12);
  assert_int_equal(DFX_INFO(fx, t).added, 15);
  /* every index is sent once, in order; no TASK_DONE before `last` */
  uint32_t next = 3, done = 1;
  while (dfx_q_len(&q) > 0) {
    (void)DFX_FINISH(fx, dfx_q_pop(&q), WK_DISP_OK, 3);
    assert_int_equal(dfx_count(fx, WK_DISP_CALL_DONE), 1);
    assert_int_equal(dfx_nth(fx, WK_DISP_CALL_DONE, 0)->index, done);
    done++;
    assert_int_equal(dfx_count(fx, WK_DISP_TASK_DONE), 0);
    const wk_disp_action *s = dfx_nth(fx, WK_DISP_SEND, 0);
    if (s) assert_int_equal(s->index, next++);
    dfx_q_sends(&q, fx);
  }
  assert_int_equal(next, 15);
  assert_int_equal(DFX_INFO(fx, t).finished, 15);
  assert_false(DFX_INFO(fx, t).ended);
  DFX_ADD(fx, t, 0, true, 6);
  DFX_KINDS(fx, "T");
  assert_true(fx->out.items[0].ok);
}

/* ---- admission and windows ------------------------------------------------------------ */

static void test_global_admission_and_capacity_changes(void **state) {
  dfx *fx = *state;
  wk_disp_config cfg = dfx_config();
  cfg.window_initial = 8;
  dfx_reconfigure(fx, &cfg);
  wk_disp_task_params p = dfx_params();
  uint32_t t = DFX_TASK(fx, 1, &p);
  dfx_q q = {{0}, 0, 0};
  DFX_ADD(fx, t, 20, true, 0);
  DFX_KINDS(fx, "SSSS"); /* capacity 4 */
  dfx_q_sends(&q, fx);
  assert_int_equal(wk_disp_stats_get(fx->d).inflight, 4);
  DFX_POLL(fx, 1);
  DFX_KINDS(fx, ""); /* nothing while full */
  (void)DFX_FINISH(fx, dfx_q_pop(&q), WK_DISP_OK, 2);
  DFX_KINDS(fx, "DS");
  dfx_q_sends(&q, fx);
  /* the pool grows: two more at the next poll */
  wk_disp_set_capacity(fx->d, 6);
  DFX_POLL(fx, 3);
  DFX_KINDS(fx, "SS");
  dfx_q_sends(&q, fx);
  assert_int_equal(wk_disp_stats_get(fx->d).inflight, 6);
  /* the pool shrinks below what is in flight: nothing is cancelled, and nothing is
   * sent until fewer than 2 remain */
  wk_disp_set_capacity(fx->d, 2);
  DFX_POLL(fx, 4);
  DFX_KINDS(fx, "");
  for (uint32_t i = 0; i < 4; i++) {
    (void)DFX_FINISH(fx, dfx_q_pop(&q), WK_DISP_OK, 5);
    DFX_KINDS(fx, "D");
  }
  assert_int_equal(wk_disp_stats_get(fx->d).inflight, 2);
  (void)DFX_FINISH(fx, dfx_q_pop(&q), WK_DISP_OK, 6);
  DFX_KINDS(fx, "DS");
  assert_int_equal(wk_disp_stats_get(fx->d).inflight, 2);
  assert_int_equal(DFX_INFO(fx, t).inflight, 2);
}

static void test_window_starts_small_and_grows(void **state) {
  dfx *fx = *state;
  wk_disp_config cfg = dfx_config();
  cfg.max_inflight = 100;
  dfx_reconfigure(fx, &cfg);
  wk_disp_task_params p = dfx_params();
  uint32_t t = DFX_TASK(fx, 1, &p);
  dfx_q q = {{0}, 0, 0};
  DFX_ADD(fx, t, 40, true, 0);
  DFX_KINDS(fx, "SS"); /* window_initial 2 */
  dfx_q_sends(&q, fx);
  assert_int_equal(DFX_INFO(fx, t).window, 2);
  /* each success: window + 1 up to 8, so each answer lets out two SENDs until the cap */
  uint32_t expect_window = 2;
  while (dfx_q_len(&q) > 0) {
    (void)DFX_FINISH(fx, dfx_q_pop(&q), WK_DISP_OK, 1);
    if (expect_window < 8) expect_window++;
    wk_disp_task_info info = DFX_INFO(fx, t);
    assert_int_equal(info.window, expect_window);
    assert_true(info.inflight <= info.window);
    if (info.queued > 0) assert_int_equal(info.inflight, info.window);
    if (expect_window < 8) assert_int_equal(dfx_count(fx, WK_DISP_SEND), 2);
    dfx_q_sends(&q, fx);
  }
  assert_int_equal(DFX_INFO(fx, t).finished, 40);
  assert_true(DFX_INFO(fx, t).ended);
  assert_int_equal(DFX_INFO(fx, t).window, 8);
}

static void test_window_halves_on_transient_failures_only(void **state) {
  dfx *fx = *state;
  wk_disp_config cfg = dfx_config();
  cfg.max_inflight = 100;
  cfg.window_initial = 8;
  dfx_reconfigure(fx, &cfg);
  wk_disp_task_params p = dfx_params();
  p.failure_policy = WK_CALL_CONTINUE;
  p.max_failed_calls = 100;
  p.retry.max_attempts = 3;
  p.retry.initial_backoff_ms = 1000;
  uint32_t t = DFX_TASK(fx, 1, &p);
  DFX_ADD(fx, t, 30, true, 0);
  assert_int_equal(dfx_count(fx, WK_DISP_SEND), 8);
  uint64_t id[8];
  for (uint32_t i = 0; i < 8; i++) id[i] = DFX_SEND_ID(fx, t, i);
  (void)DFX_FINISH(fx, id[0], WK_DISP_ERROR, 1); /* permanent: window unchanged */
  assert_int_equal(DFX_INFO(fx, t).window, 8);
  DFX_KINDS(fx, "DS");
  (void)DFX_FINISH(fx, id[1], WK_DISP_RETRYABLE, 1);
  assert_int_equal(DFX_INFO(fx, t).window, 4);
  DFX_KINDS(fx, "");                                     /* 7 in flight > window 4 */
  (void)DFX_FINISH(fx, id[2], WK_DISP_EXECUTOR_LOST, 1); /* final (no retry flag): still halves */
  assert_int_equal(DFX_INFO(fx, t).window, 2);
  DFX_KINDS(fx, "D");
  assert_int_equal(fx->out.items[0].result, WK_DISP_EXECUTOR_LOST);
  (void)DFX_FINISH(fx, id[3], WK_DISP_RETRYABLE, 1);
  (void)DFX_FINISH(fx, id[4], WK_DISP_RETRYABLE, 1);
  assert_int_equal(DFX_INFO(fx, t).window, 1); /* never below 1 */
  (void)DFX_FINISH(fx, id[5], WK_DISP_OK, 1);
  assert_int_equal(DFX_INFO(fx, t).window, 2);
  assert_int_equal(DFX_INFO(fx, t).inflight, 3);
  DFX_KINDS(fx, "D");
}

/* ---- output buffer ------------------------------------------------------------------------ */

static void test_small_buffer_is_resumable(void **state) {
  dfx *fx = *state;
  wk_disp_task_params p = dfx_params();
  wk_disp_config cfg = dfx_config();
  cfg.window_initial = 8;
  dfx_reconfigure(fx, &cfg);
  uint32_t t = DFX_TASK(fx, 1, &p);
  fx->out.capacity = 1;
  DFX_ADD(fx, t, 10, true, 0);
  DFX_KINDS(fx, "S");
  assert_true(fx->out.more);
  uint64_t ids[4];
  ids[0] = fx->out.items[0].call_id;
  for (uint32_t i = 1; i < 4; i++) {
    DFX_POLL(fx, 0);
    DFX_KINDS(fx, "S");
    assert_int_equal(fx->out.items[0].index, i);
    ids[i] = fx->out.items[0].call_id;
  }
  DFX_POLL(fx, 0);
  DFX_KINDS(fx, ""); /* capacity reached: nothing more */
  assert_false(fx->out.more);

  /* FAIL_FAST with a one-slot buffer: CALL_DONE, then three CANCELs, then TASK_DONE,
   * one per poll; nothing lost, nothing sent in between */
  assert_int_equal(DFX_FINISH(fx, ids[2], WK_DISP_ERROR, 1), WK_OK);
  DFX_KINDS(fx, "D");
  assert_true(fx->out.more);
  assert_true(wk_disp_pending(fx->d));
  assert_int_equal(fx->out.items[0].index, 2);
  for (int i = 0; i < 3; i++) {
    DFX_POLL(fx, 1);
    DFX_KINDS(fx, "X");
    assert_true(fx->out.more);
  }
  DFX_POLL(fx, 1);
  DFX_KINDS(fx, "T");
  assert_false(fx->out.items[0].ok);
  assert_false(fx->out.more);
  assert_false(wk_disp_pending(fx->d));
  DFX_POLL(fx, 1);
  DFX_KINDS(fx, "");
  /* a zero-size buffer holds everything back */
  fx->out.capacity = 0;
  uint32_t t2 = DFX_TASK(fx, 2, &p);
  DFX_ADD(fx, t2, 1, true, 2);
  DFX_KINDS(fx, "");
  assert_true(fx->out.more);
  fx->out.capacity = DFX_BUF;
  DFX_POLL(fx, 2);
  DFX_KINDS(fx, "S");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_config_validation),
      cmocka_unit_test_setup_teardown(test_empty_pool_sends_nothing_until_capacity, dfx_setup,
                                      dfx_teardown),
      cmocka_unit_test_setup_teardown(test_add_task_errors_and_limits, dfx_setup, dfx_teardown),
      cmocka_unit_test_setup_teardown(test_add_calls_errors, dfx_setup, dfx_teardown),
      cmocka_unit_test_setup_teardown(test_empty_task_ends_at_once, dfx_setup, dfx_teardown),
      cmocka_unit_test_setup_teardown(test_streaming_and_backpressure, dfx_setup, dfx_teardown),
      cmocka_unit_test_setup_teardown(test_global_admission_and_capacity_changes, dfx_setup,
                                      dfx_teardown),
      cmocka_unit_test_setup_teardown(test_window_starts_small_and_grows, dfx_setup, dfx_teardown),
      cmocka_unit_test_setup_teardown(test_window_halves_on_transient_failures_only, dfx_setup,
                                      dfx_teardown),
      cmocka_unit_test_setup_teardown(test_small_buffer_is_resumable, dfx_setup, dfx_teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

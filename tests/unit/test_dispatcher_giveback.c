/* test_dispatcher_giveback.c: NOT_STARTED, an attempt given back unstarted (its
 * executor died or was busy with a long call before it ran the call). It is no end:
 * the call goes first in its task's line and is sent again, to any executor, with
 * the same attempt number, a fresh deadline, the window untouched, and no retry
 * policy needed; a parent that asked for subcalls has started and cannot be given
 * back. */
#include "test_dispatcher_fixture.h"

static void test_given_back_call_is_sent_again_first(void **state) {
  dfx *fx = *state;
  wk_disp_config cfg = dfx_config();
  cfg.max_inflight = 2;
  dfx_reconfigure(fx, &cfg);
  wk_disp_task_params p = dfx_params(); /* FAIL_FAST, one attempt: no retry at all */
  p.call_timeout_ms = 100;
  uint32_t t = DFX_TASK(fx, 7, &p);
  DFX_ADD(fx, t, 4, true, 0);
  DFX_KINDS(fx, "SS");
  assert_false(fx->out.items[0].again);
  uint64_t c0 = DFX_SEND_ID(fx, t, 0), c1 = DFX_SEND_ID(fx, t, 1);
  uint32_t window = DFX_INFO(fx, t).window;

  /* call 1 sat behind call 0 on an executor that died: it comes back, and since it
   * left admission it is sent again at once, before call 2 */
  assert_int_equal(DFX_FINISH(fx, c1, WK_DISP_NOT_STARTED, 40), WK_OK);
  DFX_KINDS(fx, "S");
  const wk_disp_action *s = &fx->out.items[0];
  assert_int_equal(s->index, 1);
  assert_int_equal(s->attempt, 1);       /* not counted as an attempt */
  assert_true(s->call_id != c1);         /* a new attempt id: the old one is stale */
  assert_int_equal(s->deadline_ms, 140); /* its own timeout, from the new SEND */
  assert_true(s->again);                 /* the executor pool puts it first in line */
  uint64_t c1b = s->call_id;
  wk_disp_task_info info = DFX_INFO(fx, t);
  assert_int_equal(info.window, window);
  assert_int_equal(info.failed, 0);
  assert_int_equal(info.finished, 0);
  assert_int_equal(info.retried, 0);
  assert_int_equal(info.returned, 1);
  assert_int_equal(wk_disp_stats_get(fx->d).not_started, 1);

  /* the old id is stale now, whatever it says */
  assert_int_equal(DFX_FINISH(fx, c1, WK_DISP_OK, 41), WK_ERR_STALE);
  DFX_KINDS(fx, "");

  /* the running call may still fail: that is the only failure (FAIL_FAST) */
  (void)DFX_FINISH(fx, c1b, WK_DISP_OK, 50);
  DFX_KINDS(fx, "DS");
  assert_int_equal(DFX_FINISH(fx, c0, WK_DISP_EXECUTOR_LOST, 60), WK_OK);
  assert_int_equal(dfx_count(fx, WK_DISP_CALL_DONE), 1);
  assert_int_equal(dfx_nth(fx, WK_DISP_CALL_DONE, 0)->index, 0);
  assert_int_equal(dfx_nth(fx, WK_DISP_TASK_DONE, 0)->failed, 1);
}

static void test_given_back_goes_ahead_of_queued_work(void **state) {
  dfx *fx = *state;
  wk_disp_config cfg = dfx_config();
  cfg.max_inflight = 3;
  cfg.window_initial = 3;
  dfx_reconfigure(fx, &cfg);
  wk_disp_task_params p = dfx_params();
  uint32_t t = DFX_TASK(fx, 1, &p);
  DFX_ADD(fx, t, 6, true, 0);
  DFX_KINDS(fx, "SSS");
  uint64_t c1 = DFX_SEND_ID(fx, t, 1), c2 = DFX_SEND_ID(fx, t, 2);
  /* both come back in one emission with no room: nothing is sent until a poll */
  fx->out.capacity = 0;
  (void)DFX_FINISH(fx, c1, WK_DISP_NOT_STARTED, 1);
  (void)DFX_FINISH(fx, c2, WK_DISP_NOT_STARTED, 1);
  fx->out.capacity = DFX_BUF;
  DFX_POLL(fx, 2);
  DFX_KINDS(fx, "SS");
  /* in the order they were sent first, ahead of new calls 3.. */
  assert_int_equal(fx->out.items[0].index, 2); /* the last given back is first in line */
  assert_int_equal(fx->out.items[1].index, 1);
  assert_int_equal(DFX_INFO(fx, t).queued, 3);
}

static void test_given_back_child_and_parent(void **state) {
  dfx *fx = *state;
  wk_disp_config cfg = dfx_config();
  cfg.max_inflight = 4;
  dfx_reconfigure(fx, &cfg);
  wk_disp_task_params p = dfx_params();
  uint32_t t = DFX_TASK(fx, 5, &p);
  DFX_ADD(fx, t, 1, true, 0);
  uint64_t parent = DFX_SEND_ID(fx, t, 0);
  uint64_t g = DFX_SUBCALLS(fx, parent, 2, 1);
  assert_true(g != 0);
  assert_int_equal(dfx_count(fx, WK_DISP_SEND), 2);
  uint64_t k0 = dfx_nth(fx, WK_DISP_SEND, 0)->call_id;
  uint64_t k1 = dfx_nth(fx, WK_DISP_SEND, 1)->call_id;
  /* the parent has started (it asked for subcalls): it cannot be given back */
  assert_int_equal(DFX_FINISH(fx, parent, WK_DISP_NOT_STARTED, 2), WK_ERR_INVALID_ARGUMENT);
  DFX_KINDS(fx, "");
  /* a child can: it is sent again in the same group */
  assert_int_equal(DFX_FINISH(fx, k1, WK_DISP_NOT_STARTED, 3), WK_OK);
  DFX_KINDS(fx, "S");
  const wk_disp_action *s = &fx->out.items[0];
  assert_int_equal(s->group, g);
  assert_int_equal(s->index, 1);
  assert_int_equal(s->depth, 1);
  assert_int_equal(s->attempt, 1);
  assert_int_equal(s->parent_call_id, parent);
  uint64_t k1b = s->call_id;
  (void)DFX_FINISH(fx, k0, WK_DISP_OK, 4);
  (void)DFX_FINISH(fx, k1b, WK_DISP_OK, 5);
  DFX_KINDS(fx, "dC");
  (void)DFX_FINISH(fx, parent, WK_DISP_OK, 6);
  DFX_KINDS(fx, "DT");
  assert_true(fx->out.items[1].ok);
}

static void test_given_back_after_cancel_is_stale(void **state) {
  dfx *fx = *state;
  wk_disp_task_params p = dfx_params();
  uint32_t t = DFX_TASK(fx, 9, &p);
  DFX_ADD(fx, t, 2, true, 0);
  uint64_t c0 = DFX_SEND_ID(fx, t, 0);
  DFX_CANCEL(fx, t);
  assert_int_equal(DFX_FINISH(fx, c0, WK_DISP_NOT_STARTED, 1), WK_ERR_STALE);
  DFX_KINDS(fx, "");
  assert_int_equal(wk_disp_stats_get(fx->d).not_started, 0);
  assert_string_equal(wk_disp_result_name(WK_DISP_NOT_STARTED), "NOT_STARTED");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_given_back_call_is_sent_again_first, dfx_setup,
                                      dfx_teardown),
      cmocka_unit_test_setup_teardown(test_given_back_goes_ahead_of_queued_work, dfx_setup,
                                      dfx_teardown),
      cmocka_unit_test_setup_teardown(test_given_back_child_and_parent, dfx_setup, dfx_teardown),
      cmocka_unit_test_setup_teardown(test_given_back_after_cancel_is_stale, dfx_setup,
                                      dfx_teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

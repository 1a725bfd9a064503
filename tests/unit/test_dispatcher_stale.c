/* test_dispatcher_stale.c: each call completes at most once. A second answer for the
 * same attempt, a late answer from an attempt superseded by a retry (during the
 * backoff or after the new attempt was sent), answers for ids never issued or for a
 * record since reused, and malformed results are all refused without effect. */
#include "test_dispatcher_fixture.h"

static wk_disp_task_params retrying(void) {
  wk_disp_task_params p = dfx_params();
  p.retry.max_attempts = 3;
  p.retry.initial_backoff_ms = 10;
  return p;
}

static void test_duplicate_answer_is_ignored(void **state) {
  dfx *fx = *state;
  wk_disp_task_params p = dfx_params();
  uint32_t t = DFX_TASK(fx, 1, &p);
  DFX_ADD(fx, t, 2, true, 0);
  uint64_t a = DFX_SEND_ID(fx, t, 0);
  assert_int_equal(DFX_FINISH(fx, a, WK_DISP_OK, 1), WK_OK);
  DFX_KINDS(fx, "D");
  for (int i = 0; i < 3; i++) {
    assert_int_equal(DFX_FINISH(fx, a, WK_DISP_OK, 2), WK_ERR_STALE);
    DFX_KINDS(fx, "");
    assert_int_equal(DFX_FINISH(fx, a, WK_DISP_ERROR, 2), WK_ERR_STALE);
    DFX_KINDS(fx, "");
  }
  wk_disp_task_info info = DFX_INFO(fx, t);
  assert_int_equal(info.finished, 1);
  assert_int_equal(info.failed, 0);
  assert_false(info.ended);
  assert_int_equal(wk_disp_stats_get(fx->d).stale_results, 6);
}

static void test_late_answer_after_retry(void **state) {
  dfx *fx = *state;
  wk_disp_task_params p = retrying();
  uint32_t t = DFX_TASK(fx, 1, &p);
  DFX_ADD(fx, t, 1, true, 0);
  uint64_t first = DFX_SEND_ID(fx, t, 0);
  /* the executor reports it lost ... */
  assert_int_equal(DFX_FINISH(fx, first, WK_DISP_RETRYABLE, 1), WK_OK);
  /* ... and then answers anyway while the retry waits out its backoff */
  assert_int_equal(DFX_FINISH(fx, first, WK_DISP_OK, 2), WK_ERR_STALE);
  DFX_KINDS(fx, "");
  DFX_TICK(fx, 11);
  DFX_KINDS(fx, "S");
  uint64_t second = fx->out.items[0].call_id;
  assert_int_not_equal(first, second);
  assert_int_equal((uint32_t)first, (uint32_t)second); /* same record, new attempt */
  /* the first attempt again, after the retry was issued: still ignored */
  assert_int_equal(DFX_FINISH(fx, first, WK_DISP_OK, 12), WK_ERR_STALE);
  DFX_KINDS(fx, "");
  assert_int_equal(DFX_INFO(fx, t).inflight, 1);
  assert_int_equal(DFX_FINISH(fx, second, WK_DISP_OK, 13), WK_OK);
  DFX_KINDS(fx, "DT");
  assert_int_equal(fx->out.items[0].call_id, second);
  assert_int_equal(fx->out.items[0].attempt, 2);
  assert_int_equal(DFX_FINISH(fx, second, WK_DISP_OK, 14), WK_ERR_STALE);
  DFX_KINDS(fx, "");
}

static void test_ids_never_issued_or_reused(void **state) {
  dfx *fx = *state;
  wk_disp_task_params p = dfx_params();
  p.failure_policy = WK_CALL_CONTINUE;
  p.max_failed_calls = 10;
  uint32_t t = DFX_TASK(fx, 1, &p);
  /* nothing sent yet: every id is unknown */
  assert_int_equal(DFX_FINISH(fx, 0, WK_DISP_OK, 0), WK_ERR_STALE);
  assert_int_equal(DFX_FINISH(fx, ((uint64_t)1 << 32) | 0u, WK_DISP_OK, 0), WK_ERR_STALE);
  assert_int_equal(DFX_FINISH(fx, ((uint64_t)1 << 32) | 63u, WK_DISP_OK, 0), WK_ERR_STALE);
  assert_int_equal(DFX_FINISH(fx, ((uint64_t)1 << 32) | 64u, WK_DISP_OK, 0), WK_ERR_STALE);
  assert_int_equal(DFX_FINISH(fx, UINT64_MAX, WK_DISP_OK, 0), WK_ERR_STALE);
  DFX_ADD(fx, t, 1, false, 1);
  uint64_t a = DFX_SEND_ID(fx, t, 0);
  assert_int_equal(DFX_FINISH(fx, a & 0xffffffffu, WK_DISP_OK, 1), WK_ERR_STALE); /* generation 0 */
  assert_int_equal(DFX_FINISH(fx, a + ((uint64_t)1 << 32), WK_DISP_OK, 1), WK_ERR_STALE);
  /* a malformed result changes nothing */
  assert_int_equal(DFX_FINISH(fx, a, (wk_disp_result)17, 1), WK_ERR_INVALID_ARGUMENT);
  assert_int_equal(DFX_FINISH(fx, a, (wk_disp_result)-1, 1), WK_ERR_INVALID_ARGUMENT);
  assert_int_equal(DFX_INFO(fx, t).inflight, 1);
  assert_int_equal(DFX_FINISH(fx, a, WK_DISP_OK, 2), WK_OK);
  /* the record is reused by the next call: the old id does not reach it */
  DFX_ADD(fx, t, 1, true, 3);
  uint64_t b = DFX_SEND_ID(fx, t, 1);
  assert_int_equal((uint32_t)a, (uint32_t)b);
  assert_int_not_equal(a, b);
  assert_int_equal(DFX_FINISH(fx, a, WK_DISP_ERROR, 4), WK_ERR_STALE);
  assert_int_equal(DFX_INFO(fx, t).inflight, 1);
  assert_int_equal(DFX_INFO(fx, t).failed, 0);
  assert_int_equal(DFX_FINISH(fx, b, WK_DISP_OK, 5), WK_OK);
  DFX_KINDS(fx, "DT");
  assert_true(fx->out.items[1].ok);
}

static void test_answers_for_a_waiting_parent_and_its_children(void **state) {
  dfx *fx = *state;
  wk_disp_task_params p = retrying();
  uint32_t t = DFX_TASK(fx, 1, &p);
  DFX_ADD(fx, t, 1, true, 0);
  uint64_t parent = DFX_SEND_ID(fx, t, 0);
  (void)DFX_SUBCALLS(fx, parent, 1, 1);
  uint64_t kid = fx->out.items[0].call_id;
  assert_int_equal(DFX_FINISH(fx, kid, WK_DISP_OK, 2), WK_OK);
  DFX_KINDS(fx, "dC");
  assert_int_equal(DFX_FINISH(fx, kid, WK_DISP_OK, 3), WK_ERR_STALE); /* twice */
  DFX_KINDS(fx, "");
  assert_int_equal(DFX_FINISH(fx, parent, WK_DISP_OK, 4), WK_OK);
  DFX_KINDS(fx, "DT");
  assert_int_equal(DFX_FINISH(fx, parent, WK_DISP_OK, 5), WK_ERR_STALE);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_duplicate_answer_is_ignored, dfx_setup, dfx_teardown),
      cmocka_unit_test_setup_teardown(test_late_answer_after_retry, dfx_setup, dfx_teardown),
      cmocka_unit_test_setup_teardown(test_ids_never_issued_or_reused, dfx_setup, dfx_teardown),
      cmocka_unit_test_setup_teardown(test_answers_for_a_waiting_parent_and_its_children, dfx_setup,
                                      dfx_teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

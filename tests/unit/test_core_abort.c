/* test_core_abort.c: ending tasks from outside: CANCELLED, WORKER_SHUTDOWN, the cancel
 * of a reservation, terminal tasks, bad codes, and the drain-then-shutdown sequence. */
#include "core_fixture.h"

static int ctx_a, ctx_b, ctx_c;

static void expect_no_cmds_at(const wk_transition_result *out, wk_err want, FX_LOC) {
  fx_err_at(out->err, want, file, line);
  FX_EQ(out->cmds.count, 0);
}
#define EXPECT_NO_CMDS(out, want) expect_no_cmds_at(&(out), (want), FX_AT)

static void test_cancel_running_task(void **state) {
  wk_core *core = *state;
  wk_transition_result out;
  uint64_t s = FX_RUN_TO_BUILDER(core, ID("t1"), &ctx_a, 1000);
  FX_BUILDER_OK(core, ID("t1"), s, &ctx_a, NULL, false, 1100);

  memset(&out, 0xa5, sizeof out);
  wk_core_handle_abort(core, ID("t1"), WK_FAIL_CANCELLED, "user asked", 1200, &out);
  FX_CANCEL_CONVERGE(out, ID("t1"), s, &ctx_a, WK_TASK_CANCELLED, WK_FAIL_CANCELLED, "user asked",
                     7, 1200);
  FX_INV(core);
  FX_SLOT_FREE(core, s);
  FX_HB(core, 1200, FX_SLOTS, 0, 0, true, false);
  const wk_task_result *r = FX_GET(core, ID("t1"));
  FX_RES(r, s, WK_TASK_CANCELLED, WK_PHASE_DONE, WK_FAIL_CANCELLED, "user asked", 7);
  FX_TIMES(r, 1000, 1001, 1001, 1100, 1100, FX_ANY, 0, 0, 1200);
  assert_int_equal(wk_core_live_tasks(core), 0);
  assert_int_equal(wk_core_retained_count(core), 1);
  wk_task_id ids[2];
  assert_int_equal(wk_core_timed_out_tasks(core, 99999, ids, 2), 0);
  assert_int_equal(wk_core_next_deadline(core), 1200 + FX_RETENTION);

  /* the calls phase reports afterwards: stale */
  wk_phase_outcome o = fx_ok();
  wk_core_handle_phase_finished(core, ID("t1"), WK_PHASE_CALLS, &o, 1300, &out);
  EXPECT_NO_CMDS(out, WK_ERR_STALE);
  FX_INV(core);
  r = FX_GET(core, ID("t1"));
  FX_RES(r, s, WK_TASK_CANCELLED, WK_PHASE_DONE, WK_FAIL_CANCELLED, "user asked", 7);
}

static void test_shutdown_running_task(void **state) {
  wk_core *core = *state;
  wk_transition_result out;
  uint64_t s = FX_RUN_TO_BUILDER(core, ID("t1"), &ctx_a, 1000);
  FX_BUILDER_OK(core, ID("t1"), s, &ctx_a, NULL, false, 1100);
  FX_CALLS_OK(core, ID("t1"), s, &ctx_a, "partial", 7, 1200);

  memset(&out, 0xa5, sizeof out);
  wk_core_handle_abort(core, ID("t1"), WK_FAIL_WORKER_SHUTDOWN, NULL, 1300, &out);
  FX_CANCEL_CONVERGE(out, ID("t1"), s, &ctx_a, WK_TASK_FAILED, WK_FAIL_WORKER_SHUTDOWN, "", 7,
                     1300);
  FX_INV(core);
  FX_SLOT_FREE(core, s);
  FX_HB(core, 1300, FX_SLOTS, 0, 0, true, false);
  const wk_task_result *r = FX_GET(core, ID("t1"));
  FX_RES(r, s, WK_TASK_FAILED, WK_PHASE_DONE, WK_FAIL_WORKER_SHUTDOWN, "", 7);
  FX_BYTES(r->outputs, "partial", 7);
  FX_TIMES(r, 1000, 1001, 1001, 1100, 1100, 1200, 1200, FX_ANY, 1300);
}

static void test_cancel_preparing_task(void **state) {
  wk_core *core = *state;
  wk_transition_result out;
  uint64_t s = FX_SUBMIT(core, ID("t1"), 0, 1, &ctx_a, 1000);
  memset(&out, 0xa5, sizeof out);
  wk_core_handle_abort(core, ID("t1"), WK_FAIL_CANCELLED, "", 1100, &out);
  FX_CANCEL_CONVERGE(out, ID("t1"), s, &ctx_a, WK_TASK_CANCELLED, WK_FAIL_CANCELLED, "", 0, 1100);
  FX_INV(core);
  FX_SLOT_FREE(core, s);
  FX_HB(core, 1100, FX_SLOTS, 0, 0, true, false);
  uint64_t got[2];
  assert_int_equal(wk_core_expired_slots(core, 99999, got, 2), 0);
  const wk_task_result *r = FX_GET(core, ID("t1"));
  FX_RES(r, s, WK_TASK_CANCELLED, WK_PHASE_DONE, WK_FAIL_CANCELLED, "", 0);
  FX_TIMES(r, 1000, 0, 0, 0, 0, 0, 0, 0, 1100);

  /* the activation under way arrives: stale, the adapter unpins */
  wk_core_handle_activation_prepared(core, ID("t1"), s, 5, 1200, &out);
  EXPECT_NO_CMDS(out, WK_ERR_STALE);
  FX_INV(core);
  r = FX_GET(core, ID("t1"));
  FX_RES(r, s, WK_TASK_CANCELLED, WK_PHASE_DONE, WK_FAIL_CANCELLED, "", 0);
  FX_HB(core, 1200, FX_SLOTS, 0, 0, true, false);
}

static void test_cancel_reservation(void **state) {
  wk_core *core = *state;
  wk_transition_result out;
  uint64_t s = FX_RESERVE(core, ID("r1"), 0, 1000, 2000);
  memset(&out, 0xa5, sizeof out);
  wk_core_handle_abort(core, ID("r1"), WK_FAIL_CANCELLED, "never mind", 1100, &out);
  EXPECT_NO_CMDS(out, WK_OK);
  FX_INV(core);
  FX_SLOT_FREE(core, s);
  FX_HB(core, 1100, FX_SLOTS, 0, 0, true, false);
  uint64_t got[2];
  assert_int_equal(wk_core_expired_slots(core, 99999, got, 2), 0);
  assert_int_equal(wk_core_live_tasks(core), 0);

  /* retained as CANCELLED */
  const wk_task_result *r = FX_GET(core, ID("r1"));
  FX_RES(r, s, WK_TASK_CANCELLED, WK_PHASE_DONE, WK_FAIL_CANCELLED, "never mind", 0);
  assert_int_equal(r->statistic.finished_ms, 1100);
  assert_int_equal(wk_core_retained_count(core), 1);
  assert_int_equal(wk_core_next_deadline(core), 1100 + FX_RETENTION);

  /* asking again returns that result, not a new slot */
  wk_slot_result sr;
  wk_core_handle_request_slot(core, ID("r1"), 0, 1200, &sr);
  FX_ERR(sr.err, WK_OK);
  assert_true(sr.duplicate);
  assert_int_equal(sr.slot_id, 0); /* terminal: no slot */
  assert_int_equal(sr.lease_expires_ms, 0);
  FX_RES(sr.result, s, WK_TASK_CANCELLED, WK_PHASE_DONE, WK_FAIL_CANCELLED, "never mind", 0);
  FX_INV(core);
  FX_HB(core, 1200, FX_SLOTS, 0, 0, true, false);

  /* a submit of it is a duplicate that was never accepted: accepted_ms stays 0 (the
   * adapter must not turn that 0 into a wall-clock time) */
  wk_submit_request req = fx_req(ID("r1"), s, 7);
  wk_submit_result sub;
  wk_core_handle_submit(core, &req, &ctx_a, 1250, &sub);
  FX_ERR(sub.err, WK_OK);
  assert_true(sub.duplicate);
  assert_false(sub.adapter_ctx_taken);
  assert_int_equal(sub.accepted_ms, 0);
  assert_int_equal(sub.result->statistic.accepted_ms, 0);
  assert_int_equal(sub.cmds.count, 0);

  /* the lapsed lease of the released slot is stale */
  wk_core_handle_slot_lease_expired(core, s, 2000, &out);
  EXPECT_NO_CMDS(out, WK_ERR_STALE);
  FX_INV(core);
}

static void test_abort_terminal_task_is_noop(void **state) {
  wk_core *core = *state;
  wk_transition_result out;
  uint64_t s = FX_RUN_SUCCESS(core, ID("t1"), &ctx_a, 1000);
  uint64_t bytes = wk_core_retained_bytes(core);
  memset(&out, 0xa5, sizeof out);
  wk_core_handle_abort(core, ID("t1"), WK_FAIL_CANCELLED, "late", 2000, &out);
  EXPECT_NO_CMDS(out, WK_OK);
  FX_INV(core);
  memset(&out, 0xa5, sizeof out);
  wk_core_handle_abort(core, ID("t1"), WK_FAIL_WORKER_SHUTDOWN, "late", 2000, &out);
  EXPECT_NO_CMDS(out, WK_OK);
  FX_INV(core);
  const wk_task_result *r = FX_GET(core, ID("t1"));
  FX_RES(r, s, WK_TASK_SUCCEEDED, WK_PHASE_DONE, WK_FAIL_NONE, "", 1);
  FX_TIMES(r, 1000, 1001, 1001, 1002, 1002, 1003, 1003, 1004, 1004);
  assert_int_equal(wk_core_retained_count(core), 1);
  assert_int_equal(wk_core_retained_bytes(core), bytes);
  assert_int_equal(wk_core_next_deadline(core), 1004 + FX_RETENTION);
  FX_HB(core, 2000, FX_SLOTS, 0, 0, true, false);
}

static void test_abort_errors(void **state) {
  wk_core *core = *state;
  wk_transition_result out;
  uint64_t s = FX_RUN_TO_BUILDER(core, ID("t1"), &ctx_a, 1000);
  static const int bad_codes[] = {WK_FAIL_NONE,
                                  WK_FAIL_ACTIVATION_FAILED,
                                  WK_FAIL_SLOT_LOST,
                                  WK_FAIL_BUILDER_FAILED,
                                  WK_FAIL_CALL_FAILED,
                                  WK_FAIL_TASK_TIMEOUT,
                                  WK_FAIL_OWNER_LOST,
                                  WK_FAIL_COUNT,
                                  -3};
  for (size_t i = 0; i < sizeof bad_codes / sizeof bad_codes[0]; i++) {
    memset(&out, 0xa5, sizeof out);
    wk_core_handle_abort(core, ID("t1"), (wk_failure_code)bad_codes[i], "x", 1100, &out);
    EXPECT_NO_CMDS(out, WK_ERR_INVALID_ARGUMENT);
    FX_INV(core);
  }
  const wk_task_result *r = FX_GET(core, ID("t1"));
  FX_RES(r, s, WK_TASK_RUNNING, WK_PHASE_BUILDER, WK_FAIL_NONE, "", 7);
  FX_HB(core, 1100, FX_SLOTS, 0, 1, true, false);

  wk_core_handle_abort(core, ID("nope"), WK_FAIL_CANCELLED, "x", 1100, &out);
  EXPECT_NO_CMDS(out, WK_ERR_NOT_FOUND);
  FX_INV(core);
  wk_core_handle_abort(core, "", 0, WK_FAIL_CANCELLED, "x", 1100,
                       &out); /* NOT_FOUND or INVALID_ARGUMENT */
  assert_int_not_equal(out.err, WK_OK);
  assert_int_equal(out.cmds.count, 0);
  FX_INV(core);
  assert_int_equal(wk_core_live_tasks(core), 1);
}

static void test_abort_message_truncated(void **state) {
  wk_core *core = *state;
  wk_transition_result out;
  char longmsg[FX_MAX_MSG * 3];
  memset(longmsg, 'z', sizeof longmsg - 1);
  longmsg[sizeof longmsg - 1] = '\0';
  char want[FX_MAX_MSG + 1];
  memset(want, 'z', FX_MAX_MSG);
  want[FX_MAX_MSG] = '\0';
  uint64_t s = FX_RUN_TO_BUILDER(core, ID("t1"), &ctx_a, 1000);
  wk_core_handle_abort(core, ID("t1"), WK_FAIL_CANCELLED, longmsg, 1100, &out);
  FX_CANCEL_CONVERGE(out, ID("t1"), s, &ctx_a, WK_TASK_CANCELLED, WK_FAIL_CANCELLED, want, 7, 1100);
  FX_INV(core);
  const wk_task_result *r = FX_GET(core, ID("t1"));
  assert_int_equal(strlen(r->failure_message), FX_MAX_MSG);
}

static void test_drain_then_shutdown(void **state) {
  wk_core *core = *state;
  wk_transition_result out;
  uint64_t sa = FX_RUN_TO_BUILDER(core, ID("a"), &ctx_a, 1000);
  uint64_t sb = FX_SUBMIT(core, ID("b"), 0, 1, &ctx_b, 1000);
  uint64_t sr = FX_RESERVE(core, ID("r"), 0, 1000, 2000);
  FX_RUN_SUCCESS(core, ID("done"), &ctx_c, 1000);
  FX_HB(core, 1004, FX_SLOTS, 2, 1, true, false);

  wk_core_set_draining(core, true);
  FX_HB(core, 1100, FX_SLOTS, 2, 1, true, true);
  assert_int_equal(wk_core_live_tasks(core), 2);
  wk_task_id ids[4];
  memset(ids, 0, sizeof ids);
  assert_int_equal(wk_core_list_live_tasks(core, ids, 4), 2);
  assert_true(FX_IDS_CONTAIN(ids, 2, ID("a")));
  assert_true(FX_IDS_CONTAIN(ids, 2, ID("b")));
  assert_int_equal(wk_core_list_live_tasks(core, ids, 1), 1);
  assert_int_equal(wk_core_list_live_tasks(core, ids, 0), 0);

  /* running tasks go on while draining */
  FX_BUILDER_OK(core, ID("a"), sa, &ctx_a, NULL, false, 1200);
  FX_ACTIVATE(core, ID("b"), sb, 2, &ctx_b, 1200);

  /* the drain timed out: the rest converge WORKER_SHUTDOWN */
  memset(&out, 0xa5, sizeof out);
  wk_core_handle_abort(core, ID("a"), WK_FAIL_WORKER_SHUTDOWN, "drain timeout", 5000, &out);
  FX_CANCEL_CONVERGE(out, ID("a"), sa, &ctx_a, WK_TASK_FAILED, WK_FAIL_WORKER_SHUTDOWN,
                     "drain timeout", 7, 5000);
  FX_INV(core);
  memset(&out, 0xa5, sizeof out);
  wk_core_handle_abort(core, ID("b"), WK_FAIL_WORKER_SHUTDOWN, "drain timeout", 5000, &out);
  FX_CANCEL_CONVERGE(out, ID("b"), sb, &ctx_b, WK_TASK_FAILED, WK_FAIL_WORKER_SHUTDOWN,
                     "drain timeout", 2, 5000);
  FX_INV(core);
  assert_int_equal(wk_core_live_tasks(core), 0);
  assert_int_equal(wk_core_list_live_tasks(core, ids, 4), 0);
  /* the reservation is untouched by the aborts (its lease runs out on its own) */
  FX_SLOT_ALLOCATED(core, sr, 2000, ID("r"));
  FX_HB(core, 5000, FX_SLOTS, 1, 0, true, true);
  assert_int_equal(wk_core_retained_count(core), 3);
  const wk_task_result *r = FX_GET(core, ID("done"));
  FX_RES(r, r->slot_id, WK_TASK_SUCCEEDED, WK_PHASE_DONE, WK_FAIL_NONE, "", 1);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      FX_TEST(test_cancel_running_task),         FX_TEST(test_shutdown_running_task),
      FX_TEST(test_cancel_preparing_task),       FX_TEST(test_cancel_reservation),
      FX_TEST(test_abort_terminal_task_is_noop), FX_TEST(test_abort_errors),
      FX_TEST(test_abort_message_truncated),     FX_TEST(test_drain_then_shutdown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

/* test_core_timers.c: task timeouts, watch attach/detach/disconnect and the grace
 * (OWNER_LOST), the timer scans, result purge by time, count and bytes, and
 * next_deadline. */
#include "core_fixture.h"

static int ctx_a, ctx_b, ctx_c;

static void expect_no_cmds_at(const wk_transition_result *out, wk_err want, FX_LOC) {
  fx_err_at(out->err, want, file, line);
  FX_EQ(out->cmds.count, 0);
}
#define EXPECT_NO_CMDS(out, want) expect_no_cmds_at(&(out), (want), FX_AT)

/* ---- task timeouts --------------------------------------------------------------------- */

static void test_task_timeout_in_calls_phase(void **state) {
  wk_core *core = *state;
  wk_transition_result out;
  uint64_t s = FX_RUN_TO_BUILDER(core, ID("t1"), &ctx_a, 1000); /* deadline 11000 */
  FX_BUILDER_OK(core, ID("t1"), s, &ctx_a, NULL, false, 1100);
  assert_int_equal(wk_core_next_deadline(core), 1000 + FX_TIMEOUT);

  wk_task_id ids[4];
  memset(ids, 0, sizeof ids);
  assert_int_equal(wk_core_timed_out_tasks(core, 10999, ids, 4), 0);
  assert_int_equal(wk_core_timed_out_tasks(core, 11000, ids, 4), 1);
  assert_int_equal(ids[0].len, 2);
  assert_string_equal(ids[0].bytes, "t1");
  FX_INV(core); /* the scan is read-only */
  FX_HB(core, 11000, FX_SLOTS, 0, 1, true, false);

  wk_core_handle_task_timed_out(core, ID("t1"), 10999, &out);
  EXPECT_NO_CMDS(out, WK_ERR_STALE); /* deadline after now */
  FX_INV(core);
  const wk_task_result *r = FX_GET(core, ID("t1"));
  FX_RES(r, s, WK_TASK_RUNNING, WK_PHASE_CALLS, WK_FAIL_NONE, "", 7);

  memset(&out, 0xa5, sizeof out);
  wk_core_handle_task_timed_out(core, ID("t1"), 11000, &out);
  FX_CANCEL_CONVERGE(out, ID("t1"), s, &ctx_a, WK_TASK_FAILED, WK_FAIL_TASK_TIMEOUT, NULL, 7,
                     11000);
  FX_INV(core);
  FX_SLOT_FREE(core, s);
  FX_HB(core, 11000, FX_SLOTS, 0, 0, true, false);
  r = FX_GET(core, ID("t1"));
  FX_RES(r, s, WK_TASK_FAILED, WK_PHASE_DONE, WK_FAIL_TASK_TIMEOUT, NULL, 7);
  FX_TIMES(r, 1000, 1001, 1001, 1100, 1100, FX_ANY, 0, 0, 11000);
  assert_int_equal(wk_core_live_tasks(core), 0);
  assert_int_equal(wk_core_timed_out_tasks(core, 99999, ids, 4), 0);
  assert_int_equal(wk_core_next_deadline(core), 11000 + FX_RETENTION);

  /* terminal now: stale; late phase events too */
  wk_core_handle_task_timed_out(core, ID("t1"), 12000, &out);
  EXPECT_NO_CMDS(out, WK_ERR_STALE);
  FX_INV(core);
  wk_phase_outcome o = fx_ok();
  wk_core_handle_phase_finished(core, ID("t1"), WK_PHASE_CALLS, &o, 12000, &out);
  EXPECT_NO_CMDS(out, WK_ERR_STALE);
  FX_INV(core);
  r = FX_GET(core, ID("t1"));
  FX_RES(r, s, WK_TASK_FAILED, WK_PHASE_DONE, WK_FAIL_TASK_TIMEOUT, NULL, 7);
}

static void test_task_timeout_while_preparing(void **state) {
  wk_core *core = *state;
  wk_transition_result out;
  uint64_t slot = FX_RESERVE(core, ID("t1"), 5000, 1000, 6000);
  wk_submit_request req = fx_req(ID("t1"), slot, 1);
  req.timeout_ms = 500;
  wk_submit_result sr;
  wk_core_handle_submit(core, &req, &ctx_a, 1000, &sr);
  FX_ERR(sr.err, WK_OK);
  assert_int_equal(sr.slot_id, slot);
  FX_INV(core);
  assert_int_equal(wk_core_next_deadline(core), 1500);

  wk_task_id ids[2];
  assert_int_equal(wk_core_timed_out_tasks(core, 1499, ids, 2), 0);
  assert_int_equal(wk_core_timed_out_tasks(core, 1500, ids, 2), 1);
  assert_string_equal(ids[0].bytes, "t1");
  memset(&out, 0xa5, sizeof out);
  wk_core_handle_task_timed_out(core, ID("t1"), 1500, &out);
  FX_CANCEL_CONVERGE(out, ID("t1"), slot, &ctx_a, WK_TASK_FAILED, WK_FAIL_TASK_TIMEOUT, NULL, 0,
                     1500);
  FX_INV(core);
  FX_SLOT_FREE(core, slot);
  FX_HB(core, 1500, FX_SLOTS, 0, 0, true, false);
  /* the lease is gone with the slot */
  uint64_t got[2];
  assert_int_equal(wk_core_expired_slots(core, 6000, got, 2), 0);
  const wk_task_result *r = FX_GET(core, ID("t1"));
  FX_TIMES(r, 1000, 0, 0, 0, 0, 0, 0, 0, 1500);

  /* the activation in flight arrives late */
  wk_core_handle_activation_prepared(core, ID("t1"), slot, 3, 1600, &out);
  EXPECT_NO_CMDS(out, WK_ERR_STALE);
  FX_INV(core);
}

/* Deadlines in submit order (the default timeout) and out of it (shorter timeouts
 * later) time out earliest first, and the live list names every task once. */
static void test_timeouts_in_and_out_of_order(void **state) {
  wk_core *core = *state;
  static const struct {
    const char *id;
    int64_t at, timeout_ms; /* deadline at + timeout (FX_TIMEOUT when 0) */
  } subs[FX_SLOTS] = {
      {"a", 1000, 0},    /* 11000 */
      {"b", 1001, 0},    /* 11001 */
      {"c", 1002, 500},  /* 1502: before both */
      {"d", 1003, 9998}, /* 11001: ties with b */
  };
  for (uint32_t k = 0; k < FX_SLOTS; k++) {
    wk_submit_request req = fx_req(subs[k].id, strlen(subs[k].id), 0, 1);
    req.timeout_ms = subs[k].timeout_ms;
    wk_submit_result sr;
    wk_core_handle_submit(core, &req, &ctx_a, subs[k].at, &sr);
    FX_ERR(sr.err, WK_OK);
    FX_INV(core);
  }
  assert_int_equal(wk_core_next_deadline(core), 1502); /* before the leases (1000 + FX_TTL) */
  wk_task_id live[FX_SLOTS + 1];
  assert_int_equal(wk_core_list_live_tasks(core, live, FX_SLOTS + 1), FX_SLOTS);
  uint32_t seen = 0;
  for (uint32_t k = 0; k < FX_SLOTS; k++) seen |= 1u << (live[k].bytes[0] - 'a');
  assert_int_equal(seen, 0xf);

  wk_task_id ids[FX_SLOTS];
  assert_int_equal(wk_core_timed_out_tasks(core, 1501, ids, FX_SLOTS), 0);
  assert_int_equal(wk_core_timed_out_tasks(core, 11001, ids, FX_SLOTS), FX_SLOTS);
  assert_string_equal(ids[0].bytes, "c");
  assert_string_equal(ids[1].bytes, "a");
  assert_true((ids[2].bytes[0] == 'b' && ids[3].bytes[0] == 'd') ||
              (ids[2].bytes[0] == 'd' && ids[3].bytes[0] == 'b'));
  assert_int_equal(wk_core_timed_out_tasks(core, 11000, ids, 1), 1);
  assert_string_equal(ids[0].bytes, "c");

  /* the first in order ends early: the scan skips it and still sees the rest */
  wk_transition_result out;
  wk_core_handle_abort(core, ID("a"), WK_FAIL_CANCELLED, NULL, 1100, &out);
  FX_ERR(out.err, WK_OK);
  FX_INV(core);
  assert_int_equal(wk_core_timed_out_tasks(core, 11001, ids, FX_SLOTS), 3);
  assert_string_equal(ids[0].bytes, "c");
  for (uint32_t k = 0; k < 3; k++) {
    wk_core_handle_task_timed_out(core, ids[k].bytes, ids[k].len, 11001, &out);
    FX_ERR(out.err, WK_OK);
    FX_INV(core);
  }
  assert_int_equal(wk_core_live_tasks(core), 0);
  assert_int_equal(wk_core_timed_out_tasks(core, 99999, ids, FX_SLOTS), 0);
}

static void test_task_timeout_errors(void **state) {
  wk_core *core = *state;
  wk_transition_result out;
  FX_RESERVE(core, ID("reserved"), 0, 1000, 2000);
  wk_core_handle_task_timed_out(core, ID("nope"), 99999, &out);
  EXPECT_NO_CMDS(out, WK_ERR_NOT_FOUND);
  FX_INV(core);
  wk_core_handle_task_timed_out(core, ID("reserved"), 1500, &out);
  EXPECT_NO_CMDS(out, WK_ERR_NOT_FOUND);
  FX_INV(core);
  FX_HB(core, 1500, FX_SLOTS, 1, 0, true, false);
}

static void test_timed_out_tasks_scan(void **state) {
  wk_core *core = *state;
  static const int64_t timeouts[3] = {3000, 1000, 2000};
  static const char *const names[3] = {"a", "b", "c"};
  for (int i = 0; i < 3; i++) {
    wk_submit_request req = fx_req(names[i], 1, 0, 1);
    req.timeout_ms = timeouts[i];
    wk_submit_result sr;
    wk_core_handle_submit(core, &req, &ctx_a, 1000, &sr);
    FX_ERR(sr.err, WK_OK);
    FX_INV(core);
    fx_activate_at(core, names[i], 1, sr.slot_id, 1, &ctx_a, 1001, FX_AT);
  }
  assert_int_equal(wk_core_next_deadline(core), 2000);
  wk_task_id ids[4];
  assert_int_equal(wk_core_timed_out_tasks(core, 1999, ids, 4), 0);
  assert_int_equal(wk_core_timed_out_tasks(core, 2000, ids, 4), 1);
  assert_string_equal(ids[0].bytes, "b");
  assert_int_equal(wk_core_timed_out_tasks(core, 3500, ids, 4), 2);
  assert_true(FX_IDS_CONTAIN(ids, 2, ID("b")));
  assert_true(FX_IDS_CONTAIN(ids, 2, ID("c")));
  assert_int_equal(wk_core_timed_out_tasks(core, 9000, ids, 4), 3);
  assert_true(FX_IDS_CONTAIN(ids, 3, ID("a")));
  assert_true(FX_IDS_CONTAIN(ids, 3, ID("b")));
  assert_true(FX_IDS_CONTAIN(ids, 3, ID("c")));
  memset(ids, 0, sizeof ids);
  assert_int_equal(wk_core_timed_out_tasks(core, 9000, ids, 2), 2);
  assert_int_equal(ids[2].len, 0); /* nothing past max */
  assert_int_equal(ids[0].len, 1);
  assert_int_equal(ids[1].len, 1);
  assert_int_not_equal(ids[0].bytes[0], ids[1].bytes[0]); /* two different tasks */
  assert_int_equal(wk_core_timed_out_tasks(core, 9000, ids, 0), 0);
  FX_INV(core);
  FX_HB(core, 9000, FX_SLOTS, 0, 3, true, false);

  /* handled one by one they leave the scan */
  wk_transition_result out;
  wk_core_handle_task_timed_out(core, ID("b"), 9000, &out);
  FX_ERR(out.err, WK_OK);
  FX_INV(core);
  assert_int_equal(wk_core_next_deadline(core), 3000);
  assert_int_equal(wk_core_timed_out_tasks(core, 9000, ids, 4), 2);
  assert_false(FX_IDS_CONTAIN(ids, 2, ID("b")));
}

/* ---- watch ------------------------------------------------------------------------------ */

static void test_watch_grace_converges_owner_lost(void **state) {
  wk_core *core = *state;
  wk_transition_result out;
  uint64_t s = FX_RUN_TO_BUILDER(core, ID("t1"), &ctx_a, 1000);
  FX_ERR(wk_core_handle_watch_attached(core, ID("t1"), 1500), WK_OK);
  FX_INV(core);
  assert_int_equal(wk_core_next_deadline(core), 1000 + FX_TIMEOUT);
  FX_ERR(wk_core_handle_watch_disconnected(core, ID("t1"), 2000), WK_OK);
  FX_INV(core);
  assert_int_equal(wk_core_next_deadline(core), 2000 + FX_GRACE);

  wk_task_id ids[2];
  memset(ids, 0, sizeof ids);
  assert_int_equal(wk_core_watch_disconnected_tasks(core, 3999, ids, 2), 0);
  assert_int_equal(wk_core_watch_disconnected_tasks(core, 4000, ids, 2), 1);
  assert_int_equal(ids[0].len, 2);
  assert_string_equal(ids[0].bytes, "t1");

  wk_core_handle_watch_grace_expired(core, ID("t1"), 3999, &out);
  EXPECT_NO_CMDS(out, WK_ERR_STALE); /* grace not over */
  FX_INV(core);
  const wk_task_result *r = FX_GET(core, ID("t1"));
  FX_RES(r, s, WK_TASK_RUNNING, WK_PHASE_BUILDER, WK_FAIL_NONE, "", 7);

  memset(&out, 0xa5, sizeof out);
  wk_core_handle_watch_grace_expired(core, ID("t1"), 4000, &out);
  FX_CANCEL_CONVERGE(out, ID("t1"), s, &ctx_a, WK_TASK_FAILED, WK_FAIL_OWNER_LOST, NULL, 7, 4000);
  FX_INV(core);
  FX_SLOT_FREE(core, s);
  FX_HB(core, 4000, FX_SLOTS, 0, 0, true, false);
  r = FX_GET(core, ID("t1"));
  FX_RES(r, s, WK_TASK_FAILED, WK_PHASE_DONE, WK_FAIL_OWNER_LOST, NULL, 7);
  FX_TIMES(r, 1000, 1001, 1001, FX_ANY, 0, 0, 0, 0, 4000);
  assert_int_equal(wk_core_watch_disconnected_tasks(core, 99999, ids, 2), 0);
  assert_int_equal(wk_core_timed_out_tasks(core, 99999, ids, 2), 0);
  assert_int_equal(wk_core_next_deadline(core), 4000 + FX_RETENTION);
  assert_int_equal(wk_core_live_tasks(core), 0);

  wk_core_handle_watch_grace_expired(core, ID("t1"), 5000, &out);
  EXPECT_NO_CMDS(out, WK_ERR_STALE); /* terminal */
  FX_INV(core);
}

static void test_watch_reattach_keeps_task(void **state) {
  wk_core *core = *state;
  wk_transition_result out;
  wk_task_id ids[2];
  uint64_t s = FX_RUN_TO_BUILDER(core, ID("t1"), &ctx_a, 1000);
  FX_ERR(wk_core_handle_watch_attached(core, ID("t1"), 1500), WK_OK);
  FX_ERR(wk_core_handle_watch_disconnected(core, ID("t1"), 2000), WK_OK);
  FX_INV(core);
  FX_ERR(wk_core_handle_watch_attached(core, ID("t1"), 3000), WK_OK);
  FX_INV(core);
  assert_int_equal(wk_core_watch_disconnected_tasks(core, 4000, ids, 2), 0);
  assert_int_equal(wk_core_next_deadline(core), 1000 + FX_TIMEOUT);
  wk_core_handle_watch_grace_expired(core, ID("t1"), 4000, &out);
  EXPECT_NO_CMDS(out, WK_ERR_STALE); /* re-attached */
  FX_INV(core);
  const wk_task_result *r = FX_GET(core, ID("t1"));
  FX_RES(r, s, WK_TASK_RUNNING, WK_PHASE_BUILDER, WK_FAIL_NONE, "", 7);
  FX_HB(core, 4000, FX_SLOTS, 0, 1, true, false);

  /* a second break starts a fresh grace */
  FX_ERR(wk_core_handle_watch_disconnected(core, ID("t1"), 5000), WK_OK);
  FX_INV(core);
  assert_int_equal(wk_core_next_deadline(core), 5000 + FX_GRACE);
  assert_int_equal(wk_core_watch_disconnected_tasks(core, 5000 + FX_GRACE - 1, ids, 2), 0);
  assert_int_equal(wk_core_watch_disconnected_tasks(core, 5000 + FX_GRACE, ids, 2), 1);

  /* re-attach, then leave cleanly: no grace at all */
  FX_ERR(wk_core_handle_watch_attached(core, ID("t1"), 6000), WK_OK);
  FX_ERR(wk_core_handle_watch_detached(core, ID("t1"), 6500), WK_OK);
  FX_INV(core);
  assert_int_equal(wk_core_watch_disconnected_tasks(core, 1000 + FX_TIMEOUT - 1, ids, 2), 0);
  assert_int_equal(wk_core_next_deadline(core), 1000 + FX_TIMEOUT);
  wk_core_handle_watch_grace_expired(core, ID("t1"), 9000, &out);
  EXPECT_NO_CMDS(out, WK_ERR_STALE);
  FX_INV(core);

  FX_BUILDER_OK(core, ID("t1"), s, &ctx_a, NULL, false, 9100);
  FX_CALLS_OK(core, ID("t1"), s, &ctx_a, NULL, 0, 9200);
  FX_WRITER_OK(core, ID("t1"), s, &ctx_a, NULL, 0, 9300);
  r = FX_GET(core, ID("t1"));
  FX_RES(r, s, WK_TASK_SUCCEEDED, WK_PHASE_DONE, WK_FAIL_NONE, "", 7);
}

static void test_watch_clean_detach_has_no_grace(void **state) {
  wk_core *core = *state;
  wk_transition_result out;
  wk_task_id ids[2];
  uint64_t s = FX_RUN_TO_BUILDER(core, ID("t1"), &ctx_a, 1000);
  FX_ERR(wk_core_handle_watch_attached(core, ID("t1"), 1100), WK_OK);
  FX_ERR(wk_core_handle_watch_detached(core, ID("t1"), 1200), WK_OK);
  FX_INV(core);
  assert_int_equal(wk_core_watch_disconnected_tasks(core, 1200 + FX_GRACE, ids, 2), 0);
  assert_int_equal(wk_core_next_deadline(core), 1000 + FX_TIMEOUT);
  wk_core_handle_watch_grace_expired(core, ID("t1"), 1200 + FX_GRACE, &out);
  EXPECT_NO_CMDS(out, WK_ERR_STALE);
  FX_INV(core);
  const wk_task_result *r = FX_GET(core, ID("t1"));
  FX_RES(r, s, WK_TASK_RUNNING, WK_PHASE_BUILDER, WK_FAIL_NONE, "", 7);

  /* never watched: no grace either */
  uint64_t s2 = FX_RUN_TO_BUILDER(core, ID("t2"), &ctx_b, 2000);
  wk_core_handle_watch_grace_expired(core, ID("t2"), 9000, &out);
  EXPECT_NO_CMDS(out, WK_ERR_STALE);
  FX_INV(core);
  r = FX_GET(core, ID("t2"));
  FX_RES(r, s2, WK_TASK_RUNNING, WK_PHASE_BUILDER, WK_FAIL_NONE, "", 7);
  FX_HB(core, 9000, FX_SLOTS, 0, 2, true, false);
}

static void test_watch_grace_while_preparing(void **state) {
  wk_core *core = *state;
  wk_transition_result out;
  uint64_t slot = FX_RESERVE(core, ID("t1"), 5000, 1000, 6000);
  FX_SUBMIT(core, ID("t1"), slot, 1, &ctx_a, 1000);
  FX_ERR(wk_core_handle_watch_attached(core, ID("t1"), 1100), WK_OK);
  FX_ERR(wk_core_handle_watch_disconnected(core, ID("t1"), 1200), WK_OK);
  FX_INV(core);
  assert_int_equal(wk_core_next_deadline(core), 1200 + FX_GRACE);
  memset(&out, 0xa5, sizeof out);
  wk_core_handle_watch_grace_expired(core, ID("t1"), 1200 + FX_GRACE, &out);
  FX_CANCEL_CONVERGE(out, ID("t1"), slot, &ctx_a, WK_TASK_FAILED, WK_FAIL_OWNER_LOST, NULL, 0,
                     1200 + FX_GRACE);
  FX_INV(core);
  FX_SLOT_FREE(core, slot);
  FX_HB(core, 3200, FX_SLOTS, 0, 0, true, false);
  uint64_t got[2];
  assert_int_equal(wk_core_expired_slots(core, 6000, got, 2), 0);
  wk_core_handle_activation_prepared(core, ID("t1"), slot, 1, 3300, &out);
  EXPECT_NO_CMDS(out, WK_ERR_STALE);
  FX_INV(core);
}

static void test_watch_errors(void **state) {
  wk_core *core = *state;
  wk_transition_result out;
  FX_RESERVE(core, ID("reserved"), 0, 1000, 2000);
  FX_ERR(wk_core_handle_watch_attached(core, ID("nope"), 1000), WK_ERR_NOT_FOUND);
  FX_ERR(wk_core_handle_watch_detached(core, ID("nope"), 1000), WK_ERR_NOT_FOUND);
  FX_ERR(wk_core_handle_watch_disconnected(core, ID("nope"), 1000), WK_ERR_NOT_FOUND);
  wk_core_handle_watch_grace_expired(core, ID("nope"), 1000, &out);
  EXPECT_NO_CMDS(out, WK_ERR_NOT_FOUND);
  FX_INV(core);
  FX_ERR(wk_core_handle_watch_attached(core, ID("reserved"), 1000), WK_ERR_NOT_FOUND);
  FX_ERR(wk_core_handle_watch_detached(core, ID("reserved"), 1000), WK_ERR_NOT_FOUND);
  FX_ERR(wk_core_handle_watch_disconnected(core, ID("reserved"), 1000), WK_ERR_NOT_FOUND);
  wk_core_handle_watch_grace_expired(core, ID("reserved"), 1000, &out);
  EXPECT_NO_CMDS(out, WK_ERR_NOT_FOUND);
  FX_INV(core);
  FX_HB(core, 1000, FX_SLOTS, 1, 0, true, false);
  assert_int_equal(wk_core_next_deadline(core), 2000);
}

static void test_watch_on_terminal_task(void **state) {
  wk_core *core = *state;
  wk_transition_result out;
  wk_task_id ids[2];
  uint64_t s = FX_RUN_SUCCESS(core, ID("t1"), &ctx_a, 1000); /* finished 1004 */
  FX_ERR(wk_core_handle_watch_attached(core, ID("t1"), 2000), WK_OK);
  FX_INV(core);
  FX_ERR(wk_core_handle_watch_disconnected(core, ID("t1"), 2100), WK_OK);
  FX_INV(core);
  assert_int_equal(wk_core_watch_disconnected_tasks(core, 2100 + FX_GRACE, ids, 2), 0);
  assert_int_equal(wk_core_next_deadline(core), 1004 + FX_RETENTION);
  wk_core_handle_watch_grace_expired(core, ID("t1"), 2100 + FX_GRACE, &out);
  EXPECT_NO_CMDS(out, WK_ERR_STALE);
  FX_INV(core);
  FX_ERR(wk_core_handle_watch_attached(core, ID("t1"), 5000), WK_OK);
  FX_ERR(wk_core_handle_watch_detached(core, ID("t1"), 5100), WK_OK);
  FX_INV(core);
  const wk_task_result *r = FX_GET(core, ID("t1"));
  FX_RES(r, s, WK_TASK_SUCCEEDED, WK_PHASE_DONE, WK_FAIL_NONE, "", 1);
  FX_TIMES(r, 1000, 1001, 1001, 1002, 1002, 1003, 1003, 1004, 1004);
  assert_int_equal(wk_core_retained_count(core), 1);
}

static void test_watch_disconnected_tasks_scan(void **state) {
  wk_core *core = *state;
  static const char *const names[3] = {"a", "b", "c"};
  for (int i = 0; i < 3; i++) {
    fx_run_to_builder_at(core, names[i], 1, &ctx_c, 1000, FX_AT);
    FX_ERR(wk_core_handle_watch_attached(core, names[i], 1, 1050), WK_OK);
  }
  /* break in the order c, a, b */
  FX_ERR(wk_core_handle_watch_disconnected(core, ID("c"), 1100), WK_OK);
  FX_ERR(wk_core_handle_watch_disconnected(core, ID("a"), 1200), WK_OK);
  FX_ERR(wk_core_handle_watch_disconnected(core, ID("b"), 1300), WK_OK);
  FX_INV(core);
  assert_int_equal(wk_core_next_deadline(core), 1100 + FX_GRACE);

  wk_task_id ids[4];
  memset(ids, 0, sizeof ids);
  assert_int_equal(wk_core_watch_disconnected_tasks(core, 1100 + FX_GRACE - 1, ids, 4), 0);
  assert_int_equal(wk_core_watch_disconnected_tasks(core, 1100 + FX_GRACE, ids, 4), 1);
  assert_string_equal(ids[0].bytes, "c");
  assert_int_equal(wk_core_watch_disconnected_tasks(core, 1250 + FX_GRACE, ids, 4), 2);
  assert_true(FX_IDS_CONTAIN(ids, 2, ID("c")));
  assert_true(FX_IDS_CONTAIN(ids, 2, ID("a")));
  assert_int_equal(wk_core_watch_disconnected_tasks(core, 9000, ids, 4), 3);
  assert_true(FX_IDS_CONTAIN(ids, 3, ID("b")));
  memset(ids, 0, sizeof ids);
  assert_int_equal(wk_core_watch_disconnected_tasks(core, 9000, ids, 1), 1);
  assert_int_equal(ids[1].len, 0);
  assert_int_equal(wk_core_watch_disconnected_tasks(core, 9000, ids, 0), 0);
  FX_INV(core);

  /* a re-attach takes one out */
  FX_ERR(wk_core_handle_watch_attached(core, ID("a"), 1400), WK_OK);
  FX_INV(core);
  assert_int_equal(wk_core_watch_disconnected_tasks(core, 9000, ids, 4), 2);
  assert_false(FX_IDS_CONTAIN(ids, 2, ID("a")));
  FX_HB(core, 9000, FX_SLOTS, 0, 3, true, false);
}

/* ---- next_deadline ----------------------------------------------------------------------- */

static void test_next_deadline_follows_every_timer(void **state) {
  wk_core *core = *state;
  wk_transition_result out;
  assert_int_equal(wk_core_next_deadline(core), INT64_MAX);
  uint64_t r = FX_RESERVE(core, ID("r"), 3000, 1000, 4000);
  assert_int_equal(wk_core_next_deadline(core), 4000);
  uint64_t t = FX_SUBMIT(core, ID("t"), 0, 1, &ctx_a, 1500); /* lease 2500, deadline 11500 */
  assert_int_equal(wk_core_next_deadline(core), 2500);
  FX_ACTIVATE(core, ID("t"), t, 1, &ctx_a, 1600);
  assert_int_equal(wk_core_next_deadline(core), 4000);
  FX_ERR(wk_core_handle_watch_attached(core, ID("t"), 1700), WK_OK);
  FX_ERR(wk_core_handle_watch_disconnected(core, ID("t"), 1800), WK_OK); /* grace 3800 */
  assert_int_equal(wk_core_next_deadline(core), 3800);
  FX_ERR(wk_core_handle_watch_attached(core, ID("t"), 1900), WK_OK);
  assert_int_equal(wk_core_next_deadline(core), 4000);
  FX_INV(core);

  wk_core_handle_slot_lease_expired(core, r, 4000, &out);
  FX_ERR(out.err, WK_OK);
  FX_INV(core);
  assert_int_equal(wk_core_next_deadline(core), 11500);
  wk_core_handle_task_timed_out(core, ID("t"), 11500, &out);
  FX_ERR(out.err, WK_OK);
  FX_INV(core);
  assert_int_equal(wk_core_next_deadline(core), 11500 + FX_RETENTION);
  assert_int_equal(wk_core_purge_expired_results(core, 11500 + FX_RETENTION), 1);
  FX_INV(core);
  assert_int_equal(wk_core_next_deadline(core), INT64_MAX);
}

/* ---- retention --------------------------------------------------------------------------- */

static void test_purge_by_time_oldest_first(void **state) {
  wk_core *core = *state;
  FX_RUN_SUCCESS(core, ID("a"), &ctx_a, 1000);               /* finished 1004 */
  uint64_t sb = FX_RUN_SUCCESS(core, ID("b"), &ctx_b, 2000); /* finished 2004 */
  uint64_t live = FX_RUN_TO_BUILDER(core, ID("live"), &ctx_c, 3000);
  assert_int_equal(wk_core_retained_count(core), 2);
  uint64_t bytes2 = wk_core_retained_bytes(core);
  assert_true(bytes2 > 0);
  assert_int_equal(wk_core_next_deadline(core), 3000 + FX_TIMEOUT);

  assert_int_equal(wk_core_purge_expired_results(core, 1004 + FX_RETENTION - 1), 0);
  FX_INV(core);
  assert_int_equal(wk_core_retained_count(core), 2);
  assert_int_equal(wk_core_retained_bytes(core), bytes2);

  assert_int_equal(wk_core_purge_expired_results(core, 1004 + FX_RETENTION), 1);
  FX_INV(core);
  FX_NOT_FOUND(core, ID("a"));
  const wk_task_result *r = FX_GET(core, ID("b"));
  FX_RES(r, sb, WK_TASK_SUCCEEDED, WK_PHASE_DONE, WK_FAIL_NONE, "", 1);
  assert_int_equal(wk_core_retained_count(core), 1);
  uint64_t bytes1 = wk_core_retained_bytes(core);
  assert_true(bytes1 > 0);
  assert_true(bytes1 < bytes2);

  assert_int_equal(wk_core_purge_expired_results(core, 2004 + FX_RETENTION), 1);
  FX_INV(core);
  FX_NOT_FOUND(core, ID("b"));
  assert_int_equal(wk_core_retained_count(core), 0);
  assert_int_equal(wk_core_retained_bytes(core), 0);
  assert_int_equal(wk_core_purge_expired_results(core, INT64_MAX), 0);
  FX_INV(core);

  /* live tasks are never purged */
  r = FX_GET(core, ID("live"));
  FX_RES(r, live, WK_TASK_RUNNING, WK_PHASE_BUILDER, WK_FAIL_NONE, "", 7);
  assert_int_equal(wk_core_live_tasks(core), 1);
  FX_HB(core, INT64_MAX, FX_SLOTS, 0, 1, true, false);
}

static void test_purged_id_is_new_again(void **state) {
  wk_core *core = *state;
  uint64_t s1 = FX_RUN_SUCCESS(core, ID("a"), &ctx_a, 1000);
  assert_int_equal(wk_core_purge_expired_results(core, 1004 + FX_RETENTION), 1);
  FX_INV(core);
  FX_NOT_FOUND(core, ID("a"));

  /* RequestTaskSlot and SubmitTask (with another digest) both treat it as new */
  int64_t t = 1004 + FX_RETENTION + 10;
  uint64_t s2 = FX_RESERVE(core, ID("a"), 0, t, t + FX_TTL);
  FX_SUBMIT(core, ID("a"), s2, 0x0777, &ctx_b, t + 1);
  assert_int_not_equal(s2, s1);
  const wk_task_result *r = FX_GET(core, ID("a"));
  FX_RES(r, s2, WK_TASK_PREPARING, WK_PHASE_PREPARING, WK_FAIL_NONE, "", 0);
  FX_TIMES(r, t + 1, 0, 0, 0, 0, 0, 0, 0, 0);
  assert_int_equal(wk_core_retained_count(core), 0);
}

/* A ready core of the fixture's settings that retains at most `results` results. */
static wk_core *core_retaining(uint32_t results) {
  wk_core_config cfg = fx_config(FX_SLOTS);
  cfg.max_retained_results = results;
  wk_core *core = wk_core_create(&cfg);
  assert_non_null(core);
  wk_core_set_ready(core, true);
  return core;
}

static void test_retention_bounded_by_count(void **state) {
  (void)state;
  wk_core *core = core_retaining(2);

  FX_RUN_SUCCESS(core, ID("a"), &ctx_a, 1000);
  FX_RUN_SUCCESS(core, ID("b"), &ctx_a, 2000);
  assert_int_equal(wk_core_retained_count(core), 2);
  uint64_t bytes2 = wk_core_retained_bytes(core);
  uint64_t sc = FX_RUN_SUCCESS(core, ID("c"), &ctx_a, 3000);
  /* the oldest goes at once */
  assert_int_equal(wk_core_retained_count(core), 2);
  assert_int_equal(wk_core_retained_bytes(core), bytes2);
  FX_NOT_FOUND(core, ID("a"));
  FX_GET(core, ID("b"));
  const wk_task_result *r = FX_GET(core, ID("c"));
  FX_RES(r, sc, WK_TASK_SUCCEEDED, WK_PHASE_DONE, WK_FAIL_NONE, "", 1);
  assert_int_equal(wk_core_next_deadline(core), 2004 + FX_RETENTION);

  /* a purged id is new: another digest is no conflict */
  FX_SUBMIT(core, ID("a"), 0, 0x0999, &ctx_b, 4000);
  assert_int_equal(wk_core_retained_count(core), 2);
  FX_HB(core, 4000, FX_SLOTS, 1, 0, true, false);
  FX_INV(core);
  wk_core_destroy(core);
}

/* A successful task with `n` bytes of outputs; ids of one length give equal sizes. */
static void run_with_outputs_at(wk_core *core, const char *id, size_t len, size_t n, int64_t t,
                                FX_LOC) {
  static uint8_t buf[3000];
  memset(buf, (int)(t % 251), sizeof buf);
  uint64_t s = fx_run_to_builder_at(core, id, len, &ctx_a, t, file, line);
  fx_builder_ok_at(core, id, len, s, &ctx_a, NULL, false, t + 2, file, line);
  fx_calls_ok_at(core, id, len, s, &ctx_a, buf, n, t + 3, file, line);
  fx_writer_ok_at(core, id, len, s, &ctx_a, NULL, 0, t + 4, file, line);
}
#define RUN_WITH_OUTPUTS(core, id, n, t) run_with_outputs_at((core), id, (n), (t), FX_AT)

static void test_retention_bounded_by_bytes(void **state) {
  (void)state;
  /* measure what one such result costs */
  wk_core_config cfg = fx_config(FX_SLOTS);
  wk_core *probe = wk_core_create(&cfg);
  assert_non_null(probe);
  wk_core_set_ready(probe, true);
  RUN_WITH_OUTPUTS(probe, ID("x"), 3000, 1000);
  uint64_t one = wk_core_retained_bytes(probe);
  assert_true(one >= 3000 + 1);
  wk_core_destroy(probe);

  cfg.max_retained_bytes = 2 * one + one / 2;
  wk_core *core = wk_core_create(&cfg);
  assert_non_null(core);
  wk_core_set_ready(core, true);
  RUN_WITH_OUTPUTS(core, ID("a"), 3000, 1000);
  assert_int_equal(wk_core_retained_bytes(core), one);
  RUN_WITH_OUTPUTS(core, ID("b"), 3000, 2000);
  assert_int_equal(wk_core_retained_bytes(core), 2 * one);
  assert_int_equal(wk_core_retained_count(core), 2);
  RUN_WITH_OUTPUTS(core, ID("c"), 3000, 3000);
  assert_int_equal(wk_core_retained_count(core), 2);
  assert_int_equal(wk_core_retained_bytes(core), 2 * one);
  FX_NOT_FOUND(core, ID("a"));
  const wk_task_result *r = FX_GET(core, ID("b"));
  assert_int_equal(r->outputs.len, 3000);
  r = FX_GET(core, ID("c"));
  assert_int_equal(r->outputs.len, 3000);
  assert_int_equal(r->outputs.data[2999], 3000 % 251);
  FX_INV(core);

  /* a small result fits beside them: the bytes, not the count, were the limit */
  FX_RUN_SUCCESS(core, ID("d"), &ctx_b, 4000);
  assert_int_equal(wk_core_retained_count(core), 3);
  FX_GET(core, ID("b"));
  FX_GET(core, ID("c"));
  FX_GET(core, ID("d"));
  assert_true(wk_core_retained_bytes(core) > 2 * one);
  assert_true(wk_core_retained_bytes(core) <= cfg.max_retained_bytes);
  FX_INV(core);
  wk_core_destroy(core);
}

/* The forget hook hears each task the core forgets, once, in order: an evicted
 * result, an expired reservation, a lapsed one asked for again, purged results;
 * never a task still known, and nothing from wk_core_destroy. */
typedef struct forgotten {
  char ids[8][8];
  int n;
} forgotten;

static void record_forgotten(void *ud, const char *task_id, size_t len) {
  forgotten *f = ud;
  assert_true(f->n < 8 && len < sizeof f->ids[0]);
  memcpy(f->ids[f->n], task_id, len);
  f->ids[f->n++][len] = '\0';
}

static void test_forget_hook_hears_every_forgotten_task(void **state) {
  (void)state;
  wk_core *core = core_retaining(2);
  forgotten f = {0};
  wk_core_set_forget_hook(core, record_forgotten, &f);

  FX_RUN_SUCCESS(core, ID("a"), &ctx_a, 1000);
  FX_RUN_SUCCESS(core, ID("b"), &ctx_a, 2000);
  assert_int_equal(f.n, 0);
  FX_RUN_SUCCESS(core, ID("c"), &ctx_a, 3000); /* evicts a */
  assert_int_equal(f.n, 1);
  assert_string_equal(f.ids[0], "a");
  FX_NOT_FOUND(core, ID("a"));

  uint64_t s1 = FX_RESERVE(core, ID("r1"), 0, 4000, 4000 + FX_TTL);
  wk_transition_result out;
  wk_core_handle_slot_lease_expired(core, s1, 4000 + FX_TTL, &out);
  FX_ERR(out.err, WK_OK);
  assert_int_equal(f.n, 2);
  assert_string_equal(f.ids[1], "r1");

  FX_RESERVE(core, ID("r2"), 0, 6000, 6000 + FX_TTL);
  int64_t later = 6000 + FX_TTL + 1; /* lapsed: asked for again, it is new */
  FX_RESERVE(core, ID("r2"), 0, later, later + FX_TTL);
  assert_int_equal(f.n, 3);
  assert_string_equal(f.ids[2], "r2");

  assert_int_equal(wk_core_purge_expired_results(core, 3004 + FX_RETENTION), 2);
  assert_int_equal(f.n, 5);
  assert_string_equal(f.ids[3], "b");
  assert_string_equal(f.ids[4], "c");
  FX_INV(core);

  wk_core_destroy(core); /* the second r2 reservation is still known: not told */
  assert_int_equal(f.n, 5);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      FX_TEST(test_task_timeout_in_calls_phase),
      FX_TEST(test_task_timeout_while_preparing),
      FX_TEST(test_task_timeout_errors),
      FX_TEST(test_timed_out_tasks_scan),
      FX_TEST(test_watch_grace_converges_owner_lost),
      FX_TEST(test_watch_reattach_keeps_task),
      FX_TEST(test_watch_clean_detach_has_no_grace),
      FX_TEST(test_watch_grace_while_preparing),
      FX_TEST(test_watch_errors),
      FX_TEST(test_watch_on_terminal_task),
      FX_TEST(test_watch_disconnected_tasks_scan),
      FX_TEST(test_timeouts_in_and_out_of_order),
      FX_TEST(test_next_deadline_follows_every_timer),
      FX_TEST(test_purge_by_time_oldest_first),
      FX_TEST(test_purged_id_is_new_again),
      FX_TEST(test_retention_bounded_by_count),
      FX_TEST(test_retention_bounded_by_bytes),
      FX_TEST(test_forget_hook_hears_every_forgotten_task),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

/* test_core_phases.c: activation prepared/failed, the builder, calls and writer
 * outcomes with their default failure codes, out-of-order STALE, SLOT_LOST. */
#include <stdio.h>

#include "core_fixture.h"

static int ctx_a, ctx_b;
static int call_list_marker;

/* A transition expected to be dropped or refused: `want`, no command. */
static void expect_no_cmds_at(const wk_transition_result *out, wk_err want, FX_LOC) {
  fx_err_at(out->err, want, file, line);
  FX_EQ(out->cmds.count, 0);
}
#define EXPECT_NO_CMDS(out, want) expect_no_cmds_at(&(out), (want), FX_AT)

/* The single CONVERGE of a task that failed with `code` and `message`. */
static void expect_converge_failed_at(const wk_transition_result *out, const char *id, size_t len,
                                      uint64_t slot_id, void *ctx, wk_failure_code code,
                                      const char *message, uint64_t epoch, int64_t now, FX_LOC) {
  fx_err_at(out->err, WK_OK, file, line);
  FX_EQ(out->cmds.count, 1);
  fx_cmd_at(&out->cmds.items[0], WK_CMD_CONVERGE, id, len, slot_id, ctx, file, line);
  const wk_task_result *r = out->cmds.items[0].u.converge.result;
  fx_res_at(r, slot_id, WK_TASK_FAILED, WK_PHASE_DONE, code, message, epoch, file, line);
  FX_EQ(r->task_id_len, len);
  FX_MEM(r->task_id, id, len);
  FX_EQ(r->statistic.finished_ms, now);
}
#define EXPECT_CONVERGE_FAILED(out, id, slot_id, ctx, code, message, epoch, now) \
  expect_converge_failed_at(&(out), id, (slot_id), (ctx), (code), (message), (epoch), (now), FX_AT)

/* ---- activation ---------------------------------------------------------------------- */

static void test_activation_prepared_starts_builder(void **state) {
  wk_core *core = *state;
  uint64_t s = FX_SUBMIT(core, ID("t1"), 0, 1, &ctx_a, 1000);
  wk_transition_result out;
  memset(&out, 0xa5, sizeof out);
  wk_core_handle_activation_prepared(core, ID("t1"), s, 7, 1500, &out);
  FX_ERR(out.err, WK_OK);
  assert_int_equal(out.cmds.count, 1);
  FX_CMD(&out.cmds.items[0], WK_CMD_START_BUILDER, ID("t1"), s, &ctx_a);
  FX_INV(core);

  FX_SLOT_RUNNING(core, s, ID("t1"));
  FX_HB(core, 1500, FX_SLOTS, 0, 1, true, false);
  const wk_task_result *r = FX_GET(core, ID("t1"));
  FX_RES(r, s, WK_TASK_RUNNING, WK_PHASE_BUILDER, WK_FAIL_NONE, "", 7);
  FX_TIMES(r, 1000, 1500, 1500, 0, 0, 0, 0, 0, 0);
  assert_int_equal(wk_core_live_tasks(core), 1);
  /* the lease is no longer a timer: only the task deadline is */
  uint64_t got[2];
  assert_int_equal(wk_core_expired_slots(core, 1000 + FX_TTL, got, 2), 0);
  assert_int_equal(wk_core_next_deadline(core), 1000 + FX_TIMEOUT);
}

static void test_activation_prepared_just_before_lease_expiry(void **state) {
  wk_core *core = *state;
  uint64_t s = FX_SUBMIT(core, ID("t1"), 0, 1, &ctx_a, 1000);
  FX_ACTIVATE(core, ID("t1"), s, 2, &ctx_a, 1000 + FX_TTL - 1);
  const wk_task_result *r = FX_GET(core, ID("t1"));
  FX_RES(r, s, WK_TASK_RUNNING, WK_PHASE_BUILDER, WK_FAIL_NONE, "", 2);
  FX_HB(core, 1000 + FX_TTL, FX_SLOTS, 0, 1, true, false);
}

static void test_activation_prepared_stale_and_not_found(void **state) {
  wk_core *core = *state;
  wk_transition_result out;
  uint64_t s = FX_SUBMIT(core, ID("t1"), 0, 1, &ctx_a, 1000);
  uint64_t other = FX_RESERVE(core, ID("other"), 0, 1000, 2000);

  /* a slot id that is not the task's */
  wk_core_handle_activation_prepared(core, ID("t1"), other, 7, 1100, &out);
  EXPECT_NO_CMDS(out, WK_ERR_STALE);
  FX_INV(core);
  uint64_t wrong_gen = wk_slot_id_make(wk_slot_id_index(s), wk_slot_id_generation(s) + 1);
  wk_core_handle_activation_prepared(core, ID("t1"), wrong_gen, 7, 1100, &out);
  EXPECT_NO_CMDS(out, WK_ERR_STALE);
  FX_INV(core);
  const wk_task_result *r = FX_GET(core, ID("t1"));
  FX_RES(r, s, WK_TASK_PREPARING, WK_PHASE_PREPARING, WK_FAIL_NONE, "", 0);
  FX_SLOT_ALLOCATED(core, s, 1000 + FX_TTL, ID("t1"));

  /* unknown ids, and an id that is only reserved */
  wk_core_handle_activation_prepared(core, ID("nope"), s, 7, 1100, &out);
  EXPECT_NO_CMDS(out, WK_ERR_NOT_FOUND);
  FX_INV(core);
  wk_core_handle_activation_prepared(core, ID("other"), other, 7, 1100, &out);
  EXPECT_NO_CMDS(out, WK_ERR_NOT_FOUND);
  FX_INV(core);
  FX_SLOT_ALLOCATED(core, other, 2000, ID("other"));

  /* a second activation is stale and changes nothing (epoch stays 7) */
  FX_ACTIVATE(core, ID("t1"), s, 7, &ctx_a, 1200);
  wk_core_handle_activation_prepared(core, ID("t1"), s, 8, 1300, &out);
  EXPECT_NO_CMDS(out, WK_ERR_STALE);
  FX_INV(core);
  r = FX_GET(core, ID("t1"));
  FX_RES(r, s, WK_TASK_RUNNING, WK_PHASE_BUILDER, WK_FAIL_NONE, "", 7);
  FX_TIMES(r, 1000, 1200, 1200, 0, 0, 0, 0, 0, 0);
  FX_HB(core, 1300, FX_SLOTS, 1, 1, true, false);
}

static void test_activation_after_lease_lapse_is_slot_lost(void **state) {
  wk_core *core = *state;
  uint64_t s = FX_SUBMIT(core, ID("t1"), 0, 1, &ctx_a, 1000);
  wk_transition_result out;
  memset(&out, 0xa5, sizeof out);
  wk_core_handle_activation_prepared(core, ID("t1"), s, 7, 1000 + FX_TTL, &out);
  /* the header leaves CANCEL_TASK open here; like every other convergence of work
   * that may be in flight, it comes first */
  FX_CANCEL_CONVERGE(out, ID("t1"), s, &ctx_a, WK_TASK_FAILED, WK_FAIL_SLOT_LOST, NULL, 0,
                     1000 + FX_TTL);
  FX_INV(core);

  FX_SLOT_FREE(core, s);
  FX_HB(core, 2000, FX_SLOTS, 0, 0, true, false);
  const wk_task_result *r = FX_GET(core, ID("t1"));
  FX_RES(r, s, WK_TASK_FAILED, WK_PHASE_DONE, WK_FAIL_SLOT_LOST, NULL, 0);
  FX_TIMES(r, 1000, 0, 0, 0, 0, 0, 0, 0, 2000);
  assert_int_equal(wk_core_live_tasks(core), 0);
  assert_int_equal(wk_core_retained_count(core), 1);
  uint64_t got[2];
  assert_int_equal(wk_core_expired_slots(core, 9000, got, 2), 0);
  wk_task_id ids[2];
  assert_int_equal(wk_core_timed_out_tasks(core, 90000, ids, 2), 0);

  /* now converged: a retried activation is stale (the adapter unpins) */
  wk_core_handle_activation_prepared(core, ID("t1"), s, 7, 2100, &out);
  EXPECT_NO_CMDS(out, WK_ERR_STALE);
  FX_INV(core);
  wk_core_handle_activation_failed(core, ID("t1"), WK_FAIL_ACTIVATION_FAILED, "x", 2100, &out);
  EXPECT_NO_CMDS(out, WK_ERR_STALE);
  FX_INV(core);
  r = FX_GET(core, ID("t1"));
  FX_RES(r, s, WK_TASK_FAILED, WK_PHASE_DONE, WK_FAIL_SLOT_LOST, NULL, 0);
}

static void test_lease_expiry_while_preparing_is_slot_lost(void **state) {
  wk_core *core = *state;
  uint64_t s = FX_SUBMIT(core, ID("t1"), 0, 1, &ctx_a, 1000);
  uint64_t got[2];
  assert_int_equal(wk_core_expired_slots(core, 1999, got, 2), 0);
  assert_int_equal(wk_core_expired_slots(core, 2000, got, 2), 1);
  assert_int_equal(got[0], s);

  wk_transition_result out;
  memset(&out, 0xa5, sizeof out);
  wk_core_handle_slot_lease_expired(core, s, 2000, &out);
  /* the activation may be under way: CANCEL_TASK, then CONVERGE */
  FX_CANCEL_CONVERGE(out, ID("t1"), s, &ctx_a, WK_TASK_FAILED, WK_FAIL_SLOT_LOST, NULL, 0, 2000);
  FX_INV(core);
  FX_SLOT_FREE(core, s);
  FX_HB(core, 2000, FX_SLOTS, 0, 0, true, false);
  const wk_task_result *r = FX_GET(core, ID("t1"));
  FX_RES(r, s, WK_TASK_FAILED, WK_PHASE_DONE, WK_FAIL_SLOT_LOST, NULL, 0);
  FX_TIMES(r, 1000, 0, 0, 0, 0, 0, 0, 0, 2000);
  assert_int_equal(wk_core_live_tasks(core), 0);

  /* the activation that was under way arrives late: stale */
  wk_core_handle_activation_prepared(core, ID("t1"), s, 7, 2050, &out);
  EXPECT_NO_CMDS(out, WK_ERR_STALE);
  FX_INV(core);
  wk_core_handle_slot_lease_expired(core, s, 2100, &out);
  EXPECT_NO_CMDS(out, WK_ERR_STALE);
  FX_INV(core);
}

static void test_activation_failed_converges(void **state) {
  wk_core *core = *state;
  wk_transition_result out;
  uint64_t s1 = FX_SUBMIT(core, ID("t1"), 0, 1, &ctx_a, 1000);
  uint64_t s2 = FX_SUBMIT(core, ID("t2"), 0, 1, &ctx_b, 1000);
  FX_HB(core, 1000, FX_SLOTS, 2, 0, true, false);

  memset(&out, 0xa5, sizeof out);
  wk_core_handle_activation_failed(core, ID("t1"), WK_FAIL_ACTIVATION_FAILED, "no epoch for fn",
                                   1200, &out);
  EXPECT_CONVERGE_FAILED(out, ID("t1"), s1, &ctx_a, WK_FAIL_ACTIVATION_FAILED, "no epoch for fn", 0,
                         1200);
  FX_INV(core);
  FX_SLOT_FREE(core, s1);
  FX_HB(core, 1200, FX_SLOTS, 1, 0, true, false);

  memset(&out, 0xa5, sizeof out);
  wk_core_handle_activation_failed(core, ID("t2"), WK_FAIL_IO_SCOPE_FAILED, NULL, 1300, &out);
  EXPECT_CONVERGE_FAILED(out, ID("t2"), s2, &ctx_b, WK_FAIL_IO_SCOPE_FAILED, "", 0, 1300);
  FX_INV(core);
  FX_SLOT_FREE(core, s2);
  FX_HB(core, 1300, FX_SLOTS, 0, 0, true, false);

  const wk_task_result *r = FX_GET(core, ID("t1"));
  FX_RES(r, s1, WK_TASK_FAILED, WK_PHASE_DONE, WK_FAIL_ACTIVATION_FAILED, "no epoch for fn", 0);
  FX_TIMES(r, 1000, 0, 0, 0, 0, 0, 0, 0, 1200);
  r = FX_GET(core, ID("t2"));
  FX_RES(r, s2, WK_TASK_FAILED, WK_PHASE_DONE, WK_FAIL_IO_SCOPE_FAILED, "", 0);
  FX_TIMES(r, 1000, 0, 0, 0, 0, 0, 0, 0, 1300);
  assert_int_equal(wk_core_live_tasks(core), 0);
  assert_int_equal(wk_core_retained_count(core), 2);
  assert_int_equal(wk_core_next_deadline(core), 1200 + FX_RETENTION);
}

static void test_activation_failed_errors(void **state) {
  wk_core *core = *state;
  wk_transition_result out;
  uint64_t s = FX_SUBMIT(core, ID("t1"), 0, 1, &ctx_a, 1000);
  static const int bad_codes[] = {
      WK_FAIL_NONE,      WK_FAIL_SLOT_LOST,       WK_FAIL_BUILDER_FAILED, WK_FAIL_TASK_TIMEOUT,
      WK_FAIL_CANCELLED, WK_FAIL_WORKER_SHUTDOWN, WK_FAIL_COUNT,          -1};
  for (size_t i = 0; i < sizeof bad_codes / sizeof bad_codes[0]; i++) {
    wk_core_handle_activation_failed(core, ID("t1"), (wk_failure_code)bad_codes[i], "m", 1100,
                                     &out);
    EXPECT_NO_CMDS(out, WK_ERR_INVALID_ARGUMENT);
    FX_INV(core);
  }
  const wk_task_result *r = FX_GET(core, ID("t1"));
  FX_RES(r, s, WK_TASK_PREPARING, WK_PHASE_PREPARING, WK_FAIL_NONE, "", 0);
  FX_HB(core, 1100, FX_SLOTS, 1, 0, true, false);

  wk_core_handle_activation_failed(core, ID("nope"), WK_FAIL_ACTIVATION_FAILED, "m", 1100, &out);
  EXPECT_NO_CMDS(out, WK_ERR_NOT_FOUND);
  FX_INV(core);

  /* once activated the task is past PREPARING */
  FX_ACTIVATE(core, ID("t1"), s, 4, &ctx_a, 1200);
  wk_core_handle_activation_failed(core, ID("t1"), WK_FAIL_ACTIVATION_FAILED, "m", 1300, &out);
  EXPECT_NO_CMDS(out, WK_ERR_STALE);
  FX_INV(core);
  r = FX_GET(core, ID("t1"));
  FX_RES(r, s, WK_TASK_RUNNING, WK_PHASE_BUILDER, WK_FAIL_NONE, "", 4);
  FX_HB(core, 1300, FX_SLOTS, 0, 1, true, false);
}

static void test_failure_message_truncated(void **state) {
  wk_core *core = *state;
  char longmsg[200];
  memset(longmsg, 'm', sizeof longmsg - 1);
  longmsg[sizeof longmsg - 1] = '\0';
  char want[FX_MAX_MSG + 1];
  memset(want, 'm', FX_MAX_MSG);
  want[FX_MAX_MSG] = '\0';
  char exact[FX_MAX_MSG + 1];
  memcpy(exact, want, sizeof exact);

  wk_transition_result out;
  uint64_t s1 = FX_SUBMIT(core, ID("t1"), 0, 1, &ctx_a, 1000);
  wk_core_handle_activation_failed(core, ID("t1"), WK_FAIL_ACTIVATION_FAILED, longmsg, 1100, &out);
  EXPECT_CONVERGE_FAILED(out, ID("t1"), s1, &ctx_a, WK_FAIL_ACTIVATION_FAILED, want, 0, 1100);
  FX_INV(core);

  uint64_t s2 = FX_RUN_TO_BUILDER(core, ID("t2"), &ctx_b, 2000);
  wk_phase_outcome o = fx_fail(WK_FAIL_NONE, longmsg);
  wk_core_handle_phase_finished(core, ID("t2"), WK_PHASE_BUILDER, &o, 2100, &out);
  EXPECT_CONVERGE_FAILED(out, ID("t2"), s2, &ctx_b, WK_FAIL_BUILDER_FAILED, want, 7, 2100);
  FX_INV(core);

  /* exactly at the limit: kept whole */
  uint64_t s3 = FX_SUBMIT(core, ID("t3"), 0, 1, &ctx_a, 3000);
  wk_core_handle_activation_failed(core, ID("t3"), WK_FAIL_IO_SCOPE_FAILED, exact, 3100, &out);
  EXPECT_CONVERGE_FAILED(out, ID("t3"), s3, &ctx_a, WK_FAIL_IO_SCOPE_FAILED, exact, 0, 3100);
  FX_INV(core);

  const wk_task_result *r = FX_GET(core, ID("t1"));
  assert_int_equal(strlen(r->failure_message), FX_MAX_MSG);
  assert_string_equal(r->failure_message, want);
  r = FX_GET(core, ID("t2"));
  assert_string_equal(r->failure_message, want);
}

/* ---- phases ---------------------------------------------------------------------------- */

static void test_full_success_path(void **state) {
  wk_core *core = *state;
  wk_transition_result out;
  uint64_t s = FX_SUBMIT(core, ID("t1"), 0, 1, &ctx_a, 1000);
  FX_ACTIVATE(core, ID("t1"), s, 11, &ctx_a, 1100);

  /* builder ok → START_CALLS with the call list */
  wk_phase_outcome o = fx_ok();
  o.call_list = &call_list_marker;
  o.streaming = false;
  memset(&out, 0xa5, sizeof out);
  wk_core_handle_phase_finished(core, ID("t1"), WK_PHASE_BUILDER, &o, 1200, &out);
  FX_ERR(out.err, WK_OK);
  assert_int_equal(out.cmds.count, 1);
  FX_CMD(&out.cmds.items[0], WK_CMD_START_CALLS, ID("t1"), s, &ctx_a);
  assert_ptr_equal(out.cmds.items[0].u.calls.call_list, &call_list_marker);
  assert_false(out.cmds.items[0].u.calls.streaming);
  FX_INV(core);
  const wk_task_result *r = FX_GET(core, ID("t1"));
  FX_RES(r, s, WK_TASK_RUNNING, WK_PHASE_CALLS, WK_FAIL_NONE, "", 11);
  FX_TIMES(r, 1000, 1100, 1100, 1200, 1200, 0, 0, 0, 0);

  /* calls ok → START_WRITER with the core's own copy of the outputs */
  uint8_t outputs[5] = {'o', 'u', 't', 0, 9};
  o = fx_ok();
  o.data.data = outputs;
  o.data.len = sizeof outputs;
  o.stats.calls_total = 10;
  o.stats.calls_succeeded = 9;
  o.stats.calls_failed = 1;
  o.stats.calls_retried = 2;
  o.stats.subcalls = 3;
  o.stats.executor_cpu_us = 12345;
  o.stats.bytes_in = 100;
  o.stats.bytes_out = 200;
  wk_call_stats want_stats = o.stats;
  memset(&out, 0xa5, sizeof out);
  wk_core_handle_phase_finished(core, ID("t1"), WK_PHASE_CALLS, &o, 1300, &out);
  FX_ERR(out.err, WK_OK);
  assert_int_equal(out.cmds.count, 1);
  FX_CMD(&out.cmds.items[0], WK_CMD_START_WRITER, ID("t1"), s, &ctx_a);
  FX_BYTES(out.cmds.items[0].u.writer.outputs, "out\0\x09", 5);
  assert_ptr_not_equal(out.cmds.items[0].u.writer.outputs.data, outputs);
  FX_INV(core);
  memset(outputs, 'X', sizeof outputs); /* the caller's buffer is the caller's */
  r = FX_GET(core, ID("t1"));
  FX_RES(r, s, WK_TASK_RUNNING, WK_PHASE_WRITER, WK_FAIL_NONE, "", 11);
  FX_TIMES(r, 1000, 1100, 1100, 1200, 1200, 1300, 1300, 0, 0);
  FX_BYTES(r->outputs, "out\0\x09", 5);
  FX_STATS(&r->statistic.calls, &want_stats);
  FX_SLOT_RUNNING(core, s, ID("t1"));

  /* writer ok → SUCCEEDED */
  char plugin[3] = {'p', 'r', '!'};
  o = fx_ok();
  o.data.data = (const uint8_t *)plugin;
  o.data.len = sizeof plugin;
  memset(&out, 0xa5, sizeof out);
  wk_core_handle_phase_finished(core, ID("t1"), WK_PHASE_WRITER, &o, 1400, &out);
  FX_ERR(out.err, WK_OK);
  assert_int_equal(out.cmds.count, 1);
  FX_CMD(&out.cmds.items[0], WK_CMD_CONVERGE, ID("t1"), s, &ctx_a);
  r = out.cmds.items[0].u.converge.result;
  FX_RES(r, s, WK_TASK_SUCCEEDED, WK_PHASE_DONE, WK_FAIL_NONE, "", 11);
  FX_TIMES(r, 1000, 1100, 1100, 1200, 1200, 1300, 1300, 1400, 1400);
  FX_BYTES(r->outputs, "out\0\x09", 5);
  FX_BYTES(r->plugin_results, "pr!", 3);
  FX_STATS(&r->statistic.calls, &want_stats);
  FX_INV(core);
  memset(plugin, 'X', sizeof plugin);

  r = FX_GET(core, ID("t1"));
  FX_RES(r, s, WK_TASK_SUCCEEDED, WK_PHASE_DONE, WK_FAIL_NONE, "", 11);
  FX_TIMES(r, 1000, 1100, 1100, 1200, 1200, 1300, 1300, 1400, 1400);
  FX_BYTES(r->outputs, "out\0\x09", 5);
  FX_BYTES(r->plugin_results, "pr!", 3);
  FX_STATS(&r->statistic.calls, &want_stats);
  FX_SLOT_FREE(core, s);
  FX_HB(core, 1400, FX_SLOTS, 0, 0, true, false);
  assert_int_equal(wk_core_live_tasks(core), 0);
  assert_int_equal(wk_core_retained_count(core), 1);
  assert_true(wk_core_retained_bytes(core) >= 5 + 3 + 2);
  assert_int_equal(wk_core_next_deadline(core), 1400 + FX_RETENTION);
}

static void test_streaming_builder_and_empty_outputs(void **state) {
  wk_core *core = *state;
  uint64_t s = FX_RUN_TO_BUILDER(core, ID("t1"), &ctx_a, 1000);
  FX_BUILDER_OK(core, ID("t1"), s, &ctx_a, &call_list_marker, true, 1100);
  FX_CALLS_OK(core, ID("t1"), s, &ctx_a, NULL, 0, 1200);
  FX_WRITER_OK(core, ID("t1"), s, &ctx_a, NULL, 0, 1300);
  const wk_task_result *r = FX_GET(core, ID("t1"));
  FX_RES(r, s, WK_TASK_SUCCEEDED, WK_PHASE_DONE, WK_FAIL_NONE, "", 7);
  FX_BYTES(r->outputs, NULL, 0);
  FX_BYTES(r->plugin_results, NULL, 0);
  FX_TIMES(r, 1000, 1001, 1001, 1100, 1100, 1200, 1200, 1300, 1300);
}

/* builder_ms is the builder's own run, as the adapter measured it; a span reaching
 * outside START_BUILDER..now (a finer clock than now's) is clamped into it. */
static void test_builder_span_is_the_run(void **state) {
  wk_core *core = *state;
  wk_transition_result out;
  uint64_t s = FX_SUBMIT(core, ID("t1"), 0, 1, &ctx_a, 1000);
  FX_ACTIVATE(core, ID("t1"), s, 11, &ctx_a, 1100);
  wk_phase_outcome o = fx_ok();
  o.ran_from_ms = 1150; /* waited 50 ms for builder_concurrency, ran 30 ms */
  o.ran_to_ms = 1180;
  wk_core_handle_phase_finished(core, ID("t1"), WK_PHASE_BUILDER, &o, 1200, &out);
  FX_ERR(out.err, WK_OK);
  FX_TIMES(FX_GET(core, ID("t1")), 1000, 1100, 1150, 1180, 1200, 0, 0, 0, 0);

  s = FX_SUBMIT(core, ID("t2"), 0, 1, &ctx_b, 1000);
  FX_ACTIVATE(core, ID("t2"), s, 11, &ctx_b, 1100);
  o.ran_from_ms = 1090; /* before START_BUILDER, and past now */
  o.ran_to_ms = 1203;
  wk_core_handle_phase_finished(core, ID("t2"), WK_PHASE_BUILDER, &o, 1200, &out);
  FX_ERR(out.err, WK_OK);
  FX_TIMES(FX_GET(core, ID("t2")), 1000, 1100, 1100, 1200, 1200, 0, 0, 0, 0);
  FX_INV(core);
}

static void test_builder_failure_codes(void **state) {
  wk_core *core = *state;
  wk_transition_result out;
  uint64_t s1 = FX_RUN_TO_BUILDER(core, ID("t1"), &ctx_a, 1000);
  uint64_t s2 = FX_RUN_TO_BUILDER(core, ID("t2"), &ctx_b, 1000);
  FX_HB(core, 1001, FX_SLOTS, 0, 2, true, false);

  wk_phase_outcome o = fx_fail(WK_FAIL_NONE, "bad args");
  memset(&out, 0xa5, sizeof out);
  wk_core_handle_phase_finished(core, ID("t1"), WK_PHASE_BUILDER, &o, 1500, &out);
  EXPECT_CONVERGE_FAILED(out, ID("t1"), s1, &ctx_a, WK_FAIL_BUILDER_FAILED, "bad args", 7, 1500);
  FX_INV(core);
  FX_SLOT_FREE(core, s1);
  FX_HB(core, 1500, FX_SLOTS, 0, 1, true, false);
  const wk_task_result *r = FX_GET(core, ID("t1"));
  FX_RES(r, s1, WK_TASK_FAILED, WK_PHASE_DONE, WK_FAIL_BUILDER_FAILED, "bad args", 7);
  FX_TIMES(r, 1000, 1001, 1001, 1500, 0, 0, 0, 0, 1500);

  o = fx_fail(WK_FAIL_BUILDER_NOT_FOUND, "no builder map");
  memset(&out, 0xa5, sizeof out);
  wk_core_handle_phase_finished(core, ID("t2"), WK_PHASE_BUILDER, &o, 1600, &out);
  EXPECT_CONVERGE_FAILED(out, ID("t2"), s2, &ctx_b, WK_FAIL_BUILDER_NOT_FOUND, "no builder map", 7,
                         1600);
  FX_INV(core);
  FX_HB(core, 1600, FX_SLOTS, 0, 0, true, false);
  r = FX_GET(core, ID("t2"));
  FX_RES(r, s2, WK_TASK_FAILED, WK_PHASE_DONE, WK_FAIL_BUILDER_NOT_FOUND, "no builder map", 7);
  assert_int_equal(wk_core_live_tasks(core), 0);
  assert_int_equal(wk_core_retained_count(core), 2);
}

static void test_calls_failure_keeps_outputs(void **state) {
  wk_core *core = *state;
  wk_transition_result out;
  uint64_t s = FX_RUN_TO_BUILDER(core, ID("t1"), &ctx_a, 1000);
  FX_BUILDER_OK(core, ID("t1"), s, &ctx_a, &call_list_marker, false, 1100);

  char partial[4] = {'p', 'a', 'r', 't'};
  wk_phase_outcome o = fx_fail(WK_FAIL_NONE, "call 3 raised");
  o.data.data = (const uint8_t *)partial;
  o.data.len = sizeof partial;
  o.stats.calls_total = 4;
  o.stats.calls_succeeded = 3;
  o.stats.calls_failed = 1;
  wk_call_stats want_stats = o.stats;
  memset(&out, 0xa5, sizeof out);
  wk_core_handle_phase_finished(core, ID("t1"), WK_PHASE_CALLS, &o, 1200, &out);
  EXPECT_CONVERGE_FAILED(out, ID("t1"), s, &ctx_a, WK_FAIL_CALL_FAILED, "call 3 raised", 7, 1200);
  FX_BYTES(out.cmds.items[0].u.converge.result->outputs, "part", 4);
  FX_INV(core);
  memset(partial, 'X', sizeof partial);

  const wk_task_result *r = FX_GET(core, ID("t1"));
  FX_RES(r, s, WK_TASK_FAILED, WK_PHASE_DONE, WK_FAIL_CALL_FAILED, "call 3 raised", 7);
  FX_BYTES(r->outputs, "part", 4);
  FX_BYTES(r->plugin_results, NULL, 0);
  FX_STATS(&r->statistic.calls, &want_stats);
  FX_TIMES(r, 1000, 1001, 1001, 1100, 1100, 1200, 0, 0, 1200);
  FX_SLOT_FREE(core, s);
  FX_HB(core, 1200, FX_SLOTS, 0, 0, true, false);
}

static void test_writer_failure_codes(void **state) {
  wk_core *core = *state;
  wk_transition_result out;
  uint64_t s1 = FX_RUN_TO_BUILDER(core, ID("t1"), &ctx_a, 1000);
  uint64_t s2 = FX_RUN_TO_BUILDER(core, ID("t2"), &ctx_b, 1000);
  FX_BUILDER_OK(core, ID("t1"), s1, &ctx_a, NULL, false, 1100);
  FX_BUILDER_OK(core, ID("t2"), s2, &ctx_b, NULL, false, 1100);
  FX_CALLS_OK(core, ID("t1"), s1, &ctx_a, "o1", 2, 1200);
  FX_CALLS_OK(core, ID("t2"), s2, &ctx_b, "o2", 2, 1200);

  wk_phase_outcome o = fx_fail(WK_FAIL_NONE, "redis down");
  memset(&out, 0xa5, sizeof out);
  wk_core_handle_phase_finished(core, ID("t1"), WK_PHASE_WRITER, &o, 1300, &out);
  EXPECT_CONVERGE_FAILED(out, ID("t1"), s1, &ctx_a, WK_FAIL_PLUGIN_FAILED, "redis down", 7, 1300);
  FX_INV(core);
  const wk_task_result *r = FX_GET(core, ID("t1"));
  FX_RES(r, s1, WK_TASK_FAILED, WK_PHASE_DONE, WK_FAIL_PLUGIN_FAILED, "redis down", 7);
  FX_BYTES(r->outputs, "o1", 2);
  FX_TIMES(r, 1000, 1001, 1001, 1100, 1100, 1200, 1200, 1300, 1300);

  o = fx_fail(WK_FAIL_PLUGIN_NOT_FOUND, "no plugin kafka");
  memset(&out, 0xa5, sizeof out);
  wk_core_handle_phase_finished(core, ID("t2"), WK_PHASE_WRITER, &o, 1400, &out);
  EXPECT_CONVERGE_FAILED(out, ID("t2"), s2, &ctx_b, WK_FAIL_PLUGIN_NOT_FOUND, "no plugin kafka", 7,
                         1400);
  FX_INV(core);
  r = FX_GET(core, ID("t2"));
  FX_RES(r, s2, WK_TASK_FAILED, WK_PHASE_DONE, WK_FAIL_PLUGIN_NOT_FOUND, "no plugin kafka", 7);
  FX_BYTES(r->outputs, "o2", 2);
  FX_HB(core, 1400, FX_SLOTS, 0, 0, true, false);
  assert_int_equal(wk_core_retained_count(core), 2);
}

/* A NULL message is "no message": the result says "" (wk_task_result.failure_message:
 * "" when none), as it does for activation_failed and abort. */
static void test_phase_failure_without_message_names_the_code(void **state) {
  wk_core *core = *state;
  wk_transition_result out;
  uint64_t s1 = FX_RUN_TO_BUILDER(core, ID("b"), &ctx_a, 1000);
  uint64_t s2 = FX_RUN_TO_BUILDER(core, ID("c"), &ctx_a, 1000);
  uint64_t s3 = FX_RUN_TO_BUILDER(core, ID("w"), &ctx_a, 1000);
  FX_BUILDER_OK(core, ID("c"), s2, &ctx_a, NULL, false, 1100);
  FX_BUILDER_OK(core, ID("w"), s3, &ctx_a, NULL, false, 1100);
  FX_CALLS_OK(core, ID("w"), s3, &ctx_a, NULL, 0, 1200);

  wk_phase_outcome o = fx_fail(WK_FAIL_BUILDER_NOT_FOUND, NULL);
  wk_core_handle_phase_finished(core, ID("b"), WK_PHASE_BUILDER, &o, 1300, &out);
  EXPECT_CONVERGE_FAILED(out, ID("b"), s1, &ctx_a, WK_FAIL_BUILDER_NOT_FOUND,
                         "the builder phase failed: BUILDER_NOT_FOUND", 7, 1300);
  FX_INV(core);
  o = fx_fail(WK_FAIL_NONE, NULL);
  wk_core_handle_phase_finished(core, ID("c"), WK_PHASE_CALLS, &o, 1300, &out);
  EXPECT_CONVERGE_FAILED(out, ID("c"), s2, &ctx_a, WK_FAIL_CALL_FAILED,
                         "the calls phase failed: CALL_FAILED", 7, 1300);
  FX_INV(core);
  wk_core_handle_phase_finished(core, ID("w"), WK_PHASE_WRITER, &o, 1300, &out);
  EXPECT_CONVERGE_FAILED(out, ID("w"), s3, &ctx_a, WK_FAIL_PLUGIN_FAILED,
                         "the writer phase failed: PLUGIN_FAILED", 7, 1300);
  FX_INV(core);
  FX_HB(core, 1300, FX_SLOTS, 0, 0, true, false);
}

/* ---- out of order ------------------------------------------------------------------------ */

static void expect_stale_phase_at(wk_core *core, const char *id, size_t len, wk_phase phase,
                                  int64_t now, FX_LOC) {
  wk_phase_outcome o = fx_ok();
  o.call_list = &call_list_marker;
  o.data.data = (const uint8_t *)"zz";
  o.data.len = 2;
  wk_transition_result out;
  memset(&out, 0xa5, sizeof out);
  wk_core_handle_phase_finished(core, id, len, phase, &o, now, &out);
  fx_err_at(out.err, WK_ERR_STALE, file, line);
  FX_EQ(out.cmds.count, 0);
  o = fx_fail(WK_FAIL_NONE, "late");
  memset(&out, 0xa5, sizeof out);
  wk_core_handle_phase_finished(core, id, len, phase, &o, now, &out);
  fx_err_at(out.err, WK_ERR_STALE, file, line);
  FX_EQ(out.cmds.count, 0);
  fx_inv_at(core, file, line);
}
#define EXPECT_STALE_PHASE(core, id, phase, now) \
  expect_stale_phase_at((core), id, (phase), (now), FX_AT)

static void test_out_of_order_phase_events_are_stale(void **state) {
  wk_core *core = *state;
  uint64_t s = FX_SUBMIT(core, ID("t1"), 0, 1, &ctx_a, 1000);

  /* PREPARING: no phase applies */
  EXPECT_STALE_PHASE(core, ID("t1"), WK_PHASE_BUILDER, 1050);
  EXPECT_STALE_PHASE(core, ID("t1"), WK_PHASE_CALLS, 1050);
  EXPECT_STALE_PHASE(core, ID("t1"), WK_PHASE_WRITER, 1050);
  const wk_task_result *r = FX_GET(core, ID("t1"));
  FX_RES(r, s, WK_TASK_PREPARING, WK_PHASE_PREPARING, WK_FAIL_NONE, "", 0);

  /* BUILDER: calls and writer are early */
  FX_ACTIVATE(core, ID("t1"), s, 7, &ctx_a, 1100);
  EXPECT_STALE_PHASE(core, ID("t1"), WK_PHASE_CALLS, 1150);
  EXPECT_STALE_PHASE(core, ID("t1"), WK_PHASE_WRITER, 1150);
  r = FX_GET(core, ID("t1"));
  FX_RES(r, s, WK_TASK_RUNNING, WK_PHASE_BUILDER, WK_FAIL_NONE, "", 7);
  FX_TIMES(r, 1000, 1100, 1100, 0, 0, 0, 0, 0, 0);

  /* CALLS: a duplicate builder event and an early writer event */
  FX_BUILDER_OK(core, ID("t1"), s, &ctx_a, &call_list_marker, false, 1200);
  EXPECT_STALE_PHASE(core, ID("t1"), WK_PHASE_BUILDER, 1250);
  EXPECT_STALE_PHASE(core, ID("t1"), WK_PHASE_WRITER, 1250);
  r = FX_GET(core, ID("t1"));
  FX_RES(r, s, WK_TASK_RUNNING, WK_PHASE_CALLS, WK_FAIL_NONE, "", 7);
  FX_TIMES(r, 1000, 1100, 1100, 1200, 1200, 0, 0, 0, 0);
  FX_BYTES(r->outputs, NULL, 0);

  /* WRITER: both earlier phases are stale */
  FX_CALLS_OK(core, ID("t1"), s, &ctx_a, "out", 3, 1300);
  EXPECT_STALE_PHASE(core, ID("t1"), WK_PHASE_BUILDER, 1350);
  EXPECT_STALE_PHASE(core, ID("t1"), WK_PHASE_CALLS, 1350);
  r = FX_GET(core, ID("t1"));
  FX_RES(r, s, WK_TASK_RUNNING, WK_PHASE_WRITER, WK_FAIL_NONE, "", 7);
  FX_BYTES(r->outputs, "out", 3);

  /* terminal: everything is stale, the result stays as it is */
  FX_WRITER_OK(core, ID("t1"), s, &ctx_a, NULL, 0, 1400);
  EXPECT_STALE_PHASE(core, ID("t1"), WK_PHASE_BUILDER, 1450);
  EXPECT_STALE_PHASE(core, ID("t1"), WK_PHASE_CALLS, 1450);
  EXPECT_STALE_PHASE(core, ID("t1"), WK_PHASE_WRITER, 1450);
  r = FX_GET(core, ID("t1"));
  FX_RES(r, s, WK_TASK_SUCCEEDED, WK_PHASE_DONE, WK_FAIL_NONE, "", 7);
  FX_BYTES(r->outputs, "out", 3);
  FX_BYTES(r->plugin_results, NULL, 0);
  FX_TIMES(r, 1000, 1100, 1100, 1200, 1200, 1300, 1300, 1400, 1400);
  FX_HB(core, 1450, FX_SLOTS, 0, 0, true, false);
  assert_int_equal(wk_core_retained_count(core), 1);
}

static void test_phase_event_for_unknown_task(void **state) {
  wk_core *core = *state;
  FX_RESERVE(core, ID("reserved"), 0, 1000, 2000);
  wk_phase_outcome o = fx_ok();
  wk_transition_result out;
  wk_core_handle_phase_finished(core, ID("nope"), WK_PHASE_BUILDER, &o, 1000, &out);
  EXPECT_NO_CMDS(out, WK_ERR_NOT_FOUND);
  FX_INV(core);
  wk_core_handle_phase_finished(core, ID("reserved"), WK_PHASE_BUILDER, &o, 1000, &out);
  EXPECT_NO_CMDS(out, WK_ERR_NOT_FOUND);
  FX_INV(core);
  FX_HB(core, 1000, FX_SLOTS, 1, 0, true, false);
}

/* ---- phase records and call progress ------------------------------------------------ */

#define DYN(id, len) (id), (len) /* a computed id for the FX_ macros */

static void expect_phase_at(const wk_task_result *r, wk_phase p, wk_phase_end end,
                            wk_failure_code code, FX_LOC) {
  FX_EQ(r->phases[p - WK_PHASE_BUILDER].end, end);
  FX_EQ(r->phases[p - WK_PHASE_BUILDER].failure_code, code);
}
#define EXPECT_PHASE(r, p, end, code) expect_phase_at((r), (p), (end), (code), FX_AT)

static void test_phase_records_on_success(void **state) {
  wk_core *core = *state;
  uint64_t s = FX_SUBMIT(core, ID("t1"), 0, 1, &ctx_a, 1000);
  const wk_task_result *r = FX_GET(core, ID("t1"));
  EXPECT_PHASE(r, WK_PHASE_BUILDER, WK_PHASE_END_NOT_RUN, WK_FAIL_NONE);
  FX_ACTIVATE(core, ID("t1"), s, 1, &ctx_a, 1100);
  EXPECT_PHASE(FX_GET(core, ID("t1")), WK_PHASE_BUILDER, WK_PHASE_END_RUNNING, WK_FAIL_NONE);
  FX_BUILDER_OK(core, ID("t1"), s, &ctx_a, NULL, false, 1150);
  r = FX_GET(core, ID("t1"));
  EXPECT_PHASE(r, WK_PHASE_BUILDER, WK_PHASE_END_OK, WK_FAIL_NONE);
  EXPECT_PHASE(r, WK_PHASE_CALLS, WK_PHASE_END_RUNNING, WK_FAIL_NONE);
  int64_t ms;
  assert_true(wk_task_phase_ms(&r->statistic, WK_PHASE_CALLS, 1400, &ms));
  assert_int_equal(ms, 250); /* a running phase: up to now */
  assert_false(wk_task_phase_ms(&r->statistic, WK_PHASE_WRITER, 1400, &ms));
  assert_int_equal(ms, 0);
  FX_CALLS_OK(core, ID("t1"), s, &ctx_a, "x", 1, 1200);
  wk_phase_outcome o = fx_ok();
  wk_transition_result out;
  wk_core_handle_phase_finished(core, ID("t1"), WK_PHASE_WRITER, &o, 1300, &out);
  FX_ERR(out.err, WK_OK);
  r = FX_GET(core, ID("t1"));
  for (wk_phase p = WK_PHASE_BUILDER; p <= WK_PHASE_WRITER; p++)
    EXPECT_PHASE(r, p, WK_PHASE_END_OK, WK_FAIL_NONE);
  assert_true(wk_task_phase_ms(&r->statistic, WK_PHASE_WRITER, 9999, &ms));
  assert_int_equal(ms, 100); /* an ended phase: up to its end, whatever now is */
  assert_string_equal(wk_phase_end_name(WK_PHASE_END_NOT_RUN), "NOT_RUN");
}

/* A task ended from outside while its calls run keeps the calls so far, a calls phase
 * that ended then (never a negative span), and the code that ended it. */
static void test_outside_convergence_ends_the_running_phase(void **state) {
  wk_core *core = *state;
  static const wk_failure_code codes[] = {WK_FAIL_TASK_TIMEOUT, WK_FAIL_CANCELLED,
                                          WK_FAIL_WORKER_SHUTDOWN, WK_FAIL_OWNER_LOST};
  for (size_t k = 0; k < sizeof codes / sizeof codes[0]; k++) {
    char id[8];
    size_t len = (size_t)snprintf(id, sizeof id, "k%zu", k);
    int64_t t0 = 1000 + (int64_t)k * 100000;
    uint64_t s = FX_SUBMIT(core, DYN(id, len), 0, 1, &ctx_a, t0);
    FX_ACTIVATE(core, DYN(id, len), s, 1, &ctx_a, t0 + 10);
    FX_BUILDER_OK(core, DYN(id, len), s, &ctx_a, NULL, false, t0 + 20);
    wk_call_stats st = {.calls_total = 8, .calls_succeeded = 3, .executor_cpu_us = 777};
    FX_ERR(wk_core_handle_call_progress(core, id, len, &st), WK_OK);
    const wk_task_result *r = FX_GET(core, DYN(id, len));
    FX_STATS(&r->statistic.calls, &st); /* a snapshot shows the calls so far */
    wk_transition_result out;
    int64_t end = t0 + 500;
    if (codes[k] == WK_FAIL_TASK_TIMEOUT) {
      end = t0 + FX_TIMEOUT;
      wk_core_handle_task_timed_out(core, id, len, end, &out);
    } else if (codes[k] == WK_FAIL_OWNER_LOST) {
      FX_ERR(wk_core_handle_watch_disconnected(core, id, len, t0 + 500 - FX_GRACE), WK_OK);
      wk_core_handle_watch_grace_expired(core, id, len, end, &out);
    } else {
      wk_core_handle_abort(core, id, len, codes[k], "stop", end, &out);
    }
    FX_ERR(out.err, WK_OK);
    r = FX_GET(core, DYN(id, len));
    assert_int_equal(r->failure_code, codes[k]);
    FX_STATS(&r->statistic.calls, &st);
    assert_int_equal(r->statistic.calls_finished_ms, end);
    int64_t ms;
    assert_true(wk_task_phase_ms(&r->statistic, WK_PHASE_CALLS, end + 5000, &ms));
    assert_int_equal(ms, end - (t0 + 20));
    EXPECT_PHASE(r, WK_PHASE_BUILDER, WK_PHASE_END_OK, WK_FAIL_NONE);
    EXPECT_PHASE(r, WK_PHASE_CALLS, WK_PHASE_END_FAILED, codes[k]);
    EXPECT_PHASE(r, WK_PHASE_WRITER, WK_PHASE_END_NOT_RUN, WK_FAIL_NONE);
    FX_INV(core);
  }
}

static void test_call_progress_only_in_the_calls_phase(void **state) {
  wk_core *core = *state;
  wk_call_stats st = {.calls_total = 2};
  FX_ERR(wk_core_handle_call_progress(core, ID("nope"), &st), WK_ERR_NOT_FOUND);
  uint64_t s = FX_SUBMIT(core, ID("t1"), 0, 1, &ctx_a, 1000);
  FX_ERR(wk_core_handle_call_progress(core, ID("t1"), &st), WK_ERR_STALE);
  FX_ACTIVATE(core, ID("t1"), s, 1, &ctx_a, 1100);
  FX_ERR(wk_core_handle_call_progress(core, ID("t1"), &st), WK_ERR_STALE);
  FX_BUILDER_OK(core, ID("t1"), s, &ctx_a, NULL, false, 1150);
  FX_ERR(wk_core_handle_call_progress(core, ID("t1"), &st), WK_OK);
  /* the calls phase outcome's stats replace the progress */
  wk_phase_outcome o = fx_ok();
  o.stats.calls_total = 2;
  o.stats.calls_succeeded = 2;
  wk_transition_result out;
  wk_core_handle_phase_finished(core, ID("t1"), WK_PHASE_CALLS, &o, 1200, &out);
  FX_ERR(out.err, WK_OK);
  FX_STATS(&FX_GET(core, ID("t1"))->statistic.calls, &o.stats);
  FX_ERR(wk_core_handle_call_progress(core, ID("t1"), &st), WK_ERR_STALE);
  FX_STATS(&FX_GET(core, ID("t1"))->statistic.calls, &o.stats);
  FX_INV(core);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      FX_TEST(test_activation_prepared_starts_builder),
      FX_TEST(test_activation_prepared_just_before_lease_expiry),
      FX_TEST(test_activation_prepared_stale_and_not_found),
      FX_TEST(test_activation_after_lease_lapse_is_slot_lost),
      FX_TEST(test_lease_expiry_while_preparing_is_slot_lost),
      FX_TEST(test_activation_failed_converges),
      FX_TEST(test_activation_failed_errors),
      FX_TEST(test_failure_message_truncated),
      FX_TEST(test_full_success_path),
      FX_TEST(test_streaming_builder_and_empty_outputs),
      FX_TEST(test_builder_span_is_the_run),
      FX_TEST(test_builder_failure_codes),
      FX_TEST(test_calls_failure_keeps_outputs),
      FX_TEST(test_writer_failure_codes),
      FX_TEST(test_phase_failure_without_message_names_the_code),
      FX_TEST(test_out_of_order_phase_events_are_stale),
      FX_TEST(test_phase_event_for_unknown_task),
      FX_TEST(test_phase_records_on_success),
      FX_TEST(test_outside_convergence_ends_the_running_phase),
      FX_TEST(test_call_progress_only_in_the_calls_phase),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

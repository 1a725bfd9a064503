/* test_core_submit.c: SubmitTask: inline and reserved slots, idempotency, the digest
 * CONFLICT, INVALID_SLOT, SLOT_UNCERTAIN, UNAVAILABLE, NO_SLOT and bad arguments. */
#include "core_fixture.h"

static int ctx_a, ctx_b, ctx_c;

/* Submits `req` expecting `want` (an error): nothing is taken, no command. */
static void submit_err_at(wk_core *core, const wk_submit_request *req, wk_err want, int64_t now,
                          FX_LOC) {
  wk_submit_result out;
  memset(&out, 0xa5, sizeof out);
  wk_core_handle_submit(core, req, &ctx_c, now, &out);
  fx_err_at(out.err, want, file, line);
  FX_EQ(out.adapter_ctx_taken, false);
  FX_EQ(out.cmds.count, 0);
  fx_inv_at(core, file, line);
}
#define SUBMIT_ERR(core, req, want, now) submit_err_at((core), (req), (want), (now), FX_AT)

/* ---- new tasks --------------------------------------------------------------------- */

static void test_submit_inline_allocates_slot(void **state) {
  wk_core *core = *state;
  wk_submit_request req = fx_req(ID("t1"), 0, 0xabc);
  req.requested_epoch = 42;
  wk_submit_result out;
  memset(&out, 0xa5, sizeof out);
  wk_core_handle_submit(core, &req, &ctx_a, 1000, &out);
  FX_ERR(out.err, WK_OK);
  assert_int_not_equal(out.slot_id, 0);
  assert_int_not_equal(wk_slot_id_generation(out.slot_id), 0);
  assert_true(wk_slot_id_index(out.slot_id) < FX_SLOTS);
  assert_int_equal(out.accepted_ms, 1000);
  assert_false(out.duplicate);
  assert_true(out.adapter_ctx_taken);
  FX_RES(out.result, out.slot_id, WK_TASK_PREPARING, WK_PHASE_PREPARING, WK_FAIL_NONE, "", 0);
  assert_int_equal(out.cmds.count, 1);
  FX_CMD(&out.cmds.items[0], WK_CMD_PREPARE_ACTIVATION, ID("t1"), out.slot_id, &ctx_a);
  assert_int_equal(out.cmds.items[0].u.prepare.requested_epoch, 42);
  uint64_t s = out.slot_id;
  FX_INV(core);

  /* the slot is ALLOCATED under the default ttl until activation */
  FX_SLOT_ALLOCATED(core, s, 1000 + FX_TTL, ID("t1"));
  FX_HB(core, 1000, FX_SLOTS, 1, 0, true, false);
  assert_int_equal(wk_core_live_tasks(core), 1);
  wk_task_id ids[4];
  assert_int_equal(wk_core_list_live_tasks(core, ids, 4), 1);
  assert_int_equal(ids[0].len, 2);
  assert_string_equal(ids[0].bytes, "t1");
  assert_int_equal(wk_core_retained_count(core), 0);

  const wk_task_result *r = FX_GET(core, ID("t1"));
  FX_RES(r, s, WK_TASK_PREPARING, WK_PHASE_PREPARING, WK_FAIL_NONE, "", 0);
  FX_TIMES(r, 1000, 0, 0, 0, 0, 0, 0, 0, 0);
  FX_BYTES(r->outputs, NULL, 0);
  FX_BYTES(r->plugin_results, NULL, 0);
  wk_call_stats zero;
  memset(&zero, 0, sizeof zero);
  FX_STATS(&r->statistic.calls, &zero);

  /* the lease and the task deadline are timers now */
  assert_int_equal(wk_core_next_deadline(core), 1000 + FX_TTL);
}

static void test_submit_uses_reservation(void **state) {
  wk_core *core = *state;
  uint64_t s = FX_RESERVE(core, ID("t1"), 3000, 1000, 4000);
  FX_RESERVE(core, ID("other"), 0, 1000, 2000);
  FX_HB(core, 1000, FX_SLOTS, 2, 0, true, false);

  wk_submit_request req = fx_req(ID("t1"), s, 0xabc);
  req.requested_epoch = 9;
  wk_submit_result out;
  wk_core_handle_submit(core, &req, &ctx_a, 1500, &out);
  FX_ERR(out.err, WK_OK);
  assert_int_equal(out.slot_id, s);
  assert_int_equal(out.accepted_ms, 1500);
  assert_false(out.duplicate);
  assert_true(out.adapter_ctx_taken);
  FX_RES(out.result, s, WK_TASK_PREPARING, WK_PHASE_PREPARING, WK_FAIL_NONE, "", 0);
  assert_int_equal(out.cmds.count, 1);
  FX_CMD(&out.cmds.items[0], WK_CMD_PREPARE_ACTIVATION, ID("t1"), s, &ctx_a);
  assert_int_equal(out.cmds.items[0].u.prepare.requested_epoch, 9);
  FX_INV(core);

  /* the same slot, its lease unchanged; no second slot taken */
  FX_SLOT_ALLOCATED(core, s, 4000, ID("t1"));
  FX_HB(core, 1500, FX_SLOTS, 2, 0, true, false);
  const wk_task_result *r = FX_GET(core, ID("t1"));
  FX_RES(r, s, WK_TASK_PREPARING, WK_PHASE_PREPARING, WK_FAIL_NONE, "", 0);
  FX_TIMES(r, 1500, 0, 0, 0, 0, 0, 0, 0, 0);
  assert_int_equal(wk_core_live_tasks(core), 1);
}

static void test_submit_max_length_id(void **state) {
  wk_core *core = *state;
  char id[WK_TASK_ID_MAX];
  for (size_t i = 0; i < sizeof id; i++) id[i] = (char)('!' + (char)(i % 94));
  uint64_t s = fx_submit_at(core, id, sizeof id, 0, 1, &ctx_a, 1000, FX_AT);
  const wk_task_result *r = fx_get_at(core, id, sizeof id, FX_AT);
  FX_RES(r, s, WK_TASK_PREPARING, WK_PHASE_PREPARING, WK_FAIL_NONE, "", 0);
  wk_task_id ids[1];
  assert_int_equal(wk_core_list_live_tasks(core, ids, 1), 1);
  assert_int_equal(ids[0].len, WK_TASK_ID_MAX);
  assert_memory_equal(ids[0].bytes, id, sizeof id);
  assert_int_equal(ids[0].bytes[WK_TASK_ID_MAX], '\0');
}

/* ---- idempotency ------------------------------------------------------------------- */

static void expect_duplicate_at(wk_core *core, const char *id, size_t len, uint64_t req_slot,
                                uint64_t digest, uint64_t want_slot, int64_t accepted, int64_t now,
                                FX_LOC) {
  wk_submit_request req = fx_req(id, len, req_slot, digest);
  wk_submit_result out;
  memset(&out, 0xa5, sizeof out);
  wk_core_handle_submit(core, &req, &ctx_b, now, &out);
  fx_err_at(out.err, WK_OK, file, line);
  FX_EQ(out.slot_id, want_slot);
  FX_EQ(out.accepted_ms, accepted);
  FX_EQ(out.duplicate, true);
  FX_EQ(out.adapter_ctx_taken, false);
  FX_EQ(out.cmds.count, 0);
  FX_TRUE(out.result != NULL);
  FX_EQ(out.result->task_id_len, len);
  FX_MEM(out.result->task_id, id, len);
  fx_inv_at(core, file, line);
}
#define EXPECT_DUPLICATE(core, id, req_slot, digest, want_slot, accepted, now) \
  expect_duplicate_at((core), id, (req_slot), (digest), (want_slot), (accepted), (now), FX_AT)

static void test_submit_duplicate_returns_snapshot(void **state) {
  wk_core *core = *state;
  uint64_t s = FX_SUBMIT(core, ID("t1"), 0, 0xd1, &ctx_a, 1000);

  /* PREPARING; the slot id of the duplicate does not matter (not in the digest) */
  EXPECT_DUPLICATE(core, ID("t1"), 0, 0xd1, s, 1000, 1100);
  EXPECT_DUPLICATE(core, ID("t1"), s, 0xd1, s, 1000, 1150);
  const wk_task_result *r = FX_GET(core, ID("t1"));
  FX_RES(r, s, WK_TASK_PREPARING, WK_PHASE_PREPARING, WK_FAIL_NONE, "", 0);
  FX_TIMES(r, 1000, 0, 0, 0, 0, 0, 0, 0, 0);
  FX_HB(core, 1150, FX_SLOTS, 1, 0, true, false);
  assert_int_equal(wk_core_live_tasks(core), 1);

  /* the first submitter's ctx is the one in the commands */
  FX_ACTIVATE(core, ID("t1"), s, 3, &ctx_a, 1200);
  EXPECT_DUPLICATE(core, ID("t1"), 0, 0xd1, s, 1000, 1300);
  r = FX_GET(core, ID("t1"));
  FX_RES(r, s, WK_TASK_RUNNING, WK_PHASE_BUILDER, WK_FAIL_NONE, "", 3);
  FX_BUILDER_OK(core, ID("t1"), s, &ctx_a, NULL, false, 1400);
  FX_CALLS_OK(core, ID("t1"), s, &ctx_a, "xy", 2, 1500);
  FX_WRITER_OK(core, ID("t1"), s, &ctx_a, NULL, 0, 1600);

  /* terminal: the retained result, never a re-run */
  EXPECT_DUPLICATE(core, ID("t1"), 0, 0xd1, s, 1000, 1700);
  r = FX_GET(core, ID("t1"));
  FX_RES(r, s, WK_TASK_SUCCEEDED, WK_PHASE_DONE, WK_FAIL_NONE, "", 3);
  FX_BYTES(r->outputs, "xy", 2);
  FX_HB(core, 1700, FX_SLOTS, 0, 0, true, false);
  assert_int_equal(wk_core_live_tasks(core), 0);
  assert_int_equal(wk_core_retained_count(core), 1);
}

static void test_submit_duplicate_allowed_while_draining_or_not_ready(void **state) {
  wk_core *core = *state;
  uint64_t s = FX_SUBMIT(core, ID("t1"), 0, 0xd1, &ctx_a, 1000);
  wk_core_set_draining(core, true);
  EXPECT_DUPLICATE(core, ID("t1"), 0, 0xd1, s, 1000, 1100);
  wk_core_set_draining(core, false);
  wk_core_set_ready(core, false);
  EXPECT_DUPLICATE(core, ID("t1"), 0, 0xd1, s, 1000, 1200);
  FX_HB(core, 1200, FX_SLOTS, 1, 0, false, false);
}

static void test_submit_conflict_on_other_digest(void **state) {
  wk_core *core = *state;
  uint64_t s = FX_SUBMIT(core, ID("t1"), 0, 0xd1, &ctx_a, 1000);
  wk_submit_request req = fx_req(ID("t1"), 0, 0xd2);
  SUBMIT_ERR(core, &req, WK_ERR_CONFLICT, 1100);
  req.slot_id = s;
  SUBMIT_ERR(core, &req, WK_ERR_CONFLICT, 1100);
  /* the task is untouched */
  const wk_task_result *r = FX_GET(core, ID("t1"));
  FX_RES(r, s, WK_TASK_PREPARING, WK_PHASE_PREPARING, WK_FAIL_NONE, "", 0);
  FX_TIMES(r, 1000, 0, 0, 0, 0, 0, 0, 0, 0);
  FX_HB(core, 1100, FX_SLOTS, 1, 0, true, false);

  /* and once terminal */
  FX_ACTIVATE(core, ID("t1"), s, 3, &ctx_a, 1200);
  FX_BUILDER_OK(core, ID("t1"), s, &ctx_a, NULL, false, 1300);
  FX_CALLS_OK(core, ID("t1"), s, &ctx_a, NULL, 0, 1400);
  FX_WRITER_OK(core, ID("t1"), s, &ctx_a, NULL, 0, 1500);
  req.slot_id = 0;
  SUBMIT_ERR(core, &req, WK_ERR_CONFLICT, 1600);
  r = FX_GET(core, ID("t1"));
  FX_RES(r, s, WK_TASK_SUCCEEDED, WK_PHASE_DONE, WK_FAIL_NONE, "", 3);
  FX_HB(core, 1600, FX_SLOTS, 0, 0, true, false);
  assert_int_equal(wk_core_retained_count(core), 1);
}

/* ---- bad arguments ----------------------------------------------------------------- */

static void test_submit_invalid_argument(void **state) {
  wk_core *core = *state;
  char long_id[WK_TASK_ID_MAX + 1];
  memset(long_id, 'a', sizeof long_id);
  wk_submit_request req;

  req = fx_req("", 0, 0, 1);
  SUBMIT_ERR(core, &req, WK_ERR_INVALID_ARGUMENT, 1000);
  req = fx_req(long_id, sizeof long_id, 0, 1);
  SUBMIT_ERR(core, &req, WK_ERR_INVALID_ARGUMENT, 1000);
  req = fx_req(ID("a b"), 0, 1);
  SUBMIT_ERR(core, &req, WK_ERR_INVALID_ARGUMENT, 1000);
  req = fx_req(ID("a\x01"), 0, 1);
  SUBMIT_ERR(core, &req, WK_ERR_INVALID_ARGUMENT, 1000);

  req = fx_req(ID("t1"), 0, 1);
  req.timeout_ms = -1;
  SUBMIT_ERR(core, &req, WK_ERR_INVALID_ARGUMENT, 1000);
  req.timeout_ms = FX_MAX_TIMEOUT + 1;
  SUBMIT_ERR(core, &req, WK_ERR_INVALID_ARGUMENT, 1000);

  req = fx_req(ID("t1"), 0, 1);
  req.call_failure_policy = (wk_call_failure_policy)7;
  SUBMIT_ERR(core, &req, WK_ERR_INVALID_ARGUMENT, 1000);
  req = fx_req(ID("t1"), 0, 1);
  req.retry.initial_backoff_ms = -5;
  SUBMIT_ERR(core, &req, WK_ERR_INVALID_ARGUMENT, 1000);
  req = fx_req(ID("t1"), 0, 1);
  req.retry.max_backoff_ms = -5;
  SUBMIT_ERR(core, &req, WK_ERR_INVALID_ARGUMENT, 1000);

  /* bad input wins over not ready */
  wk_core_set_ready(core, false);
  req = fx_req("", 0, 0, 1);
  SUBMIT_ERR(core, &req, WK_ERR_INVALID_ARGUMENT, 1000);
  wk_core_set_ready(core, true);

  /* nothing changed */
  FX_HB(core, 1000, FX_SLOTS, 0, 0, true, false);
  FX_NOT_FOUND(core, ID("t1"));
  assert_int_equal(wk_core_live_tasks(core), 0);
  assert_int_equal(wk_core_next_deadline(core), INT64_MAX);
}

static void test_submit_timeout_bounds(void **state) {
  wk_core *core = *state;
  wk_submit_result out;
  /* the cap itself is accepted; the deadline is accepted + timeout */
  wk_submit_request req = fx_req(ID("max"), 0, 1);
  req.timeout_ms = FX_MAX_TIMEOUT;
  wk_core_handle_submit(core, &req, &ctx_a, 1000, &out);
  FX_ERR(out.err, WK_OK);
  uint64_t s = out.slot_id;
  FX_INV(core);
  FX_ACTIVATE(core, ID("max"), s, 1, &ctx_a, 1100);
  assert_int_equal(wk_core_next_deadline(core), 1000 + FX_MAX_TIMEOUT);

  /* 0 = the default */
  req = fx_req(ID("dflt"), 0, 1);
  wk_core_handle_submit(core, &req, &ctx_b, 2000, &out);
  FX_ERR(out.err, WK_OK);
  uint64_t s2 = out.slot_id;
  FX_INV(core);
  FX_ACTIVATE(core, ID("dflt"), s2, 1, &ctx_b, 2100);
  assert_int_equal(wk_core_next_deadline(core), 2000 + FX_TIMEOUT);
  wk_task_id ids[4];
  assert_int_equal(wk_core_timed_out_tasks(core, 2000 + FX_TIMEOUT - 1, ids, 4), 0);
  assert_int_equal(wk_core_timed_out_tasks(core, 2000 + FX_TIMEOUT, ids, 4), 1);
  assert_string_equal(ids[0].bytes, "dflt");
}

/* ---- readiness and capacity --------------------------------------------------------- */

static void test_submit_unavailable(void **state) {
  wk_core *core = *state;
  uint64_t r = FX_RESERVE(core, ID("reserved"), 0, 1000, 2000);
  wk_submit_request req = fx_req(ID("t1"), 0, 1);

  wk_core_set_ready(core, false);
  SUBMIT_ERR(core, &req, WK_ERR_UNAVAILABLE, 1100);
  wk_core_set_ready(core, true);

  wk_core_set_draining(core, true);
  SUBMIT_ERR(core, &req, WK_ERR_UNAVAILABLE, 1200);
  /* a reservation made before the drain is not a task yet: refused too */
  wk_submit_request req2 = fx_req(ID("reserved"), r, 1);
  SUBMIT_ERR(core, &req2, WK_ERR_UNAVAILABLE, 1200);
  FX_NOT_FOUND(core, ID("t1"));
  FX_NOT_FOUND(core, ID("reserved"));
  FX_HB(core, 1200, FX_SLOTS, 1, 0, true, true);

  wk_core_set_draining(core, false);
  FX_SUBMIT(core, ID("t1"), 0, 1, &ctx_a, 1300);
  FX_SUBMIT(core, ID("reserved"), r, 1, &ctx_b, 1300);
  FX_HB(core, 1300, FX_SLOTS, 2, 0, true, false);
}

static void test_submit_no_slot(void **state) {
  wk_core *core = *state;
  uint64_t r0 = FX_RESERVE(core, ID("r0"), 0, 1000, 2000);
  FX_RESERVE(core, ID("r1"), 0, 1000, 2000);
  FX_SUBMIT(core, ID("t2"), 0, 1, &ctx_a, 1000);
  uint64_t s3 = FX_SUBMIT(core, ID("t3"), 0, 1, &ctx_a, 1000);
  FX_ACTIVATE(core, ID("t3"), s3, 1, &ctx_a, 1050);
  FX_HB(core, 1050, FX_SLOTS, 3, 1, true, false);

  wk_submit_request req = fx_req(ID("t4"), 0, 1);
  SUBMIT_ERR(core, &req, WK_ERR_NO_SLOT, 1100);
  FX_NOT_FOUND(core, ID("t4"));
  FX_HB(core, 1100, FX_SLOTS, 3, 1, true, false);

  /* a task with its own reservation still goes in */
  FX_SUBMIT(core, ID("r0"), r0, 1, &ctx_b, 1200);
  FX_HB(core, 1200, FX_SLOTS, 3, 1, true, false);
  assert_int_equal(wk_core_live_tasks(core), 3);
}

/* ---- slot ids ------------------------------------------------------------------------ */

static void test_submit_invalid_slot(void **state) {
  wk_core *core = *state;
  uint64_t a = FX_RESERVE(core, ID("a"), 0, 1000, 2000);
  uint64_t b = FX_RESERVE(core, ID("b"), 0, 1000, 2000);
  uint64_t c = FX_SUBMIT(core, ID("c"), 0, 1, &ctx_a, 1000);
  FX_ACTIVATE(core, ID("c"), c, 1, &ctx_a, 1010);
  wk_submit_request req;

  /* names no slot */
  req = fx_req(ID("a"), wk_slot_id_make(FX_SLOTS, wk_slot_id_generation(a)), 1);
  SUBMIT_ERR(core, &req, WK_ERR_INVALID_SLOT, 1100);
  req = fx_req(ID("a"), wk_slot_id_make(UINT32_MAX, 1), 1);
  SUBMIT_ERR(core, &req, WK_ERR_INVALID_SLOT, 1100);
  req = fx_req(ID("a"), wk_slot_id_make(wk_slot_id_index(a) == 0 ? 1 : 0, 0), 1);
  SUBMIT_ERR(core, &req, WK_ERR_INVALID_SLOT, 1100); /* generation 0 is never issued */

  /* another task's reservation, with and without a reservation of one's own */
  req = fx_req(ID("a"), b, 1);
  SUBMIT_ERR(core, &req, WK_ERR_INVALID_SLOT, 1100);
  req = fx_req(ID("new"), b, 1);
  SUBMIT_ERR(core, &req, WK_ERR_INVALID_SLOT, 1100);
  /* another task's RUNNING slot */
  req = fx_req(ID("new"), c, 1);
  SUBMIT_ERR(core, &req, WK_ERR_INVALID_SLOT, 1100);

  FX_NOT_FOUND(core, ID("a"));
  FX_NOT_FOUND(core, ID("new"));
  FX_SLOT_ALLOCATED(core, a, 2000, ID("a"));
  FX_SLOT_ALLOCATED(core, b, 2000, ID("b"));
  FX_SLOT_RUNNING(core, c, ID("c"));
  FX_HB(core, 1100, FX_SLOTS, 2, 1, true, false);

  /* the right pairing still works */
  FX_SUBMIT(core, ID("a"), a, 1, &ctx_a, 1200);
  FX_SUBMIT(core, ID("b"), b, 1, &ctx_b, 1200);
}

static void test_submit_slot_uncertain_when_lease_lapsed(void **state) {
  wk_core *core = *state;
  /* lapsed, but the expiry scan has not run yet */
  uint64_t s = FX_RESERVE(core, ID("t1"), 0, 1000, 2000);
  wk_submit_request req = fx_req(ID("t1"), s, 1);
  SUBMIT_ERR(core, &req, WK_ERR_SLOT_UNCERTAIN, 2000); /* now == lease expiry */
  FX_NOT_FOUND(core, ID("t1"));
  assert_int_equal(wk_core_live_tasks(core), 0);
  /* whether the slot is released now or at the expiry event is left open; the
   * reservation must not come back to life either way */
  SUBMIT_ERR(core, &req, WK_ERR_SLOT_UNCERTAIN, 2100);
  FX_NOT_FOUND(core, ID("t1"));

  /* lapsed and reclaimed by the expiry event */
  uint64_t s2 = FX_RESERVE(core, ID("t2"), 0, 3000, 4000);
  wk_transition_result tr;
  wk_core_handle_slot_lease_expired(core, s2, 4000, &tr);
  FX_ERR(tr.err, WK_OK);
  assert_int_equal(tr.cmds.count, 0);
  FX_INV(core);
  FX_SLOT_FREE(core, s2);
  req = fx_req(ID("t2"), s2, 1);
  SUBMIT_ERR(core, &req, WK_ERR_SLOT_UNCERTAIN, 4100);
  FX_NOT_FOUND(core, ID("t2"));
  FX_SLOT_FREE(core, s2);
  assert_int_equal(wk_core_live_tasks(core), 0);

  /* inline, the ids are simply new */
  uint64_t s3 = FX_SUBMIT(core, ID("t1"), 0, 1, &ctx_a, 4200);
  assert_int_not_equal(s3, s);
  FX_SUBMIT(core, ID("t2"), 0, 1, &ctx_b, 4200);
  FX_HB(core, 4200, FX_SLOTS, 2, 0, true, false);
}

static void test_submit_slot_uncertain_stale_generation(void **state) {
  wk_core *core = *state; /* one slot */
  uint64_t old = FX_RESERVE(core, ID("a"), 0, 1000, 2000);
  wk_transition_result tr;
  wk_core_handle_slot_lease_expired(core, old, 2000, &tr);
  FX_ERR(tr.err, WK_OK);
  FX_INV(core);
  uint64_t cur = FX_RESERVE(core, ID("b"), 0, 2100, 3100);
  assert_int_equal(wk_slot_id_index(cur), wk_slot_id_index(old));

  /* the old id must not be taken for the slot's next owner */
  wk_submit_request req = fx_req(ID("a"), old, 1);
  SUBMIT_ERR(core, &req, WK_ERR_SLOT_UNCERTAIN, 2200);
  req = fx_req(ID("b"), old, 1);
  SUBMIT_ERR(core, &req, WK_ERR_SLOT_UNCERTAIN, 2200);
  FX_NOT_FOUND(core, ID("a"));
  FX_NOT_FOUND(core, ID("b"));
  FX_SLOT_ALLOCATED(core, cur, 3100, ID("b"));
  FX_HB(core, 2200, 1, 1, 0, true, false);

  FX_SUBMIT(core, ID("b"), cur, 1, &ctx_b, 2300);
}

/* A slot id that is not the task's reservation is judged by its generation (the proto,
 * the design), not by where the task's own reservation sits: a generation the slot had
 * and lost (a lapsed lease) is SLOT_UNCERTAIN even when the slot serves another task
 * now; a generation the slot never had is INVALID_SLOT even on the task's own slot. */
static void test_submit_slot_error_decided_by_generation(void **state) {
  wk_core *core = *state;
  uint64_t old = FX_RESERVE(core, ID("x"), 0, 1000, 2000);
  wk_transition_result tr;
  wk_core_handle_slot_lease_expired(core, old, 2000, &tr);
  FX_ERR(tr.err, WK_OK);
  uint64_t y = FX_RESERVE(core, ID("y"), 0, 2100, 3100);
  assert_int_equal(wk_slot_id_index(y), wk_slot_id_index(old)); /* x's old slot is y's now */
  uint64_t x = FX_RESERVE(core, ID("x"), 0, 2100, 3100);
  assert_int_not_equal(wk_slot_id_index(x), wk_slot_id_index(old));
  uint32_t xi = wk_slot_id_index(x), xg = wk_slot_id_generation(x);
  wk_submit_request req;

  /* x's lapsed lease: ABORTED, though its slot is held by another task */
  req = fx_req(ID("x"), old, 1);
  SUBMIT_ERR(core, &req, WK_ERR_SLOT_UNCERTAIN, 2200);
  /* generations x's own slot never had: FAILED_PRECONDITION */
  req = fx_req(ID("x"), wk_slot_id_make(xi, xg + 1), 1);
  SUBMIT_ERR(core, &req, WK_ERR_INVALID_SLOT, 2200);
  req = fx_req(ID("x"), wk_slot_id_make(xi, xg + 1000), 1);
  SUBMIT_ERR(core, &req, WK_ERR_INVALID_SLOT, 2200);
  req = fx_req(ID("x"), wk_slot_id_make(xi, 0), 1);
  SUBMIT_ERR(core, &req, WK_ERR_INVALID_SLOT, 2200);
  /* another task's current slot */
  req = fx_req(ID("x"), y, 1);
  SUBMIT_ERR(core, &req, WK_ERR_INVALID_SLOT, 2200);

  /* the same answers for a task with no reservation */
  req = fx_req(ID("z"), old, 1);
  SUBMIT_ERR(core, &req, WK_ERR_SLOT_UNCERTAIN, 2200);
  req = fx_req(ID("z"), wk_slot_id_make(xi, xg + 1), 1);
  SUBMIT_ERR(core, &req, WK_ERR_INVALID_SLOT, 2200);
  req = fx_req(ID("z"), y, 1);
  SUBMIT_ERR(core, &req, WK_ERR_INVALID_SLOT, 2200);

  FX_SLOT_ALLOCATED(core, y, 3100, ID("y"));
  FX_SLOT_ALLOCATED(core, x, 3100, ID("x"));
  FX_NOT_FOUND(core, ID("z"));
  /* the right pairing still goes in */
  FX_SUBMIT(core, ID("x"), x, 1, &ctx_a, 2300);
  FX_SUBMIT(core, ID("y"), y, 1, &ctx_b, 2300);
}

/* wk_core_live_task: the adapter reads a live task's slot, deadline and call policies
 * from the core (one copy), and a task stops being live once it converged. */
static void test_live_task_view(void **state) {
  wk_core *core = *state;
  wk_task_view v;
  FX_ERR(wk_core_live_task(core, ID("t1"), &v), WK_ERR_NOT_FOUND); /* unknown */
  wk_slot_result slot;
  wk_core_handle_request_slot(core, ID("t1"), 0, 1000, &slot);
  FX_ERR(slot.err, WK_OK);
  FX_ERR(wk_core_live_task(core, ID("t1"), &v), WK_ERR_NOT_FOUND); /* reserved only */

  wk_submit_request req = fx_req(ID("t1"), slot.slot_id, 7);
  req.timeout_ms = 3000;
  req.call_failure_policy = WK_CALL_CONTINUE;
  req.max_failed_calls = 5;
  req.retry.max_attempts = 3;
  req.retry.retry_on_timeout = true;
  wk_submit_result out;
  wk_core_handle_submit(core, &req, &ctx_a, 1100, &out);
  FX_ERR(out.err, WK_OK);
  FX_ERR(wk_core_live_task(core, ID("t1"), &v), WK_OK);
  assert_ptr_equal(v.adapter_ctx, &ctx_a);
  assert_int_equal(v.slot_id, slot.slot_id);
  assert_int_equal(v.deadline_ms, 1100 + 3000);
  assert_int_equal(v.call_failure_policy, WK_CALL_CONTINUE);
  assert_int_equal(v.max_failed_calls, 5);
  assert_int_equal(v.retry.max_attempts, 3);
  assert_int_equal(v.retry.initial_backoff_ms, 100);
  assert_true(v.retry.retry_on_timeout);

  wk_transition_result tr;
  wk_core_handle_abort(core, ID("t1"), WK_FAIL_CANCELLED, "by test", 1200, &tr);
  FX_ERR(tr.err, WK_OK);
  FX_ERR(wk_core_live_task(core, ID("t1"), &v), WK_ERR_NOT_FOUND); /* terminal */
  FX_INV(core);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      FX_TEST(test_submit_inline_allocates_slot),
      FX_TEST(test_submit_uses_reservation),
      FX_TEST(test_submit_max_length_id),
      FX_TEST(test_submit_duplicate_returns_snapshot),
      FX_TEST(test_submit_duplicate_allowed_while_draining_or_not_ready),
      FX_TEST(test_submit_conflict_on_other_digest),
      FX_TEST(test_submit_invalid_argument),
      FX_TEST(test_submit_timeout_bounds),
      FX_TEST(test_submit_unavailable),
      FX_TEST(test_submit_no_slot),
      FX_TEST(test_submit_invalid_slot),
      FX_TEST(test_submit_slot_uncertain_when_lease_lapsed),
      FX_TEST1(test_submit_slot_uncertain_stale_generation),
      FX_TEST(test_submit_slot_error_decided_by_generation),
      FX_TEST(test_live_task_view),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

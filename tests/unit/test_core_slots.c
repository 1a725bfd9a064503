/* test_core_slots.c: RequestTaskSlot, leases, generations, NO_SLOT, UNAVAILABLE,
 * readiness, draining and paused admission, the heartbeat and expired_slots. */
#include "core_fixture.h"

static int ctx_a, ctx_b;

/* ---- a fresh core ---------------------------------------------------------------- */

static void test_fresh_core_is_empty_and_not_ready(void **state) {
  (void)state;
  wk_core_config cfg = fx_config(FX_SLOTS);
  wk_core *core = wk_core_create(&cfg);
  assert_non_null(core);
  FX_INV(core);
  FX_HB(core, 1000, FX_SLOTS, 0, 0, false, false);
  for (uint32_t i = 0; i < FX_SLOTS; i++) {
    wk_slot_view v = wk_core_slot(core, i);
    assert_int_equal(v.state, WK_SLOT_FREE);
    assert_null(v.task_id);
  }
  assert_int_equal(wk_core_live_tasks(core), 0);
  assert_int_equal(wk_core_retained_count(core), 0);
  assert_int_equal(wk_core_retained_bytes(core), 0);
  assert_int_equal(wk_core_next_deadline(core), INT64_MAX);
  uint64_t slots[4];
  assert_int_equal(wk_core_expired_slots(core, INT64_MAX, slots, 4), 0);
  wk_task_id ids[2];
  assert_int_equal(wk_core_list_live_tasks(core, ids, 2), 0);
  FX_NOT_FOUND(core, ID("t1"));
  wk_core_destroy(core);
}

/* ---- readiness and draining ------------------------------------------------------ */

static void test_request_unavailable_until_ready(void **state) {
  (void)state;
  wk_core_config cfg = fx_config(FX_SLOTS);
  wk_core *core = wk_core_create(&cfg);
  assert_non_null(core);
  wk_slot_result out;

  wk_core_handle_request_slot(core, ID("t1"), 0, 1000, &out);
  FX_ERR(out.err, WK_ERR_UNAVAILABLE);
  FX_INV(core);
  FX_HB(core, 1000, FX_SLOTS, 0, 0, false, false);

  wk_core_set_ready(core, true);
  FX_HB(core, 1500, FX_SLOTS, 0, 0, true, false);
  uint64_t s1 = FX_RESERVE(core, ID("t1"), 0, 2000, 2000 + FX_TTL);
  FX_HB(core, 2000, FX_SLOTS, 1, 0, true, false);

  /* not ready again: new ids are refused, the known one keeps its answer */
  wk_core_set_ready(core, false);
  wk_core_handle_request_slot(core, ID("t2"), 0, 2100, &out);
  FX_ERR(out.err, WK_ERR_UNAVAILABLE);
  FX_INV(core);
  wk_core_handle_request_slot(core, ID("t1"), 0, 2100, &out);
  FX_ERR(out.err, WK_OK);
  assert_true(out.duplicate);
  assert_int_equal(out.slot_id, s1);
  assert_int_equal(out.lease_expires_ms, 2000 + FX_TTL);
  FX_INV(core);
  FX_HB(core, 2100, FX_SLOTS, 1, 0, false, false);
  wk_core_destroy(core);
}

static void test_request_unavailable_while_draining(void **state) {
  wk_core *core = *state;
  wk_slot_result out;
  uint64_t s1 = FX_RESERVE(core, ID("t1"), 3000, 1000, 4000);

  wk_core_set_draining(core, true);
  FX_HB(core, 1100, FX_SLOTS, 1, 0, true, true);
  wk_core_handle_request_slot(core, ID("t2"), 0, 1100, &out);
  FX_ERR(out.err, WK_ERR_UNAVAILABLE);
  FX_INV(core);
  FX_HB(core, 1100, FX_SLOTS, 1, 0, true, true);

  /* a known id is answered while draining */
  wk_core_handle_request_slot(core, ID("t1"), 0, 1200, &out);
  FX_ERR(out.err, WK_OK);
  assert_true(out.duplicate);
  assert_int_equal(out.slot_id, s1);
  assert_int_equal(out.lease_expires_ms, 4000);
  assert_null(out.result);
  FX_INV(core);

  wk_core_set_draining(core, false);
  FX_HB(core, 1300, FX_SLOTS, 1, 0, true, false);
  uint64_t s2 = FX_RESERVE(core, ID("t2"), 0, 1300, 1300 + FX_TTL);
  assert_int_not_equal(wk_slot_id_index(s2), wk_slot_id_index(s1));
  FX_HB(core, 1300, FX_SLOTS, 2, 0, true, false);
}

/* ---- admission paused (memory pressure) ------------------------------------------- */

static void test_admission_paused_refuses_new_ids_only(void **state) {
  wk_core *core = *state;
  wk_slot_result out;
  uint64_t s1 = FX_RESERVE(core, ID("t1"), 3000, 1000, 4000);
  FX_SUBMIT(core, ID("run"), 0, 0x5eed, &ctx_a, 1000);
  assert_null(wk_core_admission_paused(core));

  wk_core_set_admission_paused(core, "host memory available 10 MiB, under the floor 1 GiB");
  assert_string_equal(wk_core_admission_paused(core),
                      "host memory available 10 MiB, under the floor 1 GiB");
  /* new ids: RequestTaskSlot and an inline SubmitTask are refused, nothing changes */
  wk_core_handle_request_slot(core, ID("t2"), 0, 1100, &out);
  FX_ERR(out.err, WK_ERR_PAUSED);
  wk_submit_request req = fx_req(ID("t3"), 0, 0x5eed);
  wk_submit_result sub;
  wk_core_handle_submit(core, &req, &ctx_b, 1100, &sub);
  FX_ERR(sub.err, WK_ERR_PAUSED);
  FX_NOT_FOUND(core, ID("t2"));
  FX_NOT_FOUND(core, ID("t3"));
  FX_INV(core);
  FX_HB(core, 1100, FX_SLOTS, 2, 0, true, false);
  /* known ids keep their answers; a reserved slot is still honoured */
  wk_core_handle_request_slot(core, ID("t1"), 0, 1200, &out);
  FX_ERR(out.err, WK_OK);
  assert_true(out.duplicate);
  assert_int_equal(out.slot_id, s1);
  FX_SUBMIT(core, ID("t1"), s1, 0x5eed, &ctx_b, 1200);
  FX_INV(core);

  /* draining wins over a pause (UNAVAILABLE says more about this worker) */
  wk_core_set_draining(core, true);
  wk_core_handle_request_slot(core, ID("t2"), 0, 1250, &out);
  FX_ERR(out.err, WK_ERR_UNAVAILABLE);
  wk_core_set_draining(core, false);

  /* a long reason is truncated, not overrun */
  char long_reason[WK_CORE_PAUSE_REASON_MAX * 2];
  memset(long_reason, 'r', sizeof long_reason - 1);
  long_reason[sizeof long_reason - 1] = '\0';
  wk_core_set_admission_paused(core, long_reason);
  assert_int_equal(strlen(wk_core_admission_paused(core)), WK_CORE_PAUSE_REASON_MAX - 1);

  /* resumed: admitted again */
  wk_core_set_admission_paused(core, NULL);
  assert_null(wk_core_admission_paused(core));
  FX_RESERVE(core, ID("t2"), 0, 1300, 1300 + FX_TTL);
  wk_core_set_admission_paused(core, "x");
  wk_core_set_admission_paused(core, "");
  assert_null(wk_core_admission_paused(core));
  FX_SUBMIT(core, ID("t3"), 0, 0x5eed, &ctx_a, 1400);
  FX_INV(core);
}

/* ---- ttl --------------------------------------------------------------------------- */

static void test_request_ttl_default_explicit_and_capped(void **state) {
  wk_core *core = *state;
  FX_RESERVE(core, ID("zero"), 0, 1000, 1000 + FX_TTL);
  FX_RESERVE(core, ID("explicit"), 3000, 1000, 4000);
  FX_RESERVE(core, ID("at-max"), FX_MAX_TTL, 1000, 1000 + FX_MAX_TTL);
  FX_RESERVE(core, ID("over-max"), 99999, 1000, 1000 + FX_MAX_TTL);
  FX_HB(core, 1000, FX_SLOTS, 4, 0, true, false);
  assert_int_equal(wk_core_next_deadline(core), 1000 + FX_TTL);
}

/* ---- bad arguments ----------------------------------------------------------------- */

static void expect_invalid(wk_core *core, const char *id, size_t len, int64_t ttl) {
  wk_slot_result out;
  wk_core_handle_request_slot(core, id, len, ttl, 1000, &out);
  FX_ERR(out.err, WK_ERR_INVALID_ARGUMENT);
  FX_INV(core);
  FX_HB(core, 1000, FX_SLOTS, 0, 0, true, false);
}

static void test_request_invalid_argument(void **state) {
  wk_core *core = *state;
  char long_id[WK_TASK_ID_MAX + 2];
  memset(long_id, 'a', sizeof long_id);

  expect_invalid(core, "", 0, 0);                       /* empty */
  expect_invalid(core, long_id, WK_TASK_ID_MAX + 1, 0); /* 129 bytes */
  expect_invalid(core, "a b", 3, 0);                    /* space */
  expect_invalid(core, "a\tb", 3, 0);                   /* control */
  expect_invalid(core, "a\x7f", 2, 0);                  /* DEL */
  expect_invalid(core, "a\xc3\xa9", 3, 0);              /* non-ASCII */
  expect_invalid(core, "a\0b", 3, 0);                   /* embedded NUL */
  expect_invalid(core, "ok", 2, -1);                    /* negative ttl */
  FX_NOT_FOUND(core, ID("ok"));

  /* bad input wins over not ready */
  wk_core_set_ready(core, false);
  wk_slot_result out;
  wk_core_handle_request_slot(core, "", 0, 0, 1000, &out);
  FX_ERR(out.err, WK_ERR_INVALID_ARGUMENT);
  FX_INV(core);
  wk_core_set_ready(core, true);

  /* the limits themselves are fine */
  fx_reserve_at(core, long_id, WK_TASK_ID_MAX, 0, 1000, 1000 + FX_TTL, FX_AT);
  FX_RESERVE(core, ID("!~"), 0, 1000, 1000 + FX_TTL);
  FX_HB(core, 1000, FX_SLOTS, 2, 0, true, false);
}

/* ---- capacity ---------------------------------------------------------------------- */

static void test_request_no_slot_when_full(void **state) {
  wk_core *core = *state;
  uint64_t s[FX_SLOTS];
  s[0] = FX_RESERVE(core, ID("t0"), 0, 1000, 2000);
  s[1] = FX_RESERVE(core, ID("t1"), 0, 1000, 2000);
  s[2] = FX_RESERVE(core, ID("t2"), 0, 1000, 2000);
  s[3] = FX_RESERVE(core, ID("t3"), 0, 1000, 2000);
  /* four distinct slots, indices 0..3 each once */
  bool seen[FX_SLOTS] = {false, false, false, false};
  for (uint32_t i = 0; i < FX_SLOTS; i++) {
    uint32_t idx = wk_slot_id_index(s[i]);
    assert_true(idx < FX_SLOTS);
    assert_false(seen[idx]);
    seen[idx] = true;
  }
  FX_HB(core, 1000, FX_SLOTS, 4, 0, true, false);

  wk_slot_result out;
  wk_core_handle_request_slot(core, ID("t4"), 0, 1100, &out);
  FX_ERR(out.err, WK_ERR_NO_SLOT);
  FX_INV(core);
  FX_HB(core, 1100, FX_SLOTS, 4, 0, true, false);
  FX_NOT_FOUND(core, ID("t4"));

  /* known ids still get their slot */
  wk_core_handle_request_slot(core, ID("t2"), 0, 1100, &out);
  FX_ERR(out.err, WK_OK);
  assert_true(out.duplicate);
  assert_int_equal(out.slot_id, s[2]);
  FX_INV(core);

  /* running slots count as taken too */
  FX_SUBMIT(core, ID("t0"), s[0], 1, &ctx_a, 1200);
  FX_ACTIVATE(core, ID("t0"), s[0], 3, &ctx_a, 1300);
  FX_HB(core, 1300, FX_SLOTS, 3, 1, true, false);
  wk_core_handle_request_slot(core, ID("t4"), 0, 1400, &out);
  FX_ERR(out.err, WK_ERR_NO_SLOT);
  FX_INV(core);

  /* a lapsed lease frees one */
  wk_transition_result tr;
  wk_core_handle_slot_lease_expired(core, s[1], 2000, &tr);
  FX_ERR(tr.err, WK_OK);
  assert_int_equal(tr.cmds.count, 0);
  FX_INV(core);
  FX_HB(core, 2000, FX_SLOTS, 2, 1, true, false);
  uint64_t s4 = FX_RESERVE(core, ID("t4"), 0, 2000, 3000);
  assert_int_equal(wk_slot_id_index(s4), wk_slot_id_index(s[1]));
  assert_int_not_equal(s4, s[1]);
  FX_HB(core, 2000, FX_SLOTS, 3, 1, true, false);
}

/* ---- idempotency ------------------------------------------------------------------- */

static void test_request_duplicate_of_reservation(void **state) {
  wk_core *core = *state;
  uint64_t s = FX_RESERVE(core, ID("t1"), 3000, 1000, 4000);
  wk_slot_result out;
  /* later, with another ttl: the same slot and the same lease */
  wk_core_handle_request_slot(core, ID("t1"), 500, 2500, &out);
  FX_ERR(out.err, WK_OK);
  assert_int_equal(out.slot_id, s);
  assert_int_equal(out.lease_expires_ms, 4000);
  assert_true(out.duplicate);
  assert_null(out.result);
  FX_INV(core);
  FX_SLOT_ALLOCATED(core, s, 4000, ID("t1"));
  FX_HB(core, 2500, FX_SLOTS, 1, 0, true, false);
  FX_NOT_FOUND(core, ID("t1")); /* reserved only */
  assert_int_equal(wk_core_live_tasks(core), 0);
}

static void test_request_duplicate_of_submitted_task(void **state) {
  wk_core *core = *state;
  wk_slot_result out;
  uint64_t s = FX_SUBMIT(core, ID("t1"), 0, 9, &ctx_a, 1000);

  /* PREPARING: the slot is still ALLOCATED under its lease */
  wk_core_handle_request_slot(core, ID("t1"), 0, 1100, &out);
  FX_ERR(out.err, WK_OK);
  assert_true(out.duplicate);
  assert_int_equal(out.slot_id, s);
  assert_int_equal(out.lease_expires_ms, 1000 + FX_TTL);
  FX_RES(out.result, s, WK_TASK_PREPARING, WK_PHASE_PREPARING, WK_FAIL_NONE, "", 0);
  assert_int_equal(out.result->task_id_len, 2);
  assert_memory_equal(out.result->task_id, "t1", 2);
  FX_INV(core);
  FX_HB(core, 1100, FX_SLOTS, 1, 0, true, false);

  /* RUNNING: lease 0 */
  FX_ACTIVATE(core, ID("t1"), s, 5, &ctx_a, 1200);
  wk_core_handle_request_slot(core, ID("t1"), 0, 1300, &out);
  FX_ERR(out.err, WK_OK);
  assert_true(out.duplicate);
  assert_int_equal(out.slot_id, s);
  assert_int_equal(out.lease_expires_ms, 0);
  FX_RES(out.result, s, WK_TASK_RUNNING, WK_PHASE_BUILDER, WK_FAIL_NONE, "", 5);
  FX_INV(core);
  FX_HB(core, 1300, FX_SLOTS, 0, 1, true, false);

  /* terminal: the retained result, never a new slot */
  FX_BUILDER_OK(core, ID("t1"), s, &ctx_a, NULL, false, 1400);
  FX_CALLS_OK(core, ID("t1"), s, &ctx_a, NULL, 0, 1500);
  FX_WRITER_OK(core, ID("t1"), s, &ctx_a, NULL, 0, 1600);
  FX_HB(core, 1600, FX_SLOTS, 0, 0, true, false);
  wk_core_set_draining(core, true);
  wk_core_handle_request_slot(core, ID("t1"), 0, 1700, &out);
  FX_ERR(out.err, WK_OK);
  assert_true(out.duplicate);
  assert_int_equal(out.slot_id, 0); /* the proto: 0 = none, the task is terminal */
  assert_int_equal(out.lease_expires_ms, 0);
  FX_RES(out.result, s, WK_TASK_SUCCEEDED, WK_PHASE_DONE, WK_FAIL_NONE, "", 5);
  FX_INV(core);
  FX_HB(core, 1700, FX_SLOTS, 0, 0, true, true);
}

/* A terminal task holds no slot: RequestTaskSlot answers slot id 0 (the proto's "none,
 * e.g. the task is already terminal") and no lease, whichever way it ended; the slot it
 * ran on may belong to another task by now. The result keeps the slot it ran on. */
static void test_request_terminal_task_answers_no_slot(void **state) {
  wk_core *core = *state; /* one slot */
  wk_slot_result out;
  /* a reservation cancelled before any submit */
  uint64_t r = FX_RESERVE(core, ID("r1"), 0, 1000, 2000);
  wk_transition_result tr;
  wk_core_handle_abort(core, ID("r1"), WK_FAIL_CANCELLED, "never mind", 1100, &tr);
  FX_ERR(tr.err, WK_OK);
  FX_SLOT_FREE(core, r);
  /* the freed slot goes to another task */
  uint64_t other = FX_RESERVE(core, ID("other"), 0, 1200, 2200);
  assert_int_equal(wk_slot_id_index(other), wk_slot_id_index(r));
  wk_core_handle_request_slot(core, ID("r1"), 0, 1300, &out);
  FX_ERR(out.err, WK_OK);
  assert_true(out.duplicate);
  assert_int_equal(out.slot_id, 0);
  assert_int_equal(out.lease_expires_ms, 0);
  FX_RES(out.result, r, WK_TASK_CANCELLED, WK_PHASE_DONE, WK_FAIL_CANCELLED, "never mind", 0);

  /* a submitted task that timed out */
  wk_core_handle_abort(core, ID("other"), WK_FAIL_CANCELLED, NULL, 1400, &tr);
  uint64_t t = FX_SUBMIT(core, ID("t1"), 0, 9, &ctx_a, 1500);
  wk_core_handle_task_timed_out(core, ID("t1"), 1500 + FX_TIMEOUT, &tr);
  FX_ERR(tr.err, WK_OK);
  wk_core_handle_request_slot(core, ID("t1"), 0, 1600 + FX_TIMEOUT, &out);
  FX_ERR(out.err, WK_OK);
  assert_true(out.duplicate);
  assert_int_equal(out.slot_id, 0);
  assert_int_equal(out.lease_expires_ms, 0);
  FX_RES(out.result, t, WK_TASK_FAILED, WK_PHASE_DONE, WK_FAIL_TASK_TIMEOUT, NULL, 0);
  FX_INV(core);
}

/* ---- leases ------------------------------------------------------------------------ */

static void test_lease_expiry_frees_reservation(void **state) {
  wk_core *core = *state; /* one slot */
  uint64_t s1 = FX_RESERVE(core, ID("t1"), 0, 1000, 2000);
  assert_int_equal(wk_slot_id_index(s1), 0);
  assert_int_equal(wk_core_next_deadline(core), 2000);

  uint64_t got[2] = {0, 0};
  assert_int_equal(wk_core_expired_slots(core, 1999, got, 2), 0);
  assert_int_equal(wk_core_expired_slots(core, 2000, got, 2), 1);
  assert_int_equal(got[0], s1);

  wk_transition_result tr;
  wk_core_handle_slot_lease_expired(core, s1, 1999, &tr);
  FX_ERR(tr.err, WK_ERR_STALE); /* the lease runs past now */
  assert_int_equal(tr.cmds.count, 0);
  FX_INV(core);
  FX_SLOT_ALLOCATED(core, s1, 2000, ID("t1"));

  wk_core_handle_slot_lease_expired(core, s1, 2000, &tr);
  FX_ERR(tr.err, WK_OK);
  assert_int_equal(tr.cmds.count, 0);
  FX_INV(core);
  FX_SLOT_FREE(core, s1);
  FX_HB(core, 2000, 1, 0, 0, true, false);
  FX_NOT_FOUND(core, ID("t1"));
  assert_int_equal(wk_core_expired_slots(core, 9999, got, 2), 0);
  assert_int_equal(wk_core_next_deadline(core), INT64_MAX);
  assert_int_equal(wk_core_retained_count(core), 0);

  /* the reservation is forgotten: the id is new again, on the next generation */
  uint64_t s2 = FX_RESERVE(core, ID("t1"), 0, 2500, 3500);
  assert_int_equal(wk_slot_id_index(s2), 0);
  assert_int_equal(wk_slot_id_generation(s2), wk_slot_id_generation(s1) + 1);
  FX_HB(core, 2500, 1, 1, 0, true, false);
}

static void test_lease_expiry_errors(void **state) {
  wk_core *core = *state; /* one slot */
  wk_transition_result tr;

  wk_core_handle_slot_lease_expired(core, 0, 1000, &tr);
  FX_ERR(tr.err, WK_ERR_INVALID_SLOT);
  FX_INV(core);
  wk_core_handle_slot_lease_expired(core, wk_slot_id_make(1, 1), 1000, &tr);
  FX_ERR(tr.err, WK_ERR_INVALID_SLOT); /* index past the table */
  FX_INV(core);
  wk_core_handle_slot_lease_expired(core, wk_slot_id_make(UINT32_MAX, 1), 1000, &tr);
  FX_ERR(tr.err, WK_ERR_INVALID_SLOT);
  FX_INV(core);

  uint64_t s1 = FX_RESERVE(core, ID("t1"), 0, 1000, 2000);
  wk_core_handle_slot_lease_expired(core, s1, 2000, &tr);
  FX_ERR(tr.err, WK_OK);
  FX_INV(core);

  /* the slot is FREE now */
  wk_core_handle_slot_lease_expired(core, s1, 2000, &tr);
  FX_ERR(tr.err, WK_ERR_STALE);
  assert_int_equal(tr.cmds.count, 0);
  FX_INV(core);

  /* next owner: the old id's generation moved on */
  uint64_t s2 = FX_RESERVE(core, ID("t2"), 0, 2100, 3100);
  wk_core_handle_slot_lease_expired(core, s1, 5000, &tr);
  FX_ERR(tr.err, WK_ERR_STALE);
  assert_int_equal(tr.cmds.count, 0);
  FX_INV(core);
  FX_SLOT_ALLOCATED(core, s2, 3100, ID("t2"));
  FX_HB(core, 5000, 1, 1, 0, true, false);

  /* RUNNING slots have no lease */
  FX_SUBMIT(core, ID("t2"), s2, 1, &ctx_a, 2200);
  FX_ACTIVATE(core, ID("t2"), s2, 1, &ctx_a, 2300);
  uint64_t got[1];
  assert_int_equal(wk_core_expired_slots(core, 9000, got, 1), 0);
  wk_core_handle_slot_lease_expired(core, s2, 9000, &tr);
  FX_ERR(tr.err, WK_ERR_STALE);
  assert_int_equal(tr.cmds.count, 0);
  FX_INV(core);
  FX_SLOT_RUNNING(core, s2, ID("t2"));
  const wk_task_result *r = FX_GET(core, ID("t2"));
  FX_RES(r, s2, WK_TASK_RUNNING, WK_PHASE_BUILDER, WK_FAIL_NONE, "", 1);
  FX_HB(core, 9000, 1, 0, 1, true, false);
}

static void test_generation_bumps_on_every_allocation(void **state) {
  wk_core *core = *state; /* one slot */
  wk_transition_result tr;
  uint64_t prev = FX_RESERVE(core, ID("a"), 0, 1000, 2000);
  assert_int_not_equal(wk_slot_id_generation(prev), 0);
  for (int64_t i = 1; i <= 3; i++) {
    int64_t now = 1000 + i * 10000;
    wk_core_handle_slot_lease_expired(core, prev, now, &tr);
    FX_ERR(tr.err, WK_OK);
    FX_INV(core);
    uint64_t next = FX_RESERVE(core, ID("a"), 0, now, now + FX_TTL);
    assert_int_equal(wk_slot_id_index(next), 0);
    assert_int_equal(wk_slot_id_generation(next), wk_slot_id_generation(prev) + 1);
    prev = next;
  }
  /* inline allocation and convergence count too */
  wk_core_handle_slot_lease_expired(core, prev, 50000, &tr);
  FX_ERR(tr.err, WK_OK);
  uint64_t s = FX_RUN_SUCCESS(core, ID("b"), &ctx_b, 60000);
  assert_int_equal(wk_slot_id_generation(s), wk_slot_id_generation(prev) + 1);
  uint64_t s2 = FX_RESERVE(core, ID("c"), 0, 70000, 71000);
  assert_int_equal(wk_slot_id_generation(s2), wk_slot_id_generation(s) + 1);
}

/* ---- the heartbeat and the expiry scan ------------------------------------------- */

static void test_heartbeat_follows_slot_table(void **state) {
  wk_core *core = *state;
  FX_HB(core, 500, FX_SLOTS, 0, 0, true, false);
  uint64_t a = FX_RESERVE(core, ID("a"), 0, 1000, 2000);
  FX_HB(core, 1000, FX_SLOTS, 1, 0, true, false);
  uint64_t b = FX_SUBMIT(core, ID("b"), 0, 1, &ctx_b, 1000);
  FX_HB(core, 1000, FX_SLOTS, 2, 0, true, false);
  FX_ACTIVATE(core, ID("b"), b, 1, &ctx_b, 1100);
  FX_HB(core, 1100, FX_SLOTS, 1, 1, true, false);
  FX_SUBMIT(core, ID("a"), a, 1, &ctx_a, 1200);
  FX_HB(core, 1200, FX_SLOTS, 1, 1, true, false);
  FX_ACTIVATE(core, ID("a"), a, 1, &ctx_a, 1300);
  FX_HB(core, 1300, FX_SLOTS, 0, 2, true, false);
  FX_BUILDER_OK(core, ID("a"), a, &ctx_a, NULL, false, 1400);
  FX_CALLS_OK(core, ID("a"), a, &ctx_a, NULL, 0, 1500);
  FX_WRITER_OK(core, ID("a"), a, &ctx_a, NULL, 0, 1600);
  FX_HB(core, 1600, FX_SLOTS, 0, 1, true, false);
  FX_SLOT_FREE(core, a);
  FX_SLOT_RUNNING(core, b, ID("b"));
  wk_core_set_draining(core, true);
  FX_HB(core, 1700, FX_SLOTS, 0, 1, true, true);
  assert_int_equal(wk_core_live_tasks(core), 1);
}

static void test_expired_slots_earliest_first(void **state) {
  wk_core *core = *state;
  uint64_t a = FX_RESERVE(core, ID("a"), 3000, 1000, 4000);
  uint64_t b = FX_RESERVE(core, ID("b"), 1000, 1000, 2000);
  uint64_t c = FX_RESERVE(core, ID("c"), 2000, 1000, 3000);
  uint64_t d = FX_RESERVE(core, ID("d"), 4000, 1000, 5000);
  assert_int_equal(wk_core_next_deadline(core), 2000);

  uint64_t got[8];
  memset(got, 0, sizeof got);
  assert_int_equal(wk_core_expired_slots(core, 1999, got, 8), 0);
  assert_int_equal(wk_core_expired_slots(core, 4500, got, 8), 3);
  assert_int_equal(got[0], b);
  assert_int_equal(got[1], c);
  assert_int_equal(got[2], a);
  memset(got, 0, sizeof got);
  assert_int_equal(wk_core_expired_slots(core, 4500, got, 2), 2);
  assert_int_equal(got[0], b);
  assert_int_equal(got[1], c);
  assert_int_equal(got[2], 0); /* nothing past max */
  assert_int_equal(wk_core_expired_slots(core, 4500, got, 0), 0);
  /* read-only */
  FX_HB(core, 4500, FX_SLOTS, 4, 0, true, false);
  FX_INV(core);

  wk_transition_result tr;
  wk_core_handle_slot_lease_expired(core, b, 4500, &tr);
  FX_ERR(tr.err, WK_OK);
  assert_int_equal(tr.cmds.count, 0);
  FX_INV(core);
  assert_int_equal(wk_core_next_deadline(core), 3000);
  assert_int_equal(wk_core_expired_slots(core, 4500, got, 8), 2);
  assert_int_equal(got[0], c);
  assert_int_equal(got[1], a);
  assert_int_equal(wk_core_expired_slots(core, 5000, got, 8), 3);
  assert_int_equal(got[2], d);
  FX_HB(core, 4500, FX_SLOTS, 3, 0, true, false);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_fresh_core_is_empty_and_not_ready),
      cmocka_unit_test(test_request_unavailable_until_ready),
      FX_TEST(test_request_unavailable_while_draining),
      FX_TEST(test_admission_paused_refuses_new_ids_only),
      FX_TEST(test_request_ttl_default_explicit_and_capped),
      FX_TEST(test_request_invalid_argument),
      FX_TEST(test_request_no_slot_when_full),
      FX_TEST(test_request_duplicate_of_reservation),
      FX_TEST(test_request_duplicate_of_submitted_task),
      FX_TEST1(test_request_terminal_task_answers_no_slot),
      FX_TEST1(test_lease_expiry_frees_reservation),
      FX_TEST1(test_lease_expiry_errors),
      FX_TEST1(test_generation_bumps_on_every_allocation),
      FX_TEST(test_heartbeat_follows_slot_table),
      FX_TEST(test_expired_slots_earliest_first),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

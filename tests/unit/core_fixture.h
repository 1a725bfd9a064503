/* core_fixture.h: shared helpers for the WorkerCore unit tests.
 *
 * Static inline functions only. Every checking helper takes the caller's file and
 * line (through a FX_* macro) so that a failure points at the test, not here.
 * Times are fixed numbers chosen by the tests; the clock is never read. */
#ifndef CORE_FIXTURE_H
#define CORE_FIXTURE_H

#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "core/wk_core.h"

/* A string literal as the (pointer, length) pair the core takes. */
#define ID(s) (s), (sizeof(s) - 1u)

/* The configuration every core test starts from (see fx_config). */
#define FX_SLOTS 4u
#define FX_TTL 1000          /* default_slot_ttl_ms */
#define FX_MAX_TTL 5000      /* max_slot_ttl_ms */
#define FX_TIMEOUT 10000     /* default_task_timeout_ms */
#define FX_MAX_TIMEOUT 60000 /* max_task_timeout_ms */
#define FX_GRACE 2000        /* watch_disconnect_grace_ms */
#define FX_RETENTION 100000  /* result_retention_ms */
#define FX_MAX_RETAINED 8u   /* max_retained_results */
#define FX_MAX_BYTES ((uint64_t)1 << 20)
#define FX_MAX_MSG 64u /* max_failure_message_bytes */

/* "do not check this timestamp" for fx_times_at */
#define FX_ANY INT64_MIN

#define FX_LOC const char *file, int line
#define FX_AT __FILE__, __LINE__
#define FX_EQ(a, b) \
  _assert_int_equal(cast_to_largest_integral_type(a), cast_to_largest_integral_type(b), file, line)
#define FX_PTR_EQ(a, b)                                                                         \
  _assert_int_equal(cast_ptr_to_largest_integral_type(a), cast_ptr_to_largest_integral_type(b), \
                    file, line)
#define FX_TRUE(c) _assert_true(cast_to_largest_integral_type(c), #c, file, line)
#define FX_STR(a, b) _assert_string_equal((a), (b), file, line)
#define FX_MEM(a, b, n) _assert_memory_equal((a), (b), (n), file, line)

static inline wk_core_config fx_config(uint32_t slots) {
  wk_core_config cfg;
  memset(&cfg, 0, sizeof cfg);
  wk_core_config_default(&cfg);
  cfg.task_slots = slots;
  cfg.default_slot_ttl_ms = FX_TTL;
  cfg.max_slot_ttl_ms = FX_MAX_TTL;
  cfg.default_task_timeout_ms = FX_TIMEOUT;
  cfg.max_task_timeout_ms = FX_MAX_TIMEOUT;
  cfg.watch_disconnect_grace_ms = FX_GRACE;
  cfg.result_retention_ms = FX_RETENTION;
  cfg.max_retained_results = FX_MAX_RETAINED;
  cfg.max_retained_bytes = FX_MAX_BYTES;
  cfg.max_failure_message_bytes = FX_MAX_MSG;
  return cfg;
}

/* ---- setup / teardown: state is a ready wk_core ----------------------------- */

static inline int fx_setup_cfg(void **state, const wk_core_config *cfg) {
  wk_core *core = wk_core_create(cfg);
  if (core == NULL) return -1;
  wk_core_set_ready(core, true);
  *state = core;
  return 0;
}
static inline int fx_setup(void **state) {
  wk_core_config cfg = fx_config(FX_SLOTS);
  return fx_setup_cfg(state, &cfg);
}
static inline int fx_setup1(void **state) {
  wk_core_config cfg = fx_config(1);
  return fx_setup_cfg(state, &cfg);
}
static inline int fx_teardown(void **state) {
  wk_core_destroy(*state);
  *state = NULL;
  return 0;
}
#define FX_TEST(f) cmocka_unit_test_setup_teardown(f, fx_setup, fx_teardown)
#define FX_TEST1(f) cmocka_unit_test_setup_teardown(f, fx_setup1, fx_teardown)

/* ---- primitive checks ------------------------------------------------------- */

static inline void fx_inv_at(const wk_core *core, FX_LOC) {
  const char *why = wk_core_check_invariants(core);
  if (why != NULL) {
    print_error("invariant violated: %s\n", why);
    _fail(file, line);
  }
}
#define FX_INV(core) fx_inv_at((core), FX_AT)

static inline void fx_err_at(wk_err got, wk_err want, FX_LOC) {
  if (got != want) {
    print_error("err %s (%d), want %s (%d)\n", wk_err_name(got), (int)got, wk_err_name(want),
                (int)want);
    _fail(file, line);
  }
}
#define FX_ERR(got, want) fx_err_at((got), (want), FX_AT)

/* The heartbeat: every field, and free = slots - reserved - running. */
static inline void fx_hb_at(const wk_core *core, int64_t now, uint32_t slots, uint32_t reserved,
                            uint32_t running, bool ready, bool draining, FX_LOC) {
  wk_heartbeat hb = wk_core_derive_heartbeat(core, now);
  FX_EQ(hb.task_slots, slots);
  FX_EQ(hb.reserved, reserved);
  FX_EQ(hb.running, running);
  FX_EQ(hb.free, slots - reserved - running);
  FX_EQ(hb.ready, ready);
  FX_EQ(hb.draining, draining);
  FX_EQ(hb.now_ms, now);
}
#define FX_HB(core, now, slots, reserved, running, ready, draining) \
  fx_hb_at((core), (now), (slots), (reserved), (running), (ready), (draining), FX_AT)

/* One command: kind, task id, slot id and adapter context. */
static inline void fx_cmd_at(const wk_cmd *c, wk_cmd_kind kind, const char *id, size_t len,
                             uint64_t slot_id, const void *ctx, FX_LOC) {
  FX_STR(wk_cmd_kind_name(c->kind), wk_cmd_kind_name(kind));
  FX_EQ(c->kind, kind);
  FX_EQ(c->task_id_len, len);
  FX_TRUE(c->task_id != NULL);
  FX_MEM(c->task_id, id, len);
  FX_EQ(c->slot_id, slot_id);
  FX_PTR_EQ(c->adapter_ctx, ctx);
}
#define FX_CMD(c, kind, id, slot_id, ctx) fx_cmd_at((c), (kind), id, (slot_id), (ctx), FX_AT)

/* The task's result as the core reports it; checks the id. */
static inline const wk_task_result *fx_get_at(const wk_core *core, const char *id, size_t len,
                                              FX_LOC) {
  const wk_task_result *r = NULL;
  fx_err_at(wk_core_get_result(core, id, len, &r), WK_OK, file, line);
  FX_TRUE(r != NULL);
  FX_EQ(r->task_id_len, len);
  FX_TRUE(r->task_id != NULL);
  FX_MEM(r->task_id, id, len);
  return r;
}
#define FX_GET(core, id) fx_get_at((core), id, FX_AT)

static inline void fx_not_found_at(const wk_core *core, const char *id, size_t len, FX_LOC) {
  const wk_task_result *r = NULL;
  fx_err_at(wk_core_get_result(core, id, len, &r), WK_ERR_NOT_FOUND, file, line);
}
#define FX_NOT_FOUND(core, id) fx_not_found_at((core), id, FX_AT)

/* State, phase, failure code, message (exact, "" when none; NULL = any text, for the
 * failures the core itself decides, whose wording the header leaves open), code epoch
 * and slot id. */
static inline void fx_res_at(const wk_task_result *r, uint64_t slot_id, wk_task_state state,
                             wk_phase phase, wk_failure_code code, const char *message,
                             uint64_t epoch, FX_LOC) {
  FX_TRUE(r != NULL);
  FX_STR(wk_task_state_name(r->state), wk_task_state_name(state));
  FX_EQ(r->state, state);
  FX_STR(wk_phase_name(r->phase), wk_phase_name(phase));
  FX_EQ(r->phase, phase);
  FX_STR(wk_failure_code_name(r->failure_code), wk_failure_code_name(code));
  FX_EQ(r->failure_code, code);
  FX_TRUE(r->failure_message != NULL);
  if (message != NULL) FX_STR(r->failure_message, message);
  FX_EQ(r->code_epoch, epoch);
  FX_EQ(r->slot_id, slot_id);
}
#define FX_RES(r, slot_id, state, phase, code, message, epoch) \
  fx_res_at((r), (slot_id), (state), (phase), (code), (message), (epoch), FX_AT)

/* The nine timestamps of the statistic, in declaration order; FX_ANY skips one. */
static inline void fx_times_at(const wk_task_result *r, int64_t accepted, int64_t activated,
                               int64_t builder_started, int64_t builder_finished,
                               int64_t calls_started, int64_t calls_finished,
                               int64_t writer_started, int64_t writer_finished, int64_t finished,
                               FX_LOC) {
  const wk_task_statistic *s = &r->statistic;
  if (accepted != FX_ANY) FX_EQ(s->accepted_ms, accepted);
  if (activated != FX_ANY) FX_EQ(s->activated_ms, activated);
  if (builder_started != FX_ANY) FX_EQ(s->builder_started_ms, builder_started);
  if (builder_finished != FX_ANY) FX_EQ(s->builder_finished_ms, builder_finished);
  if (calls_started != FX_ANY) FX_EQ(s->calls_started_ms, calls_started);
  if (calls_finished != FX_ANY) FX_EQ(s->calls_finished_ms, calls_finished);
  if (writer_started != FX_ANY) FX_EQ(s->writer_started_ms, writer_started);
  if (writer_finished != FX_ANY) FX_EQ(s->writer_finished_ms, writer_finished);
  if (finished != FX_ANY) FX_EQ(s->finished_ms, finished);
}
#define FX_TIMES(r, acc, act, bs, bf, cs, cf, ws, wf, fin) \
  fx_times_at((r), (acc), (act), (bs), (bf), (cs), (cf), (ws), (wf), (fin), FX_AT)

static inline void fx_bytes_at(wk_bytes b, const void *data, size_t len, FX_LOC) {
  FX_EQ(b.len, len);
  if (len > 0) {
    FX_TRUE(b.data != NULL);
    FX_MEM(b.data, data, len);
  }
}
#define FX_BYTES(b, data, len) fx_bytes_at((b), (data), (len), FX_AT)

static inline void fx_stats_at(const wk_call_stats *got, const wk_call_stats *want, FX_LOC) {
  FX_EQ(got->calls_total, want->calls_total);
  FX_EQ(got->calls_succeeded, want->calls_succeeded);
  FX_EQ(got->calls_failed, want->calls_failed);
  FX_EQ(got->calls_retried, want->calls_retried);
  FX_EQ(got->subcalls, want->subcalls);
  FX_EQ(got->executor_cpu_us, want->executor_cpu_us);
  FX_EQ(got->bytes_in, want->bytes_in);
  FX_EQ(got->bytes_out, want->bytes_out);
}
#define FX_STATS(got, want) fx_stats_at((got), (want), FX_AT)

/* The slot at `index`: state, generation, lease and owner (NULL id = no owner). */
static inline void fx_slot_at(const wk_core *core, uint32_t index, wk_slot_state state,
                              uint32_t generation, int64_t lease_expires_ms, const char *id,
                              size_t len, FX_LOC) {
  wk_slot_view v = wk_core_slot(core, index);
  FX_STR(wk_slot_state_name(v.state), wk_slot_state_name(state));
  FX_EQ(v.state, state);
  if (state != WK_SLOT_FREE) {
    FX_EQ(v.generation, generation);
    FX_EQ(v.lease_expires_ms, lease_expires_ms);
  }
  if (id == NULL) {
    FX_TRUE(v.task_id == NULL);
  } else {
    FX_EQ(v.task_id_len, len);
    FX_TRUE(v.task_id != NULL);
    FX_MEM(v.task_id, id, len);
  }
}
/* A slot id's slot is ALLOCATED with `lease` for `id`. */
#define FX_SLOT_ALLOCATED(core, slot_id, lease, id)                                                \
  fx_slot_at((core), wk_slot_id_index(slot_id), WK_SLOT_ALLOCATED, wk_slot_id_generation(slot_id), \
             (lease), id, FX_AT)
/* A RUNNING slot: its lease is not checked (the header leaves it open). */
static inline void fx_slot_running_at(const wk_core *core, uint64_t slot_id, const char *id,
                                      size_t len, FX_LOC) {
  wk_slot_view v = wk_core_slot(core, wk_slot_id_index(slot_id));
  FX_STR(wk_slot_state_name(v.state), wk_slot_state_name(WK_SLOT_RUNNING));
  FX_EQ(v.generation, wk_slot_id_generation(slot_id));
  FX_EQ(v.task_id_len, len);
  FX_TRUE(v.task_id != NULL);
  FX_MEM(v.task_id, id, len);
}
#define FX_SLOT_RUNNING(core, slot_id, id) fx_slot_running_at((core), (slot_id), id, FX_AT)
#define FX_SLOT_FREE(core, slot_id) \
  fx_slot_at((core), wk_slot_id_index(slot_id), WK_SLOT_FREE, 0, 0, NULL, 0, FX_AT)

/* ---- requests and outcomes ---------------------------------------------------- */

static inline wk_submit_request fx_req(const char *id, size_t len, uint64_t slot_id,
                                       uint64_t digest) {
  wk_submit_request req;
  memset(&req, 0, sizeof req);
  req.task_id = id;
  req.task_id_len = len;
  req.slot_id = slot_id;
  req.request_digest = digest;
  req.requested_epoch = 0;
  req.timeout_ms = 0;
  req.call_failure_policy = WK_CALL_FAIL_FAST;
  req.max_failed_calls = 0;
  req.retry.max_attempts = 1;
  req.retry.initial_backoff_ms = 100;
  req.retry.max_backoff_ms = 1000;
  req.retry.backoff_multiplier_milli = 2000;
  req.retry.retry_on_timeout = false;
  return req;
}

static inline wk_phase_outcome fx_ok(void) {
  wk_phase_outcome o;
  memset(&o, 0, sizeof o);
  o.ok = true;
  return o;
}
static inline wk_phase_outcome fx_fail(wk_failure_code code, const char *message) {
  wk_phase_outcome o;
  memset(&o, 0, sizeof o);
  o.ok = false;
  o.failure_code = code;
  o.message = message;
  return o;
}

/* ---- lifecycle drivers: each step checked, returns what later steps need ------- */

/* RequestTaskSlot for a new id; returns the slot id. */
static inline uint64_t fx_reserve_at(wk_core *core, const char *id, size_t len, int64_t ttl_ms,
                                     int64_t now, int64_t want_lease, FX_LOC) {
  wk_slot_result out;
  memset(&out, 0xa5, sizeof out);
  wk_core_handle_request_slot(core, id, len, ttl_ms, now, &out);
  fx_err_at(out.err, WK_OK, file, line);
  FX_TRUE(out.slot_id != 0);
  FX_TRUE(wk_slot_id_generation(out.slot_id) != 0);
  FX_EQ(out.lease_expires_ms, want_lease);
  FX_EQ(out.duplicate, false);
  FX_TRUE(out.result == NULL);
  fx_slot_at(core, wk_slot_id_index(out.slot_id), WK_SLOT_ALLOCATED,
             wk_slot_id_generation(out.slot_id), want_lease, id, len, file, line);
  fx_inv_at(core, file, line);
  return out.slot_id;
}
#define FX_RESERVE(core, id, ttl, now, want_lease) \
  fx_reserve_at((core), id, (ttl), (now), (want_lease), FX_AT)

/* SubmitTask of a new task (slot_id 0 = inline); returns its slot id. */
static inline uint64_t fx_submit_at(wk_core *core, const char *id, size_t len, uint64_t slot_id,
                                    uint64_t digest, void *ctx, int64_t now, FX_LOC) {
  wk_submit_request req = fx_req(id, len, slot_id, digest);
  wk_submit_result out;
  memset(&out, 0xa5, sizeof out);
  wk_core_handle_submit(core, &req, ctx, now, &out);
  fx_err_at(out.err, WK_OK, file, line);
  if (slot_id != 0) FX_EQ(out.slot_id, slot_id);
  FX_TRUE(out.slot_id != 0);
  FX_EQ(out.accepted_ms, now);
  FX_EQ(out.duplicate, false);
  FX_EQ(out.adapter_ctx_taken, true);
  fx_res_at(out.result, out.slot_id, WK_TASK_PREPARING, WK_PHASE_PREPARING, WK_FAIL_NONE, "", 0,
            file, line);
  FX_EQ(out.cmds.count, 1);
  fx_cmd_at(&out.cmds.items[0], WK_CMD_PREPARE_ACTIVATION, id, len, out.slot_id, ctx, file, line);
  FX_EQ(out.cmds.items[0].u.prepare.requested_epoch, 0);
  fx_inv_at(core, file, line);
  return out.slot_id;
}
#define FX_SUBMIT(core, id, slot_id, digest, ctx, now) \
  fx_submit_at((core), id, (slot_id), (digest), (ctx), (now), FX_AT)

/* Activation prepared: START_BUILDER. */
static inline void fx_activate_at(wk_core *core, const char *id, size_t len, uint64_t slot_id,
                                  uint64_t epoch, void *ctx, int64_t now, FX_LOC) {
  wk_transition_result out;
  memset(&out, 0xa5, sizeof out);
  wk_core_handle_activation_prepared(core, id, len, slot_id, epoch, now, &out);
  fx_err_at(out.err, WK_OK, file, line);
  FX_EQ(out.cmds.count, 1);
  fx_cmd_at(&out.cmds.items[0], WK_CMD_START_BUILDER, id, len, slot_id, ctx, file, line);
  fx_inv_at(core, file, line);
}
#define FX_ACTIVATE(core, id, slot_id, epoch, ctx, now) \
  fx_activate_at((core), id, (slot_id), (epoch), (ctx), (now), FX_AT)

/* Builder ok: START_CALLS with the call list. */
static inline void fx_builder_ok_at(wk_core *core, const char *id, size_t len, uint64_t slot_id,
                                    void *ctx, void *call_list, bool streaming, int64_t now,
                                    FX_LOC) {
  wk_phase_outcome o = fx_ok();
  o.call_list = call_list;
  o.streaming = streaming;
  wk_transition_result out;
  memset(&out, 0xa5, sizeof out);
  wk_core_handle_phase_finished(core, id, len, WK_PHASE_BUILDER, &o, now, &out);
  fx_err_at(out.err, WK_OK, file, line);
  FX_EQ(out.cmds.count, 1);
  fx_cmd_at(&out.cmds.items[0], WK_CMD_START_CALLS, id, len, slot_id, ctx, file, line);
  FX_PTR_EQ(out.cmds.items[0].u.calls.call_list, call_list);
  FX_EQ(out.cmds.items[0].u.calls.streaming, streaming);
  fx_inv_at(core, file, line);
}
#define FX_BUILDER_OK(core, id, slot_id, ctx, call_list, streaming, now) \
  fx_builder_ok_at((core), id, (slot_id), (ctx), (call_list), (streaming), (now), FX_AT)

/* Calls ok: START_WRITER with the core's copy of the outputs. */
static inline void fx_calls_ok_at(wk_core *core, const char *id, size_t len, uint64_t slot_id,
                                  void *ctx, const void *data, size_t dlen, int64_t now, FX_LOC) {
  wk_phase_outcome o = fx_ok();
  o.data.data = data;
  o.data.len = dlen;
  wk_transition_result out;
  memset(&out, 0xa5, sizeof out);
  wk_core_handle_phase_finished(core, id, len, WK_PHASE_CALLS, &o, now, &out);
  fx_err_at(out.err, WK_OK, file, line);
  FX_EQ(out.cmds.count, 1);
  fx_cmd_at(&out.cmds.items[0], WK_CMD_START_WRITER, id, len, slot_id, ctx, file, line);
  fx_bytes_at(out.cmds.items[0].u.writer.outputs, data, dlen, file, line);
  fx_inv_at(core, file, line);
}
#define FX_CALLS_OK(core, id, slot_id, ctx, data, dlen, now) \
  fx_calls_ok_at((core), id, (slot_id), (ctx), (data), (dlen), (now), FX_AT)

/* Writer ok: CONVERGE SUCCEEDED. */
static inline void fx_writer_ok_at(wk_core *core, const char *id, size_t len, uint64_t slot_id,
                                   void *ctx, const void *data, size_t dlen, int64_t now, FX_LOC) {
  wk_phase_outcome o = fx_ok();
  o.data.data = data;
  o.data.len = dlen;
  wk_transition_result out;
  memset(&out, 0xa5, sizeof out);
  wk_core_handle_phase_finished(core, id, len, WK_PHASE_WRITER, &o, now, &out);
  fx_err_at(out.err, WK_OK, file, line);
  FX_EQ(out.cmds.count, 1);
  fx_cmd_at(&out.cmds.items[0], WK_CMD_CONVERGE, id, len, slot_id, ctx, file, line);
  const wk_task_result *r = out.cmds.items[0].u.converge.result;
  FX_TRUE(r != NULL);
  FX_EQ(r->state, WK_TASK_SUCCEEDED);
  FX_EQ(r->failure_code, WK_FAIL_NONE);
  FX_EQ(r->statistic.finished_ms, now);
  fx_bytes_at(r->plugin_results, data, dlen, file, line);
  fx_inv_at(core, file, line);
}
#define FX_WRITER_OK(core, id, slot_id, ctx, data, dlen, now) \
  fx_writer_ok_at((core), id, (slot_id), (ctx), (data), (dlen), (now), FX_AT)

/* A whole successful task, inline slot, no outputs: submitted at t, activated t+1,
 * builder done t+2, calls done t+3, writer done (SUCCEEDED) at t+4. Returns the slot. */
static inline uint64_t fx_run_success_at(wk_core *core, const char *id, size_t len, void *ctx,
                                         int64_t t, FX_LOC) {
  uint64_t slot = fx_submit_at(core, id, len, 0, 0x5eed, ctx, t, file, line);
  fx_activate_at(core, id, len, slot, 1, ctx, t + 1, file, line);
  fx_builder_ok_at(core, id, len, slot, ctx, NULL, false, t + 2, file, line);
  fx_calls_ok_at(core, id, len, slot, ctx, NULL, 0, t + 3, file, line);
  fx_writer_ok_at(core, id, len, slot, ctx, NULL, 0, t + 4, file, line);
  return slot;
}
#define FX_RUN_SUCCESS(core, id, ctx, t) fx_run_success_at((core), id, (ctx), (t), FX_AT)

/* A task that is RUNNING in the builder phase: submitted inline at t, activated at
 * t+1 with epoch 7. Returns the slot. */
static inline uint64_t fx_run_to_builder_at(wk_core *core, const char *id, size_t len, void *ctx,
                                            int64_t t, FX_LOC) {
  uint64_t slot = fx_submit_at(core, id, len, 0, 0x5eed, ctx, t, file, line);
  fx_activate_at(core, id, len, slot, 7, ctx, t + 1, file, line);
  return slot;
}
#define FX_RUN_TO_BUILDER(core, id, ctx, t) fx_run_to_builder_at((core), id, (ctx), (t), FX_AT)

/* CANCEL_TASK then CONVERGE of a task ending in `state` with `code` at `now`. */
static inline void fx_cancel_converge_at(const wk_transition_result *out, const char *id,
                                         size_t len, uint64_t slot_id, void *ctx,
                                         wk_task_state state, wk_failure_code code,
                                         const char *message, uint64_t epoch, int64_t now, FX_LOC) {
  fx_err_at(out->err, WK_OK, file, line);
  FX_EQ(out->cmds.count, 2);
  fx_cmd_at(&out->cmds.items[0], WK_CMD_CANCEL_TASK, id, len, slot_id, ctx, file, line);
  fx_cmd_at(&out->cmds.items[1], WK_CMD_CONVERGE, id, len, slot_id, ctx, file, line);
  const wk_task_result *r = out->cmds.items[1].u.converge.result;
  fx_res_at(r, slot_id, state, WK_PHASE_DONE, code, message, epoch, file, line);
  FX_EQ(r->task_id_len, len);
  FX_MEM(r->task_id, id, len);
  FX_EQ(r->statistic.finished_ms, now);
}
#define FX_CANCEL_CONVERGE(out, id, slot_id, ctx, state, code, message, epoch, now)               \
  fx_cancel_converge_at(&(out), id, (slot_id), (ctx), (state), (code), (message), (epoch), (now), \
                        FX_AT)

/* Does the scan output hold `id`? */
static inline bool fx_ids_contain(const wk_task_id *ids, size_t n, const char *id, size_t len) {
  for (size_t i = 0; i < n; i++) {
    if (ids[i].len == len && memcmp(ids[i].bytes, id, len) == 0 && ids[i].bytes[len] == '\0') {
      return true;
    }
  }
  return false;
}
#define FX_IDS_CONTAIN(ids, n, id) fx_ids_contain((ids), (n), id)

#endif

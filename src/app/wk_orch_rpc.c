/* wk_orch_rpc.c: the rpc handlers of WorkerService and Health. See wk_orch_int.h. */
#include "app/wk_orch_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "adapters/wk_digest.h"
#include "adapters/wk_shadow.h"
#include "lib/wk_alloc.h"
#include "lib/wk_assert.h"
#include "lib/wk_json_out.h"
#include "lib/wk_log.h"
#include "app/wk_wire.h"
#include "grpc/health/v1/health.pb-c.h"
#include "worker/v1/worker.pb-c.h"

/* A Health.Watch stream and the status it was last sent (-1: SERVICE_UNKNOWN, no more). */
struct wk_orch__health_watch {
  struct wk_orch__health_watch *next;
  wk_rpc *rpc;
  int last_sent;
};

/* ---- replies ---------------------------------------------------------------------- */

void wk_orch__reply_packed(wk_rpc *rpc, const ProtobufCMessage *m) {
  size_t n = protobuf_c_message_get_packed_size(m);
  uint8_t stack[512];
  uint8_t *p = n <= sizeof stack ? stack : wk_xmalloc(n);
  protobuf_c_message_pack(m, p);
  wk_rpc_reply(rpc, p, n);
  if (p != stack) free(p);
}

static void fail_core(wk_orch *o, wk_rpc *rpc, wk_err err, const char *task_id) {
  char msg[512 + WK_CORE_PAUSE_REASON_MAX];
  wk_wire_error_message(err, task_id, msg, 512);
  const char *paused = wk_core_admission_paused(o->core);
  if (err == WK_ERR_PAUSED && paused) { /* the reason, so the caller knows why */
    size_t n = strlen(msg);
    snprintf(msg + n, sizeof msg - n, " (admission paused: %s)", paused);
  }
  wk_rpc_fail(rpc, wk_wire_status(err), msg);
}

static void reply_result(wk_orch *o, wk_rpc *rpc, const wk_task_result *r) {
  wk_buf b = {0};
  wk_wire_append_task_result(&b, r, o->wall_offset_ms);
  wk_rpc_reply(rpc, b.data, b.len);
  wk_buf_free(&b);
}

/* ---- rpc handlers ---------------------------------------------------------------------- */

static void handle_request_slot(wk_orch *o, wk_rpc *rpc) {
  const Worker__V1__RequestTaskSlotRequest *req = wk_rpc_request(rpc);
  wk_slot_result res;
  wk_core_handle_request_slot(o->core, req->task_id, strlen(req->task_id), (int64_t)req->ttl_ms,
                              o->now_ms, &res);
  if (res.err) {
    fail_core(o, rpc, res.err, req->task_id);
    return;
  }
  Worker__V1__RequestTaskSlotResponse resp = WORKER__V1__REQUEST_TASK_SLOT_RESPONSE__INIT;
  resp.slot_id = res.slot_id;
  resp.lease_expires_unix_ms = wk_wire_unix_ms(res.lease_expires_ms, o->wall_offset_ms);
  resp.state = res.result ? (Worker__V1__TaskState)wk_wire_task_state(res.result->state)
                          : WORKER__V1__TASK_STATE__TASK_STATE_PREPARING;
  if (!res.result || !wk_task_state_terminal(res.result->state)) {
    wk_orch__reply_packed(rpc, &resp.base);
    return;
  }
  /* terminal: append the encoded result as field 4 */
  wk_buf b = {0};
  size_t n = protobuf_c_message_get_packed_size(&resp.base);
  protobuf_c_message_pack(&resp.base, wk_buf_reserve(&b, n));
  b.len = n;
  wk_buf result = {0};
  wk_wire_append_task_result(&result, res.result, o->wall_offset_ms);
  wk_wire_append_bytes_field(&b, 4, result.data, result.len);
  wk_rpc_reply(rpc, b.data, b.len);
  wk_buf_free(&result);
  wk_buf_free(&b);
}

static const char *rt_builder_name(const Worker__V1__SubmitTaskRequest *req) {
  return (req->function->type && req->function->type[0]) ? req->function->type : "single";
}

/* Why this worker cannot run the task's result handler, into msg; false when it can
 * (none, or an enabled and configured writer that takes the options). */
static bool writer_refusal(const wk_orch *o, const Worker__V1__ResultHandler *rh, char *msg,
                           size_t len) {
  if (!rh || !rh->type || !rh->type[0]) return false;
  const wk_writer *known = wk_writer_find(rh->type);
  if (!known) {
    snprintf(msg, len, "result_handler.type: no writer plugin named \"%s\" (known: %s)", rh->type,
             wk_writer_names());
    return true;
  }
  const wk_writer *w = wk_orch__enabled_writer(o, rh->type);
  if (!w) {
    char on[128] = "";
    size_t used = 0;
    for (size_t i = 0; i < sizeof o->cfg.writers / sizeof o->cfg.writers[0] && o->cfg.writers[i];
         i++) {
      int k = snprintf(on + used, sizeof on - used, "%s%s", i ? ", " : "", o->cfg.writers[i]);
      if (k < 0 || (size_t)k >= sizeof on - used) break;
      used += (size_t)k;
    }
    snprintf(msg, len,
             "result_handler.type: the %s writer is not configured on this worker: it needs the "
             "setting %s (in a profile that enables %s); writers available here: %s",
             known->name, known->setting, known->name, on[0] ? on : "none");
    return true;
  }
  wk_writer_option opts[WK_OPTIONS_MAX];
  size_t n = rh->n_options < WK_OPTIONS_MAX ? rh->n_options : WK_OPTIONS_MAX;
  for (size_t i = 0; i < n; i++) opts[i] = (wk_option){rh->options[i]->key, rh->options[i]->value};
  char err[WK_TASK_RT_MESSAGE_MAX + 1];
  if (w->check_options(opts, n, err, sizeof err) != 0) {
    snprintf(msg, len, "result_handler.options: %s", err);
    return true;
  }
  return false;
}

/* Refuses, before the core sees the request, what no activation could fix: options the
 * task's builder does not take, a result handler this worker cannot run (unknown, not
 * enabled and configured, or bad options): INVALID_ARGUMENT naming what to change, before
 * any call runs. An unknown builder is left to the builder phase (BUILDER_NOT_FOUND, as
 * the design says); a shadow request never reaches a writer. Returns true when the rpc
 * was answered. */
static bool refuse_unrunnable(const wk_orch *o, wk_rpc *rpc,
                              const Worker__V1__SubmitTaskRequest *req, bool is_shadow) {
  char err[WK_TASK_RT_MESSAGE_MAX + 1], msg[WK_TASK_RT_MESSAGE_MAX + 64];
  const wk_builder *b = wk_builder_registry_find(o->cfg.builders, req->function->type);
  wk_option opts[WK_OPTIONS_MAX];
  size_t n = wk_task_rt_builder_options(req->function, opts);
  if (b && wk_builder_check_options(b, opts, n, err, sizeof err) != 0) {
    snprintf(msg, sizeof msg, "function.options: %s", err);
    wk_rpc_fail(rpc, GRPC_STATUS_INVALID_ARGUMENT, msg);
    return true;
  }
  if (!is_shadow && writer_refusal(o, req->result_handler, msg, sizeof msg)) {
    wk_rpc_fail(rpc, GRPC_STATUS_INVALID_ARGUMENT, msg);
    return true;
  }
  return false;
}

static void handle_submit(wk_orch *o, wk_rpc *rpc) {
  const Worker__V1__SubmitTaskRequest *req = wk_rpc_request(rpc);
  char shadow_md[8] = "";
  bool is_shadow = wk_rpc_metadata(rpc, WK_SHADOW_METADATA_KEY, shadow_md, sizeof shadow_md) &&
                   wk_shadow_is_shadow_request(shadow_md);
  if (refuse_unrunnable(o, rpc, req, is_shadow)) return;
  char traceparent[WK_TASK_RT_TRACEPARENT_MAX + 1] = "";
  wk_rpc_metadata(rpc, "traceparent", traceparent, sizeof traceparent);
  wk_submit_request sr = {
      .task_id = req->task_id,
      .task_id_len = strlen(req->task_id),
      .slot_id = req->slot_id,
      .request_digest = wk_submit_digest(req),
      .requested_epoch = req->function->epoch,
      .timeout_ms = (int64_t)req->timeout_ms,
      .call_failure_policy = req->call_failure_policy
                                 ? (wk_call_failure_policy)req->call_failure_policy->mode
                                 : WK_CALL_FAIL_FAST,
      .max_failed_calls = req->call_failure_policy ? req->call_failure_policy->max_failed_calls : 0,
  };
  if (req->call_retry_policy) {
    const Worker__V1__CallRetryPolicy *p = req->call_retry_policy;
    sr.retry = (wk_retry_policy){
        .max_attempts = p->max_attempts,
        .initial_backoff_ms = (int64_t)p->initial_backoff_ms,
        .max_backoff_ms = (int64_t)p->max_backoff_ms,
        .backoff_multiplier_milli = (uint32_t)(p->backoff_multiplier * 1000.0),
        .retry_on_timeout = p->retry_on_timeout,
    };
  }
  wk_task_rt *rt = wk_task_rt_create(o->loop, &o->rt_pool, req, traceparent, is_shadow);
  wk_submit_result res;
  wk_core_handle_submit(o->core, &sr, rt, o->now_ms, &res);
  if (!res.adapter_ctx_taken) wk_task_rt_unref(rt);
  if (res.err) {
    WK_ASSERT(!res.adapter_ctx_taken);
    fail_core(o, rpc, res.err, req->task_id);
    return;
  }
  /* a new task hands its runtime to the core; a duplicate never does */
  WK_ASSERT(res.adapter_ctx_taken != res.duplicate);
  WK_ASSERT(res.result != NULL);
  Worker__V1__SubmitTaskResponse resp = WORKER__V1__SUBMIT_TASK_RESPONSE__INIT;
  resp.task_id = req->task_id;
  resp.slot_id = res.slot_id;
  resp.state = (Worker__V1__TaskState)wk_wire_task_state(res.result->state);
  resp.duplicate = res.duplicate;
  resp.accepted_unix_ms = wk_wire_unix_ms(res.accepted_ms, o->wall_offset_ms);
  resp.owner_grace_ms = (uint64_t)o->cfg.core.watch_disconnect_grace_ms;
  wk_orch__reply_packed(rpc, &resp.base);
  if (!res.duplicate && o->shadow && !is_shadow) {
    /* mirrored after the primary succeeded; the forwarder never blocks */
    size_t n = worker__v1__submit_task_request__get_packed_size(req);
    uint8_t *bytes = wk_xmalloc(n ? n : 1);
    worker__v1__submit_task_request__pack(req, bytes);
    wk_shadow_offer(o->shadow, bytes, n);
    free(bytes);
  }
  if (!res.duplicate) wk_orch__book_add(o, req);
  if (!res.duplicate && wk_log_enabled(WK_LOG_INFO)) {
    /* the audit line: who asked for what, once per accepted submission */
    wk_buf *b = &o->record;
    wk_buf_clear(b);
    wk_json_obj a;
    wk_json_obj_begin(&a, b);
    wk_json_obj_str(&a, "task_id", req->task_id);
    wk_json_obj_str(&a, "function", req->function->name);
    wk_json_obj_str(&a, "builder", rt_builder_name(req));
    wk_json_obj_int(&a, "epoch_requested", (int64_t)req->function->epoch);
    wk_json_obj_str(&a, "result_handler",
                    req->result_handler && !is_shadow ? req->result_handler->type : "");
    wk_json_obj_str(&a, "peer", wk_rpc_peer(rpc));
    wk_json_obj_int(&a, "slot_id", (int64_t)res.slot_id);
    wk_json_obj_int(&a, "args_bytes", (int64_t)req->function->args.len);
    wk_json_obj_int(&a, "timeout_ms", (int64_t)req->timeout_ms);
    wk_json_obj_bool(&a, "shadow", is_shadow);
    if (traceparent[0]) wk_json_obj_str(&a, "traceparent", traceparent);
    wk_json_obj_end(&a);
    wk_log_object_write(WK_LOG_INFO, "audit", (const char *)b->data, b->len);
  }
  wk_orch__exec_cmds(o, &res.cmds);
}

static void handle_get_result(wk_orch *o, wk_rpc *rpc) {
  const Worker__V1__GetTaskResultRequest *req = wk_rpc_request(rpc);
  const wk_task_result *r;
  wk_err err = wk_core_get_result(o->core, req->task_id, strlen(req->task_id), &r);
  if (err) {
    fail_core(o, rpc, err, req->task_id);
    return;
  }
  reply_result(o, rpc, r);
}

static void handle_cancel(wk_orch *o, wk_rpc *rpc) {
  const Worker__V1__CancelTaskRequest *req = wk_rpc_request(rpc);
  char reason[sizeof "cancelled: " + WK_CANCEL_REASON_MAX]; /* the reason is validated */
  snprintf(reason, sizeof reason, "cancelled: %s",
           (req->reason && req->reason[0]) ? req->reason : "by request");
  wk_transition_result tr;
  wk_core_handle_abort(o->core, req->task_id, strlen(req->task_id), WK_FAIL_CANCELLED, reason,
                       o->now_ms, &tr);
  if (tr.err) {
    fail_core(o, rpc, tr.err, req->task_id);
    return;
  }
  wk_orch__exec_cmds(o, &tr.cmds);
  const wk_task_result *r;
  if (wk_core_get_result(o->core, req->task_id, strlen(req->task_id), &r) == WK_OK) {
    reply_result(o, rpc, r);
  } else {
    fail_core(o, rpc, WK_ERR_NOT_FOUND, req->task_id);
  }
}

static int serving_status(const wk_orch *o) {
  wk_heartbeat hb = wk_core_derive_heartbeat(o->core, o->now_ms);
  return (hb.ready && !hb.draining && !o->drain_announced && !o->executors_unavailable &&
          !o->accept_blocked)
             ? GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING
             : GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__NOT_SERVING;
}

static bool known_service(const char *s) {
  return !s || !s[0] || strcmp(s, "worker.v1.WorkerService") == 0;
}

static void send_health(wk_rpc *rpc, int status, bool stream) {
  Grpc__Health__V1__HealthCheckResponse resp = GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__INIT;
  resp.status = (Grpc__Health__V1__HealthCheckResponse__ServingStatus)status;
  uint8_t buf[16];
  size_t n = grpc__health__v1__health_check_response__pack(&resp, buf);
  if (stream) {
    wk_rpc_send(rpc, buf, n);
  } else {
    wk_rpc_reply(rpc, buf, n);
  }
}

static void handle_health(wk_orch *o, wk_rpc *rpc, bool watch) {
  const Grpc__Health__V1__HealthCheckRequest *req = wk_rpc_request(rpc);
  if (!known_service(req->service)) {
    if (watch) {
      /* Watch reports SERVICE_UNKNOWN and keeps the stream (per the health spec) */
      send_health(rpc, GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVICE_UNKNOWN,
                  true);
    } else {
      wk_rpc_fail(rpc, GRPC_STATUS_NOT_FOUND,
                  "unknown service; this server serves \"\" and worker.v1.WorkerService");
      wk_rpc_release(rpc);
      return;
    }
  }
  if (!watch) {
    send_health(rpc, serving_status(o), false);
    wk_rpc_release(rpc);
    return;
  }
  wk_orch__health_watch *hw = wk_xcalloc(1, sizeof *hw);
  hw->rpc = rpc;
  hw->last_sent = known_service(req->service) ? serving_status(o) : -1;
  if (hw->last_sent >= 0) send_health(rpc, hw->last_sent, true);
  hw->next = o->health_watchers;
  o->health_watchers = hw;
}

void wk_orch__health_changed(wk_orch *o) {
  int status = serving_status(o);
  for (wk_orch__health_watch *hw = o->health_watchers; hw; hw = hw->next) {
    if (hw->last_sent >= 0 && hw->last_sent != status) {
      hw->last_sent = status;
      send_health(hw->rpc, status, true);
    }
  }
}

bool wk_orch__health_closed(wk_orch *o, wk_rpc *rpc) {
  for (wk_orch__health_watch **p = &o->health_watchers; *p; p = &(*p)->next) {
    if ((*p)->rpc == rpc) {
      wk_orch__health_watch *hw = *p;
      *p = hw->next;
      wk_rpc_release(rpc);
      free(hw);
      return true;
    }
  }
  return false;
}

void wk_orch__health_finish_all(wk_orch *o) {
  for (wk_orch__health_watch *hw = o->health_watchers; hw; hw = hw->next) {
    wk_rpc_finish(hw->rpc, GRPC_STATUS_UNAVAILABLE, "the worker is shutting down");
  }
}

void wk_orch__health_free_all(wk_orch *o) {
  while (o->health_watchers) {
    wk_orch__health_watch *hw = o->health_watchers;
    o->health_watchers = hw->next;
    wk_rpc_release(hw->rpc);
    free(hw);
  }
}

void wk_orch__handle_rpc(wk_orch *o, wk_rpc *rpc) {
  wk_rpc_method m = wk_rpc_method_of(rpc);
  if (o->closing) {
    wk_rpc_fail(rpc, GRPC_STATUS_UNAVAILABLE, "the worker is shutting down");
    if (m != WK_RPC_WATCH_TASKS && m != WK_RPC_HEALTH_WATCH) wk_rpc_release(rpc);
    return;
  }
  switch (m) {
    case WK_RPC_REQUEST_TASK_SLOT: handle_request_slot(o, rpc); break;
    case WK_RPC_SUBMIT_TASK: handle_submit(o, rpc); break;
    case WK_RPC_GET_TASK_RESULT: handle_get_result(o, rpc); break;
    case WK_RPC_CANCEL_TASK: handle_cancel(o, rpc); break;
    case WK_RPC_LIST_TASKS: wk_orch__handle_list_tasks(o, rpc); break;
    case WK_RPC_GET_TASK_LOGS: wk_orch__handle_task_logs(o, rpc); break;
    case WK_RPC_WATCH_TASKS: wk_subs_watch(o->subs, rpc, o->now_ms, o->wall_offset_ms); return;
    case WK_RPC_HEALTH_CHECK: handle_health(o, rpc, false); return;
    case WK_RPC_HEALTH_WATCH: handle_health(o, rpc, true); return;
    case WK_RPC_DEPLOY_CODE:
    case WK_RPC_SET_CURRENT_EPOCH:
      if (o->deploy_handle) {
        o->deploy_handle(o->deploy_ud, rpc); /* answers and releases it */
        return;
      }
      wk_rpc_fail(rpc, GRPC_STATUS_UNIMPLEMENTED, "this worker does not serve deploys");
      break;
    case WK_RPC_METHOD_COUNT: wk_rpc_fail(rpc, GRPC_STATUS_UNIMPLEMENTED, "unknown method"); break;
  }
  wk_rpc_release(rpc);
}

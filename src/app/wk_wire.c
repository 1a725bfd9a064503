#include "app/wk_wire.h"

#include <stdio.h>
#include <string.h>

#include "worker/v1/worker.pb-c.h"

grpc_status_code wk_wire_status(wk_err err) {
  switch (err) {
    case WK_OK: return GRPC_STATUS_OK;
    case WK_ERR_INVALID_ARGUMENT: return GRPC_STATUS_INVALID_ARGUMENT;
    case WK_ERR_NO_SLOT: return GRPC_STATUS_RESOURCE_EXHAUSTED;
    case WK_ERR_PAUSED: return GRPC_STATUS_RESOURCE_EXHAUSTED;
    case WK_ERR_UNAVAILABLE: return GRPC_STATUS_UNAVAILABLE;
    case WK_ERR_INVALID_SLOT: return GRPC_STATUS_FAILED_PRECONDITION;
    case WK_ERR_NOT_FOUND: return GRPC_STATUS_NOT_FOUND;
    case WK_ERR_SLOT_UNCERTAIN: return GRPC_STATUS_ABORTED;
    case WK_ERR_CONFLICT: return GRPC_STATUS_ALREADY_EXISTS;
    case WK_ERR_STALE: return GRPC_STATUS_FAILED_PRECONDITION;
  }
  return GRPC_STATUS_INTERNAL;
}

const char *wk_wire_error_message(wk_err err, const char *task_id, char *buf, size_t len) {
  switch (err) {
    case WK_OK: snprintf(buf, len, "ok"); break;
    case WK_ERR_INVALID_ARGUMENT:
      snprintf(buf, len,
               "task %s: the request has an invalid value (check ids, ttl, timeout and policies)",
               task_id);
      break;
    case WK_ERR_NO_SLOT:
      snprintf(
          buf, len,
          "task %s: every task slot of this worker is in use; retry later or pick another worker",
          task_id);
      break;
    case WK_ERR_UNAVAILABLE:
      snprintf(
          buf, len,
          "task %s: this worker is not accepting tasks (starting up or draining); pick another worker",
          task_id);
      break;
    case WK_ERR_INVALID_SLOT:
      snprintf(
          buf, len,
          "task %s: slot_id does not name a slot reserved for this task; request a slot with RequestTaskSlot or submit without slot_id",
          task_id);
      break;
    case WK_ERR_NOT_FOUND:
      snprintf(
          buf, len,
          "task %s is not known to this worker (never submitted, or its result was purged after retention)",
          task_id);
      break;
    case WK_ERR_SLOT_UNCERTAIN:
      snprintf(buf, len,
               "task %s: the slot's lease lapsed or the slot was reclaimed; request a new slot",
               task_id);
      break;
    case WK_ERR_CONFLICT:
      snprintf(buf, len, "task %s already exists with a different request; use a new task_id",
               task_id);
      break;
    case WK_ERR_STALE: snprintf(buf, len, "task %s: the event no longer applies", task_id); break;
    case WK_ERR_PAUSED:
      snprintf(buf, len,
               "task %s: this worker is not admitting new tasks for now; pick another worker",
               task_id);
      break;
  }
  return buf;
}

/* the listed retries: WK_RT_RETRIES_LISTED CallRetry records of at most 190 bytes */
_Static_assert(WK_TASK_ID_MAX + WK_CORE_FAILURE_MESSAGE_BYTES + 2048u + 8u * 190u <=
                   WK_WIRE_RESULT_OVERHEAD_BYTES,
               "a result's fields besides its outputs fit in the overhead reserved for them");

size_t wk_wire_inline_output_limit(size_t max_inline_output_bytes, size_t max_message_bytes) {
  size_t room = max_message_bytes > WK_WIRE_RESULT_OVERHEAD_BYTES
                    ? max_message_bytes - WK_WIRE_RESULT_OVERHEAD_BYTES
                    : 0;
  return max_inline_output_bytes < room ? max_inline_output_bytes : room;
}

void wk_wire_append_bytes_field(wk_buf *out, uint32_t field, const void *data, size_t len) {
  wk_buf_append_varint(out, ((uint64_t)field << 3) | 2u);
  wk_buf_append_varint(out, len);
  wk_buf_append(out, data, len);
}

void wk_wire_append_varint_field(wk_buf *out, uint32_t field, uint64_t v) {
  wk_buf_append_varint(out, (uint64_t)field << 3);
  wk_buf_append_varint(out, v);
}

/* A phase's time: up to its end, 0 while it runs (a snapshot carries no clock). */
static uint64_t phase_ms(const wk_task_statistic *s, wk_phase p) {
  int64_t ms;
  (void)wk_task_phase_ms(s, p, s->finished_ms, &ms);
  return (uint64_t)ms;
}

void wk_wire_append_task_result(wk_buf *out, const wk_task_result *r, int64_t wall_offset_ms) {
  const wk_task_statistic *s = &r->statistic;
  Worker__V1__TaskStatistic st = WORKER__V1__TASK_STATISTIC__INIT;
  st.accepted_unix_ms = wk_wire_unix_ms(s->accepted_ms, wall_offset_ms);
  st.started_unix_ms = wk_wire_unix_ms(s->activated_ms, wall_offset_ms);
  st.finished_unix_ms = wk_wire_unix_ms(s->finished_ms, wall_offset_ms);
  st.builder_ms = phase_ms(s, WK_PHASE_BUILDER);
  st.calls_ms = phase_ms(s, WK_PHASE_CALLS);
  st.writer_ms = phase_ms(s, WK_PHASE_WRITER);
  st.calls_total = s->calls.calls_total;
  st.calls_succeeded = s->calls.calls_succeeded;
  st.calls_failed = s->calls.calls_failed;
  st.calls_retried = s->calls.calls_retried;
  st.calls_done = s->calls.calls_succeeded + s->calls.calls_failed;
  st.subcalls = s->calls.subcalls;
  st.executor_cpu_ms = s->calls.executor_cpu_us / 1000u;
  st.bytes_in = s->calls.bytes_in;
  st.bytes_out = s->calls.bytes_out;

  char task_id[WK_TASK_ID_MAX + 1];
  memcpy(task_id, r->task_id, r->task_id_len);
  task_id[r->task_id_len] = '\0';
  Worker__V1__TaskResult m = WORKER__V1__TASK_RESULT__INIT;
  m.task_id = task_id;
  m.state = (Worker__V1__TaskState)wk_wire_task_state(r->state);
  m.phase = (Worker__V1__Phase)wk_wire_phase(r->phase);
  m.failure_code = (Worker__V1__FailureCode)r->failure_code;
  m.failure_message = (char *)(uintptr_t)(r->failure_message ? r->failure_message : "");
  m.code_epoch = r->code_epoch;
  m.statistic = &st;

  size_t n = worker__v1__task_result__get_packed_size(&m);
  uint8_t *p = wk_buf_reserve(out, n + r->outputs.len + r->plugin_results.len);
  worker__v1__task_result__pack(&m, p);
  out->len += n;
  /* outputs and plugin results are already encoded field records */
  wk_buf_append(out, r->outputs.data, r->outputs.len);
  wk_buf_append(out, r->plugin_results.data, r->plugin_results.len);
}

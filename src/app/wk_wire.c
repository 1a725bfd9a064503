#include "app/wk_wire.h"

#include <stdio.h>
#include <string.h>

#include "lib/wk_assert.h"
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

/* Wire types (protobuf encoding): a varint, or a length and that many bytes. */
#define WIRE_VARINT 0u
#define WIRE_LEN 2u

/* The tag of `field` (wire type `wire`) and then the varint v, at p (room for
 * WK_WIRE_FIELD_HEAD_MAX bytes): a varint field, or a length-delimited field's head
 * with v its length. Returns the bytes written. */
static size_t put_tagged(uint8_t *p, uint32_t field, uint32_t wire, uint64_t v) {
  size_t n = wk_varint_put(p, ((uint64_t)field << 3) | wire);
  return n + wk_varint_put(p + n, v);
}

void wk_wire_append_bytes_field(wk_buf *out, uint32_t field, const void *data, size_t len) {
  uint8_t *p = wk_buf_reserve(out, WK_WIRE_FIELD_HEAD_MAX + len);
  size_t n = put_tagged(p, field, WIRE_LEN, len);
  if (len) memcpy(p + n, data, len);
  out->len += n + len;
}

void wk_wire_append_varint_field(wk_buf *out, uint32_t field, uint64_t v) {
  out->len += put_tagged(wk_buf_reserve(out, WK_WIRE_FIELD_HEAD_MAX), field, WIRE_VARINT, v);
}

/* A phase's time: up to its end, 0 while it runs (a snapshot carries no clock). */
static uint64_t phase_ms(const wk_task_statistic *s, wk_phase p) {
  int64_t ms;
  (void)wk_task_phase_ms(s, p, s->finished_ms, &ms);
  return (uint64_t)ms;
}

/* A proto3 varint field at p as protobuf-c packs it: nothing for 0 (the default is
 * not sent); returns the bytes written (at most 11 for fields 1..15). */
static size_t put_varint_field(uint8_t *p, uint32_t field, uint64_t v) {
  return v ? put_tagged(p, field, WIRE_VARINT, v) : 0;
}

/* A proto3 string field at p: nothing for "" (the default); returns the bytes written. */
static size_t put_string_field(uint8_t *p, uint32_t field, const char *s, size_t len) {
  if (len == 0) return 0;
  size_t n = put_tagged(p, field, WIRE_LEN, len);
  memcpy(p + n, s, len);
  return n + len;
}

/* TaskStatistic: 15 varint fields of at most 11 bytes */
#define STATISTIC_MAX_BYTES (15u * 11u)

/* The encoded TaskStatistic of s at p; returns its length. */
static size_t put_statistic(uint8_t *p, const wk_task_statistic *s, int64_t wall_offset_ms) {
  const wk_call_stats *c = &s->calls;
  size_t n = 0;
  n += put_varint_field(p + n, 1, (uint64_t)wk_wire_unix_ms(s->accepted_ms, wall_offset_ms));
  n += put_varint_field(p + n, 2, (uint64_t)wk_wire_unix_ms(s->activated_ms, wall_offset_ms));
  n += put_varint_field(p + n, 3, (uint64_t)wk_wire_unix_ms(s->finished_ms, wall_offset_ms));
  n += put_varint_field(p + n, 4, phase_ms(s, WK_PHASE_BUILDER));
  n += put_varint_field(p + n, 5, phase_ms(s, WK_PHASE_CALLS));
  n += put_varint_field(p + n, 6, phase_ms(s, WK_PHASE_WRITER));
  n += put_varint_field(p + n, 7, c->calls_total);
  n += put_varint_field(p + n, 8, c->calls_succeeded);
  n += put_varint_field(p + n, 9, c->calls_failed);
  n += put_varint_field(p + n, 10, c->calls_retried);
  n += put_varint_field(p + n, 11, c->subcalls);
  n += put_varint_field(p + n, 12, c->executor_cpu_us / 1000u);
  n += put_varint_field(p + n, 13, c->bytes_in);
  n += put_varint_field(p + n, 14, c->bytes_out);
  n += put_varint_field(p + n, 15, (uint64_t)c->calls_succeeded + c->calls_failed);
  WK_ASSERT(n <= STATISTIC_MAX_BYTES);
  return n;
}

/* Written by hand, field by field in number order, byte for byte what protobuf-c's
 * pack of the same TaskResult gives (test_wire checks it against protobuf-c): the
 * generic packer walked both descriptors twice (size, then bytes), ~4k instructions
 * of a no-op task's ~100k. */
void wk_wire_append_task_result(wk_buf *out, const wk_task_result *r, int64_t wall_offset_ms) {
  const char *fm = r->failure_message ? r->failure_message : "";
  size_t fm_len = strlen(fm);
  uint8_t stat[STATISTIC_MAX_BYTES];
  size_t stat_len = put_statistic(stat, &r->statistic, wall_offset_ms);
  /* tags and length varints: 1 + 10 per string, 11 per varint, 1 + 2 for the statistic */
  size_t bound = 11 + r->task_id_len + 3 * 11 + 11 + fm_len + 11 + 3 + stat_len;
  uint8_t *p = wk_buf_reserve(out, bound + r->outputs.len + r->plugin_results.len);
  size_t n = 0;
  n += put_string_field(p + n, 1, r->task_id, r->task_id_len);
  n += put_varint_field(p + n, 2, (uint64_t)(int64_t)wk_wire_task_state(r->state));
  n += put_varint_field(p + n, 3, (uint64_t)(int64_t)wk_wire_phase(r->phase));
  n += put_varint_field(p + n, 4, (uint64_t)(int64_t)r->failure_code);
  n += put_string_field(p + n, 5, fm, fm_len);
  n += put_varint_field(p + n, 6, r->code_epoch);
  n += put_tagged(p + n, 9, WIRE_LEN, stat_len); /* the statistic: always, even empty */
  memcpy(p + n, stat, stat_len);
  n += stat_len;
  WK_ASSERT(n <= bound);
  out->len += n;
  /* outputs and plugin results are already encoded field records */
  wk_buf_append(out, r->outputs.data, r->outputs.len);
  wk_buf_append(out, r->plugin_results.data, r->plugin_results.len);
}

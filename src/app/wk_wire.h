/* wk_wire.h: conversions between WorkerCore's types and worker.v1 messages, and the
 * mapping of core errors to gRPC status codes (the seed's workerErrToStatus).
 *
 * Encoded TaskResults are built without re-encoding outputs: the core keeps a task's
 * outputs as the encoded bytes of TaskResult's repeated `outputs` field (field 7
 * records), which protobuf lets us append to the rest of the message as they are. */
#ifndef WK_WIRE_H
#define WK_WIRE_H

#include <grpc/status.h>

#include "core/wk_core.h"
#include "lib/wk_buf.h"

/** gRPC status for a core error (InvalidArgument → INVALID_ARGUMENT, NoSlot →
 * RESOURCE_EXHAUSTED, Unavailable → UNAVAILABLE, InvalidSlot → FAILED_PRECONDITION,
 * NotFound → NOT_FOUND, SlotUncertain → ABORTED, Conflict → ALREADY_EXISTS). */
grpc_status_code wk_wire_status(wk_err err);

/** A message a person can act on for a core error met by `rpc` on `task_id`; written
 * into buf. Returns buf. */
const char *wk_wire_error_message(wk_err err, const char *task_id, char *buf, size_t len);

/** Wire enum values (see the numbering contract in worker.proto). */
static inline int wk_wire_task_state(wk_task_state s) { return (int)s + 1; }
static inline int wk_wire_phase(wk_phase p) { return (int)p + 1; }

/** The unix-ms time of a core time (monotonic ms): `mono_ms + wall_offset_ms`, and 0
 * for 0, the core's "never" (e.g. accepted_ms of a reservation cancelled before any
 * submit, a lease once the slot runs). Every core time on the wire goes through here. */
static inline int64_t wk_wire_unix_ms(int64_t mono_ms, int64_t wall_offset_ms) {
  return mono_ms ? mono_ms + wall_offset_ms : 0;
}

/** Appends the encoded TaskResult for `r` to `out`. `wall_offset_ms` turns the core's
 * monotonic times into unix ms. */
void wk_wire_append_task_result(wk_buf *out, const wk_task_result *r, int64_t wall_offset_ms);

/* Bytes of a result besides its inline outputs, at most: the TaskResult's other fields
 * (a task id of WK_TASK_ID_MAX bytes, a failure message of WK_CORE_FAILURE_MESSAGE_BYTES,
 * the statistic and enums: some 4.5 KB), the largest message that carries a result
 * (TaskEvent, RequestTaskSlotResponse: task id, kind or slot, framing) and gRPC's 5-byte
 * message prefix, rounded up generously. */
#define WK_WIRE_RESULT_OVERHEAD_BYTES 8192u

/* Bytes of a length-delimited field's header at most (tag and length varints). */
#define WK_WIRE_FIELD_HEAD_MAX 15u

/** The inline outputs a TaskResult may carry so that every message the worker sends
 * with it fits in `max_message_bytes`: the smaller of `max_inline_output_bytes` and
 * max_message_bytes less WK_WIRE_RESULT_OVERHEAD_BYTES (0 when that is negative). */
size_t wk_wire_inline_output_limit(size_t max_inline_output_bytes, size_t max_message_bytes);

/** Appends a length-delimited field (tag `field`, wire type 2) holding `len` bytes. */
void wk_wire_append_bytes_field(wk_buf *out, uint32_t field, const void *data, size_t len);

/** Appends a varint field (wire type 0). Zero values are still written. */
void wk_wire_append_varint_field(wk_buf *out, uint32_t field, uint64_t v);

#endif

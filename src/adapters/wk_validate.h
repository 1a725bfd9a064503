/* wk_validate.h: decoding and validation of the gRPC requests (DESIGN.md §3).
 *
 * Pure functions: no I/O, no clock, no globals; bytes or decoded protobuf-c messages
 * in, a verdict and a message a person can act on out. The gRPC server calls
 * wk_validate_decode() on its completion-queue thread for every request, before the
 * sink sees it; fuzz targets call the same function.
 *
 * Every error message names the offending field first ("task_id must be ...",
 * "function.name must be ...", "task_ids[3] duplicates task_ids[0]") and says what
 * was expected and what arrived. Values from the request are echoed only as lengths,
 * byte values or a short sanitized excerpt. */
#ifndef WK_VALIDATE_H
#define WK_VALIDATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <protobuf-c/protobuf-c.h>

#include "adapters/wk_rpc_method.h"
#include "lib/wk_arena.h"
#include "grpc/health/v1/health.pb-c.h"
#include "worker/v1/worker.pb-c.h"

/* ---- limits ------------------------------------------------------------------- */

#define WK_VALIDATE_ERR_LEN 320u          /* a buffer this large holds every message */
#define WK_TASK_ID_MAX 128u               /* bytes */
#define WK_TTL_MS_MAX (UINT64_C(1) << 40) /* RequestTaskSlot ttl_ms */
#define WK_FUNCTION_NAME_MAX 128u
#define WK_PLUGIN_TYPE_MAX 32u /* function.type, result_handler.type */
#define WK_ENTRYPOINT_MAX 256u
#define WK_RETRY_ATTEMPTS_MAX 100u
#define WK_BACKOFF_MS_MAX UINT64_C(3600000) /* one hour */
#define WK_BACKOFF_MULTIPLIER_MAX 100.0
#define WK_LABELS_MAX 64u
#define WK_LABEL_BYTES_MAX 256u /* each key and each value */
#define WK_OPTIONS_MAX 64u      /* function.options, result_handler.options */
#define WK_CANCEL_REASON_MAX 1024u
#define WK_HEALTH_SERVICE_MAX 256u
#define WK_DEPLOY_EPOCH_MAX UINT64_C(999999999999999999) /* the code store's epochs */

/* Limits that come from configuration. */
typedef struct wk_validate_limits {
  uint64_t max_timeout_ms;  /* SubmitTask timeout_ms above this is invalid */
  uint32_t max_watch_tasks; /* WatchTasks task_ids count above this is invalid */
} wk_validate_limits;

/* ---- whole requests ----------------------------------------------------------- */

/** The protobuf-c descriptor of method m's request type; NULL for an unknown m. */
const ProtobufCMessageDescriptor *wk_validate_descriptor(wk_rpc_method m);

/** Decodes `len` bytes as method m's request and validates every field.
 * Returns the message (free it with protobuf_c_message_free_unpacked(msg, NULL)), or
 * NULL with a NUL-terminated reason in err (truncated to err_len): "request is not a
 * valid worker.v1.SubmitTaskRequest" for undecodable bytes, or the first invalid
 * field. Never reads past buf[len - 1]; buf may be NULL when len is 0. */
ProtobufCMessage *wk_validate_decode(wk_rpc_method m, const uint8_t *buf, size_t len,
                                     const wk_validate_limits *lim, char *err, size_t err_len);

/** A protobuf-c allocator taking every piece from `arena` and freeing none (the arena
 * frees them all at once): for wk_validate_decode_in. */
ProtobufCAllocator wk_validate_arena_allocator(wk_arena *arena);

/** wk_validate_decode with the message's memory from `alloc` (NULL: protobuf-c's
 * default, malloc): free the message with protobuf_c_message_free_unpacked(msg, alloc),
 * or, when `alloc` frees nothing itself (an arena), by releasing what backs it. */
ProtobufCMessage *wk_validate_decode_in(wk_rpc_method m, const uint8_t *buf, size_t len,
                                        const wk_validate_limits *lim, ProtobufCAllocator *alloc,
                                        char *err, size_t err_len);

/** Checks the string fields of an encoded message of type d (recursively through
 * sub-messages): each must be valid UTF-8 without NUL bytes. protobuf-c checks
 * neither, and its NUL-terminated strings would silently cut a value at a NUL. The
 * bytes must already have decoded as d; on false err names the field. */
bool wk_validate_wire_strings(const ProtobufCMessageDescriptor *d, const uint8_t *buf, size_t len,
                              char *err, size_t err_len);

/* ---- decoded requests --------------------------------------------------------- */
/* Each returns true when every field is valid, else false with a reason in err. */

bool wk_validate_request_task_slot(const Worker__V1__RequestTaskSlotRequest *req, char *err,
                                   size_t err_len);
bool wk_validate_submit_task(const Worker__V1__SubmitTaskRequest *req,
                             const wk_validate_limits *lim, char *err, size_t err_len);
bool wk_validate_get_task_result(const Worker__V1__GetTaskResultRequest *req, char *err,
                                 size_t err_len);
bool wk_validate_watch_tasks(const Worker__V1__WatchTasksRequest *req,
                             const wk_validate_limits *lim, char *err, size_t err_len);
bool wk_validate_cancel_task(const Worker__V1__CancelTaskRequest *req, char *err, size_t err_len);

#define WK_LIST_PAGE_DEFAULT 100u /* ListTasks.page_size 0 */
#define WK_LIST_PAGE_MAX 1000u
#define WK_LIST_STATES_MAX 16u

/** ListTasks: page_size at most WK_LIST_PAGE_MAX, page_token empty or well formed
 * (wk_validate_page_token), states known TaskStates (at most WK_LIST_STATES_MAX), labels
 * as a submission's. False with the reason in err otherwise. */
bool wk_validate_list_tasks(const Worker__V1__ListTasksRequest *req, char *err, size_t err_len);

/** Parses a ListTasks page token: "" (seq 0: from the newest) or "s" and a decimal
 * sequence number (1..19 digits, no leading zero). False when malformed. */
bool wk_validate_page_token(const char *token, uint64_t *seq);

/** GetTaskLogs: a valid task id; `call` only with one_call. */
bool wk_validate_get_task_logs(const Worker__V1__GetTaskLogsRequest *req, char *err,
                               size_t err_len);

/** DeployCode: function a valid function name, epoch 0..WK_DEPLOY_EPOCH_MAX, digest 64
 * lowercase hex. The files (paths, counts, sizes) are checked by the deploy handler,
 * after its gate, by wk_code_store_check_files. */
bool wk_validate_deploy_code(const Worker__V1__DeployCodeRequest *req, char *err, size_t err_len);
/** SetCurrentEpoch: a valid function name, epoch 1..WK_DEPLOY_EPOCH_MAX, digest empty or
 * 64 lowercase hex. */
bool wk_validate_set_current_epoch(const Worker__V1__SetCurrentEpochRequest *req, char *err,
                                   size_t err_len);
/** A sha256 as 64 lowercase hex characters (or, with empty_ok, ""); the message names
 * `field`. */
bool wk_validate_digest_hex(const char *field, const char *hex, bool empty_ok, char *err,
                            size_t err_len);

bool wk_validate_health(const Grpc__Health__V1__HealthCheckRequest *req, char *err, size_t err_len);

/* ---- fields ------------------------------------------------------------------- */

/** task_id rule: 1..128 bytes, each printable ASCII 0x21-0x7e. `field` names it in
 * the message ("task_id", "task_ids[2]"). */
bool wk_validate_task_id(const char *field, const char *id, char *err, size_t err_len);

#endif

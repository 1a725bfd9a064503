/* wk_types.h: the vocabulary shared by the cores and every adapter: error codes,
 * slot states, task states, phases and failure codes, with their names.
 *
 * Pure: no I/O, no clock. Every enum has a *_name() that returns a static string
 * and a *_valid() predicate for values that arrive from outside. */
#ifndef WK_TYPES_H
#define WK_TYPES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Errors returned by core entry points. Zero is success; every error is negative
 * so `if (err)` reads naturally. Mapped to gRPC status codes only at the edge. */
typedef enum wk_err {
  WK_OK = 0,
  WK_ERR_INVALID_ARGUMENT = -1, /* malformed input: nothing changed */
  WK_ERR_NO_SLOT = -2,          /* every slot is ALLOCATED or RUNNING */
  WK_ERR_UNAVAILABLE = -3,      /* worker not ready, or draining */
  WK_ERR_INVALID_SLOT = -4,     /* slot id names no slot, or another task's slot */
  WK_ERR_NOT_FOUND = -5,        /* unknown task id, or its result was purged */
  WK_ERR_SLOT_UNCERTAIN = -6,   /* the slot's lease lapsed or the slot was reclaimed */
  WK_ERR_CONFLICT = -7,         /* task id reused with a different request */
  WK_ERR_STALE = -8,            /* event for a task no longer in the phase it names: dropped */
  WK_ERR_PAUSED = -9,           /* admission paused (e.g. memory pressure): new tasks refused */
} wk_err;

/** Name of an error code ("NO_SLOT"); "UNKNOWN" for values outside the enum. */
const char *wk_err_name(wk_err err);

typedef enum wk_slot_state {
  WK_SLOT_FREE = 0,
  WK_SLOT_ALLOCATED = 1, /* reserved under a lease, task not yet activated */
  WK_SLOT_RUNNING = 2,   /* task activated; freed only at convergence */
} wk_slot_state;

const char *wk_slot_state_name(wk_slot_state s);

/* Task-visible state (the wire's TaskState). */
typedef enum wk_task_state {
  WK_TASK_PREPARING = 0,
  WK_TASK_RUNNING = 1,
  WK_TASK_SUCCEEDED = 2,
  WK_TASK_FAILED = 3,
  WK_TASK_CANCELLED = 4,
} wk_task_state;

const char *wk_task_state_name(wk_task_state s);
/** True for SUCCEEDED, FAILED and CANCELLED. */
bool wk_task_state_terminal(wk_task_state s);

/* Internal phase of a task. A task moves strictly forward through these. */
typedef enum wk_phase {
  WK_PHASE_PREPARING = 0, /* submitted; activation (epoch pin, IO scope) under way */
  WK_PHASE_BUILDER = 1,
  WK_PHASE_CALLS = 2,
  WK_PHASE_WRITER = 3,
  WK_PHASE_DONE = 4, /* converged */
} wk_phase;

const char *wk_phase_name(wk_phase p);

typedef enum wk_failure_code {
  WK_FAIL_NONE = 0,
  WK_FAIL_ACTIVATION_FAILED = 1,
  WK_FAIL_IO_SCOPE_FAILED = 2,
  WK_FAIL_SLOT_LOST = 3,
  WK_FAIL_BUILDER_NOT_FOUND = 4,
  WK_FAIL_BUILDER_FAILED = 5,
  WK_FAIL_CALL_FAILED = 6,
  WK_FAIL_PLUGIN_NOT_FOUND = 7,
  WK_FAIL_PLUGIN_FAILED = 8,
  WK_FAIL_TASK_TIMEOUT = 9,
  WK_FAIL_OWNER_LOST = 10,
  WK_FAIL_CANCELLED = 11,
  WK_FAIL_WORKER_SHUTDOWN = 12,
} wk_failure_code;

#define WK_FAIL_COUNT 13

const char *wk_failure_code_name(wk_failure_code c);
bool wk_failure_code_valid(int c);

typedef enum wk_call_failure_policy {
  WK_CALL_FAIL_FAST = 0,
  WK_CALL_CONTINUE = 1,
} wk_call_failure_policy;

/* Retry policy for calls: carried in the task context for the dispatcher. */
typedef struct wk_retry_policy {
  uint32_t max_attempts; /* 1 = no retry */
  int64_t initial_backoff_ms;
  int64_t max_backoff_ms;
  uint32_t backoff_multiplier_milli; /* 2000 = x2.0 */
  bool retry_on_timeout;
} wk_retry_policy;

/* Limits on identifiers. */
#define WK_TASK_ID_MAX 128u /* bytes, printable ASCII */

/** True when `id` of `len` bytes is a valid task id: 1..WK_TASK_ID_MAX printable
 * ASCII bytes (0x21..0x7e). */
bool wk_task_id_valid(const char *id, size_t len);

/* A slot id packs the slot's index (low 32 bits) and the generation the slot had
 * when it was allocated (high 32 bits, never 0). Zero means "no slot". */
static inline uint64_t wk_slot_id_make(uint32_t index, uint32_t generation) {
  return ((uint64_t)generation << 32) | index;
}
static inline uint32_t wk_slot_id_index(uint64_t slot_id) { return (uint32_t)slot_id; }
static inline uint32_t wk_slot_id_generation(uint64_t slot_id) { return (uint32_t)(slot_id >> 32); }

#endif

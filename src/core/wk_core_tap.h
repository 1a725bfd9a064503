/* wk_core_tap.h: WorkerCore's input boundary, seen from outside.
 *
 * Every entry point of the core that can change its state (wk_core_set_*,
 * wk_core_handle_*, wk_core_purge_expired_results) describes its call as one
 * wk_core_input before it runs, and its answer as one wk_core_output after. A tap
 * installed with wk_core_set_tap sees both: the incident journal (adapters/wk_journal.h)
 * records the inputs, so that wk_core_apply_input can feed them to a fresh core later
 * and, the core being deterministic, reach the same decisions. Read-only entry points
 * (get_result, the timer scans, views) change nothing and are not inputs.
 *
 * Pure: the core only calls the tap's functions; what they do is the adapter's. */
#ifndef WK_CORE_TAP_H
#define WK_CORE_TAP_H

#include "core/wk_core.h"

typedef enum wk_core_input_kind {
  WK_INPUT_SET_READY = 1,
  WK_INPUT_SET_DRAINING = 2,
  WK_INPUT_SET_PAUSED = 3,
  WK_INPUT_REQUEST_SLOT = 4,
  WK_INPUT_SUBMIT = 5,
  WK_INPUT_ACTIVATION_PREPARED = 6,
  WK_INPUT_ACTIVATION_FAILED = 7,
  WK_INPUT_PHASE_FINISHED = 8,
  WK_INPUT_CALL_PROGRESS = 9,
  WK_INPUT_TASK_TIMED_OUT = 10,
  WK_INPUT_ABORT = 11,
  WK_INPUT_WATCH_ATTACHED = 12,
  WK_INPUT_WATCH_DETACHED = 13,
  WK_INPUT_WATCH_DISCONNECTED = 14,
  WK_INPUT_WATCH_GRACE_EXPIRED = 15,
  WK_INPUT_SLOT_LEASE_EXPIRED = 16,
  WK_INPUT_PURGE = 17,
} wk_core_input_kind;

#define WK_INPUT_KIND_MAX 17

/** The entry point's name without its prefix ("request_slot"); "unknown" outside the enum. */
const char *wk_core_input_kind_name(wk_core_input_kind k);

/* One call into the core. Pointers are the caller's and valid during the tap call
 * only. Fields an input kind does not use are zero. */
typedef struct wk_core_input {
  wk_core_input_kind kind;
  int64_t now_ms; /* 0 for inputs without one (set_*, call_progress) */
  const char *task_id;
  size_t task_id_len;
  bool flag;                       /* set_ready, set_draining */
  int64_t ttl_ms;                  /* request_slot */
  uint64_t slot_id;                /* activation_prepared, slot_lease_expired */
  uint64_t code_epoch;             /* activation_prepared */
  wk_failure_code code;            /* activation_failed, abort */
  const char *message;             /* activation_failed, abort, set_paused (NULL or text) */
  wk_phase phase;                  /* phase_finished */
  const wk_phase_outcome *outcome; /* phase_finished */
  const wk_submit_request *submit; /* submit (its task_id is the input's too) */
  const wk_call_stats *stats;      /* call_progress */
} wk_core_input;

/* The core's answer to one input: err, and the result struct of the entry point
 * (one of slot, submit, transition; none for the err-only and set_* inputs). */
typedef struct wk_core_output {
  wk_err err;
  const wk_slot_result *slot;
  const wk_submit_result *submit;
  const wk_transition_result *transition;
  size_t purged; /* purge */
} wk_core_output;

typedef struct wk_core_tap {
  /** Called before the core handles `in` (NULL: inputs not wanted). */
  void (*input)(void *ctx, const wk_core_input *in);
  /** Called after, with the answer (NULL: outputs not wanted). */
  void (*output)(void *ctx, const wk_core_input *in, const wk_core_output *out);
  void *ctx;
} wk_core_tap;

/** Installs `tap` (copied), or removes it (NULL). With no tap an entry point costs one
 * predictable branch more than without the boundary. */
void wk_core_set_tap(wk_core *core, const wk_core_tap *tap);

/* Where wk_core_apply_input puts the answer; out's pointers point into it. */
typedef struct wk_core_applied {
  wk_core_output out;
  wk_slot_result slot;
  wk_submit_result submit;
  wk_transition_result transition;
} wk_core_applied;

/** Feeds `in` to `core` through the matching public entry point (so an installed tap
 * sees it too), with `adapter_ctx` as a submit's context, and fills `res`. The
 * pointers in res stay valid until the next state-changing call. An input kind outside
 * the enum, or one missing its submit/outcome/stats, is INVALID_ARGUMENT and changes
 * nothing. */
void wk_core_apply_input(wk_core *core, const wk_core_input *in, void *adapter_ctx,
                         wk_core_applied *res);

/** The configuration the core was created with (its allocator included). */
const wk_core_config *wk_core_get_config(const wk_core *core);

#endif

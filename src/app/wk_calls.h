/* wk_calls.h: the calls phase, driven by DispatcherCore (src/core/wk_dispatcher.h).
 *
 * For each task in its calls phase it registers the calls with the dispatcher (a list
 * at once; a stream in batches while the dispatcher's queue for the task is low:
 * backpressure), turns the dispatcher's actions into executor work (SEND → submit,
 * CANCEL → cancel, SUBCALLS_COMPLETE → answer the waiting parent), feeds executor
 * outcomes back (call_finished, add_subcalls), and records each call's final output
 * by index (CALL_DONE), so outputs land in call order whatever the completion order.
 * When the dispatcher says TASK_DONE it reports through `on_done`.
 * Runs on the actor thread; owns the dispatcher, the attempts and subcall groups. */
#ifndef WK_CALLS_H
#define WK_CALLS_H

#include "adapters/wk_exec_adapter.h"
#include "app/wk_task_code.h"
#include "app/wk_task_runtime.h"
#include "core/wk_dispatcher.h"

typedef struct wk_calls wk_calls;

typedef struct wk_calls_config {
  wk_disp_config disp;
  int64_t escalation_budget_ms; /* cancel grace + stack wait: the pool gets its deadline this much
                                   before the dispatcher, so a wedged call's stack is captured */
  uint32_t stream_low_water;    /* refill a stream when fewer calls than this are queued */
  uint32_t stream_batch;        /* calls added per refill */
  wk_task_code_env code;        /* where subcall targets resolve, and the AuditGate */
  /* A task without a writer whose outputs (as TaskResult records, captured stdout and
   * stderr included) pass this many bytes ends its calls phase at that call (its other
   * calls are cancelled, rt->calls.over_limit is set): outputs are bounded as they
   * arrive, never after every call ran. */
  size_t max_inline_output_bytes;
  /* Every answered attempt of a top-level call, with its captured stdout and stderr
   * (views valid during the call only); NULL = none. */
  void (*on_output)(void *ud, const char *task_id, uint32_t index, uint32_t attempt,
                    wk_frame_bytes out, wk_frame_bytes err);
  void *on_output_ud;
} wk_calls_config;

/* Called when a task's calls are over (rt->calls.ok says how). */
typedef void (*wk_calls_done_fn)(void *ud, wk_task_rt *rt);

/** Creates the driver over `exec` (not owned). Returns NULL with a reason in err. */
wk_calls *wk_calls_create(const wk_calls_config *cfg, const wk_exec_adapter *exec,
                          wk_calls_done_fn done, void *ud, char *err, size_t err_len);
void wk_calls_destroy(wk_calls *c);

/** Sets the dispatcher's global admission (executor capacity). */
void wk_calls_set_capacity(wk_calls *c, uint32_t calls, int64_t now_ms);

/** Starts the calls of `rt` (its call list or stream is set up) under the task's
 * deadline and call policies as the core holds them (`task`, read just before). */
void wk_calls_start(wk_calls *c, wk_task_rt *rt, const wk_task_view *task, int64_t now_ms);

/** Cancels every call of `rt` still queued or running and forgets the task. */
void wk_calls_stop(wk_calls *c, wk_task_rt *rt, int64_t now_ms);

/** Executor outcome of an attempt (the adapter's on_result). Returns the attempt's task,
 * whose rt->calls.stats now count it (the runtime outlives the call: the core holds it). */
wk_task_rt *wk_calls_on_result(wk_calls *c, void *call_ctx, const wk_call_outcome *o,
                               int64_t now_ms);

/** A running attempt asks for child calls (the adapter's on_subcalls). The children
 * run the function the request names (wk_task_code_target: the task's pinned epoch of
 * it), or the parent's own function, epoch and entry point when it names none. A
 * target that cannot run fails every child at once with a typed error
 * (FunctionNotFound, FunctionDenied, SubcallRefused) and runs no code. Returns the
 * attempt's task, as wk_calls_on_result. */
wk_task_rt *wk_calls_on_subcalls(wk_calls *c, void *call_ctx, const wk_frame_subcalls *req,
                                 int64_t now_ms);

/** The task of a running attempt (the adapter's call_ctx, e.g. in on_scratch). */
wk_task_rt *wk_calls_task_of(void *call_ctx);

/** Answers a running attempt's SCRATCH request (`error` NULL or "" when the task's
 * scratch directory exists). Nothing is sent for an attempt already answered. */
void wk_calls_answer_scratch(wk_calls *c, void *call_ctx, uint64_t request_id, const char *error);

/** Timers: backoffs over, attempts past their deadline. */
void wk_calls_tick(wk_calls *c, int64_t now_ms);

/** The dispatcher's next timer (INT64_MAX when none). */
int64_t wk_calls_next_deadline(const wk_calls *c);

/** Dispatcher counters (for logs, tests, benchmarks). */
wk_disp_stats wk_calls_stats(const wk_calls *c);

/** Whether the driver is walking its actions: an adapter callback arriving now came
 * from inside submit (an outcome delivered before submit returned). The caller of the
 * walk is still running: it must not start another turn (no new `now`, no phase
 * steps); wk_calls_on_result takes such an outcome and finishes it after the walk. */
bool wk_calls_busy(const wk_calls *c);

#endif

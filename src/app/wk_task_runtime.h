/* wk_task_runtime.h: the adapter-side record of one task (the seed's taskRuntime).
 *
 * It holds what the adapter needs to run the task's phases: a copy of the request
 * fields, the pinned epoch and code directory, the scratch directory (the task's IO
 * scope), the call list and the calls' outputs. It holds no phase or slot truth, nor
 * the request's deadline and call policies: those are WorkerCore's (wk_core_live_task),
 * and whether the task converged is whether the core still holds the runtime. Owned by the orchestrator through a reference count: one
 * reference while the core holds it as adapter_ctx (until CONVERGE), one per job in
 * flight (activation, a deferred phase step).
 *
 * The record is made of parts, each written by one file only (others only read it):
 *   req     wk_task_runtime.c (wk_task_rt_create), read-only afterwards
 *   act     the activation job (wk_phase_jobs.c)
 *   code    the code targets of its calls and subcalls (wk_task_code.c)
 *   build   the builder and calls steps (wk_phase_jobs.c)
 *   calls   the calls driver (wk_calls.c)
 *   writer  the writer job (wk_phase_jobs.c)
 *   sem     the phase semaphores (wk_phase_sem.c)
 *   scope   the IO scope bound (wk_io_scope.c)
 *   progress  the PROGRESS events' rate limit (wk_orch_progress.c)
 * The final wk_task_rt_unref frees what the parts hold. */
#ifndef WK_TASK_RUNTIME_H
#define WK_TASK_RUNTIME_H

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "adapters/wk_exec_adapter.h"
#include "adapters/wk_validate.h"
#include "core/wk_core.h"
#include "lib/wk_buf.h"
#include "plugins/wk_builders.h"
#include "plugins/wk_writers.h"
#include "worker/v1/worker.pb-c.h"

typedef struct wk_task_rt wk_task_rt;

#define WK_TASK_RT_TRACEPARENT_MAX 63u /* bytes of a W3C traceparent kept (55 for version 00) */
#define WK_TASK_RT_MESSAGE_MAX 511u    /* bytes of a failure message a part keeps */
#define WK_TASK_RT_ARGS_INLINE 64u     /* args this long are kept in the record itself */

/* The final output of one top-level call, by index (inline outputs: no writer). */
typedef struct wk_rt_call {
  wk_buf encoded; /* this call's CallOutput as a TaskResult field-7 record */
} wk_rt_call;

struct wk_output_spool;

typedef struct wk_attempt wk_attempt;
typedef struct wk_subcall_group wk_subcall_group;

/* The request's fields the phases use, copied at create (the core keeps the rest). */
typedef struct wk_rt_request {
  char task_id[WK_TASK_ID_MAX + 1];
  char function[WK_FUNCTION_NAME_MAX + 1];
  char entrypoint[WK_ENTRYPOINT_MAX + 1];
  char builder[WK_PLUGIN_TYPE_MAX + 1];
  char result_handler[WK_PLUGIN_TYPE_MAX + 1]; /* "" = none (and for shadow traffic) */
  wk_writer_option *handler_options;           /* ResultHandler.options, copied (keys and values) */
  size_t n_handler_options;
  wk_option *builder_options; /* FunctionCallConfig.options, copied (keys and values) */
  size_t n_builder_options;
  char traceparent[WK_TASK_RT_TRACEPARENT_MAX + 1];
  uint8_t *args; /* args_inline, or owned when longer */
  size_t args_len;
  uint8_t args_inline[WK_TASK_RT_ARGS_INLINE];
  bool args_json;
  uint64_t requested_epoch;
  bool retry_on_executor_lost;
  uint32_t max_attempts; /* the retry policy's, at least 1 (the core's own copy decides) */
  int64_t call_timeout_ms;
} wk_rt_request;

/* What activation made: the pinned epoch, the code and scratch directories. */
typedef struct wk_rt_activation {
  uint64_t epoch;
  char code_dir[PATH_MAX];
  char scratch_dir[PATH_MAX];    /* named at activation, made on first use (SCRATCH) */
  bool scratch_created;          /* made: removed with the runtime */
  bool scratch_failed;           /* could not be made (error says why): IO_SCOPE_FAILED */
  struct wk_output_spool *spool; /* a task with a writer: its outputs file (wk_output_spool.h),
                                    "<scratch_dir>.outputs"; written by the calls driver */
  int rc;                        /* 0, or -1 with code and error */
  wk_failure_code code;
  char error[WK_TASK_RT_MESSAGE_MAX + 1];
} wk_rt_activation;

/* The builder job on the threadpool: it writes these fields only, and only while it is
 * queued (build.running); the loop reads them in the job's done callback, never before.
 * Times are monotonic ms on the loop's clock (uv_hrtime), read on the worker thread. */
typedef struct wk_rt_build_job {
  int rc; /* 0, or -1 with error */
  wk_call_list list;
  wk_stream_state stream;
  int64_t started_ms, finished_ms;
  char error[WK_TASK_RT_MESSAGE_MAX + 1];
} wk_rt_build_job;

#define WK_TASK_CODE_TARGETS_MAX 64u /* distinct functions one task's calls may run */

/* One function a task runs, at the epoch pinned for the task. */
typedef struct wk_rt_target {
  char function[WK_FUNCTION_NAME_MAX + 1];
  uint64_t epoch;
  char *code_dir; /* owned, or (borrowed) the runtime's act.code_dir */
  bool code_dir_owned;
} wk_rt_target;

/* The task's targets: [0] its own function (from activation), then subcall targets. */
typedef struct wk_rt_code {
  wk_rt_target *items; /* &first while there is one (most tasks), else owned */
  uint32_t count, cap;
  bool unpinned; /* the task is terminal: its pins are gone, no target is added */
  wk_rt_target first;
} wk_rt_code;

/* What the builder made, and whether the calls phase was reported. */
typedef struct wk_rt_build {
  bool running; /* the builder job is on the threadpool: `job` is its */
  wk_rt_build_job job;
  const struct wk_builder *impl;
  wk_call_list list; /* list builders */
  bool streaming;    /* stream builders: args made per index from `stream` */
  wk_stream_state stream;
  uint64_t calls_total; /* calls the builder makes */
  bool calls_reported;  /* WK_PHASE_CALLS went to the core */
} wk_rt_build;

/* Retried attempts listed in a result (TaskResult.retries) at most. */
#define WK_RT_RETRIES_LISTED 8u

/* One retried attempt: which call, which attempt, and why (cut). */
typedef struct wk_rt_retry {
  uint32_t index, attempt;
  char type[64];
  char message[101];
} wk_rt_retry;

/* The calls phase as wk_calls.c drives it. */
typedef struct wk_rt_calls {
  uint32_t disp_task;  /* 0 = not registered */
  uint64_t added;      /* calls handed to the dispatcher so far */
  wk_rt_call *outputs; /* calls_total entries; NULL with a writer (act.spool has them);
                               &output_one for a task of one call */
  wk_rt_call output_one;
  wk_attempt *attempts;     /* attempts sent and not yet over */
  wk_subcall_group *groups; /* subcall batches of this task's calls */
  uint32_t done, failed;
  bool ok;               /* TASK_DONE's verdict */
  bool stopped;          /* the phase ended before TASK_DONE: over_limit or spool_error */
  bool over_limit;       /* the inline outputs passed max_inline_output_bytes */
  uint64_t output_bytes; /* encoded outputs kept (inline) or spooled so far */
  char spool_error[WK_TASK_RT_MESSAGE_MAX + 1]; /* the spool could not be written */
  wk_call_stats stats;
  char first_failure[WK_TASK_RT_MESSAGE_MAX + 1];
  wk_rt_retry retries[WK_RT_RETRIES_LISTED]; /* the first retried attempts */
  uint32_t n_retries;
} wk_rt_calls;

/* The writer phase on the threadpool. */
typedef struct wk_rt_writer {
  const struct wk_writer *impl;
  wk_buf results;
  int rc;
  char error[WK_TASK_RT_MESSAGE_MAX + 1];
} wk_rt_writer;

/* The phase semaphores the task holds or waits for. */
typedef struct wk_rt_sem {
  uint8_t held;            /* bit per phase semaphore */
  uint8_t held_by_job;     /* of held, those a threadpool job holds until its done callback */
  uint8_t waiting;         /* the semaphore whose wait queue rt is on (one bit at most) */
  struct wk_task_rt *next; /* in a phase semaphore's wait queue */
} wk_rt_sem;

/* The IO scope bound: the runtime sits on the orchestrator's list while in its calls phase. */
typedef struct wk_rt_scope {
  wk_task_rt *prev, *next;
  bool in_list;
  bool measuring; /* a size measurement is on the threadpool */
  bool exceeded;
  uint64_t bytes; /* last measured size of the scratch directory */
} wk_rt_scope;

/* PROGRESS events of the task: at most one per interval, on the loop's clock. */
typedef struct wk_rt_progress {
  int64_t last_sent_ms;    /* 0 = none sent yet */
  bool pending;            /* a change waits for last_sent_ms + the interval */
  struct wk_task_rt *next; /* in the orchestrator's pending list, holding a reference */
} wk_rt_progress;

struct wk_freelist;

struct wk_task_rt {
  uv_loop_t *loop;          /* where the scratch directory is removed from */
  struct wk_freelist *pool; /* the record goes back there at the last unref (NULL: freed) */
  uint32_t refs;

  wk_rt_request req;
  wk_rt_activation act;
  wk_rt_code code;
  wk_rt_build build;
  wk_rt_calls calls;
  wk_rt_writer writer;
  wk_rt_sem sem;
  wk_rt_scope scope;
  wk_rt_progress progress;
};

/** Creates a runtime from a validated SubmitTaskRequest (copies what the phases use;
 * the slot, deadline and call policies stay the core's: wk_core_live_task); refs = 1.
 * `traceparent` may be NULL. A shadow request gets no result handler (it never
 * reaches a writer). The scratch directory is removed on `loop`'s threadpool. The
 * record comes from `pool` (a wk_freelist of sizeof(wk_task_rt) objects, used on the
 * loop's thread; NULL: malloc) and goes back to it at the last unref: the pool must
 * outlive every runtime made from it. */
wk_task_rt *wk_task_rt_create(uv_loop_t *loop, struct wk_freelist *pool,
                              const Worker__V1__SubmitTaskRequest *req, const char *traceparent,
                              bool shadow);

/** A view of the function's builder options (FunctionCallConfig.options) as borrowed
 * wk_options in `view`: returns how many (at most WK_OPTIONS_MAX, which request
 * validation enforces). */
size_t wk_task_rt_builder_options(const Worker__V1__FunctionCallConfig *fn,
                                  wk_option view[WK_OPTIONS_MAX]);

/** Takes / drops a reference; the last drop frees the runtime (removing its
 * scratch directory). */
void wk_task_rt_ref(wk_task_rt *rt);
void wk_task_rt_unref(wk_task_rt *rt);

/** Encodes a call outcome as a TaskResult field-7 record (CallOutput `index`) into
 * `out`; `failure` (may be NULL) gets "call N failed: Type: message" on an error. */
void wk_task_rt_encode_output(uint32_t index, const wk_call_outcome *o, wk_buf *out, char *failure,
                              size_t failure_len);

/** Appends the task's listed retries as TaskResult field-10 (CallRetry) records to
 * `out` (writers skip them; they reach the result with the outputs). */
void wk_task_rt_encode_retries(const wk_task_rt *rt, wk_buf *out);

/** Concatenates the calls' encoded inline outputs in call order into `out` (nothing
 * for a task with a writer: its outputs are in its spool). */
void wk_task_rt_collect_outputs(const wk_task_rt *rt, wk_buf *out);

/** The calls' encoded inline outputs in call order, as wk_task_rt_collect_outputs
 * gives them: a view of the task's own buffer when one call has output (no copy), else
 * collected into `scratch`. Valid while rt and scratch are unchanged. */
wk_bytes wk_task_rt_outputs_view(const wk_task_rt *rt, wk_buf *scratch);

#endif

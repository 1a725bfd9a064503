/* wk_task_runtime.h: the adapter-side record of one task (the seed's taskRuntime).
 *
 * It holds what the adapter needs to run the task's phases: a copy of the request
 * fields, the pinned epoch and code directory, the scratch directory (the task's IO
 * scope), the call list and the calls' outputs. It holds no phase or slot truth:
 * that is WorkerCore's. Owned by the orchestrator through a reference count: one
 * reference while the core holds it as adapter_ctx (until CONVERGE), one per job in
 * flight (activation, a deferred phase step). */
#ifndef WK_TASK_RUNTIME_H
#define WK_TASK_RUNTIME_H

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "adapters/wk_exec_adapter.h"
#include "core/wk_core.h"
#include "lib/wk_buf.h"
#include "plugins/wk_builders.h"
#include "plugins/wk_writers.h"
#include "worker/v1/worker.pb-c.h"

typedef struct wk_orch wk_orch;
typedef struct wk_task_rt wk_task_rt;

/* The final output of one top-level call, by index. */
typedef struct wk_rt_call {
  bool done;
  bool failed;
  wk_buf encoded; /* this call's CallOutput as a TaskResult field-7 record */
} wk_rt_call;

typedef struct wk_attempt wk_attempt;
typedef struct wk_subcall_group wk_subcall_group;

struct wk_task_rt {
  wk_orch *orch;
  uint32_t refs;
  bool converged; /* the core handed the context back: no more core events */
  uint8_t sems_held; /* bit per phase semaphore (wk_orchestrator.c) */
  struct wk_task_rt *sem_next; /* in a phase semaphore's wait queue */

  char task_id[WK_TASK_ID_MAX + 1];
  char function[129];
  char entrypoint[257];
  char builder[33];
  char result_handler[33];
  wk_writer_option *handler_options; /* ResultHandler.options, copied (keys and values) */
  size_t n_handler_options;
  uv_work_t writer_job;              /* the writer phase on the threadpool */
  const struct wk_writer *writer;
  wk_buf writer_outputs, writer_results;
  int writer_rc;
  char writer_error[512];
  char traceparent[64];
  uint8_t *args;
  size_t args_len;
  bool args_json;
  uint64_t slot_id;
  uint64_t requested_epoch;
  wk_call_failure_policy failure_policy;
  uint32_t max_failed_calls;
  wk_retry_policy retry;
  bool retry_on_executor_lost;
  int64_t call_timeout_ms;
  int64_t deadline_ms; /* monotonic */

  /* activation (filled by the activation job) */
  uv_work_t activation;
  uint64_t epoch;
  char code_dir[PATH_MAX];
  char scratch_dir[PATH_MAX];
  bool scratch_created;
  int activation_rc;
  wk_failure_code activation_code;
  char activation_error[512];

  /* calls (driven by wk_calls.c) */
  const struct wk_builder *builder_impl;
  wk_call_list calls;       /* list builders */
  bool streaming;           /* stream builders: args made per index from `stream` */
  wk_stream_state stream;
  uint64_t calls_total;     /* calls the builder makes */
  uint64_t calls_added;     /* handed to the dispatcher so far */
  uint32_t disp_task;       /* 0 = not registered */
  wk_rt_call *rt_calls;     /* calls_total entries */
  wk_attempt *attempts;     /* attempts sent and not yet over */
  wk_subcall_group *groups; /* subcall batches of this task's calls */
  uint32_t calls_done, calls_failed;
  bool calls_ok;            /* TASK_DONE's verdict */
  bool calls_reported;
  wk_call_stats stats;
  char first_failure[512];
  /* IO scope bound: the runtime sits on the orchestrator's list while in its calls phase */
  wk_task_rt *scope_prev, *scope_next;
  bool in_scope_list;
  bool scope_measuring;      /* a size measurement is on the threadpool */
  bool scope_exceeded;
  uint64_t scope_bytes;      /* last measured size of the scratch directory */
  uv_work_t scope_job;
};

/** Creates a runtime from a validated SubmitTaskRequest (copies what it needs);
 * refs = 1. `traceparent` may be NULL. */
wk_task_rt *wk_task_rt_create(wk_orch *orch, const Worker__V1__SubmitTaskRequest *req,
                              const char *traceparent, int64_t now_ms,
                              int64_t default_timeout_ms);

/** Takes / drops a reference; the last drop frees the runtime (removing its
 * scratch directory). */
void wk_task_rt_ref(wk_task_rt *rt);
void wk_task_rt_unref(wk_task_rt *rt);

/** Activation, run on a threadpool thread: checks the AuditGate (allow/deny lists),
 * resolves and pins the epoch in `code_root`, creates the scratch directory under
 * `scratch_root`. Sets activation_rc 0, or -1 with activation_code and
 * activation_error. */
void wk_task_rt_activate(wk_task_rt *rt, const char *code_root, const char *scratch_root,
                         const char *audit_allow, const char *audit_deny);

/** Encodes a call outcome as a TaskResult field-7 record (CallOutput `index`) into
 * `out`; `failure` (may be NULL) gets "call N failed: Type: message" on an error. */
void wk_task_rt_encode_output(uint32_t index, const wk_call_outcome *o, wk_buf *out, char *failure,
                              size_t failure_len);

/** Concatenates the calls' encoded outputs in call order into `out`. */
void wk_task_rt_collect_outputs(const wk_task_rt *rt, wk_buf *out);

#endif

/* wk_exec_adapter.h: the executor surface the orchestrator depends on (the seed's
 * ExecutorAdapter): submit a call, cancel it, get exactly one outcome per call that
 * was not cancelled. The production implementation is the executor pool
 * (wk_executor_pool.h); tests plug in a fake. */
#ifndef WK_EXEC_ADAPTER_H
#define WK_EXEC_ADAPTER_H

#include <stdbool.h>
#include <stdint.h>

#include "adapters/wk_frame.h"

/* What to run; the pool copies everything it needs before wk_pool_submit returns. */
typedef struct wk_call_spec {
  const char *task_id;
  const char *function;
  uint64_t epoch;
  const char *code_dir;
  const char *entrypoint;
  wk_frame_content content_type;
  uint32_t call_index;
  uint32_t deadline_ms; /* relative; 0 = none */
  bool again;           /* given back unstarted before (NOT_STARTED): first in line */
  const char *scratch_dir;
  const char *traceparent;
  wk_frame_bytes args;
} wk_call_spec;

typedef enum wk_call_status {
  WK_CALL_OK = 0,
  WK_CALL_ERROR = 1,         /* the function raised */
  WK_CALL_RETRYABLE = 2,     /* the function raised worker.Retryable */
  WK_CALL_EXECUTOR_LOST = 3, /* the executor died or broke the protocol mid-call */
  WK_CALL_TIMEOUT = 4,       /* past its deadline: cancelled, then killed; traceback = its stack */
  WK_CALL_NOT_STARTED = 5,   /* given back before it started (its executor died or was busy
                                with a long call): not an end, the caller sends it again */
} wk_call_status;

/* A finished call. Views are valid only during the callback. */
typedef struct wk_call_outcome {
  wk_call_status status;
  wk_frame_content content_type;
  wk_frame_bytes output;
  wk_frame_bytes error_type, error_message, traceback;
  wk_frame_bytes stdout_bytes, stderr_bytes;
  uint64_t cpu_us;
  uint64_t bytes_in; /* args bytes sent */
} wk_call_outcome;

/* What the adapter reports, on the loop thread. */
typedef struct wk_exec_callbacks {
  /* Once per call that was not cancelled. */
  void (*on_result)(void *ud, void *call_ctx, const wk_call_outcome *outcome);
  /* A running call asks for child calls (ctx.call / ctx.map). `req` and its views are
   * valid during the callback only; answer with answer_subcalls (the parent waits). */
  void (*on_subcalls)(void *ud, void *call_ctx, const wk_frame_subcalls *req);
  /* A running call's first use of ctx.scratch_dir: the task's scratch directory is to
   * exist; answer with answer_scratch (the call waits). NULL: answered "unavailable". */
  void (*on_scratch)(void *ud, void *call_ctx, uint64_t request_id);
  void *ud;
} wk_exec_callbacks;

typedef struct wk_exec_adapter {
  void *impl;
  /* Queues a call; returns a handle valid until its outcome is delivered or it is
   * cancelled. May deliver the outcome before returning (then returns NULL). */
  void *(*submit)(void *impl, const wk_call_spec *spec, void *call_ctx);
  /* Cancels a call: no outcome will be delivered for it. */
  void (*cancel)(void *impl, void *handle);
  /* Answers a parent's SUBCALLS request with its children's outcomes, in order. */
  void (*answer_subcalls)(void *impl, void *handle, uint64_t request_id,
                          const wk_frame_child *children, uint32_t count);
  /* Answers a SCRATCH request: `error` NULL or "" when the directory exists. */
  void (*answer_scratch)(void *impl, void *handle, uint64_t request_id, const char *error);
} wk_exec_adapter;

#endif

/* wk_executor_pool.h: the pool of Python executor processes.
 *
 * The pool listens on a Unix-domain socket in a private 0700 directory, spawns its
 * executors (python3 worker_executor.py --socket PATH) with a scrubbed environment,
 * and talks to each over its connection with the frames of adapters/wk_frame.h.
 * Calls wait in one FIFO; an idle executor takes the next (one call in flight per
 * executor). A lost executor (exit, broken connection, malformed frame) fails its
 * call with EXECUTOR_LOST and is replaced. A cancelled call still running after
 * `cancel_grace_ms` gets its executor killed and replaced, so a stuck function can
 * never wedge the pool.
 *
 * Runs on one libuv loop; every function must be called on that loop's thread.
 * The pool owns its processes, connections and queued calls. */
#ifndef WK_EXECUTOR_POOL_H
#define WK_EXECUTOR_POOL_H

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "adapters/wk_frame.h"

typedef struct wk_pool wk_pool;
typedef struct wk_pool_call wk_pool_call;

typedef struct wk_pool_config {
  const char *python;          /* interpreter to run executors with */
  const char *executor_script; /* path of worker_executor.py */
  const char *python_path;     /* PYTHONPATH for executors (holds the `worker` module) */
  uint32_t executors;          /* processes kept running */
  uint32_t max_frame;          /* bytes; larger frames are a protocol error */
  int64_t cancel_grace_ms;     /* a cancelled call still running after this: kill */
  int64_t shutdown_grace_ms;   /* SHUTDOWN, then SIGKILL after this */
} wk_pool_config;

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
  const char *scratch_dir;
  const char *traceparent;
  wk_frame_bytes args;
} wk_call_spec;

typedef enum wk_call_status {
  WK_CALL_OK = 0,
  WK_CALL_ERROR = 1,         /* the function raised */
  WK_CALL_RETRYABLE = 2,     /* the function raised worker.Retryable */
  WK_CALL_EXECUTOR_LOST = 3, /* the executor died or broke the protocol mid-call */
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

/* Called on the loop thread once per call that was not cancelled. */
typedef void (*wk_pool_result_cb)(void *ud, void *call_ctx, const wk_call_outcome *outcome);

/** Creates the socket directory, listens, and spawns the executors. Returns NULL with
 * a reason in `err` (e.g. the interpreter does not exist). */
wk_pool *wk_pool_start(uv_loop_t *loop, const wk_pool_config *cfg, wk_pool_result_cb cb,
                       void *ud, char *err, size_t err_len);

/** Queues a call; `call_ctx` comes back in the result callback. Returns a handle valid
 * until the callback runs or wk_pool_cancel is called with it. */
wk_pool_call *wk_pool_submit(wk_pool *pool, const wk_call_spec *spec, void *call_ctx);

/** Cancels a call: a queued one is dropped; a running one is told to stop (CANCEL)
 * and its executor is killed if it is still busy after the grace. The callback is not
 * called for a cancelled call. */
void wk_pool_cancel(wk_pool *pool, wk_pool_call *call);

/** Executors connected and ready (for health and tests). */
uint32_t wk_pool_ready_executors(const wk_pool *pool);
/** Executors started since the pool began, replacements included. */
uint64_t wk_pool_spawned_total(const wk_pool *pool);

/** Stops every executor (SHUTDOWN, SIGKILL after the grace), closes the socket and
 * removes its directory; `done` runs on the loop when everything is closed, after
 * which the pool is freed. Queued calls are dropped without callbacks. */
void wk_pool_stop(wk_pool *pool, void (*done)(void *arg), void *arg);

#endif

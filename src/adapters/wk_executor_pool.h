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

#include "adapters/wk_exec_adapter.h"
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

/** Creates the socket directory, listens, and spawns the executors. Returns NULL with
 * a reason in `err` (e.g. the interpreter does not exist). */
wk_pool *wk_pool_start(uv_loop_t *loop, const wk_pool_config *cfg, wk_exec_result_cb cb,
                       void *ud, char *err, size_t err_len);

/** Queues a call; `call_ctx` comes back in the result callback. Returns a handle valid
 * until the callback runs or wk_pool_cancel is called with it. */
wk_pool_call *wk_pool_submit(wk_pool *pool, const wk_call_spec *spec, void *call_ctx);

/** Cancels a call: a queued one is dropped; a running one is told to stop (CANCEL)
 * and its executor is killed if it is still busy after the grace. The callback is not
 * called for a cancelled call. */
void wk_pool_cancel(wk_pool *pool, wk_pool_call *call);

/** The pool as the orchestrator's executor adapter. */
wk_exec_adapter wk_pool_adapter(wk_pool *pool);

/** Executors connected and ready (for health and tests). */
uint32_t wk_pool_ready_executors(const wk_pool *pool);
/** Executors started since the pool began, replacements included. */
uint64_t wk_pool_spawned_total(const wk_pool *pool);

/** Stops every executor (SHUTDOWN, SIGKILL after the grace), closes the socket and
 * removes its directory; `done` runs on the loop when everything is closed, after
 * which the pool is freed. Queued calls are dropped without callbacks. */
void wk_pool_stop(wk_pool *pool, void (*done)(void *arg), void *arg);

#endif

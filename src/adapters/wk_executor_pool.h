/* wk_executor_pool.h: the pool of Python executor processes.
 *
 * The pool spawns executors (python3 worker_executor.py --channel-fd 3) with a scrubbed
 * environment and resource limits. Each executor's channel is one end of a socket pair
 * the pool created for it alone and handed over at spawn: the pool listens on no socket,
 * so no other process can claim an executor's place (HELLO's pid is only checked). Each executor runs the calls sent to it one at a time, but up to
 * `pipeline_depth` calls are in flight on its connection, and frames are written in
 * batches (once per loop turn; at once for an executor with nothing to run), so a no-op
 * call costs microseconds. The depth adapts to the executor's
 * measured time per call: about 2 ms of work ahead, so slow calls go one at a time and
 * wait in the DispatcherCore (fair across tasks) rather than behind each other.
 * wk_pool_capacity() is the sum, for the dispatcher's admission limit. A call waiting on subcalls does not
 * count against its executor's depth: the executor runs further calls nested while
 * it waits, which keeps subcalls deadlock-free.
 *
 * Management: `executors_min` prestarted, growth to `executors_max` while every
 * executor is busy and work waits, idle executors above the minimum shut down after
 * `idle_timeout_ms`; an executor is recycled after `max_calls_per_executor` calls or
 * above `max_executor_rss_mb`; PING every `heartbeat_interval_ms`, killed when no
 * PONG came for `heartbeat_timeout_ms`. A call past its deadline is cancelled; still
 * running after `cancel_grace_ms`, its Python stack is requested (STACK_REQUEST) and
 * its executor killed and replaced: the call ends TIMEOUT with the stack as its
 * traceback.
 *
 * With `isolate_functions` (executor_isolation=function) an executor serves the
 * function (by name) of the first call it gets and no other; a queued call whose
 * function has no executor gets a fresh one, and when the pool is at executors_max an
 * idle (else the least busy) executor of another function is recycled for it. While
 * calls wait that no executor can take, executors of other functions that have sat idle
 * at least as long as an executor takes to start (measured spawn to HELLO, 50-250 ms)
 * with none of their function's calls queued are recycled as well, as many at once as
 * the waiting calls need beyond the executors already coming for them.
 *
 * Calls that never started are never failed. Each executor writes the id of the call
 * it starts into a file the pool maps (executor-protocol.md §7). An executor whose
 * running call is cancelled, overdue or long (past the pipeline's time budget) gets no
 * new calls, and those queued behind it are taken back (RECALL, §6). When an executor
 * dies, the pool reads what is left in its socket, then fails only the calls it may
 * have run (EXECUTOR_LOST, or TIMEOUT past their deadline); the others are delivered
 * as WK_CALL_NOT_STARTED, which the caller sends again.
 *
 * Processes: each executor runs in its own session (setsid) and, under a root worker,
 * as executor_user (uid/gid). What its calls start ends with them: the executor kills
 * its children after each call; killing an executor kills its process group; and the
 * worker, a child subreaper (wk_reaper.h), kills and reaps every orphan that comes
 * back to it (at each executor exit, every second, and waiting at the pool's stop).
 *
 * Runs on one libuv loop; every function must be called on that loop's thread. */
#ifndef WK_EXECUTOR_POOL_H
#define WK_EXECUTOR_POOL_H

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "adapters/wk_cgroup.h"
#include "adapters/wk_exec_adapter.h"
#include "adapters/wk_executor_output.h"
#include "adapters/wk_frame.h"

typedef struct wk_pool wk_pool;
typedef struct wk_pool_call wk_pool_call;

typedef struct wk_pool_config {
  const char *python;              /* interpreter to run executors with */
  const char *executor_script;     /* path of worker_executor.py */
  const char *python_path;         /* PYTHONPATH for executors (holds the `worker` module) */
  uint32_t executors_min;          /* prestarted and kept */
  uint32_t executors_max;          /* grown to on demand */
  uint32_t pipeline_depth;         /* calls in flight per executor at most (adaptive below it:
                                  about 2 ms of measured work ahead, at least 1) */
  int64_t idle_timeout_ms;         /* an idle executor above the minimum stops after this */
  uint64_t max_calls_per_executor; /* recycle after this many calls (0 = never) */
  uint64_t max_executor_rss_mb;    /* recycle above this peak RSS (0 = never) */
  int64_t heartbeat_interval_ms;
  int64_t heartbeat_timeout_ms;
  uint32_t max_frame;        /* bytes; larger frames are a protocol error */
  int64_t cancel_grace_ms;   /* a cancelled call still running after this: stack, kill */
  int64_t stack_wait_ms;     /* how long to wait for the stack before killing */
  int64_t shutdown_grace_ms; /* SHUTDOWN, then SIGKILL after this */
  uint64_t rlimit_as_mb;     /* executor address-space limit (0 = none) */
  uint64_t rlimit_nofile;    /* executor open-files limit (0 = none) */
  uint64_t rlimit_cpu_s;     /* executor CPU-seconds limit (0 = none) */
  uint64_t rlimit_nproc;     /* executor RLIMIT_NPROC: its user's processes (0 = none) */
  /* The executors' user and group (executor_user, resolved by the app): spawned with
   * setuid/setgid, supplementary groups dropped; the pool's directory and started files
   * are given to them. uid 0 = the worker's own (never a switch to root; a zeroed
   * config changes nothing). Read back with wk_pool_executor_ids. */
  uint32_t uid, gid;
  /* NAME=VALUE entries added to the executors' scrubbed environment (one for PATH or
   * LANG replaces the pool's), NULL-terminated; NULL = none. Copied by wk_pool_start. */
  const char *const *env;
  /* bounds on the executors' stdout and stderr in the log (wk_executor_output.h; 0 =
   * the default of each) */
  wk_exec_output_limits output;
  /* The pool's directory is "<dir_prefix>.XXXXXX" (mkdtemp; at most 247 bytes); NULL =
   * "$TMPDIR/wk-exec-XXXXXX". Read by wk_pool_start only. */
  const char *dir_prefix;
  /* executor_isolation=function: an executor serves one function (by name) and is
   * recycled before it serves another; false = any executor serves any call */
  bool isolate_functions;
  /* Each executor is put under SCHED_BATCH right after spawn (before its threads exist,
   * so they inherit it): a batch process's wake-up does not preempt the running thread
   * (the worker's loop and completion-queue threads), so executors take their queued
   * calls in runs instead of one context switch per call. false = the default policy. */
  bool sched_batch;
  /* The executors' timer slack in ns (PR_SET_TIMERSLACK, inherited across fork and
   * exec: set on the spawning thread around uv_spawn); 0 = the worker's own. */
  uint64_t timer_slack_ns;
  /* Per-executor control groups (wk_cgroup_open), NULL = none. Each executor is moved
   * into a new group right after spawn, before its HELLO (so before any call); an
   * executor SIGKILLed while its group recorded an OOM kill fails its running call
   * EXECUTOR_LOST with error type MemoryLimit. The group is emptied (SIGKILL) and
   * removed when the executor ends. Borrowed: outlives the pool. */
  wk_cgroup *cgroup;
} wk_pool_config;

/* Counters for logs and metrics. */
typedef struct wk_pool_stats {
  uint64_t spawned, exited;
  uint64_t killed_heartbeat, killed_wedged, killed_protocol;
  uint64_t recycled_calls, recycled_rss, stopped_idle;
  uint64_t recycled_isolation; /* recycled for a function that had no executor */
  uint64_t calls_sent, results;
  uint64_t recalled;           /* RECALLs sent: calls taken back from behind a long call */
  uint64_t stolen;             /* of them, for an idle executor (steal_for_idle) */
  wk_exec_output_stats output; /* the executors' stdout and stderr */
} wk_pool_stats;

/** Creates the pool's private directory (started files) and spawns executors_min executors.
 * Returns NULL with a reason in `err` (e.g. the interpreter does not exist). */
wk_pool *wk_pool_start(uv_loop_t *loop, const wk_pool_config *cfg, wk_exec_callbacks cb, char *err,
                       size_t err_len);

/** Queues a call; `call_ctx` comes back in the result callback. Returns a handle valid
 * until the callback runs or wk_pool_cancel is called with it; NULL when the call was
 * failed at once (args over the frame limit: the callback already ran). */
wk_pool_call *wk_pool_submit(wk_pool *pool, const wk_call_spec *spec, void *call_ctx);

/** Cancels a call: a queued one is dropped; a running one is told to stop (CANCEL)
 * and its executor is killed if it is still busy after the grace. The callback is not
 * called for a cancelled call. */
void wk_pool_cancel(wk_pool *pool, wk_pool_call *call);

/** Answers the parent's SUBCALLS request `request_id`. */
void wk_pool_answer_subcalls(wk_pool *pool, wk_pool_call *parent, uint64_t request_id,
                             const wk_frame_child *children, uint32_t count);

/** Answers the SCRATCH request `request_id` of `call`: `error` NULL or "" when the task's
 * scratch directory exists, else why not (the function's OSError). A call that is gone
 * is not answered. */
void wk_pool_answer_scratch(wk_pool *pool, wk_pool_call *call, uint64_t request_id,
                            const char *error);

/** The pool as the orchestrator's executor adapter. */
wk_exec_adapter wk_pool_adapter(wk_pool *pool);

/** Executors connected and ready (for start-up and tests). */
uint32_t wk_pool_ready_executors(const wk_pool *pool);
#define WK_POOL_UNAVAILABLE_MAX 1024 /* room for wk_pool_unavailable's reason */

/** True when executors cannot start: none is ready and the last START_FAILURES_MAX (3)
 * started exited before they connected. Then `why` (when not NULL) gets the reason:
 * the interpreter and script, the exit status, the end of the last one's stderr. While
 * it is true, queued calls fail at once (EXECUTOR_LOST, ExecutorsUnavailable, the
 * reason as message) and starts go on with backoff; one HELLO ends it. */
bool wk_pool_unavailable(const wk_pool *pool, char *why, size_t why_len);

/** The user and group executors run as (wk_pool_config.uid/gid): uid 0 = the worker's own.
 * For whatever else executors must be able to use (e.g. scratch directories). */
void wk_pool_executor_ids(const wk_pool *pool, uint32_t *uid, uint32_t *gid);

/** Executors running (started, not yet exited). */
uint32_t wk_pool_running_executors(const wk_pool *pool);
/** Calls the pool can hold in flight right now (ready executors x depth). */
uint32_t wk_pool_capacity(const wk_pool *pool);
/** Counters since start. */
wk_pool_stats wk_pool_get_stats(const wk_pool *pool);

/* One running executor as the status page shows it. */
typedef struct wk_pool_executor_view {
  uint64_t id; /* the executor id of its output records */
  int pid;
  const char *state;    /* "starting" (no HELLO yet), "idle", "busy", "retiring" */
  const char *function; /* executor_isolation=function: the function it serves ("" = none
                           yet, or shared executors); valid until the pool next runs */
  uint64_t calls_done;  /* calls answered */
  uint32_t inflight;    /* calls sent and not yet answered */
  uint64_t rss_kb;      /* resident set now (/proc/PID/statm), 0 when unreadable */
  int64_t spawned_ms;   /* loop time of its spawn */
} wk_pool_executor_view;

/** Connected executors with at least one call in flight (utilisation). Loop thread. */
uint32_t wk_pool_busy_executors(const wk_pool *pool);

/** Writes up to `max` running executors (started, not yet exited) into `out`, newest
 * first; returns how many. Reads /proc once per executor (its RSS). Loop thread. */
size_t wk_pool_list_executors(const wk_pool *pool, wk_pool_executor_view *out, size_t max);

/** Stops every executor (SHUTDOWN, SIGKILL after the grace), closes their channels
 * and removes the pool's directory; `done` runs on the loop when everything is closed, after
 * which the pool is freed. Queued calls are dropped without callbacks. */
void wk_pool_stop(wk_pool *pool, void (*done)(void *arg), void *arg);

#endif

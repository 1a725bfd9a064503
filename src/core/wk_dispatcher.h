/* wk_dispatcher.h: DispatcherCore, the Sans-IO call scheduler of the Worker.
 *
 * The dispatcher decides which call of which task runs next on the executor pool,
 * and what happens when a call ends: success, permanent failure, retry after an
 * exponential backoff, timeout, subcalls, cancellation. It performs no I/O, reads no
 * clock and starts no threads: every entry point takes `now_ms` (monotonic ms chosen
 * by the caller) and appends the actions the adapter must carry out to a
 * caller-provided buffer (wk_disp_out). Randomness (backoff jitter) comes from a PRNG
 * seeded by the configuration, so a run replays exactly from its inputs.
 *
 * Single-threaded: one owner (the orchestrator's actor thread) calls it.
 *
 * Vocabulary
 *   task      a calls phase of one WorkerCore task, named by a handle (uint32_t) and
 *             carrying the adapter's task_key back in every action.
 *   call      one logical call: a top-level call (depth 0, identified by its index in
 *             the task: 0, 1, 2, ... in the order added) or a child requested by a
 *             running call through wk_disp_add_subcalls (depth >= 1, identified by its
 *             group and its position in the group).
 *   attempt   one execution of a call on an executor, named by a call_id (uint64_t,
 *             never 0). A retry is a new attempt with a new call_id, so an answer for
 *             an older attempt is recognised and ignored.
 *
 * Scheduling (wk_disp_poll and every entry point that takes `out`)
 *   - Global admission: at most `capacity` attempts in flight (executors x pipeline
 *     depth, changed with wk_disp_set_capacity).
 *   - Per-task window (AIMD): starts at window_initial; +1 for every call that
 *     succeeds, up to window_max (so a window that is kept full doubles once per
 *     round of answers, like TCP slow start); halved (never below 1) by a RETRYABLE,
 *     EXECUTOR_LOST or TIMEOUT result, the signs of an overloaded backend. Permanent
 *     ERRORs leave it alone: they say nothing about load. Children's results count
 *     for their task's window like any call's.
 *   - Fairness: tasks with sendable work sit in a round-robin ring; each turn of the
 *     ring gives one call to each task, so a task with 100,000 queued calls delays a
 *     task with one call by at most one turn.
 *   - Within a task: retries and children first (one FIFO, in the order they became
 *     ready), then new top-level calls in index order.
 *   - A parent waiting on its children counts against neither the window nor the
 *     global admission while it waits, so children always get executors even when
 *     every admitted attempt is a waiting parent (no deadlock). When its last child
 *     is final the parent resumes at once (SUBCALLS_COMPLETE right after the last
 *     SUBCALL_DONE) and stays outside admission until its attempt ends: its executor
 *     still holds it, possibly under calls it ran nested while the parent waited, and
 *     making the resume wait for room could leave those nested calls' children
 *     waiting behind it. Resumed parents may therefore take the executors beyond
 *     `capacity`, by at most the number of parents that asked for subcalls.
 *   - Call records (max_calls) bound memory: a top-level call takes one from its
 *     first SEND to its end (queued calls are a counter), a child from its request.
 *     A task whose next call needs a record when none is free is parked and gets
 *     back in line, one task per record freed.
 *
 * Output buffer: actions never get lost. Every decision is recorded inside the
 * dispatcher first and emitted afterwards in this order: CANCEL / CALL_DONE /
 * SUBCALL_DONE / SUBCALLS_COMPLETE in the order they were decided, then TASK_DONE,
 * then SENDs. When the buffer fills, emission stops, `out->more` is set, and
 * the rest is emitted by the next call (wk_disp_poll with room). SENDs are emitted
 * only once everything decided before them is out, so any buffer size >= 1 works
 * (bigger buffers just mean fewer calls). The pending queue is preallocated
 * (3 x max_calls entries): no entry point ever fails for lack of room.
 *
 * Completion guarantees: every top-level call index of a task gets at most one
 * CALL_DONE, and exactly one before a TASK_DONE with ok = true. CALL_DONEs of a task
 * come before its TASK_DONE. A task that is cancelled (wk_disp_cancel_task) or
 * removed emits no SEND, CALL_DONE, SUBCALL_DONE, SUBCALLS_COMPLETE or TASK_DONE
 * afterwards, ever; only the CANCELs of its in-flight attempts still come out.
 * A task that ended (TASK_DONE decided) sends nothing more either.
 *
 * Cost: O(1) or O(log n) per action (FIFOs, a ring of tasks, 4-ary heaps for
 * backoff and deadlines); no entry point scans all calls or tasks. Cancelling a
 * task costs O(its live calls). Memory is allocated at create time only.
 *
 * Lifetimes: the dispatcher owns all of its memory; actions are plain values the
 * caller may keep. Memory goes through cfg.allocator (lib/wk_alloc.h); out of
 * memory aborts. */
#ifndef WK_DISPATCHER_H
#define WK_DISPATCHER_H

#include <stdbool.h>
#include <stdint.h>

#include "core/wk_types.h"
#include "lib/wk_alloc.h"

typedef struct wk_disp wk_disp;

/* ---- configuration ---------------------------------------------------------- */

/* How a backoff delay `b` is randomised. */
typedef enum wk_disp_jitter {
  WK_DISP_JITTER_EQUAL = 0, /* b/2 + uniform[0, b/2]: never less than half (default) */
  WK_DISP_JITTER_FULL = 1,  /* uniform[0, b]: widest spread */
  WK_DISP_JITTER_NONE = 2,  /* exactly b (tests) */
} wk_disp_jitter;

typedef struct wk_disp_config {
  uint32_t max_inflight;   /* initial global admission (executors x pipeline depth); 0 allowed */
  uint32_t window_initial; /* per-task window at start, >= 1 */
  uint32_t window_max;     /* per-task window cap, >= window_initial */
  uint32_t max_depth;      /* deepest subcall level allowed; 0 = no subcalls */
  uint32_t max_tasks;      /* tasks held at once (live, ended or cancelled, until removed) */
  uint32_t max_calls;      /* call records held at once: a hard, preallocated bound */
  uint64_t rng_seed;       /* seeds the backoff jitter */
  wk_disp_jitter jitter;
  wk_allocator allocator;
} wk_disp_config;

#define WK_DISP_TASKS_MAX (1u << 20)
#define WK_DISP_CALLS_MAX (1u << 26)
#define WK_DISP_DEPTH_MAX 32u
#define WK_DISP_WINDOW_MAX (1u << 20)
#define WK_DISP_ATTEMPTS_MAX 10000u
#define WK_DISP_BACKOFF_MS_MAX INT64_C(3600000) /* one hour: larger backoffs are capped */
#define WK_DISP_MULTIPLIER_MILLI_MAX 1000000u   /* x1000 */
#define WK_DISP_MULTIPLIER_MILLI_DEFAULT 2000u  /* used when a policy says 0 */

/** Fills `cfg` with a small valid preset for tests, simulations and benchmarks:
 * max_inflight 16, window 4..64, max_depth 4, 1024 tasks, 16384 calls, seed 1, equal
 * jitter, malloc/free. The Worker does not use it: it passes every field from its
 * settings table (app/wk_config_table.c; a task's window starts at
 * task_window_initial, 8). */
void wk_disp_config_default(wk_disp_config *cfg);

/** Checks every field. Returns WK_OK, or WK_ERR_INVALID_ARGUMENT with a one-line
 * reason in `why` (static string; may be NULL). */
wk_err wk_disp_config_validate(const wk_disp_config *cfg, const char **why);

/** Creates a dispatcher with no tasks; preallocates every record, queue and heap
 * (about 300 bytes per call record, 190 per task). Returns NULL when `cfg` is invalid.
 * The caller owns it and releases it with wk_disp_destroy. */
wk_disp *wk_disp_create(const wk_disp_config *cfg);

/** Frees the dispatcher and everything in it (NULL is a no-op). */
void wk_disp_destroy(wk_disp *d);

/** Changes the global admission as the executor pool grows or shrinks. Lowering it
 * below the number in flight cancels nothing: no new SEND until enough finish. Call
 * wk_disp_poll afterwards: a larger capacity may allow SENDs at once. */
void wk_disp_set_capacity(wk_disp *d, uint32_t max_inflight);

/* ---- results and actions ------------------------------------------------------ */

/* How an attempt ended, as reported by the adapter (and TIMEOUT by the dispatcher). */
typedef enum wk_disp_result {
  WK_DISP_OK = 0,
  WK_DISP_ERROR = 1,         /* the function raised: permanent */
  WK_DISP_RETRYABLE = 2,     /* the function raised worker.Retryable */
  WK_DISP_EXECUTOR_LOST = 3, /* the executor died under the attempt */
  WK_DISP_TIMEOUT = 4,       /* the attempt passed its deadline */
  WK_DISP_NOT_STARTED = 5,   /* the executor gave the call back before starting it */
} wk_disp_result;

/** The call record an attempt id belongs to: a dense number below cfg.max_calls, so
 * adapters can keep per-attempt state in a plain array (the attempt id itself tells a
 * retry or a reused record apart). */
static inline uint32_t wk_disp_call_slot(uint64_t call_id) { return (uint32_t)call_id; }

/** "OK", "ERROR", "RETRYABLE", "EXECUTOR_LOST", "TIMEOUT", "NOT_STARTED"; "UNKNOWN"
 * otherwise. */
const char *wk_disp_result_name(wk_disp_result r);

typedef enum wk_disp_action_kind {
  WK_DISP_SEND = 1,              /* run attempt call_id (task_key, index or group/position) */
  WK_DISP_CANCEL = 2,            /* stop attempt call_id; its answer, if any, will be ignored */
  WK_DISP_CALL_DONE = 3,         /* top-level call `index` is final with `result` */
  WK_DISP_SUBCALL_DONE = 4,      /* child `index` of `group` is final with `result` */
  WK_DISP_SUBCALLS_COMPLETE = 5, /* every child of `group` is final: resume parent call_id */
  WK_DISP_TASK_DONE = 6,         /* the task's calls are over: `ok`, `failed` */
} wk_disp_action_kind;

/** "SEND", "CANCEL", "CALL_DONE", ...; "UNKNOWN" for values outside the enum. */
const char *wk_disp_action_kind_name(wk_disp_action_kind k);

/* Why a CANCEL was emitted. */
typedef enum wk_disp_cancel_reason {
  WK_DISP_CANCEL_TASK = 0,     /* the task was cancelled or failed */
  WK_DISP_CANCEL_DEADLINE = 1, /* the attempt passed its deadline (treated as TIMEOUT) */
  WK_DISP_CANCEL_PARENT = 2,   /* its parent's attempt ended: the child is not needed */
} wk_disp_cancel_reason;

/* One action. Fields a kind does not use are 0. */
typedef struct wk_disp_action {
  wk_disp_action_kind kind;
  wk_disp_result result;        /* CALL_DONE, SUBCALL_DONE: the final result */
  wk_disp_cancel_reason reason; /* CANCEL */
  bool ok;                 /* TASK_DONE: failed <= max_failed_calls (CONTINUE), 0 (FAIL_FAST) */
  uint32_t task;           /* every kind: the task handle */
  uint64_t task_key;       /* every kind: the adapter's key of the task */
  uint64_t call_id;        /* SEND, CANCEL: the attempt; CALL_DONE, SUBCALL_DONE: the last
                                   attempt (the one whose answer decided); SUBCALLS_COMPLETE:
                                   the parent's attempt */
  uint64_t parent_call_id; /* SEND and CANCEL of a child: the parent's attempt */
  uint64_t group;          /* SEND/CANCEL of a child, SUBCALL_DONE, SUBCALLS_COMPLETE */
  uint32_t index;          /* SEND, CANCEL, CALL_DONE: the call index (depth 0) or the
                                   position in the group (children) */
  uint32_t depth;          /* SEND, CANCEL: 0 for top-level calls */
  uint32_t attempt;        /* SEND: 1-based attempt number; *_DONE: attempts made */
  uint32_t failed;         /* TASK_DONE: top-level calls that ended failed */
  int64_t deadline_ms;     /* SEND: absolute deadline of the attempt, INT64_MAX = none */
  bool again;              /* SEND: the call was given back unstarted (NOT_STARTED) */
} wk_disp_action;

/* The caller's action buffer. Entry points append at items[count] up to capacity;
 * the caller consumes items[0..count) and resets count to 0. `more` is set when
 * emission stopped for lack of room: call wk_disp_poll again with room. */
typedef struct wk_disp_out {
  wk_disp_action *items;
  uint32_t capacity;
  uint32_t count;
  bool more;
} wk_disp_out;

/* ---- tasks ------------------------------------------------------------------------- */

typedef struct wk_disp_task_params {
  wk_call_failure_policy failure_policy; /* FAIL_FAST or CONTINUE */
  uint32_t max_failed_calls;             /* CONTINUE: failures tolerated */
  wk_retry_policy retry;                 /* max_attempts 0 = 1; multiplier 0 = x2; backoff
                                            over one hour and max_backoff 0 mean one hour */
  bool retry_on_executor_lost;
  int64_t call_timeout_ms;  /* per-attempt deadline from its SEND; 0 = none */
  int64_t task_deadline_ms; /* absolute; no attempt's deadline goes past it; 0 = none */
} wk_disp_task_params;

/** Registers a task (its calls phase) under the caller's `task_key` (any value; not
 * required to be unique) and writes its handle (never 0) to `*task`. No calls yet.
 * Errors: INVALID_ARGUMENT (NULL pointers; unknown policy; max_attempts over
 * WK_DISP_ATTEMPTS_MAX; negative backoff, timeout or deadline; multiplier in 1..999
 * or over WK_DISP_MULTIPLIER_MILLI_MAX), NO_SLOT (max_tasks tasks held). Nothing
 * changes on error. */
wk_err wk_disp_add_task(wk_disp *d, uint64_t task_key, const wk_disp_task_params *p,
                        uint32_t *task);

/** Appends `n` top-level calls to the task; their indices continue after the ones
 * added before. A streaming builder calls it repeatedly; `last` says that no more
 * will come (needed before the task can end successfully; n may be 0). Queued calls
 * take no call record until sent. Then emits (see file comment). Errors: NOT_FOUND
 * (stale or unknown handle), STALE (the task ended or was cancelled: nothing added;
 * stop producing), INVALID_ARGUMENT (`last` was given before, or the count would pass
 * UINT32_MAX - 1, or out is NULL). */
wk_err wk_disp_add_calls(wk_disp *d, uint32_t task, uint32_t n, bool last, int64_t now_ms,
                         wk_disp_out *out);

/** The task's parameters as the dispatcher holds them (normalised: see
 * wk_disp_add_task) into `out`. O(1). Errors: NOT_FOUND (unknown or freed handle). */
wk_err wk_disp_task_params_get(const wk_disp *d, uint32_t task, wk_disp_task_params *out);

/** Calls added but never sent yet, for streaming backpressure;
 * 0 for an unknown handle or an ended task. O(1). */
uint32_t wk_disp_task_queued(const wk_disp *d, uint32_t task);

/** Cancels the task: CANCEL for every attempt in flight (waiting parents included),
 * everything queued, backing off or not yet emitted is dropped; afterwards the task
 * emits nothing but those CANCELs (also when it had already ended: a TASK_DONE not
 * yet emitted is dropped). Then emits pending actions, but no SEND (there is no
 * `now` to date one): out->more is set when the capacity it freed could be used,
 * so call wk_disp_poll. Idempotent. Errors: NOT_FOUND, INVALID_ARGUMENT (NULL out). */
wk_err wk_disp_cancel_task(wk_disp *d, uint32_t task, wk_disp_out *out);

/** Frees the task's record and handle (after its TASK_DONE, or after cancel). A task
 * still live is cancelled first; its CANCELs come out on the next call that takes
 * `out`. Errors: NOT_FOUND. */
wk_err wk_disp_remove_task(wk_disp *d, uint32_t task);

/* ---- scheduling, results, timers --------------------------------------------------- */

/** Emits whatever is pending, then SENDs while admission allows (see file comment).
 * Every entry point that takes `out` ends with the same emission. */
void wk_disp_poll(wk_disp *d, int64_t now_ms, wk_disp_out *out);

/** The attempt `call_id` ended with `r`. The attempt leaves admission; the task's
 * window moves; then, per the task's policy, the call is final (CALL_DONE or
 * SUBCALL_DONE; task end checks) or goes to backoff for a new attempt. RETRYABLE is
 * retried while attempts remain; EXECUTOR_LOST only with retry_on_executor_lost;
 * TIMEOUT only with retry.retry_on_timeout; never when the backoff would end at or
 * after the task deadline. A parent that ends while waiting on children has them
 * cancelled (CANCEL for those in flight). FAIL_FAST: the first top-level call that is
 * final without OK ends the task (CANCELs, TASK_DONE ok = false). CONTINUE: the task
 * fails as soon as failures pass max_failed_calls, and otherwise ends with ok = true
 * once `last` was given and every call is final. Then emits.
 *
 * NOT_STARTED is not an end: the executor gave the call back before running it (it
 * was queued behind a call that ended its executor or turned out long). The attempt
 * leaves admission, does not count as an attempt (the next SEND has the same attempt
 * number), leaves the window alone, and the call goes to the front of its task's
 * ready FIFO to be sent again (to any executor) with a fresh deadline; no retry policy
 * is needed and nothing is final.
 *
 * Errors: STALE when call_id names no attempt in flight: unknown, already answered,
 * cancelled, timed out, or superseded by a retry; the answer is ignored and nothing
 * changes. INVALID_ARGUMENT for an unknown `r`, NULL out, or NOT_STARTED for a parent
 * that asked for subcalls (it has started; nothing changes). */
wk_err wk_disp_call_finished(wk_disp *d, uint64_t call_id, wk_disp_result r, int64_t now_ms,
                             wk_disp_out *out);

/** The running attempt `parent_call_id` asks for `n` child calls (ctx.call, ctx.map).
 * Children belong to the parent's task, have depth parent + 1 and are queued ahead of
 * the task's new top-level calls; each gets a deadline no later than the parent's.
 * The parent leaves admission and waits; `*group` (never 0, unique) names the batch.
 * Each child ends with SUBCALL_DONE {group, position, result}; children are retried
 * per the task's policy but their failures do not count against the task (the
 * parent decides). When the last is final the parent resumes (outside admission) and
 * SUBCALLS_COMPLETE {group, parent call_id} is emitted. Then emits.
 * Errors (nothing changes): STALE (parent_call_id names no attempt in flight),
 * INVALID_ARGUMENT (n == 0, the parent is already waiting, depth over max_depth,
 * NULL pointers), NO_SLOT (fewer than n free call records). */
wk_err wk_disp_add_subcalls(wk_disp *d, uint64_t parent_call_id, uint32_t n, int64_t now_ms,
                            uint64_t *group, wk_disp_out *out);

/** Timers: backoffs that are over go back to their task's queue; attempts past their
 * deadline get a CANCEL (reason DEADLINE) and are treated as TIMEOUT results. Then
 * emits. Cost O(log n) per timer fired. */
void wk_disp_tick(wk_disp *d, int64_t now_ms, wk_disp_out *out);

/** The earliest backoff end or attempt deadline, INT64_MAX when none: call
 * wk_disp_tick then. */
int64_t wk_disp_next_deadline(const wk_disp *d);

/** True when decided actions wait for room in an output buffer (call wk_disp_poll). */
bool wk_disp_pending(const wk_disp *d);

/* ---- views -------------------------------------------------------------------------- */

typedef struct wk_disp_task_info {
  uint64_t task_key;
  bool ended;     /* TASK_DONE decided */
  bool ok;        /* when ended */
  bool cancelled; /* wk_disp_cancel_task was called */
  bool last;      /* no more calls will be added */
  uint32_t window;
  uint32_t inflight; /* attempts counted in admission (not waiting parents) */
  uint32_t waiting;  /* parents waiting on children, or resumed (outside admission) */
  uint32_t resuming; /* of those, parents resumed after their children, running outside admission */
  uint32_t backoff;  /* calls waiting out a backoff */
  uint32_t ready;    /* retries and children queued */
  uint32_t queued;   /* top-level calls added but never sent */
  uint32_t added;    /* top-level calls added */
  uint32_t finished; /* top-level calls final */
  uint32_t failed;   /* top-level calls final without OK */
  uint32_t live_calls; /* call records held */
  uint64_t succeeded;  /* top-level calls final with OK */
  uint64_t retried;    /* retries scheduled (all depths) */
  uint64_t returned;   /* attempts given back unstarted (NOT_STARTED), all depths */
  uint64_t subcalls;   /* children requested */
} wk_disp_task_info;

/** Fills `*info` for the task; O(the task's live call records) for `resuming`.
 * Errors: NOT_FOUND. */
wk_err wk_disp_task_info_get(const wk_disp *d, uint32_t task, wk_disp_task_info *info);

/** Sets `*retried` to the retries scheduled for the task so far (what
 * wk_disp_task_info.retried says) in O(1): what the adapter reads after every call's
 * outcome. False, with `*retried` untouched, for an unknown task. */
bool wk_disp_task_retried(const wk_disp *d, uint32_t task, uint64_t *retried);

typedef struct wk_disp_stats {
  uint32_t capacity, inflight;
  uint32_t tasks;      /* held */
  uint32_t live_calls; /* records held */
  uint32_t pending;    /* decided actions not yet emitted */
  uint64_t sends, stale_results, timeouts, retries;
  uint64_t not_started; /* attempts given back unstarted (NOT_STARTED) and sent again */
} wk_disp_stats;

/** Global counters. */
wk_disp_stats wk_disp_stats_get(const wk_disp *d);

/** Walks every structure and checks that they agree: per-task and global inflight
 * counts against the records, each record in exactly one state and container,
 * FIFOs, lists, heaps, the ring of tasks, windows in range, counters. Returns NULL
 * or a static description of the first violation. O(calls + tasks): for tests. */
const char *wk_disp_check_invariants(const wk_disp *d);

#endif

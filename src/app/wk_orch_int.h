/* wk_orch_int.h: the orchestrator's internal layout, shared by its own files only:
 *   wk_orchestrator.c  event queue, command execution, deferred steps, timers, lifecycle
 *   wk_orch_rpc.c      the rpc handlers (WorkerService, Health) and their replies
 *   wk_phase_jobs.c    the activation, builder, calls and writer phase steps and jobs
 *   wk_phase_sem.c     the phase semaphores (builderSem, scanSem, executorSem, pluginSem)
 *   wk_io_scope.c      the IO scope bound (a task's scratch directory, measured on ticks)
 *   wk_usage_log.c     the task_finished log line and the usage records
 *   wk_orch_progress.c PROGRESS events at a bounded rate per task
 *   wk_orch_tasks.c    ListTasks and GetTaskLogs (the task book)
 * Names that cross these files carry the `wk_orch__` prefix. */
#ifndef WK_ORCH_INT_H
#define WK_ORCH_INT_H

#include <pthread.h>

#include "app/wk_calls.h"
#include "app/wk_orchestrator.h"
#include "app/wk_subscriptions.h"
#include "app/wk_task_runtime.h"
#include "lib/wk_buf.h"
#include "lib/wk_trim.h"
#include "lib/wk_freelist.h"

/* ---- wk_orchestrator.c -------------------------------------------------------------- */

typedef enum wk_orch__ev_kind { WK_ORCH__EV_RPC = 1, WK_ORCH__EV_CLOSED = 2 } wk_orch__ev_kind;

/* One event from another thread (the gRPC completion-queue thread) for the loop. */
typedef struct wk_orch__event {
  wk_orch__ev_kind kind;
  bool cancelled;
  wk_rpc *rpc;
} wk_orch__event;

/* A phase step run later, outside any command execution (I2). */
typedef enum wk_orch__step_kind {
  WK_ORCH__STEP_BUILDER = 1,
  WK_ORCH__STEP_WRITER = 2,
  WK_ORCH__STEP_CALLS_DONE = 3,
  WK_ORCH__STEP_CALLS = 4,
  WK_ORCH__STEP_ACTIVATED = 5, /* activation done on the loop: report it (slot_id) */
} wk_orch__step_kind;

typedef struct wk_orch__step {
  struct wk_orch__step *next;
  wk_orch__step_kind kind;
  wk_task_rt *rt;
  uint64_t slot_id; /* STEP_ACTIVATED: the task's slot */
} wk_orch__step;

/* ---- wk_code_prune.c ------------------------------------------------------------------ */

/** Removes old epochs of `function` beyond code_epochs_kept that nothing pins, on the
 * threadpool (one job at a time; requests for a function already waiting are merged). */
void wk_orch__prune_code(wk_orch *o, const char *function);

/** wk_orch__prune_code as a wk_task_code_unpin callback (ud = the orchestrator), when a
 * prune may remove something (wk_code_cache_prune_due): not after every task. */
void wk_orch__prune_code_cb(void *o, const char *function, uint64_t epoch);

/** Frees the prune requests not started (at close). */
void wk_orch__prune_free(wk_orch *o);

/* ---- wk_phase_sem.c ------------------------------------------------------------------ */

/* A phase semaphore: at most `limit` tasks in the phase at once; the others wait
 * in FIFO order (the seed's builderSem, scanSem, executorSem, pluginSem). */
typedef enum wk_orch__sem_id {
  WK_ORCH__SEM_BUILDER = 0,
  WK_ORCH__SEM_SCAN = 1,
  WK_ORCH__SEM_EXECUTOR = 2,
  WK_ORCH__SEM_PLUGIN = 3,
  WK_ORCH__SEM_COUNT = 4,
} wk_orch__sem_id;

typedef struct wk_orch__sem {
  uint32_t limit, used;
  wk_task_rt *head, *tail; /* waiting, each holding a reference */
} wk_orch__sem;

/* ---- wk_orch_rpc.c ------------------------------------------------------------------- */

typedef struct wk_orch__health_watch wk_orch__health_watch;

/* ---- the orchestrator ----------------------------------------------------------------- */

struct wk_orch {
  uv_loop_t *loop;
  wk_orch_config cfg;
  wk_core *core;
  struct wk_journal_writer *journal; /* the core's inputs recorded (core_journal_dir); NULL = off */
  wk_exec_adapter exec;
  wk_calls *calls;           /* the calls phase: DispatcherCore and the attempts */
  wk_code_cache *code_cache; /* CURRENT of each function, from memory (cfg.calls.code.cache) */
  struct wk_shadow *shadow;  /* mirrors sampled submissions to another worker; NULL = off */
  wk_subs *subs;
  int64_t wall_offset_ms;
  int64_t now_ms;

  pthread_mutex_t mu;
  wk_orch__event *events;
  size_t n_events, cap_events;
  uint32_t n_queued_rpcs; /* of n_events, the rpcs: at most cfg.max_queued_rpcs */
  bool wake_due;          /* events queued since the last wake-up of the loop */
  wk_orch__event *draining_events;
  size_t cap_draining;
  uv_async_t wake;

  uv_timer_t tick;
  uv_timer_t deadline;
  uv_check_t turn_end;      /* after each loop turn's callbacks: the coalesced PHASE_CHANGEDs */
  uv_prepare_t before_wait; /* before the loop waits: the held log lines, in one write */
  uv_poll_t code_watch;     /* the code cache's inotify descriptor: changes drained as
                               they come (watching_code: started) */
  bool watching_code;
  wk_orch__step *steps_head, *steps_tail;
  wk_freelist step_pool; /* wk_orch__step records, reused (one to four per task) */
  wk_freelist rt_pool;   /* wk_task_rt records, reused (one per task) */
  wk_orch__sem sems[WK_ORCH__SEM_COUNT];
  wk_orch__health_watch *health_watchers;
  bool executors_unavailable; /* executors cannot start: health NOT_SERVING */
  bool accept_blocked;        /* the gRPC port cannot accept: health NOT_SERVING */
  bool drain_announced;       /* a drain is coming: health NOT_SERVING, tasks still admitted */
  bool closing;
  int handles_open;
  uint32_t jobs;      /* wk_orch__jobs on the threadpool: the orchestrator outlives them */
  wk_task_rt *scopes; /* runtimes in their calls phase, for the IO scope bound */
  wk_code_pins *pins; /* the code epochs tasks run (wk_task_code.c), shared with prune jobs */
  struct wk_orch__prune *prune_pending; /* functions to prune next (wk_code_prune.c) */
  bool prune_running;                   /* a prune job is on the threadpool */
  wk_task_rt *progress_pending;         /* tasks with a PROGRESS event held back (rate) */
  int64_t progress_due;                 /* the earliest of theirs (INT64_MAX: none) */
  wk_task_book *book;                   /* function, labels and call output of each task */
  wk_buf record; /* the audit and task_finished records are built here, one at a time */
  void (*deploy_handle)(void *ud, wk_rpc *rpc); /* DeployCode, SetCurrentEpoch; NULL = none */
  void *deploy_ud;
  wk_trim trim; /* freed memory given back after a mass close (wk_orchestrator.c) */
};

/** Reads the loop's clock once for this turn into o->now_ms and returns it. */
int64_t wk_orch__loop_now(wk_orch *o);

/** Queues a phase step for rt (with a reference) to run from wk_orch__run_steps;
 * returns it (owned by the queue) for the caller to fill in slot_id. */
wk_orch__step *wk_orch__defer_step(wk_orch *o, wk_orch__step_kind kind, wk_task_rt *rt);

/** Sets the deadline timer for the earliest of the core's, the calls' and the held-back
 * PROGRESS events' deadlines (or stops it: the tick comes first). */
void wk_orch__reschedule(wk_orch *o);

/** Runs the deferred steps until none is left. */
void wk_orch__run_steps(wk_orch *o);

/** Executes the commands of one core call. Never calls the core (I2). */
void wk_orch__exec_cmds(wk_orch *o, const wk_cmds *cmds);

/* A threadpool job for one task: holds a reference to rt and counts in o->jobs (the
 * orchestrator outlives its jobs). w->data points at it. */
typedef struct wk_orch__job {
  uv_work_t work;
  wk_orch *o;
  wk_task_rt *rt;
  uint64_t slot_id; /* activation: the slot PREPARE_ACTIVATION named (0 for other jobs) */
} wk_orch__job;

/** Whether the core handed rt back (CONVERGE): the core no longer holds rt as the
 * adapter context of a live task. Read from the core, never remembered (I4). */
bool wk_orch__converged(const wk_orch *o, const wk_task_rt *rt);

/** Queues work/done for rt on the loop's threadpool as a wk_orch__job; every input
 * of the job is set before it is queued (work may start at once on another thread). */
void wk_orch__queue_job(wk_orch *o, wk_task_rt *rt, uint64_t slot_id, uv_work_cb work,
                        uv_after_work_cb done);

/** Ends a job in its done callback: frees the job, uncounts it and returns the
 * orchestrator, with the task in *rt (the job's reference, for the caller to drop).
 * When the orchestrator is closing it drops that reference itself, frees the
 * orchestrator if it was the last job, and returns NULL: the caller only returns. */
wk_orch *wk_orch__job_end(uv_work_t *w, wk_task_rt **rt);

/** Frees the orchestrator once it is closing and no handle or job is left. */
void wk_orch__maybe_free(wk_orch *o);

/* ---- wk_orch_rpc.c ------------------------------------------------------------------- */

/** Replies to a unary rpc with message `m`, packed. */
void wk_orch__reply_packed(wk_rpc *rpc, const ProtobufCMessage *m);

/** Answers or starts one rpc from the event queue (releases unary rpcs). */
void wk_orch__handle_rpc(wk_orch *o, wk_rpc *rpc);

/** Sends the new serving status to every Health.Watch stream that has another. */
void wk_orch__health_changed(wk_orch *o);

/** A closed stream that is a Health.Watch: forgets and releases it, returns true. */
bool wk_orch__health_closed(wk_orch *o, wk_rpc *rpc);

/** Ends every Health.Watch stream UNAVAILABLE (shutdown); they stay until released. */
void wk_orch__health_finish_all(wk_orch *o);

/** Releases and forgets every Health.Watch stream. */
void wk_orch__health_free_all(wk_orch *o);

/* ---- wk_orch_progress.c -------------------------------------------------------------- */

/** The calls of rt moved on: their counters reach the core (GetTaskResult and a
 * convergence from outside the calls phase show them), and PROGRESS goes to its
 * watchers now, or once progress_events_per_s allows (held back; the latest counters
 * are sent then). A task no longer in its calls phase is left alone, and so is one no
 * watcher asked PROGRESS of (nothing to send: nothing is held back). */
void wk_orch__progress(wk_orch *o, wk_task_rt *rt);

/** A phase change of a task whose calls ran: PROGRESS from `r` now, whatever the rate
 * (before its PHASE_CHANGED or TERMINAL event). */
void wk_orch__progress_phase(wk_orch *o, const wk_task_result *r);

/** Sends the held-back PROGRESS events that are due (from the timers). */
void wk_orch__progress_flush(wk_orch *o);

/** When the next held-back PROGRESS event is due (INT64_MAX when none). O(1). */
int64_t wk_orch__progress_next(const wk_orch *o);

/** Drops every held-back event and its reference (at close). */
void wk_orch__progress_free(wk_orch *o);

/* ---- wk_orch_tasks.c ----------------------------------------------------------------- */

/** ListTasks: a page of the task book, newest first, with each task's state from the
 * core (tasks the core forgot are skipped). Releases nothing (the caller does). */
void wk_orch__handle_list_tasks(wk_orch *o, wk_rpc *rpc);

/** GetTaskLogs: the task's captured call output from the task book. */
void wk_orch__handle_task_logs(wk_orch *o, wk_rpc *rpc);

/** Records a newly admitted task in the task book (function, builder, labels). */
void wk_orch__book_add(wk_orch *o, const Worker__V1__SubmitTaskRequest *req);

/** The core's forget hook (ud = the orchestrator): the task's book entry and its
 * captured output go with the core's record. */
void wk_orch__book_forget(void *ud, const char *task_id, size_t task_id_len);

/** wk_calls' on_output (ud = the orchestrator): keeps an attempt's captured output in
 * the task book. */
void wk_orch__book_log(void *ud, const char *task_id, uint32_t index, uint32_t attempt,
                       wk_frame_bytes out, wk_frame_bytes err);

/* ---- wk_phase_jobs.c ----------------------------------------------------------------- */

/** PREPARE_ACTIVATION for `slot_id`: activates rt at once when nothing in it needs the
 * disk (the code cache answers from memory, no writer spool file) and defers
 * STEP_ACTIVATED to report it; otherwise queues the activation job on the threadpool.
 * Calls no core entry point (it runs inside command execution, I2). */
void wk_orch__start_activation(wk_orch *o, wk_task_rt *rt, uint64_t slot_id);

/** The activation of rt over (status: the threadpool job's, 0 inline): lets go of the
 * function's hold, adopts and pins the epoch, and reports ActivationPrepared or
 * ActivationFailed to the core unless the task converged meanwhile. On the loop. */
void wk_orch__activation_finished(wk_orch *o, wk_task_rt *rt, uint64_t slot_id, int status);

/** The builder phase: under the builder semaphore, the builder runs as a threadpool
 * job (never on the loop: a large map takes a while to parse); its done callback
 * reports WK_PHASE_BUILDER with the time it ran. A cheap builder ("single": one call
 * over the args, no parsing) runs at once on the loop instead, in this turn. */
void wk_orch__run_builder(wk_orch *o, wk_task_rt *rt);

/** START_CALLS (under the executor, and for streams the scan, semaphore). */
void wk_orch__start_calls(wk_orch *o, wk_task_rt *rt);

/** The calls are over (or failed the IO scope): reports WK_PHASE_CALLS once. */
void wk_orch__report_calls(wk_orch *o, wk_task_rt *rt);

/** The writer called `name` when this worker enables and configures it, else NULL. */
const wk_writer *wk_orch__enabled_writer(const wk_orch *o, const char *name);

/** The writer phase (under the plugin semaphore, on the threadpool). */
void wk_orch__run_writer(wk_orch *o, wk_task_rt *rt);

/** wk_calls' done callback (ud = the orchestrator): defers STEP_CALLS_DONE. */
void wk_orch__calls_done(void *ud, wk_task_rt *rt);

/* ---- wk_phase_sem.c ------------------------------------------------------------------ */

/** Sets the semaphores' limits from the configuration (0 = unlimited). */
void wk_orch__sems_init(wk_orch *o);

/** Takes the semaphore for rt, or queues rt (with a reference) and returns false; the
 * step runs when a holder releases. */
bool wk_orch__sem_acquire(wk_orch *o, wk_orch__sem_id id, wk_task_rt *rt);

/** Gives the semaphore back and lets the first live waiter take it. */
void wk_orch__sem_release(wk_orch *o, wk_orch__sem_id id, wk_task_rt *rt);

/** At close, once every task converged: drops the waiters of every semaphore (their
 * references), which a job outliving the loop would otherwise never release. */
void wk_orch__sems_drop_waiters(wk_orch *o);

/** Gives back every semaphore rt holds, except those lent to a job still running. */
void wk_orch__release_all_sems(wk_orch *o, wk_task_rt *rt);

/** Marks rt's semaphore `id` (held) as held by a threadpool job: the task converging
 * does not release it, so a job outliving its task still counts against the limit. */
void wk_orch__sem_lend_to_job(wk_task_rt *rt, wk_orch__sem_id id);

/** The job is over (its done callback, on the loop): gives the semaphore back. */
void wk_orch__sem_release_from_job(wk_orch *o, wk_orch__sem_id id, wk_task_rt *rt);

/* ---- wk_io_scope.c ------------------------------------------------------------------- */

/** Puts rt on the list of scratch directories measured on every tick (when bounded). */
void wk_orch__scope_track(wk_orch *o, wk_task_rt *rt);

/** Takes rt off that list. */
void wk_orch__scope_untrack(wk_orch *o, wk_task_rt *rt);

/** Starts a measurement (threadpool) of every tracked scratch directory not being measured. */
void wk_orch__scope_check_all(wk_orch *o);

/* ---- wk_usage_log.c ------------------------------------------------------------------ */

/** Logs task_finished with its usage record; appends the record to usage_log when set. */
void wk_orch__log_task_finished(wk_orch *o, const wk_task_rt *rt, const wk_task_result *r);

#endif

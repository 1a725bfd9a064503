/* wk_orchestrator.h: the actor that owns WorkerCore and executes what it decides.
 *
 * One libuv loop thread runs the orchestrator. The gRPC completion-queue thread hands
 * it rpcs through the server sink (a locked queue; one uv_async_send per batch of
 * completion-queue events, at the sink's on_batch_end); the executor
 * pool, the activation jobs and the timers run on the same loop. The orchestrator
 * feeds every event to the core with the loop's `now`, executes the commands the
 * core returns, and keeps no copy of slot or phase truth: task runtimes hold only
 * what the phases need.
 *
 * Timers: a tick every `tick_ms` (lease expiry, task timeouts, watch grace, result
 * purge) and a wake-up at the core's next deadline.
 *
 * Invariants (each has a test in tests/integration/test_orchestrator.c):
 *  I1 every core call happens on the loop thread, with the `now` of the current turn:
 *     other threads only queue events (the sink never touches the core), and the
 *     event queue holds at most max_queued_rpcs rpcs;
 *  I2 commands are executed right after the core call that returned them, once its
 *     transition is complete (a converged task's slot is already free), and their
 *     execution never changes the core (phase steps that would are deferred), so the
 *     pointers inside a command list stay valid while it is executed;
 *  I3 a task runtime is referenced by the core until CONVERGE and by every job or
 *     deferred step in flight; CONVERGE cancels its calls, so no pool callback can
 *     reach a freed runtime, and a job or step that ends after CONVERGE is dropped;
 *  I4 the adapter keeps no copy of slot or phase truth, nor of what the core holds for
 *     a task (slot, deadline, call failure and retry policies): each is read from the
 *     core when needed (wk_core_live_task), and a task has converged exactly when the
 *     core no longer holds its runtime;
 *  I5 every converged task releases what it held when its CONVERGE is executed: its
 *     calls are cancelled and the dispatcher forgets it, its phase semaphores pass to
 *     the next waiters, it leaves the IO scope list, the core's reference is dropped;
 *     the last reference removes its scratch directory. */
#ifndef WK_ORCHESTRATOR_H
#define WK_ORCHESTRATOR_H

#include <stdbool.h>
#include <sys/types.h>
#include <uv.h>

#include "adapters/wk_exec_adapter.h"
#include "app/wk_calls.h"
#include "app/wk_task_book.h"

#include "adapters/wk_grpc_server.h"
#include "core/wk_core.h"
#include "plugins/wk_builders.h"
#include "plugins/wk_writers.h"

typedef struct wk_orch wk_orch;

/* Rpcs waiting in the event queue for the loop at most, when the configuration says 0. */
#define WK_ORCH_DEFAULT_MAX_QUEUED_RPCS 16384u

typedef struct wk_orch_config {
  wk_core_config core;
  const char *code_root;
  uint32_t code_epochs_kept; /* epochs kept per function besides CURRENT and pins (0 = all) */
  const char *scratch_root;  /* parent of the tasks' scratch directories */
  const char *scratch_tag;   /* their names' prefix (wk_rundir_tag); NULL = "wk" */
  bool scratch_chown;        /* they are given to scratch_uid:scratch_gid (the executor
                                     user); false = they stay the worker's */
  uid_t scratch_uid;
  gid_t scratch_gid;
  int64_t tick_ms;                /* timer tick (500) */
  size_t max_inline_output_bytes; /* outputs kept in the TaskResult without a writer */
  uint32_t max_calls_per_task;
  const wk_builder_registry *builders;
  wk_calls_config calls;                /* the dispatcher and stream refills */
  uint64_t io_scope_max_bytes;          /* a task's scratch directory at most (0 = unbounded) */
  const char *audit_allow, *audit_deny; /* the AuditGate, checked at activation */
  const char *usage_log;                /* "" = usage records only in task_finished */
  const char *deployment, *service;     /* labels of usage records */
  const char *usage_service;            /* the service usage records are accounted to */
  const wk_writer_settings *writer_settings; /* shared by every writer; lives as long */
  const char *writers[16];                   /* writers enabled and configured (NULL-terminated) */
  uint32_t builder_concurrency;              /* phase semaphores (0 = unlimited) */
  uint32_t scan_concurrency;
  uint32_t executor_concurrency;
  uint32_t plugin_concurrency;
  /* Rpcs the event queue holds for the loop at most (0 = WK_ORCH_DEFAULT_MAX_QUEUED_RPCS);
   * one more is answered UNAVAILABLE "worker event queue full" at once and never
   * reaches the loop (stream-close events are always queued: they give back a reference). */
  uint32_t max_queued_rpcs;
  /* PROGRESS events per task and second at most (0 = 10), plus one at every phase
   * change (the loop's clock decides; the core keeps none) */
  uint32_t progress_events_per_s;
  wk_task_book_limits task_logs; /* captured call output kept for GetTaskLogs */
  /* Called on the loop thread once per converged task, after its task_finished log
   * line (metrics); NULL = none. */
  void (*on_task_finished)(void *ud, const wk_task_result *r);
  void *on_task_finished_ud;
  /* Called right after on_task_finished, with the task's function name too (the status
   * page's last tasks); NULL = none. */
  void (*on_task_ended)(void *ud, const wk_task_result *r, const char *function);
  void *on_task_ended_ud;
  /* The incident journal (adapters/wk_journal_writer.h): the core's inputs recorded from
   * its creation on. NULL or "" = off. */
  const char *core_journal_dir;
  uint64_t core_journal_max_bytes;
  uint32_t core_journal_files;
  bool core_journal_decisions; /* also each decision's line */
  const char *version;         /* into the journal's header */
} wk_orch_config;

/** Creates the orchestrator on `loop` with a fresh core (not ready). Returns NULL with
 * a reason in err when the configuration is invalid. */
wk_orch *wk_orch_create(uv_loop_t *loop, const wk_orch_config *cfg, char *err, size_t err_len);

/** Attaches the executor adapter the calls run on (owned by the caller). */
void wk_orch_set_executor(wk_orch *orch, wk_exec_adapter exec);

/** The sink to give the gRPC server: its callbacks are safe on any thread. */
wk_grpc_server_sink wk_orch_sink(wk_orch *orch);

/** Rpcs in the event queue now, waiting for the loop (any thread). */
uint32_t wk_orch_queued_rpcs(wk_orch *orch);

/** The executor adapter's result callback; pass it with `orch` as user data. */
void wk_orch_on_call_result(void *orch, void *call_ctx, const wk_call_outcome *outcome);

/** The executor adapter's subcall callback; pass it with `orch` as user data. */
void wk_orch_on_subcalls(void *orch, void *call_ctx, const wk_frame_subcalls *req);

/** The executor adapter's scratch callback (a call's first use of ctx.scratch_dir): makes
 * the task's scratch directory unless it exists and answers the call; when it cannot be
 * made, the function gets the reason and the task fails IO_SCOPE_FAILED. */
void wk_orch_on_scratch(void *orch, void *call_ctx, uint64_t request_id);

/** Hands every DeployCode and SetCurrentEpoch rpc to `handle` on the loop thread, with
 * the sink's reference (the handler answers and releases it); NULL = they are answered
 * UNIMPLEMENTED. */
void wk_orch_set_deploy_handler(wk_orch *orch, void (*handle)(void *ud, wk_rpc *rpc), void *ud);

struct wk_shadow;
/** Mirrors sampled successful submissions through `shadow` (not owned; NULL = off). */
void wk_orch_set_shadow(wk_orch *orch, struct wk_shadow *shadow);

/** Calls the executors can hold in flight (the dispatcher's admission limit). */
void wk_orch_set_capacity(wk_orch *orch, uint32_t calls);

/** Marks the worker ready: new tasks are admitted, health says SERVING. */
void wk_orch_set_ready(wk_orch *orch, bool ready);

/** Says whether executors can start. While they cannot, health is NOT_SERVING (tasks
 * are still admitted: their calls fail fast, the executor pool says why). */
void wk_orch_set_executors_unavailable(wk_orch *orch, bool unavailable);

/** Says whether the gRPC port can accept connections (out of file descriptors: it
 * cannot). While it cannot, health is NOT_SERVING on the connections already open. */
void wk_orch_set_accept_blocked(wk_orch *orch, bool blocked);

/** Announces a drain that has not started yet: health (Check and every Watch stream)
 * says NOT_SERVING while WorkerCore still admits new slots and submits, so clients can
 * turn away before wk_orch_set_draining makes the core refuse them. Not undone. */
void wk_orch_announce_drain(wk_orch *orch);

/** Starts draining: new slots and submits are UNAVAILABLE, health NOT_SERVING. */
void wk_orch_set_draining(wk_orch *orch);

/** Pauses admission of new tasks with `reason` (memory pressure), or resumes it (NULL):
 * WorkerCore then refuses new slots RESOURCE_EXHAUSTED naming the reason. */
void wk_orch_set_admission_paused(wk_orch *orch, const char *reason);

/** The capacity view derived from the core's slot table (DeriveHeartbeat). */
wk_heartbeat wk_orch_heartbeat(wk_orch *orch);

/** The loop the orchestrator runs on. */
uv_loop_t *wk_orch_loop(wk_orch *orch);

/** The offset from the loop's clock to the wall clock (unix ms = loop ms + offset). */
int64_t wk_orch_wall_offset_ms(const wk_orch *orch);

/* A live task as the core holds it (the status page): figures and names, never its
 * arguments or outputs. */
typedef struct wk_orch_task_view {
  wk_task_id id;
  char function[WK_FUNCTION_NAME_MAX + 1]; /* from the runtime's copy of the request */
  uint64_t slot_id;
  wk_task_state state;
  wk_phase phase;
  uint64_t code_epoch; /* 0 until activation */
  uint64_t calls_done, calls_total;
  int64_t accepted_ms; /* loop time */
} wk_orch_task_view;

/** Writes up to `max` live (submitted, not terminal) tasks into `out`, read from the
 * core's query functions (state, phase, epoch, calls: the core's truth; the function
 * name from the task's runtime); returns how many. Loop thread. */
size_t wk_orch_list_tasks(const wk_orch *orch, wk_orch_task_view *out, size_t max);

/** Tasks submitted and not yet terminal. */
uint32_t wk_orch_live_tasks(const wk_orch *orch);

/** Entries in the task book (what ListTasks and GetTaskLogs read): tasks the core
 * knows, and forgotten ones not yet swept. On the loop thread (or while it is parked). */
size_t wk_orch_book_entries(const wk_orch *orch);

/** WatchTasks streams still open (Health.Watch streams are not counted). */
uint32_t wk_orch_open_streams(const wk_orch *orch);

/** Converges every live task FAILED/WORKER_SHUTDOWN and ends every open stream
 * (watchers get their terminal events first). */
void wk_orch_abort_all(wk_orch *orch, const char *reason);

/** Stops the timers and closes the orchestrator's handles; frees it once closed
 * (run the loop). Rpcs still held are answered UNAVAILABLE and released. */
void wk_orch_close(wk_orch *orch);

#endif

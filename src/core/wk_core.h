/* wk_core.h: WorkerCore, the Sans-IO decision engine of the Worker.
 *
 * WorkerCore owns the slot table, the task index and every task's phase. It never
 * reads the clock, performs no I/O and starts no threads: every entry point takes
 * `now_ms` (monotonic milliseconds chosen by the caller) and returns what happened
 * as a result struct holding the commands the adapter must execute.
 *
 * Single-threaded: one owner (the orchestrator's actor thread) calls it.
 *
 * Lifetimes: pointers the core hands out (task ids, results, output bytes inside
 * commands) stay valid until the next call into the core that may change state,
 * i.e. any wk_core_handle_*, wk_core_purge_* or wk_core_destroy. Copy what you keep.
 *
 * Cost: slot allocation O(1) (free list), task lookup O(1) expected (open-addressing
 * hash), timers from heaps (with an in-order fast path) and a ring: no entry point
 * scans all slots or tasks.
 */
#ifndef WK_CORE_H
#define WK_CORE_H

#include "core/wk_types.h"
#include "lib/wk_alloc.h"

typedef struct wk_core wk_core;

/* Memory the core allocates goes through cfg.allocator (lib/wk_alloc.h); NULL hooks
 * mean malloc/free. An allocation that fails aborts the process (out of memory is
 * not an error the core reports). */

typedef struct wk_core_config {
  uint32_t task_slots;                /* capacity; 1..WK_CORE_SLOTS_MAX */
  int64_t default_slot_ttl_ms;        /* lease when a request says 0, and for inline allocation */
  int64_t max_slot_ttl_ms;            /* larger requested ttls are capped to this */
  int64_t default_task_timeout_ms;    /* when a submit says 0 */
  int64_t max_task_timeout_ms;        /* larger timeouts are InvalidArgument */
  int64_t watch_disconnect_grace_ms;  /* OWNER_LOST this long after the last watcher broke */
  int64_t result_retention_ms;        /* terminal results kept this long ... */
  uint32_t max_retained_results;      /* ... and at most this many ... */
  uint64_t max_retained_bytes;        /* ... holding at most this many bytes (oldest purged first;
                                        the newest result is kept even when it alone is larger,
                                        so a task that just converged can always be read back) */
  uint32_t max_failure_message_bytes; /* longer messages are truncated */
  wk_allocator allocator;
} wk_core_config;

#define WK_CORE_SLOTS_MAX (1u << 20)
#define WK_CORE_RETAINED_MAX (1u << 22)

/** Longest failure message kept (longer ones are truncated): the Worker's and the
 * preset's max_failure_message_bytes. */
#define WK_CORE_FAILURE_MESSAGE_BYTES 4096u

/** Fills `cfg` with a small valid preset for tests, simulations and benchmarks (16
 * slots, 30 s ttl, 1 h timeout cap, 10 s grace, 10 min retention, 10,000 results,
 * 256 MiB). The Worker does not use it: it passes every field from its settings table
 * (app/wk_config_table.c), where its defaults live. */
void wk_core_config_default(wk_core_config *cfg);

/** Checks every field of `cfg`. Returns WK_OK, or WK_ERR_INVALID_ARGUMENT with a
 * one-line reason in `why` (static string) when a value is out of range. */
wk_err wk_core_config_validate(const wk_core_config *cfg, const char **why);

/** Creates a core with all slots FREE, not ready, not draining. Preallocates the
 * slot table, task records and index for task_slots + max_retained_results tasks.
 * Returns NULL when `cfg` is invalid (see wk_core_config_validate). The caller owns
 * the core and releases it with wk_core_destroy. */
wk_core *wk_core_create(const wk_core_config *cfg);

/** Frees the core and every retained result. Adapter contexts of live tasks are not
 * touched (the adapter owns them). */
void wk_core_destroy(wk_core *core);

/* ---- tasks and results ------------------------------------------------- */

/* Counters for the calls phase, reported by the adapter with the phase outcome. */
typedef struct wk_call_stats {
  uint64_t calls_total, calls_succeeded, calls_failed, calls_retried, subcalls;
  uint64_t executor_cpu_us, bytes_in, bytes_out;
} wk_call_stats;

/* Monotonic timestamps (ms) of a task's life; 0 = not reached. */
typedef struct wk_task_statistic {
  int64_t accepted_ms, activated_ms;
  int64_t builder_started_ms, builder_finished_ms;
  int64_t calls_started_ms, calls_finished_ms;
  int64_t writer_started_ms, writer_finished_ms;
  int64_t finished_ms;
  wk_call_stats calls;
} wk_task_statistic;

/* How one phase of a task ended, kept in the task's record (the seed's TaskContext
 * keeps a PhaseOutcome per phase). */
typedef enum wk_phase_end {
  WK_PHASE_END_NOT_RUN = 0, /* the task never reached the phase */
  WK_PHASE_END_RUNNING = 1, /* the phase runs now (live tasks only) */
  WK_PHASE_END_OK = 2,
  WK_PHASE_END_FAILED = 3, /* failure_code says why: the phase's own failure, or what ended
                              the task while the phase ran (TASK_TIMEOUT, CANCELLED, ...) */
} wk_phase_end;

typedef struct wk_phase_record {
  uint8_t end;          /* wk_phase_end (a byte: the task record's size is fixed) */
  uint8_t failure_code; /* wk_failure_code; FAILED only */
} wk_phase_record;

/* The three phases with a record, in order: index = phase - WK_PHASE_BUILDER. */
#define WK_PHASE_RECORDS 3u

/** "NOT_RUN", "RUNNING", "OK" or "FAILED". */
const char *wk_phase_end_name(wk_phase_end e);

/** How long (ms, >= 0) phase `p` (BUILDER, CALLS or WRITER) of the task took,
 * up to its end or, for a phase that still runs, up to now_ms. Returns false (and 0)
 * when the task never reached the phase. */
bool wk_task_phase_ms(const wk_task_statistic *s, wk_phase p, int64_t now_ms, int64_t *ms);

/* Opaque bytes the core keeps for a task: encoded call outputs, plugin results. */
typedef struct wk_bytes {
  const uint8_t *data;
  size_t len;
} wk_bytes;

/* The task's result as it stands: live for active tasks, frozen once terminal. */
typedef struct wk_task_result {
  const char *task_id;
  size_t task_id_len;
  uint64_t slot_id;
  wk_task_state state;
  wk_phase phase;
  wk_failure_code failure_code;
  const char *failure_message; /* NUL-terminated, "" when none */
  uint64_t code_epoch;         /* 0 until activation */
  wk_bytes outputs;            /* from the calls phase */
  wk_bytes plugin_results;     /* from the writer phase */
  wk_task_statistic statistic;
  wk_phase_record phases[WK_PHASE_RECORDS]; /* builder, calls, writer */
} wk_task_result;

/* ---- commands ---------------------------------------------------------- */

typedef enum wk_cmd_kind {
  WK_CMD_PREPARE_ACTIVATION = 1, /* resolve + pin the epoch, create the IO scope, then
                                    wk_core_handle_activation_prepared/_failed */
  WK_CMD_START_BUILDER = 2,      /* run the call builder; report WK_PHASE_BUILDER */
  WK_CMD_START_CALLS = 3,        /* run the calls (list or stream); report WK_PHASE_CALLS */
  WK_CMD_START_WRITER = 4,       /* run the writer plugin on `outputs`; report WK_PHASE_WRITER */
  WK_CMD_CANCEL_TASK = 5,        /* cancel in-flight work of the task (calls, builder, writer) */
  WK_CMD_CONVERGE = 6,           /* the task is terminal: deliver `result`, release adapter_ctx */
} wk_cmd_kind;

const char *wk_cmd_kind_name(wk_cmd_kind k);

typedef struct wk_cmd {
  wk_cmd_kind kind;
  const char *task_id; /* valid until the next state-changing core call */
  size_t task_id_len;
  uint64_t slot_id;
  void *adapter_ctx; /* the submitter's context; CONVERGE hands its ownership back */
  union {
    struct {
      uint64_t requested_epoch; /* 0 = resolve the current one */
    } prepare;
    struct {
      void *call_list; /* from the builder outcome; the core never reads it */
      bool streaming;
    } calls;
    struct {
      wk_bytes outputs; /* the core's copy */
    } writer;
    struct {
      const wk_task_result *result;
    } converge;
  } u;
} wk_cmd;

#define WK_CMDS_MAX 4u

typedef struct wk_cmds {
  uint32_t count;
  wk_cmd items[WK_CMDS_MAX];
} wk_cmds;

/* ---- readiness ---------------------------------------------------------- */

/** Marks the worker ready (or not). New slots and submits are Unavailable until ready. */
void wk_core_set_ready(wk_core *core, bool ready);
/** Enters (or leaves) draining: new slots and submits are Unavailable; running tasks go on. */
void wk_core_set_draining(wk_core *core, bool draining);

/** Longest admission-pause reason kept (longer ones are truncated), NUL included. */
#define WK_CORE_PAUSE_REASON_MAX 256u

/** Pauses admission with `reason` (e.g. host memory under the configured floor), or
 * resumes it (NULL or ""). While paused, RequestTaskSlot and SubmitTask of new task ids
 * are PAUSED (the caller should go to another worker); duplicates still get their
 * answer, a slot already reserved can still be submitted, and running tasks go on. The
 * reason is copied. The adapter samples the condition and calls this; the core never
 * looks at memory itself. */
void wk_core_set_admission_paused(wk_core *core, const char *reason);

/** Why admission is paused, or NULL while admitting. Valid until the next
 * wk_core_set_admission_paused. */
const char *wk_core_admission_paused(const wk_core *core);

/* ---- RequestTaskSlot ---------------------------------------------------- */

typedef struct wk_slot_result {
  wk_err err;
  uint64_t slot_id;
  int64_t lease_expires_ms;     /* 0 once the slot is RUNNING or the task terminal */
  bool duplicate;               /* the task id was already known: this is its stable answer */
  const wk_task_result *result; /* the task's state when it was submitted; NULL if only reserved */
} wk_slot_result;

/** Reserves a slot for `task_id` under a lease of `ttl_ms` (0 = default; capped at
 * max_slot_ttl_ms). Idempotent: a task id already reserved, active or retained gets
 * its existing slot / snapshot / terminal result back with duplicate = true (a
 * terminal task: slot_id 0, it holds none; its result keeps the slot it ran on).
 * Errors: INVALID_ARGUMENT (bad id, negative ttl), UNAVAILABLE (not ready or
 * draining, for new ids only), PAUSED (admission paused, new ids only), NO_SLOT (no
 * free slot). */
void wk_core_handle_request_slot(wk_core *core, const char *task_id, size_t task_id_len,
                                 int64_t ttl_ms, int64_t now_ms, wk_slot_result *out);

/* ---- SubmitTask -------------------------------------------------------- */

typedef struct wk_submit_request {
  const char *task_id;
  size_t task_id_len;
  uint64_t slot_id;         /* 0 = allocate inline with the default ttl */
  uint64_t request_digest;  /* digest of the request without slot_id: reuse check */
  uint64_t requested_epoch; /* 0 = current */
  int64_t timeout_ms;       /* 0 = default; > max_task_timeout_ms is INVALID_ARGUMENT */
  wk_call_failure_policy call_failure_policy;
  uint32_t max_failed_calls; /* CONTINUE only */
  wk_retry_policy retry;
} wk_submit_request;

typedef struct wk_submit_result {
  wk_err err;
  uint64_t slot_id;
  int64_t accepted_ms;
  bool duplicate;               /* same id, same digest: nothing new was started */
  bool adapter_ctx_taken;       /* the core keeps adapter_ctx until it hands it back in CONVERGE */
  const wk_task_result *result; /* the task as it stands (set unless err) */
  wk_cmds cmds;                 /* PREPARE_ACTIVATION for a new task */
} wk_submit_result;

/** Admits a task. With slot_id the reservation made by request_slot for the same task
 * id is used; without, a slot is allocated inline. The new task is PREPARING and one
 * PREPARE_ACTIVATION command is emitted. `adapter_ctx` is stored and handed back in
 * every command of this task; the core owns it only when adapter_ctx_taken.
 * Duplicates (same id and digest) return the current snapshot or terminal result.
 * Errors: INVALID_ARGUMENT (bad id, timeout or policy), CONFLICT (id reused with a
 * different digest), UNAVAILABLE (new task while not ready or draining), PAUSED (new
 * task while admission is paused; a reserved slot is still honoured), NO_SLOT,
 * INVALID_SLOT (slot id names no slot, a generation never issued, or another task's
 * current slot), SLOT_UNCERTAIN (the id's generation was issued and its lease lapsed
 * or the slot was reclaimed since). A slot id that is not the task's reservation is
 * judged by its generation alone. */
void wk_core_handle_submit(wk_core *core, const wk_submit_request *req, void *adapter_ctx,
                           int64_t now_ms, wk_submit_result *out);

/* ---- events from the adapter -------------------------------------------- */

typedef struct wk_transition_result {
  wk_err err; /* NOT_FOUND: unknown task; STALE: the event no longer applies (dropped) */
  wk_cmds cmds;
} wk_transition_result;

/** Activation succeeded with `code_epoch` pinned: the slot goes RUNNING and the
 * builder phase starts (START_BUILDER). Errors: NOT_FOUND; STALE when the task is no
 * longer PREPARING (e.g. it converged SLOT_LOST) or the slot id differs: the adapter
 * must undo its activation (unpin) itself. SLOT_LOST convergence happens here when
 * the lease lapsed before activation (now >= lease expiry). */
void wk_core_handle_activation_prepared(wk_core *core, const char *task_id, size_t task_id_len,
                                        uint64_t slot_id, uint64_t code_epoch, int64_t now_ms,
                                        wk_transition_result *out);

/** Activation failed with ACTIVATION_FAILED or IO_SCOPE_FAILED (other codes are
 * INVALID_ARGUMENT): the task converges FAILED. Errors: NOT_FOUND, STALE. */
void wk_core_handle_activation_failed(wk_core *core, const char *task_id, size_t task_id_len,
                                      wk_failure_code code, const char *message, int64_t now_ms,
                                      wk_transition_result *out);

typedef struct wk_phase_outcome {
  bool ok;
  wk_failure_code failure_code;   /* on failure; NONE = the phase's default code */
  const char *message;            /* NUL-terminated or NULL */
  void *call_list;                /* builder: handed to START_CALLS */
  bool streaming;                 /* builder: calls come from a stream */
  wk_bytes data;                  /* calls: encoded outputs; writer: encoded plugin results */
  wk_call_stats stats;            /* calls */
  int64_t ran_from_ms, ran_to_ms; /* builder: when it ran (monotonic ms, the clock of now_ms);
                                     0 = from START_BUILDER to now */
} wk_phase_outcome;

/** The adapter finished `phase` of the task. A builder outcome's ran_from_ms/ran_to_ms
 * become builder_started_ms/builder_finished_ms (kept within START_BUILDER..now, so a
 * slightly finer clock than now's cannot make them run backwards), so builder_ms is
 * the time the builder ran, not its wait for builder_concurrency. A failure without a message gets one
 * naming the phase and the code ("the calls phase failed: CALL_FAILED"). Builder ok → START_CALLS; builder
 * failed → FAILED (BUILDER_FAILED or the outcome's code). Calls ok → START_WRITER with
 * the core's copy of the outputs; calls failed → FAILED (CALL_FAILED or the
 * outcome's code), with the outputs kept. Writer ok → SUCCEEDED; failed → FAILED
 * (PLUGIN_FAILED or the outcome's code). Errors: NOT_FOUND; STALE when the task is
 * not in `phase` (out of order, duplicate, or already terminal): nothing changes;
 * INVALID_ARGUMENT for a NULL outcome, a phase other than BUILDER/CALLS/WRITER, or an
 * unknown failure code. */
void wk_core_handle_phase_finished(wk_core *core, const char *task_id, size_t task_id_len,
                                   wk_phase phase, const wk_phase_outcome *outcome, int64_t now_ms,
                                   wk_transition_result *out);

/** The calls so far of a task in its calls phase (the adapter's running counters):
 * a snapshot of the task shows them, and a convergence from outside the phase
 * (TASK_TIMEOUT, CANCELLED, WORKER_SHUTDOWN, OWNER_LOST) keeps them. The calls phase
 * outcome's stats replace them. Errors: NOT_FOUND; STALE when the task is not in its
 * calls phase (nothing changes). */
wk_err wk_core_handle_call_progress(wk_core *core, const char *task_id, size_t task_id_len,
                                    const wk_call_stats *stats);

/** Timeout of an active task: FAILED/TASK_TIMEOUT with CANCEL_TASK before CONVERGE.
 * Errors: NOT_FOUND, STALE (terminal, or its deadline is after now). */
void wk_core_handle_task_timed_out(wk_core *core, const char *task_id, size_t task_id_len,
                                   int64_t now_ms, wk_transition_result *out);

/** Ends an active task from outside: `code` CANCELLED (state CANCELLED) or
 * WORKER_SHUTDOWN (state FAILED); CANCEL_TASK then CONVERGE. A reservation without a
 * submit is released and retained as CANCELLED. A terminal task is left as it is
 * (err OK, no commands). Errors: NOT_FOUND, INVALID_ARGUMENT (another code). */
void wk_core_handle_abort(wk_core *core, const char *task_id, size_t task_id_len,
                          wk_failure_code code, const char *message, int64_t now_ms,
                          wk_transition_result *out);

/** First watcher attached: cancels any pending OWNER_LOST grace. Terminal tasks: OK,
 * no change. Errors: NOT_FOUND (unknown or only reserved). */
wk_err wk_core_handle_watch_attached(wk_core *core, const char *task_id, size_t task_id_len,
                                     int64_t now_ms);
/** Last watcher left cleanly (its terminal event delivered, or it unsubscribed):
 * no grace timer. Errors: NOT_FOUND. */
wk_err wk_core_handle_watch_detached(wk_core *core, const char *task_id, size_t task_id_len,
                                     int64_t now_ms);
/** Last watcher's stream broke while the task was live: OWNER_LOST after the grace
 * unless a watcher attaches again. Errors: NOT_FOUND. */
wk_err wk_core_handle_watch_disconnected(wk_core *core, const char *task_id, size_t task_id_len,
                                         int64_t now_ms);
/** The watch grace of the task expired: FAILED/OWNER_LOST (CANCEL_TASK, CONVERGE).
 * Errors: NOT_FOUND, STALE (re-attached, terminal, or grace not yet over). */
void wk_core_handle_watch_grace_expired(wk_core *core, const char *task_id, size_t task_id_len,
                                        int64_t now_ms, wk_transition_result *out);

/** The lease of `slot_id` lapsed: an ALLOCATED slot goes FREE; a reservation is
 * forgotten; a task still PREPARING on it converges FAILED/SLOT_LOST. Errors:
 * INVALID_SLOT (no such slot), STALE (generation moved on, slot RUNNING or FREE, or
 * the lease runs past now). */
void wk_core_handle_slot_lease_expired(wk_core *core, uint64_t slot_id, int64_t now_ms,
                                       wk_transition_result *out);

/** The task as it stands (live snapshot or retained terminal result).
 * Errors: NOT_FOUND (unknown, reserved only, or purged). */
wk_err wk_core_get_result(const wk_core *core, const char *task_id, size_t task_id_len,
                          const wk_task_result **result);

/* A live task's settings as the core holds them: the one copy the adapter reads. */
typedef struct wk_task_view {
  void *adapter_ctx; /* as given to wk_core_handle_submit */
  uint64_t slot_id;
  int64_t deadline_ms; /* TASK_TIMEOUT from this moment on */
  wk_call_failure_policy call_failure_policy;
  uint32_t max_failed_calls;
  wk_retry_policy retry;
} wk_task_view;

/** The live (submitted, not yet terminal) task `task_id` as the core holds it, into
 * `out`. Read-only, O(1) expected. Errors: NOT_FOUND (unknown, only reserved, or
 * terminal: a task the core has converged has handed its adapter_ctx back). */
wk_err wk_core_live_task(const wk_core *core, const char *task_id, size_t task_id_len,
                         wk_task_view *out);

/* ---- timers --------------------------------------------------------------- */

/* A task id copied out of the core, for the timer scans. */
typedef struct wk_task_id {
  uint8_t len;
  char bytes[WK_TASK_ID_MAX + 1]; /* NUL-terminated */
} wk_task_id;

/* The scans below return at most WK_CORE_SCAN_MAX items per call, earliest first:
 * call again while they return anything (items handled leave the scan). */
#define WK_CORE_SCAN_MAX 256u

/** Writes up to `max` slot ids whose lease expired at `now_ms` (earliest first) into
 * `out`; returns how many. Read-only: feed each to wk_core_handle_slot_lease_expired. */
size_t wk_core_expired_slots(const wk_core *core, int64_t now_ms, uint64_t *out, size_t max);
/** Up to `max` active tasks past their deadline; feed to wk_core_handle_task_timed_out. */
size_t wk_core_timed_out_tasks(const wk_core *core, int64_t now_ms, wk_task_id *out, size_t max);
/** Up to `max` tasks whose watch grace is over; feed to wk_core_handle_watch_grace_expired. */
size_t wk_core_watch_disconnected_tasks(const wk_core *core, int64_t now_ms, wk_task_id *out,
                                        size_t max);
/** Drops retained results older than the retention; returns how many were purged. */
size_t wk_core_purge_expired_results(wk_core *core, int64_t now_ms);

/* ---- forgotten tasks ------------------------------------------------------- */

/* Told the id (task_id_len bytes, NUL-terminated as well) of each task the core
 * forgets, once, as its record is freed: a retained result evicted by the retention
 * bounds or purged when its retention ends, and a reservation that lapsed or whose
 * lease expired before any submit. From then on the id is unknown (submitted again, it
 * is a new task). It runs inside the entry point that forgot the task and must not
 * call the core. */
typedef void (*wk_core_forget_fn)(void *ud, const char *task_id, size_t task_id_len);

/** Installs `fn` (NULL: none) to be told of every task the core forgets from now on,
 * so that what an adapter keeps per task lives exactly as long as the core's record.
 * wk_core_destroy tells it nothing. */
void wk_core_set_forget_hook(wk_core *core, wk_core_forget_fn fn, void *ud);

/** The earliest moment any timer above fires (INT64_MAX when none): an adapter may
 * sleep until then. */
int64_t wk_core_next_deadline(const wk_core *core);

/* ---- views ---------------------------------------------------------------- */

typedef struct wk_heartbeat {
  uint32_t task_slots;
  uint32_t reserved; /* ALLOCATED */
  uint32_t running;  /* RUNNING */
  uint32_t free;
  bool ready, draining;
  int64_t now_ms;
} wk_heartbeat;

/** The capacity view published to etcd, derived from the slot table. */
wk_heartbeat wk_core_derive_heartbeat(const wk_core *core, int64_t now_ms);

/** Number of tasks submitted and not yet terminal (for drain waits). */
uint32_t wk_core_live_tasks(const wk_core *core);

/** Writes up to `max` ids of live (submitted, not terminal) tasks; returns how many. */
size_t wk_core_list_live_tasks(const wk_core *core, wk_task_id *out, size_t max);

/** Number of retained terminal results and the bytes they hold (records + blobs). */
uint32_t wk_core_retained_count(const wk_core *core);
uint64_t wk_core_retained_bytes(const wk_core *core);

typedef struct wk_slot_view {
  wk_slot_state state;
  uint32_t generation;
  int64_t lease_expires_ms;
  const char *task_id; /* NULL when FREE */
  size_t task_id_len;
} wk_slot_view;

/** The slot at `index` (< task_slots), for inspection and tests. */
wk_slot_view wk_core_slot(const wk_core *core, uint32_t index);

/** Walks every structure and checks that they agree (slot counts, slot ↔ task links,
 * index ↔ records, heaps, retention list, counters). Returns NULL when consistent,
 * else a static description of the first violation. O(slots + tasks): for tests. */
const char *wk_core_check_invariants(const wk_core *core);

#endif

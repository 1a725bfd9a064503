/* wk_executor_pool.c: executor processes, their connections and the call queue.
 * See wk_executor_pool.h for the contract.
 *
 * Ownership: the pool owns executors (freed when both their process handle and timer
 * are closed), connections (freed at close), and calls (freed when their outcome is
 * delivered, or when cancelled and no executor holds them any more). */
#include "adapters/wk_executor_pool.h"

#include "adapters/wk_executor_output.h"
#include "adapters/wk_meminfo.h"
#include "adapters/wk_reaper.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "lib/wk_alloc.h"
#include "lib/wk_assert.h"
#include "lib/wk_err.h"
#include "lib/wk_log.h"

#define READ_CHUNK 65536u
#define CHANNEL_FD 3       /* the executor's end of its socket pair, in the executor */
#define CHANNEL_FD_STR "3" /* the same, for its command line */
#define RESPAWN_DELAY_MIN_MS 50u
#define RESPAWN_DELAY_MAX_MS 5000u
#define MAINTENANCE_MS 50u
#define SPARE_WRITES_MAX 8u            /* write buffers kept for reuse */
#define SPARE_WRITE_CAP_MAX (1u << 20) /* a larger one is freed, not kept */
/* A large frame: a queued CALL this large is written on its own rather than copied into
 * the executor's write buffer (below it, one write for many frames is worth the copy),
 * and a RESULT this large is read to its end (read_size). */
#define LARGE_FRAME_MIN (16u * 1024u)
#define START_FAILURES_MAX 3u /* executors in a row dead before HELLO: unavailable */
#define SWEEP_EVERY_TICKS 20u /* orphans looked for every second (MAINTENANCE_MS) */

typedef struct wk_executor wk_executor;
typedef struct wk_conn wk_conn;
typedef struct wk_write wk_write;

struct wk_pool_call {
  wk_pool_call *prev, *next; /* in the pool's queue, or in its executor's in-flight list */
  void *ctx;
  uint64_t call_id;
  char *task_id; /* for attributing the executor's output (wk_executor_output.h) */
  uint32_t call_index;
  uint64_t seq;     /* its place in its executor's send order (while sent) */
  uint64_t next_ns; /* when it became next to start: sent to an executor with nothing
                       running, or the RESULT of the call before it came (0 = not yet) */
  uint8_t *frame;   /* encoded CALL */
  size_t frame_len;
  uint64_t bytes_in;
  int64_t deadline_ms; /* absolute loop time; 0 = none */
  wk_executor *exec;   /* while sent */
  bool cancelled;      /* by the caller: no outcome */
  bool timed_out;      /* past its deadline: escalating */
  bool stack_requested;
  bool recalling; /* RECALL sent: NOT_STARTED or its real RESULT comes back */
  bool lost;      /* its executor died and it may have run (classified at the exit) */
  int64_t escalated_ms;
  uint32_t waiting; /* SUBCALLS requests not yet answered */
  bool resumed;     /* its subcalls were answered: it may sit under nested calls */
  char *stack;
  size_t stack_len;
  char *function; /* executor_isolation=function: whose call it is (NULL when shared) */
};

struct wk_conn {
  uv_pipe_t pipe;
  wk_pool *pool;
  wk_executor *owner; /* the executor spawned with the other end of this socket pair */
  wk_executor *exec;  /* `owner` once its HELLO came; NULL until then */
  wk_frame_buf rbuf;
  bool closing;
};

struct wk_executor {
  wk_executor *next; /* in the pool's list */
  wk_pool *pool;
  uv_process_t proc;
  wk_exec_output *out;     /* its stdout and stderr, logged; the end of stderr kept */
  uint64_t id;             /* the executor id in its output records */
  int handles;             /* proc and out not yet closed: freed at 0 */
  bool failed_start;       /* exited before HELLO */
  wk_cgroup_group *cgroup; /* its control group (pool->cfg.cgroup), NULL = none */
  bool oom_killed;         /* the kernel killed it for its group's memory limit ... */
  uint64_t memory_max;     /* ... which was this many bytes */
  int64_t exit_status;
  int term_signal;
  wk_conn *conn;    /* its channel once it said HELLO */
  wk_conn *pending; /* its channel before HELLO */
  int pid;
  bool running;  /* process alive */
  bool hello;    /* connected and identified */
  bool retiring; /* no new calls; SHUTDOWN once empty */
  bool shutdown_sent;
  wk_pool_call *head, *tail; /* in flight, in send order */
  uint32_t inflight;
  uint32_t waiting; /* in-flight calls waiting on subcalls */
  uint32_t resumed; /* in-flight calls resumed after subcalls (maybe under nested calls) */
  uint64_t calls_done;
  int64_t last_pong_ms;
  int64_t last_ping_ms;
  int64_t idle_since_ms;
  int64_t spawned_ms; /* loop time of its spawn (its age in the status page) */
  wk_frame_buf wbuf;  /* frames to write at the next flush */
  /* Adaptive pipelining: the executor's time per call (moving average, ns; 0 = not
   * measured yet), from the RESULTs read while it was busy since busy_mark_ns. */
  uint64_t service_ns;
  uint64_t busy_mark_ns; /* 0 = idle */
  /* What it started: the executor writes the id of each call it starts into a shared
   * 8-byte file before running it (executor-protocol.md §7), so the worker knows which
   * sent calls have not started, even after the process died. */
  const volatile uint64_t *started; /* the mapping; NULL when it could not be made */
  char started_path[320];
  uint64_t sent_seq;     /* calls sent on this connection */
  uint64_t started_seen; /* the last value read from `started` */
  uint64_t running_id;   /* the call it runs now: the last started, or a parent resumed since */
  uint64_t progress_ns;  /* when `started` was last seen to change, or a parent resumed */
  /* executor_isolation=function: the function it serves, from its first call on (NULL =
   * none yet: a fresh executor); it runs no other function's call, ever */
  char *bound;
  bool isolation_victim; /* retired to make room for a function without executor */
};

struct wk_pool {
  uv_loop_t *loop;
  wk_pool_config cfg;
  char *python, *script, *python_path;
  char **env;   /* the configured NAME=VALUE entries (wk_pool_config.env), NULL-terminated */
  size_t env_n; /* how many */
  wk_exec_callbacks cb;
  char dir[256];
  uv_timer_t maintenance;
  uv_idle_t flusher; /* writes the frames queued during this loop turn, once */
  uint32_t respawn_delay_ms;
  int64_t respawn_at_ms;
  wk_executor *executors;
  uint32_t n_structs; /* executors not yet freed */
  uint32_t n_running;
  uint32_t n_ready;
  uint32_t n_starting;     /* spawned, no HELLO yet */
  uint32_t start_failures; /* executors in a row that exited before HELLO */
  bool sched_warned;       /* executor_sched_batch_failed was logged */
  int64_t start_ms;        /* an executor's start (spawn to HELLO), averaged; 0 = none yet */
  char start_error[WK_POOL_UNAVAILABLE_MAX]; /* the last of them, described */
  bool failing;                              /* fail_queued is running */
  uint64_t next_call_id;
  uint64_t ping_nonce;
  wk_pool_call *queue_head, *queue_tail;
  uint32_t queued;
  wk_write *spare_writes; /* finished writes, their buffers kept for the next flush */
  uint32_t n_spare_writes;
  bool in_read; /* inside on_read, which writes every executor's frames at its end */
  wk_pool_stats stats;
  bool stopping;
  int64_t switch_window_ms; /* isolation: when the current count of switches began */
  uint32_t switches;        /* executors recycled for isolation since switch_window_ms */
  int64_t switch_warned_ms; /* the last executor_isolation_switching warning */
  int64_t stop_started_ms;
  void (*stop_done)(void *);
  void *stop_arg;
  int handles_open;
  uint32_t ticks;  /* maintenance ticks, for the periodic orphan sweep */
  bool sweep_soon; /* the last sweep signalled orphans: their children come next */
};

/* Calls an executor is busy with: waiting parents run nested calls, and resumed
 * parents may be stuck under nested calls that need more calls to finish, so neither
 * counts (the same rule as DispatcherCore's admission). */
static uint32_t active(const wk_executor *e) { return e->inflight - e->waiting - e->resumed; }

/* Adaptive pipelining: an executor is sent about PIPELINE_QUEUED_NS of work ahead (its
 * measured time per call), at least one call and at most pipeline_depth. Short calls
 * get the whole depth (a no-op call costs microseconds only when pipelined); long ones
 * are sent one at a time, so calls wait in the DispatcherCore, fairly across tasks, and
 * a new or idle executor finds work instead of a queue stuck behind a slow call. Until
 * its first RESULTs an executor gets PIPELINE_START.
 *
 * Calls up to PIPELINE_AHEAD_MAX_NS get one call more, of whichever task comes next:
 * it starts the moment the running one ends, instead of after the RESULT's round trip
 * to the worker and the CALL's back (about 1 ms on a busy machine: 10 ms calls ran at
 * 0.83 of the executors' capacity with one call each, see bench/bench_hotpath.py). It
 * waits at most that long behind the running call; longer calls stay one at a time
 * (one queued behind a call that turns out long is taken back after TAKE_BACK_NS). */
enum { PIPELINE_START = 2, PIPELINE_AHEAD = 2 };
#define PIPELINE_QUEUED_NS 2000000u
#define PIPELINE_AHEAD_MAX_NS 25000000u

static uint32_t depth_of(const wk_pool *pool, const wk_executor *e) {
  uint32_t max = pool->cfg.pipeline_depth;
  uint64_t d = e->service_ns ? PIPELINE_QUEUED_NS / e->service_ns : PIPELINE_START;
  if (d < PIPELINE_AHEAD && e->service_ns <= PIPELINE_AHEAD_MAX_NS) d = PIPELINE_AHEAD;
  if (d < 1) d = 1;
  return d < max ? (uint32_t)d : max;
}

/* `n` RESULTs were just read from `e`: updates its time per call (the time since it
 * became busy or since its previous RESULTs, shared among them). */
static void measure_service(wk_executor *e, uint64_t n, uint64_t mark_ns) {
  uint64_t now = uv_hrtime();
  /* mark_ns: the mark before these RESULTs were handled (their callbacks may have sent
   * the idle executor a new call, which moves the mark to now: measured from there,
   * every call would look free and the depth would grow behind slow calls) */
  if (n > 0 && mark_ns) {
    uint64_t per_call = (now - mark_ns) / n;
    if (per_call == 0) per_call = 1;
    e->service_ns = e->service_ns ? (e->service_ns * 7 + per_call) / 8 : per_call;
  }
  if (n > 0 || !e->inflight) e->busy_mark_ns = e->inflight ? now : 0;
}

/* The sent call named `call_id` (0: none) still without a RESULT, or NULL. */
static wk_pool_call *inflight_call(const wk_executor *e, uint64_t call_id) {
  if (!call_id) return NULL;
  for (wk_pool_call *c = e->head; c; c = c->next) {
    if (c->call_id == call_id) return c;
  }
  return NULL;
}

/* The sent call the executor is running now, or NULL: the last one it started, or a
 * parent whose subcalls were answered since (it runs on once the nested calls under it
 * have returned; the started file names only the last call that began). */
static wk_pool_call *running_call(const wk_executor *e) { return inflight_call(e, e->running_id); }

/* Reads what the executor last started. When it changed, its start is dated: when
 * that call became next in line (sent to an executor running nothing, or the RESULT
 * before it came), else now. A late look thus does not make a long call look new. */
static void observe(wk_executor *e, uint64_t now_ns) {
  if (!e->started) return;
  uint64_t id = __atomic_load_n(e->started, __ATOMIC_ACQUIRE);
  if (id == e->started_seen) return;
  e->started_seen = id;
  e->running_id = id;
  const wk_pool_call *r = running_call(e);
  e->progress_ns = (r && r->next_ns && r->next_ns <= now_ns) ? r->next_ns : now_ns;
}

/* The first call of `e` that is neither waiting for subcalls nor resumed is next to
 * start (or running): dates it, once. */
static void mark_next(wk_executor *e, uint64_t now_ns) {
  for (wk_pool_call *c = e->head; c; c = c->next) {
    if (c->waiting || c->resumed) continue;
    if (!c->next_ns) c->next_ns = now_ns;
    return;
  }
}

/* A call that has run longer than the pipeline's time budget (PIPELINE_QUEUED_NS)
 * makes its executor "busy with a long call": nothing more is sent to it. Calls queued
 * behind it before it turned out long are taken back once it has run TAKE_BACK_NS (a
 * few maintenance ticks' worth of patience would be wasted on calls that could run
 * elsewhere now). */
#define TAKE_BACK_NS 40000000u

/* True when a call sent to `e` now would not start within `budget_ns`: its running
 * call (not one waiting for subcalls, which lets nested calls run) was cancelled, is
 * past its deadline (the executor may well be killed under it), or has run longer
 * than the budget as far as the started file shows. */
static bool blocked(wk_executor *e, uint64_t budget_ns) {
  uint64_t now_ns = uv_hrtime();
  observe(e, now_ns);
  const wk_pool_call *r = running_call(e);
  if (!r || r->waiting) return false;
  if (r->cancelled || r->timed_out) return true;
  if (r->deadline_ms && (int64_t)uv_now(e->pool->loop) >= r->deadline_ms) return true;
  return now_ns - e->progress_ns > budget_ns;
}

static void dispatch(wk_pool *pool);
static void steal_for_idle(wk_pool *pool, wk_executor *idle);
static void maybe_finish_stop(wk_pool *pool);
static void spawn_if_needed(wk_pool *pool);
static uint32_t executors_cap(const wk_pool *pool);

static int64_t now_ms(const wk_pool *pool) { return (int64_t)uv_now(pool->loop); }

/* ---- call lists --------------------------------------------------------------- */

static void list_push(wk_pool_call **head, wk_pool_call **tail, wk_pool_call *c) {
  c->next = NULL;
  c->prev = *tail;
  if (*tail) {
    (*tail)->next = c;
  } else {
    *head = c;
  }
  *tail = c;
}

static void list_remove(wk_pool_call **head, wk_pool_call **tail, wk_pool_call *c) {
  if (c->prev) {
    c->prev->next = c->next;
  } else {
    *head = c->next;
  }
  if (c->next) {
    c->next->prev = c->prev;
  } else {
    *tail = c->prev;
  }
  c->prev = c->next = NULL;
}

static void free_call(wk_pool_call *c) {
  free(c->function);
  free(c->frame);
  free(c->task_id);
  free(c->stack);
  free(c);
}

/* Takes a sent call off its executor. */
static void detach(wk_pool_call *c) {
  wk_executor *e = c->exec;
  WK_ASSERT(e != NULL); /* sent: on its executor's in-flight list */
  WK_ASSERT(e->inflight > 0);
  WK_ASSERT(c->waiting == 0 || e->waiting > 0);
  WK_ASSERT(!c->resumed || e->resumed > 0);
  list_remove(&e->head, &e->tail, c);
  e->inflight--;
  if (c->recalling) c->recalling = false;
  if (c->waiting) e->waiting--;
  if (c->resumed) e->resumed--;
  c->waiting = 0;
  c->resumed = false;
  c->exec = NULL;
  if (e->inflight == 0) e->idle_since_ms = now_ms(e->pool);
}

/* ---- writes --------------------------------------------------------------------- */

/* One write in flight. Its buffer is the executor's wbuf of the moment (swapped, not
 * copied); once written, it is cleared and kept for a later flush, so the steady state
 * allocates nothing. Or it writes one large queued CALL frame of its own (`frame`), so
 * the frame's bytes (an argument's) are not copied again into a wbuf. */
struct wk_write {
  uv_write_t req;
  wk_pool *pool;
  wk_write *next; /* in pool->spare_writes */
  wk_frame_buf buf;
  uint8_t *frame; /* owned: written instead of buf, freed once written; or NULL */
};

static void release_write(wk_write *w) {
  wk_pool *pool = w->pool;
  free(w->frame);
  w->frame = NULL;
  if (pool->n_spare_writes >= SPARE_WRITES_MAX || w->buf.cap > SPARE_WRITE_CAP_MAX) {
    wk_frame_buf_free(&w->buf);
    free(w);
    return;
  }
  wk_frame_buf_clear(&w->buf);
  w->next = pool->spare_writes;
  pool->spare_writes = w;
  pool->n_spare_writes++;
}

static void on_write(uv_write_t *req, int status) {
  (void)status; /* a failed write shows up as a read error / exit as well */
  release_write(req->data);
}

/* A spare write, or a new one. */
static wk_write *take_write(wk_pool *pool) {
  wk_write *w = pool->spare_writes;
  if (w) {
    pool->spare_writes = w->next;
    pool->n_spare_writes--;
    return w;
  }
  w = wk_xcalloc(1, sizeof *w);
  w->pool = pool;
  wk_frame_buf_init(&w->buf, NULL);
  return w;
}

/* Writes len bytes at p (held by w) to c's pipe; w is released once written. */
static void start_write(wk_write *w, wk_conn *c, const uint8_t *p, size_t len) {
  w->req.data = w;
  uv_buf_t buf = uv_buf_init((char *)(uintptr_t)p, (unsigned)len);
  if (uv_write(&w->req, (uv_stream_t *)&c->pipe, &buf, 1, on_write) != 0) release_write(w);
}

/* Writes what of len bytes at p c's pipe takes now, without waiting, and returns how
 * many: 0 when a queued write is ahead of them (order is kept) or the socket is full;
 * len when the pipe failed (the failure shows up as a read error or the executor's
 * exit, as it does for a queued write). Most flushes fit the socket at once: written
 * here they need no write request, and libuv re-arms a pipe's epoll interest (an
 * epoll_ctl) after each queued write it completes. */
static size_t write_now(wk_conn *c, const uint8_t *p, size_t len) {
  uv_buf_t buf = uv_buf_init((char *)(uintptr_t)p, (unsigned)len);
  int n = uv_try_write((uv_stream_t *)&c->pipe, &buf, 1);
  if (n >= 0) return (size_t)n;
  return n == UV_EAGAIN ? 0 : len;
}

static void flush(wk_executor *e) {
  size_t len = wk_frame_buf_size(&e->wbuf);
  if (len == 0) return;
  wk_conn *c = e->conn;
  if (!c || c->closing) {
    wk_frame_buf_clear(&e->wbuf);
    return;
  }
  size_t done = write_now(c, wk_frame_buf_bytes(&e->wbuf), len);
  if (done == len) { /* kept for the next flush, unless a burst made it large */
    if (e->wbuf.cap > SPARE_WRITE_CAP_MAX) wk_frame_buf_free(&e->wbuf);
    wk_frame_buf_clear(&e->wbuf);
    return;
  }
  wk_write *w = take_write(e->pool);
  wk_frame_buf spare = w->buf; /* empty */
  w->buf = e->wbuf;
  e->wbuf = spare;
  start_write(w, c, wk_frame_buf_bytes(&w->buf) + done, len - done);
}

/* Writes a large queued CALL frame (owned; freed once written) to e on its own, after
 * whatever e's buffer holds: its bytes are not copied into the buffer. */
static void write_frame_alone(wk_executor *e, uint8_t *frame, size_t len) {
  flush(e); /* what was queued before it goes first: libuv keeps a stream's writes in order */
  wk_conn *c = e->conn;
  if (!c || c->closing) {
    free(frame);
    return;
  }
  size_t done = write_now(c, frame, len);
  if (done == len) {
    free(frame);
    return;
  }
  wk_write *w = take_write(e->pool);
  w->frame = frame;
  start_write(w, c, frame + done, len - done);
}

/* Writes every executor's queued frames. */
static void flush_all(wk_pool *pool) {
  for (wk_executor *e = pool->executors; e; e = e->next) flush(e);
}

static void queue_frame(wk_executor *e, const wk_frame *f) {
  if (wk_frame_encode(&e->wbuf, f, e->pool->cfg.max_frame) != WK_FRAME_OK) {
    wk_log(WK_LOG_ERROR, "executor_protocol", "cannot encode a %s frame",
           wk_frame_type_name(f->type));
  }
}

/* ---- outcomes ----------------------------------------------------------------- */

static void deliver(wk_pool *pool, wk_pool_call *c, const wk_call_outcome *o) {
  WK_ASSERT(c->exec == NULL); /* off its executor (and the queue): one outcome per call */
  WK_ASSERT(c->prev == NULL && c->next == NULL);
  pool->stats.results++;
  if (!c->cancelled) pool->cb.on_result(pool->cb.ud, c->ctx, o);
  free_call(c);
}

static void deliver_lost(wk_pool *pool, wk_pool_call *c, const wk_executor *e, const char *why) {
  if (c->timed_out) {
    char msg[200];
    int n = snprintf(msg, sizeof msg,
                     "the call ran past its deadline and did not stop when cancelled; "
                     "its executor (pid %d) was killed",
                     e->pid);
    wk_call_outcome o = {
        .status = WK_CALL_TIMEOUT,
        .error_type = wk_frame_bytes_cstr("DeadlineExceeded"),
        .error_message = {(const uint8_t *)msg, (uint32_t)(n > 0 ? n : 0)},
        .traceback = {(const uint8_t *)c->stack, (uint32_t)c->stack_len},
        .bytes_in = c->bytes_in,
    };
    deliver(pool, c, &o);
    return;
  }
  char msg[200];
  int n = e->oom_killed
              ? snprintf(msg, sizeof msg,
                         "the executor (pid %d) running this call was killed by the kernel: its "
                         "memory reached executor_memory_max (%llu bytes)",
                         e->pid, (unsigned long long)e->memory_max)
              : snprintf(msg, sizeof msg, "the executor (pid %d) running this call was lost: %s",
                         e->pid, why);
  wk_call_outcome o = {
      .status = WK_CALL_EXECUTOR_LOST,
      .error_type = wk_frame_bytes_cstr(e->oom_killed ? "MemoryLimit" : "ExecutorLost"),
      .error_message = {(const uint8_t *)msg, (uint32_t)(n > 0 ? n : 0)},
      .bytes_in = c->bytes_in,
  };
  deliver(pool, c, &o);
}

/* ---- executors: lifecycle ------------------------------------------------------ */

/* Sets this thread's timer slack to `ns` (at least 1: 0 would mean "the default");
 * returns the one it had, -1 when it cannot be read. A child forked meanwhile keeps
 * `ns` across exec, and its threads inherit it (wk_pool_config.timer_slack_ns). */
static int set_timer_slack(uint64_t ns) {
  int had = prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0);
  (void)prctl(PR_SET_TIMERSLACK, (unsigned long)(ns ? ns : 1), 0, 0, 0);
  return had;
}

/* Puts a just-spawned executor under SCHED_BATCH (wk_pool_config.sched_batch). uv_spawn
 * returns once the child has exec'd, before the interpreter starts the executor's
 * threads: they inherit the policy, as do the processes its calls start (what it
 * saves is measured in the README's "Performance"). A host that refuses it (a seccomp
 * filter) leaves the default policy: warned once, executors still start. */
static void set_sched_batch(wk_pool *pool, pid_t pid) {
  struct sched_param sp = {.sched_priority = 0};
  if (sched_setscheduler(pid, SCHED_BATCH, &sp) == 0 || pool->sched_warned) return;
  pool->sched_warned = true;
  wk_log(WK_LOG_WARN, "executor_sched_batch_failed",
         "cannot put executor %d under SCHED_BATCH: %s; executors run under the default "
         "policy (set executor_sched_batch false to silence this)",
         (int)pid, strerror(errno));
}

static void kill_executor(wk_executor *e, const char *reason) {
  if (!e->running) return;
  if (!e->pool->stopping) {
    wk_log_json(WK_LOG_WARN, "executor_killed",
                json_pack("{s:i,s:s}", "pid", e->pid, "reason", reason));
  }
  uv_process_kill(&e->proc, SIGKILL);
  /* its session's process group: what its calls started and did not leave it (those
   * that did come back to the worker when it dies: wk_reaper). Not reaped yet, so the
   * group id is still its own. */
  kill(-e->pid, SIGKILL);
}

/* Ends orphans of executors (wk_reaper.h): one pass now; while a pass signals
 * something, the next maintenance tick looks again for the children they leave. */
static void sweep(wk_pool *pool) { pool->sweep_soon = wk_reaper_sweep(false) > 0; }

static void retire(wk_executor *e, const char *reason, uint64_t *counter) {
  if (e->retiring) return;
  e->retiring = true;
  if (counter) (*counter)++;
  wk_log_json(WK_LOG_INFO, "executor_recycled",
              json_pack("{s:i,s:s,s:I}", "pid", e->pid, "reason", reason, "calls",
                        (json_int_t)e->calls_done));
  if (e->conn && !e->conn->closing) e->pool->n_ready--;
}

static void on_conn_closed(uv_handle_t *h) {
  wk_conn *c = h->data;
  wk_pool *pool = c->pool;
  wk_frame_buf_free(&c->rbuf);
  free(c);
  pool->handles_open--;
  maybe_finish_stop(pool);
}

static void conn_close(wk_conn *c) {
  if (c->closing) return;
  c->closing = true;
  if (c->owner && c->owner->pending == c) c->owner->pending = NULL;
  c->owner = NULL;
  wk_executor *e = c->exec;
  if (e) {
    if (!e->retiring) c->pool->n_ready--;
    e->conn = NULL;
    c->exec = NULL;
    /* while stopping, executors hang up on their way out; the stop timer kills stragglers */
    if (!c->pool->stopping && !e->shutdown_sent) kill_executor(e, "its connection closed");
  }
  uv_read_stop((uv_stream_t *)&c->pipe);
  uv_close((uv_handle_t *)&c->pipe, on_conn_closed);
}

static void executor_free(wk_executor *e) {
  wk_pool *pool = e->pool;
  for (wk_executor **p = &pool->executors; *p; p = &(*p)->next) {
    if (*p == e) {
      *p = e->next;
      break;
    }
  }
  wk_frame_buf_free(&e->wbuf);
  wk_exec_output_free(e->out); /* its pipes closed: e->handles counted them */
  free(e->bound);
  if (e->started) munmap((void *)(uintptr_t)e->started, sizeof *e->started);
  if (e->started_path[0]) unlink(e->started_path);
  if (e->cgroup) wk_cgroup_release(e->cgroup);
  pool->n_structs--;
  free(e);
  maybe_finish_stop(pool);
}

/* Both handles of an executor are closed: it goes. */
static void on_exec_handle_closed(uv_handle_t *h) {
  wk_executor *e = h->data;
  e->pool->handles_open--;
  if (--e->handles == 0) executor_free(e);
}

/* `e` exited before HELLO: pool->start_error says how, with the end of its stderr. */
static void describe_start_failure(wk_pool *pool, const wk_executor *e) {
  uint32_t from = 0, len;
  const char *tail = wk_exec_output_tail(e->out, &len);
  while (len > 0 && (tail[len - 1] == '\n' || tail[len - 1] == ' ')) len--;
  if (len > 160) from = len - 160; /* the message must fit a call's failure text */
  snprintf(pool->start_error, sizeof pool->start_error,
           "executors cannot start: %s exited with status %lld (signal %d) before it "
           "connected, %u starts in a row; %s%.*s (executor script %s)",
           pool->python, (long long)e->exit_status, e->term_signal, pool->start_failures,
           len ? "the end of its stderr: " : "its stderr was empty", (int)(len - from), tail + from,
           pool->script);
}

/* Output hooks (wk_executor_output.h): the call `e` runs, for its output's records. */
static bool output_running(void *arg, wk_exec_output_call *call) {
  wk_executor *e = arg;
  observe(e, uv_hrtime());
  const wk_pool_call *r = running_call(e);
  if (!r) return false;
  *call = (wk_exec_output_call){
      .task_id = r->task_id, .call_index = r->call_index, .call_id = r->call_id};
  return true;
}

/* Its output pipes are closed: one handle of `e` fewer. */
static void output_closed(void *arg) {
  wk_executor *e = arg;
  e->pool->handles_open--;
  if (--e->handles == 0) executor_free(e);
}

static void read_frames(wk_conn *c);
static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf);
static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf);

/* Bytes to read next: READ_CHUNK, or only the rest of a large frame (a 64 KiB output)
 * already begun in the buffer. A read that went on past that frame's end would leave
 * the next frame's start at the buffer's end, and the room for the read after it would
 * be made by moving that start (up to READ_CHUNK bytes) to the front: reading to the
 * frame's end empties the buffer once it is decoded, and the next frame lands at the
 * front. Small frames (a no-op's RESULT) keep being read many at a time. */
static size_t read_size(const wk_conn *c) {
  uint64_t total, rest;
  if (wk_frame_buf_partial(&c->rbuf, &total, &rest) && total >= LARGE_FRAME_MIN &&
      rest < READ_CHUNK)
    return (size_t)rest;
  return READ_CHUNK;
}

/* Reads what the socket still holds (the peer is gone: no waiting) and handles it. */
static void drain(wk_conn *c) {
  uv_os_fd_t fd;
  if (c->closing || uv_fileno((const uv_handle_t *)&c->pipe, &fd) != 0) return;
  for (;;) {
    size_t want = read_size(c);
    uint8_t *at = wk_frame_buf_reserve(&c->rbuf, want);
    ssize_t n = recv(fd, at, want, MSG_DONTWAIT);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    wk_frame_buf_commit(&c->rbuf, (size_t)n);
    read_frames(c);
    if (c->closing) break;
  }
}

/* Its executor died: the calls it had started (the last one it marked started, every
 * one sent before it, and parents waiting on subcalls) may have run and end
 * EXECUTOR_LOST (TIMEOUT when past their deadline); the others never started and go
 * back to the caller NOT_STARTED, to run elsewhere. The lost ones are delivered first:
 * a task they fail cancels its own calls before they are sent again. */
static void settle_calls(wk_pool *pool, wk_executor *e, const char *why) {
  if (e->started) e->started_seen = __atomic_load_n(e->started, __ATOMIC_ACQUIRE);
  const wk_pool_call *r = inflight_call(e, e->started_seen); /* the last one started */
  bool before = r != NULL; /* still at or before the running call in send order */
  for (wk_pool_call *c = e->head; c; c = c->next) {
    c->lost = before || c->waiting || c->resumed || !e->started;
    if (c == r) before = false;
  }
  for (wk_pool_call *c = e->head, *next; c; c = next) {
    next = c->next;
    if (!c->lost) continue;
    detach(c);
    deliver_lost(pool, c, e, why);
  }
  while (e->head) {
    wk_pool_call *c = e->head;
    detach(c);
    wk_call_outcome o = {.status = WK_CALL_NOT_STARTED, .bytes_in = c->bytes_in};
    deliver(pool, c, &o);
  }
}

static void on_process_exit(uv_process_t *proc, int64_t exit_status, int term_signal) {
  wk_executor *e = proc->data;
  wk_pool *pool = e->pool;
  wk_reaper_disown(e->pid); /* libuv reaped it */
  e->running = false;
  pool->n_running--;
  pool->stats.exited++;
  e->exit_status = exit_status;
  e->term_signal = term_signal;
  wk_exec_output_finish(e->out); /* what it wrote before it died, and its stderr's end */
  if (!e->hello) {
    pool->n_starting--; /* died before it said HELLO */
    if (!pool->stopping) {
      pool->start_failures++;
      e->failed_start = true;
      describe_start_failure(pool, e);
    }
  }
  /* everything it wrote before it died is still in the socket: RESULTs of calls it
   * finished count, whatever killed it */
  if (e->conn) drain(e->conn);
  if (e->conn) conn_close(e->conn);
  if (e->pending) conn_close(e->pending);
  if (!pool->stopping && !e->shutdown_sent) {
    wk_log_json(WK_LOG_WARN, "executor_exited",
                json_pack("{s:I,s:i,s:I,s:i}", "executor", (json_int_t)e->id, "pid", e->pid,
                          "exit_status", (json_int_t)exit_status, "signal", term_signal));
  }
  if (e->cgroup) {
    /* an OOM kill is a SIGKILL the kernel sent because of the group's limit */
    e->oom_killed = term_signal == SIGKILL && wk_cgroup_oom_kills(e->cgroup) > 0;
    e->memory_max = wk_cgroup_memory_max(e->cgroup);
    wk_cgroup_release(e->cgroup); /* what it left running goes with it */
    e->cgroup = NULL;
    if (e->oom_killed) {
      wk_log_json(
          WK_LOG_WARN, "executor_memory_limit",
          json_pack("{s:i,s:I}", "pid", e->pid, "executor_memory_max", (json_int_t)e->memory_max));
    }
  }
  char why[80];
  snprintf(why, sizeof why, "exit status %lld, signal %d", (long long)exit_status, term_signal);
  settle_calls(pool, e, why);
  kill(-e->pid, SIGKILL); /* its process group, what is left of it */
  sweep(pool);            /* its children are the worker's now */
  uv_close((uv_handle_t *)proc, on_exec_handle_closed);
  if (!pool->stopping) {
    if (!e->shutdown_sent) {
      /* back off when executors die young (bad interpreter, broken code path) */
      pool->respawn_delay_ms =
          pool->respawn_delay_ms ? pool->respawn_delay_ms * 2 : RESPAWN_DELAY_MIN_MS;
      if (pool->respawn_delay_ms > RESPAWN_DELAY_MAX_MS)
        pool->respawn_delay_ms = RESPAWN_DELAY_MAX_MS;
      pool->respawn_at_ms = now_ms(pool) + pool->respawn_delay_ms;
    }
    spawn_if_needed(pool);
  }
  dispatch(pool);
}

/* Creates and maps the executor's started-call file in the pool's private directory.
 * Without it (no space, no memory) the executor runs anyway, and a death fails all of
 * its calls as before. */
static void open_started_file(wk_pool *pool, wk_executor *e) {
  static uint64_t seq;
  snprintf(e->started_path, sizeof e->started_path, "%s/started-%llu", pool->dir,
           (unsigned long long)++seq);
  int fd = open(e->started_path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    e->started_path[0] = '\0';
    return;
  }
  void *m = MAP_FAILED;
  bool owned = pool->cfg.uid == 0 || fchown(fd, (uid_t)pool->cfg.uid, (gid_t)pool->cfg.gid) == 0;
  if (owned && ftruncate(fd, (off_t)sizeof(uint64_t)) == 0)
    m = mmap(NULL, sizeof(uint64_t), PROT_READ, MAP_SHARED, fd, 0);
  close(fd);
  if (m == MAP_FAILED) {
    unlink(e->started_path);
    e->started_path[0] = '\0';
    return;
  }
  e->started = m;
}

/* Frees the strings the pool copied from its configuration. */
static void free_strings(wk_pool *pool) {
  free(pool->python);
  free(pool->script);
  free(pool->python_path);
  for (size_t i = 0; i < pool->env_n; i++) free(pool->env[i]);
  free(pool->env);
}

static int spawn_one(wk_pool *pool, char *err, size_t err_len) {
  wk_executor *e = wk_xcalloc(1, sizeof *e);
  e->pool = pool;
  wk_frame_buf_init(&e->wbuf, NULL);
  char pythonpath[4200];
  snprintf(pythonpath, sizeof pythonpath, "PYTHONPATH=%s", pool->python_path);
  char home[sizeof pool->dir + 8];
  snprintf(home, sizeof home, "HOME=%s", pool->dir);
  static char path_var[] = "PATH=/usr/local/bin:/usr/bin:/bin";
  static char lang_var[] = "LANG=C.UTF-8";
  static char nobytecode_var[] = "PYTHONDONTWRITEBYTECODE=1";
  static char unbuffered_var[] = "PYTHONUNBUFFERED=1";
  /* a scrubbed environment: nothing of the worker's leaks into user code but what the
   * operator configured (executor_env), which may replace PATH and LANG */
  enum { BASE_ENV = 6 };
  char **env = wk_xcalloc(BASE_ENV + pool->env_n + 1, sizeof *env);
  char *base[BASE_ENV] = {path_var, lang_var, pythonpath, home, nobytecode_var, unbuffered_var};
  memcpy(env, base, sizeof base);
  size_t env_n = BASE_ENV;
  for (size_t i = 0; i < pool->env_n; i++) {
    char *v = pool->env[i];
    if (strncmp(v, "PATH=", 5) == 0) {
      env[0] = v;
    } else if (strncmp(v, "LANG=", 5) == 0) {
      env[1] = v;
    } else {
      env[env_n++] = v;
    }
  }
  char as[32], nofile[32], cpu[32], nproc[32], max_frame[32];
  snprintf(as, sizeof as, "%llu", (unsigned long long)pool->cfg.rlimit_as_mb);
  snprintf(nofile, sizeof nofile, "%llu", (unsigned long long)pool->cfg.rlimit_nofile);
  snprintf(cpu, sizeof cpu, "%llu", (unsigned long long)pool->cfg.rlimit_cpu_s);
  snprintf(nproc, sizeof nproc, "%llu", (unsigned long long)pool->cfg.rlimit_nproc);
  snprintf(max_frame, sizeof max_frame, "%u", pool->cfg.max_frame);
  static char f_channel[] = "--channel-fd", channel_fd[] = CHANNEL_FD_STR,
              f_as[] = "--rlimit-as-mb", f_nofile[] = "--rlimit-nofile", f_cpu[] = "--rlimit-cpu-s",
              f_nproc[] = "--rlimit-nproc", f_frame[] = "--max-frame",
              f_started[] = "--started-file";
  /* its control group, made before it exists: no executor runs without its limits */
  if (pool->cfg.cgroup && !(e->cgroup = wk_cgroup_create(pool->cfg.cgroup, err, err_len))) {
    wk_frame_buf_free(&e->wbuf);
    free(e);
    free(env);
    return -1;
  }
  /* its channel: a connected pair, one end for each; nothing another process can reach */
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
    wk_errf(err, err_len, "cannot create an executor's socket pair: %s", strerror(errno));
    if (e->cgroup) wk_cgroup_release(e->cgroup);
    wk_frame_buf_free(&e->wbuf);
    free(e);
    free(env);
    return -1;
  }
  open_started_file(pool, e);
  char *args[] = {pool->python, pool->script, f_channel, channel_fd, f_as,    as,
                  f_nofile,     nofile,       f_cpu,     cpu,        f_nproc, nproc,
                  f_frame,      max_frame,    NULL,      NULL,       NULL};
  if (e->started) {
    args[14] = f_started;
    args[15] = e->started_path;
  }
  e->out = wk_exec_output_new(pool->loop, &pool->cfg.output, &pool->stats.output,
                              (wk_exec_output_hooks){e, output_running, output_closed});
  e->handles = 2;
  uv_stdio_container_t stdio[CHANNEL_FD + 1] = {
      {.flags = UV_IGNORE},
      {.flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE, .data.stream = wk_exec_output_pipe(e->out, 1)},
      {.flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE, .data.stream = wk_exec_output_pipe(e->out, 2)},
      [CHANNEL_FD] = {.flags = UV_INHERIT_FD, .data.fd = sv[1]},
  };
  uv_process_options_t opt = {
      /* its own session and process group (setsid): killing the group ends what its
       * calls started, and the worker's terminal signals do not reach it */
      .flags = UV_PROCESS_DETACHED,
      .exit_cb = on_process_exit,
      .file = pool->python,
      .args = args,
      .env = env,
      .stdio_count = CHANNEL_FD + 1,
      .stdio = stdio,
  };
  if (pool->cfg.uid != 0) { /* executor_user: libuv also drops supplementary groups */
    opt.flags |= UV_PROCESS_SETUID | UV_PROCESS_SETGID;
    opt.uid = (uv_uid_t)pool->cfg.uid;
    opt.gid = (uv_gid_t)pool->cfg.gid;
  }
  e->proc.data = e;
  int saved_slack = pool->cfg.timer_slack_ns ? set_timer_slack(pool->cfg.timer_slack_ns) : -1;
  int rc = uv_spawn(pool->loop, &e->proc, &opt);
  if (saved_slack >= 0) set_timer_slack((uint64_t)saved_slack);
  free(env);    /* the array; its strings are the pool's */
  close(sv[1]); /* the child's end is the child's alone */
  if (rc != 0) {
    close(sv[0]);
    wk_errf(err, err_len, "cannot start executor %s %s: %s", pool->python, pool->script,
            uv_strerror(rc));
    pool->handles_open += 2;
    pool->n_structs++;
    e->next = pool->executors;
    pool->executors = e;
    uv_close((uv_handle_t *)&e->proc, on_exec_handle_closed);
    wk_exec_output_finish(e->out);
    return -1;
  }
  pool->handles_open += 2;
  wk_reaper_own(e->proc.pid); /* libuv waits for it: a sweep must not */
  e->pid = e->proc.pid;
  if (pool->cfg.sched_batch) set_sched_batch(pool, e->pid);
  e->id = wk_exec_output_start(e->out, e->pid);
  char cg_err[256];
  if (e->cgroup && wk_cgroup_attach(e->cgroup, e->pid, cg_err, sizeof cg_err) != 0) {
    /* into its group before its HELLO, so before any call; else it never runs one */
    wk_log(WK_LOG_ERROR, "executor_cgroup_failed", "%s", cg_err);
    uv_process_kill(&e->proc, SIGKILL);
  }
  wk_conn *c = wk_xcalloc(1, sizeof *c);
  c->pool = pool;
  c->owner = e;
  wk_frame_buf_init(&c->rbuf, NULL);
  uv_pipe_init(pool->loop, &c->pipe, 0);
  c->pipe.data = c;
  pool->handles_open++;
  e->pending = c;
  bool opened = uv_pipe_open(&c->pipe, sv[0]) == 0;
  if (!opened) close(sv[0]);
  if (!opened || uv_read_start((uv_stream_t *)&c->pipe, on_alloc, on_read) != 0) {
    /* without its channel it never says HELLO: it counts as a failed start */
    conn_close(c);
    uv_process_kill(&e->proc, SIGKILL);
  }
  e->running = true;
  e->idle_since_ms = e->last_pong_ms = e->spawned_ms = now_ms(pool);
  e->next = pool->executors;
  pool->executors = e;
  pool->n_structs++;
  pool->n_running++;
  pool->n_starting++;
  pool->stats.spawned++;
  return 0;
}

/* Keeps executors_min running, and grows toward executors_max (executors_cap) while
 * every ready executor has work queued behind the call it is running. One start at a
 * time. */
static void spawn_if_needed(wk_pool *pool) {
  if (pool->stopping || now_ms(pool) < pool->respawn_at_ms) return;
  uint32_t live = 0, ready = 0, backed_up = 0;
  for (const wk_executor *e = pool->executors; e; e = e->next) {
    if (!e->running || e->retiring) continue; /* retiring ones are being replaced */
    live++;
    if (!e->conn) continue;
    ready++;
    if (active(e) >= 2) backed_up++;
  }
  uint32_t want = pool->cfg.executors_min;
  bool demand = (ready > 0 && backed_up == ready) || pool->queued > 0;
  if (demand && pool->n_starting == 0 && live < executors_cap(pool) && live + 1 > want)
    want = live + 1;
  char err[256];
  while (live < want) {
    if (spawn_one(pool, err, sizeof err) != 0) {
      wk_log(WK_LOG_ERROR, "executor_spawn_failed", "%s", err);
      pool->respawn_at_ms = now_ms(pool) + RESPAWN_DELAY_MAX_MS;
      return;
    }
    live++;
  }
}

/* ---- reading ---------------------------------------------------------------------- */

static void handle_result(wk_executor *e, const wk_frame_result *r) {
  wk_pool *pool = e->pool;
  wk_pool_call *c = inflight_call(e, r->call_id);
  if (!c || (r->status == WK_FRAME_STATUS_NOT_STARTED && !c->recalling)) {
    pool->stats.killed_protocol++;
    kill_executor(
        e, c ? "NOT_STARTED for a call never recalled" : "RESULT for a call it was not running");
    return;
  }
  detach(c);
  mark_next(e, uv_hrtime());
  if (r->status == WK_FRAME_STATUS_NOT_STARTED && !c->timed_out) {
    /* a RECALLed call given back: it never ran; the caller sends it again */
    wk_call_outcome o = {.status = WK_CALL_NOT_STARTED, .bytes_in = c->bytes_in};
    deliver(pool, c, &o);
    return;
  }
  e->calls_done++;
  if (pool->cfg.max_calls_per_executor && e->calls_done >= pool->cfg.max_calls_per_executor) {
    retire(e, "max_calls_per_executor", &pool->stats.recycled_calls);
  }
  if (pool->cfg.max_executor_rss_mb && r->max_rss_kb > pool->cfg.max_executor_rss_mb * 1024u) {
    retire(e, "max_executor_rss_mb", &pool->stats.recycled_rss);
  }
  if (c->timed_out && r->status != WK_FRAME_STATUS_OK) {
    /* it stopped when cancelled at its deadline */
    wk_call_outcome o = {
        .status = WK_CALL_TIMEOUT,
        .error_type = wk_frame_bytes_cstr("DeadlineExceeded"),
        .error_message = wk_frame_bytes_cstr("the call ran past its deadline and was cancelled"),
        .traceback = r->traceback,
        .stdout_bytes = r->stdout_bytes,
        .stderr_bytes = r->stderr_bytes,
        .cpu_us = r->cpu_us,
        .bytes_in = c->bytes_in,
    };
    deliver(pool, c, &o);
    return;
  }
  wk_call_outcome o = {
      .status = (wk_call_status)r->status,
      .content_type = r->content_type,
      .output = r->output,
      .error_type = r->error_type,
      .error_message = r->error_message,
      .traceback = r->traceback,
      .stdout_bytes = r->stdout_bytes,
      .stderr_bytes = r->stderr_bytes,
      .cpu_us = r->cpu_us,
      .bytes_in = c->bytes_in,
  };
  deliver(pool, c, &o);
}

static void handle_frame(wk_conn *conn, const wk_frame *f) {
  wk_pool *pool = conn->pool;
  wk_executor *e = conn->exec;
  if (!e) {
    if (f->type != WK_FRAME_HELLO) {
      wk_log(WK_LOG_WARN, "executor_protocol", "first frame was %s, not HELLO",
             wk_frame_type_name(f->type));
      conn_close(conn);
      return;
    }
    if (f->hello.version != WK_FRAME_VERSION) {
      wk_log(
          WK_LOG_ERROR, "executor_protocol",
          "executor pid %u speaks protocol version %u, this worker speaks %u: check --executor-script",
          f->hello.pid, f->hello.version, WK_FRAME_VERSION);
      conn_close(conn);
      return;
    }
    /* the channel says who is on it (the executor spawned with its other end); the
     * HELLO's pid is only checked against it */
    wk_executor *x = conn->owner;
    if (!x || !x->running || x->conn || x->pid != (int)f->hello.pid) {
      wk_log(WK_LOG_WARN, "executor_protocol", "HELLO with pid %u from executor pid %d",
             f->hello.pid, x ? x->pid : -1);
      if (x && x->running) kill_executor(x, "its HELLO named another pid");
      conn_close(conn);
      return;
    }
    x->pending = NULL;
    conn->owner = NULL;
    conn->exec = x;
    x->conn = conn;
    x->hello = true;
    x->last_pong_ms = now_ms(pool);
    int64_t took = x->last_pong_ms - x->spawned_ms;
    pool->start_ms = pool->start_ms ? (pool->start_ms * 3 + took) / 4 : took;
    pool->n_ready++;
    if (pool->n_starting) pool->n_starting--;
    pool->respawn_delay_ms = 0;
    pool->start_failures = 0;
    return;
  }
  switch (f->type) {
    case WK_FRAME_RESULT: handle_result(e, &f->result); break;
    case WK_FRAME_PING: {
      wk_frame pong = {.type = WK_FRAME_PONG, .ping = f->ping};
      queue_frame(e, &pong);
      break;
    }
    case WK_FRAME_PONG: e->last_pong_ms = now_ms(pool); break;
    case WK_FRAME_SUBCALLS: {
      wk_pool_call *parent = inflight_call(e, f->subcalls.parent_call_id);
      if (!parent) {
        pool->stats.killed_protocol++;
        kill_executor(e, "SUBCALLS for a call it was not running");
        return;
      }
      if (parent->resumed) {
        parent->resumed = false;
        e->resumed--;
      }
      if (parent->waiting++ == 0) e->waiting++;
      if (!parent->cancelled) pool->cb.on_subcalls(pool->cb.ud, parent->ctx, &f->subcalls);
      break;
    }
    case WK_FRAME_SCRATCH: {
      wk_pool_call *c = inflight_call(e, f->scratch.call_id);
      if (!c) {
        pool->stats.killed_protocol++;
        kill_executor(e, "SCRATCH for a call it was not running");
        return;
      }
      if (c->cancelled || !pool->cb.on_scratch) {
        wk_pool_answer_scratch(
            pool, c, f->scratch.request_id,
            c->cancelled ? "the call was cancelled" : "this worker makes no scratch directories");
      } else {
        pool->cb.on_scratch(pool->cb.ud, c->ctx, f->scratch.request_id);
      }
      break;
    }
    case WK_FRAME_STACK: {
      wk_pool_call *c = inflight_call(e, f->stack.call_id);
      if (c && c->stack_requested && !c->stack) {
        c->stack = wk_xmalloc(f->stack.stack.len + 1);
        memcpy(c->stack, f->stack.stack.ptr, f->stack.stack.len);
        c->stack[f->stack.stack.len] = '\0';
        c->stack_len = f->stack.stack.len;
        kill_executor(e, "a call outlived its deadline and the cancel grace");
        pool->stats.killed_wedged++;
      }
      break;
    }
    case WK_FRAME_HELLO:
    case WK_FRAME_CALL:
    case WK_FRAME_CANCEL:
    case WK_FRAME_RECALL:
    case WK_FRAME_SHUTDOWN:
    case WK_FRAME_SUBCALLS_RESULT:
    case WK_FRAME_STACK_REQUEST:
    case WK_FRAME_SCRATCH_RESULT:
      pool->stats.killed_protocol++;
      kill_executor(e, "it sent a frame only the worker may send");
      break;
  }
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  (void)suggested;
  wk_conn *c = h->data;
  size_t want = read_size(c);
  buf->base = (char *)wk_frame_buf_reserve(&c->rbuf, want);
  buf->len = want;
}

/* Handles every complete frame in the connection's buffer. */
static void read_frames(wk_conn *c) {
  wk_pool *pool = c->pool;
  while (!c->closing) {
    wk_frame f;
    size_t used = 0;
    wk_frame_rc rc = wk_frame_decode(wk_frame_buf_bytes(&c->rbuf), wk_frame_buf_size(&c->rbuf),
                                     pool->cfg.max_frame, &f, &used);
    if (rc == WK_FRAME_NEED_MORE) break;
    if (rc != WK_FRAME_OK) {
      wk_log(WK_LOG_WARN, "executor_protocol", "malformed frame from executor: %s",
             wk_frame_rc_describe(rc));
      if (c->exec) {
        pool->stats.killed_protocol++;
        kill_executor(c->exec, "malformed frame");
      }
      conn_close(c);
      break;
    }
    handle_frame(c, &f);
    wk_frame_buf_consume(&c->rbuf, used);
  }
  if (!c->closing && wk_frame_buf_size(&c->rbuf) == 0) wk_frame_buf_clear(&c->rbuf);
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf) {
  (void)buf;
  wk_conn *c = s->data;
  wk_pool *pool = c->pool;
  if (nread < 0) {
    conn_close(c);
    return;
  }
  wk_frame_buf_commit(&c->rbuf, (size_t)nread);
  bool outer = !pool->in_read; /* a callback may run a nested loop: only the outer one flushes */
  pool->in_read = true;
  wk_executor *from = c->exec;
  uint64_t done_before = from ? from->calls_done : 0;
  uint64_t mark_before = from ? from->busy_mark_ns : 0;
  read_frames(c);
  if (from && !c->closing && c->exec == from)
    measure_service(from, from->calls_done - done_before, mark_before);
  dispatch(pool);
  if (from && !c->closing && c->exec == from) steal_for_idle(pool, from);
  if (outer) {
    pool->in_read = false;
    /* the answers to these RESULTs (the next CALLs), to every executor, go out now: the
     * executors' pipelines refill without waiting for another loop turn */
    flush_all(pool);
  }
}

/* ---- dispatch ----------------------------------------------------------------------- */

/* How long the running call may have run for another call to be sent behind it: the
 * pipeline's time budget (PIPELINE_QUEUED_NS), or, for calls that get one call ahead
 * (up to PIPELINE_AHEAD_MAX_NS), their usual time and a half. With the budget alone a
 * 10 ms call's follower could only be sent in its first 2 ms: when the loop was late
 * to read the RESULT before it (a busy machine), the executor then idled through the
 * next RESULT's round trip. */
static uint64_t send_budget_ns(const wk_executor *e) {
  if (e->service_ns == 0 || e->service_ns > PIPELINE_AHEAD_MAX_NS) return PIPELINE_QUEUED_NS;
  uint64_t b = e->service_ns + e->service_ns / 2;
  if (b > PIPELINE_AHEAD_MAX_NS) b = PIPELINE_AHEAD_MAX_NS;
  return b > PIPELINE_QUEUED_NS ? b : PIPELINE_QUEUED_NS;
}

/* Room for one more call that would start soon: not behind a cancelled, overdue or
 * long call (blocked). */
static bool can_take(const wk_pool *pool, wk_executor *e) {
  return e->running && e->conn && !e->conn->closing && !e->retiring &&
         active(e) < depth_of(pool, e) && !blocked(e, send_budget_ns(e));
}

/* Executors cannot start: every queued call fails at once with the reason. Runs from
 * the loop (on_flush, maintenance), never inside wk_pool_submit; the callbacks may
 * submit more, which queue and are failed by the same loop. */
static void fail_queued(wk_pool *pool) {
  if (pool->failing) return;
  pool->failing = true;
  while (pool->queue_head && !pool->stopping && wk_pool_unavailable(pool, NULL, 0)) {
    wk_pool_call *c = pool->queue_head;
    list_remove(&pool->queue_head, &pool->queue_tail, c);
    pool->queued--;
    wk_call_outcome o = {
        .status = WK_CALL_EXECUTOR_LOST,
        .error_type = wk_frame_bytes_cstr("ExecutorsUnavailable"),
        .error_message = wk_frame_bytes_cstr(pool->start_error),
        .bytes_in = c->bytes_in,
    };
    deliver(pool, c, &o);
  }
  pool->failing = false;
}

static void on_flush(uv_idle_t *h) {
  wk_pool *pool = h->data;
  uv_idle_stop(h);
  fail_queued(pool);
  flush_all(pool);
}

/* ---- executor_isolation=function ---------------------------------------------------
 * An executor serves the function of the first call it is sent and no other: a global,
 * a hook or a thread one function leaves behind never sees another function's calls.
 * Calls are matched by function name (not epoch: every epoch is the same owner's code,
 * and a rollout runs two epochs side by side). Queued calls whose function has no
 * executor ("homeless") get fresh executors first; when none can be started (the pool
 * is at executors_max), the idle executor unused the longest, else the least busy one,
 * is recycled (retired: it finishes what it holds, its replacement is fresh). Each
 * switch costs an executor start (0.1-0.3 s): with more functions busy at once than
 * executors, calls wait for starts (bench/bench_isolation.py, docs/security.md). An
 * executor held by a call waiting for subcalls is never the one recycled, and does not
 * count toward executors_max while a homeless call waits (its children may be another
 * function's, which it cannot run nested). In shared mode a call's function is NULL
 * and every executor serves every call. */

/* May `e` run a call of `fn`? */
static bool serves(const wk_executor *e, const char *fn) {
  return !fn || !e->bound || strcmp(e->bound, fn) == 0;
}

/* True when a live executor (not being replaced) serves `fn` alone: its calls need no
 * fresh one. Always true in shared mode. */
static bool has_executor(const wk_pool *pool, const char *fn) {
  if (!fn) return true;
  for (const wk_executor *e = pool->executors; e; e = e->next) {
    if (e->running && !e->retiring && e->bound && strcmp(e->bound, fn) == 0) return true;
  }
  return false;
}

/* The oldest queued call whose function has no executor, or NULL. */
static const wk_pool_call *first_homeless(const wk_pool *pool) {
  if (!pool->cfg.isolate_functions) return NULL;
  for (const wk_pool_call *c = pool->queue_head; c; c = c->next) {
    if (!has_executor(pool, c->function)) return c;
  }
  return NULL;
}

/* The executor with room for one more call of `fn` (NULL: any function), least loaded
 * first; one already serving `fn` before a fresh one, which is taken only when
 * `fresh_ok`. NULL when none. */
static wk_executor *pick_executor(wk_pool *pool, const char *fn, bool fresh_ok) {
  wk_executor *best = NULL, *fresh = NULL;
  for (wk_executor *e = pool->executors; e; e = e->next) {
    if (!serves(e, fn) || !can_take(pool, e)) continue;
    if (fn && !e->bound) {
      if (fresh_ok && (!fresh || active(e) < active(fresh))) fresh = e;
    } else if (!best || active(e) < active(best)) {
      best = e;
    }
  }
  return best ? best : fresh;
}

/* Executors held by a call waiting for subcalls (isolation: see above). */
static uint32_t held_executors(const wk_pool *pool) {
  uint32_t n = 0;
  for (const wk_executor *e = pool->executors; e; e = e->next) {
    if (e->running && !e->retiring && e->waiting) n++;
  }
  return n;
}

/* How many executors the pool may run now: executors_max, plus (isolation) those held
 * by waiting parents while a homeless call waits. */
static uint32_t executors_cap(const wk_pool *pool) {
  uint32_t cap = pool->cfg.executors_max;
  if (first_homeless(pool)) cap += held_executors(pool);
  return cap;
}

/* Counts a switch; SWITCH_WARN_COUNT of them within SWITCH_WARN_WINDOW_MS say that
 * more functions are busy at once than executors: warned once a minute at most. */
#define SWITCH_WARN_COUNT 10u
#define SWITCH_WARN_WINDOW_MS 10000
static void note_switch(wk_pool *pool) {
  int64_t now = now_ms(pool);
  if (now - pool->switch_window_ms > SWITCH_WARN_WINDOW_MS) {
    pool->switch_window_ms = now;
    pool->switches = 0;
  }
  if (++pool->switches < SWITCH_WARN_COUNT) return;
  pool->switches = 0;
  pool->switch_window_ms = now;
  if (pool->switch_warned_ms && now - pool->switch_warned_ms < 60000) return;
  pool->switch_warned_ms = now;
  wk_log_json(
      WK_LOG_WARN, "executor_isolation_switching",
      json_pack("{s:i,s:i,s:i,s:s}", "recycles", (int)SWITCH_WARN_COUNT, "within_ms",
                (int)SWITCH_WARN_WINDOW_MS, "executors_max", (int)pool->cfg.executors_max, "hint",
                "more functions are busy at once than executors: each switch starts an "
                "executor; raise executors_max, or set executor_isolation shared if every "
                "function is one owner's code"));
}

/* Retires `victim` for a call of another function: its replacement starts fresh. */
static void recycle_for_isolation(wk_pool *pool, wk_executor *victim) {
  victim->isolation_victim = true;
  retire(victim, "executor_isolation", &pool->stats.recycled_isolation);
  note_switch(pool);
  if (victim->inflight == 0 && !victim->shutdown_sent) {
    victim->shutdown_sent = true;
    wk_frame bye = {.type = WK_FRAME_SHUTDOWN};
    queue_frame(victim, &bye);
    flush(victim);
  }
}

/* True when a call of `fn` waits in the queue. */
static bool function_queued(const wk_pool *pool, const char *fn) {
  for (const wk_pool_call *c = pool->queue_head; c; c = c->next) {
    if (c->function && strcmp(c->function, fn) == 0) return true;
  }
  return false;
}

/* An executor bound to a function with nothing to do stays idle at least as long as an
 * executor takes to start (the pool's measured spawn-to-HELLO time, within these
 * bounds) before it may be recycled for another function's waiting calls (share_idle):
 * were its function to come back sooner, the switch would have cost more than it
 * saved. */
#define SHARE_IDLE_MIN_MS MAINTENANCE_MS
#define SHARE_IDLE_MAX_MS 250

static int64_t share_idle_ms(const wk_pool *pool) {
  int64_t ms = pool->start_ms ? pool->start_ms : SHARE_IDLE_MAX_MS;
  if (ms < SHARE_IDLE_MIN_MS) ms = SHARE_IDLE_MIN_MS;
  return ms > SHARE_IDLE_MAX_MS ? SHARE_IDLE_MAX_MS : ms;
}

/* Isolation: calls wait that the executors of their functions cannot take now, while
 * executors of other functions have sat idle (share_idle_ms) with none of their
 * function's calls queued: they are recycled, their replacements serve the waiting
 * calls. Before, a function that ran alone after another kept only the executors it
 * was first given (one: 200 calls of 10 ms on 2 executors took 2.0 s, not 1.0, while
 * the other executor sat idle, bound to the function that ran before). As many are
 * recycled at once as the waiting calls need beyond the executors already coming for
 * them (fresh ones, and replacements of executors being recycled), PIPELINE_START
 * calls each: one at a time, a function taking over from idle ones got its executors
 * one start after another. The longest idle go first. */
static void share_idle(wk_pool *pool) {
  if (!pool->queue_head) return;
  int64_t now = now_ms(pool), idle_ms = share_idle_ms(pool);
  uint32_t coming = 0;
  for (const wk_executor *e = pool->executors; e; e = e->next) {
    if (!e->running) continue;
    if (e->retiring ? e->isolation_victim : !e->bound) coming++;
  }
  uint64_t covered = (uint64_t)coming * PIPELINE_START;
  while (pool->queued > covered) {
    wk_executor *victim = NULL;
    for (wk_executor *e = pool->executors; e; e = e->next) {
      if (!e->running || e->retiring || !e->bound || !e->conn) continue;
      if (e->inflight || e->waiting || e->resumed) continue;
      if (now - e->idle_since_ms < idle_ms || function_queued(pool, e->bound)) continue;
      if (!victim || e->idle_since_ms < victim->idle_since_ms) victim = e;
    }
    if (!victim) return;
    recycle_for_isolation(pool, victim);
    covered += PIPELINE_START;
  }
}

/* Isolation: a homeless call waits and no fresh executor is coming (none is starting
 * or idle unbound, the pool is at its cap, nothing is being recycled for it): recycles
 * one executor of another function. */
static void room_for_homeless(wk_pool *pool) {
  if (!first_homeless(pool)) return;
  uint32_t live = 0;
  for (const wk_executor *e = pool->executors; e; e = e->next) {
    if (!e->running) continue;
    if (e->retiring) {
      if (e->isolation_victim) return; /* its replacement is on its way */
      continue;
    }
    if (!e->bound) return; /* a fresh one (starting, or ready) takes it */
    live++;
  }
  if (live < executors_cap(pool)) return; /* spawn_if_needed starts a fresh one */
  wk_executor *victim = NULL;
  for (wk_executor *e = pool->executors; e; e = e->next) {
    if (!e->running || e->retiring || !e->conn || e->waiting || e->resumed) continue;
    if (!victim) {
      victim = e;
    } else if (e->inflight == 0) {
      if (victim->inflight > 0 || e->idle_since_ms < victim->idle_since_ms) victim = e;
    } else if (victim->inflight > 0 && active(e) < active(victim)) {
      victim = e;
    }
  }
  if (victim) recycle_for_isolation(pool, victim);
}

/* Isolation: executors for the calls no executor can take now (room_for_homeless,
 * then share_idle for the rest). */
static void make_room(wk_pool *pool) {
  room_for_homeless(pool);
  share_idle(pool);
}

/* Call `c`, its CALL frame already in e->wbuf, is in flight on `e`. The frames are
 * written at the end of on_read, or else once per loop turn (on_flush), so calls
 * submitted together go out in one write per executor; but a call for an executor
 * with nothing to run is written at once: the rest of the loop turn (a batch of
 * RPCs: 200 tasks admitted together took 10-40 ms) would be idle time for it. */
static void sent(wk_pool *pool, wk_executor *e, wk_pool_call *c) {
  WK_ASSERT(c->exec == NULL); /* a call is sent once */
  WK_ASSERT(!c->cancelled);
  WK_ASSERT(serves(e, c->function));
  if (c->function && !e->bound) e->bound = wk_xstrdup(c->function);
  c->exec = e;
  c->seq = e->sent_seq++;
  bool idle = active(e) == 0;
  if (idle) c->next_ns = uv_hrtime(); /* nothing to wait for: it starts now */
  list_push(&e->head, &e->tail, c);
  if (e->inflight++ == 0) e->busy_mark_ns = uv_hrtime();
  pool->stats.calls_sent++;
  if (pool->in_read) return; /* on_read writes every executor's frames at its end */
  if (idle) {
    flush(e);
  } else if (!uv_is_active((uv_handle_t *)&pool->flusher)) {
    uv_idle_start(&pool->flusher, on_flush);
  }
}

/* Queued call `c` goes to `e`. */
static void send_queued(wk_pool *pool, wk_executor *e, wk_pool_call *c) {
  list_remove(&pool->queue_head, &pool->queue_tail, c);
  pool->queued--;
  uint8_t *frame = c->frame; /* sent: the call no longer needs its bytes */
  c->frame = NULL;
  if (c->frame_len >= LARGE_FRAME_MIN) {
    write_frame_alone(e, frame, c->frame_len);
  } else {
    wk_frame_buf_append(&e->wbuf, frame, c->frame_len);
    free(frame);
  }
  sent(pool, e, c);
}

/* Sends queued calls to executors with room, least loaded first: in order (shared), or
 * (isolation) each to an executor of its function, in order, fresh executors going
 * to calls whose function has none first. */
static void dispatch(wk_pool *pool) {
  if (pool->stopping) return;
  if (!pool->cfg.isolate_functions) {
    while (pool->queue_head) {
      wk_executor *best = pick_executor(pool, NULL, true);
      if (!best) break;
      send_queued(pool, best, pool->queue_head);
    }
  } else {
    for (int pass = 0; pass < 2; pass++) {
      for (wk_pool_call *c = pool->queue_head, *next; c; c = next) {
        next = c->next;
        bool fresh_ok = pass == 1 || !has_executor(pool, c->function);
        wk_executor *e = pick_executor(pool, c->function, fresh_ok);
        if (e) send_queued(pool, e, c);
      }
    }
    make_room(pool);
  }
  spawn_if_needed(pool);
}

wk_pool_call *wk_pool_submit(wk_pool *pool, const wk_call_spec *spec, void *call_ctx) {
  wk_pool_call *c = wk_xcalloc(1, sizeof *c);
  c->ctx = call_ctx;
  c->call_id = ++pool->next_call_id;
  c->task_id = wk_xstrdup(spec->task_id ? spec->task_id : "");
  c->call_index = spec->call_index;
  c->deadline_ms = spec->deadline_ms ? now_ms(pool) + spec->deadline_ms : 0;
  wk_frame f = {.type = WK_FRAME_CALL};
  f.call = (wk_frame_call){
      .call_id = c->call_id,
      .task_id = wk_frame_bytes_cstr(spec->task_id),
      .function = wk_frame_bytes_cstr(spec->function),
      .epoch = spec->epoch,
      .code_dir = wk_frame_bytes_cstr(spec->code_dir),
      .entrypoint = wk_frame_bytes_cstr(spec->entrypoint),
      .content_type = spec->content_type,
      .call_index = spec->call_index,
      .deadline_ms = spec->deadline_ms,
      .scratch_dir = wk_frame_bytes_cstr(spec->scratch_dir),
      .traceparent = wk_frame_bytes_cstr(spec->traceparent),
      .args = spec->args,
  };
  c->bytes_in = spec->args.len;
  if (pool->cfg.isolate_functions) c->function = wk_xstrdup(spec->function ? spec->function : "");
  /* Nothing queued ahead and an executor with room: the frame is encoded straight into
   * its write buffer. Otherwise it waits in the queue, encoded in a block of its own. */
  wk_executor *now =
      (!pool->stopping && !pool->queue_head) ? pick_executor(pool, c->function, true) : NULL;
  wk_frame_rc rc = now ? wk_frame_encode(&now->wbuf, &f, pool->cfg.max_frame)
                       : wk_frame_encode_alloc(&f, pool->cfg.max_frame, &c->frame, &c->frame_len);
  if (rc != WK_FRAME_OK) {
    wk_call_outcome o = {
        .status = WK_CALL_ERROR,
        .error_type = wk_frame_bytes_cstr("ArgsTooLarge"),
        .error_message =
            wk_frame_bytes_cstr("the call's arguments exceed the executor frame limit"),
    };
    free_call(c);
    pool->cb.on_result(pool->cb.ud, call_ctx, &o);
    return NULL;
  }
  if (now) {
    sent(pool, now, c);
    spawn_if_needed(pool);
    return c;
  }
  if (spec->again && pool->queue_head) {
    /* given back unstarted: it keeps its place ahead of calls that came later */
    c->next = pool->queue_head;
    c->prev = NULL;
    pool->queue_head->prev = c;
    pool->queue_head = c;
  } else {
    list_push(&pool->queue_head, &pool->queue_tail, c);
  }
  pool->queued++;
  dispatch(pool);
  if (wk_pool_unavailable(pool, NULL, 0) && !uv_is_active((uv_handle_t *)&pool->flusher))
    uv_idle_start(&pool->flusher, on_flush); /* failed from the loop, not from here */
  return c;
}

void wk_pool_cancel(wk_pool *pool, wk_pool_call *c) {
  if (!c || c->cancelled) return;
  c->cancelled = true;
  wk_executor *e = c->exec;
  if (!e) { /* still queued */
    list_remove(&pool->queue_head, &pool->queue_tail, c);
    pool->queued--;
    free_call(c);
    return;
  }
  /* the executor answers (RESULT "Cancelled" when it had not started it); escalation
   * in maintenance() kills it if the call keeps running past the grace */
  wk_frame f = {.type = WK_FRAME_CANCEL, .cancel = {.call_id = c->call_id}};
  queue_frame(e, &f);
  flush(e);
  c->escalated_ms = now_ms(pool);
}

void wk_pool_answer_subcalls(wk_pool *pool, wk_pool_call *parent, uint64_t request_id,
                             const wk_frame_child *children, uint32_t count) {
  (void)pool;
  wk_executor *e = parent->exec;
  if (!e) return;
  if (parent->waiting && --parent->waiting == 0) {
    WK_ASSERT(e->waiting > 0);
    e->waiting--;
    parent->resumed = true; /* it resumes on top of whatever ran nested meanwhile */
    e->resumed++;
    uint64_t now_ns = uv_hrtime();
    observe(e, now_ns);              /* what started before (the nested calls) is past now */
    e->running_id = parent->call_id; /* its executor is busy with it again */
    e->progress_ns = now_ns;         /* from now */
  }
  wk_frame f = {.type = WK_FRAME_SUBCALLS_RESULT};
  f.subcalls_result =
      (wk_frame_subcalls_result){.request_id = request_id, .count = count, .children = children};
  queue_frame(e, &f);
  flush(e);
}

void wk_pool_answer_scratch(wk_pool *pool, wk_pool_call *call, uint64_t request_id,
                            const char *error) {
  (void)pool;
  wk_executor *e = call->exec;
  if (!e) return;
  const char *msg = error ? error : "";
  wk_frame f = {.type = WK_FRAME_SCRATCH_RESULT};
  f.scratch_result = (wk_frame_scratch_result){
      .request_id = request_id, .error = {(const uint8_t *)msg, (uint32_t)strlen(msg)}};
  queue_frame(e, &f);
  flush(e);
}

/* ---- maintenance: deadlines, heartbeats, idle executors, spawning ------------------- */

static void escalate(wk_pool *pool, wk_executor *e, wk_pool_call *c, int64_t now) {
  if (!c->timed_out && !c->cancelled && c->deadline_ms && now >= c->deadline_ms) {
    c->timed_out = true;
    c->escalated_ms = now;
    wk_frame f = {.type = WK_FRAME_CANCEL, .cancel = {.call_id = c->call_id}};
    queue_frame(e, &f);
    return;
  }
  if (!(c->timed_out || c->cancelled) || !c->escalated_ms) return;
  if (!c->stack_requested && now - c->escalated_ms >= pool->cfg.cancel_grace_ms) {
    c->stack_requested = true;
    wk_frame f = {.type = WK_FRAME_STACK_REQUEST, .stack_request = {.call_id = c->call_id}};
    queue_frame(e, &f);
    return;
  }
  if (c->stack_requested &&
      now - c->escalated_ms >= pool->cfg.cancel_grace_ms + pool->cfg.stack_wait_ms) {
    pool->stats.killed_wedged++;
    kill_executor(e, "a call outlived its deadline and the cancel grace (no stack came)");
  }
}

/* Sends `e` a RECALL for its queued call c: NOT_STARTED or its real RESULT comes back. */
static void recall(wk_pool *pool, wk_executor *e, wk_pool_call *c) {
  c->recalling = true;
  pool->stats.recalled++;
  wk_frame f = {.type = WK_FRAME_RECALL, .cancel = {.call_id = c->call_id}};
  queue_frame(e, &f);
}

/* `e` is blocked by a long, cancelled or overdue call: the calls sent behind it have
 * not started, so each gets a RECALL. The executor gives back those still queued
 * (RESULT NOT_STARTED, re-dispatched by the caller); one it started meanwhile just
 * answers as usual. */
static void take_back(wk_pool *pool, wk_executor *e) {
  wk_pool_call *r = running_call(e);
  if (!r) return;
  for (wk_pool_call *c = r->next; c; c = c->next) {
    if (c->recalling || c->cancelled || c->waiting || c->resumed) continue;
    recall(pool, e, c);
  }
}

/* Calls this long (an executor's usual time per call) are taken back from behind a
 * running one for an idle executor; shorter ones would cost more to move than to wait
 * (a no-op call's queue drains in microseconds). */
#define STEAL_MIN_NS 1000000u

/* `idle` has nothing left to run and no call waits in the pool: the last call queued
 * behind a running one elsewhere (a long call's follower, sent ahead by adaptive
 * pipelining) gets a RECALL, so that it starts here now instead of after the call
 * ahead of it: the executor gives it back NOT_STARTED, and the caller sends it again
 * to the least loaded executor, this one. One per idle executor at a time; a call the
 * other executor started meanwhile just answers as usual. */
static void steal_for_idle(wk_pool *pool, wk_executor *idle) {
  if (idle->inflight != 0 || pool->queue_head || pool->stopping || idle->retiring ||
      !idle->running || !can_take(pool, idle)) {
    return;
  }
  uint64_t now_ns = uv_hrtime();
  for (wk_executor *x = pool->executors; x; x = x->next) {
    if (x == idle || !x->running || !x->conn || x->conn->closing) continue;
    observe(x, now_ns);
    wk_pool_call *r = running_call(x);
    if (!r || r->waiting) continue;
    /* a long call ahead: usually, or this one so far */
    if (x->service_ns < STEAL_MIN_NS && now_ns - x->progress_ns < STEAL_MIN_NS) continue;
    wk_pool_call *last = NULL;
    for (wk_pool_call *c = r->next; c; c = c->next) {
      if (c->recalling) return; /* one already on its way back */
      if (c->cancelled || c->waiting || c->resumed || !serves(idle, c->function)) continue;
      last = c;
    }
    if (!last) continue;
    recall(pool, x, last);
    pool->stats.stolen++;
    return;
  }
}

static void maintenance(uv_timer_t *t) {
  wk_pool *pool = t->data;
  int64_t now = now_ms(pool);
  if (pool->sweep_soon || ++pool->ticks % SWEEP_EVERY_TICKS == 0) sweep(pool);
  if (pool->cfg.cgroup) wk_cgroup_reap(pool->cfg.cgroup); /* groups whose processes were dying */
  if (pool->stopping) {
    if (now - pool->stop_started_ms >= pool->cfg.shutdown_grace_ms) {
      for (wk_executor *e = pool->executors; e; e = e->next)
        kill_executor(e, "shutdown grace over");
    }
    return;
  }
  for (wk_executor *e = pool->executors; e; e = e->next) {
    if (!e->running) continue;
    for (wk_pool_call *c = e->head; c; c = c->next) escalate(pool, e, c, now);
    if (e->conn && !e->conn->closing && blocked(e, TAKE_BACK_NS)) take_back(pool, e);
    if (e->conn && !e->conn->closing) {
      if (now - e->last_pong_ms > pool->cfg.heartbeat_timeout_ms) {
        pool->stats.killed_heartbeat++;
        kill_executor(e, "it missed its heartbeats");
        continue;
      }
      if (now - e->last_ping_ms >= pool->cfg.heartbeat_interval_ms) {
        e->last_ping_ms = now;
        wk_frame ping = {.type = WK_FRAME_PING, .ping = {.nonce = ++pool->ping_nonce}};
        queue_frame(e, &ping);
      }
      if (!e->retiring && e->inflight == 0 && now - e->idle_since_ms >= pool->cfg.idle_timeout_ms &&
          pool->n_ready > pool->cfg.executors_min) {
        retire(e, "idle", &pool->stats.stopped_idle);
      }
      if (e->retiring && e->inflight == 0 && !e->shutdown_sent) {
        e->shutdown_sent = true;
        wk_frame bye = {.type = WK_FRAME_SHUTDOWN};
        queue_frame(e, &bye);
      }
    } else if (now - e->idle_since_ms > 30000 && !e->conn) {
      kill_executor(e, "it never connected");
    }
    flush(e);
  }
  spawn_if_needed(pool);
  dispatch(pool);
  fail_queued(pool);
}

/* ---- adapter ----------------------------------------------------------------------- */

static void *adapter_submit(void *impl, const wk_call_spec *spec, void *call_ctx) {
  return wk_pool_submit(impl, spec, call_ctx);
}

static void adapter_cancel(void *impl, void *handle) { wk_pool_cancel(impl, handle); }

static void adapter_answer(void *impl, void *handle, uint64_t request_id,
                           const wk_frame_child *children, uint32_t count) {
  wk_pool_answer_subcalls(impl, handle, request_id, children, count);
}

static void adapter_answer_scratch(void *impl, void *handle, uint64_t request_id,
                                   const char *error) {
  wk_pool_answer_scratch(impl, handle, request_id, error);
}

wk_exec_adapter wk_pool_adapter(wk_pool *pool) {
  return (wk_exec_adapter){.impl = pool,
                           .submit = adapter_submit,
                           .cancel = adapter_cancel,
                           .answer_subcalls = adapter_answer,
                           .answer_scratch = adapter_answer_scratch};
}

uint32_t wk_pool_ready_executors(const wk_pool *pool) { return pool->n_ready; }

bool wk_pool_unavailable(const wk_pool *pool, char *why, size_t why_len) {
  bool down = pool->n_ready == 0 && pool->start_failures >= START_FAILURES_MAX;
  if (down && why && why_len) snprintf(why, why_len, "%s", pool->start_error);
  return down;
}
uint32_t wk_pool_running_executors(const wk_pool *pool) { return pool->n_running; }
void wk_pool_executor_ids(const wk_pool *pool, uint32_t *uid, uint32_t *gid) {
  *uid = pool->cfg.uid;
  *gid = pool->cfg.gid;
}
uint32_t wk_pool_capacity(const wk_pool *pool) {
  uint32_t calls = 0;
  for (const wk_executor *e = pool->executors; e; e = e->next) {
    if (e->running && e->conn && !e->retiring) calls += depth_of(pool, e);
  }
  /* one call more than the executors take: it waits in the pool's queue, and a queue
   * is what grows the pool toward executors_max (spawn_if_needed) */
  return calls ? calls + 1 : PIPELINE_START;
}
wk_pool_stats wk_pool_get_stats(const wk_pool *pool) { return pool->stats; }

/* Resident set of a process in KiB (0 when it cannot be read). */
static uint64_t rss_kb(int pid) { return wk_meminfo_rss_kib(pid); }

static const char *exec_state(const wk_executor *e) {
  if (!e->hello) return "starting";
  if (e->retiring) return "retiring";
  return e->inflight ? "busy" : "idle";
}

uint32_t wk_pool_busy_executors(const wk_pool *pool) {
  uint32_t n = 0;
  for (const wk_executor *e = pool->executors; e; e = e->next)
    if (e->running && e->hello && e->inflight) n++;
  return n;
}

size_t wk_pool_list_executors(const wk_pool *pool, wk_pool_executor_view *out, size_t max) {
  size_t n = 0;
  for (const wk_executor *e = pool->executors; e && n < max; e = e->next) {
    if (!e->running) continue;
    out[n++] = (wk_pool_executor_view){
        .id = e->id,
        .pid = e->pid,
        .state = exec_state(e),
        .function = e->bound ? e->bound : "",
        .calls_done = e->calls_done,
        .inflight = e->inflight,
        .rss_kb = rss_kb(e->pid),
        .spawned_ms = e->spawned_ms,
    };
  }
  return n;
}

/* ---- start and stop ------------------------------------------------------------------ */

wk_pool *wk_pool_start(uv_loop_t *loop, const wk_pool_config *cfg, wk_exec_callbacks cb, char *err,
                       size_t err_len) {
  if (access(cfg->python, X_OK) != 0) {
    wk_errf(err, err_len, "python interpreter %s is not executable: %s", cfg->python,
            strerror(errno));
    return NULL;
  }
  if (access(cfg->executor_script, R_OK) != 0) {
    wk_errf(err, err_len, "executor script %s is not readable: %s", cfg->executor_script,
            strerror(errno));
    return NULL;
  }
  /* orphans of executors' descendants come back to the worker, which ends them */
  if (wk_reaper_start(err, err_len) != 0) return NULL;
  wk_pool *pool = wk_xcalloc(1, sizeof *pool);
  pool->loop = loop;
  pool->cfg = *cfg;
  if (pool->cfg.executors_max < pool->cfg.executors_min)
    pool->cfg.executors_max = pool->cfg.executors_min;
  if (pool->cfg.pipeline_depth == 0) pool->cfg.pipeline_depth = 1;
  pool->python = wk_xstrdup(cfg->python);
  pool->script = wk_xstrdup(cfg->executor_script);
  pool->python_path = wk_xstrdup(cfg->python_path ? cfg->python_path : "");
  pool->env = wk_xcalloc(1, sizeof *pool->env);
  for (const char *const *v = cfg->env; v && *v; v++) {
    pool->env = wk_xrealloc(pool->env, (pool->env_n + 2) * sizeof *pool->env);
    pool->env[pool->env_n++] = wk_xstrdup(*v);
    pool->env[pool->env_n] = NULL;
  }
  pool->cfg.env = NULL;        /* the copy above is the pool's */
  pool->cfg.dir_prefix = NULL; /* used here only */
  pool->cb = cb;
  const char *tmp = getenv("TMPDIR");
  int dir_len = cfg->dir_prefix
                    ? snprintf(pool->dir, sizeof pool->dir, "%s.XXXXXX", cfg->dir_prefix)
                    : snprintf(pool->dir, sizeof pool->dir, "%s/wk-exec-XXXXXX",
                               (tmp && strlen(tmp) < 40) ? tmp : "/tmp");
  if (dir_len < 0 || (size_t)dir_len >= sizeof pool->dir) {
    wk_errf(err, err_len, "the executor directory %s.XXXXXX is too long", cfg->dir_prefix);
    free_strings(pool);
    free(pool);
    return NULL;
  }
  if (!mkdtemp(pool->dir)) { /* mkdtemp makes it 0700 */
    wk_errf(err, err_len, "cannot create the executor directory %s: %s", pool->dir,
            strerror(errno));
    free_strings(pool);
    free(pool);
    return NULL;
  }
  /* the executors' HOME and their started files: theirs under executor_user */
  if (pool->cfg.uid != 0 && chown(pool->dir, (uid_t)pool->cfg.uid, (gid_t)pool->cfg.gid) != 0) {
    wk_errf(err, err_len, "cannot give the executor directory %s to uid %u: %s", pool->dir,
            pool->cfg.uid, strerror(errno));
    rmdir(pool->dir);
    free_strings(pool);
    free(pool);
    return NULL;
  }
  uv_timer_init(loop, &pool->maintenance);
  pool->maintenance.data = pool;
  uv_idle_init(loop, &pool->flusher);
  pool->flusher.data = pool;
  pool->handles_open = 2;
  for (uint32_t i = 0; i < pool->cfg.executors_min; i++) {
    if (spawn_one(pool, err, err_len) != 0) {
      wk_pool_stop(pool, NULL, NULL);
      return NULL;
    }
  }
  uv_timer_start(&pool->maintenance, maintenance, MAINTENANCE_MS, MAINTENANCE_MS);
  return pool;
}

static void on_pool_handle_closed(uv_handle_t *h) {
  wk_pool *pool = h->data;
  if (--pool->handles_open > 0) return;
  wk_reaper_sweep(true); /* every executor has exited: nothing it started outlives the pool */
  rmdir(pool->dir);
  while (pool->spare_writes) {
    wk_write *w = pool->spare_writes;
    pool->spare_writes = w->next;
    wk_frame_buf_free(&w->buf);
    free(w);
  }
  void (*done)(void *) = pool->stop_done;
  void *arg = pool->stop_arg;
  free_strings(pool);
  free(pool);
  if (done) done(arg);
}

static void maybe_finish_stop(wk_pool *pool) {
  /* the timer and the flusher are the last two handles */
  if (!pool->stopping || pool->n_structs > 0 || pool->handles_open != 2) return;
  if (uv_is_closing((uv_handle_t *)&pool->maintenance)) return;
  uv_close((uv_handle_t *)&pool->maintenance, on_pool_handle_closed);
  uv_close((uv_handle_t *)&pool->flusher, on_pool_handle_closed);
}

void wk_pool_stop(wk_pool *pool, void (*done)(void *arg), void *arg) {
  pool->stopping = true;
  pool->stop_done = done;
  pool->stop_arg = arg;
  pool->stop_started_ms = now_ms(pool);
  while (pool->queue_head) {
    wk_pool_call *c = pool->queue_head;
    list_remove(&pool->queue_head, &pool->queue_tail, c);
    free_call(c);
  }
  pool->queued = 0;
  wk_frame bye = {.type = WK_FRAME_SHUTDOWN};
  for (wk_executor *e = pool->executors; e; e = e->next) {
    for (wk_pool_call *c = e->head; c; c = c->next) c->cancelled = true;
    if (e->conn) {
      e->shutdown_sent = true;
      queue_frame(e, &bye);
      flush(e);
    } else {
      if (e->pending) conn_close(e->pending);
      kill_executor(e, "shutdown before it connected");
    }
  }
  if (!uv_is_active((uv_handle_t *)&pool->maintenance)) {
    uv_timer_start(&pool->maintenance, maintenance, MAINTENANCE_MS, MAINTENANCE_MS);
  }
  maybe_finish_stop(pool);
}

/* wk_orchestrator.c: the actor: the event queue, command execution and deferred
 * steps, the timers, the lifecycle. It keeps the invariants I1-I5 stated in
 * wk_orchestrator.h; the other files of the actor are listed in wk_orch_int.h. */
#include "app/wk_orchestrator.h"

#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "adapters/wk_code_store.h"
#include "adapters/wk_journal_writer.h"
#include "adapters/wk_meminfo.h"
#include "app/wk_calls.h"
#include "app/wk_code_cache.h"
#include "app/wk_orch_int.h"
#include "lib/wk_log.h"
#include "app/wk_subscriptions.h"
#include "lib/wk_alloc.h"
#include "lib/wk_assert.h"
#include "lib/wk_err.h"

#define TIMER_BATCH 64
/* Records kept for reuse (wk_freelist.h): enough for the tasks one loop turn ends and
 * starts under a full pipeline, little memory when idle (a runtime is ~13 KiB). */
#define STEP_POOL_MAX 256u
#define RT_POOL_MAX 32u

int64_t wk_orch__loop_now(wk_orch *o) {
  uv_update_time(o->loop);
  o->now_ms = (int64_t)uv_now(o->loop);
  return o->now_ms;
}

static void compute_wall_offset(wk_orch *o) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  int64_t wall_ms = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
  o->wall_offset_ms = wall_ms - wk_orch__loop_now(o);
}

/* ---- event queue (any thread → loop) ----------------------------------------- */

/* Queues ev for the loop; the completion-queue thread's batch end wakes the loop
 * (sink_on_batch_end). An rpc is queued only while fewer than max_queued_rpcs wait
 * (else false: nothing queued); a close event always is. */
static bool post(wk_orch *o, wk_orch__event ev) {
  pthread_mutex_lock(&o->mu);
  if (ev.kind == WK_ORCH__EV_RPC && o->n_queued_rpcs >= o->cfg.max_queued_rpcs) {
    pthread_mutex_unlock(&o->mu);
    return false;
  }
  if (ev.kind == WK_ORCH__EV_RPC) o->n_queued_rpcs++;
  if (o->n_events == o->cap_events) {
    o->cap_events = o->cap_events ? o->cap_events * 2 : 64;
    o->events = wk_xrealloc(o->events, o->cap_events * sizeof *o->events);
  }
  o->events[o->n_events++] = ev;
  o->wake_due = true;
  pthread_mutex_unlock(&o->mu);
  return true;
}

/* The completion-queue thread handled what was ready: one wake-up of the loop for the
 * events it queued since its last batch end (none: no wake-up). */
static void sink_on_batch_end(void *ud) {
  wk_orch *o = ud;
  pthread_mutex_lock(&o->mu);
  bool due = o->wake_due;
  o->wake_due = false;
  pthread_mutex_unlock(&o->mu);
  if (due) uv_async_send(&o->wake);
}

static void sink_on_rpc(void *ud, wk_rpc *rpc) {
  wk_orch *o = ud;
  if (post(o, (wk_orch__event){.kind = WK_ORCH__EV_RPC, .rpc = rpc})) return;
  /* full: answered here, on the completion-queue thread; the loop never sees it (a
   * stream's close event still comes, for an rpc the loop does not know) */
  char msg[200];
  snprintf(
      msg, sizeof msg,
      "worker event queue full: %u rpcs wait for the worker's loop (max_queued_rpcs); retry later",
      o->cfg.max_queued_rpcs);
  wk_rpc_fail(rpc, GRPC_STATUS_UNAVAILABLE, msg);
  wk_rpc_release(rpc);
}

static void sink_on_closed(void *ud, wk_rpc *rpc, bool cancelled) {
  (void)post(ud, (wk_orch__event){.kind = WK_ORCH__EV_CLOSED, .rpc = rpc, .cancelled = cancelled});
}

uint32_t wk_orch_queued_rpcs(wk_orch *o) {
  pthread_mutex_lock(&o->mu);
  uint32_t n = o->n_queued_rpcs;
  pthread_mutex_unlock(&o->mu);
  return n;
}

wk_grpc_server_sink wk_orch_sink(wk_orch *o) {
  return (wk_grpc_server_sink){.on_rpc = sink_on_rpc,
                               .on_closed = sink_on_closed,
                               .on_batch_end = sink_on_batch_end,
                               .ud = o};
}

/* ---- deferred phase steps ---------------------------------------------------- */

wk_orch__step *wk_orch__defer_step(wk_orch *o, wk_orch__step_kind kind, wk_task_rt *rt) {
  WK_ASSERT(rt != NULL);
  WK_ASSERT((o->steps_head == NULL) == (o->steps_tail == NULL));
  wk_orch__step *s = wk_freelist_calloc(&o->step_pool);
  s->kind = kind;
  s->rt = rt;
  wk_task_rt_ref(rt);
  if (o->steps_tail) {
    o->steps_tail->next = s;
  } else {
    o->steps_head = s;
  }
  o->steps_tail = s;
  return s;
}

/* ---- threadpool jobs -------------------------------------------------------------- */

bool wk_orch__converged(const wk_orch *o, const wk_task_rt *rt) {
  wk_task_view v;
  return wk_core_live_task(o->core, rt->req.task_id, strlen(rt->req.task_id), &v) != WK_OK ||
         v.adapter_ctx != rt;
}

void wk_orch__queue_job(wk_orch *o, wk_task_rt *rt, uint64_t slot_id, uv_work_cb work,
                        uv_after_work_cb done) {
  WK_ASSERT(!o->closing); /* no new job once the loop closes the orchestrator */
  wk_orch__job *j = wk_xcalloc(1, sizeof *j);
  j->o = o;
  j->rt = rt;
  j->slot_id = slot_id;
  j->work.data = j;
  wk_task_rt_ref(rt);
  o->jobs++;
  uv_queue_work(o->loop, &j->work, work, done);
}

wk_orch *wk_orch__job_end(uv_work_t *w, wk_task_rt **rt) {
  wk_orch__job *j = w->data;
  wk_orch *o = j->o;
  *rt = j->rt;
  free(j);
  WK_ASSERT(o->jobs > 0); /* the orchestrator outlives every job it queued */
  o->jobs--;
  if (o->closing) {
    wk_task_rt_unref(*rt);
    wk_orch__maybe_free(o);
    return NULL;
  }
  return o;
}

/* ---- command execution ---------------------------------------------------------- */

void wk_orch__exec_cmds(wk_orch *o, const wk_cmds *cmds) {
  for (uint32_t k = 0; k < cmds->count; k++) {
    const wk_cmd *c = &cmds->items[k];
    wk_task_rt *rt = c->adapter_ctx;
    WK_ASSERT(rt != NULL); /* every command carries the submitter's runtime */
    const wk_task_result *r = NULL;
    switch (c->kind) {
      case WK_CMD_PREPARE_ACTIVATION: wk_orch__start_activation(o, rt, c->slot_id); break;
      case WK_CMD_START_BUILDER: wk_orch__defer_step(o, WK_ORCH__STEP_BUILDER, rt); break;
      case WK_CMD_START_CALLS: wk_orch__start_calls(o, rt); break;
      case WK_CMD_START_WRITER: wk_orch__defer_step(o, WK_ORCH__STEP_WRITER, rt); break;
      case WK_CMD_CANCEL_TASK: wk_calls_stop(o->calls, rt, o->now_ms); break;
      case WK_CMD_CONVERGE:
        r = c->u.converge.result;
        WK_ASSERT(r != NULL);
        WK_ASSERT(wk_task_state_terminal(r->state));
        WK_DEBUG_ASSERT(wk_orch__converged(o, rt)); /* the core let go of rt (I4) */
        wk_calls_stop(o->calls, rt, o->now_ms);
        /* terminal: its epochs may go now (those beyond code_epochs_kept) */
        wk_task_code_unpin(rt, &o->cfg.calls.code, wk_orch__prune_code_cb, o);
        wk_orch__scope_untrack(o, rt);
        wk_orch__release_all_sems(o, rt);
        wk_orch__log_task_finished(o, rt, r);
        if (o->cfg.on_task_finished) o->cfg.on_task_finished(o->cfg.on_task_finished_ud, r);
        if (o->cfg.on_task_ended)
          o->cfg.on_task_ended(o->cfg.on_task_ended_ud, r, rt->req.function);
        wk_orch__progress_phase(o, r);
        wk_subs_on_terminal(o->subs, r, o->wall_offset_ms);
        wk_task_rt_unref(rt); /* the core's reference */
        break;
    }
    if (c->kind == WK_CMD_START_BUILDER || c->kind == WK_CMD_START_CALLS ||
        c->kind == WK_CMD_START_WRITER) {
      if (wk_core_get_result(o->core, c->task_id, c->task_id_len, &r) == WK_OK) {
        if (c->kind == WK_CMD_START_WRITER) wk_orch__progress_phase(o, r); /* the calls' last */
        wk_subs_on_phase(o->subs, r);
      }
    }
  }
}

void wk_orch__run_steps(wk_orch *o) {
  while (o->steps_head) {
    wk_orch__step *s = o->steps_head;
    WK_ASSERT(s->rt != NULL);
    o->steps_head = s->next;
    if (!o->steps_head) o->steps_tail = NULL;
    if (s->kind == WK_ORCH__STEP_ACTIVATED) { /* reported even when converged: it unholds */
      wk_orch__activation_finished(o, s->rt, s->slot_id, 0);
    } else if (!wk_orch__converged(o, s->rt)) {
      switch (s->kind) {
        case WK_ORCH__STEP_BUILDER: wk_orch__run_builder(o, s->rt); break;
        case WK_ORCH__STEP_WRITER: wk_orch__run_writer(o, s->rt); break;
        case WK_ORCH__STEP_CALLS_DONE: wk_orch__report_calls(o, s->rt); break;
        case WK_ORCH__STEP_CALLS: wk_orch__start_calls(o, s->rt); break;
        case WK_ORCH__STEP_ACTIVATED: break; /* above */
      }
    }
    wk_task_rt_unref(s->rt);
    wk_freelist_put(&o->step_pool, s);
  }
}

/* ---- call results (from the pool) -------------------------------------------------- */

void wk_orch_on_call_result(void *ud, void *call_ctx, const wk_call_outcome *outcome) {
  wk_orch *o = ud;
  /* an outcome the pool delivers from inside submit comes in the middle of this turn,
   * inside a walk of wk_calls (maybe inside command execution, which never calls the
   * core, I2): the turn keeps its `now`, and its caller reports and runs the steps */
  bool nested = wk_calls_busy(o->calls);
  if (!nested) wk_orch__loop_now(o);
  wk_task_rt *rt = wk_calls_on_result(o->calls, call_ctx, outcome, o->now_ms);
  if (nested) return;
  wk_orch__progress(o, rt);
  wk_orch__run_steps(o);
}

void wk_orch_on_subcalls(void *ud, void *call_ctx, const wk_frame_subcalls *req) {
  wk_orch *o = ud;
  wk_orch__loop_now(o);
  wk_orch__progress(o, wk_calls_on_subcalls(o->calls, call_ctx, req, o->now_ms));
  wk_orch__run_steps(o);
}

static void reschedule_deadline(wk_orch *o);

void wk_orch__reschedule(wk_orch *o) { reschedule_deadline(o); }

static void on_wake(uv_async_t *a) {
  wk_orch *o = a->data;
  pthread_mutex_lock(&o->mu);
  /* swap the queue out so the lock is held only for the swap */
  wk_orch__event *batch = o->events;
  size_t n = o->n_events;
  size_t cap = o->cap_events;
  o->events = o->draining_events;
  o->cap_events = o->cap_draining;
  o->n_events = 0;
  o->n_queued_rpcs = 0;
  pthread_mutex_unlock(&o->mu);
  wk_orch__loop_now(o);
  /* every deploy that finished before these RPCs were sent is seen by their lookups
   * (wk_code_cache.h); a batch that looks nothing up reads nothing */
  if (n > 0) wk_code_cache_sync_lazily(o->code_cache);
  for (size_t i = 0; i < n; i++) {
    wk_orch__event *ev = &batch[i];
    if (ev->kind == WK_ORCH__EV_RPC) {
      wk_orch__handle_rpc(o, ev->rpc);
    } else if (!wk_orch__health_closed(o, ev->rpc)) {
      wk_subs_on_closed(o->subs, ev->rpc, ev->cancelled, o->now_ms);
    }
    wk_orch__run_steps(o);
  }
  o->draining_events = batch;
  o->cap_draining = cap;
  reschedule_deadline(o);
}

/* A deploy, a rollback or a removal in the code root: the cache drops what it changed
 * now, so a task ending afterwards sees it in wk_code_cache_prune_due. */
static void on_code_change(uv_poll_t *h, int status, int events) {
  (void)status;
  (void)events;
  wk_orch *o = h->data;
  wk_code_cache_sync(o->code_cache);
}

/* Without inotify (no descriptor) every lookup reads the disk: nothing to watch. */
static void start_code_watch(wk_orch *o) {
  int fd = wk_code_cache_fd(o->code_cache);
  if (fd < 0 || uv_poll_init(o->loop, &o->code_watch, fd) != 0) return;
  o->code_watch.data = o;
  if (uv_poll_start(&o->code_watch, UV_READABLE, on_code_change) != 0) {
    uv_close((uv_handle_t *)&o->code_watch, NULL); /* nothing refers to it afterwards */
    return;
  }
  uv_unref((uv_handle_t *)&o->code_watch); /* keeps no loop alive */
  o->watching_code = true;
}

/* ---- giving memory back ----------------------------------------------------------------- */

/* What live objects hold, estimated for wk_trim (bench/bench_memory.py measured the
 * costs): an idle watch stream ~12 KiB (most of it gRPC's call), a retained result its
 * bytes plus ~1 KiB (record, book entry, index). A fall of 8 MiB (~680 streams, or
 * 8 MiB of results purged) asks for a trim once nothing has fallen for 1 s (results
 * expire over as long as they took to come), at most one per 2 s. */
#define TRIM_STREAM_BYTES 12288u
#define TRIM_RESULT_BYTES 1024u
static const wk_trim_config k_trim = {
    .drop_bytes = 8u << 20, .settle_ms = 1000, .min_gap_ms = 2000, .max_wait_ms = 10000};

static uint64_t held_estimate(const wk_orch *o) {
  return (uint64_t)wk_subs_streams(o->subs) * TRIM_STREAM_BYTES +
         (uint64_t)wk_core_retained_count(o->core) * TRIM_RESULT_BYTES +
         wk_core_retained_bytes(o->core);
}

/* After a mass close, or once idle after a load: glibc's free pages (every arena, the
 * gRPC threads' too) go back to the system. Rare (wk_trim.h), so it logs what it did. */
static void trim_if_due(wk_orch *o) {
  uint64_t now = (uint64_t)o->now_ms;
  uint64_t held = held_estimate(o);
  uint64_t high = o->trim.high > held ? o->trim.high : held;
  bool idle = wk_core_live_tasks(o->core) == 0;
  uint64_t before = idle ? wk_meminfo_rss_kib(0) : 0; /* only read when it can matter */
  /* both see every tick (the idle one keeps its own clock); one trim at most */
  bool released = wk_trim_due(&o->trim, held, now); /* streams closed, results purged */
  bool after_load = wk_trim_idle_due(&o->trim, idle, before * 1024u, now);
  if (!released && !after_load) return;
  const char *reason = released ? "released" : "idle";
  if (!idle) before = wk_meminfo_rss_kib(0);
  uint64_t t0 = uv_hrtime();
  (void)malloc_trim(0);
  uint64_t took_us = (uv_hrtime() - t0) / 1000u;
  uint64_t after = wk_meminfo_rss_kib(0);
  wk_trim_done(&o->trim, after * 1024u);
  wk_log_json(WK_LOG_INFO, "memory_trimmed",
              json_pack("{s:s,s:I,s:I,s:I,s:I,s:I}", "reason", reason, "estimate_high_kib",
                        (json_int_t)(high / 1024u), "estimate_kib", (json_int_t)(held / 1024u),
                        "rss_before_kib", (json_int_t)before, "rss_after_kib", (json_int_t)after,
                        "took_us", (json_int_t)took_us));
}

/* ---- timers ----------------------------------------------------------------------------- */

static void tick(wk_orch *o) {
  wk_orch__loop_now(o);
  wk_transition_result tr;
  uint64_t slots[TIMER_BATCH];
  size_t n;
  while ((n = wk_core_expired_slots(o->core, o->now_ms, slots, TIMER_BATCH)) > 0) {
    for (size_t i = 0; i < n; i++) {
      wk_core_handle_slot_lease_expired(o->core, slots[i], o->now_ms, &tr);
      wk_orch__exec_cmds(o, &tr.cmds);
    }
  }
  wk_task_id ids[TIMER_BATCH];
  while ((n = wk_core_timed_out_tasks(o->core, o->now_ms, ids, TIMER_BATCH)) > 0) {
    for (size_t i = 0; i < n; i++) {
      wk_core_handle_task_timed_out(o->core, ids[i].bytes, ids[i].len, o->now_ms, &tr);
      wk_orch__exec_cmds(o, &tr.cmds);
    }
  }
  while ((n = wk_core_watch_disconnected_tasks(o->core, o->now_ms, ids, TIMER_BATCH)) > 0) {
    for (size_t i = 0; i < n; i++) {
      wk_core_handle_watch_grace_expired(o->core, ids[i].bytes, ids[i].len, o->now_ms, &tr);
      wk_orch__exec_cmds(o, &tr.cmds);
    }
  }
  wk_core_purge_expired_results(o->core, o->now_ms);
  wk_calls_tick(o->calls, o->now_ms);
  wk_subs_tick(o->subs);
  wk_orch__progress_flush(o);
  wk_orch__scope_check_all(o);
  wk_orch__run_steps(o);
  trim_if_due(o);
  reschedule_deadline(o);
}

static void on_tick(uv_timer_t *t) { tick(t->data); }

/* The end of a loop turn: phase changes of the turn go out, one per task (its latest).
 * The turn's log lines stay held until on_before_wait: the answers and events the turn
 * made leave first (the app's check handle starts them), so a client does not wait
 * for the write of a line that describes its answer. */
static void on_turn_end(uv_check_t *h) {
  wk_orch *o = h->data;
  if (wk_subs_phases_pending(o->subs)) wk_subs_flush_phases(o->subs, o->wall_offset_ms);
  wk_log_hold(true); /* (the loop thread's: from its first turn on) */
}

/* Before the loop waits: the log lines of the turn just ended and of the callbacks
 * since (timers, close callbacks), in one write, so no line waits for the next event. */
static void on_before_wait(uv_prepare_t *h) {
  (void)h;
  wk_log_flush();
}

static void reschedule_deadline(wk_orch *o) {
  if (o->closing) return;
  int64_t next = wk_core_next_deadline(o->core);
  int64_t calls_next = wk_calls_next_deadline(o->calls);
  if (calls_next < next) next = calls_next;
  int64_t progress_next = wk_orch__progress_next(o);
  if (progress_next < next) next = progress_next;
  if (next == INT64_MAX) {
    uv_timer_stop(&o->deadline);
    return;
  }
  int64_t wait = next - o->now_ms;
  if (wait >= o->cfg.tick_ms) { /* the tick comes first */
    uv_timer_stop(&o->deadline);
    return;
  }
  uv_timer_start(&o->deadline, on_tick, wait > 0 ? (uint64_t)wait : 0, 0);
}

/* ---- lifecycle ---------------------------------------------------------------------------- */

wk_orch *wk_orch_create(uv_loop_t *loop, const wk_orch_config *cfg, char *err, size_t err_len) {
  const char *why = NULL;
  if (wk_core_config_validate(&cfg->core, &why) != WK_OK) {
    wk_errf(err, err_len, "%s", why);
    return NULL;
  }
  wk_orch *o = wk_xcalloc(1, sizeof *o);
  o->loop = loop;
  o->cfg = *cfg;
  if (o->cfg.max_queued_rpcs == 0) o->cfg.max_queued_rpcs = WK_ORCH_DEFAULT_MAX_QUEUED_RPCS;
  o->core = wk_core_create(&cfg->core);
  compute_wall_offset(o);
  if (cfg->core_journal_dir && cfg->core_journal_dir[0]) {
    /* before the core's first input: a replay starts from a fresh core */
    wk_journal_writer_config jc = {
        .dir = cfg->core_journal_dir,
        .max_bytes = cfg->core_journal_max_bytes,
        .files = cfg->core_journal_files,
        .decisions = cfg->core_journal_decisions,
        .version = cfg->version,
    };
    o->journal = wk_journal_writer_open(&jc, o->core, o->now_ms, o->now_ms + o->wall_offset_ms, err,
                                        err_len);
    if (!o->journal) {
      wk_core_destroy(o->core);
      free(o);
      return NULL;
    }
  }
  wk_orch__sems_init(o);
  /* subcall targets resolve in the code root and pass the AuditGate, as tasks do */
  /* CURRENT is read from memory, invalidated by inotify (wk_code_cache.h) */
  o->code_cache = wk_code_cache_create(cfg->code_root);
  o->cfg.calls.code = (wk_task_code_env){.code_root = cfg->code_root,
                                         .cache = o->code_cache,
                                         .audit_allow = cfg->audit_allow,
                                         .audit_deny = cfg->audit_deny};
  o->cfg.calls.max_inline_output_bytes = o->cfg.max_inline_output_bytes; /* one setting */
  o->cfg.calls.on_output = wk_orch__book_log; /* captured call output for GetTaskLogs */
  o->cfg.calls.on_output_ud = o;
  o->pins = wk_code_pins_create();
  o->cfg.calls.code.pins = o->pins;
  o->calls = wk_calls_create(&o->cfg.calls, &o->exec, wk_orch__calls_done, o, err, err_len);
  if (!o->calls) {
    wk_journal_writer_close(o->journal);
    wk_core_destroy(o->core);
    wk_code_pins_destroy(o->pins);
    wk_code_cache_destroy(o->code_cache);
    free(o);
    return NULL;
  }
  o->subs = wk_subs_create(o->core);
  o->progress_due = INT64_MAX; /* nothing held back */
  wk_trim_init(&o->trim, k_trim);
  wk_freelist_init(&o->step_pool, sizeof(wk_orch__step), STEP_POOL_MAX);
  wk_freelist_init(&o->rt_pool, sizeof(wk_task_rt), RT_POOL_MAX);
  wk_subs_set_owner_grace(o->subs, (uint64_t)cfg->core.watch_disconnect_grace_ms);
  o->book = wk_task_book_create(&cfg->task_logs);
  wk_core_set_forget_hook(o->core, wk_orch__book_forget, o);
  pthread_mutex_init(&o->mu, NULL);
  uv_async_init(loop, &o->wake, on_wake);
  o->wake.data = o;
  uv_timer_init(loop, &o->tick);
  o->tick.data = o;
  uv_timer_init(loop, &o->deadline);
  o->deadline.data = o;
  uv_check_init(loop, &o->turn_end);
  o->turn_end.data = o;
  uv_check_start(&o->turn_end, on_turn_end);
  uv_unref((uv_handle_t *)&o->turn_end); /* runs every turn, keeps no loop alive */
  uv_prepare_init(loop, &o->before_wait);
  o->before_wait.data = o;
  uv_prepare_start(&o->before_wait, on_before_wait);
  uv_unref((uv_handle_t *)&o->before_wait);
  start_code_watch(o);
  compute_wall_offset(o);
  uv_timer_start(&o->tick, on_tick, (uint64_t)cfg->tick_ms, (uint64_t)cfg->tick_ms);
  return o;
}

void wk_orch_set_executor(wk_orch *o, wk_exec_adapter exec) { o->exec = exec; }

void wk_orch_set_shadow(wk_orch *o, struct wk_shadow *shadow) { o->shadow = shadow; }

void wk_orch_set_deploy_handler(wk_orch *o, void (*handle)(void *ud, wk_rpc *rpc), void *ud) {
  o->deploy_handle = handle;
  o->deploy_ud = ud;
}

void wk_orch_set_capacity(wk_orch *o, uint32_t calls) {
  wk_orch__loop_now(o);
  wk_calls_set_capacity(o->calls, calls, o->now_ms);
  wk_orch__run_steps(o);
}

void wk_orch_set_ready(wk_orch *o, bool ready) {
  wk_core_set_ready(o->core, ready);
  wk_orch__loop_now(o);
  wk_orch__health_changed(o);
}

void wk_orch_set_executors_unavailable(wk_orch *o, bool unavailable) {
  o->executors_unavailable = unavailable;
  wk_orch__health_changed(o);
}

void wk_orch_set_accept_blocked(wk_orch *o, bool blocked) {
  o->accept_blocked = blocked;
  wk_orch__health_changed(o);
}

void wk_orch_announce_drain(wk_orch *o) {
  o->drain_announced = true;
  wk_orch__health_changed(o);
}

void wk_orch_set_draining(wk_orch *o) {
  wk_core_set_draining(o->core, true);
  wk_orch__loop_now(o);
  wk_orch__health_changed(o);
}

void wk_orch_set_admission_paused(wk_orch *o, const char *reason) {
  wk_core_set_admission_paused(o->core, reason);
}

uint32_t wk_orch_live_tasks(const wk_orch *o) { return wk_core_live_tasks(o->core); }

uv_loop_t *wk_orch_loop(wk_orch *o) { return o->loop; }

int64_t wk_orch_wall_offset_ms(const wk_orch *o) { return o->wall_offset_ms; }

size_t wk_orch_list_tasks(const wk_orch *o, wk_orch_task_view *out, size_t max) {
  if (max == 0) return 0;
  wk_task_id *ids = wk_xcalloc(max, sizeof *ids);
  size_t n = wk_core_list_live_tasks(o->core, ids, max), kept = 0;
  for (size_t i = 0; i < n; i++) {
    const wk_task_result *r = NULL;
    wk_task_view v;
    if (wk_core_get_result(o->core, ids[i].bytes, ids[i].len, &r) != WK_OK ||
        wk_core_live_task(o->core, ids[i].bytes, ids[i].len, &v) != WK_OK)
      continue;
    const wk_task_rt *rt = v.adapter_ctx;
    wk_orch_task_view *t = &out[kept++];
    *t = (wk_orch_task_view){
        .id = ids[i],
        .slot_id = r->slot_id,
        .state = r->state,
        .phase = r->phase,
        .code_epoch = r->code_epoch,
        .calls_done = r->statistic.calls.calls_succeeded + r->statistic.calls.calls_failed,
        .calls_total = r->statistic.calls.calls_total,
        .accepted_ms = r->statistic.accepted_ms,
    };
    /* the core hears of the calls with their first result: until then the total is the
     * builder's count */
    if (t->calls_total == 0 && rt && r->phase == WK_PHASE_CALLS)
      t->calls_total = rt->build.calls_total;
    snprintf(t->function, sizeof t->function, "%s", rt ? rt->req.function : "");
  }
  free(ids);
  return kept;
}

wk_heartbeat wk_orch_heartbeat(wk_orch *o) {
  return wk_core_derive_heartbeat(o->core, wk_orch__loop_now(o));
}

size_t wk_orch_book_entries(const wk_orch *o) { return wk_task_book_count(o->book); }

uint32_t wk_orch_open_streams(const wk_orch *o) {
  return wk_subs_streams(o->subs); /* health watches stay until the server stops */
}

void wk_orch_abort_all(wk_orch *o, const char *reason) {
  wk_orch__loop_now(o);
  wk_task_id ids[TIMER_BATCH];
  size_t n;
  while ((n = wk_core_list_live_tasks(o->core, ids, TIMER_BATCH)) > 0) {
    for (size_t i = 0; i < n; i++) {
      wk_transition_result tr;
      wk_core_handle_abort(o->core, ids[i].bytes, ids[i].len, WK_FAIL_WORKER_SHUTDOWN, reason,
                           o->now_ms, &tr);
      wk_orch__exec_cmds(o, &tr.cmds);
    }
  }
  wk_orch__run_steps(o);
}

static void on_handle_closed(uv_handle_t *h) {
  wk_orch *o = h->data;
  o->handles_open--;
  wk_orch__maybe_free(o);
}

void wk_orch__maybe_free(wk_orch *o) {
  if (o->handles_open > 0 || o->jobs > 0) return;
  WK_ASSERT(o->closing);
  WK_ASSERT(o->steps_head == NULL); /* a step holds a task reference */
  WK_ASSERT(o->scopes == NULL);
  for (int i = 0; i < WK_ORCH__SEM_COUNT; i++) WK_ASSERT(o->sems[i].head == NULL);
  wk_subs_destroy(o->subs);
  wk_core_set_forget_hook(o->core, NULL, NULL);
  wk_task_book_destroy(o->book);
  wk_orch__health_free_all(o);
  wk_calls_destroy(o->calls);
  wk_journal_writer_close(o->journal); /* what it holds reaches the file */
  wk_core_destroy(o->core);
  wk_orch__prune_free(o);
  wk_freelist_drain(&o->step_pool);
  wk_freelist_drain(&o->rt_pool); /* every runtime went back to it: none is left */
  wk_code_cache_destroy(o->code_cache);
  wk_code_pins_destroy(o->pins);
  pthread_mutex_destroy(&o->mu);
  free(o->events);
  free(o->draining_events);
  wk_buf_free(&o->record);
  free(o);
}

void wk_orch_close(wk_orch *o) {
  /* converge what still runs so no executor callback can outlive the orchestrator */
  wk_orch_abort_all(o, "the worker shut down before the task finished");
  wk_orch__progress_free(o);
  o->closing = true;
  /* a waiter behind a job's semaphore is converged: nothing will hand it the semaphore
   * (the job's done callback only frees the job once closing) */
  wk_orch__sems_drop_waiters(o);
  /* events already queued: answer them (closing) before the handles go */
  on_wake(&o->wake);
  wk_orch__health_finish_all(o);
  wk_log_hold(false); /* from here on, every line at once: the loop may stop */
  o->handles_open = 5;
  if (o->watching_code) {
    o->handles_open++;
    uv_close((uv_handle_t *)&o->code_watch, on_handle_closed);
  }
  uv_close((uv_handle_t *)&o->turn_end, on_handle_closed);
  uv_close((uv_handle_t *)&o->before_wait, on_handle_closed);
  uv_close((uv_handle_t *)&o->wake, on_handle_closed);
  uv_close((uv_handle_t *)&o->tick, on_handle_closed);
  uv_close((uv_handle_t *)&o->deadline, on_handle_closed);
}

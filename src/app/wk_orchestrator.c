/* wk_orchestrator.c: the actor. See wk_orchestrator.h.
 *
 * Invariants kept here:
 *  I1 every core call happens on the loop thread, with the `now` of the current turn;
 *  I2 commands are executed right after the core call that returned them, and their
 *     execution never calls the core (phase steps that would are deferred), so the
 *     pointers inside a command list stay valid while it is executed;
 *  I3 a task runtime is referenced by the core until CONVERGE and by every job or
 *     deferred step in flight; CONVERGE cancels its calls, so no pool callback can
 *     reach a freed runtime. */
#include "app/wk_orchestrator.h"

#include <fcntl.h>
#include <pthread.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "adapters/wk_shadow.h"
#include "app/wk_calls.h"
#include "app/wk_fs.h"
#include "lib/wk_log.h"
#include "app/wk_subscriptions.h"
#include "app/wk_task_runtime.h"
#include "app/wk_wire.h"
#include "grpc/health/v1/health.pb-c.h"
#include "lib/wk_hash.h"
#include "worker/v1/worker.pb-c.h"

#define TIMER_BATCH 64

typedef enum ev_kind { EV_RPC = 1, EV_CLOSED = 2 } ev_kind;

typedef struct wk_event {
  ev_kind kind;
  bool cancelled;
  wk_rpc *rpc;
} wk_event;

typedef enum step_kind { STEP_BUILDER = 1, STEP_WRITER = 2, STEP_CALLS_DONE = 3, STEP_CALLS = 4 } step_kind;

typedef struct wk_step {
  struct wk_step *next;
  step_kind kind;
  wk_task_rt *rt;
} wk_step;

/* A phase semaphore: at most `limit` tasks in the phase at once; the others wait
 * in FIFO order (the seed's builderSem, scanSem, executorSem, pluginSem). */
typedef enum sem_id { SEM_BUILDER = 0, SEM_SCAN = 1, SEM_EXECUTOR = 2, SEM_PLUGIN = 3, SEM_COUNT = 4 } sem_id;

typedef struct wk_sem {
  uint32_t limit, used;
  wk_task_rt *head, *tail; /* waiting, each holding a reference */
} wk_sem;

typedef struct health_watch {
  struct health_watch *next;
  wk_rpc *rpc;
  int last_sent;
} health_watch;

struct wk_orch {
  uv_loop_t *loop;
  wk_orch_config cfg;
  wk_core *core;
  wk_exec_adapter exec;
  wk_calls *calls; /* the calls phase: DispatcherCore and the attempts */
  wk_shadow *shadow; /* mirrors sampled submissions to another worker; NULL = off */
  wk_subs *subs;
  int64_t wall_offset_ms;
  int64_t now_ms;

  pthread_mutex_t mu;
  wk_event *events;
  size_t n_events, cap_events;
  wk_event *draining_events;
  size_t cap_draining;
  uv_async_t wake;

  uv_timer_t tick;
  uv_timer_t deadline;
  wk_step *steps_head, *steps_tail;
  wk_sem sems[SEM_COUNT];
  health_watch *health_watchers;
  bool closing;
  int handles_open;
  uint32_t jobs; /* activation jobs on the threadpool: the orchestrator outlives them */
  wk_task_rt *scopes; /* runtimes in their calls phase, for the IO scope bound */
};

static void maybe_free(wk_orch *o);
static void run_steps(wk_orch *o);
static bool sem_acquire(wk_orch *o, sem_id id, wk_task_rt *rt);
static void sem_release(wk_orch *o, sem_id id, wk_task_rt *rt);
static void release_all_sems(wk_orch *o, wk_task_rt *rt);

static int64_t loop_now(wk_orch *o) {
  uv_update_time(o->loop);
  o->now_ms = (int64_t)uv_now(o->loop);
  return o->now_ms;
}

static void compute_wall_offset(wk_orch *o) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  int64_t wall_ms = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
  o->wall_offset_ms = wall_ms - loop_now(o);
}

/* ---- event queue (any thread → loop) ----------------------------------------- */

static void post(wk_orch *o, wk_event ev) {
  pthread_mutex_lock(&o->mu);
  if (o->n_events == o->cap_events) {
    o->cap_events = o->cap_events ? o->cap_events * 2 : 64;
    o->events = realloc(o->events, o->cap_events * sizeof *o->events);
    if (!o->events) abort();
  }
  o->events[o->n_events++] = ev;
  pthread_mutex_unlock(&o->mu);
  uv_async_send(&o->wake);
}

static void sink_on_rpc(void *ud, wk_rpc *rpc) { post(ud, (wk_event){.kind = EV_RPC, .rpc = rpc}); }

static void sink_on_closed(void *ud, wk_rpc *rpc, bool cancelled) {
  post(ud, (wk_event){.kind = EV_CLOSED, .rpc = rpc, .cancelled = cancelled});
}

wk_grpc_server_sink wk_orch_sink(wk_orch *o) {
  return (wk_grpc_server_sink){.on_rpc = sink_on_rpc, .on_closed = sink_on_closed, .ud = o};
}

/* ---- replies ---------------------------------------------------------------------- */

static void reply_packed(wk_rpc *rpc, const ProtobufCMessage *m) {
  size_t n = protobuf_c_message_get_packed_size(m);
  uint8_t stack[512];
  uint8_t *p = n <= sizeof stack ? stack : malloc(n);
  if (!p) abort();
  protobuf_c_message_pack(m, p);
  wk_rpc_reply(rpc, p, n);
  if (p != stack) free(p);
}

static void fail_core(wk_rpc *rpc, wk_err err, const char *task_id) {
  char msg[512];
  wk_rpc_fail(rpc, wk_wire_status(err), wk_wire_error_message(err, task_id, msg, sizeof msg));
}

static void reply_result(wk_orch *o, wk_rpc *rpc, const wk_task_result *r) {
  wk_buf b = {0};
  wk_wire_append_task_result(&b, r, o->wall_offset_ms);
  wk_rpc_reply(rpc, b.data, b.len);
  wk_buf_free(&b);
}

/* ---- deferred phase steps ---------------------------------------------------- */

static void defer_step(wk_orch *o, step_kind kind, wk_task_rt *rt) {
  wk_step *s = calloc(1, sizeof *s);
  if (!s) abort();
  s->kind = kind;
  s->rt = rt;
  wk_task_rt_ref(rt);
  if (o->steps_tail) {
    o->steps_tail->next = s;
  } else {
    o->steps_head = s;
  }
  o->steps_tail = s;
}

/* ---- command execution ---------------------------------------------------------- */

/* Usage records go to the usage sink file on the threadpool (a disk write never
 * blocks the actor); appends of one line each with O_APPEND do not interleave. */
typedef struct usage_job {
  uv_work_t work;
  const char *path;
  char *line;
  size_t len;
} usage_job;

static void usage_write(uv_work_t *w) {
  usage_job *j = w->data;
  int fd = open(j->path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0640);
  if (fd < 0) return;
  ssize_t n = write(fd, j->line, j->len);
  (void)n;
  close(fd);
}

static void usage_done(uv_work_t *w, int status) {
  (void)status;
  usage_job *j = w->data;
  free(j->line);
  free(j);
}

static void append_usage(wk_orch *o, const json_t *usage) {
  char *text = json_dumps(usage, JSON_COMPACT);
  if (!text) return;
  usage_job *j = calloc(1, sizeof *j);
  if (!j) abort();
  j->len = strlen(text);
  j->line = realloc(text, j->len + 2);
  if (!j->line) abort();
  j->line[j->len++] = '\n';
  j->path = o->cfg.usage_log;
  j->work.data = j;
  uv_queue_work(o->loop, &j->work, usage_write, usage_done);
}

static void log_task_finished(wk_orch *o, const wk_task_rt *rt, const wk_task_result *r) {
  const wk_task_statistic *s = &r->statistic;
  json_t *f = json_pack(
      "{s:s,s:s,s:s,s:s,s:I,s:s,s:I,s:I,s:I,s:I,s:I,s:I,s:I}", "task_id", rt->task_id,
      "function", rt->function, "state", wk_task_state_name(r->state), "failure_code",
      wk_failure_code_name(r->failure_code), "code_epoch", (json_int_t)r->code_epoch, "failure_message",
      r->failure_message ? r->failure_message : "", "duration_ms",
      (json_int_t)(s->finished_ms - s->accepted_ms), "calls_total",
      (json_int_t)s->calls.calls_total, "calls_failed", (json_int_t)s->calls.calls_failed,
      "executor_cpu_us", (json_int_t)s->calls.executor_cpu_us, "bytes_in",
      (json_int_t)s->calls.bytes_in, "bytes_out", (json_int_t)s->calls.bytes_out, "accepted_unix_ms",
      (json_int_t)(s->accepted_ms + o->wall_offset_ms));
  if (rt->traceparent[0]) json_object_set_new(f, "traceparent", json_string(rt->traceparent));
  /* the usage record: what the task cost, per phase */
  json_t *usage = json_pack(
      "{s:s,s:s,s:s,s:s,s:I,s:s,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I}", "task_id", rt->task_id,
      "function", rt->function, "deployment", o->cfg.deployment ? o->cfg.deployment : "",
      "service", o->cfg.service ? o->cfg.service : "", "code_epoch", (json_int_t)r->code_epoch, "state",
      wk_task_state_name(r->state), "cpu_us", (json_int_t)s->calls.executor_cpu_us, "wall_ms",
      (json_int_t)(s->finished_ms - s->accepted_ms), "builder_ms",
      (json_int_t)(s->builder_finished_ms - s->builder_started_ms), "calls_ms",
      (json_int_t)(s->calls_finished_ms - s->calls_started_ms), "writer_ms",
      (json_int_t)(s->writer_finished_ms - s->writer_started_ms), "bytes_in",
      (json_int_t)s->calls.bytes_in, "bytes_out", (json_int_t)s->calls.bytes_out, "calls",
      (json_int_t)s->calls.calls_total, "retries", (json_int_t)s->calls.calls_retried, "finished_unix_ms",
      (json_int_t)(s->finished_ms + o->wall_offset_ms));
  if (o->cfg.usage_log && o->cfg.usage_log[0]) append_usage(o, usage);
  json_object_set_new(f, "usage", usage);
  wk_log_json(WK_LOG_INFO, "task_finished", f);
}

static void on_activation_work(uv_work_t *w);
static void on_activation_done(uv_work_t *w, int status);

/* ---- IO scope bound: a task's scratch directory is measured on every tick (on the
 * threadpool) while its calls run; over io_scope_max_bytes its calls phase fails ---- */

static void scope_track(wk_orch *o, wk_task_rt *rt) {
  if (!o->cfg.io_scope_max_bytes || !rt->scratch_created || rt->in_scope_list) return;
  rt->in_scope_list = true;
  rt->scope_prev = NULL;
  rt->scope_next = o->scopes;
  if (o->scopes) o->scopes->scope_prev = rt;
  o->scopes = rt;
}

static void scope_untrack(wk_orch *o, wk_task_rt *rt) {
  if (!rt->in_scope_list) return;
  rt->in_scope_list = false;
  if (rt->scope_prev) {
    rt->scope_prev->scope_next = rt->scope_next;
  } else {
    o->scopes = rt->scope_next;
  }
  if (rt->scope_next) rt->scope_next->scope_prev = rt->scope_prev;
}

static void scope_measure(uv_work_t *w) {
  wk_task_rt *rt = w->data;
  rt->scope_bytes = wk_fs_tree_bytes(rt->scratch_dir);
}

static void scope_measured(uv_work_t *w, int status) {
  (void)status;
  wk_task_rt *rt = w->data;
  wk_orch *o = rt->orch;
  o->jobs--;
  rt->scope_measuring = false;
  if (o->closing) {
    wk_task_rt_unref(rt);
    maybe_free(o);
    return;
  }
  if (!rt->converged && rt->in_scope_list && !rt->calls_reported &&
      rt->scope_bytes > o->cfg.io_scope_max_bytes) {
    rt->scope_exceeded = true;
    rt->calls_ok = false;
    snprintf(rt->first_failure, sizeof rt->first_failure,
             "the task's scratch directory holds %llu bytes, over io_scope_max_mb (%llu bytes)",
             (unsigned long long)rt->scope_bytes, (unsigned long long)o->cfg.io_scope_max_bytes);
    defer_step(o, STEP_CALLS_DONE, rt);
  }
  wk_task_rt_unref(rt);
  run_steps(o);
}

static void scope_check_all(wk_orch *o) {
  for (wk_task_rt *rt = o->scopes; rt; rt = rt->scope_next) {
    if (rt->scope_measuring) continue;
    rt->scope_measuring = true;
    wk_task_rt_ref(rt);
    rt->scope_job.data = rt;
    o->jobs++;
    uv_queue_work(o->loop, &rt->scope_job, scope_measure, scope_measured);
  }
}

static void start_calls(wk_orch *o, wk_task_rt *rt) {
  if (!sem_acquire(o, SEM_EXECUTOR, rt)) return;
  if (rt->streaming && !sem_acquire(o, SEM_SCAN, rt)) return;
  if (rt->calls_total == 0) {
    rt->calls_ok = true;
    defer_step(o, STEP_CALLS_DONE, rt);
    return;
  }
  scope_track(o, rt);
  wk_calls_start(o->calls, rt, o->now_ms);
}

static void calls_done(void *ud, wk_task_rt *rt) { defer_step(ud, STEP_CALLS_DONE, rt); }

/* Executes the commands of one core call. Never calls the core (I2). */
static void exec_cmds(wk_orch *o, const wk_cmds *cmds) {
  for (uint32_t k = 0; k < cmds->count; k++) {
    const wk_cmd *c = &cmds->items[k];
    wk_task_rt *rt = c->adapter_ctx;
    const wk_task_result *r = NULL;
    switch (c->kind) {
      case WK_CMD_PREPARE_ACTIVATION:
        wk_task_rt_ref(rt);
        rt->activation.data = rt;
        o->jobs++;
        uv_queue_work(o->loop, &rt->activation, on_activation_work, on_activation_done);
        break;
      case WK_CMD_START_BUILDER:
        defer_step(o, STEP_BUILDER, rt);
        break;
      case WK_CMD_START_CALLS:
        start_calls(o, rt);
        break;
      case WK_CMD_START_WRITER:
        defer_step(o, STEP_WRITER, rt);
        break;
      case WK_CMD_CANCEL_TASK:
        wk_calls_stop(o->calls, rt, o->now_ms);
        break;
      case WK_CMD_CONVERGE:
        r = c->u.converge.result;
        wk_calls_stop(o->calls, rt, o->now_ms);
        scope_untrack(o, rt);
        rt->converged = true;
        release_all_sems(o, rt);
        log_task_finished(o, rt, r);
        if (o->cfg.on_task_finished) o->cfg.on_task_finished(o->cfg.on_task_finished_ud, r);
        wk_subs_on_terminal(o->subs, r, o->wall_offset_ms);
        wk_task_rt_unref(rt); /* the core's reference */
        break;
    }
    if (c->kind == WK_CMD_START_BUILDER || c->kind == WK_CMD_START_CALLS ||
        c->kind == WK_CMD_START_WRITER) {
      if (wk_core_get_result(o->core, c->task_id, c->task_id_len, &r) == WK_OK) {
        wk_subs_on_phase(o->subs, r, o->wall_offset_ms);
      }
    }
  }
}

/* Takes the semaphore for rt, or queues rt (with a reference) and returns false; the
 * step runs when a holder releases. */
static bool sem_acquire(wk_orch *o, sem_id id, wk_task_rt *rt) {
  wk_sem *s = &o->sems[id];
  if (rt->sems_held & (1u << id)) return true;
  if (s->limit == 0 || s->used < s->limit) {
    s->used++;
    rt->sems_held = (uint8_t)(rt->sems_held | (1u << id));
    return true;
  }
  wk_task_rt_ref(rt);
  rt->sem_next = NULL;
  if (s->tail) {
    s->tail->sem_next = rt;
  } else {
    s->head = rt;
  }
  s->tail = rt;
  return false;
}

/* Gives the semaphore back and lets the first live waiter take it. */
static void sem_release(wk_orch *o, sem_id id, wk_task_rt *rt) {
  wk_sem *s = &o->sems[id];
  if (!(rt->sems_held & (1u << id))) return;
  rt->sems_held = (uint8_t)(rt->sems_held & ~(1u << id));
  s->used--;
  while (s->head && (s->limit == 0 || s->used < s->limit)) {
    wk_task_rt *next = s->head;
    s->head = next->sem_next;
    if (!s->head) s->tail = NULL;
    if (!next->converged) {
      /* hand the semaphore over, then run its step later (never from inside exec_cmds) */
      s->used++;
      next->sems_held = (uint8_t)(next->sems_held | (1u << id));
      defer_step(o, id == SEM_BUILDER ? STEP_BUILDER : id == SEM_PLUGIN ? STEP_WRITER : STEP_CALLS, next);
    }
    wk_task_rt_unref(next);
  }
}

static void release_all_sems(wk_orch *o, wk_task_rt *rt) {
  for (int id = 0; id < SEM_COUNT; id++) sem_release(o, (sem_id)id, rt);
}

static void phase_finished(wk_orch *o, wk_task_rt *rt, wk_phase phase, const wk_phase_outcome *out) {
  wk_transition_result tr;
  wk_core_handle_phase_finished(o->core, rt->task_id, strlen(rt->task_id), phase, out, o->now_ms, &tr);
  exec_cmds(o, &tr.cmds);
}

static void run_builder(wk_orch *o, wk_task_rt *rt) {
  if (!sem_acquire(o, SEM_BUILDER, rt)) return;
  wk_phase_outcome out = {.ok = true};
  char err[512];
  const wk_builder *b = wk_builder_registry_find(o->cfg.builders, rt->builder);
  if (!b) {
    char names[256];
    snprintf(err, sizeof err, "no call builder named '%s' in this worker (enabled: %s)", rt->builder,
             wk_builder_registry_names(o->cfg.builders, names, sizeof names));
    out = (wk_phase_outcome){.ok = false, .failure_code = WK_FAIL_BUILDER_NOT_FOUND, .message = err};
  } else {
    wk_builder_input in = {.args = rt->args,
                           .args_len = rt->args_len,
                           .json = rt->args_json,
                           .max_calls = o->cfg.max_calls_per_task};
    rt->builder_impl = b;
    int rc;
    if (b->stream_open) {
      rc = b->stream_open(&in, &rt->stream, err, sizeof err);
      rt->streaming = true;
      rt->calls_total = rt->stream.total;
      out.streaming = true;
    } else {
      rc = b->build(&in, &rt->calls, err, sizeof err);
      rt->calls_total = rt->calls.count;
    }
    if (rc != 0) {
      out = (wk_phase_outcome){.ok = false, .failure_code = WK_FAIL_BUILDER_FAILED, .message = err};
    }
  }
  sem_release(o, SEM_BUILDER, rt);
  phase_finished(o, rt, WK_PHASE_BUILDER, &out);
}

static void report_calls(wk_orch *o, wk_task_rt *rt) {
  if (rt->calls_reported) return;
  rt->calls_reported = true;
  scope_untrack(o, rt);
  wk_calls_stop(o->calls, rt, o->now_ms);
  sem_release(o, SEM_SCAN, rt);
  sem_release(o, SEM_EXECUTOR, rt);
  wk_buf outputs = {0};
  wk_task_rt_collect_outputs(rt, &outputs);
  bool ok = rt->calls_ok;
  char msg[700];
  const char *message = NULL;
  wk_failure_code code = WK_FAIL_NONE;
  if (!ok && rt->scope_exceeded) {
    message = rt->first_failure;
  } else if (!ok) {
    snprintf(msg, sizeof msg, "%u of %llu calls failed; first: %s", rt->calls_failed,
             (unsigned long long)rt->calls_total, rt->first_failure);
    message = msg;
  } else if (outputs.len > o->cfg.max_inline_output_bytes && !rt->result_handler[0]) {
    snprintf(msg, sizeof msg,
             "the outputs (%zu bytes) exceed the inline limit of %zu bytes; configure a result handler",
             outputs.len, o->cfg.max_inline_output_bytes);
    message = msg;
    ok = false;
    code = WK_FAIL_CALL_FAILED;
    wk_buf_clear(&outputs);
  }
  wk_phase_outcome out = {
      .ok = ok,
      .failure_code = code,
      .message = message,
      .data = {outputs.data, outputs.len},
      .stats = rt->stats,
  };
  phase_finished(o, rt, WK_PHASE_CALLS, &out);
  wk_buf_free(&outputs);
}

static const wk_writer *enabled_writer(const wk_orch *o, const char *name) {
  for (size_t i = 0; i < sizeof o->cfg.writers / sizeof o->cfg.writers[0] && o->cfg.writers[i]; i++) {
    if (strcmp(o->cfg.writers[i], name) == 0) return wk_writer_find(name);
  }
  return NULL;
}

/* The writer runs on the threadpool (it blocks on fsync and the network). */
static void on_writer_work(uv_work_t *w) {
  wk_task_rt *rt = w->data;
  wk_writer_task t = {
      .settings = rt->orch->cfg.writer_settings,
      .task_id = rt->task_id,
      .function = rt->function,
      .epoch = rt->epoch,
      .options = rt->handler_options,
      .n_options = rt->n_handler_options,
      .outputs = rt->writer_outputs.data,
      .outputs_len = rt->writer_outputs.len,
  };
  rt->writer_rc = rt->writer->write(rt->writer, &t, &rt->writer_results, rt->writer_error,
                                    sizeof rt->writer_error);
}

static void on_writer_done(uv_work_t *w, int status) {
  wk_task_rt *rt = w->data;
  wk_orch *o = rt->orch;
  o->jobs--;
  if (o->closing) {
    wk_task_rt_unref(rt);
    maybe_free(o);
    return;
  }
  loop_now(o);
  sem_release(o, SEM_PLUGIN, rt);
  if (!rt->converged) {
    wk_phase_outcome out = {.ok = true, .data = {rt->writer_results.data, rt->writer_results.len}};
    if (status != 0 || rt->writer_rc != 0) {
      out = (wk_phase_outcome){.ok = false,
                               .failure_code = WK_FAIL_PLUGIN_FAILED,
                               .message = status ? "the writer was cancelled" : rt->writer_error};
    }
    phase_finished(o, rt, WK_PHASE_WRITER, &out);
  }
  wk_task_rt_unref(rt);
  run_steps(o);
}

static void run_writer(wk_orch *o, wk_task_rt *rt) {
  if (!rt->result_handler[0]) { /* outputs stay inline in the TaskResult */
    wk_phase_outcome out = {.ok = true};
    phase_finished(o, rt, WK_PHASE_WRITER, &out);
    return;
  }
  const wk_writer *w = enabled_writer(o, rt->result_handler);
  if (!w) {
    char err[300];
    snprintf(err, sizeof err,
             "no writer plugin named '%s' is enabled and configured on this worker (known: %s)",
             rt->result_handler, wk_writer_names());
    wk_phase_outcome out = {.ok = false, .failure_code = WK_FAIL_PLUGIN_NOT_FOUND, .message = err};
    phase_finished(o, rt, WK_PHASE_WRITER, &out);
    return;
  }
  if (!sem_acquire(o, SEM_PLUGIN, rt)) return;
  rt->writer = w;
  wk_buf_clear(&rt->writer_outputs);
  wk_task_rt_collect_outputs(rt, &rt->writer_outputs);
  wk_task_rt_ref(rt);
  rt->writer_job.data = rt;
  o->jobs++;
  uv_queue_work(o->loop, &rt->writer_job, on_writer_work, on_writer_done);
}

static void run_steps(wk_orch *o) {
  while (o->steps_head) {
    wk_step *s = o->steps_head;
    o->steps_head = s->next;
    if (!o->steps_head) o->steps_tail = NULL;
    if (!s->rt->converged) {
      switch (s->kind) {
        case STEP_BUILDER: run_builder(o, s->rt); break;
        case STEP_WRITER: run_writer(o, s->rt); break;
        case STEP_CALLS_DONE: report_calls(o, s->rt); break;
        case STEP_CALLS: start_calls(o, s->rt); break;
      }
    }
    wk_task_rt_unref(s->rt);
    free(s);
  }
}

/* ---- activation (threadpool) ------------------------------------------------------ */

static void on_activation_work(uv_work_t *w) {
  wk_task_rt *rt = w->data;
  const wk_orch_config *cfg = &rt->orch->cfg;
  wk_task_rt_activate(rt, cfg->code_root, cfg->scratch_root, cfg->audit_allow, cfg->audit_deny);
}

static void on_activation_done(uv_work_t *w, int status) {
  wk_task_rt *rt = w->data;
  wk_orch *o = rt->orch;
  o->jobs--;
  if (o->closing) { /* the task was converged at close: only let go */
    wk_task_rt_unref(rt);
    maybe_free(o);
    return;
  }
  loop_now(o);
  if (!rt->converged) {
    wk_transition_result tr;
    if (status == 0 && rt->activation_rc == 0) {
      wk_core_handle_activation_prepared(o->core, rt->task_id, strlen(rt->task_id), rt->slot_id,
                                         rt->epoch, o->now_ms, &tr);
    } else {
      const char *why = status ? "activation was cancelled" : rt->activation_error;
      wk_core_handle_activation_failed(o->core, rt->task_id, strlen(rt->task_id),
                                       status ? WK_FAIL_ACTIVATION_FAILED : rt->activation_code, why,
                                       o->now_ms, &tr);
    }
    exec_cmds(o, &tr.cmds);
  }
  wk_task_rt_unref(rt);
  run_steps(o);
}

/* ---- call results (from the pool) -------------------------------------------------- */

void wk_orch_on_call_result(void *ud, void *call_ctx, const wk_call_outcome *outcome) {
  wk_orch *o = ud;
  loop_now(o);
  wk_calls_on_result(o->calls, call_ctx, outcome, o->now_ms);
  run_steps(o);
}

void wk_orch_on_subcalls(void *ud, void *call_ctx, const wk_frame_subcalls *req) {
  wk_orch *o = ud;
  loop_now(o);
  wk_calls_on_subcalls(o->calls, call_ctx, req, o->now_ms);
  run_steps(o);
}

/* ---- rpc handlers ---------------------------------------------------------------------- */

static void handle_request_slot(wk_orch *o, wk_rpc *rpc) {
  const Worker__V1__RequestTaskSlotRequest *req = wk_rpc_request(rpc);
  wk_slot_result res;
  wk_core_handle_request_slot(o->core, req->task_id, strlen(req->task_id), (int64_t)req->ttl_ms,
                              o->now_ms, &res);
  if (res.err) {
    fail_core(rpc, res.err, req->task_id);
    return;
  }
  Worker__V1__RequestTaskSlotResponse resp = WORKER__V1__REQUEST_TASK_SLOT_RESPONSE__INIT;
  resp.slot_id = res.slot_id;
  resp.lease_expires_unix_ms = res.lease_expires_ms ? res.lease_expires_ms + o->wall_offset_ms : 0;
  resp.state = res.result ? (Worker__V1__TaskState)wk_wire_task_state(res.result->state)
                          : WORKER__V1__TASK_STATE__TASK_STATE_PREPARING;
  if (!res.result || !wk_task_state_terminal(res.result->state)) {
    reply_packed(rpc, &resp.base);
    return;
  }
  /* terminal: append the encoded result as field 4 */
  wk_buf b = {0};
  size_t n = protobuf_c_message_get_packed_size(&resp.base);
  protobuf_c_message_pack(&resp.base, wk_buf_reserve(&b, n));
  b.len = n;
  wk_buf result = {0};
  wk_wire_append_task_result(&result, res.result, o->wall_offset_ms);
  wk_wire_append_bytes_field(&b, 4, result.data, result.len);
  wk_rpc_reply(rpc, b.data, b.len);
  wk_buf_free(&result);
  wk_buf_free(&b);
}

static const char *rt_builder_name(const Worker__V1__SubmitTaskRequest *req) {
  return (req->function->type && req->function->type[0]) ? req->function->type : "single";
}

/* Digest of the request without its slot id: a reused task id must carry the same
 * request to be a duplicate. */
static uint64_t request_digest(const Worker__V1__SubmitTaskRequest *req) {
  Worker__V1__SubmitTaskRequest copy = *req;
  copy.slot_id = 0;
  size_t n = worker__v1__submit_task_request__get_packed_size(&copy);
  uint8_t *p = malloc(n ? n : 1);
  if (!p) abort();
  worker__v1__submit_task_request__pack(&copy, p);
  uint64_t h = wk_hash64(p, n, 0xd1e5u);
  free(p);
  return h;
}

static void handle_submit(wk_orch *o, wk_rpc *rpc) {
  const Worker__V1__SubmitTaskRequest *req = wk_rpc_request(rpc);
  char traceparent[64] = "";
  wk_rpc_metadata(rpc, "traceparent", traceparent, sizeof traceparent);
  wk_submit_request sr = {
      .task_id = req->task_id,
      .task_id_len = strlen(req->task_id),
      .slot_id = req->slot_id,
      .request_digest = request_digest(req),
      .requested_epoch = req->function->epoch,
      .timeout_ms = (int64_t)req->timeout_ms,
      .call_failure_policy = req->call_failure_policy
                                 ? (wk_call_failure_policy)req->call_failure_policy->mode
                                 : WK_CALL_FAIL_FAST,
      .max_failed_calls = req->call_failure_policy ? req->call_failure_policy->max_failed_calls : 0,
  };
  if (req->call_retry_policy) {
    const Worker__V1__CallRetryPolicy *p = req->call_retry_policy;
    sr.retry = (wk_retry_policy){
        .max_attempts = p->max_attempts,
        .initial_backoff_ms = (int64_t)p->initial_backoff_ms,
        .max_backoff_ms = (int64_t)p->max_backoff_ms,
        .backoff_multiplier_milli = (uint32_t)(p->backoff_multiplier * 1000.0),
        .retry_on_timeout = p->retry_on_timeout,
    };
  }
  char shadow_md[8] = "";
  bool is_shadow = wk_rpc_metadata(rpc, WK_SHADOW_METADATA_KEY, shadow_md, sizeof shadow_md) &&
                   wk_shadow_is_shadow_request(shadow_md);
  wk_task_rt *rt = wk_task_rt_create(o, req, traceparent, o->now_ms, o->cfg.core.default_task_timeout_ms);
  if (is_shadow) rt->result_handler[0] = '\0'; /* shadow traffic never reaches a writer */
  wk_submit_result res;
  wk_core_handle_submit(o->core, &sr, rt, o->now_ms, &res);
  if (!res.adapter_ctx_taken) wk_task_rt_unref(rt);
  if (res.err) {
    fail_core(rpc, res.err, req->task_id);
    return;
  }
  if (res.adapter_ctx_taken) rt->slot_id = res.slot_id;
  Worker__V1__SubmitTaskResponse resp = WORKER__V1__SUBMIT_TASK_RESPONSE__INIT;
  resp.task_id = req->task_id;
  resp.slot_id = res.slot_id;
  resp.state = (Worker__V1__TaskState)wk_wire_task_state(res.result->state);
  resp.duplicate = res.duplicate;
  resp.accepted_unix_ms = res.accepted_ms + o->wall_offset_ms;
  reply_packed(rpc, &resp.base);
  if (!res.duplicate && o->shadow && !is_shadow) {
    /* mirrored after the primary succeeded; the forwarder never blocks */
    size_t n = worker__v1__submit_task_request__get_packed_size(req);
    uint8_t *bytes = malloc(n ? n : 1);
    if (!bytes) abort();
    worker__v1__submit_task_request__pack(req, bytes);
    wk_shadow_offer(o->shadow, bytes, n);
    free(bytes);
  }
  if (!res.duplicate) {
    /* the audit line: who asked for what, once per accepted submission */
    json_t *a = json_pack("{s:s,s:s,s:s,s:I,s:s,s:s,s:I,s:I,s:I,s:b}", "task_id", req->task_id, "function",
                          req->function->name, "builder", rt_builder_name(req), "epoch_requested",
                          (json_int_t)req->function->epoch, "result_handler",
                          req->result_handler && !is_shadow ? req->result_handler->type : "", "peer",
                          wk_rpc_peer(rpc), "slot_id", (json_int_t)res.slot_id, "args_bytes",
                          (json_int_t)req->function->args.len, "timeout_ms", (json_int_t)req->timeout_ms,
                          "shadow", is_shadow);
    if (traceparent[0]) json_object_set_new(a, "traceparent", json_string(traceparent));
    wk_log_json(WK_LOG_INFO, "audit", a);
  }
  exec_cmds(o, &res.cmds);
}

static void handle_get_result(wk_orch *o, wk_rpc *rpc) {
  const Worker__V1__GetTaskResultRequest *req = wk_rpc_request(rpc);
  const wk_task_result *r;
  wk_err err = wk_core_get_result(o->core, req->task_id, strlen(req->task_id), &r);
  if (err) {
    fail_core(rpc, err, req->task_id);
    return;
  }
  reply_result(o, rpc, r);
}

static void handle_cancel(wk_orch *o, wk_rpc *rpc) {
  const Worker__V1__CancelTaskRequest *req = wk_rpc_request(rpc);
  char reason[1100];
  snprintf(reason, sizeof reason, "cancelled: %s",
           (req->reason && req->reason[0]) ? req->reason : "by request");
  wk_transition_result tr;
  wk_core_handle_abort(o->core, req->task_id, strlen(req->task_id), WK_FAIL_CANCELLED, reason,
                       o->now_ms, &tr);
  if (tr.err) {
    fail_core(rpc, tr.err, req->task_id);
    return;
  }
  exec_cmds(o, &tr.cmds);
  const wk_task_result *r;
  if (wk_core_get_result(o->core, req->task_id, strlen(req->task_id), &r) == WK_OK) {
    reply_result(o, rpc, r);
  } else {
    fail_core(rpc, WK_ERR_NOT_FOUND, req->task_id);
  }
}

static int serving_status(const wk_orch *o) {
  wk_heartbeat hb = wk_core_derive_heartbeat(o->core, o->now_ms);
  return (hb.ready && !hb.draining) ? GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING
                                    : GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__NOT_SERVING;
}

static bool known_service(const char *s) {
  return !s || !s[0] || strcmp(s, "worker.v1.WorkerService") == 0;
}

static void send_health(wk_rpc *rpc, int status, bool stream) {
  Grpc__Health__V1__HealthCheckResponse resp = GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__INIT;
  resp.status = (Grpc__Health__V1__HealthCheckResponse__ServingStatus)status;
  uint8_t buf[16];
  size_t n = grpc__health__v1__health_check_response__pack(&resp, buf);
  if (stream) {
    wk_rpc_send(rpc, buf, n);
  } else {
    wk_rpc_reply(rpc, buf, n);
  }
}

static void handle_health(wk_orch *o, wk_rpc *rpc, bool watch) {
  const Grpc__Health__V1__HealthCheckRequest *req = wk_rpc_request(rpc);
  if (!known_service(req->service)) {
    if (watch) {
      /* Watch reports SERVICE_UNKNOWN and keeps the stream (per the health spec) */
      send_health(rpc, GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVICE_UNKNOWN, true);
    } else {
      wk_rpc_fail(rpc, GRPC_STATUS_NOT_FOUND, "unknown service; this server serves \"\" and worker.v1.WorkerService");
      wk_rpc_release(rpc);
      return;
    }
  }
  if (!watch) {
    send_health(rpc, serving_status(o), false);
    wk_rpc_release(rpc);
    return;
  }
  health_watch *hw = calloc(1, sizeof *hw);
  if (!hw) abort();
  hw->rpc = rpc;
  hw->last_sent = known_service(req->service) ? serving_status(o) : -1;
  if (hw->last_sent >= 0) send_health(rpc, hw->last_sent, true);
  hw->next = o->health_watchers;
  o->health_watchers = hw;
}

static void health_changed(wk_orch *o) {
  int status = serving_status(o);
  for (health_watch *hw = o->health_watchers; hw; hw = hw->next) {
    if (hw->last_sent >= 0 && hw->last_sent != status) {
      hw->last_sent = status;
      send_health(hw->rpc, status, true);
    }
  }
}

static bool health_closed(wk_orch *o, wk_rpc *rpc) {
  for (health_watch **p = &o->health_watchers; *p; p = &(*p)->next) {
    if ((*p)->rpc == rpc) {
      health_watch *hw = *p;
      *p = hw->next;
      wk_rpc_release(rpc);
      free(hw);
      return true;
    }
  }
  return false;
}

static void handle_rpc(wk_orch *o, wk_rpc *rpc) {
  wk_rpc_method m = wk_rpc_method_of(rpc);
  if (o->closing) {
    wk_rpc_fail(rpc, GRPC_STATUS_UNAVAILABLE, "the worker is shutting down");
    if (m != WK_RPC_WATCH_TASKS && m != WK_RPC_HEALTH_WATCH) wk_rpc_release(rpc);
    return;
  }
  switch (m) {
    case WK_RPC_REQUEST_TASK_SLOT: handle_request_slot(o, rpc); break;
    case WK_RPC_SUBMIT_TASK: handle_submit(o, rpc); break;
    case WK_RPC_GET_TASK_RESULT: handle_get_result(o, rpc); break;
    case WK_RPC_CANCEL_TASK: handle_cancel(o, rpc); break;
    case WK_RPC_WATCH_TASKS: wk_subs_watch(o->subs, rpc, o->now_ms, o->wall_offset_ms); return;
    case WK_RPC_HEALTH_CHECK: handle_health(o, rpc, false); return;
    case WK_RPC_HEALTH_WATCH: handle_health(o, rpc, true); return;
    case WK_RPC_METHOD_COUNT: wk_rpc_fail(rpc, GRPC_STATUS_UNIMPLEMENTED, "unknown method"); break;
  }
  wk_rpc_release(rpc);
}

static void reschedule_deadline(wk_orch *o);

static void on_wake(uv_async_t *a) {
  wk_orch *o = a->data;
  pthread_mutex_lock(&o->mu);
  /* swap the queue out so the lock is held only for the swap */
  wk_event *batch = o->events;
  size_t n = o->n_events;
  size_t cap = o->cap_events;
  o->events = o->draining_events;
  o->cap_events = o->cap_draining;
  o->n_events = 0;
  pthread_mutex_unlock(&o->mu);
  loop_now(o);
  for (size_t i = 0; i < n; i++) {
    wk_event *ev = &batch[i];
    if (ev->kind == EV_RPC) {
      handle_rpc(o, ev->rpc);
    } else if (!health_closed(o, ev->rpc)) {
      wk_subs_on_closed(o->subs, ev->rpc, ev->cancelled, o->now_ms);
    }
    run_steps(o);
  }
  o->draining_events = batch;
  o->cap_draining = cap;
  reschedule_deadline(o);
}

/* ---- timers ----------------------------------------------------------------------------- */

static void tick(wk_orch *o) {
  loop_now(o);
  wk_transition_result tr;
  uint64_t slots[TIMER_BATCH];
  size_t n;
  while ((n = wk_core_expired_slots(o->core, o->now_ms, slots, TIMER_BATCH)) > 0) {
    for (size_t i = 0; i < n; i++) {
      wk_core_handle_slot_lease_expired(o->core, slots[i], o->now_ms, &tr);
      exec_cmds(o, &tr.cmds);
    }
  }
  wk_task_id ids[TIMER_BATCH];
  while ((n = wk_core_timed_out_tasks(o->core, o->now_ms, ids, TIMER_BATCH)) > 0) {
    for (size_t i = 0; i < n; i++) {
      wk_core_handle_task_timed_out(o->core, ids[i].bytes, ids[i].len, o->now_ms, &tr);
      exec_cmds(o, &tr.cmds);
    }
  }
  while ((n = wk_core_watch_disconnected_tasks(o->core, o->now_ms, ids, TIMER_BATCH)) > 0) {
    for (size_t i = 0; i < n; i++) {
      wk_core_handle_watch_grace_expired(o->core, ids[i].bytes, ids[i].len, o->now_ms, &tr);
      exec_cmds(o, &tr.cmds);
    }
  }
  wk_core_purge_expired_results(o->core, o->now_ms);
  wk_calls_tick(o->calls, o->now_ms);
  scope_check_all(o);
  run_steps(o);
  reschedule_deadline(o);
}

static void on_tick(uv_timer_t *t) { tick(t->data); }

static void reschedule_deadline(wk_orch *o) {
  if (o->closing) return;
  int64_t next = wk_core_next_deadline(o->core);
  int64_t calls_next = wk_calls_next_deadline(o->calls);
  if (calls_next < next) next = calls_next;
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
    snprintf(err, err_len, "%s", why);
    return NULL;
  }
  wk_orch *o = calloc(1, sizeof *o);
  if (!o) abort();
  o->loop = loop;
  o->cfg = *cfg;
  o->core = wk_core_create(&cfg->core);
  o->sems[SEM_BUILDER].limit = cfg->builder_concurrency;
  o->sems[SEM_SCAN].limit = cfg->scan_concurrency;
  o->sems[SEM_EXECUTOR].limit = cfg->executor_concurrency;
  o->sems[SEM_PLUGIN].limit = cfg->plugin_concurrency;
  o->calls = wk_calls_create(&cfg->calls, &o->exec, calls_done, o, err, err_len);
  if (!o->calls) {
    wk_core_destroy(o->core);
    free(o);
    return NULL;
  }
  o->subs = wk_subs_create(o->core);
  pthread_mutex_init(&o->mu, NULL);
  uv_async_init(loop, &o->wake, on_wake);
  o->wake.data = o;
  uv_timer_init(loop, &o->tick);
  o->tick.data = o;
  uv_timer_init(loop, &o->deadline);
  o->deadline.data = o;
  compute_wall_offset(o);
  uv_timer_start(&o->tick, on_tick, (uint64_t)cfg->tick_ms, (uint64_t)cfg->tick_ms);
  return o;
}

void wk_orch_set_executor(wk_orch *o, wk_exec_adapter exec) { o->exec = exec; }

void wk_orch_set_shadow(wk_orch *o, wk_shadow *shadow) { o->shadow = shadow; }

void wk_orch_set_capacity(wk_orch *o, uint32_t calls) {
  loop_now(o);
  wk_calls_set_capacity(o->calls, calls, o->now_ms);
  run_steps(o);
}

void wk_orch_set_ready(wk_orch *o, bool ready) {
  wk_core_set_ready(o->core, ready);
  loop_now(o);
  health_changed(o);
}

void wk_orch_set_draining(wk_orch *o) {
  wk_core_set_draining(o->core, true);
  loop_now(o);
  health_changed(o);
}

uint32_t wk_orch_live_tasks(const wk_orch *o) { return wk_core_live_tasks(o->core); }

uv_loop_t *wk_orch_loop(wk_orch *o) { return o->loop; }

wk_heartbeat wk_orch_heartbeat(wk_orch *o) { return wk_core_derive_heartbeat(o->core, loop_now(o)); }

uint32_t wk_orch_open_streams(const wk_orch *o) {
  return wk_subs_streams(o->subs); /* health watches stay until the server stops */
}

void wk_orch_abort_all(wk_orch *o, const char *reason) {
  loop_now(o);
  wk_task_id ids[TIMER_BATCH];
  size_t n;
  while ((n = wk_core_list_live_tasks(o->core, ids, TIMER_BATCH)) > 0) {
    for (size_t i = 0; i < n; i++) {
      wk_transition_result tr;
      wk_core_handle_abort(o->core, ids[i].bytes, ids[i].len, WK_FAIL_WORKER_SHUTDOWN, reason,
                           o->now_ms, &tr);
      exec_cmds(o, &tr.cmds);
    }
  }
  run_steps(o);
}

static void on_handle_closed(uv_handle_t *h) {
  wk_orch *o = h->data;
  o->handles_open--;
  maybe_free(o);
}

static void maybe_free(wk_orch *o) {
  if (o->handles_open > 0 || o->jobs > 0) return;
  wk_subs_destroy(o->subs);
  while (o->health_watchers) {
    health_watch *hw = o->health_watchers;
    o->health_watchers = hw->next;
    wk_rpc_release(hw->rpc);
    free(hw);
  }
  wk_calls_destroy(o->calls);
  wk_core_destroy(o->core);
  pthread_mutex_destroy(&o->mu);
  free(o->events);
  free(o->draining_events);
  free(o);
}

void wk_orch_close(wk_orch *o) {
  /* converge what still runs so no executor callback can outlive the orchestrator */
  wk_orch_abort_all(o, "the worker shut down before the task finished");
  o->closing = true;
  /* events already queued: answer them (closing) before the handles go */
  on_wake(&o->wake);
  for (health_watch *hw = o->health_watchers; hw; hw = hw->next) {
    wk_rpc_finish(hw->rpc, GRPC_STATUS_UNAVAILABLE, "the worker is shutting down");
  }
  o->handles_open = 3;
  uv_close((uv_handle_t *)&o->wake, on_handle_closed);
  uv_close((uv_handle_t *)&o->tick, on_handle_closed);
  uv_close((uv_handle_t *)&o->deadline, on_handle_closed);
}

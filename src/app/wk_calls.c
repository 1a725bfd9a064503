/* wk_calls.c: see wk_calls.h. */
#include "app/wk_calls.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app/wk_output_spool.h"
#include "app/wk_audit.h"
#include "lib/wk_alloc.h"
#include "lib/wk_assert.h"
#include "lib/wk_err.h"
#include "lib/wk_freelist.h"
#include "lib/wk_log.h"

#define ACTIONS_MAX 256u
/* Attempt records kept for reuse (wk_freelist.h): the calls one loop turn ends and sends. */
#define ATTEMPT_POOL_MAX 64u

/* One attempt sent to the executors. */
struct wk_attempt {
  wk_attempt *next, *prev; /* in rt->calls.attempts */
  wk_task_rt *rt;
  uint64_t call_id;
  uint64_t group;       /* for a child: its group; 0 for a top-level call */
  uint32_t index;       /* call index, or position in the group */
  uint32_t attempt;     /* 1 = the call's first */
  void *handle;         /* the executor adapter's, while it runs */
  bool answered;        /* the executor's outcome came in */
  wk_buf output;        /* top-level: the encoded CallOutput of the answer */
  char failure[512];    /* "call N failed: Type: message" (room for a stderr tail) */
  wk_frame_child child; /* child: the answer, views into `child_bytes` */
  wk_buf child_bytes;
};

/* A parent's subcall request and its children's answers. */
struct wk_subcall_group {
  wk_subcall_group *next; /* in rt->calls.groups */
  uint64_t group;
  uint64_t parent_call_id;
  uint64_t request_id;
  uint32_t count;
  uint32_t target; /* the children's function and epoch: rt->code.items[target] */
  char entrypoint[WK_ENTRYPOINT_MAX + 1];
  wk_frame_content content_type;
  uint8_t *args;   /* count args back to back */
  size_t *offsets; /* count + 1 */
  wk_frame_child *children;
  wk_buf *child_bytes;
};

/* An outcome the executor adapter delivered from inside submit (its contract allows
 * it): the driver is walking its actions then, so the call is finished once that walk
 * is back at its top (finishing it at once would walk the action buffer twice). */
typedef struct wk_calls_early {
  wk_task_rt *rt;
  uint64_t call_id;
  wk_disp_result result;
} wk_calls_early;

struct wk_calls {
  wk_calls_config cfg;
  wk_disp *disp;
  wk_attempt **by_slot; /* attempts by wk_disp_call_slot(call_id): O(1) lookups */
  const wk_exec_adapter *exec;
  wk_calls_done_fn done;
  void *ud;
  wk_disp_action actions[ACTIONS_MAX];
  wk_disp_out out;
  int64_t now_ms;
  bool processing; /* inside process(): its walk of `actions` is not re-entered */
  wk_calls_early *early;
  uint32_t n_early, cap_early;
  wk_freelist attempt_pool; /* wk_attempt records, reused (one per call sent) */
};

static wk_task_rt *rt_of(uint64_t key) { return (wk_task_rt *)(uintptr_t)key; }

/* ---- attempts and groups ---------------------------------------------------------- */

static wk_attempt *find_attempt(const wk_calls *c, wk_task_rt *rt, uint64_t call_id) {
  wk_attempt *a = c->by_slot[wk_disp_call_slot(call_id)];
  return (a && a->call_id == call_id && a->rt == rt) ? a : NULL;
}

static void free_attempt(wk_calls *c, wk_task_rt *rt, wk_attempt *a) {
  WK_ASSERT(a->rt == rt); /* an attempt is on its own task's list only */
  WK_ASSERT(a->prev != NULL || rt->calls.attempts == a);
  if (a->prev) {
    a->prev->next = a->next;
  } else {
    rt->calls.attempts = a->next;
  }
  if (a->next) a->next->prev = a->prev;
  wk_attempt **slot = &c->by_slot[wk_disp_call_slot(a->call_id)];
  if (*slot == a) *slot = NULL;
  wk_buf_free(&a->output);
  wk_buf_free(&a->child_bytes);
  wk_freelist_put(&c->attempt_pool, a);
}

static wk_subcall_group *find_group(wk_task_rt *rt, uint64_t group) {
  for (wk_subcall_group *g = rt->calls.groups; g; g = g->next) {
    if (g->group == group) return g;
  }
  return NULL;
}

static void free_group(wk_task_rt *rt, wk_subcall_group *g) {
  for (wk_subcall_group **p = &rt->calls.groups; *p; p = &(*p)->next) {
    if (*p == g) {
      *p = g->next;
      break;
    }
  }
  for (uint32_t i = 0; i < g->count; i++) wk_buf_free(&g->child_bytes[i]);
  free(g->child_bytes);
  free(g->children);
  free(g->args);
  free(g->offsets);
  free(g);
}

/* ---- actions ------------------------------------------------------------------------- */

static void send_attempt(wk_calls *c, const wk_disp_action *act) {
  wk_task_rt *rt = rt_of(act->task_key);
  char stream_args[WK_STREAM_ARGS_MAX];
  wk_call_spec spec = {
      .task_id = rt->req.task_id,
      .function = rt->req.function,
      .epoch = rt->act.epoch,
      .code_dir = rt->act.code_dir,
      .entrypoint = rt->req.entrypoint,
      .content_type = rt->req.args_json ? WK_FRAME_CONTENT_JSON : WK_FRAME_CONTENT_BYTES,
      .call_index = act->index,
      .again = act->again,
      .scratch_dir = rt->act.scratch_dir,
      .traceparent = rt->req.traceparent,
  };
  if (act->depth == 0) {
    if (rt->build.streaming) {
      size_t n = rt->build.impl->stream_args(&rt->build.stream, act->index, stream_args,
                                             sizeof stream_args);
      spec.args = (wk_frame_bytes){(const uint8_t *)stream_args, (uint32_t)n};
      spec.content_type = WK_FRAME_CONTENT_JSON;
    } else {
      const wk_call_item *it = &rt->build.list.items[act->index];
      spec.args = (wk_frame_bytes){it->args, (uint32_t)it->len};
    }
  } else {
    wk_subcall_group *g = find_group(rt, act->group);
    if (!g) return; /* its parent is gone: a CANCEL follows */
    WK_ASSERT(g->target < rt->code.count);
    const wk_rt_target *t = &rt->code.items[g->target];
    spec.function = t->function;
    spec.epoch = t->epoch;
    spec.code_dir = t->code_dir;
    spec.entrypoint = g->entrypoint;
    spec.content_type = g->content_type;
    size_t at = g->offsets[act->index];
    spec.args = (wk_frame_bytes){g->args + at, (uint32_t)(g->offsets[act->index + 1] - at)};
  }
  /* A deadline from the call timeout reaches the executors early enough to capture a
   * wedged call's stack before the dispatcher gives up on it (the dispatcher got the
   * timeout plus that budget). The task's own deadline is passed as it is: at that
   * moment the task converges TASK_TIMEOUT and its calls are cancelled. */
  if (act->deadline_ms != INT64_MAX) {
    int64_t deadline = act->deadline_ms;
    wk_disp_task_params p; /* the task's deadline is the dispatcher's copy of the core's */
    if (rt->req.call_timeout_ms && wk_disp_task_params_get(c->disp, act->task, &p) == WK_OK &&
        deadline < p.task_deadline_ms) {
      deadline -= c->cfg.escalation_budget_ms;
    }
    int64_t left = deadline - c->now_ms;
    spec.deadline_ms = left < 1 ? 1 : (left > UINT32_MAX ? UINT32_MAX : (uint32_t)left);
  }
  wk_attempt *a = wk_freelist_calloc(&c->attempt_pool);
  a->rt = rt;
  a->call_id = act->call_id;
  a->group = act->depth ? act->group : 0;
  a->index = act->index;
  a->attempt = act->attempt;
  a->next = rt->calls.attempts;
  if (rt->calls.attempts) rt->calls.attempts->prev = a;
  rt->calls.attempts = a;
  /* one attempt per dispatcher call record: the record's previous attempt is over. A
   * retry without backoff is sent while its answered predecessor is being processed:
   * that one goes now (its answer was handed to the dispatcher already). */
  wk_attempt *prev = c->by_slot[wk_disp_call_slot(a->call_id)];
  if (prev) {
    WK_ASSERT(prev->answered);
    free_attempt(c, prev->rt, prev);
  }
  WK_ASSERT(c->by_slot[wk_disp_call_slot(a->call_id)] == NULL);
  c->by_slot[wk_disp_call_slot(a->call_id)] = a;
  a->handle = c->exec->submit(c->exec->impl, &spec, a);
}

static void cancel_attempt(wk_calls *c, const wk_disp_action *act) {
  wk_task_rt *rt = rt_of(act->task_key);
  wk_attempt *a = find_attempt(c, rt, act->call_id);
  if (!a) return;
  if (a->handle && !a->answered) c->exec->cancel(c->exec->impl, a->handle);
  free_attempt(c, rt, a);
}

/* Ends the task's calls phase now (its other calls are stopped by the orchestrator),
 * before the dispatcher's TASK_DONE: rt->calls says why (over_limit or spool_error). */
static void stop_early(wk_calls *c, wk_task_rt *rt) {
  rt->calls.ok = false;
  rt->calls.stopped = true;
  c->done(c->ud, rt);
}

/* Keeps call `index`'s encoded output `rec` (taken over). With a writer it goes to the
 * task's spool file at once. Inline, it counts against max_inline_output_bytes as it
 * arrives: past the limit the task keeps no output (they are freed now) and its calls
 * phase ends. After a stop, outputs decided in the same turn are dropped. */
static void keep_output(wk_calls *c, wk_task_rt *rt, uint32_t index, wk_buf *rec) {
  wk_rt_calls *rc = &rt->calls;
  if (rc->stopped) {
    wk_buf_free(rec);
    return;
  }
  rc->output_bytes += rec->len;
  if (rt->act.spool) {
    int put = wk_output_spool_put(rt->act.spool, index, rec->data, rec->len, rc->spool_error,
                                  sizeof rc->spool_error);
    wk_buf_free(rec);
    if (put != 0) stop_early(c, rt);
    return;
  }
  WK_ASSERT(rc->outputs[index].encoded.len == 0); /* one final result per call */
  rc->outputs[index].encoded = *rec;              /* moved */
  *rec = (wk_buf){0};
  if (rc->output_bytes <= c->cfg.max_inline_output_bytes) return;
  rc->over_limit = true;
  for (uint64_t i = 0; i < rt->build.calls_total; i++) wk_buf_free(&rc->outputs[i].encoded);
  stop_early(c, rt);
}

/* The poison pill: the executor died under call `a` on the last attempt its policy
 * allows for that (retry_on_executor_lost, max_attempts spent). The call fails for good:
 * its error, still ExecutorLost, says so and is not retryable, so that neither this
 * worker nor a client sends it again to kill another executor. */
static void lost_for_good(wk_task_rt *rt, const wk_disp_action *act, wk_attempt *a) {
  /* the last attempt's error type stays ("call N failed: TYPE: message"): an executor
   * the kernel killed at executor_memory_max is still MemoryLimit, others ExecutorLost */
  char type[64] = "ExecutorLost";
  const char *last = a->failure;
  const char *p = strstr(a->failure, "failed: ");
  const char *colon = p ? strstr(p + 8, ": ") : NULL;
  if (colon && (size_t)(colon - (p + 8)) < sizeof type) {
    memcpy(type, p + 8, (size_t)(colon - (p + 8)));
    type[colon - (p + 8)] = '\0';
    last = colon + 2;
  }
  char msg[sizeof a->failure];
  int n = snprintf(msg, sizeof msg,
                   "its executor died under this call on attempt %u of %u (max_attempts, "
                   "retry_on_executor_lost): it fails for good and is not retried again; "
                   "the last: ",
                   (unsigned)act->attempt, (unsigned)rt->req.max_attempts);
  if (n > 0 && (size_t)n < sizeof msg) {
    size_t room = sizeof msg - (size_t)n - 1, len = strlen(last);
    memcpy(msg + n, last, len < room ? len : room);
    msg[(size_t)n + (len < room ? len : room)] = '\0';
  }
  wk_call_outcome o = {
      .status = WK_CALL_ERROR, /* final: not retryable */
      .error_type = wk_frame_bytes_cstr(type),
      .error_message = wk_frame_bytes_cstr(msg),
  };
  a->output.len = 0;
  wk_task_rt_encode_output(act->index, &o, &a->output, a->failure, sizeof a->failure);
}

static void record_call(wk_calls *c, const wk_disp_action *act) {
  wk_task_rt *rt = rt_of(act->task_key);
  wk_attempt *a = find_attempt(c, rt, act->call_id);
  WK_ASSERT(act->depth == 0);
  WK_ASSERT(act->index < rt->build.calls_total);
  bool failed = act->result != WK_DISP_OK;
  rt->calls.done++;
  if (failed) {
    rt->calls.failed++;
    rt->calls.stats.calls_failed++;
  } else {
    rt->calls.stats.calls_succeeded++;
  }
  WK_ASSERT(rt->calls.done <= rt->build.calls_total);
  wk_buf rec = {0};
  if (a && a->answered && act->result == WK_DISP_EXECUTOR_LOST && rt->req.retry_on_executor_lost &&
      act->attempt >= rt->req.max_attempts)
    lost_for_good(rt, act, a);
  if (a && a->answered) {
    rec = a->output; /* moved */
    a->output = (wk_buf){0};
    if (failed && !rt->calls.first_failure[0])
      snprintf(rt->calls.first_failure, sizeof rt->calls.first_failure, "%s", a->failure);
  } else {
    /* the dispatcher decided without an answer (deadline backstop) */
    wk_call_outcome o = {
        .status = WK_CALL_TIMEOUT,
        .error_type = wk_frame_bytes_cstr("DeadlineExceeded"),
        .error_message = wk_frame_bytes_cstr("the call got no answer before its deadline"),
    };
    wk_task_rt_encode_output(act->index, &o, &rec,
                             rt->calls.first_failure[0] ? NULL : rt->calls.first_failure,
                             sizeof rt->calls.first_failure);
  }
  if (a) free_attempt(c, rt, a);
  keep_output(c, rt, act->index, &rec);
}

static void record_child(wk_calls *c, const wk_disp_action *act) {
  (void)c;
  wk_task_rt *rt = rt_of(act->task_key);
  wk_subcall_group *g = find_group(rt, act->group);
  wk_attempt *a = find_attempt(c, rt, act->call_id);
  if (g && act->index < g->count) {
    if (a && a->answered) {
      g->child_bytes[act->index] = a->child_bytes; /* moved: the views stay valid */
      a->child_bytes = (wk_buf){0};
      g->children[act->index] = a->child;
    } else {
      g->children[act->index] = (wk_frame_child){
          .status = WK_FRAME_STATUS_ERROR,
          .error_type = wk_frame_bytes_cstr("DeadlineExceeded"),
          .error_message = wk_frame_bytes_cstr("the subcall got no answer before its deadline"),
      };
    }
  }
  if (a) free_attempt(c, rt, a);
}

static void complete_group(wk_calls *c, const wk_disp_action *act) {
  wk_task_rt *rt = rt_of(act->task_key);
  wk_subcall_group *g = find_group(rt, act->group);
  wk_attempt *parent = find_attempt(c, rt, act->call_id);
  if (!g) return;
  if (parent && parent->handle && !parent->answered) {
    c->exec->answer_subcalls(c->exec->impl, parent->handle, g->request_id, g->children, g->count);
  }
  free_group(rt, g);
}

static void refill(wk_calls *c, wk_task_rt *rt);

/* An attempt whose answer made no call final (a retry follows, or nobody waited for
 * it) is over once its answer was processed; CALL_DONE and SUBCALL_DONE freed the
 * others. Looked up by call_id: its memory may already hold a new attempt. */
static void forget_answered(wk_calls *c, wk_task_rt *rt, uint64_t call_id) {
  wk_attempt *left = find_attempt(c, rt, call_id);
  if (left) free_attempt(c, rt, left);
}

static void process(wk_calls *c) {
  WK_ASSERT(!c->processing); /* one walk of the action buffer at a time */
  c->processing = true;
  uint32_t early = 0; /* of c->early, the outcomes handed to the dispatcher */
  for (;;) {
    for (uint32_t i = 0; i < c->out.count; i++) {
      const wk_disp_action *act = &c->actions[i];
      wk_task_rt *rt = rt_of(act->task_key);
      switch (act->kind) {
        case WK_DISP_SEND: send_attempt(c, act); break;
        case WK_DISP_CANCEL: cancel_attempt(c, act); break;
        case WK_DISP_CALL_DONE: record_call(c, act); break;
        case WK_DISP_SUBCALL_DONE: record_child(c, act); break;
        case WK_DISP_SUBCALLS_COMPLETE: complete_group(c, act); break;
        case WK_DISP_TASK_DONE: {
          wk_disp_task_retried(c->disp, act->task, &rt->calls.stats.calls_retried);
          if (!rt->calls.stopped) { /* else reported when it stopped */
            rt->calls.ok = act->ok;
            c->done(c->ud, rt);
          }
          break;
        }
      }
      if (act->kind == WK_DISP_CALL_DONE && rt->build.streaming) refill(c, rt);
    }
    bool more = c->out.more;
    c->out.count = 0;
    c->out.more = false;
    if (more) {
      wk_disp_poll(c->disp, c->now_ms, &c->out);
    } else if (early < c->n_early) { /* answered inside submit: finish them now */
      wk_calls_early e = c->early[early++];
      wk_disp_call_finished(c->disp, e.call_id, e.result, c->now_ms, &c->out);
    } else {
      break;
    }
  }
  for (uint32_t i = 0; i < c->n_early; i++) forget_answered(c, c->early[i].rt, c->early[i].call_id);
  c->n_early = 0;
  c->processing = false;
}

/* Hands a stream's next calls to the dispatcher while its queue for the task is low. */
static void refill(wk_calls *c, wk_task_rt *rt) {
  if (!rt->calls.disp_task || rt->calls.added >= rt->build.calls_total) return;
  if (wk_disp_task_queued(c->disp, rt->calls.disp_task) >= c->cfg.stream_low_water) return;
  uint64_t n = rt->build.calls_total - rt->calls.added;
  if (n > c->cfg.stream_batch) n = c->cfg.stream_batch;
  rt->calls.added += n;
  /* actions land in the shared buffer; the caller's process() loop picks them up */
  wk_disp_add_calls(c->disp, rt->calls.disp_task, (uint32_t)n,
                    rt->calls.added == rt->build.calls_total, c->now_ms, &c->out);
}

/* ---- entry points -------------------------------------------------------------------- */

wk_calls *wk_calls_create(const wk_calls_config *cfg, const wk_exec_adapter *exec,
                          wk_calls_done_fn done, void *ud, char *err, size_t err_len) {
  const char *why = NULL;
  if (wk_disp_config_validate(&cfg->disp, &why) != WK_OK) {
    wk_errf(err, err_len, "dispatcher: %s", why);
    return NULL;
  }
  wk_calls *c = wk_xcalloc(1, sizeof *c);
  c->cfg = *cfg;
  if (c->cfg.stream_batch == 0) c->cfg.stream_batch = 256;
  if (c->cfg.stream_low_water == 0) c->cfg.stream_low_water = 128;
  c->disp = wk_disp_create(&cfg->disp);
  c->by_slot = wk_xcalloc(cfg->disp.max_calls, sizeof *c->by_slot);
  c->exec = exec;
  c->done = done;
  c->ud = ud;
  c->out = (wk_disp_out){.items = c->actions, .capacity = ACTIONS_MAX};
  wk_freelist_init(&c->attempt_pool, sizeof(wk_attempt), ATTEMPT_POOL_MAX);
  return c;
}

void wk_calls_destroy(wk_calls *c) {
  if (!c) return;
  WK_ASSERT(!c->processing);
  wk_disp_destroy(c->disp);
  wk_freelist_drain(&c->attempt_pool);
  free(c->early);
  free(c->by_slot);
  free(c);
}

void wk_calls_set_capacity(wk_calls *c, uint32_t calls, int64_t now_ms) {
  c->now_ms = now_ms;
  wk_disp_set_capacity(c->disp, calls);
  wk_disp_poll(c->disp, now_ms, &c->out);
  process(c);
}

void wk_calls_start(wk_calls *c, wk_task_rt *rt, const wk_task_view *task, int64_t now_ms) {
  WK_ASSERT(rt->calls.disp_task == 0); /* a task's calls start once */
  WK_ASSERT(rt->calls.outputs == NULL);
  WK_ASSERT(rt->calls.attempts == NULL);
  c->now_ms = now_ms;
  if (rt->act.spool) { /* a writer's outputs go to the spool file as they arrive */
    wk_output_spool_set_calls(rt->act.spool, rt->build.calls_total);
  } else if (rt->build.calls_total <= 1) { /* most tasks: no allocation */
    rt->calls.outputs = &rt->calls.output_one;
  } else {
    rt->calls.outputs = wk_xcalloc(rt->build.calls_total, sizeof *rt->calls.outputs);
  }
  rt->calls.stats.calls_total = rt->build.calls_total; /* the calls done count up to it */
  wk_disp_task_params p = {
      .failure_policy = task->call_failure_policy,
      .max_failed_calls = task->max_failed_calls,
      .retry = task->retry,
      .retry_on_executor_lost = rt->req.retry_on_executor_lost,
      .call_timeout_ms =
          rt->req.call_timeout_ms ? rt->req.call_timeout_ms + c->cfg.escalation_budget_ms : 0,
      .task_deadline_ms = task->deadline_ms,
  };
  wk_err err = wk_disp_add_task(c->disp, (uint64_t)(uintptr_t)rt, &p, &rt->calls.disp_task);
  if (err != WK_OK) {
    rt->calls.disp_task = 0;
    rt->calls.ok = false;
    snprintf(rt->calls.first_failure, sizeof rt->calls.first_failure,
             "the dispatcher cannot take the task (%s): too many tasks in their calls phase",
             wk_err_name(err));
    c->done(c->ud, rt);
    return;
  }
  if (rt->build.streaming) {
    refill(c, rt);
  } else {
    rt->calls.added = rt->build.calls_total;
    wk_disp_add_calls(c->disp, rt->calls.disp_task, (uint32_t)rt->build.calls_total, true, now_ms,
                      &c->out);
  }
  process(c);
}

void wk_calls_stop(wk_calls *c, wk_task_rt *rt, int64_t now_ms) {
  c->now_ms = now_ms;
  if (rt->calls.disp_task) {
    wk_disp_cancel_task(c->disp, rt->calls.disp_task, &c->out);
    process(c);
    wk_disp_remove_task(c->disp, rt->calls.disp_task);
    rt->calls.disp_task = 0;
  }
  while (rt->calls.attempts) {
    wk_attempt *a = rt->calls.attempts;
    if (a->handle && !a->answered) c->exec->cancel(c->exec->impl, a->handle);
    free_attempt(c, rt, a);
  }
  while (rt->calls.groups) free_group(rt, rt->calls.groups);
  WK_ASSERT(rt->calls.disp_task == 0);
}

/* Hands an attempt's outcome to the dispatcher and carries out what it decides. An
 * outcome delivered inside submit (c->processing) is finished by the walk under way,
 * once it is back at its top. */
static void finish_attempt(wk_calls *c, wk_task_rt *rt, uint64_t call_id, wk_disp_result r) {
  if (c->processing) {
    if (c->n_early == c->cap_early) {
      c->cap_early = c->cap_early ? c->cap_early * 2 : 8;
      c->early = wk_xrealloc(c->early, c->cap_early * sizeof *c->early);
    }
    c->early[c->n_early++] = (wk_calls_early){rt, call_id, r};
    return;
  }
  wk_disp_call_finished(c->disp, call_id, r, c->now_ms, &c->out);
  process(c); /* emits everything decided, so a CALL_DONE for this attempt is out by now */
  forget_answered(c, rt, call_id);
}

/* Retries the dispatcher scheduled for the task so far; they count live in its stats. */
static uint64_t retried_so_far(wk_calls *c, wk_task_rt *rt) {
  if (rt->calls.disp_task)
    wk_disp_task_retried(c->disp, rt->calls.disp_task, &rt->calls.stats.calls_retried);
  return rt->calls.stats.calls_retried;
}

/* The outcome of attempt `attempt` of call `index` made the dispatcher retry it: the
 * first WK_RT_RETRIES_LISTED such attempts are listed in the result, with why. */
static void note_retry(wk_task_rt *rt, uint32_t index, uint32_t attempt, const wk_call_outcome *o) {
  if (rt->calls.n_retries >= WK_RT_RETRIES_LISTED) return;
  wk_rt_retry *r = &rt->calls.retries[rt->calls.n_retries++];
  r->index = index;
  r->attempt = attempt;
  const char *why = o->status == WK_CALL_EXECUTOR_LOST ? "ExecutorLost"
                    : o->status == WK_CALL_TIMEOUT     ? "DeadlineExceeded"
                                                       : "Retryable";
  if (o->error_type.len) {
    snprintf(r->type, sizeof r->type, "%.*s", (int)o->error_type.len,
             (const char *)o->error_type.ptr);
  } else {
    snprintf(r->type, sizeof r->type, "%s", why);
  }
  snprintf(r->message, sizeof r->message, "%.*s", (int)o->error_message.len,
           (const char *)o->error_message.ptr);
}

static wk_disp_result disp_result(wk_call_status s) {
  switch (s) {
    case WK_CALL_OK: return WK_DISP_OK;
    case WK_CALL_ERROR: return WK_DISP_ERROR;
    case WK_CALL_RETRYABLE: return WK_DISP_RETRYABLE;
    case WK_CALL_EXECUTOR_LOST: return WK_DISP_EXECUTOR_LOST;
    case WK_CALL_TIMEOUT: return WK_DISP_TIMEOUT;
    case WK_CALL_NOT_STARTED: return WK_DISP_NOT_STARTED;
  }
  return WK_DISP_ERROR;
}

wk_task_rt *wk_calls_on_result(wk_calls *c, void *call_ctx, const wk_call_outcome *o,
                               int64_t now_ms) {
  c->now_ms = now_ms;
  wk_attempt *a = call_ctx;
  WK_ASSERT(a != NULL);
  WK_ASSERT(!a->answered); /* the pool answers an attempt once, and never a cancelled one */
  wk_task_rt *rt = a->rt;
  WK_ASSERT(find_attempt(c, rt, a->call_id) == a);
  a->handle = NULL;
  if (o->status == WK_CALL_NOT_STARTED) {
    /* never ran: the dispatcher sends the call again (a new attempt id, same number, the
     * same call record), so this attempt is over before that SEND */
    uint64_t call_id = a->call_id;
    free_attempt(c, rt, a);
    finish_attempt(c, rt, call_id, WK_DISP_NOT_STARTED);
    return rt;
  }
  a->answered = true;
  rt->calls.stats.bytes_in += o->bytes_in;
  rt->calls.stats.bytes_out += o->output.len;
  rt->calls.stats.executor_cpu_us += o->cpu_us;
  if (a->group == 0) {
    /* the encoded output is kept until the task ends (100,000 of them for a big map):
     * encoded straight into an exact-size buffer, not a growable one */
    wk_buf_free(&a->output);
    wk_task_rt_encode_output(a->index, o, &a->output, a->failure, sizeof a->failure);
  } else {
    /* keep the child's answer: one buffer, views fixed up after it stops growing */
    wk_buf *b = &a->child_bytes;
    wk_buf_append(b, o->output.ptr, o->output.len);
    wk_buf_append(b, o->error_type.ptr, o->error_type.len);
    wk_buf_append(b, o->error_message.ptr, o->error_message.len);
    wk_buf_append(b, o->traceback.ptr, o->traceback.len);
    const uint8_t *p = b->data;
    a->child = (wk_frame_child){
        .status = o->status == WK_CALL_OK          ? WK_FRAME_STATUS_OK
                  : o->status == WK_CALL_RETRYABLE ? WK_FRAME_STATUS_RETRYABLE
                                                   : WK_FRAME_STATUS_ERROR,
        .content_type = o->content_type,
        .output = {p, o->output.len},
        .error_type = {p + o->output.len, o->error_type.len},
        .error_message = {p + o->output.len + o->error_type.len, o->error_message.len},
        .traceback = {p + o->output.len + o->error_type.len + o->error_message.len,
                      o->traceback.len},
    };
  }
  if (a->group != 0) {
    finish_attempt(c, rt, a->call_id, disp_result(o->status));
    return rt;
  }
  if (c->cfg.on_output) {
    c->cfg.on_output(c->cfg.on_output_ud, rt->req.task_id, a->index, a->attempt, o->stdout_bytes,
                     o->stderr_bytes);
  }
  uint32_t index = a->index, attempt = a->attempt; /* a may be gone after the finish */
  uint64_t retried_before = retried_so_far(c, rt);
  finish_attempt(c, rt, a->call_id, disp_result(o->status));
  if (retried_so_far(c, rt) > retried_before) note_retry(rt, index, attempt, o);
  return rt;
}

/* Answers every child of `req` at once with the same error: none of them runs. */
static void refuse_subcalls(wk_calls *c, wk_attempt *parent, const wk_frame_subcalls *req,
                            const char *type, const char *msg) {
  wk_frame_child *children = wk_xcalloc(req->count ? req->count : 1, sizeof *children);
  for (uint32_t i = 0; i < req->count; i++) {
    children[i] = (wk_frame_child){.status = WK_FRAME_STATUS_ERROR,
                                   .error_type = wk_frame_bytes_cstr(type),
                                   .error_message = wk_frame_bytes_cstr(msg)};
  }
  if (parent->handle)
    c->exec->answer_subcalls(c->exec->impl, parent->handle, req->request_id, children, req->count);
  free(children);
}

/* The children's target and entry point: the parent's own when the request names no
 * function (or the parent's function), else the task's pinned target of that name.
 * Returns false with *type and why set when the children must not run. */
static bool subcall_code(wk_calls *c, const wk_attempt *parent, const wk_frame_subcalls *req,
                         uint32_t *target, char *entrypoint, size_t ep_len, const char **type,
                         char *why, size_t why_len) {
  wk_task_rt *rt = parent->rt;
  WK_ASSERT(rt->code.count > 0); /* activation adopted the task's own function */
  uint32_t mine = 0;             /* the parent's own target and entry point */
  const char *my_entry = rt->req.entrypoint;
  if (parent->group) {
    const wk_subcall_group *pg = find_group(rt, parent->group);
    if (!pg) {
      *type = WK_TASK_CODE_REFUSED;
      snprintf(why, why_len, "the parent call is no longer running");
      return false;
    }
    mine = pg->target;
    my_entry = pg->entrypoint;
  }
  const wk_rt_target *own = &rt->code.items[mine];
  size_t fl = req->function.len;
  bool same =
      fl == 0 || (fl == strlen(own->function) && memcmp(req->function.ptr, own->function, fl) == 0);
  *target = mine;
  if (req->entrypoint.len > WK_ENTRYPOINT_MAX) {
    *type = WK_TASK_CODE_REFUSED;
    snprintf(why, why_len, "entrypoint of %u bytes (at most %u)", req->entrypoint.len,
             WK_ENTRYPOINT_MAX);
    return false;
  }
  if (req->entrypoint.len) {
    snprintf(entrypoint, ep_len, "%.*s", (int)req->entrypoint.len,
             (const char *)req->entrypoint.ptr);
  } else {
    snprintf(entrypoint, ep_len, "%s", same ? my_entry : WK_TASK_CODE_DEFAULT_ENTRYPOINT);
  }
  /* the AuditGate on every request: the function and the entry point it runs */
  char name[WK_FUNCTION_NAME_MAX + 1] = ""; /* "" for a name too long: the lookup refuses it */
  if (same) {
    snprintf(name, sizeof name, "%s", own->function);
  } else if (fl <= WK_FUNCTION_NAME_MAX) {
    snprintf(name, sizeof name, "%.*s", (int)fl, (const char *)req->function.ptr);
  }
  if (name[0] && !wk_audit_permits(c->cfg.code.audit_allow, c->cfg.code.audit_deny, name,
                                   entrypoint, why, why_len)) {
    *type = WK_TASK_CODE_DENIED;
    return false;
  }
  return same || wk_task_code_target(rt, &c->cfg.code, (const char *)req->function.ptr, fl, target,
                                     type, why, why_len) == 0;
}

wk_task_rt *wk_calls_on_subcalls(wk_calls *c, void *call_ctx, const wk_frame_subcalls *req,
                                 int64_t now_ms) {
  c->now_ms = now_ms;
  wk_attempt *parent = call_ctx;
  WK_ASSERT(parent != NULL);
  WK_ASSERT(!parent->answered); /* subcalls come from a call still running */
  wk_task_rt *rt = parent->rt;
  uint32_t target = 0;
  char entrypoint[WK_ENTRYPOINT_MAX + 1];
  const char *type = NULL;
  char why[WK_TASK_RT_MESSAGE_MAX + 1];
  if (!subcall_code(c, parent, req, &target, entrypoint, sizeof entrypoint, &type, why,
                    sizeof why)) {
    refuse_subcalls(c, parent, req, type, why);
    process(c);
    return rt;
  }
  uint64_t group = 0;
  wk_err err = wk_disp_add_subcalls(c->disp, parent->call_id, req->count, now_ms, &group, &c->out);
  if (err != WK_OK) {
    refuse_subcalls(c, parent, req, WK_TASK_CODE_REFUSED,
                    err == WK_ERR_INVALID_ARGUMENT
                        ? "subcalls nested deeper than this worker allows (max_depth)"
                    : err == WK_ERR_NO_SLOT
                        ? "too many calls in flight on this worker to start subcalls"
                        : "the parent call is no longer running");
    process(c);
    return rt;
  }
  wk_subcall_group *g = wk_xcalloc(1, sizeof *g);
  g->group = group;
  g->parent_call_id = parent->call_id;
  g->request_id = req->request_id;
  g->count = req->count;
  g->target = target;
  snprintf(g->entrypoint, sizeof g->entrypoint, "%s", entrypoint);
  g->content_type = req->content_type;
  g->offsets = wk_xcalloc((size_t)req->count + 1, sizeof *g->offsets);
  g->args = wk_xmalloc(req->args_enc.len ? req->args_enc.len : 1);
  g->children = wk_xcalloc(req->count, sizeof *g->children);
  g->child_bytes = wk_xcalloc(req->count, sizeof *g->child_bytes);
  wk_frame_iter it = wk_frame_subcalls_args(req);
  wk_frame_bytes arg;
  size_t at = 0;
  for (uint32_t i = 0; i < req->count && wk_frame_iter_next_arg(&it, &arg); i++) {
    memcpy(g->args + at, arg.ptr, arg.len);
    at += arg.len;
    g->offsets[i + 1] = at;
  }
  g->next = rt->calls.groups;
  rt->calls.groups = g;
  rt->calls.stats.subcalls += req->count;
  process(c);
  return rt;
}

wk_task_rt *wk_calls_task_of(void *call_ctx) {
  const wk_attempt *a = call_ctx;
  WK_ASSERT(a != NULL);
  return a->rt;
}

void wk_calls_answer_scratch(wk_calls *c, void *call_ctx, uint64_t request_id, const char *error) {
  const wk_attempt *a = call_ctx;
  if (!a->handle || a->answered || !c->exec->answer_scratch) return;
  c->exec->answer_scratch(c->exec->impl, a->handle, request_id, error);
}

void wk_calls_tick(wk_calls *c, int64_t now_ms) {
  c->now_ms = now_ms;
  wk_disp_tick(c->disp, now_ms, &c->out);
  process(c);
}

int64_t wk_calls_next_deadline(const wk_calls *c) { return wk_disp_next_deadline(c->disp); }

wk_disp_stats wk_calls_stats(const wk_calls *c) { return wk_disp_stats_get(c->disp); }

bool wk_calls_busy(const wk_calls *c) { return c->processing; }

/* wk_dispatcher.c: DispatcherCore's configuration, lifecycle, tasks and views.
 * Emission and the send loop live in wk_dispatch_sched.c; results, retries, timers,
 * subcalls and cancellation in wk_dispatch_calls.c; the invariant walk in
 * wk_dispatch_check.c. */
#include <string.h>

#include "core/wk_dispatch_int.h"
#include "lib/wk_assert.h"

/* ---- configuration ------------------------------------------------------------- */

void wk_disp_config_default(wk_disp_config *cfg) {
  memset(cfg, 0, sizeof *cfg);
  cfg->max_inflight = 16;
  cfg->window_initial = 4;
  cfg->window_max = 64;
  cfg->max_depth = 4;
  cfg->max_tasks = 1024;
  cfg->max_calls = 16384;
  cfg->rng_seed = 1;
  cfg->jitter = WK_DISP_JITTER_EQUAL;
}

wk_err wk_disp_config_validate(const wk_disp_config *cfg, const char **why) {
  const char *reason = NULL;
  if (cfg == NULL) {
    reason = "no configuration";
  } else if (cfg->window_initial < 1 || cfg->window_initial > WK_DISP_WINDOW_MAX) {
    reason = "window_initial must be between 1 and 1048576";
  } else if (cfg->window_max < cfg->window_initial || cfg->window_max > WK_DISP_WINDOW_MAX) {
    reason = "window_max must be between window_initial and 1048576";
  } else if (cfg->max_depth > WK_DISP_DEPTH_MAX) {
    reason = "max_depth must be at most 32";
  } else if (cfg->max_tasks < 1 || cfg->max_tasks > WK_DISP_TASKS_MAX) {
    reason = "max_tasks must be between 1 and 1048576";
  } else if (cfg->max_calls < 1 || cfg->max_calls > WK_DISP_CALLS_MAX) {
    reason = "max_calls must be between 1 and 67108864";
  } else if (cfg->jitter != WK_DISP_JITTER_EQUAL && cfg->jitter != WK_DISP_JITTER_FULL &&
             cfg->jitter != WK_DISP_JITTER_NONE) {
    reason = "jitter must be EQUAL, FULL or NONE";
  }
  if (why) *why = reason;
  return reason ? WK_ERR_INVALID_ARGUMENT : WK_OK;
}

/* ---- lifecycle -------------------------------------------------------------------- */

wk_disp *wk_disp_create(const wk_disp_config *cfg) {
  if (wk_disp_config_validate(cfg, NULL) != WK_OK) return NULL;
  wk_disp *d = wk_allocator_calloc(&cfg->allocator, 1, sizeof *d);
  d->cfg = *cfg;
  const wk_allocator *a = &d->cfg.allocator;
  d->capacity = cfg->max_inflight;
  wk_rng_seed(&d->rng, cfg->rng_seed);

  uint32_t nc = cfg->max_calls;
  /* zeroed and left untouched: a record is set up when first used (wk_disp__call_alloc) */
  d->calls = wk_allocator_calloc(a, nc, sizeof *d->calls);
  d->free_call_head = WK_DNONE;
  d->calls_touched = 0;
  d->free_calls = nc;

  uint32_t nt = cfg->max_tasks;
  d->tasks = wk_allocator_calloc(a, nt, sizeof *d->tasks);
  for (uint32_t i = 0; i < nt; i++) {
    wk_dtask *t = &d->tasks[i];
    t->state = WK_DT_FREE;
    t->gen = 0;
    t->l_prev = t->d_prev = t->d_next = WK_DNONE;
    t->l_next = (i + 1 < nt) ? i + 1 : WK_DNONE;
  }
  d->free_task_head = 0;

  d->ring = d->parked = d->done = (wk_dlist){WK_DNONE, WK_DNONE, 0};
  wk_heap_init(&d->backoff_heap, nc, a);
  wk_heap_init(&d->deadline_heap, nc, a);
  d->pend_cap = 3 * nc; /* see wk_dispatch_int.h: CANCEL + *_DONE + SUBCALLS_COMPLETE */
  d->pend = wk_allocator_calloc(a, d->pend_cap, sizeof *d->pend);
  return d;
}

void wk_disp_destroy(wk_disp *d) {
  if (!d) return;
  wk_allocator a = d->cfg.allocator;
  wk_heap_free(&d->backoff_heap, &a);
  wk_heap_free(&d->deadline_heap, &a);
  wk_allocator_free(&a, d->pend, (size_t)d->pend_cap * sizeof *d->pend);
  wk_allocator_free(&a, d->tasks, (size_t)d->cfg.max_tasks * sizeof *d->tasks);
  wk_allocator_free(&a, d->calls, (size_t)d->cfg.max_calls * sizeof *d->calls);
  wk_allocator_free(&a, d, sizeof *d);
}

void wk_disp_set_capacity(wk_disp *d, uint32_t max_inflight) {
  WK_ASSERT(d != NULL);
  d->capacity = max_inflight;
}

/* ---- names ------------------------------------------------------------------------- */

const char *wk_disp_result_name(wk_disp_result r) {
  switch (r) {
    case WK_DISP_OK: return "OK";
    case WK_DISP_ERROR: return "ERROR";
    case WK_DISP_RETRYABLE: return "RETRYABLE";
    case WK_DISP_EXECUTOR_LOST: return "EXECUTOR_LOST";
    case WK_DISP_TIMEOUT: return "TIMEOUT";
    case WK_DISP_NOT_STARTED: return "NOT_STARTED";
  }
  return "UNKNOWN";
}

const char *wk_disp_action_kind_name(wk_disp_action_kind k) {
  switch (k) {
    case WK_DISP_SEND: return "SEND";
    case WK_DISP_CANCEL: return "CANCEL";
    case WK_DISP_CALL_DONE: return "CALL_DONE";
    case WK_DISP_SUBCALL_DONE: return "SUBCALL_DONE";
    case WK_DISP_SUBCALLS_COMPLETE: return "SUBCALLS_COMPLETE";
    case WK_DISP_TASK_DONE: return "TASK_DONE";
  }
  return "UNKNOWN";
}

/* ---- internal helpers ------------------------------------------------------------- */

wk_dtask *wk_disp__task(const wk_disp *d, uint32_t handle) {
  uint32_t i = handle & ((1u << WK_DTASK_INDEX_BITS) - 1u);
  uint32_t gen = handle >> WK_DTASK_INDEX_BITS;
  if (gen == 0 || i >= d->cfg.max_tasks) return NULL;
  wk_dtask *t = &d->tasks[i];
  if (t->state == WK_DT_FREE || t->gen != gen) return NULL;
  return t;
}

uint32_t wk_disp__handle(const wk_disp *d, uint32_t t) {
  WK_ASSERT(t < d->cfg.max_tasks);
  WK_ASSERT(d->tasks[t].state != WK_DT_FREE);
  return wk_dtask_handle(t, d->tasks[t].gen);
}

wk_dpend *wk_disp__pend_push(wk_disp *d, wk_disp_action_kind kind) {
  /* bounded by construction (see wk_dispatch_int.h); overflow would be a bug */
  WK_ASSERT(d->pend_count < d->pend_cap);
  uint32_t at = d->pend_head + d->pend_count;
  if (at >= d->pend_cap) at -= d->pend_cap;
  d->pend_count++;
  wk_dpend *p = &d->pend[at];
  memset(p, 0, sizeof *p);
  p->kind = (uint8_t)kind;
  p->parent = WK_DNONE;
  return p;
}

/* ---- tasks -------------------------------------------------------------------------- */

/* Checks and normalises a task's parameters into `n`. */
static bool normalise_params(const wk_disp_task_params *p, wk_disp_task_params *n) {
  if (p->failure_policy != WK_CALL_FAIL_FAST && p->failure_policy != WK_CALL_CONTINUE) {
    return false;
  }
  const wk_retry_policy *r = &p->retry;
  if (r->max_attempts > WK_DISP_ATTEMPTS_MAX) return false;
  if (r->initial_backoff_ms < 0 || r->max_backoff_ms < 0) return false;
  if (r->backoff_multiplier_milli != 0 &&
      (r->backoff_multiplier_milli < 1000 ||
       r->backoff_multiplier_milli > WK_DISP_MULTIPLIER_MILLI_MAX)) {
    return false;
  }
  if (p->call_timeout_ms < 0 || p->task_deadline_ms < 0) return false;
  *n = *p;
  if (n->retry.max_attempts == 0) n->retry.max_attempts = 1;
  if (n->retry.backoff_multiplier_milli == 0) {
    n->retry.backoff_multiplier_milli = WK_DISP_MULTIPLIER_MILLI_DEFAULT;
  }
  if (n->retry.max_backoff_ms == 0 || n->retry.max_backoff_ms > WK_DISP_BACKOFF_MS_MAX) {
    n->retry.max_backoff_ms = WK_DISP_BACKOFF_MS_MAX;
  }
  if (n->retry.initial_backoff_ms > n->retry.max_backoff_ms) {
    n->retry.initial_backoff_ms = n->retry.max_backoff_ms;
  }
  if (n->failure_policy == WK_CALL_FAIL_FAST) n->max_failed_calls = 0;
  return true;
}

wk_err wk_disp_add_task(wk_disp *d, uint64_t task_key, const wk_disp_task_params *p,
                        uint32_t *task) {
  WK_ASSERT(d != NULL);
  wk_disp_task_params norm;
  if (p == NULL || task == NULL || !normalise_params(p, &norm)) return WK_ERR_INVALID_ARGUMENT;
  uint32_t i = d->free_task_head;
  if (i == WK_DNONE) return WK_ERR_NO_SLOT;
  wk_dtask *t = &d->tasks[i];
  WK_ASSERT(t->state == WK_DT_FREE);
  d->free_task_head = t->l_next;
  uint32_t gen = (t->gen + 1u) & WK_DTASK_GEN_MASK;
  memset(t, 0, sizeof *t);
  t->gen = gen ? gen : 1u;
  t->key = task_key;
  t->p = norm;
  t->state = WK_DT_LIVE;
  t->where = WK_DW_NOWHERE;
  t->window = d->cfg.window_initial;
  t->l_prev = t->l_next = t->d_prev = t->d_next = WK_DNONE;
  t->members = t->ready = (wk_dlist){WK_DNONE, WK_DNONE, 0};
  d->n_tasks++;
  *task = wk_dtask_handle(i, t->gen);
  WK_ASSERT(*task != 0);
  return WK_OK;
}

wk_err wk_disp_add_calls(wk_disp *d, uint32_t task, uint32_t n, bool last, int64_t now_ms,
                         wk_disp_out *out) {
  WK_ASSERT(d != NULL);
  if (out == NULL) return WK_ERR_INVALID_ARGUMENT;
  wk_dtask *t = wk_disp__task(d, task);
  wk_err err = WK_OK;
  if (t == NULL) {
    err = WK_ERR_NOT_FOUND;
  } else if (t->state != WK_DT_LIVE) {
    err = WK_ERR_STALE;
  } else if (t->last || n > UINT32_MAX - 1u - t->added) {
    err = WK_ERR_INVALID_ARGUMENT;
  } else {
    uint32_t ti = (uint32_t)(t - d->tasks);
    t->added += n;
    t->last = last;
    wk_disp__check_end(d, ti);
    wk_disp__update(d, ti);
  }
  wk_disp__flush(d, now_ms, true, out);
  return err;
}

wk_err wk_disp_task_params_get(const wk_disp *d, uint32_t task, wk_disp_task_params *out) {
  const wk_dtask *t = wk_disp__task(d, task);
  if (t == NULL || out == NULL) return WK_ERR_NOT_FOUND;
  *out = t->p;
  return WK_OK;
}

uint32_t wk_disp_task_queued(const wk_disp *d, uint32_t task) {
  const wk_dtask *t = wk_disp__task(d, task);
  if (t == NULL || t->state != WK_DT_LIVE) return 0;
  WK_ASSERT(t->next_index <= t->added);
  return t->added - t->next_index;
}

wk_err wk_disp_cancel_task(wk_disp *d, uint32_t task, wk_disp_out *out) {
  WK_ASSERT(d != NULL);
  if (out == NULL) return WK_ERR_INVALID_ARGUMENT;
  wk_dtask *t = wk_disp__task(d, task);
  if (t == NULL) {
    wk_disp__flush(d, 0, false, out);
    return WK_ERR_NOT_FOUND;
  }
  uint32_t ti = (uint32_t)(t - d->tasks);
  if (t->state != WK_DT_CANCELLED) {
    wk_disp__drop_all(d, ti);
    if (t->done_pending) {
      WK_DL_REMOVE(&d->done, d->tasks, ti, d_prev, d_next);
      t->done_pending = false;
    }
    t->state = WK_DT_CANCELLED;
    wk_disp__unschedule(d, ti);
  }
  WK_ASSERT(t->members.len == 0 && t->inflight == 0);
  /* without a `now` no SEND can be dated: out->more asks for a poll when one could go */
  wk_disp__flush(d, 0, false, out);
  return WK_OK;
}

wk_err wk_disp_remove_task(wk_disp *d, uint32_t task) {
  WK_ASSERT(d != NULL);
  wk_dtask *t = wk_disp__task(d, task);
  if (t == NULL) return WK_ERR_NOT_FOUND;
  uint32_t ti = (uint32_t)(t - d->tasks);
  wk_disp__drop_all(d, ti);
  if (t->done_pending) {
    WK_DL_REMOVE(&d->done, d->tasks, ti, d_prev, d_next);
    t->done_pending = false;
  }
  wk_disp__unschedule(d, ti);
  WK_ASSERT(t->members.len == 0 && t->inflight == 0 && t->where == WK_DW_NOWHERE);
  t->state = WK_DT_FREE;
  t->l_next = d->free_task_head;
  d->free_task_head = ti;
  d->n_tasks--;
  return WK_OK;
}

/* ---- views ------------------------------------------------------------------------- */

bool wk_disp_task_retried(const wk_disp *d, uint32_t task, uint64_t *retried) {
  const wk_dtask *t = wk_disp__task(d, task);
  if (t == NULL) return false;
  *retried = t->retried;
  return true;
}

wk_err wk_disp_task_info_get(const wk_disp *d, uint32_t task, wk_disp_task_info *info) {
  const wk_dtask *t = wk_disp__task(d, task);
  if (t == NULL || info == NULL) return WK_ERR_NOT_FOUND;
  memset(info, 0, sizeof *info);
  info->task_key = t->key;
  info->ended = t->state == WK_DT_ENDED;
  info->ok = t->ok;
  info->cancelled = t->state == WK_DT_CANCELLED;
  info->last = t->last;
  info->window = t->window;
  info->inflight = t->inflight;
  info->waiting = t->waiting;
  info->resuming = 0; /* a view: walk the task's records */
  for (uint32_t c = t->members.head; c != WK_DNONE; c = d->calls[c].m_next) {
    if (d->calls[c].state == WK_DC_RESUMING) info->resuming++;
  }
  info->backoff = t->backoff;
  info->ready = t->ready.len;
  info->queued = t->state == WK_DT_LIVE ? t->added - t->next_index : 0;
  info->added = t->added;
  info->finished = t->finished;
  info->failed = t->failed;
  info->live_calls = t->members.len;
  info->succeeded = t->succeeded;
  info->retried = t->retried;
  info->subcalls = t->subcalls;
  info->returned = t->returned;
  return WK_OK;
}

wk_disp_stats wk_disp_stats_get(const wk_disp *d) {
  wk_disp_stats s;
  memset(&s, 0, sizeof s);
  s.capacity = d->capacity;
  s.inflight = d->inflight;
  s.tasks = d->n_tasks;
  s.live_calls = d->cfg.max_calls - d->free_calls;
  s.pending = d->pend_count + d->done.len;
  s.sends = d->sends;
  s.stale_results = d->stale_results;
  s.timeouts = d->timeouts;
  s.retries = d->retries;
  s.not_started = d->not_started;
  return s;
}

bool wk_disp_pending(const wk_disp *d) { return d->pend_count > 0 || d->done.len > 0; }

int64_t wk_disp_next_deadline(const wk_disp *d) {
  int64_t next = INT64_MAX;
  if (!wk_heap_empty(&d->backoff_heap)) next = wk_heap_top_key(&d->backoff_heap);
  if (!wk_heap_empty(&d->deadline_heap) && wk_heap_top_key(&d->deadline_heap) < next) {
    next = wk_heap_top_key(&d->deadline_heap);
  }
  return next;
}

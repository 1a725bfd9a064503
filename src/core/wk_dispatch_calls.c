/* wk_dispatch_calls.c: DispatcherCore's call records and what happens to a call:
 * results, the window, retries with backoff and jitter, final results and task
 * ends, timers (backoff expiry, attempt deadlines), subcalls and cancellation. */
#include <string.h>

#include "core/wk_dispatch_int.h"
#include "lib/wk_assert.h"

/* ---- records ----------------------------------------------------------------------- */

uint32_t wk_disp__call_alloc(wk_disp *d, uint32_t ti) {
  WK_ASSERT(d->free_calls > 0);
  uint32_t c = d->free_call_head;
  if (c != WK_DNONE) {
    d->free_call_head = d->calls[c].q_next;
  } else { /* a record never used before (zeroed: FREE, gen 0) */
    WK_ASSERT(d->calls_touched < d->cfg.max_calls);
    c = d->calls_touched++;
  }
  wk_dcall *call = &d->calls[c];
  WK_ASSERT(call->state == WK_DC_FREE);
  d->free_calls--;
  uint32_t gen = call->gen; /* keeps growing across reuse: old call ids stay stale */
  memset(call, 0, sizeof *call);
  call->gen = gen;
  call->task = ti;
  call->parent = call->child_head = WK_DNONE;
  call->q_prev = call->q_next = call->s_prev = call->s_next = WK_DNONE;
  call->deadline_ms = INT64_MAX;
  WK_DL_PUSH_TAIL(&d->tasks[ti].members, d->calls, c, m_prev, m_next);
  return c;
}

/* Returns a record that is in no container any more to the free list. */
static void call_free(wk_disp *d, uint32_t c) {
  wk_dcall *call = &d->calls[c];
  WK_ASSERT(call->state != WK_DC_FREE && call->child_head == WK_DNONE);
  WK_DEBUG_ASSERT(!wk_heap_contains(&d->deadline_heap, c));
  WK_DEBUG_ASSERT(!wk_heap_contains(&d->backoff_heap, c));
  WK_DL_REMOVE(&d->tasks[call->task].members, d->calls, c, m_prev, m_next);
  call->state = WK_DC_FREE;
  call->task = call->parent = WK_DNONE;
  call->group = 0;
  call->q_next = d->free_call_head;
  d->free_call_head = c;
  d->free_calls++;
}

static void child_link(wk_disp *d, uint32_t parent, uint32_t c) {
  wk_dcall *p = &d->calls[parent], *call = &d->calls[c];
  call->parent = parent;
  call->s_prev = WK_DNONE;
  call->s_next = p->child_head;
  if (p->child_head != WK_DNONE) d->calls[p->child_head].s_prev = c;
  p->child_head = c;
}

static void child_unlink(wk_disp *d, uint32_t c) {
  wk_dcall *call = &d->calls[c];
  wk_dcall *p = &d->calls[call->parent];
  WK_ASSERT(p->group_left > 0);
  if (call->s_prev != WK_DNONE) {
    d->calls[call->s_prev].s_next = call->s_next;
  } else {
    p->child_head = call->s_next;
  }
  if (call->s_next != WK_DNONE) d->calls[call->s_next].s_prev = call->s_prev;
  call->s_prev = call->s_next = WK_DNONE;
  p->group_left--;
}

static bool live_attempt(const wk_dcall *call) {
  return call->state == WK_DC_INFLIGHT || call->state == WK_DC_WAITING ||
         call->state == WK_DC_RESUMING;
}

/* The record of the live attempt `call_id`, or WK_DNONE. */
static uint32_t lookup_attempt(const wk_disp *d, uint64_t call_id) {
  uint32_t c = (uint32_t)call_id;
  uint32_t gen = (uint32_t)(call_id >> 32);
  if (gen == 0 || c >= d->cfg.max_calls) return WK_DNONE;
  const wk_dcall *call = &d->calls[c];
  if (!live_attempt(call) || call->gen != gen) return WK_DNONE;
  return c;
}

/* ---- cancellation ------------------------------------------------------------------ */

static void push_cancel(wk_disp *d, uint32_t c, wk_disp_cancel_reason reason) {
  const wk_dcall *call = &d->calls[c];
  const wk_dtask *t = &d->tasks[call->task];
  WK_ASSERT(live_attempt(call));
  wk_dpend *p = wk_disp__pend_push(d, WK_DISP_CANCEL);
  p->call_id = wk_dcall_id(c, call->gen);
  p->key = t->key;
  p->task = wk_disp__handle(d, call->task);
  p->index = call->index;
  p->depth = call->depth;
  p->attempts = call->attempts;
  p->code = (uint8_t)reason;
  if (call->parent != WK_DNONE) {
    const wk_dcall *parent = &d->calls[call->parent];
    p->group = parent->group;
    p->parent_call_id = wk_dcall_id(call->parent, parent->gen);
  }
}

/* The last child of a waiting parent is final: the parent resumes at once, outside
 * admission and its task's window (RESUMING until its attempt ends). Its executor
 * still holds it, and may hold it under calls it ran nested while the parent waited;
 * making the resume wait for room would let those nested calls' children wait behind
 * it: a deadlock. SUBCALLS_COMPLETE is queued after the last SUBCALL_DONE. */
static void resume_now(wk_disp *d, uint32_t pi) {
  wk_dcall *parent = &d->calls[pi];
  WK_ASSERT(parent->state == WK_DC_WAITING && parent->group_left == 0 && parent->group != 0);
  parent->state = WK_DC_RESUMING;
  wk_dpend *p = wk_disp__pend_push(d, WK_DISP_SUBCALLS_COMPLETE);
  p->call_id = wk_dcall_id(pi, parent->gen);
  p->key = d->tasks[parent->task].key;
  p->task = wk_disp__handle(d, parent->task);
  p->group = parent->group;
  p->index = parent->index;
  p->depth = parent->depth;
  p->attempts = parent->attempts;
}

/* Drops a record that has no children left: CANCEL when it is a live attempt, out of
 * its container, off its parent's child list, back to the free list. */
static void drop_record(wk_disp *d, uint32_t c, wk_disp_cancel_reason reason) {
  wk_dcall *call = &d->calls[c];
  wk_dtask *t = &d->tasks[call->task];
  WK_ASSERT(call->child_head == WK_DNONE);
  switch ((wk_dcall_state)call->state) {
    case WK_DC_QUEUED: wk_disp__ready_remove(d, c); break;
    case WK_DC_BACKOFF:
      wk_heap_remove(&d->backoff_heap, c);
      t->backoff--;
      break;
    case WK_DC_INFLIGHT:
      push_cancel(d, c, reason);
      WK_ASSERT(t->inflight > 0 && d->inflight > 0);
      t->inflight--;
      d->inflight--;
      break;
    case WK_DC_RESUMING:
      push_cancel(d, c, reason);
      t->waiting--;
      break;
    case WK_DC_WAITING:
      push_cancel(d, c, reason);
      t->waiting--;
      break;
    case WK_DC_FREE: WK_UNREACHABLE("dropping a free record"); return;
  }
  wk_heap_remove(&d->deadline_heap, c);
  if (call->parent != WK_DNONE) child_unlink(d, c);
  call_free(d, c);
}

/* Drops every descendant of `root` (deepest first, without recursion); `root` stays. */
static void drop_children(wk_disp *d, uint32_t root) {
  uint32_t cur = root;
  for (;;) {
    uint32_t c = d->calls[cur].child_head;
    if (c != WK_DNONE) {
      if (d->calls[c].child_head != WK_DNONE) {
        cur = c; /* descend: its own children go first */
      } else {
        drop_record(d, c, WK_DISP_CANCEL_PARENT);
      }
      continue;
    }
    if (cur == root) break;
    uint32_t up = d->calls[cur].parent;
    drop_record(d, cur, WK_DISP_CANCEL_PARENT);
    cur = up;
  }
  WK_ASSERT(d->calls[root].child_head == WK_DNONE && d->calls[root].group_left == 0);
}

void wk_disp__drop_all(wk_disp *d, uint32_t ti) {
  wk_dtask *t = &d->tasks[ti];
  /* members are in allocation order and a child is allocated after its parent, so
   * from the tail every record is dropped after all of its children */
  while (t->members.len > 0) drop_record(d, t->members.tail, WK_DISP_CANCEL_TASK);
  WK_ASSERT(t->inflight == 0 && t->waiting == 0 && t->backoff == 0);
  WK_ASSERT(t->ready.len == 0);
  t->next_index = t->added;
  wk_disp__unschedule(d, ti);
}

void wk_disp__end_task(wk_disp *d, uint32_t ti, bool ok) {
  wk_dtask *t = &d->tasks[ti];
  WK_ASSERT(t->state == WK_DT_LIVE && !t->done_pending);
  wk_disp__drop_all(d, ti);
  t->state = WK_DT_ENDED;
  t->ok = ok;
  t->done_pending = true;
  WK_DL_PUSH_TAIL(&d->done, d->tasks, ti, d_prev, d_next);
}

void wk_disp__check_end(wk_disp *d, uint32_t ti) {
  wk_dtask *t = &d->tasks[ti];
  if (t->state != WK_DT_LIVE) return;
  /* FAIL_FAST was normalised to max_failed_calls = 0 */
  if (t->failed > t->p.max_failed_calls) {
    wk_disp__end_task(d, ti, false);
  } else if (t->last && t->finished == t->added) {
    wk_disp__end_task(d, ti, true);
  }
}

/* ---- results ------------------------------------------------------------------------- */

static bool result_retryable(const wk_dtask *t, wk_disp_result r) {
  switch (r) {
    case WK_DISP_RETRYABLE: return true;
    case WK_DISP_EXECUTOR_LOST: return t->p.retry_on_executor_lost;
    case WK_DISP_TIMEOUT: return t->p.retry.retry_on_timeout;
    case WK_DISP_OK:
    case WK_DISP_ERROR:
    case WK_DISP_NOT_STARTED: break;
  }
  return false;
}

/* Draws the delay for a backoff of base `b` ms. */
static int64_t jitter(wk_disp *d, int64_t b) {
  WK_ASSERT(b >= 0);
  switch (d->cfg.jitter) {
    case WK_DISP_JITTER_EQUAL: {
      int64_t half = b / 2;
      return (b - half) + wk_rng_range(&d->rng, 0, half);
    }
    case WK_DISP_JITTER_FULL: return wk_rng_range(&d->rng, 0, b);
    case WK_DISP_JITTER_NONE: break;
  }
  return b;
}

/* Schedules a new attempt of `c` when the policy allows; false when the call is final. */
static bool try_retry(wk_disp *d, uint32_t c, wk_disp_result r, int64_t now_ms) {
  wk_dcall *call = &d->calls[c];
  wk_dtask *t = &d->tasks[call->task];
  const wk_retry_policy *rp = &t->p.retry;
  if (!result_retryable(t, r) || call->attempts >= rp->max_attempts) return false;
  /* base = min(max, initial * multiplier^(retry - 1)), grown one step per retry */
  int64_t base = rp->initial_backoff_ms;
  if (call->attempts > 1) {
    base = call->backoff_ms * (int64_t)rp->backoff_multiplier_milli / 1000;
    if (base > rp->max_backoff_ms) base = rp->max_backoff_ms;
  }
  int64_t delay = jitter(d, base);
  WK_ASSERT(delay >= 0 && delay <= base);
  int64_t due = now_ms + delay;
  if (t->p.task_deadline_ms > 0 && due >= t->p.task_deadline_ms) return false;
  call->backoff_ms = base;
  t->retried++;
  d->retries++;
  if (delay == 0) {
    wk_disp__ready_push(d, c);
  } else {
    call->state = WK_DC_BACKOFF;
    t->backoff++;
    wk_heap_set(&d->backoff_heap, c, due);
  }
  return true;
}

/* The call `c` is final with `r`: *_DONE, group and task accounting; record freed. */
static void complete_call(wk_disp *d, uint32_t c, wk_disp_result r) {
  wk_dcall *call = &d->calls[c];
  uint32_t ti = call->task;
  wk_dtask *t = &d->tasks[ti];
  bool child = call->parent != WK_DNONE;
  wk_dpend *p = wk_disp__pend_push(d, child ? WK_DISP_SUBCALL_DONE : WK_DISP_CALL_DONE);
  p->call_id = wk_dcall_id(c, call->gen);
  p->key = t->key;
  p->task = wk_disp__handle(d, ti);
  p->index = call->index;
  p->depth = call->depth;
  p->attempts = call->attempts;
  p->code = (uint8_t)r;
  if (!child) {
    t->finished++;
    if (r == WK_DISP_OK) {
      t->succeeded++;
    } else {
      t->failed++;
    }
    call_free(d, c);
    wk_disp__check_end(d, ti);
    return;
  }
  uint32_t pi = call->parent;
  wk_dcall *parent = &d->calls[pi];
  WK_ASSERT(parent->state == WK_DC_WAITING && parent->group != 0);
  p->group = parent->group;
  p->parent = pi;
  child_unlink(d, c);
  call_free(d, c);
  if (parent->group_left == 0) resume_now(d, pi);
}

/* The live attempt `c` ended with `r` (an answer, or TIMEOUT from the tick). */
static void finish_attempt(wk_disp *d, uint32_t c, wk_disp_result r, int64_t now_ms) {
  wk_dcall *call = &d->calls[c];
  uint32_t ti = call->task;
  wk_dtask *t = &d->tasks[ti];
  WK_ASSERT(live_attempt(call) && t->state == WK_DT_LIVE);
  wk_heap_remove(&d->deadline_heap, c);
  switch ((wk_dcall_state)call->state) {
    case WK_DC_INFLIGHT:
      WK_ASSERT(t->inflight > 0 && d->inflight > 0);
      t->inflight--;
      d->inflight--;
      break;
    case WK_DC_RESUMING: t->waiting--; break;
    case WK_DC_WAITING:
      drop_children(d, c); /* the parent's attempt is over: its children are not needed */
      t->waiting--;
      break;
    case WK_DC_FREE:
    case WK_DC_QUEUED:
    case WK_DC_BACKOFF: WK_UNREACHABLE("finishing a record that is not a live attempt"); return;
  }
  call->group = 0;
  call->state = WK_DC_QUEUED; /* transient: try_retry or complete_call decides */
  switch (r) {
    case WK_DISP_OK:
      if (t->window < d->cfg.window_max) t->window++;
      break;
    case WK_DISP_RETRYABLE:
    case WK_DISP_EXECUTOR_LOST:
    case WK_DISP_TIMEOUT: t->window = t->window > 1 ? t->window / 2 : 1; break;
    case WK_DISP_ERROR: break;
    case WK_DISP_NOT_STARTED: WK_UNREACHABLE("NOT_STARTED is handled by give_back"); break;
  }
  if (!try_retry(d, c, r, now_ms)) complete_call(d, c, r);
  wk_disp__update(d, ti);
}

/* The INFLIGHT attempt `c` was given back unstarted: out of admission, the attempt
 * uncounted, the window untouched, first in its task's ready FIFO (it was sent before
 * anything queued there now). */
static void give_back(wk_disp *d, uint32_t c) {
  wk_dcall *call = &d->calls[c];
  uint32_t ti = call->task;
  wk_dtask *t = &d->tasks[ti];
  WK_ASSERT(call->state == WK_DC_INFLIGHT && t->state == WK_DT_LIVE);
  WK_ASSERT(call->attempts > 0 && t->inflight > 0 && d->inflight > 0);
  wk_heap_remove(&d->deadline_heap, c);
  call->deadline_ms = INT64_MAX;
  call->attempts--;
  t->inflight--;
  d->inflight--;
  t->returned++;
  d->not_started++;
  call->again = true;
  wk_disp__ready_push_front(d, c);
  wk_disp__update(d, ti);
}

static bool result_valid(wk_disp_result r) {
  switch (r) {
    case WK_DISP_OK:
    case WK_DISP_ERROR:
    case WK_DISP_RETRYABLE:
    case WK_DISP_EXECUTOR_LOST:
    case WK_DISP_TIMEOUT:
    case WK_DISP_NOT_STARTED: return true;
  }
  return false;
}

wk_err wk_disp_call_finished(wk_disp *d, uint64_t call_id, wk_disp_result r, int64_t now_ms,
                             wk_disp_out *out) {
  WK_ASSERT(d != NULL);
  if (out == NULL) return WK_ERR_INVALID_ARGUMENT;
  wk_err err = WK_OK;
  uint32_t c = WK_DNONE;
  if (!result_valid(r)) {
    err = WK_ERR_INVALID_ARGUMENT;
  } else if ((c = lookup_attempt(d, call_id)) == WK_DNONE) {
    d->stale_results++;
    err = WK_ERR_STALE;
  } else if (r == WK_DISP_NOT_STARTED) {
    if (d->calls[c].state == WK_DC_INFLIGHT) {
      give_back(d, c);
    } else {
      err = WK_ERR_INVALID_ARGUMENT; /* a parent that asked for subcalls has started */
    }
  } else {
    finish_attempt(d, c, r, now_ms);
  }
  wk_disp__flush(d, now_ms, true, out);
  return err;
}

/* ---- subcalls -------------------------------------------------------------------------- */

wk_err wk_disp_add_subcalls(wk_disp *d, uint64_t parent_call_id, uint32_t n, int64_t now_ms,
                            uint64_t *group, wk_disp_out *out) {
  WK_ASSERT(d != NULL);
  if (out == NULL) return WK_ERR_INVALID_ARGUMENT;
  uint32_t pi = lookup_attempt(d, parent_call_id);
  wk_err err = WK_OK;
  if (group == NULL) {
    err = WK_ERR_INVALID_ARGUMENT;
  } else if (pi == WK_DNONE) {
    err = WK_ERR_STALE;
  } else if ((d->calls[pi].state != WK_DC_INFLIGHT && d->calls[pi].state != WK_DC_RESUMING) ||
             n == 0 || (uint32_t)d->calls[pi].depth + 1u > d->cfg.max_depth) {
    err = WK_ERR_INVALID_ARGUMENT;
  } else if (n > d->free_calls) {
    err = WK_ERR_NO_SLOT;
  }
  if (err != WK_OK) {
    wk_disp__flush(d, now_ms, true, out);
    return err;
  }
  wk_dcall *parent = &d->calls[pi];
  uint32_t ti = parent->task;
  wk_dtask *t = &d->tasks[ti];
  WK_ASSERT(t->state == WK_DT_LIVE);
  /* the parent leaves admission while it waits: its executor runs nested calls (a
   * resumed parent asking again was outside admission already) */
  if (parent->state == WK_DC_INFLIGHT) {
    WK_ASSERT(t->inflight > 0 && d->inflight > 0);
    t->inflight--;
    d->inflight--;
    t->waiting++;
  }
  parent->state = WK_DC_WAITING;
  parent->group = ++d->group_seq;
  uint8_t depth = (uint8_t)(parent->depth + 1u);
  for (uint32_t i = 0; i < n; i++) {
    uint32_t c = wk_disp__call_alloc(d, ti);
    wk_dcall *call = &d->calls[c];
    call->index = i;
    call->depth = depth;
    child_link(d, pi, c);
    wk_disp__ready_push(d, c);
  }
  parent->group_left = n;
  t->subcalls += n;
  *group = parent->group;
  wk_disp__update(d, ti);
  wk_disp__flush(d, now_ms, true, out);
  return WK_OK;
}

/* ---- timers ------------------------------------------------------------------------------ */

void wk_disp_tick(wk_disp *d, int64_t now_ms, wk_disp_out *out) {
  WK_ASSERT(d != NULL && out != NULL);
  while (!wk_heap_empty(&d->backoff_heap) && wk_heap_top_key(&d->backoff_heap) <= now_ms) {
    uint32_t c = wk_heap_top(&d->backoff_heap);
    wk_dcall *call = &d->calls[c];
    WK_ASSERT(call->state == WK_DC_BACKOFF);
    wk_heap_remove(&d->backoff_heap, c);
    d->tasks[call->task].backoff--;
    wk_disp__ready_push(d, c);
    wk_disp__update(d, call->task);
  }
  /* finish_attempt only removes from this heap (sends happen in the flush below) */
  while (!wk_heap_empty(&d->deadline_heap) && wk_heap_top_key(&d->deadline_heap) <= now_ms) {
    uint32_t c = wk_heap_top(&d->deadline_heap);
    WK_ASSERT(live_attempt(&d->calls[c]));
    push_cancel(d, c, WK_DISP_CANCEL_DEADLINE);
    d->timeouts++;
    finish_attempt(d, c, WK_DISP_TIMEOUT, now_ms);
  }
  wk_disp__flush(d, now_ms, true, out);
}

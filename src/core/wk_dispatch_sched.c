/* wk_dispatch_sched.c: DispatcherCore's scheduling: the ring of tasks that may send
 * next, the per-task FIFOs, and emission: pending CANCEL / *_DONE / SUBCALLS_COMPLETE
 * actions, TASK_DONEs, then SENDs while admission and the windows allow. */
#include <string.h>

#include "core/wk_dispatch_int.h"
#include "lib/wk_assert.h"

/* ---- eligibility and the ring -------------------------------------------------- */

bool wk_disp__needs_record(const wk_dtask *t) {
  return t->ready.len == 0 && t->next_index < t->added;
}

bool wk_disp__eligible(const wk_disp *d, const wk_dtask *t) {
  (void)d;
  if (t->state != WK_DT_LIVE || t->inflight >= t->window) return false;
  return t->ready.len > 0 || t->next_index < t->added;
}

void wk_disp__unschedule(wk_disp *d, uint32_t ti) {
  wk_dtask *t = &d->tasks[ti];
  if (t->where == WK_DW_RING) {
    WK_DL_REMOVE(&d->ring, d->tasks, ti, l_prev, l_next);
  } else if (t->where == WK_DW_PARKED) {
    WK_DL_REMOVE(&d->parked, d->tasks, ti, l_prev, l_next);
  }
  t->where = WK_DW_NOWHERE;
}

static void ring_append(wk_disp *d, uint32_t ti) {
  WK_ASSERT(d->tasks[ti].where == WK_DW_NOWHERE);
  WK_DL_PUSH_TAIL(&d->ring, d->tasks, ti, l_prev, l_next);
  d->tasks[ti].where = WK_DW_RING;
}

void wk_disp__update(wk_disp *d, uint32_t ti) {
  wk_dtask *t = &d->tasks[ti];
  if (!wk_disp__eligible(d, t)) {
    wk_disp__unschedule(d, ti);
    return;
  }
  if (t->where == WK_DW_NOWHERE) {
    ring_append(d, ti);
  } else if (t->where == WK_DW_PARKED && !wk_disp__needs_record(t)) {
    /* a retry or a child showed up: it has its record, no need to wait for one */
    wk_disp__unschedule(d, ti);
    ring_append(d, ti);
  }
}

/* ---- per-task FIFOs ------------------------------------------------------------------ */

void wk_disp__ready_push(wk_disp *d, uint32_t c) {
  wk_dcall *call = &d->calls[c];
  wk_dtask *t = &d->tasks[call->task];
  call->state = WK_DC_QUEUED;
  WK_DL_PUSH_TAIL(&t->ready, d->calls, c, q_prev, q_next);
}

void wk_disp__ready_push_front(wk_disp *d, uint32_t c) {
  wk_dcall *call = &d->calls[c];
  wk_dtask *t = &d->tasks[call->task];
  call->state = WK_DC_QUEUED;
  call->q_prev = WK_DNONE;
  call->q_next = t->ready.head;
  if (t->ready.head != WK_DNONE) {
    d->calls[t->ready.head].q_prev = c;
  } else {
    t->ready.tail = c;
  }
  t->ready.head = c;
  t->ready.len++;
}

void wk_disp__ready_remove(wk_disp *d, uint32_t c) {
  wk_dcall *call = &d->calls[c];
  WK_ASSERT(call->state == WK_DC_QUEUED);
  WK_DL_REMOVE(&d->tasks[call->task].ready, d->calls, c, q_prev, q_next);
}

/* ---- emission ------------------------------------------------------------------------ */

static wk_disp_action *emit(wk_disp_out *out) {
  WK_ASSERT(out->count < out->capacity);
  wk_disp_action *a = &out->items[out->count++];
  memset(a, 0, sizeof *a);
  return a;
}

/* A pending action still wanted: CALL_DONEs of a cancelled or removed task and
 * SUBCALL_DONEs of a group whose parent ended are dropped. */
static bool pend_wanted(const wk_disp *d, const wk_dpend *p) {
  switch ((wk_disp_action_kind)p->kind) {
    case WK_DISP_CANCEL: return true;
    case WK_DISP_CALL_DONE: {
      const wk_dtask *t = wk_disp__task(d, p->task);
      return t != NULL && t->state != WK_DT_CANCELLED;
    }
    case WK_DISP_SUBCALL_DONE: {
      const wk_dcall *parent = &d->calls[p->parent];
      return (parent->state == WK_DC_WAITING || parent->state == WK_DC_RESUMING) &&
             parent->group == p->group;
    }
    case WK_DISP_SUBCALLS_COMPLETE: {
      /* still wanted while that attempt is resuming on that group */
      const wk_dcall *parent = &d->calls[(uint32_t)p->call_id];
      return parent->state == WK_DC_RESUMING && parent->gen == (uint32_t)(p->call_id >> 32) &&
             parent->group == p->group;
    }
    case WK_DISP_SEND:
    case WK_DISP_TASK_DONE: break;
  }
  WK_UNREACHABLE("pending action of a kind that is never queued");
  return false;
}

static void emit_pending(const wk_dpend *p, wk_disp_out *out) {
  wk_disp_action *a = emit(out);
  a->kind = (wk_disp_action_kind)p->kind;
  a->task = p->task;
  a->task_key = p->key;
  a->call_id = p->call_id;
  a->group = p->group;
  a->index = p->index;
  a->depth = p->depth;
  a->attempt = p->attempts;
  if (a->kind == WK_DISP_CANCEL) {
    a->reason = (wk_disp_cancel_reason)p->code;
    a->parent_call_id = p->parent_call_id;
  } else {
    a->result = (wk_disp_result)p->code;
  }
}

static int64_t attempt_deadline(const wk_disp *d, const wk_dcall *c, int64_t now_ms) {
  const wk_dtask *t = &d->tasks[c->task];
  int64_t deadline = INT64_MAX;
  int64_t timeout = t->p.call_timeout_ms;
  if (timeout > 0) deadline = timeout > INT64_MAX - now_ms ? INT64_MAX : now_ms + timeout;
  if (t->p.task_deadline_ms > 0 && t->p.task_deadline_ms < deadline) {
    deadline = t->p.task_deadline_ms;
  }
  if (c->parent != WK_DNONE && d->calls[c->parent].deadline_ms < deadline) {
    deadline = d->calls[c->parent].deadline_ms;
  }
  return deadline;
}

/* QUEUED (or fresh) record → INFLIGHT as a new attempt: SEND. */
static void send_attempt(wk_disp *d, uint32_t c, int64_t now_ms, wk_disp_out *out) {
  wk_dcall *call = &d->calls[c];
  wk_dtask *t = &d->tasks[call->task];
  WK_ASSERT(t->inflight < t->window);
  WK_ASSERT(d->inflight < d->capacity);
  call->gen++;
  if (call->gen == 0) call->gen = 1;
  call->attempts++;
  call->state = WK_DC_INFLIGHT;
  t->inflight++;
  d->inflight++;
  d->sends++;
  call->deadline_ms = attempt_deadline(d, call, now_ms);
  if (call->deadline_ms != INT64_MAX) wk_heap_set(&d->deadline_heap, c, call->deadline_ms);

  wk_disp_action *a = emit(out);
  a->kind = WK_DISP_SEND;
  a->task = wk_disp__handle(d, call->task);
  a->task_key = t->key;
  a->call_id = wk_dcall_id(c, call->gen);
  a->index = call->index;
  a->depth = call->depth;
  a->attempt = call->attempts;
  a->deadline_ms = call->deadline_ms;
  a->again = call->again;
  call->again = false;
  if (call->parent != WK_DNONE) {
    const wk_dcall *parent = &d->calls[call->parent];
    WK_ASSERT(parent->state == WK_DC_WAITING);
    a->group = parent->group;
    a->parent_call_id = wk_dcall_id(call->parent, parent->gen);
  }
}

/* One unit of the task's work: send a retry or child, or the next new top-level call. The caller checked admission, the window and room. */
static void send_unit(wk_disp *d, uint32_t ti, int64_t now_ms, wk_disp_out *out) {
  wk_dtask *t = &d->tasks[ti];
  uint32_t c;
  if (t->ready.len > 0) {
    c = t->ready.head;
    wk_disp__ready_remove(d, c);
  } else {
    WK_ASSERT(t->next_index < t->added);
    c = wk_disp__call_alloc(d, ti);
    d->calls[c].index = t->next_index++;
  }
  send_attempt(d, c, now_ms, out);
}

static void send_loop(wk_disp *d, int64_t now_ms, wk_disp_out *out) {
  /* tasks that waited for call records go back in line, one per free record */
  for (uint32_t k = d->free_calls; k > 0 && d->parked.len > 0; k--) {
    uint32_t ti = d->parked.head;
    wk_disp__unschedule(d, ti);
    ring_append(d, ti);
  }
  while (d->inflight < d->capacity && d->ring.len > 0) {
    uint32_t ti = d->ring.head;
    wk_dtask *t = &d->tasks[ti];
    WK_ASSERT(wk_disp__eligible(d, t));
    if (d->free_calls == 0 && wk_disp__needs_record(t)) {
      wk_disp__unschedule(d, ti);
      WK_DL_PUSH_TAIL(&d->parked, d->tasks, ti, l_prev, l_next);
      t->where = WK_DW_PARKED;
      continue;
    }
    if (out->count >= out->capacity) {
      out->more = true;
      return;
    }
    send_unit(d, ti, now_ms, out);
    /* round robin: one unit per task per turn, then to the back of the ring */
    wk_disp__unschedule(d, ti);
    wk_disp__update(d, ti);
  }
}

void wk_disp__flush(wk_disp *d, int64_t now_ms, bool sends, wk_disp_out *out) {
  WK_ASSERT(out != NULL && (out->items != NULL || out->capacity == 0));
  out->more = false;
  while (d->pend_count > 0) {
    const wk_dpend *p = &d->pend[d->pend_head];
    if (pend_wanted(d, p)) {
      if (out->count >= out->capacity) {
        out->more = true;
        return;
      }
      emit_pending(p, out);
    }
    d->pend_head = d->pend_head + 1 == d->pend_cap ? 0 : d->pend_head + 1;
    d->pend_count--;
  }
  while (d->done.len > 0) {
    if (out->count >= out->capacity) {
      out->more = true;
      return;
    }
    uint32_t ti = d->done.head;
    wk_dtask *t = &d->tasks[ti];
    WK_ASSERT(t->state == WK_DT_ENDED && t->done_pending);
    WK_DL_REMOVE(&d->done, d->tasks, ti, d_prev, d_next);
    t->done_pending = false;
    wk_disp_action *a = emit(out);
    a->kind = WK_DISP_TASK_DONE;
    a->task = wk_disp__handle(d, ti);
    a->task_key = t->key;
    a->ok = t->ok;
    a->failed = t->failed;
  }
  if (sends) {
    send_loop(d, now_ms, out);
  } else if (d->inflight < d->capacity && (d->ring.len > 0 || d->parked.len > 0)) {
    out->more = true;
  }
}

void wk_disp_poll(wk_disp *d, int64_t now_ms, wk_disp_out *out) {
  WK_ASSERT(d != NULL && out != NULL);
  wk_disp__flush(d, now_ms, true, out);
}

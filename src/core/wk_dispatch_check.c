/* wk_dispatch_check.c: a full walk of DispatcherCore's structures, for tests and the
 * simulation. Every redundant count is recomputed from the records and compared. */
#include "core/wk_dispatch_int.h"

typedef struct task_count {
  uint32_t inflight, waiting, backoff, queued, resuming, members;
} task_count;

static const char *check_call(const wk_disp *d, uint32_t c) {
  const wk_dcall *call = &d->calls[c];
  if (call->task >= d->cfg.max_tasks) return "call: live record without a task";
  const wk_dtask *t = &d->tasks[call->task];
  if (t->state != WK_DT_LIVE) return "call: record of a task that ended or was cancelled";
  bool live = call->state == WK_DC_INFLIGHT || call->state == WK_DC_WAITING ||
              call->state == WK_DC_RESUMING;
  if (live && call->gen == 0) return "call: live attempt with generation 0";
  if (live && call->attempts == 0) return "call: live attempt without an attempt counted";
  if (call->attempts > t->p.retry.max_attempts) return "call: more attempts than the policy allows";
  bool in_deadline = wk_heap_contains(&d->deadline_heap, c);
  if (live) {
    if (in_deadline != (call->deadline_ms != INT64_MAX)) {
      return "call: live attempt in the deadline heap iff its deadline is finite";
    }
    if (in_deadline && wk_heap_key(&d->deadline_heap, c) != call->deadline_ms) {
      return "call: deadline heap key differs from the attempt's deadline";
    }
  } else if (in_deadline) {
    return "call: record that is not a live attempt in the deadline heap";
  }
  if (wk_heap_contains(&d->backoff_heap, c) != (call->state == WK_DC_BACKOFF)) {
    return "call: in the backoff heap iff BACKOFF";
  }
  if ((call->state == WK_DC_WAITING || call->state == WK_DC_RESUMING) != (call->group != 0)) {
    return "call: a group iff WAITING or RESUMING";
  }
  if (call->state != WK_DC_WAITING && call->child_head != WK_DNONE) {
    return "call: children under a record that is not WAITING";
  }
  if (call->state == WK_DC_WAITING && call->group_left == 0) {
    return "call: WAITING with no child left (should be RESUMING)";
  }
  if (call->state == WK_DC_RESUMING && call->group_left != 0) {
    return "call: RESUMING with children left";
  }
  /* only QUEUED records sit in a FIFO (the ready FIFO): a resumed parent is in none,
   * it runs outside admission until its attempt ends */
  if (call->state != WK_DC_QUEUED && (call->q_prev != WK_DNONE || call->q_next != WK_DNONE)) {
    return "call: FIFO links on a record that is not QUEUED";
  }
  /* the child list */
  uint32_t n = 0, prev = WK_DNONE;
  for (uint32_t k = call->child_head; k != WK_DNONE; k = d->calls[k].s_next) {
    if (++n > d->cfg.max_calls) return "call: child list loops";
    const wk_dcall *kc = &d->calls[k];
    if (kc->state == WK_DC_FREE) return "call: free record on a child list";
    if (kc->parent != c) return "call: child does not point back at its parent";
    if (kc->s_prev != prev) return "call: child list back link broken";
    if (kc->task != call->task) return "call: child of another task";
    if (kc->depth != call->depth + 1u) return "call: child depth is not parent depth + 1";
    prev = k;
  }
  if (n != call->group_left) return "call: group_left differs from the child list";
  if (call->parent == WK_DNONE) {
    if (call->depth != 0) return "call: top-level record with depth";
    if (call->index >= t->next_index) return "call: top-level index never handed out";
  } else {
    if (call->parent >= d->cfg.max_calls) return "call: parent index out of range";
    const wk_dcall *p = &d->calls[call->parent];
    if (p->state != WK_DC_WAITING) return "call: child of a parent that is not WAITING";
    if (call->depth < 1 || call->depth > d->cfg.max_depth) return "call: child depth out of range";
  }
  return NULL;
}

static const char *check_fifo(const wk_disp *d, const wk_dlist *l, uint32_t ti, uint8_t state) {
  uint32_t n = 0, prev = WK_DNONE;
  for (uint32_t c = l->head; c != WK_DNONE; c = d->calls[c].q_next) {
    if (++n > l->len) return "fifo: longer than its count";
    const wk_dcall *call = &d->calls[c];
    if (call->state != state) return "fifo: record in the wrong state for its FIFO";
    if (call->task != ti) return "fifo: record of another task";
    if (call->q_prev != prev) return "fifo: back link broken";
    prev = c;
  }
  if (n != l->len || l->tail != prev) return "fifo: count or tail differs";
  return NULL;
}

static const char *check_task(const wk_disp *d, uint32_t ti, const task_count *k) {
  const wk_dtask *t = &d->tasks[ti];
  if (t->gen == 0 || t->gen > WK_DTASK_GEN_MASK) return "task: generation out of range";
  if (t->window < 1 || t->window > d->cfg.window_max) return "task: window out of range";
  if (t->inflight != k->inflight) return "task: inflight differs from its INFLIGHT records";
  if (t->waiting != k->waiting + k->resuming) return "task: waiting differs from its records";
  if (t->backoff != k->backoff) return "task: backoff differs from its BACKOFF records";
  if (t->ready.len != k->queued) return "task: ready count differs from its QUEUED records";
  if (t->members.len != k->members) return "task: member count differs from its records";
  if (t->next_index > t->added) return "task: more calls sent than added";
  if (t->finished > t->next_index) return "task: more calls final than sent";
  if (t->failed > t->finished || t->succeeded + t->failed != t->finished) {
    return "task: succeeded + failed != finished";
  }
  const char *why = check_fifo(d, &t->ready, ti, WK_DC_QUEUED);
  if (why) return why;
  uint32_t n = 0, prev = WK_DNONE;
  for (uint32_t c = t->members.head; c != WK_DNONE; c = d->calls[c].m_next) {
    if (++n > t->members.len) return "task: member list longer than its count";
    if (d->calls[c].task != ti) return "task: member of another task";
    if (d->calls[c].m_prev != prev) return "task: member list back link broken";
    prev = c;
  }
  if (t->members.tail != prev) return "task: member list tail differs";
  if (t->state != WK_DT_LIVE) {
    if (t->members.len != 0 || t->inflight != 0) return "task: ended or cancelled task holds calls";
    if (t->where != WK_DW_NOWHERE) return "task: ended or cancelled task is scheduled";
  } else {
    if (t->done_pending) return "task: live task with a TASK_DONE pending";
    uint32_t top_live = 0;
    for (uint32_t c = t->members.head; c != WK_DNONE; c = d->calls[c].m_next) {
      if (d->calls[c].parent == WK_DNONE) top_live++;
    }
    if (t->finished + top_live != t->next_index) {
      return "task: sent top-level calls are neither final nor held";
    }
    if (t->last && t->finished == t->added) return "task: every call final but not ended";
    if (t->failed > t->p.max_failed_calls) return "task: failures over the policy but not ended";
  }
  if (t->state == WK_DT_CANCELLED && t->done_pending)
    return "task: cancelled with TASK_DONE pending";
  bool eligible = wk_disp__eligible(d, t);
  if (eligible != (t->where != WK_DW_NOWHERE)) return "task: scheduled iff it can send";
  if (t->where == WK_DW_PARKED && !wk_disp__needs_record(t)) {
    return "task: parked although its next unit has a record";
  }
  return NULL;
}

/* The pending queue: known kinds only; every SUBCALLS_COMPLETE right behind the
 * SUBCALL_DONE of its group's last child (unless that one was emitted already), and
 * one still wanted only for a RESUMING attempt on that group, at most one each. */
static const char *check_pending(const wk_disp *d, uint32_t resuming) {
  uint32_t wanted_complete = 0;
  for (uint32_t k = 0; k < d->pend_count; k++) {
    uint32_t at = d->pend_head + k;
    if (at >= d->pend_cap) at -= d->pend_cap;
    const wk_dpend *p = &d->pend[at];
    switch ((wk_disp_action_kind)p->kind) {
      case WK_DISP_CANCEL:
      case WK_DISP_CALL_DONE: break;
      case WK_DISP_SUBCALL_DONE:
        if (p->parent >= d->cfg.max_calls || p->group == 0) {
          return "pending: SUBCALL_DONE without its parent record or group";
        }
        break;
      case WK_DISP_SUBCALLS_COMPLETE: {
        uint32_t c = (uint32_t)p->call_id;
        if (c >= d->cfg.max_calls || p->group == 0) {
          return "pending: SUBCALLS_COMPLETE names no record";
        }
        if (k > 0) {
          uint32_t before = at == 0 ? d->pend_cap - 1 : at - 1;
          const wk_dpend *b = &d->pend[before];
          if (b->kind != WK_DISP_SUBCALL_DONE || b->group != p->group || b->parent != c) {
            return "pending: SUBCALLS_COMPLETE not right after its last SUBCALL_DONE";
          }
        }
        const wk_dcall *call = &d->calls[c];
        bool wanted = call->state == WK_DC_RESUMING && call->gen == (uint32_t)(p->call_id >> 32) &&
                      call->group == p->group;
        if (wanted) {
          wanted_complete++;
          if (p->task != wk_disp__handle(d, call->task) || p->depth != call->depth ||
              p->index != call->index) {
            return "pending: SUBCALLS_COMPLETE differs from its parent's attempt";
          }
        }
        break;
      }
      case WK_DISP_SEND:
      case WK_DISP_TASK_DONE: return "pending: SEND or TASK_DONE in the pending queue";
      default: return "pending: action of unknown kind";
    }
  }
  /* a group is resumed once and never reused: at most one wanted per RESUMING record */
  if (wanted_complete > resuming) {
    return "pending: more SUBCALLS_COMPLETEs wanted than RESUMING records";
  }
  return NULL;
}

static const char *check_list(const wk_disp *d, const wk_dlist *l, uint8_t where, bool done) {
  uint32_t n = 0, prev = WK_DNONE;
  uint32_t c = l->head;
  while (c != WK_DNONE) {
    if (++n > l->len) return "list: longer than its count";
    const wk_dtask *t = &d->tasks[c];
    if (done) {
      if (!t->done_pending || t->state != WK_DT_ENDED)
        return "list: TASK_DONE FIFO holds a task without one";
      if (t->d_prev != prev) return "list: TASK_DONE FIFO back link broken";
      prev = c;
      c = t->d_next;
    } else {
      if (t->where != where || t->state != WK_DT_LIVE)
        return "list: ring or parked list holds a task not marked so";
      if (t->l_prev != prev) return "list: ring back link broken";
      prev = c;
      c = t->l_next;
    }
  }
  if (n != l->len || l->tail != prev) return "list: count or tail differs";
  return NULL;
}

const char *wk_disp_check_invariants(const wk_disp *d) {
  const char *why = wk_heap_check(&d->backoff_heap);
  if (why == NULL) why = wk_heap_check(&d->deadline_heap);
  if (why) return why;
  uint32_t nt = d->cfg.max_tasks, nc = d->cfg.max_calls;

  /* count the records per task and state */
  uint32_t live_tasks = 0, ring = 0, parked = 0, done = 0;
  for (uint32_t ti = 0; ti < nt; ti++) {
    const wk_dtask *t = &d->tasks[ti];
    if (t->state == WK_DT_FREE) continue;
    live_tasks++;
    if (t->where == WK_DW_RING) ring++;
    if (t->where == WK_DW_PARKED) parked++;
    if (t->done_pending) done++;
  }
  if (live_tasks != d->n_tasks) return "disp: task count differs";
  if (ring != d->ring.len || parked != d->parked.len || done != d->done.len) {
    return "disp: list counts differ from the task marks";
  }
  why = check_list(d, &d->ring, WK_DW_RING, false);
  if (why == NULL) why = check_list(d, &d->parked, WK_DW_PARKED, false);
  if (why == NULL) why = check_list(d, &d->done, 0, true);
  if (why) return why;

  uint32_t free_calls = 0, inflight = 0, resuming = 0;
  for (uint32_t c = 0; c < nc; c++) {
    const wk_dcall *call = &d->calls[c];
    if (call->state == WK_DC_FREE) {
      free_calls++;
      if (wk_heap_contains(&d->deadline_heap, c) || wk_heap_contains(&d->backoff_heap, c)) {
        return "call: free record in a heap";
      }
      continue;
    }
    if (call->state > WK_DC_BACKOFF) return "call: unknown state";
    why = check_call(d, c);
    if (why) return why;
    if (call->state == WK_DC_INFLIGHT) inflight++;
    if (call->state == WK_DC_RESUMING) resuming++;
  }
  if (free_calls != d->free_calls) return "disp: free record count differs";
  uint32_t n = 0;
  if (d->calls_touched > nc) return "disp: more records touched than exist";
  for (uint32_t c = d->free_call_head; c != WK_DNONE; c = d->calls[c].q_next) {
    if (++n > free_calls || c >= d->calls_touched || d->calls[c].state != WK_DC_FREE)
      return "disp: free list broken";
  }
  /* the free records are those on the list and those never touched */
  if (n + (nc - d->calls_touched) != free_calls) return "disp: free list length differs";
  /* admission counts INFLIGHT records only: WAITING and RESUMING parents are outside */
  if (inflight != d->inflight) return "disp: global inflight differs from INFLIGHT records";
  if (d->pend_count > d->pend_cap || d->pend_head >= d->pend_cap) {
    return "disp: pending queue over capacity";
  }
  why = check_pending(d, resuming);
  if (why) return why;

  /* per-task counts, one task at a time over its member list */
  uint32_t sum_inflight = 0;
  for (uint32_t ti = 0; ti < nt; ti++) {
    const wk_dtask *t = &d->tasks[ti];
    if (t->state == WK_DT_FREE) continue;
    task_count k = {0, 0, 0, 0, 0, 0};
    uint32_t m = 0;
    for (uint32_t c = t->members.head; c != WK_DNONE && m <= nc; c = d->calls[c].m_next, m++) {
      const wk_dcall *call = &d->calls[c];
      k.members++;
      switch ((wk_dcall_state)call->state) {
        case WK_DC_INFLIGHT: k.inflight++; break;
        case WK_DC_WAITING: k.waiting++; break;
        case WK_DC_RESUMING: k.resuming++; break;
        case WK_DC_BACKOFF: k.backoff++; break;
        case WK_DC_QUEUED: k.queued++; break;
        case WK_DC_FREE: return "task: free record on a member list";
      }
    }
    why = check_task(d, ti, &k);
    if (why) return why;
    sum_inflight += t->inflight;
  }
  if (sum_inflight != d->inflight) return "disp: per-task inflight does not add up";
  if (nc - free_calls == 0 && d->inflight != 0) return "disp: inflight without records";
  return NULL;
}

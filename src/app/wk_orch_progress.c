/* wk_orch_progress.c: PROGRESS events at a bounded rate per task. See wk_orch_int.h.
 *
 * The core keeps no clock, so the rate limit lives here on the loop's: a task's calls
 * report their counters to the core after every call; the first change after
 * 1000 / progress_events_per_s ms goes out at once, the others are held back (the
 * task joins the pending list once) and the latest counters go out when the interval
 * is over (the deadline timer wakes for it). A phase change sends one at once. A task
 * no watcher asked PROGRESS of is never held back: the core has its counters for any
 * SNAPSHOT, and the first change after a watcher asks goes out at once. */
#include "app/wk_orch_int.h"

#include <string.h>

static int64_t interval_ms(const wk_orch *o) {
  uint32_t rate = o->cfg.progress_events_per_s ? o->cfg.progress_events_per_s : 10u;
  int64_t ms = 1000 / (int64_t)rate;
  return ms > 0 ? ms : 1;
}

static void send_now(wk_orch *o, wk_task_rt *rt) {
  const wk_task_result *r;
  if (wk_core_get_result(o->core, rt->req.task_id, strlen(rt->req.task_id), &r) != WK_OK) return;
  wk_subs_on_progress(o->subs, r, o->wall_offset_ms);
  rt->progress.last_sent_ms = o->now_ms;
  /* 0 means "none sent yet": a loop clock at 0 still counts as sent */
  if (rt->progress.last_sent_ms == 0) rt->progress.last_sent_ms = 1;
}

void wk_orch__progress(wk_orch *o, wk_task_rt *rt) {
  /* a task that left its calls phase is STALE there: its phase change said it all */
  if (wk_core_handle_call_progress(o->core, rt->req.task_id, strlen(rt->req.task_id),
                                   &rt->calls.stats) != WK_OK)
    return;
  if (rt->progress.pending) return; /* the held-back event will carry this change too */
  if (!wk_subs_progress_wanted(o->subs, rt->req.task_id, strlen(rt->req.task_id))) return;
  int64_t every = interval_ms(o);
  if (rt->progress.last_sent_ms == 0 || o->now_ms - rt->progress.last_sent_ms >= every) {
    send_now(o, rt);
    return;
  }
  rt->progress.pending = true;
  wk_task_rt_ref(rt);
  rt->progress.next = o->progress_pending;
  o->progress_pending = rt;
  if (rt->progress.last_sent_ms + every < o->progress_due) {
    o->progress_due = rt->progress.last_sent_ms + every;
    wk_orch__reschedule(o); /* wake when it is due, not at the next tick */
  }
}

void wk_orch__progress_phase(wk_orch *o, const wk_task_result *r) {
  if (r->statistic.calls_started_ms == 0) return; /* no calls ran: nothing to count */
  wk_subs_on_progress(o->subs, r, o->wall_offset_ms);
}

void wk_orch__progress_flush(wk_orch *o) {
  int64_t every = interval_ms(o);
  wk_task_rt **pp = &o->progress_pending;
  o->progress_due = INT64_MAX; /* recomputed over those that stay */
  while (*pp) {
    wk_task_rt *rt = *pp;
    bool gone = wk_orch__converged(o, rt); /* its phase change sent the last one */
    if (!gone && o->now_ms - rt->progress.last_sent_ms < every) {
      if (rt->progress.last_sent_ms + every < o->progress_due)
        o->progress_due = rt->progress.last_sent_ms + every;
      pp = &rt->progress.next;
      continue;
    }
    *pp = rt->progress.next;
    rt->progress.next = NULL;
    rt->progress.pending = false;
    if (!gone) send_now(o, rt);
    wk_task_rt_unref(rt);
  }
}

int64_t wk_orch__progress_next(const wk_orch *o) { return o->progress_due; }

void wk_orch__progress_free(wk_orch *o) {
  while (o->progress_pending) {
    wk_task_rt *rt = o->progress_pending;
    o->progress_pending = rt->progress.next;
    rt->progress.pending = false;
    wk_task_rt_unref(rt);
  }
  o->progress_due = INT64_MAX;
}

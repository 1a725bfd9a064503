/* wk_io_scope.c: the IO scope bound. See wk_orch_int.h. */
#include "app/wk_orch_int.h"

#include <stdio.h>

#include "app/wk_fs.h"

/* ---- IO scope bound: a task's scratch directory is measured on every tick (on the
 * threadpool) while its calls run; over io_scope_max_bytes its calls phase fails ---- */

void wk_orch__scope_track(wk_orch *o, wk_task_rt *rt) {
  if (!o->cfg.io_scope_max_bytes || !rt->scratch_created || rt->in_scope_list) return;
  rt->in_scope_list = true;
  rt->scope_prev = NULL;
  rt->scope_next = o->scopes;
  if (o->scopes) o->scopes->scope_prev = rt;
  o->scopes = rt;
}

void wk_orch__scope_untrack(wk_orch *o, wk_task_rt *rt) {
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
    wk_orch__maybe_free(o);
    return;
  }
  if (!rt->converged && rt->in_scope_list && !rt->calls_reported &&
      rt->scope_bytes > o->cfg.io_scope_max_bytes) {
    rt->scope_exceeded = true;
    rt->calls_ok = false;
    snprintf(rt->first_failure, sizeof rt->first_failure,
             "the task's scratch directory holds %llu bytes, over io_scope_max_mb (%llu bytes)",
             (unsigned long long)rt->scope_bytes, (unsigned long long)o->cfg.io_scope_max_bytes);
    wk_orch__defer_step(o, WK_ORCH__STEP_CALLS_DONE, rt);
  }
  wk_task_rt_unref(rt);
  wk_orch__run_steps(o);
}

void wk_orch__scope_check_all(wk_orch *o) {
  for (wk_task_rt *rt = o->scopes; rt; rt = rt->scope_next) {
    if (rt->scope_measuring) continue;
    rt->scope_measuring = true;
    wk_task_rt_ref(rt);
    rt->scope_job.data = rt;
    o->jobs++;
    uv_queue_work(o->loop, &rt->scope_job, scope_measure, scope_measured);
  }
}


/* wk_io_scope.c: the IO scope bound. See wk_orch_int.h. */
#include "app/wk_orch_int.h"

#include "app/wk_fs.h"

/* ---- IO scope bound: a task's scratch directory is measured on every tick (on the
 * threadpool) while its calls run; over io_scope_max_bytes its calls phase fails ---- */

void wk_orch__scope_track(wk_orch *o, wk_task_rt *rt) {
  wk_rt_scope *sc = &rt->scope;
  if (!o->cfg.io_scope_max_bytes || !rt->act.scratch_created || sc->in_list) return;
  sc->in_list = true;
  sc->prev = NULL;
  sc->next = o->scopes;
  if (o->scopes) o->scopes->scope.prev = rt;
  o->scopes = rt;
}

void wk_orch__scope_untrack(wk_orch *o, wk_task_rt *rt) {
  wk_rt_scope *sc = &rt->scope;
  if (!sc->in_list) return;
  sc->in_list = false;
  if (sc->prev) {
    sc->prev->scope.next = sc->next;
  } else {
    o->scopes = sc->next;
  }
  if (sc->next) sc->next->scope.prev = sc->prev;
}

static void scope_measure(uv_work_t *w) {
  wk_task_rt *rt = ((const wk_orch__job *)w->data)->rt;
  rt->scope.bytes = wk_fs_tree_bytes(rt->act.scratch_dir);
}

static void scope_measured(uv_work_t *w, int status) {
  (void)status;
  wk_task_rt *rt = ((const wk_orch__job *)w->data)->rt;
  rt->scope.measuring = false;
  wk_orch *o = wk_orch__job_end(w, &rt);
  if (!o) return;
  if (!wk_orch__converged(o, rt) && rt->scope.in_list && !rt->build.calls_reported &&
      rt->scope.bytes > o->cfg.io_scope_max_bytes) {
    rt->scope.exceeded = true; /* wk_orch__report_calls fails the phase with the sizes */
    wk_orch__defer_step(o, WK_ORCH__STEP_CALLS_DONE, rt);
  }
  wk_task_rt_unref(rt);
  wk_orch__run_steps(o);
}

void wk_orch__scope_check_all(wk_orch *o) {
  for (wk_task_rt *rt = o->scopes; rt; rt = rt->scope.next) {
    if (rt->scope.measuring) continue;
    rt->scope.measuring = true;
    wk_orch__queue_job(o, rt, 0, scope_measure, scope_measured);
  }
}

/* wk_io_scope.c: the IO scope bound. See wk_orch_int.h. */
#include "app/wk_orch_int.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "app/wk_calls.h"
#include "app/wk_fs.h"

/* ---- the scratch directory, made on its first use ------------------------------------ */

/* Makes rt's scratch directory (named at activation) 0700 and, with executors under
 * another user, gives it to that user. One mkdir and one chown, on the loop: only tasks
 * whose functions use ctx.scratch_dir pay for them. 0, or -1 with the reason in err. */
static int make_scratch(const wk_orch *o, wk_task_rt *rt, char *err, size_t err_len) {
  wk_rt_activation *a = &rt->act;
  if (a->scratch_created) return 0;
  if (a->scratch_failed) {
    snprintf(err, err_len, "%s", a->error);
    return -1;
  }
  const wk_orch_config *cfg = &o->cfg;
  int rc = -1;
  if (mkdir(a->scratch_dir, 0700) != 0) {
    snprintf(a->error, sizeof a->error, "cannot create the task's scratch directory under %s: %s",
             cfg->scratch_root, strerror(errno));
  } else if (cfg->scratch_chown && chown(a->scratch_dir, cfg->scratch_uid, cfg->scratch_gid) != 0) {
    int e = errno;
    rmdir(a->scratch_dir);
    snprintf(a->error, sizeof a->error,
             "cannot give the task's scratch directory to the executor user: %s", strerror(e));
  } else {
    rc = 0;
  }
  if (rc != 0) {
    a->scratch_failed = true;
    snprintf(err, err_len, "%s", a->error);
    return -1;
  }
  a->scratch_created = true;
  return 0;
}

void wk_orch_on_scratch(void *ud, void *call_ctx, uint64_t request_id) {
  wk_orch *o = ud;
  wk_orch__loop_now(o);
  wk_task_rt *rt = wk_calls_task_of(call_ctx);
  char err[WK_TASK_RT_MESSAGE_MAX + 1] = "";
  bool converged = wk_orch__converged(o, rt) || rt->build.calls_reported;
  if (converged) {
    snprintf(err, sizeof err, "the task is over");
  } else if (make_scratch(o, rt, err, sizeof err) == 0) {
    wk_orch__scope_track(o, rt); /* measured against io_scope_max_mb from now on */
  }
  wk_calls_answer_scratch(o->calls, call_ctx, request_id, err);
  if (!converged && rt->act.scratch_failed && !rt->calls.stopped) {
    /* the task cannot have the IO scope it asked for: its calls phase fails with
     * IO_SCOPE_FAILED (wk_orch__report_calls), as an over-size scope does */
    rt->calls.ok = false;
    rt->calls.stopped = true;
    wk_orch__defer_step(o, WK_ORCH__STEP_CALLS_DONE, rt);
  }
  wk_orch__run_steps(o);
}

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

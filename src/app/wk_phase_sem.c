/* wk_phase_sem.c: the phase semaphores. See wk_orch_int.h. */
#include "app/wk_orch_int.h"
#include "lib/wk_assert.h"

void wk_orch__sems_init(wk_orch *o) {
  o->sems[WK_ORCH__SEM_BUILDER].limit = o->cfg.builder_concurrency;
  o->sems[WK_ORCH__SEM_SCAN].limit = o->cfg.scan_concurrency;
  o->sems[WK_ORCH__SEM_EXECUTOR].limit = o->cfg.executor_concurrency;
  o->sems[WK_ORCH__SEM_PLUGIN].limit = o->cfg.plugin_concurrency;
}

bool wk_orch__sem_acquire(wk_orch *o, wk_orch__sem_id id, wk_task_rt *rt) {
  WK_ASSERT(id < WK_ORCH__SEM_COUNT);
  wk_orch__sem *s = &o->sems[id];
  WK_ASSERT(s->limit == 0 || s->used <= s->limit);
  if (rt->sem.held & (1u << id)) return true;
  /* rt waits in one queue at a time: sem.next is its only link */
  WK_ASSERT(rt->sem.waiting == 0);
  if (s->limit == 0 || s->used < s->limit) {
    s->used++;
    rt->sem.held = (uint8_t)(rt->sem.held | (1u << id));
    return true;
  }
  wk_task_rt_ref(rt);
  rt->sem.waiting = (uint8_t)(1u << id);
  rt->sem.next = NULL;
  if (s->tail) {
    s->tail->sem.next = rt;
  } else {
    s->head = rt;
  }
  s->tail = rt;
  return false;
}

void wk_orch__sem_release(wk_orch *o, wk_orch__sem_id id, wk_task_rt *rt) {
  wk_orch__sem *s = &o->sems[id];
  if (!(rt->sem.held & (1u << id))) return;
  WK_ASSERT(!(rt->sem.held_by_job & (1u << id))); /* a job's semaphore goes back with the job */
  WK_ASSERT(s->used > 0);
  rt->sem.held = (uint8_t)(rt->sem.held & ~(1u << id));
  s->used--;
  while (s->head && (s->limit == 0 || s->used < s->limit)) {
    wk_task_rt *next = s->head;
    WK_ASSERT(next->sem.waiting == (1u << id));
    next->sem.waiting = 0;
    s->head = next->sem.next;
    if (!s->head) s->tail = NULL;
    if (!wk_orch__converged(o, next)) {
      /* hand the semaphore over, then run its step later (never from inside wk_orch__exec_cmds) */
      s->used++;
      next->sem.held = (uint8_t)(next->sem.held | (1u << id));
      wk_orch__defer_step(o,
                          id == WK_ORCH__SEM_BUILDER  ? WK_ORCH__STEP_BUILDER
                          : id == WK_ORCH__SEM_PLUGIN ? WK_ORCH__STEP_WRITER
                                                      : WK_ORCH__STEP_CALLS,
                          next);
    }
    wk_task_rt_unref(next);
  }
}

void wk_orch__sems_drop_waiters(wk_orch *o) {
  for (int id = 0; id < WK_ORCH__SEM_COUNT; id++) {
    wk_orch__sem *s = &o->sems[id];
    while (s->head) {
      wk_task_rt *rt = s->head;
      WK_ASSERT(rt->sem.waiting == (1u << id));
      WK_ASSERT(wk_orch__converged(o, rt)); /* only at close, after every task converged */
      rt->sem.waiting = 0;
      s->head = rt->sem.next;
      wk_task_rt_unref(rt); /* the queue's reference */
    }
    s->tail = NULL;
  }
}

void wk_orch__release_all_sems(wk_orch *o, wk_task_rt *rt) {
  for (int id = 0; id < WK_ORCH__SEM_COUNT; id++) {
    if (rt->sem.held_by_job & (1u << id)) continue; /* its job's done callback releases it */
    wk_orch__sem_release(o, (wk_orch__sem_id)id, rt);
  }
}

void wk_orch__sem_lend_to_job(wk_task_rt *rt, wk_orch__sem_id id) {
  WK_ASSERT(rt->sem.held & (1u << id)); /* only a semaphore rt holds can go to its job */
  WK_ASSERT(!(rt->sem.held_by_job & (1u << id)));
  rt->sem.held_by_job = (uint8_t)(rt->sem.held_by_job | (1u << id));
}

void wk_orch__sem_release_from_job(wk_orch *o, wk_orch__sem_id id, wk_task_rt *rt) {
  WK_ASSERT(rt->sem.held_by_job & (1u << id));
  WK_ASSERT(rt->sem.held & (1u << id));
  rt->sem.held_by_job = (uint8_t)(rt->sem.held_by_job & ~(1u << id));
  wk_orch__sem_release(o, id, rt);
}

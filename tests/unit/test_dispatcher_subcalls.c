/* test_dispatcher_subcalls.c: a running call asks for children: groups, positions,
 * SUBCALL_DONE per child and SUBCALLS_COMPLETE right after the last one; the depth
 * limit and the other errors; waiting parents out of admission (no deadlock even when
 * every admitted slot holds a waiting parent); resumed parents out of admission and
 * out of their task's window until their attempt ends (even when both are full), and
 * free to ask again; the nested-resume deadlock of the old re-admission rule; children
 * retried, their failures left to the parent; a parent that ends, times out or is
 * cancelled takes its children; a chain of timeouts in one tick fits the pending queue. */
#include "test_dispatcher_fixture.h"

static wk_disp_task_params sub_params(void) {
  wk_disp_task_params p = dfx_params();
  p.failure_policy = WK_CALL_FAIL_FAST;
  return p;
}

static void test_group_flow(void **state) {
  dfx *fx = *state;
  wk_disp_config cfg = dfx_config();
  cfg.window_initial = 8;
  dfx_reconfigure(fx, &cfg);
  wk_disp_task_params p = sub_params();
  p.call_timeout_ms = 1000;
  uint32_t t = DFX_TASK(fx, 5, &p);
  DFX_ADD(fx, t, 1, true, 0);
  uint64_t parent = DFX_SEND_ID(fx, t, 0);
  uint64_t g = DFX_SUBCALLS(fx, parent, 3, 10);
  DFX_KINDS(fx, "SSS");
  wk_disp_task_info info = DFX_INFO(fx, t);
  assert_int_equal(info.waiting, 1);
  assert_int_equal(info.inflight, 3); /* the parent is not counted */
  assert_int_equal(info.subcalls, 3);
  assert_int_equal(wk_disp_stats_get(fx->d).inflight, 3);
  uint64_t kid[3];
  for (uint32_t i = 0; i < 3; i++) {
    const wk_disp_action *s = &fx->out.items[i];
    assert_int_equal(s->group, g);
    assert_int_equal(s->index, i);
    assert_int_equal(s->depth, 1);
    assert_int_equal(s->parent_call_id, parent);
    assert_int_equal(s->task, t);
    assert_int_equal(s->task_key, 5);
    assert_int_equal(s->deadline_ms, 1000); /* min(10 + 1000, the parent's 1000) */
    kid[i] = s->call_id;
  }
  (void)DFX_FINISH(fx, kid[1], WK_DISP_OK, 20);
  DFX_KINDS(fx, "d");
  assert_int_equal(fx->out.items[0].group, g);
  assert_int_equal(fx->out.items[0].index, 1);
  assert_int_equal(fx->out.items[0].result, WK_DISP_OK);
  assert_int_equal(fx->out.items[0].call_id, kid[1]);
  (void)DFX_FINISH(fx, kid[0], WK_DISP_ERROR, 21); /* the parent decides: no task failure */
  DFX_KINDS(fx, "d");
  assert_int_equal(fx->out.items[0].result, WK_DISP_ERROR);
  assert_false(DFX_INFO(fx, t).ended);
  (void)DFX_FINISH(fx, kid[2], WK_DISP_OK, 22);
  DFX_KINDS(fx, "dC"); /* SUBCALLS_COMPLETE right after the last SUBCALL_DONE */
  assert_int_equal(fx->out.items[1].group, g);
  assert_int_equal(fx->out.items[1].call_id, parent); /* the parent keeps its attempt */
  assert_int_equal(fx->out.items[1].task, t);
  assert_int_equal(fx->out.items[1].task_key, 5);
  assert_int_equal(fx->out.items[1].index, 0);
  assert_int_equal(fx->out.items[1].depth, 0);
  /* resumed at once and outside admission: it takes no slot back */
  info = DFX_INFO(fx, t);
  assert_int_equal(info.resuming, 1);
  assert_int_equal(info.waiting, 1); /* waiting counts resumed parents too */
  assert_int_equal(info.inflight, 0);
  assert_int_equal(wk_disp_stats_get(fx->d).inflight, 0);
  /* a second ctx.map from the resumed attempt: a new group, the parent waits again */
  uint64_t g2 = DFX_SUBCALLS(fx, parent, 1, 30);
  assert_true(g2 != g);
  DFX_KINDS(fx, "S");
  assert_int_equal(fx->out.items[0].group, g2);
  assert_int_equal(fx->out.items[0].parent_call_id, parent);
  assert_int_equal(fx->out.items[0].index, 0);
  info = DFX_INFO(fx, t);
  assert_int_equal(info.resuming, 0);
  assert_int_equal(info.waiting, 1);
  assert_int_equal(info.inflight, 1); /* the child only */
  uint64_t k = fx->out.items[0].call_id;
  (void)DFX_FINISH(fx, k, WK_DISP_OK, 31);
  DFX_KINDS(fx, "dC");
  assert_int_equal(fx->out.items[0].group, g2);
  assert_int_equal(fx->out.items[1].group, g2);
  assert_int_equal(fx->out.items[1].call_id, parent);
  assert_int_equal(DFX_INFO(fx, t).resuming, 1);
  (void)DFX_FINISH(fx, parent, WK_DISP_OK, 40);
  DFX_KINDS(fx, "DT");
  assert_int_equal(fx->out.items[0].call_id, parent);
  assert_true(fx->out.items[1].ok);
  assert_int_equal(DFX_INFO(fx, t).subcalls, 4);
  assert_int_equal(wk_disp_stats_get(fx->d).inflight, 0);
}

static void test_depth_limit_and_errors(void **state) {
  dfx *fx = *state; /* max_depth 2, 64 records */
  wk_disp_config cfg = dfx_config();
  cfg.max_inflight = 8;
  cfg.window_initial = 8;
  dfx_reconfigure(fx, &cfg);
  wk_disp_task_params p = sub_params();
  uint32_t t = DFX_TASK(fx, 5, &p);
  DFX_ADD(fx, t, 1, true, 0);
  uint64_t c0 = DFX_SEND_ID(fx, t, 0);
  uint64_t group = 0;
  dfx_reset(fx);
  assert_int_equal(wk_disp_add_subcalls(fx->d, c0, 0, 1, &group, &fx->out),
                   WK_ERR_INVALID_ARGUMENT);
  assert_int_equal(wk_disp_add_subcalls(fx->d, c0, 1, 1, NULL, &fx->out), WK_ERR_INVALID_ARGUMENT);
  assert_int_equal(wk_disp_add_subcalls(fx->d, c0 + ((uint64_t)1 << 32), 1, 1, &group, &fx->out),
                   WK_ERR_STALE);
  assert_int_equal(wk_disp_add_subcalls(fx->d, 0, 1, 1, &group, &fx->out), WK_ERR_STALE);
  assert_int_equal(wk_disp_add_subcalls(fx->d, c0, 64, 1, &group, &fx->out), WK_ERR_NO_SLOT);
  assert_int_equal(group, 0);
  DFX_INV(fx);
  assert_int_equal(DFX_INFO(fx, t).waiting, 0);

  (void)DFX_SUBCALLS(fx, c0, 1, 2);
  uint64_t c1 = fx->out.items[0].call_id;
  assert_int_equal(fx->out.items[0].depth, 1);
  dfx_reset(fx);
  /* a waiting parent cannot ask again */
  assert_int_equal(wk_disp_add_subcalls(fx->d, c0, 1, 2, &group, &fx->out),
                   WK_ERR_INVALID_ARGUMENT);
  (void)DFX_SUBCALLS(fx, c1, 1, 3);
  uint64_t c2 = fx->out.items[0].call_id;
  assert_int_equal(fx->out.items[0].depth, 2);
  /* depth 3 > max_depth 2: refused, nothing added */
  dfx_reset(fx);
  uint32_t live = wk_disp_stats_get(fx->d).live_calls;
  assert_int_equal(wk_disp_add_subcalls(fx->d, c2, 2, 4, &group, &fx->out),
                   WK_ERR_INVALID_ARGUMENT);
  assert_int_equal(wk_disp_stats_get(fx->d).live_calls, live);
  assert_int_equal(DFX_INFO(fx, t).inflight, 1);
  DFX_INV(fx);
  /* unwind */
  (void)DFX_FINISH(fx, c2, WK_DISP_OK, 5);
  DFX_KINDS(fx, "dC");
  assert_int_equal(fx->out.items[1].call_id, c1);
  (void)DFX_FINISH(fx, c1, WK_DISP_OK, 6);
  DFX_KINDS(fx, "dC");
  (void)DFX_FINISH(fx, c0, WK_DISP_OK, 7);
  DFX_KINDS(fx, "DT");

  /* max_depth 0: no subcalls at all */
  cfg.max_depth = 0;
  dfx_reconfigure(fx, &cfg);
  t = DFX_TASK(fx, 6, &p);
  DFX_ADD(fx, t, 1, true, 0);
  c0 = DFX_SEND_ID(fx, t, 0);
  dfx_reset(fx);
  assert_int_equal(wk_disp_add_subcalls(fx->d, c0, 1, 1, &group, &fx->out),
                   WK_ERR_INVALID_ARGUMENT);
}

/* Every admitted slot holds a parent that waits: the children still run, and so do
 * the grandchildren, and everything unwinds. */
static void test_no_deadlock_when_waiting_parents_fill_capacity(void **state) {
  dfx *fx = *state;
  wk_disp_config cfg = dfx_config();
  cfg.max_inflight = 2;
  cfg.window_initial = 2;
  cfg.window_max = 2;
  dfx_reconfigure(fx, &cfg);
  wk_disp_task_params p = sub_params();
  uint32_t t = DFX_TASK(fx, 5, &p);
  DFX_ADD(fx, t, 2, true, 0);
  uint64_t top[2] = {DFX_SEND_ID(fx, t, 0), DFX_SEND_ID(fx, t, 1)};
  /* both executors' calls ask for children: both leave admission */
  (void)DFX_SUBCALLS(fx, top[0], 1, 1);
  DFX_KINDS(fx, "S");
  uint64_t mid0 = fx->out.items[0].call_id;
  (void)DFX_SUBCALLS(fx, top[1], 1, 1);
  DFX_KINDS(fx, "S");
  uint64_t mid1 = fx->out.items[0].call_id;
  /* and the children ask again: four waiting parents, capacity 2 */
  (void)DFX_SUBCALLS(fx, mid0, 2, 2);
  DFX_KINDS(fx, "S");
  uint64_t leaf0 = fx->out.items[0].call_id;
  (void)DFX_SUBCALLS(fx, mid1, 2, 2);
  DFX_KINDS(fx, "S");
  uint64_t leaf1 = fx->out.items[0].call_id;
  wk_disp_task_info info = DFX_INFO(fx, t);
  assert_int_equal(info.waiting, 4);
  assert_int_equal(info.inflight, 2);
  assert_int_equal(info.ready, 2);
  /* unwind: leaves, then the middles are resumed, then the tops */
  dfx_q q = {{0}, 0, 0};
  q.id[q.tail++] = leaf0;
  q.id[q.tail++] = leaf1;
  uint32_t completes = 0, task_done = 0;
  while (dfx_q_len(&q) > 0) {
    uint64_t id = dfx_q_pop(&q);
    assert_int_equal(DFX_FINISH(fx, id, WK_DISP_OK, 3), WK_OK);
    for (uint32_t k = 0; k < fx->out.count; k++) {
      const wk_disp_action *a = &fx->out.items[k];
      if (a->kind == WK_DISP_SEND) q.id[q.tail++] = a->call_id;
      if (a->kind == WK_DISP_SUBCALLS_COMPLETE) {
        completes++;
        q.id[q.tail++] = a->call_id; /* the resumed parent answers later */
      }
      if (a->kind == WK_DISP_TASK_DONE) {
        task_done++;
        assert_true(a->ok);
      }
    }
    assert_true(DFX_INFO(fx, t).inflight <= 2);
  }
  assert_int_equal(completes, 4);
  assert_int_equal(task_done, 1);
}

/* The pool shrank under the calls: admission is full when the last child ends. The
 * parent resumes anyway, takes no slot, and its result frees none. */
static void test_resume_ignores_full_admission(void **state) {
  dfx *fx = *state;
  wk_disp_config cfg = dfx_config();
  cfg.max_inflight = 2;
  cfg.window_initial = 8;
  dfx_reconfigure(fx, &cfg);
  wk_disp_task_params p = sub_params();
  uint32_t t = DFX_TASK(fx, 5, &p);
  DFX_ADD(fx, t, 3, true, 0);
  DFX_KINDS(fx, "SS");
  uint64_t parent = DFX_SEND_ID(fx, t, 0), other = DFX_SEND_ID(fx, t, 1);
  uint64_t g = DFX_SUBCALLS(fx, parent, 1, 1);
  DFX_KINDS(fx, "S"); /* the child takes the slot the parent left */
  uint64_t kid = fx->out.items[0].call_id;
  wk_disp_set_capacity(fx->d, 1); /* the pool shrank: 2 in flight, capacity 1 */
  (void)DFX_FINISH(fx, kid, WK_DISP_OK, 2);
  DFX_KINDS(fx, "dC"); /* 1 in flight = capacity: resumed all the same */
  assert_int_equal(fx->out.items[1].call_id, parent);
  assert_int_equal(fx->out.items[1].group, g);
  wk_disp_task_info info = DFX_INFO(fx, t);
  assert_int_equal(info.resuming, 1);
  assert_int_equal(info.inflight, 1); /* `other` only */
  assert_int_equal(info.queued, 1);
  assert_int_equal(wk_disp_stats_get(fx->d).inflight, 1);
  /* the resumed parent ends: it held no slot, so call 2 still has none */
  (void)DFX_FINISH(fx, parent, WK_DISP_OK, 3);
  DFX_KINDS(fx, "D");
  assert_int_equal(fx->out.items[0].index, 0);
  info = DFX_INFO(fx, t);
  assert_int_equal(info.inflight, 1);
  assert_int_equal(info.waiting, 0);
  assert_int_equal(info.resuming, 0);
  assert_int_equal(info.queued, 1);
  assert_int_equal(wk_disp_stats_get(fx->d).inflight, 1);
  /* `other` ends: its slot goes to call 2 */
  (void)DFX_FINISH(fx, other, WK_DISP_OK, 4);
  DFX_KINDS(fx, "DS");
  uint64_t c2 = DFX_SEND_ID(fx, t, 2);
  assert_int_equal(wk_disp_stats_get(fx->d).inflight, 1);
  (void)DFX_FINISH(fx, c2, WK_DISP_OK, 5);
  DFX_KINDS(fx, "DT");
  assert_true(fx->out.items[1].ok);
}

/* Window 1 for good: the resumed parent does not count against it either. */
static void test_resume_ignores_full_window(void **state) {
  dfx *fx = *state;
  wk_disp_config cfg = dfx_config();
  cfg.max_inflight = 4;
  cfg.window_initial = 1;
  cfg.window_max = 1;
  dfx_reconfigure(fx, &cfg);
  wk_disp_task_params p = sub_params();
  uint32_t t = DFX_TASK(fx, 5, &p);
  DFX_ADD(fx, t, 3, true, 0);
  DFX_KINDS(fx, "S");
  uint64_t parent = DFX_SEND_ID(fx, t, 0);
  (void)DFX_SUBCALLS(fx, parent, 1, 1);
  DFX_KINDS(fx, "S"); /* the parent left the window: its child takes the slot */
  uint64_t kid = fx->out.items[0].call_id;
  /* SUBCALLS_COMPLETE is decided with the SUBCALL_DONE, before any SEND; call 1 then
   * takes the window slot the child freed */
  (void)DFX_FINISH(fx, kid, WK_DISP_OK, 2);
  DFX_KINDS(fx, "dCS");
  assert_int_equal(fx->out.items[1].call_id, parent);
  uint64_t c1 = DFX_SEND_ID(fx, t, 1);
  wk_disp_task_info info = DFX_INFO(fx, t);
  assert_int_equal(info.window, 1);
  assert_int_equal(info.inflight, 1);
  assert_int_equal(info.resuming, 1);
  /* the parent ends: the window is still full with call 1, call 2 waits */
  (void)DFX_FINISH(fx, parent, WK_DISP_OK, 3);
  DFX_KINDS(fx, "D");
  assert_int_equal(DFX_INFO(fx, t).queued, 1);
  assert_int_equal(DFX_INFO(fx, t).inflight, 1);
  (void)DFX_FINISH(fx, c1, WK_DISP_OK, 4);
  DFX_KINDS(fx, "DS");
  uint64_t c2 = DFX_SEND_ID(fx, t, 2);
  (void)DFX_FINISH(fx, c2, WK_DISP_OK, 5);
  DFX_KINDS(fx, "DT");
}

/* A resumed parent asks again while admission is full: it was outside admission
 * already, so nothing moves but its state; the children wait for room. */
static void test_resumed_parent_asks_again(void **state) {
  dfx *fx = *state;
  wk_disp_config cfg = dfx_config();
  cfg.max_inflight = 1;
  cfg.window_initial = 8;
  dfx_reconfigure(fx, &cfg);
  wk_disp_task_params p = sub_params();
  uint32_t t = DFX_TASK(fx, 5, &p);
  DFX_ADD(fx, t, 2, true, 0);
  DFX_KINDS(fx, "S");
  uint64_t parent = DFX_SEND_ID(fx, t, 0);
  uint64_t g = DFX_SUBCALLS(fx, parent, 1, 1);
  DFX_KINDS(fx, "S"); /* children go before new calls */
  assert_int_equal(fx->out.items[0].depth, 1);
  uint64_t kid = fx->out.items[0].call_id;
  (void)DFX_FINISH(fx, kid, WK_DISP_OK, 2);
  DFX_KINDS(fx, "dCS"); /* resumed; the child's slot goes to call 1 */
  uint64_t c1 = DFX_SEND_ID(fx, t, 1);
  assert_int_equal(wk_disp_stats_get(fx->d).inflight, 1);
  /* the second ctx.map: admission is full (call 1), the children queue */
  uint64_t g2 = DFX_SUBCALLS(fx, parent, 2, 3);
  assert_true(g2 != g);
  DFX_KINDS(fx, "");
  wk_disp_task_info info = DFX_INFO(fx, t);
  assert_int_equal(info.waiting, 1);
  assert_int_equal(info.resuming, 0);
  assert_int_equal(info.inflight, 1);
  assert_int_equal(info.ready, 2);
  assert_int_equal(wk_disp_stats_get(fx->d).inflight, 1);
  /* asking twice on the same wait is refused */
  uint64_t group = 0;
  dfx_reset(fx);
  assert_int_equal(wk_disp_add_subcalls(fx->d, parent, 1, 3, &group, &fx->out),
                   WK_ERR_INVALID_ARGUMENT);
  (void)DFX_FINISH(fx, c1, WK_DISP_OK, 4);
  DFX_KINDS(fx, "DS");
  assert_int_equal(fx->out.items[1].group, g2);
  assert_int_equal(fx->out.items[1].index, 0);
  uint64_t k0 = fx->out.items[1].call_id;
  (void)DFX_FINISH(fx, k0, WK_DISP_OK, 5);
  DFX_KINDS(fx, "dS");
  uint64_t k1 = fx->out.items[1].call_id;
  assert_int_equal(fx->out.items[1].index, 1);
  (void)DFX_FINISH(fx, k1, WK_DISP_OK, 6);
  DFX_KINDS(fx, "dC");
  assert_int_equal(fx->out.items[1].group, g2);
  assert_int_equal(fx->out.items[1].call_id, parent);
  (void)DFX_FINISH(fx, parent, WK_DISP_OK, 7);
  DFX_KINDS(fx, "DT");
  assert_true(fx->out.items[1].ok);
  assert_int_equal(DFX_INFO(fx, t).subcalls, 3);
}

/* SUBCALLS_COMPLETE is a pending action like SUBCALL_DONE: a full buffer keeps it for
 * the next poll (ahead of any SEND); a task cancelled meanwhile never sees it; a
 * resumed parent still has its deadline and leaves admission untouched when it passes. */
static void test_resume_pending_and_deadline(void **state) {
  dfx *fx = *state;
  wk_disp_config cfg = dfx_config();
  cfg.max_inflight = 1;
  cfg.window_initial = 8;
  dfx_reconfigure(fx, &cfg);
  wk_disp_task_params p = sub_params();
  p.call_timeout_ms = 100;
  uint32_t t = DFX_TASK(fx, 5, &p);
  DFX_ADD(fx, t, 2, true, 0);
  uint64_t parent = DFX_SEND_ID(fx, t, 0);
  uint64_t g = DFX_SUBCALLS(fx, parent, 1, 1);
  uint64_t kid = fx->out.items[0].call_id;
  fx->out.capacity = 1;
  (void)DFX_FINISH(fx, kid, WK_DISP_OK, 2);
  DFX_KINDS(fx, "d");
  assert_true(fx->out.more);
  assert_true(wk_disp_pending(fx->d));
  DFX_POLL(fx, 3);
  DFX_KINDS(fx, "C"); /* before the SEND of call 1 */
  assert_int_equal(fx->out.items[0].call_id, parent);
  assert_int_equal(fx->out.items[0].group, g);
  assert_true(fx->out.more);
  fx->out.capacity = DFX_BUF;
  DFX_POLL(fx, 3);
  DFX_KINDS(fx, "S");
  uint64_t c1 = DFX_SEND_ID(fx, t, 1);
  /* the parent's deadline (100) passes while it runs resumed; call 1's is 103 */
  DFX_TICK(fx, 100);
  DFX_KINDS(fx, "XDXT"); /* FAIL_FAST: the timeout ends the task, call 1 is cancelled */
  assert_int_equal(fx->out.items[0].call_id, parent);
  assert_int_equal(fx->out.items[0].reason, WK_DISP_CANCEL_DEADLINE);
  assert_int_equal(fx->out.items[1].result, WK_DISP_TIMEOUT);
  assert_int_equal(fx->out.items[2].call_id, c1);
  assert_int_equal(wk_disp_stats_get(fx->d).inflight, 0);

  /* a second task: its last child's answer is held in the dispatcher (no room at
   * all), then the task is cancelled: only the parent's CANCEL comes out */
  uint32_t t2 = DFX_TASK(fx, 6, &p);
  DFX_ADD(fx, t2, 1, true, 200);
  uint64_t parent2 = DFX_SEND_ID(fx, t2, 0);
  (void)DFX_SUBCALLS(fx, parent2, 1, 201);
  uint64_t kid2 = fx->out.items[0].call_id;
  fx->out.capacity = 0;
  (void)DFX_FINISH(fx, kid2, WK_DISP_OK, 202);
  DFX_KINDS(fx, "");
  assert_true(wk_disp_pending(fx->d));
  assert_int_equal(DFX_INFO(fx, t2).resuming, 1);
  fx->out.capacity = DFX_BUF;
  DFX_CANCEL(fx, t2);
  DFX_KINDS(fx, "X");
  assert_int_equal(fx->out.items[0].call_id, parent2);
  assert_int_equal(fx->out.items[0].reason, WK_DISP_CANCEL_TASK);
  DFX_POLL(fx, 203);
  DFX_KINDS(fx, "");
  assert_false(wk_disp_pending(fx->d));
}

/* Regression: the deadlock that re-admission caused end to end (a tree of subcalls two
 * deep, capacity 1). The executor runs calls nested inside a waiting call, so its
 * frames form a stack: A waits and runs A1; A1 waits and runs A2; A2 waits and runs
 * the grandchildren. When A1's grandchildren are done A1 resumes, but it cannot return
 * before A2, above it on the stack, has returned, and A2 needs its own grandchildren.
 * Re-admitted, A1 held the only slot and they were never sent. */
static void test_nested_resume_does_not_block_children(void **state) {
  dfx *fx = *state;
  wk_disp_config cfg = dfx_config();
  cfg.max_inflight = 1;
  cfg.window_initial = 16;
  cfg.window_max = 16;
  cfg.max_depth = 2;
  dfx_reconfigure(fx, &cfg);
  wk_disp_task_params p = sub_params();
  uint32_t t = DFX_TASK(fx, 5, &p);
  DFX_ADD(fx, t, 1, true, 0);
  DFX_KINDS(fx, "S");
  uint64_t a = DFX_SEND_ID(fx, t, 0);
  uint64_t ga = DFX_SUBCALLS(fx, a, 2, 1);
  DFX_KINDS(fx, "S"); /* A1; A2 queued */
  uint64_t a1 = fx->out.items[0].call_id;
  assert_int_equal(fx->out.items[0].group, ga);
  assert_int_equal(fx->out.items[0].index, 0);
  uint64_t ga1 = DFX_SUBCALLS(fx, a1, 2, 2);
  DFX_KINDS(fx, "S"); /* A1 left admission: A2 (ready before A1's children) */
  uint64_t a2 = fx->out.items[0].call_id;
  assert_int_equal(fx->out.items[0].group, ga);
  assert_int_equal(fx->out.items[0].index, 1);
  uint64_t ga2 = DFX_SUBCALLS(fx, a2, 2, 3);
  DFX_KINDS(fx, "S"); /* A1's first grandchild */
  assert_int_equal(fx->out.items[0].group, ga1);
  uint64_t g11 = fx->out.items[0].call_id;
  wk_disp_task_info info = DFX_INFO(fx, t);
  assert_int_equal(info.waiting, 3);
  assert_int_equal(info.inflight, 1);
  assert_int_equal(info.ready, 3);
  /* executor stack, bottom to top: A, A1, A2, g11 */
  (void)DFX_FINISH(fx, g11, WK_DISP_OK, 4);
  DFX_KINDS(fx, "dS");
  assert_int_equal(fx->out.items[1].group, ga1);
  uint64_t g12 = fx->out.items[1].call_id;
  /* A1's last grandchild: A1 resumes at once, and A2's grandchildren still get the
   * slot (under re-admission A1 took it here, and the output was "dC") */
  (void)DFX_FINISH(fx, g12, WK_DISP_OK, 5);
  DFX_KINDS(fx, "dCS");
  assert_int_equal(fx->out.items[1].call_id, a1);
  assert_int_equal(fx->out.items[1].group, ga1);
  assert_int_equal(fx->out.items[2].group, ga2);
  assert_int_equal(fx->out.items[2].parent_call_id, a2);
  uint64_t g21 = fx->out.items[2].call_id;
  info = DFX_INFO(fx, t);
  assert_int_equal(info.resuming, 1);
  assert_int_equal(info.inflight, 1); /* g21; A1 is outside admission */
  /* stack: A, A1 (resumed, held), A2, g21: A1 cannot return before A2 does */
  (void)DFX_FINISH(fx, g21, WK_DISP_OK, 6);
  DFX_KINDS(fx, "dS");
  uint64_t g22 = fx->out.items[1].call_id;
  assert_int_equal(fx->out.items[1].group, ga2);
  (void)DFX_FINISH(fx, g22, WK_DISP_OK, 7);
  DFX_KINDS(fx, "dC");
  assert_int_equal(fx->out.items[1].call_id, a2);
  info = DFX_INFO(fx, t);
  assert_int_equal(info.resuming, 2);
  assert_int_equal(info.inflight, 0);
  /* now the stack unwinds from the top: A2, then A1, then A */
  (void)DFX_FINISH(fx, a2, WK_DISP_OK, 8);
  DFX_KINDS(fx, "d");
  assert_int_equal(fx->out.items[0].group, ga);
  assert_int_equal(fx->out.items[0].index, 1);
  (void)DFX_FINISH(fx, a1, WK_DISP_OK, 9);
  DFX_KINDS(fx, "dC");
  assert_int_equal(fx->out.items[1].call_id, a);
  assert_int_equal(fx->out.items[1].group, ga);
  (void)DFX_FINISH(fx, a, WK_DISP_OK, 10);
  DFX_KINDS(fx, "DT");
  assert_true(fx->out.items[1].ok);
  info = DFX_INFO(fx, t);
  assert_int_equal(info.finished, 1);
  assert_int_equal(info.subcalls, 6);
  assert_int_equal(wk_disp_stats_get(fx->d).live_calls, 0);
}

/* ---- a one-thread executor, as the Python executor runs: calls arrive in a FIFO; one
 * runs at a time; a call waiting for subcalls runs the next arrivals nested, so the
 * running calls form a stack; a resumed call goes on only once it is on top. */

#define SX_MAX 64u

typedef struct sx {
  uint64_t stack[SX_MAX], queue[SX_MAX];
  uint32_t n_stack, n_queue;
  bool waiting[SX_MAX]; /* by call slot: waits for SUBCALLS_COMPLETE */
  bool asked[SX_MAX];   /* by call slot: asked for its children already */
  uint32_t depth[SX_MAX];
  uint32_t calls_done, completes, max_stack;
  bool task_done, task_ok;
} sx;

static void sx_take(sx *x, const dfx *fx) {
  for (uint32_t i = 0; i < fx->out.count; i++) {
    const wk_disp_action *a = &fx->out.items[i];
    uint32_t slot = wk_disp_call_slot(a->call_id);
    switch (a->kind) {
      case WK_DISP_SEND:
        assert_true(slot < SX_MAX && x->n_queue < SX_MAX);
        x->queue[x->n_queue++] = a->call_id;
        x->waiting[slot] = x->asked[slot] = false;
        x->depth[slot] = a->depth;
        break;
      case WK_DISP_SUBCALLS_COMPLETE:
        assert_true(x->waiting[slot]);
        x->waiting[slot] = false; /* resumed: it goes on once it is on top */
        x->completes++;
        break;
      case WK_DISP_CALL_DONE:
        assert_int_equal(a->result, WK_DISP_OK);
        x->calls_done++;
        break;
      case WK_DISP_TASK_DONE:
        x->task_done = true;
        x->task_ok = a->ok;
        break;
      case WK_DISP_SUBCALL_DONE: assert_int_equal(a->result, WK_DISP_OK); break;
      case WK_DISP_CANCEL: fail_msg("unexpected CANCEL"); break;
    }
  }
}

/* Starts arrivals while the top waits (or nothing runs). */
static void sx_advance(sx *x) {
  while (x->n_queue > 0 &&
         (x->n_stack == 0 || x->waiting[wk_disp_call_slot(x->stack[x->n_stack - 1])])) {
    assert_true(x->n_stack < SX_MAX);
    x->stack[x->n_stack++] = x->queue[0];
    x->n_queue--;
    memmove(x->queue, x->queue + 1, x->n_queue * sizeof x->queue[0]);
    if (x->n_stack > x->max_stack) x->max_stack = x->n_stack;
  }
}

/* Runs `calls` top-level calls, each a tree of `fanout` children per level down to
 * max_depth 2, on one such executor with pipeline depth `capacity`. Every call must
 * end OK: with a waiting call on top and nothing else to run, the executor is stuck. */
static void sx_run_tree(dfx *fx, uint32_t capacity, uint32_t calls, uint32_t fanout) {
  wk_disp_config cfg = dfx_config();
  cfg.max_inflight = capacity;
  cfg.window_initial = 16;
  cfg.window_max = 16;
  cfg.max_depth = 2;
  cfg.max_calls = SX_MAX;
  dfx_reconfigure(fx, &cfg);
  wk_disp_task_params p = sub_params();
  uint32_t t = DFX_TASK(fx, 9, &p);
  sx x;
  memset(&x, 0, sizeof x);
  DFX_ADD(fx, t, calls, true, 0);
  sx_take(&x, fx);
  int64_t now = 1;
  for (uint32_t guard = 0; !x.task_done; guard++) {
    assert_true(guard < 10000);
    sx_advance(&x);
    assert_true(x.n_stack > 0); /* work left, and nothing runs: SENDs stopped coming */
    uint64_t top = x.stack[x.n_stack - 1];
    uint32_t slot = wk_disp_call_slot(top);
    if (x.waiting[slot]) {
      fail_msg(
          "executor stuck: call %#llx on top waits for children, %u in flight, "
          "capacity %u, %u arrivals queued",
          (unsigned long long)top, wk_disp_stats_get(fx->d).inflight, capacity, x.n_queue);
    }
    if (!x.asked[slot] && x.depth[slot] < 2) {
      x.asked[slot] = x.waiting[slot] = true;
      (void)DFX_SUBCALLS(fx, top, fanout, now);
    } else {
      x.n_stack--;
      assert_int_equal(DFX_FINISH(fx, top, WK_DISP_OK, now), WK_OK);
    }
    sx_take(&x, fx);
    assert_true(wk_disp_stats_get(fx->d).inflight <= capacity);
    now++;
  }
  assert_true(x.task_ok);
  assert_int_equal(x.calls_done, calls);
  /* every call above the leaves waited once and was resumed once */
  assert_int_equal(x.completes, calls * (1 + fanout));
  assert_int_equal(x.n_stack + x.n_queue, 0);
  wk_disp_task_info info = DFX_INFO(fx, t);
  assert_int_equal(info.subcalls, calls * (fanout + fanout * fanout));
  assert_int_equal(wk_disp_stats_get(fx->d).live_calls, 0);
}

static void test_stack_executor_runs_trees_to_the_end(void **state) {
  dfx *fx = *state;
  sx_run_tree(fx, 1, 1, 2); /* the shape of the deadlock found end to end */
  sx_run_tree(fx, 1, 3, 2);
  sx_run_tree(fx, 1, 2, 3);
  sx_run_tree(fx, 2, 3, 2);
  sx_run_tree(fx, 3, 2, 3);
}

static void test_children_are_retried(void **state) {
  dfx *fx = *state;
  wk_disp_config cfg = dfx_config();
  cfg.window_initial = 8;
  dfx_reconfigure(fx, &cfg);
  wk_disp_task_params p = sub_params();
  p.retry.max_attempts = 2;
  p.retry.initial_backoff_ms = 10;
  uint32_t t = DFX_TASK(fx, 5, &p);
  DFX_ADD(fx, t, 1, true, 0);
  uint64_t parent = DFX_SEND_ID(fx, t, 0);
  uint64_t g = DFX_SUBCALLS(fx, parent, 2, 0);
  uint64_t k0 = fx->out.items[0].call_id, k1 = fx->out.items[1].call_id;
  (void)DFX_FINISH(fx, k0, WK_DISP_RETRYABLE, 1);
  DFX_KINDS(fx, "");
  DFX_TICK(fx, 11);
  DFX_KINDS(fx, "S");
  assert_int_equal(fx->out.items[0].group, g);
  assert_int_equal(fx->out.items[0].index, 0);
  assert_int_equal(fx->out.items[0].attempt, 2);
  uint64_t k0b = fx->out.items[0].call_id;
  assert_int_equal(DFX_FINISH(fx, k0, WK_DISP_OK, 12), WK_ERR_STALE);
  (void)DFX_FINISH(fx, k0b, WK_DISP_RETRYABLE, 12); /* exhausted: final, the task goes on */
  DFX_KINDS(fx, "d");
  assert_int_equal(fx->out.items[0].result, WK_DISP_RETRYABLE);
  assert_int_equal(fx->out.items[0].attempt, 2);
  assert_false(DFX_INFO(fx, t).ended);
  (void)DFX_FINISH(fx, k1, WK_DISP_OK, 13);
  DFX_KINDS(fx, "dC");
  assert_int_equal(DFX_INFO(fx, t).retried, 1);
}

static void test_parent_end_cancels_descendants(void **state) {
  dfx *fx = *state;
  wk_disp_config cfg = dfx_config();
  cfg.max_inflight = 3;
  cfg.window_initial = 8;
  dfx_reconfigure(fx, &cfg);
  wk_disp_task_params p = sub_params();
  p.retry.max_attempts = 2;
  p.retry_on_executor_lost = true;
  uint32_t t = DFX_TASK(fx, 5, &p);
  DFX_ADD(fx, t, 1, true, 0);
  uint64_t parent = DFX_SEND_ID(fx, t, 0);
  (void)DFX_SUBCALLS(fx, parent, 4, 0);
  DFX_KINDS(fx, "SSS"); /* capacity 3: one child queued */
  uint64_t k0 = fx->out.items[0].call_id, k1 = fx->out.items[1].call_id;
  (void)DFX_SUBCALLS(fx, k0, 1, 1); /* a grandchild, queued behind the fourth child */
  DFX_KINDS(fx, "S");
  assert_int_equal(fx->out.items[0].depth, 1);
  assert_int_equal(fx->out.items[0].index, 3);
  (void)DFX_FINISH(fx, k1, WK_DISP_OK, 2); /* one child done: its SUBCALL_DONE is out */
  DFX_KINDS(fx, "dS");
  uint64_t gk = fx->out.items[1].call_id;
  assert_int_equal(fx->out.items[1].depth, 2);
  assert_int_equal(fx->out.items[1].parent_call_id, k0);
  /* the parent's executor dies: every descendant in flight gets a CANCEL (PARENT), the
   * queued one is dropped, no SUBCALL_DONE follows; the parent is retried afresh */
  (void)DFX_FINISH(fx, parent, WK_DISP_EXECUTOR_LOST, 3);
  uint32_t cancels = dfx_count(fx, WK_DISP_CANCEL);
  assert_int_equal(cancels, 4); /* k0 (waiting), grandchild, k2, k3 */
  for (uint32_t i = 0; i < cancels; i++) {
    assert_int_equal(dfx_nth(fx, WK_DISP_CANCEL, i)->reason, WK_DISP_CANCEL_PARENT);
  }
  assert_int_equal(dfx_count(fx, WK_DISP_SUBCALL_DONE), 0);
  assert_int_equal(dfx_count(fx, WK_DISP_SEND), 1);
  const wk_disp_action *s = dfx_nth(fx, WK_DISP_SEND, 0);
  assert_int_equal(s->depth, 0);
  assert_int_equal(s->attempt, 2);
  wk_disp_task_info info = DFX_INFO(fx, t);
  assert_int_equal(info.live_calls, 1);
  assert_int_equal(info.waiting, 0);
  assert_int_equal(info.inflight, 1);
  /* late answers from the cancelled descendants are ignored */
  assert_int_equal(DFX_FINISH(fx, gk, WK_DISP_OK, 4), WK_ERR_STALE);
  assert_int_equal(DFX_FINISH(fx, k0, WK_DISP_OK, 4), WK_ERR_STALE);
  DFX_KINDS(fx, "");
}

static void test_parent_deadline_while_waiting(void **state) {
  dfx *fx = *state;
  wk_disp_config cfg = dfx_config();
  cfg.window_initial = 8;
  dfx_reconfigure(fx, &cfg);
  wk_disp_task_params p = sub_params();
  p.call_timeout_ms = 100;
  uint32_t t = DFX_TASK(fx, 5, &p);
  DFX_ADD(fx, t, 1, true, 0);
  uint64_t parent = DFX_SEND_ID(fx, t, 0);
  (void)DFX_SUBCALLS(fx, parent, 2, 50);
  assert_int_equal(fx->out.items[0].deadline_ms, 100); /* not 150: capped by the parent */
  /* the parent entered the deadline heap first, so at the tie it times out first */
  DFX_TICK(fx, 100);
  /* parent CANCEL (DEADLINE), two children CANCEL (PARENT), its TIMEOUT, the task fails */
  assert_int_equal(dfx_count(fx, WK_DISP_CANCEL), 3);
  assert_int_equal(dfx_count(fx, WK_DISP_CALL_DONE), 1);
  assert_int_equal(dfx_nth(fx, WK_DISP_CALL_DONE, 0)->result, WK_DISP_TIMEOUT);
  assert_int_equal(dfx_count(fx, WK_DISP_TASK_DONE), 1);
  assert_int_equal(dfx_count(fx, WK_DISP_SUBCALL_DONE), 0);
  uint32_t deadline = 0;
  for (uint32_t i = 0; i < 3; i++) {
    const wk_disp_action *x = dfx_nth(fx, WK_DISP_CANCEL, i);
    if (x->reason == WK_DISP_CANCEL_DEADLINE) {
      deadline++;
      assert_int_equal(x->call_id, parent);
    }
  }
  assert_int_equal(deadline, 1);
  assert_int_equal(wk_disp_next_deadline(fx->d), INT64_MAX);
}

/* A chain whose deadlines all pass in one tick, deepest first: each level adds its
 * CANCEL, its SUBCALL_DONE and its parent's SUBCALLS_COMPLETE to the pending queue
 * before anything is emitted. With 2 entries per call record that overflowed. */
static void test_chain_timeouts_fit_the_pending_queue(void **state) {
  dfx *fx = *state;
  wk_disp_config cfg = dfx_config();
  cfg.max_calls = 4;
  cfg.max_inflight = 4;
  cfg.window_initial = 4;
  dfx_reconfigure(fx, &cfg);
  wk_disp_task_params pa = sub_params();
  pa.call_timeout_ms = 50;
  wk_disp_task_params pb = sub_params();
  pb.call_timeout_ms = 100;
  uint32_t ta = DFX_TASK(fx, 1, &pa);
  uint32_t tb = DFX_TASK(fx, 2, &pb);
  DFX_ADD(fx, ta, 1, true, 0);
  uint64_t x = DFX_SEND_ID(fx, ta, 0); /* deadline 50: first in the heap */
  DFX_ADD(fx, tb, 1, true, 0);
  uint64_t g = DFX_SEND_ID(fx, tb, 0); /* deadline 100, and its descendants' too */
  (void)DFX_SUBCALLS(fx, g, 1, 0);
  uint64_t pc = fx->out.items[0].call_id;
  (void)DFX_SUBCALLS(fx, pc, 1, 0);
  uint64_t c = fx->out.items[0].call_id;
  assert_int_equal(wk_disp_stats_get(fx->d).live_calls, 4);
  /* x leaves the heap first and its last entry, c, moves to the root: c, pc, g time
   * out in that order; the SUBCALL_DONEs and SUBCALLS_COMPLETEs are dropped at
   * emission (their parents ended), but they were queued */
  DFX_TICK(fx, 100);
  DFX_KINDS(fx, "XDXXXDTT");
  assert_int_equal(fx->out.items[0].call_id, x);
  assert_int_equal(fx->out.items[2].call_id, c);
  assert_int_equal(fx->out.items[3].call_id, pc);
  assert_int_equal(fx->out.items[4].call_id, g);
  static const uint32_t cancels[4] = {0, 2, 3, 4};
  for (uint32_t i = 0; i < 4; i++) {
    assert_int_equal(fx->out.items[cancels[i]].reason, WK_DISP_CANCEL_DEADLINE);
  }
  assert_int_equal(fx->out.items[5].result, WK_DISP_TIMEOUT);
  assert_int_equal(wk_disp_stats_get(fx->d).live_calls, 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_group_flow, dfx_setup, dfx_teardown),
      cmocka_unit_test_setup_teardown(test_depth_limit_and_errors, dfx_setup, dfx_teardown),
      cmocka_unit_test_setup_teardown(test_no_deadlock_when_waiting_parents_fill_capacity,
                                      dfx_setup, dfx_teardown),
      cmocka_unit_test_setup_teardown(test_resume_ignores_full_admission, dfx_setup, dfx_teardown),
      cmocka_unit_test_setup_teardown(test_resume_ignores_full_window, dfx_setup, dfx_teardown),
      cmocka_unit_test_setup_teardown(test_resumed_parent_asks_again, dfx_setup, dfx_teardown),
      cmocka_unit_test_setup_teardown(test_resume_pending_and_deadline, dfx_setup, dfx_teardown),
      cmocka_unit_test_setup_teardown(test_nested_resume_does_not_block_children, dfx_setup,
                                      dfx_teardown),
      cmocka_unit_test_setup_teardown(test_stack_executor_runs_trees_to_the_end, dfx_setup,
                                      dfx_teardown),
      cmocka_unit_test_setup_teardown(test_children_are_retried, dfx_setup, dfx_teardown),
      cmocka_unit_test_setup_teardown(test_parent_end_cancels_descendants, dfx_setup, dfx_teardown),
      cmocka_unit_test_setup_teardown(test_parent_deadline_while_waiting, dfx_setup, dfx_teardown),
      cmocka_unit_test_setup_teardown(test_chain_timeouts_fit_the_pending_queue, dfx_setup,
                                      dfx_teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

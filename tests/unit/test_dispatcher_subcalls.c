/* test_dispatcher_subcalls.c: a running call asks for children: groups, positions,
 * SUBCALL_DONE per child and SUBCALLS_COMPLETE at re-admission; the depth limit and
 * the other errors; waiting parents out of admission (no deadlock even when every
 * admitted slot holds a waiting parent); children retried, their failures left to
 * the parent; a parent that ends, times out or is cancelled takes its children. */
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
  DFX_KINDS(fx, "dC");
  assert_int_equal(fx->out.items[1].group, g);
  assert_int_equal(fx->out.items[1].call_id, parent); /* the parent keeps its attempt */
  assert_int_equal(DFX_INFO(fx, t).waiting, 0);
  assert_int_equal(DFX_INFO(fx, t).inflight, 1);
  /* a second ctx.map from the same attempt: a new group */
  uint64_t g2 = DFX_SUBCALLS(fx, parent, 1, 30);
  assert_true(g2 != g);
  uint64_t k = fx->out.items[0].call_id;
  (void)DFX_FINISH(fx, k, WK_DISP_OK, 31);
  DFX_KINDS(fx, "dC");
  (void)DFX_FINISH(fx, parent, WK_DISP_OK, 40);
  DFX_KINDS(fx, "DT");
  assert_true(fx->out.items[1].ok);
  assert_int_equal(DFX_INFO(fx, t).subcalls, 4);
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
  assert_int_equal(wk_disp_add_subcalls(fx->d, c0, 0, 1, &group, &fx->out), WK_ERR_INVALID_ARGUMENT);
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
  assert_int_equal(wk_disp_add_subcalls(fx->d, c0, 1, 2, &group, &fx->out), WK_ERR_INVALID_ARGUMENT);
  (void)DFX_SUBCALLS(fx, c1, 1, 3);
  uint64_t c2 = fx->out.items[0].call_id;
  assert_int_equal(fx->out.items[0].depth, 2);
  /* depth 3 > max_depth 2: refused, nothing added */
  dfx_reset(fx);
  uint32_t live = wk_disp_stats_get(fx->d).live_calls;
  assert_int_equal(wk_disp_add_subcalls(fx->d, c2, 2, 4, &group, &fx->out), WK_ERR_INVALID_ARGUMENT);
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
  assert_int_equal(wk_disp_add_subcalls(fx->d, c0, 1, 1, &group, &fx->out), WK_ERR_INVALID_ARGUMENT);
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

static void test_resumed_parent_waits_for_room(void **state) {
  dfx *fx = *state;
  wk_disp_config cfg = dfx_config();
  cfg.max_inflight = 2;
  cfg.window_initial = 8;
  dfx_reconfigure(fx, &cfg);
  wk_disp_task_params p = sub_params();
  uint32_t t = DFX_TASK(fx, 5, &p);
  DFX_ADD(fx, t, 2, true, 0);
  uint64_t parent = DFX_SEND_ID(fx, t, 0), other = DFX_SEND_ID(fx, t, 1);
  (void)DFX_SUBCALLS(fx, parent, 1, 1);
  uint64_t kid = fx->out.items[0].call_id;
  wk_disp_set_capacity(fx->d, 1); /* the pool shrank: 2 in flight, room for 1 */
  (void)DFX_FINISH(fx, kid, WK_DISP_OK, 2);
  DFX_KINDS(fx, "d"); /* 1 in flight = capacity: the parent waits for room */
  assert_int_equal(DFX_INFO(fx, t).waiting, 1);
  (void)DFX_FINISH(fx, other, WK_DISP_OK, 3);
  DFX_KINDS(fx, "DC");
  assert_int_equal(fx->out.items[1].call_id, parent);
  assert_int_equal(DFX_INFO(fx, t).inflight, 1);
  /* the parent can end while it waits for room: answered, not resumed */
  (void)DFX_FINISH(fx, parent, WK_DISP_OK, 4);
  DFX_KINDS(fx, "DT");
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

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_group_flow, dfx_setup, dfx_teardown),
      cmocka_unit_test_setup_teardown(test_depth_limit_and_errors, dfx_setup, dfx_teardown),
      cmocka_unit_test_setup_teardown(test_no_deadlock_when_waiting_parents_fill_capacity, dfx_setup, dfx_teardown),
      cmocka_unit_test_setup_teardown(test_resumed_parent_waits_for_room, dfx_setup, dfx_teardown),
      cmocka_unit_test_setup_teardown(test_children_are_retried, dfx_setup, dfx_teardown),
      cmocka_unit_test_setup_teardown(test_parent_end_cancels_descendants, dfx_setup, dfx_teardown),
      cmocka_unit_test_setup_teardown(test_parent_deadline_while_waiting, dfx_setup, dfx_teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

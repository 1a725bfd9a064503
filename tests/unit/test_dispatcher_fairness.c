/* test_dispatcher_fairness.c: round robin across tasks, a small task behind a huge
 * one, priorities inside a task (retries and children, then new calls; a resumed
 * parent takes no turn: it resumes at once, outside admission), and tasks parked
 * while call records run out. */
#include "test_dispatcher_fixture.h"

static wk_disp_config wide_config(uint32_t capacity) {
  wk_disp_config cfg = dfx_config();
  cfg.max_inflight = capacity;
  cfg.window_initial = 8;
  cfg.max_calls = 256;
  return cfg;
}

static void test_round_robin_interleaves_tasks(void **state) {
  dfx *fx = *state;
  wk_disp_config cfg = wide_config(0);
  dfx_reconfigure(fx, &cfg);
  wk_disp_task_params p = dfx_params();
  uint32_t t[3];
  for (uint32_t i = 0; i < 3; i++) {
    t[i] = DFX_TASK(fx, 10 + i, &p);
    DFX_ADD(fx, t[i], 3, true, 0);
    DFX_KINDS(fx, "");
  }
  wk_disp_set_capacity(fx->d, 9);
  DFX_POLL(fx, 0);
  DFX_KINDS(fx, "SSSSSSSSS");
  for (uint32_t k = 0; k < 9; k++) {
    const wk_disp_action *a = &fx->out.items[k];
    assert_int_equal(a->task, t[k % 3]);
    assert_int_equal(a->task_key, 10 + k % 3);
    assert_int_equal(a->index, k / 3);
    assert_int_equal(a->attempt, 1);
    assert_int_equal(a->depth, 0);
    assert_int_equal(a->group, 0);
    assert_int_equal(a->deadline_ms, INT64_MAX);
  }
}

/* A task with 100,000 queued calls, then a one-call task: the small one is sent
 * after at most one SEND of the big one. */
static void test_small_task_behind_huge_task(void **state) {
  dfx *fx = *state;
  wk_disp_config cfg = wide_config(4);
  dfx_reconfigure(fx, &cfg);
  wk_disp_task_params p = dfx_params();
  uint32_t big = DFX_TASK(fx, 1, &p);
  dfx_q q = {{0}, 0, 0};
  DFX_ADD(fx, big, 100000, true, 0);
  DFX_KINDS(fx, "SSSS");
  dfx_q_sends(&q, fx);
  uint32_t small = DFX_TASK(fx, 2, &p);
  DFX_ADD(fx, small, 1, true, 1);
  DFX_KINDS(fx, ""); /* admission full */
  uint32_t big_sends = 0;
  bool small_sent = false;
  for (int i = 0; i < 4 && !small_sent; i++) {
    (void)DFX_FINISH(fx, dfx_q_pop(&q), WK_DISP_OK, 2);
    const wk_disp_action *s = dfx_nth(fx, WK_DISP_SEND, 0);
    assert_non_null(s);
    if (s->task == small) {
      small_sent = true;
    } else {
      big_sends++;
      dfx_q_sends(&q, fx);
    }
  }
  assert_true(small_sent);
  assert_true(big_sends <= 1);
}

static void test_many_tasks_take_turns(void **state) {
  dfx *fx = *state;
  wk_disp_config cfg = wide_config(1);
  dfx_reconfigure(fx, &cfg);
  wk_disp_task_params p = dfx_params();
  uint32_t t[8];
  uint64_t id = 0;
  for (uint32_t i = 0; i < 8; i++) {
    t[i] = DFX_TASK(fx, i, &p);
    DFX_ADD(fx, t[i], 50, true, 0);
    /* task 0 takes the only slot at its add; the others wait in the ring */
    if (i == 0) id = DFX_SEND_ID(fx, t[0], 0);
    if (i > 0) DFX_KINDS(fx, "");
  }
  for (uint32_t k = 1; k <= 40; k++) {
    assert_int_equal(DFX_FINISH(fx, id, WK_DISP_OK, 1), WK_OK);
    DFX_KINDS(fx, "DS");
    const wk_disp_action *s = &fx->out.items[1];
    /* task 0 went to the back of the ring when it sent, before the others joined */
    uint32_t j = (k - 1) % 8;
    assert_int_equal(s->task, t[j]);
    assert_int_equal(s->index, (k - 1) / 8 + (j == 0 ? 1u : 0u));
    id = s->call_id;
  }
}

static void test_priorities_inside_a_task(void **state) {
  dfx *fx = *state;
  wk_disp_config cfg = dfx_config();
  cfg.max_inflight = 2;
  cfg.window_initial = 8;
  dfx_reconfigure(fx, &cfg);
  wk_disp_task_params p = dfx_params();
  p.failure_policy = WK_CALL_CONTINUE;
  p.max_failed_calls = 10;
  p.retry.max_attempts = 2; /* immediate retries: backoff 0 */
  uint32_t t = DFX_TASK(fx, 1, &p);
  DFX_ADD(fx, t, 10, true, 0);
  DFX_KINDS(fx, "SS");
  uint64_t c0 = DFX_SEND_ID(fx, t, 0), c1 = DFX_SEND_ID(fx, t, 1);

  /* a retry goes before new call 2 */
  (void)DFX_FINISH(fx, c1, WK_DISP_RETRYABLE, 1);
  DFX_KINDS(fx, "S");
  assert_int_equal(fx->out.items[0].index, 1);
  assert_int_equal(fx->out.items[0].attempt, 2);
  uint64_t c1b = fx->out.items[0].call_id;
  assert_int_not_equal(c1b, c1);

  /* call 0 asks for two children: they go before new calls */
  uint64_t g = DFX_SUBCALLS(fx, c0, 2, 2);
  DFX_KINDS(fx, "S"); /* the parent left admission: one child in its place */
  const wk_disp_action *ch = &fx->out.items[0];
  assert_int_equal(ch->depth, 1);
  assert_int_equal(ch->group, g);
  assert_int_equal(ch->index, 0);
  assert_int_equal(ch->parent_call_id, c0);
  uint64_t k0 = ch->call_id;
  (void)DFX_FINISH(fx, c1b, WK_DISP_OK, 3);
  DFX_KINDS(fx, "DS");
  assert_int_equal(fx->out.items[1].depth, 1);
  assert_int_equal(fx->out.items[1].index, 1);
  uint64_t k1 = fx->out.items[1].call_id;
  (void)DFX_FINISH(fx, k0, WK_DISP_OK, 4);
  DFX_KINDS(fx, "dS"); /* one child left: a new call takes the slot */
  assert_int_equal(fx->out.items[1].index, 2);
  uint64_t c2 = fx->out.items[1].call_id;
  /* the last child: the parent resumes at once, outside admission, so the slot the
   * child freed goes to new call 3 in the same output */
  (void)DFX_FINISH(fx, k1, WK_DISP_OK, 5);
  DFX_KINDS(fx, "dCS");
  assert_int_equal(fx->out.items[1].call_id, c0);
  assert_int_equal(fx->out.items[1].group, g);
  assert_int_equal(fx->out.items[2].index, 3);
  assert_int_equal(fx->out.items[2].depth, 0);
  uint64_t c3 = fx->out.items[2].call_id;
  assert_int_equal(wk_disp_stats_get(fx->d).inflight, 2); /* calls 2 and 3 */
  assert_int_equal(DFX_INFO(fx, t).resuming, 1);
  /* the resumed parent ends: no slot was held, none is freed, nothing is sent */
  (void)DFX_FINISH(fx, c0, WK_DISP_OK, 6);
  DFX_KINDS(fx, "D");
  assert_int_equal(fx->out.items[0].index, 0);
  /* a call that held a slot ends: the next new call takes it */
  (void)DFX_FINISH(fx, c2, WK_DISP_OK, 7);
  DFX_KINDS(fx, "DS");
  assert_int_equal(fx->out.items[1].index, 4);
  (void)DFX_FINISH(fx, c3, WK_DISP_OK, 8);
  DFX_KINDS(fx, "DS");
  assert_int_equal(fx->out.items[1].index, 5);
}

static void test_tasks_park_while_records_run_out(void **state) {
  dfx *fx = *state;
  wk_disp_config cfg = dfx_config();
  cfg.max_inflight = 10;
  cfg.window_initial = 8;
  cfg.max_calls = 4;
  dfx_reconfigure(fx, &cfg);
  wk_disp_task_params p = dfx_params();
  uint32_t a = DFX_TASK(fx, 1, &p);
  DFX_ADD(fx, a, 10, true, 0);
  DFX_KINDS(fx, "SSSS"); /* every record taken */
  dfx_q q = {{0}, 0, 0};
  dfx_q_sends(&q, fx);
  uint32_t b = DFX_TASK(fx, 2, &p);
  DFX_ADD(fx, b, 3, true, 0);
  DFX_KINDS(fx, "");
  assert_int_equal(wk_disp_stats_get(fx->d).live_calls, 4);
  /* each freed record goes to the tasks in turn */
  uint32_t want[6] = {a, b, a, b, a, b};
  for (uint32_t i = 0; i < 6; i++) {
    (void)DFX_FINISH(fx, dfx_q_pop(&q), WK_DISP_OK, 1);
    DFX_KINDS(fx, "DS");
    assert_int_equal(fx->out.items[1].task, want[i]);
    dfx_q_sends(&q, fx);
  }
  /* finished: a0..a4 and b0; in flight: a5 a6 b1 b2 */
  assert_int_equal(DFX_INFO(fx, a).finished, 5);
  assert_int_equal(DFX_INFO(fx, b).finished, 1);
  assert_int_equal(DFX_INFO(fx, b).inflight, 2);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_round_robin_interleaves_tasks, dfx_setup, dfx_teardown),
      cmocka_unit_test_setup_teardown(test_small_task_behind_huge_task, dfx_setup, dfx_teardown),
      cmocka_unit_test_setup_teardown(test_many_tasks_take_turns, dfx_setup, dfx_teardown),
      cmocka_unit_test_setup_teardown(test_priorities_inside_a_task, dfx_setup, dfx_teardown),
      cmocka_unit_test_setup_teardown(test_tasks_park_while_records_run_out, dfx_setup,
                                      dfx_teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

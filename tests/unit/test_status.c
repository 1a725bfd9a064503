/* test_status.c: the status document's own figures (src/app/wk_status.c): the
 * one-second samples (rates, p50/p99 latency, the bound on the history), the recent
 * terminal tasks (failures first, newest first, bounded). The document is read after
 * wk_status_close, which builds it one last time on this (the loop's) thread. */
#include <jansson.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>
#include <uv.h>

#include "app/wk_status.h"

static void no_sources(void *ud, wk_status_sources *out) {
  (void)ud;
  *out = (wk_status_sources){.state = "serving",
                             .deployment = "block",
                             .service = "svc",
                             .version = "1",
                             .listen_addr = "l",
                             .advertise_addr = "a",
                             .status_addr = "s",
                             .isolation = "function",
                             .etcd_endpoints = ""};
}

typedef struct fixture {
  uv_loop_t loop;
  wk_status *st;
} fixture;

static void open_status(fixture *f) {
  uv_loop_init(&f->loop);
  f->st = wk_status_new(&f->loop, no_sources, NULL);
}

/* Closes the status and returns its last document (the caller decrefs). */
static json_t *close_and_read(fixture *f) {
  wk_status_close(f->st);
  uv_run(&f->loop, UV_RUN_DEFAULT);
  size_t len = 0;
  char *text = wk_status_json(f->st, &len);
  assert_non_null(text);
  json_t *doc = json_loadb(text, len, 0, NULL);
  assert_non_null(doc);
  free(text);
  wk_status_free(f->st);
  uv_loop_close(&f->loop);
  return doc;
}

static void end_task(wk_status *st, int i, wk_task_state state, int64_t duration_ms) {
  char id[32];
  snprintf(id, sizeof id, "t%d", i);
  wk_task_result r = {
      .task_id = id,
      .task_id_len = strlen(id),
      .state = state,
      .failure_code = state == WK_TASK_SUCCEEDED ? WK_FAIL_NONE : WK_FAIL_CALL_FAILED};
  r.statistic.accepted_ms = 1000;
  r.statistic.finished_ms = 1000 + duration_ms;
  wk_status_on_task_ended(st, &r, "fn");
}

static double last_of(json_t *doc, const char *series) {
  json_t *a = json_object_get(json_object_get(doc, "history"), series);
  return json_number_value(json_array_get(a, json_array_size(a) - 1));
}

static void test_one_second_sample(void **state) {
  (void)state;
  fixture f;
  open_status(&f);
  wk_status_tick(f.st, 10000, 0, NULL); /* the second starts */
  for (int i = 0; i < 100; i++)         /* durations 1..100 ms, out of order */
    end_task(f.st, i, WK_TASK_SUCCEEDED, (int64_t)((i * 37) % 100) + 1);
  wk_status_tick(f.st, 10500, 0, NULL); /* half a second: no sample yet */
  wk_status_tick(f.st, 11000, 0, NULL);
  json_t *doc = close_and_read(&f);
  json_t *h = json_object_get(doc, "history");
  assert_int_equal(json_array_size(json_object_get(h, "t_unix_ms")), 1);
  assert_int_equal(json_integer_value(json_array_get(json_object_get(h, "t_unix_ms"), 0)), 11000);
  assert_true(last_of(doc, "tasks_per_s") == 100.0);
  assert_true(last_of(doc, "calls_per_s") == 0.0);
  assert_true(last_of(doc, "p50_ms") == 50.0);
  assert_true(last_of(doc, "p99_ms") == 99.0);
  /* no executor was ready: nothing to measure, null rather than 0 */
  assert_true(json_is_null(json_array_get(json_object_get(h, "utilisation"), 0)));
  json_t *totals = json_object_get(doc, "totals");
  assert_int_equal(json_integer_value(json_object_get(totals, "tasks_finished")), 100);
  assert_int_equal(json_integer_value(json_object_get(totals, "tasks_failed")), 0);
  json_decref(doc);
}

static void test_latency_sample_is_bounded_and_fair(void **state) {
  (void)state;
  fixture f;
  open_status(&f);
  wk_status_tick(f.st, 1000, 0, NULL);
  /* 40,000 tasks in a second, ten times the kept sample: 1..1000 ms, 40 of each */
  for (int i = 0; i < 40000; i++) end_task(f.st, i, WK_TASK_SUCCEEDED, (int64_t)(i % 1000) + 1);
  wk_status_tick(f.st, 2000, 0, NULL);
  /* a second with no task: null latencies, zero rate */
  wk_status_tick(f.st, 3000, 0, NULL);
  json_t *doc = close_and_read(&f);
  json_t *p50 = json_object_get(json_object_get(doc, "history"), "p50_ms");
  json_t *p99 = json_object_get(json_object_get(doc, "history"), "p99_ms");
  double m = json_number_value(json_array_get(p50, 0));
  double n = json_number_value(json_array_get(p99, 0));
  assert_true(m > 450 && m < 550); /* a uniform sample of 4096 */
  assert_true(n > 970 && n <= 1000);
  assert_true(json_is_null(json_array_get(p50, 1)));
  assert_true(last_of(doc, "tasks_per_s") == 0.0);
  json_decref(doc);
}

static void test_history_is_bounded(void **state) {
  (void)state;
  fixture f;
  open_status(&f);
  for (int s = 0; s <= (int)WK_STATUS_HISTORY + 100; s++)
    wk_status_tick(f.st, 1000 + 1000 * (int64_t)s, 5, NULL);
  json_t *doc = close_and_read(&f);
  json_t *t = json_object_get(json_object_get(doc, "history"), "t_unix_ms");
  assert_int_equal(json_array_size(t), WK_STATUS_HISTORY);
  /* the newest 600, oldest first, on the wall clock (loop ms + offset) */
  assert_int_equal(json_integer_value(json_array_get(t, WK_STATUS_HISTORY - 1)),
                   1000 + 1000 * (WK_STATUS_HISTORY + 100) + 5);
  for (size_t i = 1; i < WK_STATUS_HISTORY; i++)
    assert_int_equal(
        json_integer_value(json_array_get(t, i)) - json_integer_value(json_array_get(t, i - 1)),
        1000);
  json_decref(doc);
}

static void test_recent_failures_first_and_bounded(void **state) {
  (void)state;
  fixture f;
  open_status(&f);
  /* 80 tasks: every fourth fails; only the last 50 are kept */
  for (int i = 0; i < 80; i++)
    end_task(f.st, i, i % 4 == 0 ? WK_TASK_FAILED : WK_TASK_SUCCEEDED, 5);
  json_t *doc = close_and_read(&f);
  json_t *recent = json_object_get(doc, "recent");
  assert_int_equal(json_array_size(recent), WK_STATUS_RECENT);
  /* tasks 30..79 are kept: failures 76, 72, ..., 32 first (12), then the rest newest first */
  int expect_failed = 76, expect_ok = 79;
  for (size_t k = 0; k < json_array_size(recent); k++) {
    json_t *r = json_array_get(recent, k);
    const char *id = json_string_value(json_object_get(r, "id"));
    const char *st = json_string_value(json_object_get(r, "state"));
    char want[16];
    if (k < 12) {
      snprintf(want, sizeof want, "t%d", expect_failed);
      expect_failed -= 4;
      assert_string_equal(st, "FAILED");
      assert_string_equal(json_string_value(json_object_get(r, "failure_code")), "CALL_FAILED");
    } else {
      if (expect_ok % 4 == 0) expect_ok--;
      snprintf(want, sizeof want, "t%d", expect_ok--);
      assert_string_equal(st, "SUCCEEDED");
    }
    assert_string_equal(id, want);
    assert_string_equal(json_string_value(json_object_get(r, "function")), "fn");
    assert_int_equal(json_integer_value(json_object_get(r, "duration_ms")), 5);
  }
  assert_int_equal(
      json_integer_value(json_object_get(json_object_get(doc, "totals"), "tasks_failed")), 20);
  /* without an orchestrator or a pool (stopped): no slots, tasks or executors */
  assert_null(json_object_get(doc, "slots"));
  assert_null(json_object_get(doc, "executors"));
  assert_string_equal(json_string_value(json_object_get(json_object_get(doc, "etcd"), "state")),
                      "stand-alone");
  json_decref(doc);
}

typedef struct asker {
  wk_status *st;
  char *text;
  size_t len;
} asker;

static void *ask(void *arg) {
  asker *a = arg;
  a->text = wk_status_json(a->st, &a->len);
  return NULL;
}

/* A request wakes the loop and gets a fresh document; when the loop does not answer in
 * time, the last document comes back, saying how old it is. */
static void test_fresh_then_stale(void **state) {
  (void)state;
  fixture f;
  open_status(&f);
  asker a = {.st = f.st};
  pthread_t th;
  pthread_create(&th, NULL, ask, &a);
  uv_run(&f.loop, UV_RUN_ONCE); /* the loop answers the wake-up: one build */
  pthread_join(th, NULL);
  assert_non_null(a.text);
  json_t *doc = json_loadb(a.text, a.len, 0, NULL);
  assert_non_null(doc);
  assert_null(json_object_get(doc, "stale_ms"));
  assert_string_equal(json_string_value(json_object_get(json_object_get(doc, "worker"), "service")),
                      "svc");
  json_decref(doc);
  free(a.text);
  nanosleep(&(struct timespec){.tv_nsec = 300 * 1000000L}, NULL); /* past WK_STATUS_FRESH_MS */
  /* nobody runs the loop now: after WK_STATUS_WAIT_MS, the old document, marked */
  size_t len = 0;
  char *text = wk_status_json(f.st, &len);
  assert_non_null(text);
  assert_int_equal(strlen(text), len);
  doc = json_loadb(text, len, 0, NULL);
  assert_non_null(doc);
  assert_true(json_integer_value(json_object_get(doc, "stale_ms")) >= 300 + WK_STATUS_WAIT_MS);
  assert_string_equal(json_string_value(json_object_get(json_object_get(doc, "worker"), "service")),
                      "svc");
  json_decref(doc);
  free(text);
  json_decref(close_and_read(&f));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_one_second_sample),
      cmocka_unit_test(test_latency_sample_is_bounded_and_fair),
      cmocka_unit_test(test_history_is_bounded),
      cmocka_unit_test(test_recent_failures_first_and_bounded),
      cmocka_unit_test(test_fresh_then_stale),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

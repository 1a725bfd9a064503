/* The task book (src/app/wk_task_book.c): listing newest first across pages while tasks
 * come and go, label copies, the per-task and total bounds of captured output (oldest
 * tasks' logs evicted first, drops counted), and records as GetTaskLogsResponse decodes
 * them. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app/wk_task_book.h"
#include "worker/v1/worker.pb-c.h"

static wk_task_book *book(uint64_t per_task, uint64_t total) {
  wk_task_book_limits lim = {.task_log_max_bytes = per_task, .total_log_max_bytes = total};
  return wk_task_book_create(&lim);
}

static void add(wk_task_book *b, const char *id) {
  wk_option labels[1] = {{"team", "data"}};
  assert_non_null(wk_task_book_add(b, id, "fn", "map", labels, 1));
}

/* Adds "<prefix><from>" .. "<prefix><to - 1>". */
static void add_range(wk_task_book *b, char prefix, int from, int to) {
  char id[16];
  for (int i = from; i < to; i++) {
    snprintf(id, sizeof id, "%c%d", prefix, i);
    add(b, id);
  }
}

typedef struct page {
  char ids[16][16];
  size_t n, max;
} page;

static bool collect(void *ud, const wk_task_entry *e) {
  page *p = ud;
  if (p->n == p->max) return false;
  snprintf(p->ids[p->n++], sizeof p->ids[0], "%s", e->task_id);
  return true;
}

/* Pages of 2, newest first; a removal between pages neither repeats nor skips a task. */
static void test_paging(void **state) {
  (void)state;
  wk_task_book *b = book(1024, 4096);
  char id[16];
  for (int i = 1; i <= 5; i++) {
    snprintf(id, sizeof id, "t%d", i);
    add(b, id);
  }
  add(b, "t3"); /* known already: left as it is */
  assert_int_equal(wk_task_book_count(b), 5);
  page p = {.max = 2};
  uint64_t next;
  wk_task_book_walk(b, 0, 100, collect, &p, &next);
  assert_int_equal(p.n, 2);
  assert_string_equal(p.ids[0], "t5");
  assert_string_equal(p.ids[1], "t4");
  assert_true(next != 0);
  wk_task_book_remove(b, "t3");
  p.n = 0;
  wk_task_book_walk(b, next, 100, collect, &p, &next);
  assert_int_equal(p.n, 2);
  assert_string_equal(p.ids[0], "t2");
  assert_string_equal(p.ids[1], "t1");
  assert_int_equal(next, 0); /* every entry examined: no next page */
  /* a bounded examination ends a page early with a token that goes on from there */
  p.n = 0;
  p.max = 16;
  wk_task_book_walk(b, 0, 1, collect, &p, &next);
  assert_int_equal(p.n, 1);
  assert_string_equal(p.ids[0], "t5");
  wk_task_book_walk(b, next, 100, collect, &p, &next);
  assert_int_equal(p.n, 4);
  assert_string_equal(p.ids[1], "t4");
  const wk_task_entry *e = wk_task_book_find(b, "t4");
  assert_non_null(e);
  assert_string_equal(e->function, "fn");
  assert_string_equal(e->builder, "map");
  assert_string_equal(wk_option_get(e->labels, e->n_labels, "team"), "data");
  wk_task_book_destroy(b);
}

/* Many removals compact the order; paging still works. */
static void test_compaction(void **state) {
  (void)state;
  wk_task_book *b = book(0, 0);
  char id[16];
  add_range(b, 'c', 0, 1000);
  for (int i = 0; i < 1000; i++) {
    if (i % 10 == 0) continue;
    snprintf(id, sizeof id, "c%d", i);
    wk_task_book_remove(b, id);
  }
  assert_int_equal(wk_task_book_count(b), 100);
  page p = {.max = 16};
  uint64_t next;
  wk_task_book_walk(b, 0, 1000, collect, &p, &next);
  assert_int_equal(p.n, 16);
  assert_string_equal(p.ids[0], "c990");
  assert_string_equal(p.ids[15], "c840");
  p.n = 0;
  wk_task_book_walk(b, next, 1000, collect, &p, &next);
  assert_string_equal(p.ids[0], "c830");
  assert_null(wk_task_book_find(b, "c1"));
  assert_non_null(wk_task_book_find(b, "c10"));
  wk_task_book_destroy(b);
}

static Worker__V1__GetTaskLogsResponse *logs(wk_task_book *b, const char *id, bool one,
                                             uint32_t call) {
  static const uint8_t empty[1] = {0};
  wk_buf out = {0};
  if (!wk_task_book_logs(b, id, one, call, &out)) return NULL;
  Worker__V1__GetTaskLogsResponse *r =
      worker__v1__get_task_logs_response__unpack(NULL, out.len, out.data ? out.data : empty);
  wk_buf_free(&out);
  assert_non_null(r);
  return r;
}

static void log_text(wk_task_book *b, const char *id, uint32_t index, uint32_t attempt,
                     const char *out, const char *err) {
  wk_task_book_log(b, id, index, attempt, (const uint8_t *)out, strlen(out), (const uint8_t *)err,
                   strlen(err));
}

/* Records decode as CallLogs in the order they came; --call picks one call; the per-task
 * bound drops (and counts) what is over it. */
static void test_logs_per_task(void **state) {
  (void)state;
  wk_task_book *b = book(100, 10000);
  add(b, "t1");
  log_text(b, "t1", 0, 1, "hello\n", "");
  log_text(b, "t1", 1, 1, "", "oops\n");
  log_text(b, "t1", 1, 2, "again\n", "");
  log_text(b, "nobody", 0, 1, "x", "y"); /* unknown: ignored */
  Worker__V1__GetTaskLogsResponse *r = logs(b, "t1", false, 0);
  assert_int_equal(r->n_calls, 3);
  assert_int_equal(r->calls[0]->index, 0);
  assert_memory_equal(r->calls[0]->stdout.data, "hello\n", 6);
  assert_int_equal(r->calls[1]->stderr.len, 5);
  assert_int_equal(r->calls[2]->attempt, 2);
  worker__v1__get_task_logs_response__free_unpacked(r, NULL);
  r = logs(b, "t1", true, 1);
  assert_int_equal(r->n_calls, 2);
  worker__v1__get_task_logs_response__free_unpacked(r, NULL);
  assert_null(logs(b, "t2", false, 0));
  char big[200];
  memset(big, 'x', sizeof big - 1);
  big[sizeof big - 1] = '\0';
  log_text(b, "t1", 2, 1, big, ""); /* over the task's 100 bytes */
  const wk_task_entry *e = wk_task_book_find(b, "t1");
  assert_int_equal(e->log_dropped_bytes, 199);
  assert_true(e->log_bytes <= 100);
  assert_int_equal(wk_task_book_log_bytes(b), e->log_bytes);
  wk_task_book_destroy(b);
}

/* An entry is one block holding its strings and labels, and a short first log is kept
 * in it: labels of every shape read back, and a log that grows from one short record
 * (kept in the entry) to many long ones (moved out, then grown) decodes whole, also
 * after an eviction emptied it and a short record came again. */
static void test_entry_storage_and_log_growth(void **state) {
  (void)state;
  wk_task_book *b = book(100000, 100000);
  wk_option three[3] = {{"a", "1"}, {"empty", ""}, {NULL, NULL}};
  assert_non_null(wk_task_book_add(b, "three", "fn", NULL, three, 3));
  assert_non_null(wk_task_book_add(b, "none", NULL, "map", NULL, 0));
  const wk_task_entry *e = wk_task_book_find(b, "three");
  assert_string_equal(e->task_id, "three");
  assert_string_equal(e->function, "fn");
  assert_string_equal(e->builder, "");
  assert_int_equal(e->n_labels, 3);
  assert_string_equal(wk_option_get(e->labels, e->n_labels, "a"), "1");
  assert_string_equal(wk_option_get(e->labels, e->n_labels, "empty"), "");
  assert_string_equal(e->labels[2].key, "");
  assert_string_equal(e->labels[2].value, "");
  e = wk_task_book_find(b, "none");
  assert_string_equal(e->function, "");
  assert_string_equal(e->builder, "map");
  assert_int_equal(e->n_labels, 0);
  char text[64];
  log_text(b, "none", 0, 1, "", ""); /* short: kept in the entry */
  for (uint32_t i = 1; i < 20; i++) {
    snprintf(text, sizeof text, "call %u says %.*s", i, (int)(i % 40),
             "abcdefghijklmnopqrstuvwxyz0123456789ABCD");
    log_text(b, "none", i, 1, text, i % 3 ? "" : "err");
  }
  Worker__V1__GetTaskLogsResponse *r = logs(b, "none", false, 0);
  assert_int_equal(r->n_calls, 20);
  assert_int_equal(r->calls[0]->stdout.len, 0);
  for (uint32_t i = 1; i < 20; i++) {
    snprintf(text, sizeof text, "call %u says %.*s", i, (int)(i % 40),
             "abcdefghijklmnopqrstuvwxyz0123456789ABCD");
    assert_int_equal(r->calls[i]->index, i);
    assert_int_equal(r->calls[i]->stdout.len, strlen(text));
    assert_memory_equal(r->calls[i]->stdout.data, text, strlen(text));
    assert_int_equal(r->calls[i]->stderr.len, i % 3 ? 0 : 3);
  }
  worker__v1__get_task_logs_response__free_unpacked(r, NULL);
  r = logs(b, "none", true, 7);
  assert_int_equal(r->n_calls, 1);
  assert_int_equal(r->calls[0]->index, 7);
  worker__v1__get_task_logs_response__free_unpacked(r, NULL);
  wk_task_book_destroy(b);

  /* a total bound below two records: the older log is evicted, then a short one fits */
  b = book(1000, 66); /* records of 9, 58 and 6 bytes */
  add(b, "first");
  add(b, "second");
  log_text(b, "first", 0, 1, "x", "");
  char fifty[51];
  memset(fifty, 'f', 50);
  fifty[50] = '\0';
  log_text(b, "second", 0, 1, fifty, ""); /* evicts first's */
  assert_int_equal(wk_task_book_find(b, "first")->log_bytes, 0);
  log_text(b, "first", 1, 2, "", ""); /* short again, in the entry */
  r = logs(b, "first", false, 0);
  assert_int_equal(r->n_calls, 1);
  assert_int_equal(r->calls[0]->index, 1);
  assert_int_equal(r->calls[0]->attempt, 2);
  worker__v1__get_task_logs_response__free_unpacked(r, NULL);
  r = logs(b, "second", false, 0);
  assert_int_equal(r->n_calls, 1);
  assert_memory_equal(r->calls[0]->stdout.data, fifty, 50);
  worker__v1__get_task_logs_response__free_unpacked(r, NULL);
  assert_int_equal(wk_task_book_log_bytes(b), wk_task_book_find(b, "first")->log_bytes +
                                                  wk_task_book_find(b, "second")->log_bytes);
  wk_task_book_destroy(b);
}

/* Over the total, the oldest tasks' logs go first; the dropped bytes are counted. */
static void test_logs_total_evicts_oldest(void **state) {
  (void)state;
  wk_task_book *b = book(1000, 120);
  add(b, "old");
  add(b, "mid");
  add(b, "new");
  char fifty[51];
  memset(fifty, 'a', 50);
  fifty[50] = '\0';
  log_text(b, "old", 0, 1, fifty, "");
  log_text(b, "mid", 0, 1, fifty, "");
  assert_int_equal(wk_task_book_find(b, "old")->log_dropped_bytes, 0);
  log_text(b, "new", 0, 1, fifty, ""); /* 3 x ~56 > 120: old's log goes */
  assert_int_equal(wk_task_book_find(b, "old")->log_bytes, 0);
  assert_true(wk_task_book_find(b, "old")->log_dropped_bytes > 0);
  assert_true(wk_task_book_find(b, "mid")->log_bytes > 0);
  assert_true(wk_task_book_find(b, "new")->log_bytes > 0);
  assert_true(wk_task_book_log_bytes(b) <= 120);
  wk_task_book_remove(b, "mid");
  assert_int_equal(wk_task_book_log_bytes(b), wk_task_book_find(b, "new")->log_bytes);
  wk_task_book_destroy(b);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_paging),
      cmocka_unit_test(test_compaction),
      cmocka_unit_test(test_logs_per_task),
      cmocka_unit_test(test_logs_total_evicts_oldest),
      cmocka_unit_test(test_entry_storage_and_log_growth),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

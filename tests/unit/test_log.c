/* test_log.c: unit tests of src/lib/wk_log.c: a record whose level is off is never built
 * (wk_log_json and wk_log do not evaluate their arguments), one whose level is on is
 * written as one JSON line on stderr. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lib/wk_log.h"

static int built; /* how many times a record's arguments were evaluated */

static json_t *fields(void) {
  built++;
  return json_pack("{s:i}", "n", built);
}

static int counted(void) { return ++built; }

/* Runs `fn` with stderr going to a temporary file; returns what was written. */
static char *capture(void (*fn)(void)) {
  char path[] = "/tmp/wk-test-log-XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  unlink(path);
  fflush(stderr);
  int saved = dup(STDERR_FILENO);
  dup2(fd, STDERR_FILENO);
  fn();
  dup2(saved, STDERR_FILENO);
  close(saved);
  off_t n = lseek(fd, 0, SEEK_END);
  char *text = calloc(1, (size_t)n + 1);
  assert_int_equal(pread(fd, text, (size_t)n, 0), n);
  close(fd);
  return text;
}

static void log_below_warn(void) {
  wk_log_json(WK_LOG_INFO, "quiet_json", fields());
  wk_log(WK_LOG_DEBUG, "quiet_msg", "%d", counted());
}

static void test_arguments_not_evaluated_when_the_level_is_off(void **state) {
  (void)state;
  wk_log_set_level(WK_LOG_WARN);
  built = 0;
  char *out = capture(log_below_warn);
  assert_int_equal(built, 0); /* neither json_pack nor the format arguments ran */
  assert_string_equal(out, "");
  free(out);
  assert_false(wk_log_enabled(WK_LOG_INFO));
  assert_true(wk_log_enabled(WK_LOG_WARN));
  wk_log_set_level(WK_LOG_INFO);
}

static void log_at_warn(void) {
  wk_log_json(WK_LOG_WARN, "loud_json", fields());
  wk_log(WK_LOG_ERROR, "loud_msg", "value %d", counted());
}

static void test_records_written_when_the_level_is_on(void **state) {
  (void)state;
  wk_log_set_level(WK_LOG_INFO);
  built = 0;
  char *out = capture(log_at_warn);
  assert_int_equal(built, 2);
  assert_non_null(strstr(out, "\"level\":\"warn\",\"event\":\"loud_json\",\"n\":1}\n"));
  assert_non_null(strstr(out, "\"level\":\"error\",\"event\":\"loud_msg\",\"msg\":\"value 2\"}\n"));
  free(out);
}

/* A level expression is evaluated once, and the macro is one statement (if / else). */
static void test_macro_is_one_statement(void **state) {
  (void)state;
  wk_log_set_level(WK_LOG_ERROR);
  int level_reads = 0;
  built = 0;
  if (built == 0) wk_log((level_reads++, WK_LOG_INFO), "x", "%d", counted());
  else built = 100;
  assert_int_equal(level_reads, 1);
  assert_int_equal(built, 0);
  wk_log_set_level(WK_LOG_INFO);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_arguments_not_evaluated_when_the_level_is_off),
      cmocka_unit_test(test_records_written_when_the_level_is_on),
      cmocka_unit_test(test_macro_is_one_statement),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

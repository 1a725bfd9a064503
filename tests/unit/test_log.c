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

/* Sends stderr to a new temporary file: returns its descriptor; *saved keeps the
 * real stderr for end_redirect. */
static int redirect_stderr(int *saved) {
  char path[] = "/tmp/wk-test-log-XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  unlink(path);
  fflush(stderr);
  *saved = dup(STDERR_FILENO);
  dup2(fd, STDERR_FILENO);
  return fd;
}

/* Puts stderr back and returns what the file holds (NUL-terminated; closes fd). */
static char *end_redirect(int fd, int saved) {
  dup2(saved, STDERR_FILENO);
  close(saved);
  off_t n = lseek(fd, 0, SEEK_END);
  char *text = calloc(1, (size_t)n + 1);
  assert_int_equal(pread(fd, text, (size_t)n, 0), n);
  close(fd);
  return text;
}

/* Runs `fn` with stderr going to a temporary file; returns what was written. */
static char *capture(void (*fn)(void)) {
  int saved;
  int fd = redirect_stderr(&saved);
  fn();
  return end_redirect(fd, saved);
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

static void log_objects(void) {
  const char members[] = "{\"k\":\"v\",\"n\":{\"m\":1}}";
  wk_log_object_write(WK_LOG_INFO, "with_members", members, sizeof members - 1);
  wk_log_object_write(WK_LOG_INFO, "empty", "{}", 2);
}

/* An object's text is written after the head, its members in the line's object. */
static void test_object_text_written_as_members(void **state) {
  (void)state;
  char *out = capture(log_objects);
  assert_non_null(
      strstr(out, "\"level\":\"info\",\"event\":\"with_members\",\"k\":\"v\",\"n\":{\"m\":1}}\n"));
  assert_non_null(strstr(out, "\"level\":\"info\",\"event\":\"empty\"}\n"));
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

/* Lines held by a thread (wk_log_hold) reach stderr only at wk_log_flush, whole, in
 * order, with the same bytes as lines written at once; past 64 KiB held they go at
 * once; holding off writes what is held. A record without fields is a whole object. */
static size_t stderr_bytes(int fd) { return (size_t)lseek(fd, 0, SEEK_END); }

static void test_held_lines_written_at_flush(void **state) {
  (void)state;
  int saved;
  int fd = redirect_stderr(&saved);
  wk_log_json_write(WK_LOG_INFO, "direct", json_pack("{s:s}", "k", "v"));
  size_t direct = stderr_bytes(fd);
  wk_log_hold(true);
  wk_log_json_write(WK_LOG_INFO, "held", json_pack("{s:s}", "k", "v"));
  wk_log_json_write(WK_LOG_WARN, "bare", NULL);
  wk_log_json_write(WK_LOG_WARN, "empty", json_object());
  size_t before_flush = stderr_bytes(fd);
  wk_log_flush();
  size_t after_flush = stderr_bytes(fd);
  wk_log_flush(); /* nothing held: nothing written */
  size_t again = stderr_bytes(fd);
  /* 64 KiB of lines: written without a flush */
  char big[1024];
  memset(big, 'x', sizeof big - 1);
  big[sizeof big - 1] = '\0';
  for (int i = 0; i < 80; i++) wk_log_json_write(WK_LOG_INFO, "big", json_pack("{s:s}", "b", big));
  size_t past_bound = stderr_bytes(fd);
  wk_log_json_write(WK_LOG_INFO, "last", json_pack("{s:i}", "n", 7));
  wk_log_hold(false); /* writes it */
  size_t end = stderr_bytes(fd);
  char *text = end_redirect(fd, saved);

  assert_true(direct > 0);
  assert_int_equal(before_flush, direct); /* held */
  assert_true(after_flush > before_flush);
  assert_int_equal(again, after_flush);
  assert_true(past_bound >= after_flush + (64u << 10));
  assert_true(end > past_bound);
  /* the same bytes as a line written at once, but the event */
  const char *d = strstr(text, "\"level\":\"info\",\"event\":\"direct\",\"k\":\"v\"}\n");
  const char *h = strstr(text, "\"level\":\"info\",\"event\":\"held\",\"k\":\"v\"}\n");
  assert_non_null(d);
  assert_non_null(h);
  assert_true(strncmp(text, "{\"ts\":\"", 7) == 0);
  assert_non_null(strstr(text, "\"level\":\"warn\",\"event\":\"bare\"}\n"));
  assert_non_null(strstr(text, "\"level\":\"warn\",\"event\":\"empty\"}\n"));
  assert_non_null(strstr(text, "\"event\":\"last\",\"n\":7}\n"));
  /* every line whole: 1 + 3 + 80 + 1 lines, each a JSON object */
  size_t lines = 0;
  for (char *line = text, *nl; (nl = strchr(line, '\n')) != NULL; line = nl + 1) {
    json_error_t e;
    json_t *j = json_loadb(line, (size_t)(nl - line), 0, &e);
    assert_non_null(j);
    assert_true(json_is_string(json_object_get(j, "ts")));
    json_decref(j);
    lines++;
  }
  assert_int_equal(lines, 85);
  free(text);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_arguments_not_evaluated_when_the_level_is_off),
      cmocka_unit_test(test_records_written_when_the_level_is_on),
      cmocka_unit_test(test_macro_is_one_statement),
      cmocka_unit_test(test_object_text_written_as_members),
      cmocka_unit_test(test_held_lines_written_at_flush),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

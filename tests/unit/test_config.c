/* Unit tests of the settings table and its sources (app/wk_config_*.c): the table covers
 * wk_app_config, defaults are valid, the YAML file (every error kind with its line),
 * WORKER_<NAME> overrides, flags, precedence, and every validation rule. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "app/wk_config.h"
#include "app/wk_executor_user.h"

static char tmp_dir[256];
static char code_dir[300];
static char err[16384];

/* ---- helpers -------------------------------------------------------------------------- */

static int count_lines(const char *s) {
  int n = 0;
  for (; *s; s++) n += *s == '\n';
  return n;
}

#define assert_has(text, needle)                                                  \
  do {                                                                            \
    if (!strstr((text), (needle))) fail_msg("'%s' lacks '%s'", (text), (needle)); \
  } while (0)

/* A NULL-terminated array of writable copies (argv, envp), valid until 16 more calls
 * (or free_lists). */
static char *pool[16][40];
static int pool_next;

static void free_list(char **l) {
  for (int i = 0; l[i]; i++) {
    free(l[i]);
    l[i] = NULL;
  }
}

static void free_lists(void) {
  for (int k = 0; k < 16; k++) free_list(pool[k]);
}

static char **list(const char *first, ...) {
  char **out = pool[pool_next++ % 16];
  free_list(out);
  va_list ap;
  va_start(ap, first);
  int n = 0;
  for (const char *s = first; s && n < 39; s = va_arg(ap, const char *)) out[n++] = strdup(s);
  va_end(ap);
  out[n] = NULL;
  return out;
}

static int count_of(char **a) {
  int n = 0;
  while (a[n]) n++;
  return n;
}

/* Writes `text` to a file in the temp dir; returns its path (static buffer per call). */
static const char *write_file(const char *name, const char *text) {
  static char paths[8][400];
  static int next;
  char *p = paths[next++ % 8];
  snprintf(p, 400, "%s/%s", tmp_dir, name);
  FILE *f = fopen(p, "w");
  assert_non_null(f);
  fputs(text, f);
  fclose(f);
  return p;
}

static const wk_config_source *source_of(const wk_config_sources *s, const char *name) {
  size_t i = 0;
  assert_non_null(wk_config_find(name, &i));
  return &s->item[i];
}

/* A config with defaults and an existing code_root: valid. */
static void valid_config(wk_app_config *c, wk_config_sources *s) {
  wk_config_defaults(c, s);
  snprintf(c->code_root, sizeof c->code_root, "%s", code_dir);
}

/* Loads `yaml` as a file; returns the number of problems, err holds the lines. */
static int load_yaml(wk_app_config *c, wk_config_sources *s, const char *yaml) {
  wk_config_defaults(c, s);
  const char *path = write_file("w.yaml", yaml);
  return wk_config_load_file(c, path, s, err, sizeof err);
}

/* Expects exactly one problem, at w.yaml:LINE, containing `needle`. */
static void expect_file_error(const char *yaml, int line, const char *needle) {
  wk_app_config c;
  wk_config_sources s;
  int n = load_yaml(&c, &s, yaml);
  if (n != 1) fail_msg("expected 1 problem for:\n%s\ngot %d:\n%s", yaml, n, err);
  char where[64];
  snprintf(where, sizeof where, "w.yaml:%d: ", line);
  assert_has(err, where);
  assert_has(err, needle);
  assert_int_equal(count_lines(err), 1);
}

/* ---- the table -------------------------------------------------------------------------- */

static void test_table_covers_every_field(void **state) {
  (void)state;
  int n = wk_config_check_table(err, sizeof err);
  if (n != 0) fail_msg("%s", err);
  assert_true(wk_config_count() >= 30);
  assert_null(wk_config_item_at(wk_config_count()));
  size_t i = 99;
  const wk_config_item *it = wk_config_find("task_slots", &i);
  assert_non_null(it);
  assert_ptr_equal(it, wk_config_item_at(i));
  assert_null(wk_config_find("task_slot", NULL));
}

static void test_defaults_are_valid_and_marked_default(void **state) {
  (void)state;
  wk_app_config c;
  wk_config_sources s;
  valid_config(&c, &s);
  int n = wk_config_validate(&c, err, sizeof err);
  if (n != 0) fail_msg("%s", err);
  assert_string_equal(c.listen_addr, "127.0.0.1:7070");
  assert_int_equal(c.task_slots, 16);
  assert_int_equal(c.executors, 2);
  assert_int_equal(c.executors_max, 4);
  assert_int_equal(c.max_message_bytes, 4u << 20);
  assert_int_equal(c.max_retained_bytes, 256u << 20);
  assert_int_equal(c.default_slot_ttl_ms, 30000);
  assert_int_equal(c.executor_rlimit_nofile, 1024);
  assert_string_equal(c.log_level, "info");
  assert_string_equal(c.scratch_root, "");
  for (size_t i = 0; i < wk_config_count(); i++) {
    assert_int_equal(s.item[i].origin, WK_CONFIG_FROM_DEFAULT);
    assert_string_equal(s.item[i].where, "default");
  }
}

/* ---- values ------------------------------------------------------------------------------- */

static void expect_parse(const char *name, const char *text, const char *want_value) {
  wk_app_config c;
  wk_config_defaults(&c, NULL);
  const wk_config_item *it = wk_config_find(name, NULL);
  assert_non_null(it);
  char msg[256];
  if (wk_config_parse_value(it, text, (char *)&c + it->offset, msg, sizeof msg) != 0) {
    fail_msg("%s = '%s': %s", name, text, msg);
  }
  char buf[1100];
  assert_string_equal(wk_config_format_value(&c, it, buf, sizeof buf), want_value);
}

static void expect_parse_error(const char *name, const char *text, const char *needle) {
  wk_app_config c;
  wk_config_defaults(&c, NULL);
  const wk_config_item *it = wk_config_find(name, NULL);
  assert_non_null(it);
  char msg[256] = "";
  assert_int_equal(wk_config_parse_value(it, text, (char *)&c + it->offset, msg, sizeof msg), -1);
  assert_has(msg, needle);
}

static void test_values_parse_by_type(void **state) {
  (void)state;
  expect_parse("task_slots", "32", "32");
  expect_parse("task_slots", "4294967295", "4294967295");
  expect_parse_error("task_slots", "4294967296", "too large (at most 4294967295)");
  expect_parse_error("task_slots", "-1", "expected a whole number (not negative), got '-1'");
  expect_parse_error("task_slots", "many", "expected a whole number, got 'many'");
  expect_parse_error("task_slots", "", "expected a whole number, got ''");
  expect_parse_error("task_slots", " 3", "expected a whole number");
  expect_parse_error("task_slots", "3k", "expected a whole number");
  expect_parse("max_calls_per_executor", "18446744073709551615", "18446744073709551615");
  expect_parse_error("max_calls_per_executor", "18446744073709551616", "too large");
  expect_parse("drain_timeout_ms", "1500", "1500");
  expect_parse("drain_timeout_ms", "250ms", "250");
  expect_parse("drain_timeout_ms", "30s", "30000");
  expect_parse("drain_timeout_ms", "5m", "300000");
  expect_parse("drain_timeout_ms", "1h", "3600000");
  expect_parse("drain_timeout_ms", "-5", "-5"); /* the range check says why */
  expect_parse_error("drain_timeout_ms", "30 s", "expected milliseconds");
  expect_parse_error("drain_timeout_ms", "1d", "expected milliseconds");
  expect_parse_error("drain_timeout_ms", "99999999999999999999", "too large");
  expect_parse("max_message_bytes", "8MiB", "8388608");
  expect_parse("max_message_bytes", "64KiB", "65536");
  expect_parse("max_message_bytes", "1GiB", "1073741824");
  expect_parse("max_message_bytes", "2048", "2048");
  expect_parse("max_retained_bytes", "1TiB", "1099511627776");
  expect_parse_error("max_message_bytes", "8MB", "expected a byte count");
  expect_parse_error("max_message_bytes", "-1", "expected a byte count");
  expect_parse("log_level", "debug", "debug");
  expect_parse_error("log_level", "verbose",
                     "expected one of debug, info, warn, error, got 'verbose'");
  expect_parse_error("log_level", "INFO", "expected one of");
  expect_parse("listen_addr", "0.0.0.0:9", "0.0.0.0:9");
  expect_parse("scratch_root", "", "");
  char longer[300];
  memset(longer, 'a', sizeof longer - 1);
  longer[sizeof longer - 1] = '\0';
  expect_parse_error("listen_addr", longer, "longer than 255 bytes");
}

static void test_bool_values(void **state) {
  (void)state;
  /* no setting is a bool yet: a row of our own */
  wk_config_item it = {
      .name = "flag", .type = WK_CONFIG_BOOL, .size = sizeof(bool), .def = "false"};
  bool b = false;
  char msg[128];
  const char *yes[] = {"true", "TRUE", "yes", "on", "1"};
  const char *no[] = {"false", "No", "off", "0"};
  for (size_t i = 0; i < 5; i++) {
    b = false;
    assert_int_equal(wk_config_parse_value(&it, yes[i], &b, msg, sizeof msg), 0);
    assert_true(b);
  }
  for (size_t i = 0; i < 4; i++) {
    b = true;
    assert_int_equal(wk_config_parse_value(&it, no[i], &b, msg, sizeof msg), 0);
    assert_false(b);
  }
  assert_int_equal(wk_config_parse_value(&it, "maybe", &b, msg, sizeof msg), -1);
  assert_has(msg, "expected true or false, got 'maybe'");
}

/* ---- the file ------------------------------------------------------------------------------- */

static void test_file_sets_values_and_sources(void **state) {
  (void)state;
  wk_app_config c;
  wk_config_sources s;
  int n = load_yaml(&c, &s,
                    "# worker settings\n"
                    "task_slots: 32\n"
                    "listen_addr: \"0.0.0.0:9090\"\n"
                    "\n"
                    "max_message_bytes: 8MiB   # a comment\n"
                    "drain_timeout_ms: 45s\n"
                    "log_level: 'debug'\n"
                    "scratch_root:\n"
                    "python: /usr/bin/python3\n");
  if (n != 0) fail_msg("%s", err);
  assert_int_equal(c.task_slots, 32);
  assert_string_equal(c.listen_addr, "0.0.0.0:9090");
  assert_int_equal(c.max_message_bytes, 8u << 20);
  assert_int_equal(c.drain_timeout_ms, 45000);
  assert_string_equal(c.log_level, "debug");
  assert_string_equal(c.scratch_root, "");
  assert_int_equal(source_of(&s, "task_slots")->origin, WK_CONFIG_FROM_FILE);
  assert_has(source_of(&s, "task_slots")->where, "w.yaml:2");
  assert_has(source_of(&s, "listen_addr")->where, "w.yaml:3");
  assert_has(source_of(&s, "max_message_bytes")->where, "w.yaml:5");
  assert_has(source_of(&s, "log_level")->where, "w.yaml:7");
  assert_int_equal(source_of(&s, "executors")->origin, WK_CONFIG_FROM_DEFAULT);
}

static void test_file_empty_or_comments_only_is_fine(void **state) {
  (void)state;
  wk_app_config c;
  wk_config_sources s;
  assert_int_equal(load_yaml(&c, &s, ""), 0);
  assert_int_equal(load_yaml(&c, &s, "# nothing here\n"), 0);
  assert_int_equal(load_yaml(&c, &s, "---\n"), 0);
  assert_int_equal(load_yaml(&c, &s, "{}\n"), 0);
  assert_int_equal(c.task_slots, 16);
}

static void test_file_every_error_kind_with_its_line(void **state) {
  (void)state;
  expect_file_error("task_slots: 4\ntask_slot: 32\n", 2,
                    "unknown setting 'task_slot' (did you mean task_slots?)");
  expect_file_error("task-slots: 4\n", 1,
                    "unknown setting 'task-slots' (did you mean task_slots?)");
  expect_file_error("\n\nretention_ms: 5\n", 3,
                    "unknown setting 'retention_ms' (did you mean result_retention_ms?)");
  expect_file_error("colour: blue\n", 1, "unknown setting 'colour'");
  expect_file_error("task_slots: many\n", 1, "task_slots: expected a whole number, got 'many'");
  expect_file_error("a: 1\n", 1, "unknown setting 'a'");
  expect_file_error("task_slots: \"16\"\n", 1,
                    "task_slots: expected a whole number, got the quoted string \"16\"");
  expect_file_error("task_slots:\n  - 1\n  - 2\n", 2,
                    "task_slots: expected a whole number, got a list");
  expect_file_error("executors: 2\ntask_slots: {a: 1}\n", 2,
                    "task_slots: expected a whole number, got a mapping");
  expect_file_error("task_slots:\n", 1, "task_slots: expected a whole number, got no value");
  expect_file_error("drain_timeout_ms: 5 minutes\n", 1, "drain_timeout_ms: expected milliseconds");
  expect_file_error("log_level: loud\n", 1, "log_level: expected one of debug, info, warn, error");
  expect_file_error("task_slots: 4\nexecutors: 2\ntask_slots: 8\n", 3,
                    "duplicate setting 'task_slots' (first set on line 1)");
  expect_file_error("- task_slots\n- executors\n", 1,
                    "the file must be a mapping of setting: value, got a list");
  expect_file_error("just words\n", 1,
                    "the file must be a mapping of setting: value, got a single value");
  expect_file_error("task_slots: 4\nexecutors: [1\n", 3,
                    "YAML syntax error: did not find expected ',' "
                    "or ']' while parsing a flow sequence (started on line 2)");
  expect_file_error("task_slots: 4\n  executors: 2\n", 2, "YAML syntax error");
  expect_file_error("task_slots: 4\n---\nexecutors: 2\n", 2, "only one YAML document");
  /* a file with a syntax error is reported by that line alone and not applied at all */
  wk_app_config c;
  assert_int_equal(load_yaml(&c, NULL, "task_slots: 4\nexecutors: [1\n"), 1);
  assert_int_equal(c.task_slots, 16);
  expect_file_error("max_message_bytes: 4MB\n", 1, "max_message_bytes: expected a byte count");
}

static void test_file_alias_value_is_an_error(void **state) {
  (void)state;
  wk_app_config c;
  wk_config_sources s;
  int n = load_yaml(&c, &s, "executors: &x 4\ntask_slots: *x\n");
  assert_int_equal(n, 1);
  assert_has(err, "w.yaml:2: task_slots: expected a whole number, got an alias");
  assert_int_equal(c.executors, 4);
}

static void test_file_reports_every_problem_and_applies_the_rest(void **state) {
  (void)state;
  wk_app_config c;
  wk_config_sources s;
  int n = load_yaml(&c, &s,
                    "task_slot: 32\n"        /* 1: unknown */
                    "executors: 3\n"         /* 2: fine */
                    "pipeline_depth: deep\n" /* 3: type */
                    "log_level: debug\n"     /* 4: fine */
                    "executors: 5\n");       /* 5: duplicate */
  assert_int_equal(n, 3);
  assert_int_equal(count_lines(err), 3);
  assert_has(err, "w.yaml:1: unknown setting 'task_slot'");
  assert_has(err, "w.yaml:3: pipeline_depth: expected a whole number, got 'deep'");
  assert_has(err, "w.yaml:5: duplicate setting 'executors' (first set on line 2)");
  assert_int_equal(c.executors, 3);
  assert_string_equal(c.log_level, "debug");
}

static void test_file_missing_or_unreadable(void **state) {
  (void)state;
  wk_app_config c;
  wk_config_defaults(&c, NULL);
  char path[400];
  snprintf(path, sizeof path, "%s/no-such.yaml", tmp_dir);
  assert_int_equal(wk_config_load_file(&c, path, NULL, err, sizeof err), 1);
  assert_has(err, "no-such.yaml: cannot read: No such file or directory");
  assert_int_equal(wk_config_load_file(&c, tmp_dir, NULL, err, sizeof err), 1);
  assert_has(err, "cannot read: Is a directory");
}

/* ---- the environment ------------------------------------------------------------------------- */

static void test_env_overrides(void **state) {
  (void)state;
  wk_app_config c;
  wk_config_sources s;
  wk_config_defaults(&c, &s);
  char **envp = list("PATH=/usr/bin", "WORKER_TASK_SLOTS=64", "WORKER_LOG_LEVEL=warn",
                     "WORKER_MAX_MESSAGE_BYTES=16MiB", "WORKER_CONFIG=/nowhere.yaml",
                     "WORKER_SCRATCH_ROOT=", "XWORKER_EXECUTORS=9", NULL);
  int n = wk_config_apply_env(&c, envp, &s, err, sizeof err);
  if (n != 0) fail_msg("%s", err);
  assert_string_equal(err, "");
  assert_int_equal(c.task_slots, 64);
  assert_string_equal(c.log_level, "warn");
  assert_int_equal(c.max_message_bytes, 16u << 20);
  assert_int_equal(c.executors, 2);
  assert_int_equal(source_of(&s, "task_slots")->origin, WK_CONFIG_FROM_ENV);
  assert_string_equal(source_of(&s, "task_slots")->where, "WORKER_TASK_SLOTS");
  assert_string_equal(source_of(&s, "scratch_root")->where, "WORKER_SCRATCH_ROOT");
}

static void test_env_bad_values_name_the_variable(void **state) {
  (void)state;
  wk_app_config c;
  wk_config_sources s;
  wk_config_defaults(&c, &s);
  char **envp =
      list("WORKER_TASK_SLOTS=lots", "WORKER_DRAIN_TIMEOUT_MS=soon", "WORKER_EXECUTORS=3", NULL);
  int n = wk_config_apply_env(&c, envp, &s, err, sizeof err);
  assert_int_equal(n, 2);
  assert_int_equal(count_lines(err), 2);
  assert_has(err, "WORKER_TASK_SLOTS: expected a whole number, got 'lots'\n");
  assert_has(err, "WORKER_DRAIN_TIMEOUT_MS: expected milliseconds");
  assert_int_equal(c.task_slots, 16);
  assert_int_equal(c.executors, 3);
}

static void test_env_unknown_names_warn_only(void **state) {
  (void)state;
  wk_app_config c;
  wk_config_defaults(&c, NULL);
  char **envp = list("WORKER_TASK_SLOT=8", "WORKER_PORT=7070", "WORKER_task_slots=8", NULL);
  int n = wk_config_apply_env(&c, envp, NULL, err, sizeof err);
  assert_int_equal(n, 0);
  assert_has(
      err, "warning: WORKER_TASK_SLOT is not a setting; ignored (did you mean WORKER_TASK_SLOTS?)");
  assert_has(err, "warning: WORKER_PORT is not a setting; ignored\n");
  assert_has(err, "warning: WORKER_task_slots is not a setting");
  assert_int_equal(c.task_slots, 16);
}

/* ---- flags --------------------------------------------------------------------------------- */

static void test_flags_parse_with_aliases(void **state) {
  (void)state;
  static wk_config_cli cli;
  char **argv = list("worker", "--task-slots", "8", "--listen", "127.0.0.1:0",
                     "--retention-ms=1000", "--watch-grace-ms", "500", "--slot-ttl-ms", "100",
                     "--default-timeout-ms", "200", "--max-timeout-ms", "300", "--listen-addr",
                     "127.0.0.1:1", "--config", "x.yaml", "--print-config", "--json", NULL);
  int argc = count_of(argv);
  int n = wk_config_parse_cli(argc, argv, &cli, err, sizeof err);
  if (n != 0) fail_msg("%s", err);
  assert_string_equal(cli.config_path, "x.yaml");
  assert_true(cli.print_config && cli.json && !cli.markdown && !cli.help);
  wk_app_config c;
  wk_config_sources s;
  wk_config_defaults(&c, &s);
  assert_int_equal(wk_config_apply_flags(&c, &cli, &s, err, sizeof err), 0);
  assert_int_equal(c.task_slots, 8);
  assert_string_equal(c.listen_addr, "127.0.0.1:1"); /* the last one wins */
  assert_string_equal(source_of(&s, "listen_addr")->where, "--listen-addr");
  assert_int_equal(c.result_retention_ms, 1000);
  assert_string_equal(source_of(&s, "result_retention_ms")->where, "--retention-ms");
  assert_int_equal(source_of(&s, "result_retention_ms")->origin, WK_CONFIG_FROM_FLAG);
  assert_int_equal(c.watch_disconnect_grace_ms, 500);
  assert_int_equal(c.default_slot_ttl_ms, 100);
  assert_int_equal(c.default_task_timeout_ms, 200);
  assert_int_equal(c.max_task_timeout_ms, 300);
}

static void test_every_old_flag_still_works(void **state) {
  (void)state;
  static const char *const old[] = {"listen",
                                    "task-slots",
                                    "code-root",
                                    "executors",
                                    "python",
                                    "executor-script",
                                    "scratch-root",
                                    "retention-ms",
                                    "max-retained-results",
                                    "watch-grace-ms",
                                    "slot-ttl-ms",
                                    "max-slot-ttl-ms",
                                    "default-timeout-ms",
                                    "max-timeout-ms",
                                    "drain-timeout-ms",
                                    "cancel-grace-ms",
                                    "max-message-bytes",
                                    "log-level",
                                    "executors-max",
                                    "pipeline-depth",
                                    "max-calls-per-executor",
                                    "max-executor-rss-mb",
                                    "executor-idle-timeout-ms",
                                    "executor-rlimit-as-mb",
                                    "executor-rlimit-nofile",
                                    "executor-rlimit-cpu-s"};
  static wk_config_cli cli;
  for (size_t i = 0; i < sizeof old / sizeof old[0]; i++) {
    char flag[80];
    snprintf(flag, sizeof flag, "--%s", old[i]);
    char **argv = list("worker", flag, "1", NULL);
    int n = wk_config_parse_cli(3, argv, &cli, err, sizeof err);
    if (n != 0) fail_msg("%s: %s", flag, err);
    assert_int_equal(cli.n_flags, 1);
  }
  /* and every setting has its generated flag */
  for (size_t i = 0; i < wk_config_count(); i++) {
    char flag[80];
    snprintf(flag, sizeof flag, "--%s", wk_config_item_at(i)->name);
    for (char *p = flag + 2; *p; p++) *p = *p == '_' ? '-' : *p;
    char **argv = list("worker", flag, "1", NULL);
    int n = wk_config_parse_cli(3, argv, &cli, err, sizeof err);
    if (n != 0) fail_msg("%s: %s", flag, err);
    assert_int_equal(cli.flags[0].index, i);
  }
}

static void test_flag_errors(void **state) {
  (void)state;
  static wk_config_cli cli;
  char **argv = list("worker", "--task-slot", "8", "stray", "-x", "--task_slots", "1", "--json",
                     "--drain-timeout-ms", NULL);
  int argc = count_of(argv);
  int n = wk_config_parse_cli(argc, argv, &cli, err, sizeof err);
  assert_int_equal(n, 6);
  assert_int_equal(count_lines(err), 6);
  assert_has(err, "unknown flag '--task-slot' (did you mean --task-slots?)\n");
  assert_has(err, "unexpected argument 'stray'\n");
  assert_has(err, "unknown flag '-x'\n");
  assert_has(err, "unknown flag '--task_slots' (did you mean --task-slots?)\n");
  assert_has(err, "--drain-timeout-ms needs a value\n");
  assert_has(err, "--json and --markdown go with --print-config\n");

  char **argv2 = list("worker", "--task-slots", "eight", "--max-message-bytes=4MB", NULL);
  assert_int_equal(wk_config_parse_cli(3 + 1, argv2, &cli, err, sizeof err), 0);
  wk_app_config c;
  wk_config_defaults(&c, NULL);
  assert_int_equal(wk_config_apply_flags(&c, &cli, NULL, err, sizeof err), 2);
  assert_has(err, "--task-slots: expected a whole number, got 'eight'\n");
  assert_has(err, "--max-message-bytes: expected a byte count");

  char **argv3 = list("worker", "-h", NULL);
  assert_int_equal(wk_config_parse_cli(2, argv3, &cli, err, sizeof err), 0);
  assert_true(cli.help);
}

/* ---- precedence: defaults < file < env < flag ------------------------------------------------- */

static void test_precedence_file_env_flag(void **state) {
  (void)state;
  const char *path = write_file("prec.yaml", "task_slots: 10\nexecutors: 3\npipeline_depth: 5\n");
  char config_env[500];
  snprintf(config_env, sizeof config_env, "WORKER_CONFIG=%s", path);
  static wk_config_cli cli;
  wk_app_config c;
  wk_config_sources s;

  /* file only, named by WORKER_CONFIG */
  char **env0 = list(config_env, NULL);
  char **argv0 = list("worker", NULL);
  assert_int_equal(wk_config_parse_cli(1, argv0, &cli, err, sizeof err), 0);
  assert_int_equal(wk_config_load(&c, &s, &cli, env0, err, sizeof err), 0);
  assert_int_equal(c.task_slots, 10);
  assert_int_equal(source_of(&s, "task_slots")->origin, WK_CONFIG_FROM_FILE);
  assert_has(source_of(&s, "task_slots")->where, "prec.yaml:1");

  /* env beats file */
  char **env1 = list(config_env, "WORKER_TASK_SLOTS=20", "WORKER_EXECUTORS=4", NULL);
  assert_int_equal(wk_config_load(&c, &s, &cli, env1, err, sizeof err), 0);
  assert_int_equal(c.task_slots, 20);
  assert_string_equal(source_of(&s, "task_slots")->where, "WORKER_TASK_SLOTS");
  assert_int_equal(c.pipeline_depth, 5);

  /* flag beats env; --config beats WORKER_CONFIG */
  const char *other = write_file("other.yaml", "pipeline_depth: 7\n");
  char **argv2 = list("worker", "--task-slots", "30", "--config", other, NULL);
  assert_int_equal(wk_config_parse_cli(5, argv2, &cli, err, sizeof err), 0);
  assert_int_equal(wk_config_load(&c, &s, &cli, env1, err, sizeof err), 0);
  assert_int_equal(c.task_slots, 30);
  assert_int_equal(source_of(&s, "task_slots")->origin, WK_CONFIG_FROM_FLAG);
  assert_string_equal(source_of(&s, "task_slots")->where, "--task-slots");
  assert_int_equal(c.executors, 4);
  assert_int_equal(source_of(&s, "executors")->origin, WK_CONFIG_FROM_ENV);
  assert_int_equal(c.pipeline_depth, 7);
  assert_has(source_of(&s, "pipeline_depth")->where, "other.yaml:1");
  assert_int_equal(source_of(&s, "log_level")->origin, WK_CONFIG_FROM_DEFAULT);

  /* executors_max left at its default follows a larger executors; set, it is checked */
  char **argv4 = list("worker", "--executors", "8", NULL);
  char **env4 = list(NULL);
  assert_int_equal(wk_config_parse_cli(3, argv4, &cli, err, sizeof err), 0);
  assert_int_equal(wk_config_load(&c, &s, &cli, env4, err, sizeof err), 0);
  assert_int_equal(c.executors_max, 8);
  assert_int_equal(source_of(&s, "executors_max")->origin, WK_CONFIG_FROM_DEFAULT);
  assert_string_equal(source_of(&s, "executors_max")->where, "raised to executors");
  snprintf(c.code_root, sizeof c.code_root, "%s", code_dir);
  assert_int_equal(wk_config_validate(&c, err, sizeof err), 0);
  char **argv5 = list("worker", "--executors", "8", "--executors-max", "6", NULL);
  assert_int_equal(wk_config_parse_cli(5, argv5, &cli, err, sizeof err), 0);
  assert_int_equal(wk_config_load(&c, NULL, &cli, env4, err, sizeof err), 0);
  assert_int_equal(c.executors_max, 6);
  snprintf(c.code_root, sizeof c.code_root, "%s", code_dir);
  assert_int_equal(wk_config_validate(&c, err, sizeof err), 1);
  assert_has(err, "executors_max (6) must be 0 or at least executors (8)");

  /* problems from every source, all reported */
  const char *bad = write_file("bad.yaml", "task_slots: x\n");
  char **env2 = list("WORKER_EXECUTORS=y", NULL);
  char **argv3 = list("worker", "--pipeline-depth", "z", "--config", bad, NULL);
  assert_int_equal(wk_config_parse_cli(5, argv3, &cli, err, sizeof err), 0);
  assert_int_equal(wk_config_load(&c, &s, &cli, env2, err, sizeof err), 3);
  assert_has(err, "bad.yaml:1: task_slots:");
  assert_has(err, "WORKER_EXECUTORS:");
  assert_has(err, "--pipeline-depth:");
}

/* ---- validation ---------------------------------------------------------------------------- */

/* Expects exactly one problem containing `needle`. */
static void expect_invalid(const wk_app_config *c, const char *needle) {
  int n = wk_config_validate(c, err, sizeof err);
  if (n != 1 || !strstr(err, needle))
    fail_msg("expected one problem '%s', got %d:\n%s", needle, n, err);
  assert_int_equal(count_lines(err), 1);
}

static void test_validate_ranges(void **state) {
  (void)state;
  wk_app_config c;
  valid_config(&c, NULL);
  c.task_slots = 0;
  expect_invalid(&c, "task_slots must be between 1 and 1048576, got 0");
  valid_config(&c, NULL);
  c.executors = 2000;
  c.executors_max = 0;
  expect_invalid(&c, "executors must be between 1 and 1024, got 2000");
  valid_config(&c, NULL);
  c.drain_timeout_ms = -5;
  expect_invalid(&c, "drain_timeout_ms must be between 0 and 3600000 ms, got -5");
  valid_config(&c, NULL);
  c.tick_ms = 5;
  expect_invalid(&c, "tick_ms must be between 10 and 60000 ms, got 5");
  valid_config(&c, NULL);
  c.max_message_bytes = 100;
  expect_invalid(&c, "max_message_bytes must be between 1024 and 1073741824 bytes, got 100");
  valid_config(&c, NULL);
  c.max_retained_bytes = 10;
  expect_invalid(&c, "max_retained_bytes must be between 1024");
  valid_config(&c, NULL);
  c.subcall_max_depth = 33;
  expect_invalid(&c, "subcall_max_depth must be between 0 and 32, got 33");
  valid_config(&c, NULL);
  c.log_level[0] = '\0';
  snprintf(c.log_level, sizeof c.log_level, "trace");
  expect_invalid(&c, "log_level must be one of debug, info, warn, error, got 'trace'");
  valid_config(&c, NULL);
  c.listen_addr[0] = '\0';
  expect_invalid(&c, "listen_addr must not be empty");
}

static void test_validate_cross_field_rules(void **state) {
  (void)state;
  wk_app_config c;
  valid_config(&c, NULL);
  c.default_slot_ttl_ms = 700000;
  expect_invalid(&c, "default_slot_ttl_ms (700000) must not exceed max_slot_ttl_ms (600000)");
  valid_config(&c, NULL);
  c.default_task_timeout_ms = 4000000;
  expect_invalid(&c,
                 "default_task_timeout_ms (4000000) must not exceed max_task_timeout_ms (3600000)");
  valid_config(&c, NULL);
  c.executors = 3;
  c.executors_max = 2;
  expect_invalid(&c, "executors_max (2) must be 0 or at least executors (3)");
  c.executors_max = 0;
  assert_int_equal(wk_config_validate(&c, err, sizeof err), 0);
  c.executors_max = 3;
  assert_int_equal(wk_config_validate(&c, err, sizeof err), 0);
  valid_config(&c, NULL);
  c.executor_heartbeat_timeout_ms = 2000;
  expect_invalid(
      &c, "executor_heartbeat_timeout_ms (2000) must exceed executor_heartbeat_interval_ms (2000)");
}

static void test_validate_listen_addr(void **state) {
  (void)state;
  static const char *const good[] = {"127.0.0.1:7070", "0.0.0.0:0", "localhost:65535",
                                     "[::1]:7070",     "[::]:1",    "unix:/tmp/w.sock"};
  static const struct {
    const char *addr, *why;
  } bad[] = {{"127.0.0.1", "no ':port'"},
             {":7070", "no host"},
             {"::1:7070", "an IPv6 host needs brackets"},
             {"[::1:7070", "an IPv6 host is written [::1]"},
             {"host:http", "the port must be a number"},
             {"host:", "the port must be a number"},
             {"host:70000", "at most 65535"},
             {"unix:", "unix: needs a path"}};
  wk_app_config c;
  for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
    valid_config(&c, NULL);
    snprintf(c.listen_addr, sizeof c.listen_addr, "%s", good[i]);
    if (wk_config_validate(&c, err, sizeof err) != 0) fail_msg("%s: %s", good[i], err);
  }
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    valid_config(&c, NULL);
    snprintf(c.listen_addr, sizeof c.listen_addr, "%s", bad[i].addr);
    char want[200];
    snprintf(want, sizeof want, "listen_addr must be host:port or unix:PATH, got '%s' (",
             bad[i].addr);
    expect_invalid(&c, want);
    assert_has(err, bad[i].why);
  }
  valid_config(&c, NULL);
  snprintf(c.listen_addr, sizeof c.listen_addr, "[::1:7070]:9");
  assert_int_equal(wk_config_validate(&c, err, sizeof err), 0); /* gRPC decides the rest */
}

static void test_validate_paths(void **state) {
  (void)state;
  wk_app_config c;
  const char *plain = write_file("plain.txt", "x");
  valid_config(&c, NULL);
  snprintf(c.code_root, sizeof c.code_root, "%s/missing", tmp_dir);
  expect_invalid(&c, "code_root must be an existing directory, got '");
  assert_has(err, "(No such file or directory)");
  valid_config(&c, NULL);
  snprintf(c.code_root, sizeof c.code_root, "%s", plain);
  expect_invalid(&c, "(not a directory)");
  valid_config(&c, NULL);
  snprintf(c.scratch_root, sizeof c.scratch_root, "%s/nope", tmp_dir);
  expect_invalid(&c, "scratch_root must be an existing directory");
  valid_config(&c, NULL);
  snprintf(c.scratch_root, sizeof c.scratch_root, "%s", tmp_dir);
  assert_int_equal(wk_config_validate(&c, err, sizeof err), 0);
  valid_config(&c, NULL);
  snprintf(c.python, sizeof c.python, "%s", plain);
  expect_invalid(&c, "python must be an executable file, got '");
  assert_has(err, "(Permission denied)");
  valid_config(&c, NULL);
  snprintf(c.python, sizeof c.python, "%s", tmp_dir);
  expect_invalid(&c, "(a directory)");
  valid_config(&c, NULL);
  snprintf(c.executor_script, sizeof c.executor_script, "%s/none.py", tmp_dir);
  expect_invalid(&c, "executor_script must be a readable file");
}

/* An installed program (PREFIX/bin/worker) finds PREFIX/share/worker/python only when it
 * holds worker_executor.py; anything else leaves the build-tree default. */
static void test_installed_python_dir(void **state) {
  (void)state;
  char exe[400], dir[400], want[400], out[WK_CONFIG_PATH_MAX];
  snprintf(dir, sizeof dir, "%s/prefix", tmp_dir);
  assert_int_equal(mkdir(dir, 0700), 0);
  snprintf(exe, sizeof exe, "%s/prefix/bin/worker", tmp_dir);
  snprintf(want, sizeof want, "%s/prefix/share/worker/python", tmp_dir);
  assert_int_equal(wk_config_installed_python_dir(exe, out, sizeof out), -1);
  assert_string_equal(out, "");
  const char *parts[] = {"/prefix/share", "/prefix/share/worker", "/prefix/share/worker/python"};
  for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) {
    snprintf(dir, sizeof dir, "%s%s", tmp_dir, parts[i]);
    assert_int_equal(mkdir(dir, 0700), 0);
  }
  /* the directory alone is not enough: the executor must be there */
  assert_int_equal(wk_config_installed_python_dir(exe, out, sizeof out), -1);
  write_file("prefix/share/worker/python/worker_executor.py", "# shim\n");
  assert_int_equal(wk_config_installed_python_dir(exe, out, sizeof out), 0);
  assert_string_equal(out, want);
  /* too small a buffer, a program without a directory, one at the root */
  assert_int_equal(wk_config_installed_python_dir(exe, out, 8), -1);
  assert_int_equal(wk_config_installed_python_dir("worker", out, sizeof out), -1);
  assert_int_equal(wk_config_installed_python_dir("/worker", out, sizeof out), -1);
  assert_string_equal(out, "");
}

static void test_validate_reports_all_problems_with_sources(void **state) {
  (void)state;
  wk_app_config c;
  wk_config_sources s;
  const char *path = write_file("many.yaml", "task_slots: 0\nmax_slot_ttl_ms: 1000\n");
  char code_env[400];
  snprintf(code_env, sizeof code_env, "WORKER_CODE_ROOT=%s/absent", tmp_dir);
  char **envp = list(code_env, "WORKER_LOG_LEVEL=debug", NULL);
  static wk_config_cli cli;
  char **argv = list("worker", "--listen", "nowhere", "--executors", "0", "--config", path, NULL);
  assert_int_equal(wk_config_parse_cli(7, argv, &cli, err, sizeof err), 0);
  assert_int_equal(wk_config_load(&c, &s, &cli, envp, err, sizeof err), 0);
  int n = wk_config_validate_sources(&c, &s, err, sizeof err);
  assert_int_equal(n, 5);
  assert_int_equal(count_lines(err), 5);
  assert_has(err, "task_slots must be between 1 and 1048576, got 0 (from file ");
  assert_has(err, "many.yaml:1)\n");
  assert_has(err, "executors must be between 1 and 1024, got 0 (from flag --executors)\n");
  assert_has(err,
             "default_slot_ttl_ms (30000) must not exceed max_slot_ttl_ms (1000) "
             "(default_slot_ttl_ms default, max_slot_ttl_ms from file ");
  assert_has(
      err,
      "listen_addr must be host:port or unix:PATH, got 'nowhere' (no ':port') (from flag --listen)\n");
  assert_has(err, "code_root must be an existing directory");
  assert_has(err, "(from env WORKER_CODE_ROOT)\n");
  /* the plain form: no sources */
  assert_int_equal(wk_config_validate(&c, err, sizeof err), 5);
  assert_null(strstr(err, "(from "));
  /* a small buffer truncates the text, not the count */
  char small[40];
  assert_int_equal(wk_config_validate(&c, small, sizeof small), 5);
  assert_true(strlen(small) < sizeof small);
}

/* ---- showing ------------------------------------------------------------------------------ */

static void test_print_text_json_markdown_help(void **state) {
  (void)state;
  wk_app_config c;
  wk_config_sources s;
  valid_config(&c, &s);
  char **envp = list("WORKER_TASK_SLOTS=9", NULL);
  assert_int_equal(wk_config_apply_env(&c, envp, &s, err, sizeof err), 0);
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  wk_config_print(f, &c, &s, WK_CONFIG_TEXT);
  fclose(f);
  assert_has(buf, "task_slots ");
  assert_has(buf, " 9 ");
  assert_has(buf, "env WORKER_TASK_SLOTS\n");
  assert_has(buf, "scratch_root ");
  assert_has(buf, "\"\"");
  assert_int_equal(count_lines(buf), (int)wk_config_count() + 1);
  free(buf);

  f = open_memstream(&buf, &len);
  wk_config_print(f, &c, &s, WK_CONFIG_JSON);
  fclose(f);
  json_error_t jerr;
  json_t *root = json_loads(buf, 0, &jerr);
  assert_non_null(root);
  assert_int_equal(json_object_size(root), wk_config_count());
  json_t *ts = json_object_get(root, "task_slots");
  assert_int_equal(json_integer_value(json_object_get(ts, "value")), 9);
  assert_string_equal(json_string_value(json_object_get(ts, "source")), "env");
  assert_string_equal(json_string_value(json_object_get(ts, "where")), "WORKER_TASK_SLOTS");
  assert_string_equal(
      json_string_value(json_object_get(json_object_get(root, "log_level"), "value")), "info");
  json_decref(root);
  free(buf);

  f = open_memstream(&buf, &len);
  wk_config_print_markdown(f);
  fclose(f);
  assert_int_equal(count_lines(buf), (int)wk_config_count() + 2);
  assert_has(
      buf, "| `task_slots` | `WORKER_TASK_SLOTS` | `--task-slots` | uint | `16` | 1 .. 1048576 |");
  assert_has(buf, "`--listen-addr` (or `--listen`)");
  free(buf);

  f = open_memstream(&buf, &len);
  wk_config_print_help(f, "worker", NULL);
  fclose(f);
  for (size_t i = 0; i < wk_config_count(); i++) {
    char flag[80];
    snprintf(flag, sizeof flag, "--%s ", wk_config_item_at(i)->name);
    for (char *p = flag + 2; *p; p++) *p = *p == '_' ? '-' : *p;
    assert_has(buf, flag);
    assert_has(buf, wk_config_item_at(i)->help);
  }
  assert_has(buf, "also --retention-ms");
  free(buf);
}

/* ---- setup ------------------------------------------------------------------------------- */

/* ---- secrets ------------------------------------------------------------------------------- */

/* Loads with the environment `envp` only; returns the problems (err holds them). */
static int load_env(wk_app_config *c, wk_config_sources *s, char **envp) {
  return wk_config_load(c, s, NULL, envp, err, sizeof err);
}

static void test_auth_token_file(void **state) {
  (void)state;
  wk_app_config c;
  wk_config_sources s;
  char var[600];
  /* one trailing newline (or CRLF) stripped, the rest kept */
  snprintf(var, sizeof var, "WORKER_AUTH_TOKEN_FILE=%s", write_file("tok1", "abc.DEF-123\n"));
  assert_int_equal(load_env(&c, &s, list(var, NULL)), 0);
  assert_string_equal(c.auth_token, "abc.DEF-123");
  assert_int_equal(source_of(&s, "auth_token")->origin, WK_CONFIG_FROM_ENV);
  assert_has(source_of(&s, "auth_token")->where, "read from");
  snprintf(var, sizeof var, "WORKER_AUTH_TOKEN_FILE=%s", write_file("tok2", "xyz\r\n"));
  assert_int_equal(load_env(&c, &s, list(var, NULL)), 0);
  assert_string_equal(c.auth_token, "xyz");
  snprintf(var, sizeof var, "WORKER_AUTH_TOKEN_FILE=%s", write_file("tok3", "no-newline"));
  assert_int_equal(load_env(&c, &s, list(var, NULL)), 0);
  assert_string_equal(c.auth_token, "no-newline");
  /* with auth_token: one problem naming both, whatever the sources */
  snprintf(var, sizeof var, "WORKER_AUTH_TOKEN_FILE=%s", write_file("tok4", "a\n"));
  assert_int_equal(load_env(&c, &s, list(var, "WORKER_AUTH_TOKEN=b", NULL)), 1);
  assert_has(err, "auth_token (env WORKER_AUTH_TOKEN) and auth_token_file");
  /* missing, empty, two lines, too long: a problem naming the file, never the content */
  assert_int_equal(load_env(&c, &s, list("WORKER_AUTH_TOKEN_FILE=/nonexistent/tok", NULL)), 1);
  assert_has(err, "auth_token_file '/nonexistent/tok': No such file");
  snprintf(var, sizeof var, "WORKER_AUTH_TOKEN_FILE=%s", write_file("tok5", "\n"));
  assert_int_equal(load_env(&c, &s, list(var, NULL)), 1);
  assert_has(err, "is empty");
  snprintf(var, sizeof var, "WORKER_AUTH_TOKEN_FILE=%s", write_file("tok6", "sekrit\nmore\n"));
  assert_int_equal(load_env(&c, &s, list(var, NULL)), 1);
  assert_has(err, "control byte");
  assert_null(strstr(err, "sekrit"));
  char big[600];
  memset(big, 'x', 520);
  big[520] = '\0';
  snprintf(var, sizeof var, "WORKER_AUTH_TOKEN_FILE=%s", write_file("tok7", big));
  assert_int_equal(load_env(&c, &s, list(var, NULL)), 1);
  assert_has(err, "more than 511 bytes");
}

static void test_scrub_secret_env(void **state) {
  (void)state;
  assert_int_equal(setenv("WORKER_AUTH_TOKEN", "tok-scrub-me", 1), 0);
  assert_int_equal(setenv("WORKER_POSTGRES_DSN", "password=pw-scrub-me", 1), 0);
  assert_int_equal(setenv("WORKER_TASK_SLOTS", "7", 1), 0);
  char *tok = getenv("WORKER_AUTH_TOKEN") - strlen("WORKER_AUTH_TOKEN=");
  size_t tok_len = strlen(tok);
  assert_int_equal(wk_config_scrub_secret_env(), 2);
  assert_null(getenv("WORKER_AUTH_TOKEN"));
  assert_null(getenv("WORKER_POSTGRES_DSN"));
  assert_string_equal(getenv("WORKER_TASK_SLOTS"), "7");            /* not a secret: left alone */
  for (size_t i = 0; i < tok_len; i++) assert_int_equal(tok[i], 0); /* wiped in place */
  for (char **e = environ; *e; e++) assert_null(strstr(*e, "scrub-me"));
  assert_int_equal(wk_config_scrub_secret_env(), 0);
  unsetenv("WORKER_TASK_SLOTS");
}

static int setup(void **state) {
  (void)state;
  snprintf(tmp_dir, sizeof tmp_dir, "%s/wk-config-XXXXXX",
           getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
  if (!mkdtemp(tmp_dir)) return -1;
  snprintf(code_dir, sizeof code_dir, "%s/code", tmp_dir);
  return mkdir(code_dir, 0700);
}

static int teardown(void **state) {
  (void)state;
  free_lists();
  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp_dir);
  return system(cmd) == 0 ? 0 : -1;
}

/* executor_user: nobody by default under root, root kept only by name, an unprivileged
 * worker keeps its own user and refuses another. */
static void test_executor_user_resolve(void **state) {
  (void)state;
  uint32_t uid = 7, gid = 7;
  assert_int_equal(wk_executor_user_resolve("", 0, &uid, &gid, err, sizeof err), 0);
  assert_int_equal(uid, 65534); /* nobody on Debian */
  assert_int_equal(gid, 65534);
  assert_int_equal(wk_executor_user_resolve("root", 0, &uid, &gid, err, sizeof err), 0);
  assert_int_equal(uid, 0); /* "no switch" */
  assert_int_equal(wk_executor_user_resolve("4242", 0, &uid, &gid, err, sizeof err), 0);
  assert_int_equal(uid, 4242); /* a uid without an account: its own number as group */
  assert_int_equal(gid, 4242);
  assert_int_equal(wk_executor_user_resolve("no-such-user-x", 0, &uid, &gid, err, sizeof err), -1);
  assert_non_null(strstr(err, "no account named 'no-such-user-x'"));
  /* not root: only the worker's own user */
  assert_int_equal(wk_executor_user_resolve("", 1000, &uid, &gid, err, sizeof err), 0);
  assert_int_equal(uid, 0);
  assert_int_equal(wk_executor_user_resolve("1000", 1000, &uid, &gid, err, sizeof err), 0);
  assert_int_equal(uid, 0);
  assert_int_equal(wk_executor_user_resolve("nobody", 1000, &uid, &gid, err, sizeof err), -1);
  assert_non_null(strstr(err, "not root"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_table_covers_every_field),
      cmocka_unit_test(test_defaults_are_valid_and_marked_default),
      cmocka_unit_test(test_values_parse_by_type),
      cmocka_unit_test(test_bool_values),
      cmocka_unit_test(test_file_sets_values_and_sources),
      cmocka_unit_test(test_file_empty_or_comments_only_is_fine),
      cmocka_unit_test(test_file_every_error_kind_with_its_line),
      cmocka_unit_test(test_file_alias_value_is_an_error),
      cmocka_unit_test(test_file_reports_every_problem_and_applies_the_rest),
      cmocka_unit_test(test_file_missing_or_unreadable),
      cmocka_unit_test(test_env_overrides),
      cmocka_unit_test(test_env_bad_values_name_the_variable),
      cmocka_unit_test(test_env_unknown_names_warn_only),
      cmocka_unit_test(test_flags_parse_with_aliases),
      cmocka_unit_test(test_every_old_flag_still_works),
      cmocka_unit_test(test_flag_errors),
      cmocka_unit_test(test_precedence_file_env_flag),
      cmocka_unit_test(test_validate_ranges),
      cmocka_unit_test(test_validate_cross_field_rules),
      cmocka_unit_test(test_validate_listen_addr),
      cmocka_unit_test(test_validate_paths),
      cmocka_unit_test(test_installed_python_dir),
      cmocka_unit_test(test_validate_reports_all_problems_with_sources),
      cmocka_unit_test(test_print_text_json_markdown_help),
      cmocka_unit_test(test_auth_token_file),
      cmocka_unit_test(test_scrub_secret_env),
      cmocka_unit_test(test_executor_user_resolve),
  };
  return cmocka_run_group_tests_name("config", tests, setup, teardown);
}

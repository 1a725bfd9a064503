/* Unit tests of Profile validation (the design's Profile.Validate, app/wk_profile.c)
 * over the Profiles the two entry points declare (cmd/worker/profile.c,
 * cmd/bundle_worker/profile.c): both pass; a Profile with an unknown deployment, an
 * unknown builder or writer name, no service, a bad registry prefix or no builder is
 * refused with one clear line per problem, and wk_main refuses it (exit 2) before it
 * reads any setting. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "app/wk_config.h"
#include "app/wk_main.h"
#include "app/wk_profile.h"
#include "cmd/bundle_worker/profile.h"
#include "cmd/worker/profile.h"

static char err[4096];

#define assert_has(text, needle)                                                  \
  do {                                                                            \
    if (!strstr((text), (needle))) fail_msg("'%s' lacks '%s'", (text), (needle)); \
  } while (0)

static int count_lines(const char *s) {
  int n = 0;
  for (; *s; s++) n += *s == '\n';
  return n;
}

/* Validates p, expecting exactly `problems` lines, one of them containing `line`. */
static void expect_refused(const wk_profile *p, int problems, const char *line) {
  int n = wk_profile_validate(p, err, sizeof err);
  if (n != problems) fail_msg("expected %d problems, got %d:\n%s", problems, n, err);
  assert_int_equal(count_lines(err), problems);
  assert_has(err, line);
}

/* ---- the two Profiles ---------------------------------------------------------------- */

/* p passes with no line written, and its deployment is named `deployment`. */
static void expect_valid(const wk_profile *p, const char *deployment) {
  memset(err, 'x', sizeof err);
  int n = wk_profile_validate(p, err, sizeof err);
  if (n != 0) fail_msg("%s", err);
  assert_string_equal(err, "");
  assert_string_equal(wk_deployment_name(p->deployment), deployment);
}

static void test_block_profile_is_valid(void **state) {
  (void)state;
  expect_valid(&wk_block_profile, "block");
}

static void test_bundle_profile_is_valid(void **state) {
  (void)state;
  expect_valid(&wk_bundle_profile, "bundle");
}

/* The bundle Profile changes built-in defaults only, and says so. */
static void test_bundle_tunes_defaults_only(void **state) {
  (void)state;
  wk_app_config cfg;
  wk_config_sources src;
  char *no_env[] = {NULL};
  char load_err[1024];
  int n = wk_config_load_tuned(&cfg, &src, NULL, no_env, wk_profile_tune, &wk_bundle_profile,
                               load_err, sizeof load_err);
  assert_int_equal(n, 0);
  assert_int_equal(cfg.executors, 4);
  assert_int_equal(cfg.executors_max, 8);
  size_t i = 0;
  assert_non_null(wk_config_find("executors", &i));
  assert_int_equal(src.item[i].origin, WK_CONFIG_FROM_DEFAULT);
  assert_string_equal(src.item[i].where, "profile");
  assert_null(wk_block_profile.tune_defaults);
  /* the Profile's registry prefix is the default, shown as the Profile's */
  assert_string_equal(cfg.registry_prefix, "/bundle-workers/");
  assert_non_null(wk_config_find("registry_prefix", &i));
  assert_string_equal(src.item[i].where, "profile");
}

/* A writer backend set for a writer the Profile does not enable is refused, naming the
 * setting, the Profile and what it enables; one the Profile enables passes. */
static void test_settings_of_writers_not_enabled_are_refused(void **state) {
  (void)state;
  wk_app_config cfg;
  wk_config_defaults(&cfg, NULL);
  snprintf(cfg.output_dir, sizeof cfg.output_dir, "/tmp");
  assert_int_equal(wk_profile_check_config(&wk_bundle_profile, &cfg, err, sizeof err), 0);
  assert_string_equal(err, "");
  snprintf(cfg.redis_addr, sizeof cfg.redis_addr, "127.0.0.1:6379");
  snprintf(cfg.postgres_dsn, sizeof cfg.postgres_dsn, "dbname=x");
  assert_int_equal(wk_profile_check_config(&wk_bundle_profile, &cfg, err, sizeof err), 2);
  assert_has(err,
             "redis_addr is set, but the bundle profile does not enable the redis writer "
             "(enabled: file)\n");
  assert_has(err, "postgres_dsn is set, but the bundle profile");
  assert_int_equal(wk_profile_check_config(&wk_block_profile, &cfg, err, sizeof err), 0);
  const char *setting = NULL;
  assert_string_equal(wk_profile_writer_setting(&cfg, "redis", &setting), "127.0.0.1:6379");
  assert_string_equal(setting, "redis_addr");
  assert_null(wk_profile_writer_setting(&cfg, "s3", &setting));
}

/* ---- what is refused ------------------------------------------------------------------ */

static void test_unknown_deployment_is_refused(void **state) {
  (void)state;
  wk_profile p = wk_block_profile;
  p.deployment = (wk_deployment)7;
  expect_refused(&p, 1, "profile: deployment must be block or bundle\n");
  assert_string_equal(wk_deployment_name(p.deployment), "unknown");
}

static void test_unknown_builder_is_refused(void **state) {
  (void)state;
  wk_profile p = wk_bundle_profile;
  p.builders[1] = "mapp";
  expect_refused(&p, 1, "profile: no call builder named 'mapp' (known: single, map, range)\n");
}

static void test_unknown_writer_is_refused(void **state) {
  (void)state;
  wk_profile p = wk_block_profile;
  p.plugins[1] = "s3";
  expect_refused(&p, 1, "profile: no writer plugin named 's3' (known: ");
  assert_has(err, "file");
}

static void test_every_problem_is_reported(void **state) {
  (void)state;
  wk_profile p = wk_block_profile;
  p.service = "";
  p.registry_prefix = "workers";
  p.plugins[0] = "nope";
  expect_refused(&p, 3, "profile: a service name is required\n");
  assert_has(err, "profile: registry_prefix must start and end with '/', got 'workers'\n");
  assert_has(err, "profile: no writer plugin named 'nope'");

  wk_profile none = wk_bundle_profile;
  memset(none.builders, 0, sizeof none.builders);
  none.registry_prefix = NULL;
  expect_refused(&none, 2, "profile: registry_prefix must start and end with '/', got ''\n");
  assert_has(err, "profile: at least one call builder must be enabled\n");
}

/* The program refuses an invalid Profile before anything else (--help included). */
static void test_wk_main_refuses_an_invalid_profile(void **state) {
  (void)state;
  wk_profile p = wk_block_profile;
  p.builders[0] = "no-such-builder";
  char prog[] = "worker", help[] = "--help";
  char *argv[] = {prog, help, NULL};
  assert_int_equal(wk_main(&p, 2, argv), 2);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_block_profile_is_valid),
      cmocka_unit_test(test_bundle_profile_is_valid),
      cmocka_unit_test(test_bundle_tunes_defaults_only),
      cmocka_unit_test(test_settings_of_writers_not_enabled_are_refused),
      cmocka_unit_test(test_unknown_deployment_is_refused),
      cmocka_unit_test(test_unknown_builder_is_refused),
      cmocka_unit_test(test_unknown_writer_is_refused),
      cmocka_unit_test(test_every_problem_is_reported),
      cmocka_unit_test(test_wk_main_refuses_an_invalid_profile),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

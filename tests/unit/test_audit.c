/* AuditGate: allow and deny lists with prefix patterns. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "app/wk_audit.h"

static void test_empty_lists_permit_everything(void **state) {
  (void)state;
  char why[200] = "";
  assert_true(wk_audit_permits(NULL, NULL, "anything", why, sizeof why));
  assert_true(wk_audit_permits("", "", "anything", why, sizeof why));
}

static void test_allow_list_and_prefixes(void **state) {
  (void)state;
  char why[200];
  assert_true(wk_audit_permits("hello, etl-*", NULL, "hello", why, sizeof why));
  assert_true(wk_audit_permits("hello, etl-*", NULL, "etl-daily", why, sizeof why));
  assert_false(wk_audit_permits("hello, etl-*", NULL, "hell", why, sizeof why));
  assert_non_null(strstr(why, "not in this worker's audit_allow"));
  assert_false(wk_audit_permits("hello", NULL, "hello2", why, sizeof why));
}

static void test_deny_wins(void **state) {
  (void)state;
  char why[200];
  assert_false(wk_audit_permits("*", "rm-*,danger", "rm-rf", why, sizeof why));
  assert_string_equal(why, "function 'rm-rf' is denied by this worker's audit_deny (rm-*)");
  assert_false(wk_audit_permits(NULL, "danger", "danger", why, sizeof why));
  assert_true(wk_audit_permits(NULL, "danger", "dangerous", why, sizeof why));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_empty_lists_permit_everything),
      cmocka_unit_test(test_allow_list_and_prefixes),
      cmocka_unit_test(test_deny_wins),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

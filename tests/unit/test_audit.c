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
  assert_true(wk_audit_permits(NULL, NULL, "anything", NULL, why, sizeof why));
  assert_true(wk_audit_permits("", "", "anything", "main:handler", why, sizeof why));
}

static void test_allow_list_and_prefixes(void **state) {
  (void)state;
  char why[200];
  assert_true(wk_audit_permits("hello, etl-*", NULL, "hello", NULL, why, sizeof why));
  assert_true(wk_audit_permits("hello, etl-*", NULL, "etl-daily", NULL, why, sizeof why));
  assert_false(wk_audit_permits("hello, etl-*", NULL, "hell", NULL, why, sizeof why));
  assert_non_null(strstr(why, "not in this worker's audit_allow"));
  assert_false(wk_audit_permits("hello", NULL, "hello2", NULL, why, sizeof why));
}

static void test_deny_wins(void **state) {
  (void)state;
  char why[200];
  assert_false(wk_audit_permits("*", "rm-*,danger", "rm-rf", NULL, why, sizeof why));
  assert_string_equal(why, "function 'rm-rf' is denied by this worker's audit_deny (rm-*)");
  assert_false(wk_audit_permits(NULL, "danger", "danger", NULL, why, sizeof why));
  assert_true(wk_audit_permits(NULL, "danger", "dangerous", NULL, why, sizeof why));
}

static void test_entry_points(void **state) {
  (void)state;
  char why[300];
  const char *deny = "etl:main:drop*, admin:*";
  assert_true(wk_audit_permits(NULL, deny, "etl", "main:handler", why, sizeof why));
  assert_false(wk_audit_permits(NULL, deny, "etl", "main:drop_all", why, sizeof why));
  assert_string_equal(why,
                      "function 'etl' (entry point main:drop_all) is denied by this worker's "
                      "audit_deny (etl:main:drop*)");
  assert_false(wk_audit_permits(NULL, deny, "admin", "tools:x", why, sizeof why));
  assert_true(wk_audit_permits(NULL, deny, "administer", "main:handler", why, sizeof why));
  /* an entry without ':' names the function, every entry point of it */
  assert_false(wk_audit_permits(NULL, "etl", "etl", "main:handler", why, sizeof why));
  /* allow one entry point of one function, every entry point of another */
  const char *allow = "etl:main:handler, hello";
  assert_true(wk_audit_permits(allow, NULL, "etl", "main:handler", why, sizeof why));
  assert_false(wk_audit_permits(allow, NULL, "etl", "main:other", why, sizeof why));
  assert_non_null(strstr(why, "(entry point main:other) is not in this worker's audit_allow"));
  assert_true(wk_audit_permits(allow, NULL, "hello", "main:anything", why, sizeof why));
  /* without an entry point only the function entries count */
  assert_false(wk_audit_permits(allow, NULL, "etl", NULL, why, sizeof why));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_empty_lists_permit_everything),
      cmocka_unit_test(test_allow_list_and_prefixes),
      cmocka_unit_test(test_deny_wins),
      cmocka_unit_test(test_entry_points),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

/* test_deploy_acl.c: deploy_allowed_clients (src/app/wk_deploy_acl.c): what parses, and
 * which peers and certificate names it lets deploy. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <string.h>

#include "app/wk_deploy_acl.h"

static wk_deploy_acl acl; /* large: not on the stack */

static void parse_ok(const char *spec) {
  char err[256] = "";
  if (wk_deploy_acl_parse(spec, &acl, err, sizeof err) != 0) fail_msg("'%s': %s", spec, err);
}

static void test_empty_allows_everyone(void **state) {
  (void)state;
  parse_ok("");
  assert_int_equal(acl.n, 0);
  assert_true(wk_deploy_acl_allows(&acl, "ipv4:10.1.2.3:5", ""));
  assert_true(wk_deploy_acl_allows(&acl, "unix:/tmp/s", ""));
  parse_ok(" , ,");
  assert_int_equal(acl.n, 0);
}

static void test_addresses_and_networks(void **state) {
  (void)state;
  parse_ok("10.0.0.0/8, 192.168.1.7 ,::1, fd00::/8,0.0.0.0/0");
  assert_int_equal(acl.n, 5);
  parse_ok("10.0.0.0/8, 192.168.1.7, ::1, fd00::/8");
  assert_true(wk_deploy_acl_allows(&acl, "ipv4:10.200.3.4:4000", ""));
  assert_true(wk_deploy_acl_allows(&acl, "ipv4:192.168.1.7:1", ""));
  assert_false(wk_deploy_acl_allows(&acl, "ipv4:192.168.1.8:1", ""));
  assert_false(wk_deploy_acl_allows(&acl, "ipv4:11.0.0.1:1", ""));
  assert_true(wk_deploy_acl_allows(&acl, "ipv6:[::1]:80", ""));
  assert_true(wk_deploy_acl_allows(&acl, "ipv6:[fd12:3456::1]:80", ""));
  assert_false(wk_deploy_acl_allows(&acl, "ipv6:[fe80::1%eth0]:80", ""));
  /* an IPv4 client over an IPv6 socket matches the IPv4 network */
  assert_true(wk_deploy_acl_allows(&acl, "ipv6:[::ffff:10.9.9.9]:80", ""));
  assert_false(wk_deploy_acl_allows(&acl, "unix:/tmp/s", ""));
  assert_false(wk_deploy_acl_allows(&acl, "garbage", ""));
  parse_ok("127.0.0.0/30");
  assert_true(wk_deploy_acl_allows(&acl, "ipv4:127.0.0.3:9", ""));
  assert_false(wk_deploy_acl_allows(&acl, "ipv4:127.0.0.4:9", ""));
}

static void test_certificate_names(void **state) {
  (void)state;
  parse_ok("deployer, ci.example.com");
  assert_true(wk_deploy_acl_allows(&acl, "ipv4:10.0.0.1:1", "client\ndeployer"));
  assert_true(wk_deploy_acl_allows(&acl, "ipv4:10.0.0.1:1", "ci.example.com"));
  assert_false(wk_deploy_acl_allows(&acl, "ipv4:10.0.0.1:1", "deployer2\nci.example"));
  assert_false(wk_deploy_acl_allows(&acl, "ipv4:10.0.0.1:1", ""));
  /* an address in the list does not match a certificate name, nor the reverse */
  parse_ok("10.0.0.1");
  assert_false(wk_deploy_acl_allows(&acl, "ipv4:10.0.0.2:1", "10.0.0.1"));
}

static void test_refusals_name_the_item(void **state) {
  (void)state;
  char err[256];
  const char *bad[] = {"10.0.0.0/33", "::1/129", "10.0.0.0/x", "10.0.0.0/", "host name", "a/b"};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    err[0] = '\0';
    assert_int_equal(wk_deploy_acl_parse(bad[i], &acl, err, sizeof err), -1);
    assert_non_null(strstr(err, "deploy_allowed_clients"));
  }
  char many[1024] = "";
  for (int i = 0; i < 65; i++) strcat(many, "n,");
  assert_int_equal(wk_deploy_acl_parse(many, &acl, err, sizeof err), -1);
  assert_non_null(strstr(err, "more than 64"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_empty_allows_everyone),
      cmocka_unit_test(test_addresses_and_networks),
      cmocka_unit_test(test_certificate_names),
      cmocka_unit_test(test_refusals_name_the_item),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

/* test_mask.c: wk_mask_credentials hides every password form libpq and Redis accept;
 * wk_mask_value hides a known secret wherever a message quotes it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <string.h>

#include "lib/wk_mask.h"

static void expect(const char *in, const char *want) {
  char out[512];
  wk_mask_credentials(in, out, sizeof out);
  if (strcmp(out, want) != 0) fail_msg("mask(%s) = %s, want %s", in, out, want);
}

static void test_keyvalue(void **state) {
  (void)state;
  expect("host=db user=w password=s3cret dbname=out", "host=db user=w password=*** dbname=out");
  expect("password = s3cret host=db", "password = *** host=db");
  expect("host=db password='s3 cr\\'et' port=5432", "host=db password=*** port=5432");
  expect("password=a\\ b host=x", "password=*** host=x");
  expect("host=db passfile=/run/pgpass", "host=db passfile=/run/pgpass");
  expect("host=db", "host=db");
  expect("", "");
}

static void test_urls(void **state) {
  (void)state;
  expect("postgresql://w:s3cret@db:5432/out?sslmode=require",
         "postgresql://w:***@db:5432/out?sslmode=require");
  expect("postgres://db/out?user=w&password=s3cret&sslmode=disable",
         "postgres://db/out?user=w&password=***&sslmode=disable");
  expect("redis://:s3cret@cache:6379/0", "redis://:***@cache:6379/0");
  expect("rediss://default:p%40ss@cache:6380", "rediss://default:***@cache:6380");
  expect("redis://s3cret@cache:6379", "redis://***@cache:6379");
  expect("postgresql://w@db/out", "postgresql://***@db/out"); /* user only: still hidden */
  expect("127.0.0.1:6379", "127.0.0.1:6379");
  expect("postgresql://db/out", "postgresql://db/out");
}

static void test_truncates_safely(void **state) {
  (void)state;
  char out[12];
  wk_mask_credentials("host=db password=s3cret", out, sizeof out);
  assert_string_equal(out, "host=db pas");
  assert_null(strstr(out, "s3cret"));
  char one[1] = {'x'};
  wk_mask_credentials("password=x", one, sizeof one);
  assert_int_equal(one[0], '\0');
}

static void test_mask_value(void **state) {
  (void)state;
  char t[] = "auth failed for s3cret: s3cret is wrong; s3cre stays";
  wk_mask_value(t, "s3cret");
  assert_string_equal(t, "auth failed for ***: *** is wrong; s3cre stays");
  char short_secret[] = "a b c";
  wk_mask_value(short_secret, "b"); /* too short to mask by value */
  assert_string_equal(short_secret, "a b c");
  wk_mask_value(short_secret, NULL);
  assert_string_equal(short_secret, "a b c");
  char whole[] = "abcd";
  wk_mask_value(whole, "abcd");
  assert_string_equal(whole, "***");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_keyvalue),
      cmocka_unit_test(test_urls),
      cmocka_unit_test(test_truncates_safely),
      cmocka_unit_test(test_mask_value),
  };
  return cmocka_run_group_tests_name("mask", tests, NULL, NULL);
}

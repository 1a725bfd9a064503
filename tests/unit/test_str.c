/* test_str.c: unit tests of src/lib/wk_str.h. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <string.h>

#include "lib/wk_str.h"

/* As snprintf(dst, size, "%s", src) writes it: cut to size - 1, always terminated. */
static void test_copy_cuts_and_terminates(void **state) {
  (void)state;
  char dst[6];
  memset(dst, 'x', sizeof dst);
  assert_int_equal(wk_str_copy(dst, sizeof dst, "abc"), 3);
  assert_string_equal(dst, "abc");
  assert_int_equal(wk_str_copy(dst, sizeof dst, "abcde"), 5);
  assert_string_equal(dst, "abcde");
  assert_int_equal(wk_str_copy(dst, sizeof dst, "abcdefgh"), 5);
  assert_string_equal(dst, "abcde");
  assert_int_equal(wk_str_copy(dst, sizeof dst, ""), 0);
  assert_string_equal(dst, "");
  assert_int_equal(wk_str_copy(dst, 1, "abc"), 0);
  assert_string_equal(dst, "");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_copy_cuts_and_terminates),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

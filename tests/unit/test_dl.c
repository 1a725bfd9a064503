/* test_dl.c: wk_dl_load fills a table of functions from a library opened on first use,
 * answers later calls from the first, and fails with a reason (leaving the table
 * empty) when the library or one of its functions is missing. libm stands in for the
 * optional libraries: every glibc system has libm.so.6. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <string.h>

#include "lib/wk_dl.h"

#define M_FNS(X) X(fabs) X(hypot)
static struct { M_FNS(WK_DL_FIELD) } m_fns;
static const char *const m_names[] = {M_FNS(WK_DL_NAME)};

static void test_loads_and_calls(void **state) {
  (void)state;
  wk_dl_lib lib = WK_DL_LIB("libm.so.6", m_names, m_fns);
  char err[256] = "";
  assert_true(wk_dl_load(&lib, err, sizeof err));
  assert_string_equal(err, "");
  assert_non_null(m_fns.fabs);
  assert_true(m_fns.fabs(-2.5) == 2.5);
  assert_true(m_fns.hypot(3.0, 4.0) == 5.0);
  assert_true(wk_dl_load(&lib, NULL, 0)); /* once loaded, always loaded */
}

static void test_missing_library(void **state) {
  (void)state;
  struct {
    M_FNS(WK_DL_FIELD)
  } fns;
  memset(&fns, 0, sizeof fns);
  wk_dl_lib lib = WK_DL_LIB("libwk-no-such-library.so.7", m_names, fns);
  char err[256] = "";
  assert_false(wk_dl_load(&lib, err, sizeof err));
  assert_non_null(strstr(err, "cannot load libwk-no-such-library.so.7"));
  err[0] = '\0';
  assert_false(wk_dl_load(&lib, err, sizeof err)); /* the same answer, not retried */
  assert_non_null(strstr(err, "libwk-no-such-library.so.7"));
  assert_null(fns.fabs);
}

static const char *const bad_names[] = {"fabs", "wk_no_such_function"};

static void test_missing_function(void **state) {
  (void)state;
  struct {
    M_FNS(WK_DL_FIELD)
  } fns;
  memset(&fns, 0, sizeof fns);
  wk_dl_lib lib = WK_DL_LIB("libm.so.6", bad_names, fns);
  char err[256] = "";
  assert_false(wk_dl_load(&lib, err, sizeof err));
  assert_string_equal(err, "libm.so.6 has no function wk_no_such_function");
  assert_null(fns.fabs); /* all or nothing */
  assert_null(fns.hypot);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_loads_and_calls),
      cmocka_unit_test(test_missing_library),
      cmocka_unit_test(test_missing_function),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

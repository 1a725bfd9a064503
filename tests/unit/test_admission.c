/* Unit tests of admission under memory pressure (app/wk_admission.c): the floor's
 * syntax (bytes, units, percentages) and the pause/resume hysteresis. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "app/wk_admission.h"

static void test_floor_syntax(void **state) {
  (void)state;
  wk_mem_floor f;
  char err[300];
  assert_int_equal(wk_mem_floor_parse("0", &f, err, sizeof err), 0);
  assert_int_equal(wk_mem_floor_bytes(&f, 1000), 0);
  assert_int_equal(wk_mem_floor_parse("", &f, err, sizeof err), 0);
  assert_int_equal(wk_mem_floor_bytes(&f, 1000), 0);
  assert_int_equal(wk_mem_floor_parse("512MiB", &f, err, sizeof err), 0);
  assert_int_equal(wk_mem_floor_bytes(&f, 1), 512ull << 20);
  assert_int_equal(wk_mem_floor_parse("4096", &f, err, sizeof err), 0);
  assert_int_equal(f.bytes, 4096);
  assert_int_equal(wk_mem_floor_parse("10%", &f, err, sizeof err), 0);
  assert_int_equal(f.percent, 10);
  assert_int_equal(wk_mem_floor_bytes(&f, 2000), 200);
  const char *bad[] = {"100%", "0%", "%", "-5%", "5%%", "ten", "1.5GiB%", "12 parsecs"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    err[0] = '\0';
    assert_int_equal(wk_mem_floor_parse(bad[i], &f, err, sizeof err), -1);
    assert_true(err[0] != '\0');
  }
}

static void test_hysteresis(void **state) {
  (void)state;
  const uint64_t floor = 800;
  /* off: never paused */
  assert_false(wk_mem_pressure_paused(false, 0, 0));
  assert_false(wk_mem_pressure_paused(true, 0, 0));
  /* admitting: pauses under the floor only */
  assert_false(wk_mem_pressure_paused(false, 800, floor));
  assert_true(wk_mem_pressure_paused(false, 799, floor));
  /* paused: stays paused until an eighth above the floor */
  assert_true(wk_mem_pressure_paused(true, 800, floor));
  assert_true(wk_mem_pressure_paused(true, 899, floor));
  assert_false(wk_mem_pressure_paused(true, 900, floor));
  /* no overflow near the top */
  assert_true(wk_mem_pressure_paused(true, UINT64_MAX - 1, UINT64_MAX));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_floor_syntax),
      cmocka_unit_test(test_hysteresis),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

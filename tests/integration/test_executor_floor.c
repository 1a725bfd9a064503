/* test_executor_floor.c: the "executor floor" as a test: one real Python executor fed
 * 20,000 pipelined no-op CALL frames (depth 64), through the code of
 * bench/bench_executor_floor.c (included below, without its main). Prints the figure.
 *
 * The assertions are loose on purpose (a Debug build on a shared machine): every call
 * succeeds, RESULTs are coalesced (several per read on average; one write per RESULT
 * would give about one), and the rate is above a floor far below what the executor
 * does when healthy. Use the bench, in a Release tree, for the number itself. */
#define _XOPEN_SOURCE 700 /* before any system header: the bench needs POSIX */

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#define WK_FLOOR_NO_MAIN
#include "../../bench/bench_executor_floor.c"

#define FLOOR_CALLS 20000u
#define FLOOR_DEPTH 64u
#define FLOOR_MIN_CALLS_PER_S 2000.0

static void test_executor_floor(void **state) {
  (void)state;
  const char *python = getenv("WK_TEST_PYTHON");
  if (!python || !*python) python = "/usr/bin/python3";
  wk_floor_result r;
  if (!wk_floor_run(python, WK_SOURCE_DIR "/python/worker_executor.py", FLOOR_CALLS, FLOOR_DEPTH,
                    &r)) {
    fail_msg("%s", r.error);
  }
  wk_floor_print(stdout, &r);
  fflush(stdout);
  assert_int_equal(r.calls, FLOOR_CALLS);
  assert_int_equal(r.errors, 0);
  assert_true(r.reads > 0);
  assert_true((double)r.calls / r.reads >= 4.0); /* batched writes */
  if (r.calls_per_s < FLOOR_MIN_CALLS_PER_S) {
    fail_msg("executor floor %.0f calls/s, below %.0f", r.calls_per_s, FLOOR_MIN_CALLS_PER_S);
  }
}

int main(void) {
  signal(SIGPIPE, SIG_IGN);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_executor_floor),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

/* test_assert_trip.c: trips the assertions of src/lib/wk_assert.h on request, for
 * test_assert.sh, which checks how the process ends.
 *   always  WK_ASSERT on a false condition: must abort in every build
 *   debug   WK_DEBUG_ASSERT on a false condition: aborts only with WK_DEBUG_ASSERTS
 *   lib     prints whether wk_lib itself was compiled with WK_DEBUG_ASSERTS (1 or 0)
 *           and fails when this program and the library disagree */
#include <stdio.h>
#include <string.h>

#include "lib/wk_assert.h"

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: test_assert_trip always|debug|lib\n");
    return 2;
  }
  volatile int zero = 0; /* not a constant: the compiler cannot fold the checks away */
  if (strcmp(argv[1], "always") == 0) {
    WK_ASSERT(zero == 1);
    return 0;
  }
  if (strcmp(argv[1], "debug") == 0) {
    WK_DEBUG_ASSERT(zero == 1);
    return 0;
  }
  if (strcmp(argv[1], "lib") == 0) {
    printf("%d\n", wk_debug_asserts_enabled() ? 1 : 0);
    return wk_debug_asserts_enabled() == (WK_DEBUG_ASSERTS_ON != 0) ? 0 : 3;
  }
  return 2;
}

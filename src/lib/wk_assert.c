/* wk_assert.c: see wk_assert.h. The one place a pure library writes to stderr: the
 * last act of a process whose invariants broke (scripts/check-core-purity.sh names
 * this file as its exception). */
#include "lib/wk_assert.h"

#include <stdio.h>
#include <stdlib.h>

void wk_assert_fail(const char *expr, const char *file, int line, const char *func) {
  fprintf(stderr, "%s:%d: %s: assertion failed: %s\n", file, line, func, expr);
  fflush(stderr);
  abort();
}

bool wk_debug_asserts_enabled(void) { return WK_DEBUG_ASSERTS_ON; }

/* wk_assert.h: assertions that do not depend on NDEBUG.
 *
 * Every build the test command makes is Release or RelWithDebInfo, where NDEBUG turns
 * assert() into nothing. Our code uses these instead:
 *
 *   WK_ASSERT(x)        always on, Release included: for cheap invariants (a compare,
 *                       a field read the code is about to make anyway) at function
 *                       entry, state-machine transitions and ownership hand-overs.
 *   WK_DEBUG_ASSERT(x)  on when WK_DEBUG_ASSERTS is defined (the ASan build and the
 *                       fuzz targets, see CMakeLists.txt): for checks that cost (an
 *                       extra cache line, a loop, a walk). Off, `x` is not evaluated
 *                       but still compiled, so it cannot rot.
 *   WK_UNREACHABLE(why) a branch believed impossible (always on).
 *
 * A failed assertion writes "file:line: function: assertion failed: x" to stderr and
 * aborts (SIGABRT, so a core dump and the sanitizers' reports follow). Conditions an
 * outside party can cause (input, peers, the clock) are errors to return, never
 * assertions. */
#ifndef WK_ASSERT_H
#define WK_ASSERT_H

#include <stdbool.h>

/** Reports a failed assertion (`expr` at file:line in `func`) on stderr and aborts.
 * Called by the macros below; never returns. */
_Noreturn void wk_assert_fail(const char *expr, const char *file, int line, const char *func);

/** Whether the library (wk_lib) was compiled with WK_DEBUG_ASSERTS: tests compare it
 * with what the build asked for. */
bool wk_debug_asserts_enabled(void);

#define WK_ASSERT(expr) ((expr) ? (void)0 : wk_assert_fail(#expr, __FILE__, __LINE__, __func__))

#define WK_UNREACHABLE(why) wk_assert_fail("unreachable: " why, __FILE__, __LINE__, __func__)

#ifdef WK_DEBUG_ASSERTS
#define WK_DEBUG_ASSERTS_ON 1
#define WK_DEBUG_ASSERT(expr) WK_ASSERT(expr)
#else
#define WK_DEBUG_ASSERTS_ON 0
#define WK_DEBUG_ASSERT(expr) ((void)sizeof((expr) ? 1 : 0))
#endif

#endif

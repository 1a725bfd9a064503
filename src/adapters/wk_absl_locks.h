/* wk_absl_locks.h: the lock settings of the abseil library under gRPC core. */
#ifndef WK_ABSL_LOCKS_H
#define WK_ABSL_LOCKS_H

#ifdef __cplusplus
extern "C" {
#endif

/** Turns off abseil's mutex deadlock detection for the whole process. Debian builds
 * abseil without NDEBUG, which leaves it on: every lock gRPC core takes then records
 * itself in a global lock graph (GraphCycles), about 9% of the worker's instructions
 * per task. Upstream release builds have it off; gRPC's own lock order is tested
 * upstream, and ours by the TSan build. Call before grpc_init; cannot fail. */
void wk_absl_locks_release_mode(void);

#ifdef __cplusplus
}
#endif

#endif

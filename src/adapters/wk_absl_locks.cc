// wk_absl_locks.cc: the one C++ file of the project: abseil's lock settings have a C++
// API only (see wk_absl_locks.h).
#include "adapters/wk_absl_locks.h"

#include <absl/synchronization/mutex.h>

void wk_absl_locks_release_mode(void) {
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
}

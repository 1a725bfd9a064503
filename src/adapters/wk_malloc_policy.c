/* wk_malloc_policy.c: glibc's heap kept warm under load (see wk_malloc_policy.h). */
#include "adapters/wk_malloc_policy.h"

#include <limits.h>
#include <malloc.h>
#include <stdlib.h>
#include <string.h>

bool wk_malloc_keep_warm(size_t mmap_bytes, size_t trim_bytes) {
  const char *tunables = getenv("GLIBC_TUNABLES");
  if (tunables && strstr(tunables, "glibc.malloc.")) return false;
  if (getenv("MALLOC_TRIM_THRESHOLD_") || getenv("MALLOC_MMAP_THRESHOLD_")) return false;
  if (mmap_bytes > INT_MAX || trim_bytes > INT_MAX) return false;
  /* the trim threshold first: setting either turns glibc's dynamic thresholds off */
  if (mallopt(M_TRIM_THRESHOLD, (int)trim_bytes) != 1) return false;
  return mallopt(M_MMAP_THRESHOLD, (int)mmap_bytes) == 1;
}

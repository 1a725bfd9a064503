/* wk_code_registry.h: which code a worker holds, for its etcd record (issue 15 §1):
 *
 *   "code": {"<function>": {"current": 7,
 *                           "epochs": [{"epoch": 7, "digest": "<64 hex or empty>"}, ...]}},
 *   "code_truncated": false
 *
 * epochs highest first; "current" 0 when CURRENT is missing or malformed; digest "" for
 * an epoch deployed before digests were recorded. Bounded by registry_code_max_bytes
 * (the compact JSON text of the object): each function first gets its CURRENT epoch,
 * then the rest round by round, highest first; what does not fit is left out (the
 * lowest epochs, then whole functions, in name order from the end) and code_truncated
 * is set. */
#ifndef WK_CODE_REGISTRY_H
#define WK_CODE_REGISTRY_H

#include <stdbool.h>
#include <stddef.h>

/** Reads the code store at `root` (a threadpool job: directory scans and small reads) and
 * returns the "code" object's compact JSON text (malloc'd, never NULL; "{}" when the
 * root holds nothing or cannot be read), at most max_bytes long (at least 2); *truncated
 * says whether something was left out. */
char *wk_code_registry_build(const char *root, size_t max_bytes, bool *truncated);

#endif

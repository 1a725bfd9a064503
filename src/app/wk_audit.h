/* wk_audit.h: the AuditGate: which functions (and entry points) this worker agrees to
 * run. An allow list (empty = every function) and a deny list (checked first), each
 * comma-separated entries where a trailing '*' matches any suffix ("etl-*"). An entry
 * without ':' names functions (all their entry points); an entry with ':' names
 * "function:module:attr" ("etl:main:drop_all", "etl:admin:*"). Pure: no I/O. */
#ifndef WK_AUDIT_H
#define WK_AUDIT_H

#include <stdbool.h>
#include <stddef.h>

/** True when `function` with `entrypoint` ("module:attr"; NULL = check the function
 * name only) may run under `allow` and `deny` (either may be NULL or ""). On false,
 * writes the reason into why ("function 'x' (entry point main:y) is denied by this
 * worker's audit_deny (x:main:*)"). */
bool wk_audit_permits(const char *allow, const char *deny, const char *function,
                      const char *entrypoint, char *why, size_t why_len);

#endif

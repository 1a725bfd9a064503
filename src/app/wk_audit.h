/* wk_audit.h: the AuditGate: which functions this worker agrees to run. An allow list
 * (empty = every function) and a deny list (checked first), each comma-separated
 * names where a trailing '*' matches any suffix ("etl-*"). Pure: no I/O. */
#ifndef WK_AUDIT_H
#define WK_AUDIT_H

#include <stdbool.h>
#include <stddef.h>

/** True when `function` may run under `allow` and `deny` (either may be NULL or ""). On
 * false, writes the reason into why ("function 'x' is denied by audit_deny (x*)"). */
bool wk_audit_permits(const char *allow, const char *deny, const char *function, char *why,
                      size_t why_len);

#endif

/* wk_executor_user.c: resolving the executor_user setting (see wk_executor_user.h). */
#include "app/wk_executor_user.h"

#include <errno.h>
#include <pwd.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "lib/wk_err.h"

#define DEFAULT_ACCOUNT "nobody"

/* `spec` as a uid when it is all digits (and fits). */
static bool numeric_uid(const char *spec, uid_t *out) {
  if (!spec[0] || strspn(spec, "0123456789") != strlen(spec) || strlen(spec) > 10) return false;
  unsigned long v = strtoul(spec, NULL, 10);
  if (v >= (unsigned long)(uid_t)-1) return false;
  *out = (uid_t)v;
  return true;
}

int wk_executor_user_resolve(const char *spec, uid_t self_euid, uint32_t *uid, uint32_t *gid,
                             char *err, size_t len) {
  *uid = *gid = 0;
  if (!spec[0] && self_euid != 0) return 0; /* executors keep the worker's own user */
  const char *name = spec[0] ? spec : DEFAULT_ACCOUNT;
  uid_t u = 0;
  gid_t g = 0;
  errno = 0;
  if (numeric_uid(name, &u)) {
    const struct passwd *pw = getpwuid(u);
    g = pw ? pw->pw_gid : (gid_t)u; /* an id without an account: its own number as group */
  } else {
    const struct passwd *pw = getpwnam(name);
    if (!pw) {
      wk_errf(err, len,
              "executor_user: no account named '%.64s'%s (give an existing account name or a "
              "numeric uid)",
              name, spec[0] ? "" : " (the default when the worker runs as root)");
      return -1;
    }
    u = pw->pw_uid;
    g = pw->pw_gid;
  }
  if (self_euid != 0) {
    if (u == self_euid) return 0;
    wk_errf(err, len,
            "executor_user '%.64s' (uid %lu): the worker runs as uid %lu, not root, and cannot "
            "start executors as another user (leave executor_user empty, or start the worker "
            "as root)",
            name, (unsigned long)u, (unsigned long)self_euid);
    return -1;
  }
  if (u == 0) return 0; /* root asked for by name: executors stay root (the operator's choice) */
  *uid = (uint32_t)u;
  *gid = (uint32_t)g;
  return 0;
}

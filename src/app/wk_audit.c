#include "app/wk_audit.h"

#include <stdio.h>
#include <string.h>

/* Does `subject` match one entry of the comma-separated `list`? An entry holding ':'
 * is matched against "function:entrypoint", any other against the function alone.
 * Writes the entry to hit. */
static bool matches(const char *list, const char *function, const char *entrypoint, char *hit,
                    size_t hit_len) {
  if (!list) return false;
  char full[512];
  snprintf(full, sizeof full, "%s:%s", function, entrypoint ? entrypoint : "");
  for (const char *p = list; *p;) {
    while (*p == ' ' || *p == ',') p++;
    const char *end = p;
    while (*end && *end != ',') end++;
    size_t n = (size_t)(end - p);
    while (n > 0 && p[n - 1] == ' ') n--;
    if (n > 0) {
      bool with_entry = memchr(p, ':', n) != NULL;
      const char *subject = with_entry ? full : function;
      size_t sl = strlen(subject);
      bool prefix = p[n - 1] == '*';
      size_t m = prefix ? n - 1 : n;
      if ((!with_entry || entrypoint) && ((prefix && sl >= m && strncmp(subject, p, m) == 0) ||
                                          (!prefix && sl == m && strncmp(subject, p, m) == 0))) {
        snprintf(hit, hit_len, "%.*s", (int)n, p);
        return true;
      }
    }
    p = end;
  }
  return false;
}

/* "function 'f'" or "function 'f' (entry point e)", for a refusal's message. */
static void describe(char *what, size_t len, const char *function, const char *entrypoint) {
  if (entrypoint) {
    snprintf(what, len, "function '%s' (entry point %s)", function, entrypoint);
  } else {
    snprintf(what, len, "function '%s'", function);
  }
}

bool wk_audit_permits(const char *allow, const char *deny, const char *function,
                      const char *entrypoint, char *why, size_t why_len) {
  char hit[160], what[400];
  if (deny && deny[0] && matches(deny, function, entrypoint, hit, sizeof hit)) {
    describe(what, sizeof what, function, entrypoint);
    snprintf(why, why_len, "%s is denied by this worker's audit_deny (%s)", what, hit);
    return false;
  }
  if (allow && allow[0] && !matches(allow, function, entrypoint, hit, sizeof hit)) {
    describe(what, sizeof what, function, entrypoint);
    snprintf(why, why_len, "%s is not in this worker's audit_allow list", what);
    return false;
  }
  return true;
}

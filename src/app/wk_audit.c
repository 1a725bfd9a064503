#include "app/wk_audit.h"

#include <stdio.h>
#include <string.h>

/* Does `function` match one entry of the comma-separated `list`? Writes it to hit. */
static bool matches(const char *list, const char *function, char *hit, size_t hit_len) {
  if (!list) return false;
  size_t fl = strlen(function);
  for (const char *p = list; *p;) {
    while (*p == ' ' || *p == ',') p++;
    const char *end = p;
    while (*end && *end != ',') end++;
    size_t n = (size_t)(end - p);
    while (n > 0 && p[n - 1] == ' ') n--;
    if (n > 0) {
      bool prefix = p[n - 1] == '*';
      size_t m = prefix ? n - 1 : n;
      if ((prefix && fl >= m && strncmp(function, p, m) == 0) ||
          (!prefix && fl == m && strncmp(function, p, m) == 0)) {
        snprintf(hit, hit_len, "%.*s", (int)n, p);
        return true;
      }
    }
    p = end;
  }
  return false;
}

bool wk_audit_permits(const char *allow, const char *deny, const char *function, char *why,
                      size_t why_len) {
  char hit[160];
  if (deny && deny[0] && matches(deny, function, hit, sizeof hit)) {
    snprintf(why, why_len, "function '%s' is denied by this worker's audit_deny (%s)", function,
             hit);
    return false;
  }
  if (allow && allow[0] && !matches(allow, function, hit, sizeof hit)) {
    snprintf(why, why_len, "function '%s' is not in this worker's audit_allow list", function);
    return false;
  }
  return true;
}

/* wk_options.c: see wk_options.h. */
#include "lib/wk_options.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

const char *wk_option_get(const wk_option *options, size_t n, const char *key) {
  const char *v = NULL;
  for (size_t i = 0; options && i < n; i++) {
    if (options[i].key && strcmp(options[i].key, key) == 0)
      v = options[i].value ? options[i].value : "";
  }
  return v;
}

static bool is_known(const char *key, const char *const *known) {
  for (size_t i = 0; known && known[i]; i++) {
    if (strcmp(key, known[i]) == 0) return true;
  }
  return false;
}

int wk_option_check_keys(const char *owner, const wk_option *options, size_t n,
                         const char *const *known, char *err, size_t len) {
  for (size_t i = 0; options && i < n; i++) {
    const char *k = options[i].key ? options[i].key : "";
    if (is_known(k, known)) continue;
    char shown[65];
    size_t m = 0;
    for (; k[m] && m < sizeof shown - 1; m++) {
      unsigned char c = (unsigned char)k[m];
      shown[m] = (char)(c < 0x20 || c == 0x7f ? '?' : c);
    }
    shown[m] = '\0';
    char names[256] = "";
    size_t used = 0;
    for (size_t j = 0; known && known[j] && used < sizeof names; j++) {
      int w = snprintf(names + used, sizeof names - used, "%s%s", j ? ", " : "", known[j]);
      if (w < 0) break;
      used += (size_t)w;
    }
    if (len)
      snprintf(err, len, "%s: unknown option '%s' (known: %s)", owner, shown,
               names[0] ? names : "none");
    return -1;
  }
  return 0;
}

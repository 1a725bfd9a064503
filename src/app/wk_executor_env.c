/* wk_executor_env.c: parsing the executor_env setting (see wk_executor_env.h). */
#include "app/wk_executor_env.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "lib/wk_alloc.h"
#include "lib/wk_err.h"

/* Set by the executor pool for the executor itself: never replaced by a setting. */
static const char *const RESERVED[] = {"HOME", "PYTHONPATH", "PYTHONDONTWRITEBYTECODE",
                                       "PYTHONUNBUFFERED"};

static bool name_char(char ch, bool first) {
  return ch == '_' || (ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') ||
         (!first && ch >= '0' && ch <= '9');
}

/* Checks one item [item, item + n); on success *name_len is its NAME's length. */
static int check_item(const char *item, size_t n, size_t *name_len, char *err, size_t len) {
  size_t k = 0;
  while (k < n && item[k] != '=') k++;
  if (k == 0) {
    wk_errf(err, len, "executor_env: an empty name in item '%.*s' (items are NAME or NAME=VALUE)",
            (int)n, item);
    return -1;
  }
  for (size_t i = 0; i < k; i++) {
    if (!name_char(item[i], i == 0)) {
      wk_errf(err, len, "executor_env: '%.*s' is not a variable name ([A-Za-z_][A-Za-z0-9_]*)",
              (int)k, item);
      return -1;
    }
  }
  for (size_t r = 0; r < sizeof RESERVED / sizeof RESERVED[0]; r++) {
    if (strlen(RESERVED[r]) == k && memcmp(RESERVED[r], item, k) == 0) {
      wk_errf(err, len, "executor_env: %s is the executor's own and cannot be set", RESERVED[r]);
      return -1;
    }
  }
  for (size_t i = k; i < n; i++) {
    if ((unsigned char)item[i] < 0x20 || item[i] == 0x7f) {
      wk_errf(err, len, "executor_env: the value of %.*s has a control character", (int)k, item);
      return -1;
    }
  }
  *name_len = k;
  return 0;
}

/* Walks the items of `spec`; with `out`, appends each entry to it. */
static int walk(const char *spec, char ***out, size_t *count, char *err, size_t len) {
  const char *p = spec;
  while (*p) {
    const char *end = strchr(p, ',');
    size_t n = end ? (size_t)(end - p) : strlen(p);
    while (n > 0 && *p == ' ') p++, n--; /* "A, B" reads as "A,B" */
    while (n > 0 && p[n - 1] == ' ') n--;
    size_t k;
    if (n == 0) {
      wk_errf(err, len, "executor_env: an empty item (items are NAME or NAME=VALUE, by commas)");
      return -1;
    }
    if (check_item(p, n, &k, err, len) != 0) return -1;
    if (out) {
      char *entry = NULL;
      if (k < n) {
        entry = wk_xstrndup(p, n);
      } else {
        char name[256];
        if (k < sizeof name) {
          memcpy(name, p, k);
          name[k] = '\0';
          const char *v = getenv(name);
          if (v) {
            size_t vl = strlen(v);
            entry = wk_xmalloc(k + 1 + vl + 1);
            memcpy(entry, name, k);
            entry[k] = '=';
            memcpy(entry + k + 1, v, vl + 1);
          }
        }
      }
      if (entry) {
        *out = wk_xrealloc(*out, (*count + 2) * sizeof **out);
        (*out)[(*count)++] = entry;
        (*out)[*count] = NULL;
      }
    }
    if (!end) break;
    p = end + 1;
  }
  return 0;
}

int wk_executor_env_check(const char *spec, char *err, size_t len) {
  size_t count = 0;
  return walk(spec, NULL, &count, err, len);
}

char **wk_executor_env_build(const char *spec, char *err, size_t len) {
  char **env = wk_xcalloc(1, sizeof *env);
  size_t count = 0;
  if (walk(spec, &env, &count, err, len) != 0) {
    wk_executor_env_free(env);
    return NULL;
  }
  return env;
}

void wk_executor_env_free(char **env) {
  if (!env) return;
  for (char **e = env; *e; e++) free(*e);
  free(env);
}

/* wk_config_names.c: a setting's names as a flag and an environment variable, and
 * the setting an unknown word most likely meant. See wk_config_int.h. */
#include "app/wk_config_int.h"

#include <ctype.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

/* "task_slots" -> "task-slots" */
void wk_config__flag_name(const char *name, char *out, size_t len) {
  size_t i = 0;
  for (; name[i] && i + 1 < len; i++) out[i] = name[i] == '_' ? '-' : name[i];
  out[i] = '\0';
}

/* "task_slots" -> "WORKER_TASK_SLOTS" */
void wk_config__env_name(const char *name, char *out, size_t len) {
  int w = snprintf(out, len, "WORKER_");
  size_t i = w > 0 ? (size_t)w : 0;
  for (size_t j = 0; name[j] && i + 1 < len; j++, i++) {
    out[i] = (char)toupper((unsigned char)name[j]);
  }
  if (i < len) out[i] = '\0';
}

/* lower case, '-' as '_' */
static void normalize(const char *s, size_t n, char *out, size_t len) {
  size_t i = 0;
  for (; i < n && s[i] && i + 1 < len; i++) {
    char c = (char)tolower((unsigned char)s[i]);
    out[i] = c == '-' ? '_' : c;
  }
  out[i] = '\0';
}

static size_t edit_distance(const char *a, const char *b) {
  size_t la = strlen(a), lb = strlen(b);
  if (la > 63 || lb > 63) return 64;
  size_t prev[64], cur[64];
  for (size_t j = 0; j <= lb; j++) prev[j] = j;
  for (size_t i = 1; i <= la; i++) {
    cur[0] = i;
    for (size_t j = 1; j <= lb; j++) {
      size_t sub = prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      size_t del = prev[j] + 1, ins = cur[j - 1] + 1;
      cur[j] = sub < del ? (sub < ins ? sub : ins) : (del < ins ? del : ins);
    }
    memcpy(prev, cur, (lb + 1) * sizeof prev[0]);
  }
  return prev[lb];
}

/** The setting an unknown word most likely meant (a close name, an alias, a name the
 * word is part of), or NULL. */
const wk_config_item *wk_config__suggest(const char *word, size_t n) {
  char w[128];
  normalize(word, n, w, sizeof w);
  const wk_config_item *best = NULL;
  size_t best_d = 64;
  for (size_t i = 0; i < wk_config_count(); i++) {
    const wk_config_item *it = wk_config_item_at(i);
    char alias[128] = "";
    if (it->alias) normalize(it->alias, strlen(it->alias), alias, sizeof alias);
    if (strcmp(w, it->name) == 0 || (alias[0] && strcmp(w, alias) == 0)) return it;
    size_t d = edit_distance(w, it->name);
    if (alias[0]) {
      size_t da = edit_distance(w, alias);
      if (da < d) d = da;
    }
    size_t wl = strlen(w);
    bool close = d <= 2 || d * 4 <= wl;
    if (!close && wl >= 5 && strstr(it->name, w)) {
      close = true;
      d = 3;
    }
    if (close && d < best_d) {
      best = it;
      best_d = d;
    }
  }
  return best;
}

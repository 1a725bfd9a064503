/* wk_config_env.c: WORKER_<NAME> environment variables. See wk_config.h. */
#include "app/wk_config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "app/wk_config_int.h"

const char *wk_config__env_lookup(char *const envp[], const char *name) {
  size_t n = strlen(name);
  for (size_t i = 0; envp && envp[i]; i++) {
    if (strncmp(envp[i], name, n) == 0 && envp[i][n] == '=') return envp[i] + n + 1;
  }
  return NULL;
}

int wk_config__apply_env(wk_app_config *cfg, char *const envp[], wk_config_sources *sources,
                         wk_config__errs *e) {
  int before = e->n;
  static const char prefix[] = "WORKER_";
  for (size_t k = 0; envp && envp[k]; k++) {
    const char *var = envp[k];
    if (strncmp(var, prefix, sizeof prefix - 1) != 0) continue;
    const char *eq = strchr(var, '=');
    if (!eq) continue;
    const char *rest = var + sizeof prefix - 1;
    size_t rest_len = (size_t)(eq - rest);
    size_t var_len = (size_t)(eq - var);
    if (rest_len == strlen("CONFIG") && strncmp(rest, "CONFIG", rest_len) == 0) continue;
    /* the name must be exactly the upper-case form of a setting */
    size_t idx = 0;
    const wk_config_item *it = NULL;
    for (size_t i = 0; i < wk_config_count() && !it; i++) {
      char want[160];
      wk_config__env_name(wk_config_item_at(i)->name, want, sizeof want);
      if (strlen(want) == var_len && strncmp(want, var, var_len) == 0) {
        it = wk_config_item_at(i);
        idx = i;
      }
    }
    if (!it) {
      /* not fatal: other programs use WORKER_* names too (scripts/run.sh: WORKER_PORT) */
      const wk_config_item *s = wk_config__suggest(rest, rest_len);
      char want[160] = "";
      if (s) wk_config__env_name(s->name, want, sizeof want);
      wk_config__warn(e, "warning: %.*s is not a setting; ignored%s%s%s",
                      (int)(var_len > 120 ? 120 : var_len), var, s ? " (did you mean " : "", want,
                      s ? "?)" : "");
      continue;
    }
    char msg[256];
    if (wk_config_parse_value(it, eq + 1, wk_config__field(cfg, it), msg, sizeof msg) != 0) {
      wk_config__fail(e, "%.*s: %s", (int)var_len, var, msg);
      continue;
    }
    wk_config__set_source(sources, idx, WK_CONFIG_FROM_ENV, "%.*s", (int)var_len, var);
  }
  return e->n - before;
}

int wk_config_apply_env(wk_app_config *cfg, char *const envp[], wk_config_sources *sources,
                        char *err, size_t len) {
  wk_config__errs e = wk_config__errs_init(err, len);
  return wk_config__apply_env(cfg, envp, sources, &e);
}

int wk_config_scrub_secret_env(void) {
  int removed = 0;
  for (size_t i = 0; i < wk_config_count(); i++) {
    const wk_config_item *it = wk_config_item_at(i);
    if (it->secret == WK_CONFIG_PUBLIC) continue;
    char name[160];
    wk_config__env_name(it->name, name, sizeof name);
    size_t n = strlen(name);
    /* each "NAME=VALUE" string (in the initial environment block /proc/<pid>/environ
     * shows, when it came from there): remember them, drop the entries, then wipe */
    char *found[16];
    size_t k = 0;
    for (char **e = environ; e && *e && k < sizeof found / sizeof found[0]; e++) {
      if (strncmp(*e, name, n) == 0 && (*e)[n] == '=') found[k++] = *e;
    }
    if (k == 0) continue;
    unsetenv(name);
    for (size_t j = 0; j < k; j++) memset(found[j], 0, strlen(found[j]));
    removed++;
  }
  return removed;
}

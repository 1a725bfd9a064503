/* wk_profile.c: Profile checks. */
#include "app/wk_profile.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "plugins/wk_builders.h"
#include "plugins/wk_writers.h"

const char *wk_deployment_name(wk_deployment d) {
  switch (d) {
    case WK_DEPLOYMENT_BLOCK: return "block";
    case WK_DEPLOYMENT_BUNDLE: return "bundle";
  }
  return "unknown";
}

__attribute__((format(printf, 4, 5))) static void add(char *err, size_t len, int *n,
                                                      const char *fmt, ...) {
  size_t used = strlen(err);
  va_list ap;
  va_start(ap, fmt);
  if (used < len) vsnprintf(err + used, len - used, fmt, ap);
  va_end(ap);
  (*n)++;
}

void wk_profile_tune(const void *profile, wk_app_config *cfg) {
  const wk_profile *p = profile;
  snprintf(cfg->registry_prefix, sizeof cfg->registry_prefix, "%s", p->registry_prefix);
  if (p->tune_defaults) p->tune_defaults(cfg);
}

/* Each writer plugin and the setting that gives it its backend. */
static const struct {
  const char *writer, *setting;
  size_t offset;
} writer_rows[] = {
    {"file", "output_dir", offsetof(wk_app_config, output_dir)},
    {"redis", "redis_addr", offsetof(wk_app_config, redis_addr)},
    {"postgres", "postgres_dsn", offsetof(wk_app_config, postgres_dsn)},
};
#define N_WRITER_ROWS (sizeof writer_rows / sizeof writer_rows[0])

const char *wk_profile_writer_setting(const wk_app_config *cfg, const char *writer,
                                      const char **setting) {
  for (size_t i = 0; i < N_WRITER_ROWS; i++) {
    if (strcmp(writer_rows[i].writer, writer) != 0) continue;
    if (setting) *setting = writer_rows[i].setting;
    return (const char *)cfg + writer_rows[i].offset;
  }
  return NULL;
}

static bool enables_writer(const wk_profile *p, const char *writer) {
  for (size_t i = 0; i < WK_PROFILE_NAMES_MAX && p->plugins[i]; i++) {
    if (strcmp(p->plugins[i], writer) == 0) return true;
  }
  return false;
}

int wk_profile_check_config(const wk_profile *p, const wk_app_config *cfg, char *err, size_t len) {
  int n = 0;
  err[0] = '\0';
  char enabled[256] = "";
  for (size_t i = 0; i < WK_PROFILE_NAMES_MAX && p->plugins[i]; i++) {
    size_t used = strlen(enabled);
    snprintf(enabled + used, sizeof enabled - used, "%s%s", used ? ", " : "", p->plugins[i]);
  }
  for (size_t i = 0; i < N_WRITER_ROWS; i++) {
    const char *value = (const char *)cfg + writer_rows[i].offset;
    if (!value[0] || enables_writer(p, writer_rows[i].writer)) continue;
    add(err, len, &n, "%s is set, but the %s profile does not enable the %s writer (enabled: %s)\n",
        writer_rows[i].setting, wk_deployment_name(p->deployment), writer_rows[i].writer,
        enabled[0] ? enabled : "none");
  }
  return n;
}

int wk_profile_validate(const wk_profile *p, char *err, size_t len) {
  int n = 0;
  err[0] = '\0';
  if (p->deployment != WK_DEPLOYMENT_BLOCK && p->deployment != WK_DEPLOYMENT_BUNDLE) {
    add(err, len, &n, "profile: deployment must be block or bundle\n");
  }
  if (!p->service || !p->service[0]) add(err, len, &n, "profile: a service name is required\n");
  size_t pl = p->registry_prefix ? strlen(p->registry_prefix) : 0;
  if (pl < 2 || p->registry_prefix[0] != '/' || p->registry_prefix[pl - 1] != '/') {
    add(err, len, &n, "profile: registry_prefix must start and end with '/', got '%s'\n",
        p->registry_prefix ? p->registry_prefix : "");
  }
  if (!p->builders[0]) add(err, len, &n, "profile: at least one call builder must be enabled\n");
  for (size_t i = 0; i < WK_PROFILE_NAMES_MAX && p->builders[i]; i++) {
    if (!wk_builder_find_builtin(p->builders[i])) {
      add(err, len, &n, "profile: no call builder named '%s' (known: single, map, range)\n",
          p->builders[i]);
    }
  }
  for (size_t i = 0; i < WK_PROFILE_NAMES_MAX && p->plugins[i]; i++) {
    if (!wk_writer_find(p->plugins[i])) {
      add(err, len, &n, "profile: no writer plugin named '%s' (known: %s)\n", p->plugins[i],
          wk_writer_names());
    }
  }
  return n;
}

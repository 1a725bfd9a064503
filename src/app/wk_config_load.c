/* wk_config_load.c: the sources in order (defaults, the Profile's tuning, the file,
 * the environment, the flags) and where each value came from. See wk_config.h. */
#include "app/wk_config.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app/wk_config_int.h"

__attribute__((format(printf, 4, 5))) void wk_config__set_source(wk_config_sources *sources,
                                                                 size_t i, wk_config_origin origin,
                                                                 const char *fmt, ...) {
  if (!sources || i >= WK_CONFIG_MAX_ITEMS) return;
  sources->item[i].origin = origin;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(sources->item[i].where, sizeof sources->item[i].where, fmt, ap);
  va_end(ap);
}

void wk_config__source_text(const wk_config_source *s, char *out, size_t len) {
  switch (s->origin) {
    case WK_CONFIG_FROM_DEFAULT:
      if (strcmp(s->where, "default") == 0 || !s->where[0]) {
        snprintf(out, len, "default");
      } else {
        snprintf(out, len, "default, %s", s->where);
      }
      return;
    case WK_CONFIG_FROM_FILE: snprintf(out, len, "file %s", s->where); return;
    case WK_CONFIG_FROM_ENV: snprintf(out, len, "env %s", s->where); return;
    case WK_CONFIG_FROM_FLAG: snprintf(out, len, "flag %s", s->where); return;
  }
  snprintf(out, len, "?");
}

void wk_config_defaults(wk_app_config *cfg, wk_config_sources *sources) {
  memset(cfg, 0, sizeof *cfg);
  if (sources) memset(sources, 0, sizeof *sources);
  for (size_t i = 0; i < wk_config_count(); i++) {
    const wk_config_item *it = wk_config_item_at(i);
    char err[256];
    if (wk_config_parse_value(it, it->def, wk_config__field(cfg, it), err, sizeof err) != 0) {
      fprintf(stderr, "wk_config: the default of %s does not parse: %s\n", it->name, err);
      abort();
    }
    wk_config__set_source(sources, i, WK_CONFIG_FROM_DEFAULT, "default");
  }
}

int wk_config_load(wk_app_config *cfg, wk_config_sources *sources, const wk_config_cli *cli,
                   char *const envp[], char *err, size_t len) {
  return wk_config_load_tuned(cfg, sources, cli, envp, NULL, err, len);
}

int wk_config_load_tuned(wk_app_config *cfg, wk_config_sources *sources, const wk_config_cli *cli,
                         char *const envp[], void (*tune)(wk_app_config *cfg), char *err,
                         size_t len) {
  wk_config__errs e = wk_config__errs_init(err, len);
  wk_config_sources local;
  if (!sources) sources = &local;
  wk_config_defaults(cfg, sources);
  if (tune) {
    /* the Profile's tune-defaults: only built-in defaults change, and say so */
    wk_app_config before = *cfg;
    tune(cfg);
    for (size_t i = 0; i < wk_config_count(); i++) {
      const wk_config_item *it = wk_config_item_at(i);
      if (memcmp((const char *)&before + it->offset, (const char *)cfg + it->offset, it->size) !=
          0) {
        wk_config__set_source(sources, i, WK_CONFIG_FROM_DEFAULT, "profile");
      }
    }
  }
  const char *path =
      cli && cli->config_path ? cli->config_path : wk_config__env_lookup(envp, "WORKER_CONFIG");
  if (path && path[0]) wk_config__load_file(cfg, path, sources, &e);
  wk_config__apply_env(cfg, envp, sources, &e);
  if (cli) wk_config__apply_flags(cfg, cli, sources, &e);
  /* a derived default: executors_max left at its default follows a larger executors
   * (`--executors 8` alone must not be an error); set explicitly, the rule holds */
  size_t xi = wk_config__index_of("executors_max");
  if (sources && xi < wk_config_count() && sources->item[xi].origin == WK_CONFIG_FROM_DEFAULT &&
      cfg->executors_max != 0 && cfg->executors_max < cfg->executors) {
    cfg->executors_max = cfg->executors;
    wk_config__set_source(sources, xi, WK_CONFIG_FROM_DEFAULT, "raised to executors");
  }
  return e.n;
}

/* wk_config_load.c: the sources in order (defaults, the Profile's tuning, the file,
 * the environment, the flags) and where each value came from. See wk_config.h. */
#include "app/wk_config.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "app/wk_config_int.h"

/* Where an installed program's Python files lie, relative to its prefix
 * (cmake/Install.cmake installs them there). */
#define INSTALLED_PYTHON_DIR "share/worker/python"
#define EXECUTOR_SCRIPT_NAME "worker_executor.py"

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

int wk_config_installed_python_dir(const char *exe_path, char *out, size_t len) {
  if (len) out[0] = '\0';
  /* PREFIX/bin/worker -> PREFIX: cut the program's name, then its directory */
  const char *name = strrchr(exe_path, '/');
  if (!name || name == exe_path || len == 0) return -1; /* no directory, or "/" */
  const char *bin = name;
  while (bin > exe_path && bin[-1] != '/') bin--;
  size_t prefix_len = (size_t)(bin - exe_path); /* "PREFIX/" (or "" for "bin/worker") */
  char dir[WK_CONFIG_PATH_MAX];
  int n = snprintf(dir, sizeof dir, "%.*s" INSTALLED_PYTHON_DIR, (int)prefix_len, exe_path);
  if (n < 0 || (size_t)n >= sizeof dir || (size_t)n >= len) return -1;
  char script[WK_CONFIG_PATH_MAX + sizeof "/" EXECUTOR_SCRIPT_NAME];
  snprintf(script, sizeof script, "%s/" EXECUTOR_SCRIPT_NAME, dir);
  if (access(script, R_OK) != 0) return -1;
  memcpy(out, dir, (size_t)n + 1);
  return 0;
}

/* When this program runs from an installed layout (PREFIX/bin/worker beside
 * PREFIX/share/worker/python), its Python files are the defaults of executor_script
 * and python_path, not the source tree's (the build-time default). */
static void apply_installed_python(wk_app_config *cfg, wk_config_sources *sources) {
  char exe[WK_CONFIG_PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0 || (size_t)n >= sizeof exe - 1) return;
  exe[n] = '\0';
  char dir[WK_CONFIG_PATH_MAX];
  if (wk_config_installed_python_dir(exe, dir, sizeof dir) != 0) return;
  if (strlen(dir) + sizeof "/" EXECUTOR_SCRIPT_NAME > sizeof cfg->executor_script) return;
  snprintf(cfg->executor_script, sizeof cfg->executor_script, "%s/" EXECUTOR_SCRIPT_NAME, dir);
  snprintf(cfg->python_path, sizeof cfg->python_path, "%s", dir);
  wk_config__set_source(sources, wk_config__index_of("executor_script"), WK_CONFIG_FROM_DEFAULT,
                        "installed");
  wk_config__set_source(sources, wk_config__index_of("python_path"), WK_CONFIG_FROM_DEFAULT,
                        "installed");
}

/* auth_token_file: the token is the file's content less one trailing newline ("\n" or
 * "\r\n"); empty, too long or holding a control byte is a problem naming the setting
 * and the file, never the content. Not with auth_token (which would win silently). */
static void read_auth_token_file(wk_app_config *cfg, wk_config_sources *sources,
                                 wk_config__errs *e) {
  const char *path = cfg->auth_token_file;
  if (!path[0]) return;
  size_t fi = wk_config__index_of("auth_token_file");
  size_t ti = wk_config__index_of("auth_token");
  if (cfg->auth_token[0]) {
    char a[300], b[300];
    wk_config__source_text(&sources->item[ti], a, sizeof a);
    wk_config__source_text(&sources->item[fi], b, sizeof b);
    wk_config__fail(e, "auth_token (%s) and auth_token_file (%s) are both set; set one", a, b);
    return;
  }
  FILE *f = fopen(path, "rb");
  if (!f) {
    wk_config__fail(e, "auth_token_file '%.200s': %s", path, strerror(errno));
    return;
  }
  char buf[sizeof cfg->auth_token + 2];
  size_t n = fread(buf, 1, sizeof buf, f);
  int failed = ferror(f);
  fclose(f);
  const char *why = NULL;
  if (failed) {
    why = "cannot be read";
  } else {
    if (n > 0 && buf[n - 1] == '\n') n--;
    if (n > 0 && buf[n - 1] == '\r') n--;
    if (n == 0) why = "is empty";
    if (n >= sizeof cfg->auth_token) why = "holds more than 511 bytes";
    for (size_t i = 0; i < n && !why; i++) {
      if ((unsigned char)buf[i] < 0x20 || buf[i] == 0x7f) why = "holds a control byte or newline";
    }
  }
  if (why) {
    wk_config__fail(e, "auth_token_file '%.200s' %s", path, why);
  } else {
    memcpy(cfg->auth_token, buf, n);
    cfg->auth_token[n] = '\0';
    wk_config__set_source(sources, ti, sources->item[fi].origin, "%.100s, read from %.140s",
                          sources->item[fi].where, path);
  }
  memset(buf, 0, sizeof buf);
}

int wk_config_load(wk_app_config *cfg, wk_config_sources *sources, const wk_config_cli *cli,
                   char *const envp[], char *err, size_t len) {
  return wk_config_load_tuned(cfg, sources, cli, envp, NULL, NULL, err, len);
}

int wk_config_load_tuned(wk_app_config *cfg, wk_config_sources *sources, const wk_config_cli *cli,
                         char *const envp[], void (*tune)(const void *tune_ud, wk_app_config *cfg),
                         const void *tune_ud, char *err, size_t len) {
  wk_config__errs e = wk_config__errs_init(err, len);
  wk_config_sources local;
  if (!sources) sources = &local;
  wk_config_defaults(cfg, sources);
  apply_installed_python(cfg, sources);
  if (tune) {
    /* the Profile's tune-defaults: only built-in defaults change, and say so */
    wk_app_config before = *cfg;
    tune(tune_ud, cfg);
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
  read_auth_token_file(cfg, sources, &e);
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

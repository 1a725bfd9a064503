/* wk_config_cli.c: the command line: the special flags and --name-with-dashes VALUE
 * for every setting. See wk_config.h. */
#include "app/wk_config.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "app/wk_config_int.h"
#include "lib/wk_assert.h"

/* Whether flag (n bytes, without "--") names the setting, dashes for underscores. */
static bool flag_is(const char *flag, size_t n, const char *name) {
  size_t i = 0;
  for (; i < n && name[i]; i++) {
    char want = name[i] == '_' ? '-' : name[i];
    if (flag[i] != want) return false;
  }
  return i == n && name[i] == '\0';
}

int wk_config_parse_cli(int argc, char *const argv[], wk_config_cli *cli, char *err, size_t len) {
  wk_config__errs e = wk_config__errs_init(err, len);
  memset(cli, 0, sizeof *cli);
  for (int a = 1; a < argc; a++) {
    const char *arg = argv[a];
    if (strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0) {
      cli->help = true;
      continue;
    }
    if (strcmp(arg, "--version") == 0) {
      cli->version = true;
      continue;
    }
    if (strncmp(arg, "--", 2) != 0 || arg[2] == '\0') {
      if (arg[0] == '-' && arg[1] != '\0') {
        wk_config__fail(&e, "unknown flag '%.80s'", arg);
      } else {
        wk_config__fail(&e, "unexpected argument '%.80s'", arg);
      }
      continue;
    }
    const char *name = arg + 2;
    const char *eq = strchr(name, '=');
    size_t n = eq ? (size_t)(eq - name) : strlen(name);
    size_t flag_len = n + 2;
    bool is_bool_flag = false;
    bool *bool_target = NULL;
    if (flag_is(name, n, "print-config")) bool_target = &cli->print_config;
    if (flag_is(name, n, "json")) bool_target = &cli->json;
    if (flag_is(name, n, "markdown")) bool_target = &cli->markdown;
    if (bool_target) {
      is_bool_flag = true;
      if (eq) {
        wk_config__fail(&e, "--%.*s takes no value", (int)n, name);
      } else {
        *bool_target = true;
      }
    }
    if (is_bool_flag) continue;
    /* a flag with a value: --config or a setting */
    const char *value = NULL;
    if (eq) {
      value = eq + 1;
    } else if (a + 1 < argc) {
      value = argv[++a];
    }
    if (flag_is(name, n, "config")) {
      if (!value) {
        wk_config__fail(&e, "--config needs a value");
      } else {
        cli->config_path = value;
      }
      continue;
    }
    size_t n_items = wk_config_count();
    size_t idx = n_items;
    for (size_t i = 0; i < n_items && idx == n_items; i++) {
      const wk_config_item *it = wk_config_item_at(i);
      if (flag_is(name, n, it->name) || (it->alias && flag_is(name, n, it->alias))) idx = i;
    }
    if (idx == n_items) {
      const wk_config_item *s = wk_config__suggest(name, n);
      char d[160] = "";
      if (s) wk_config__flag_name(s->name, d, sizeof d);
      wk_config__fail(&e, "unknown flag '--%.*s'%s%s%s", (int)(n > 80 ? 80 : n), name,
                      s ? " (did you mean --" : "", d, s ? "?)" : "");
      if (!eq && value && strncmp(value, "--", 2) == 0) a--; /* that is the next flag */
      continue;
    }
    if (!value) {
      wk_config__fail(&e, "--%.*s needs a value", (int)n, name);
      continue;
    }
    if (cli->n_flags >= WK_CONFIG_MAX_FLAGS) {
      wk_config__fail(&e, "too many flags (at most %d)", WK_CONFIG_MAX_FLAGS);
      break;
    }
    cli->flags[cli->n_flags].index = idx;
    cli->flags[cli->n_flags].flag = arg;
    cli->flags[cli->n_flags].flag_len = flag_len;
    cli->flags[cli->n_flags].value = value;
    cli->n_flags++;
  }
  if ((cli->json || cli->markdown) && !cli->print_config) {
    wk_config__fail(&e, "--json and --markdown go with --print-config");
  }
  if (cli->json && cli->markdown) wk_config__fail(&e, "--json and --markdown exclude each other");
  return e.n;
}

int wk_config__apply_flags(wk_app_config *cfg, const wk_config_cli *cli, wk_config_sources *sources,
                           wk_config__errs *e) {
  int before = e->n;
  WK_ASSERT(cli->n_flags <= WK_CONFIG_MAX_FLAGS);
  for (size_t k = 0; k < cli->n_flags; k++) {
    size_t idx = cli->flags[k].index;
    WK_ASSERT(idx < wk_config_count());
    if (idx >= wk_config_count()) continue;
    const wk_config_item *it = wk_config_item_at(idx);
    int fl = (int)(cli->flags[k].flag_len > 120 ? 120 : cli->flags[k].flag_len);
    char msg[256];
    if (wk_config_parse_value(it, cli->flags[k].value, wk_config__field(cfg, it), msg,
                              sizeof msg) != 0) {
      wk_config__fail(e, "%.*s: %s", fl, cli->flags[k].flag, msg);
      continue;
    }
    wk_config__set_source(sources, idx, WK_CONFIG_FROM_FLAG, "%.*s", fl, cli->flags[k].flag);
  }
  return e->n - before;
}

int wk_config_apply_flags(wk_app_config *cfg, const wk_config_cli *cli, wk_config_sources *sources,
                          char *err, size_t len) {
  wk_config__errs e = wk_config__errs_init(err, len);
  return wk_config__apply_flags(cfg, cli, sources, &e);
}

int wk_config_scrub_secret_args(const wk_config_cli *cli) {
  int scrubbed = 0;
  for (size_t k = 0; k < cli->n_flags; k++) {
    const wk_config_item *it = wk_config_item_at(cli->flags[k].index);
    if (!it || it->secret == WK_CONFIG_PUBLIC) continue;
    /* the value lies in main's argv, writable memory /proc/<pid>/cmdline shows */
    char *value = (char *)(uintptr_t)cli->flags[k].value;
    memset(value, '*', strlen(value));
    scrubbed++;
  }
  return scrubbed;
}

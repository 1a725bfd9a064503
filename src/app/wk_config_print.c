/* wk_config_print.c: showing the settings: --print-config (text or JSON), the
 * Markdown reference (docs/configuration.md) and --help, generated from the table.
 * See wk_config.h. */
#include "app/wk_config.h"

#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "app/wk_config_int.h"

void wk_config_print(FILE *out, const wk_app_config *cfg, const wk_config_sources *sources,
                     wk_config_format format) {
  if (format == WK_CONFIG_JSON) {
    json_t *root = json_object();
    for (size_t i = 0; i < wk_config_count(); i++) {
      const wk_config_item *it = wk_config_item_at(i);
      const void *f = wk_config__cfield(cfg, it);
      json_t *val = NULL;
      char shown[1100];
      if (it->secret != WK_CONFIG_PUBLIC) {
        val = json_string(wk_config_format_shown(cfg, it, shown, sizeof shown));
      } else {
        switch (it->type) {
          case WK_CONFIG_STRING:
          case WK_CONFIG_ENUM: val = json_stringn(f, strnlen(f, it->size)); break;
          case WK_CONFIG_UINT:
          case WK_CONFIG_BYTES: {
            uint64_t x = wk_config__get_uint(f, it->size);
            val = x <= (uint64_t)INT64_MAX ? json_integer((json_int_t)x) : NULL;
            break;
          }
          case WK_CONFIG_MS: val = json_integer((json_int_t)wk_config__get_i64(f)); break;
          case WK_CONFIG_BOOL: val = json_boolean(wk_config__get_bool(f)); break;
        }
      }
      if (!val) {
        char buf[64];
        val = json_string(wk_config_format_shown(cfg, it, buf, sizeof buf));
      }
      static const char *const origins[] = {"default", "file", "env", "flag"};
      const wk_config_source *s = sources ? &sources->item[i] : NULL;
      json_t *o = json_object();
      json_object_set_new(o, "value", val);
      json_object_set_new(o, "source", json_string(s ? origins[s->origin] : "default"));
      if (s && s->origin != WK_CONFIG_FROM_DEFAULT) {
        json_object_set_new(o, "where", json_string(s->where));
      }
      json_object_set_new(root, it->name, o);
    }
    json_dumpf(root, out, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    fputc('\n', out);
    json_decref(root);
    return;
  }
  int name_w = 0, val_w = 0;
  char buf[1100];
  for (size_t i = 0; i < wk_config_count(); i++) {
    const wk_config_item *it = wk_config_item_at(i);
    int n = (int)strlen(it->name);
    if (n > name_w) name_w = n;
    wk_config_format_shown(cfg, it, buf, sizeof buf);
    n = buf[0] ? (int)strlen(buf) : 2;
    if (n > val_w) val_w = n;
  }
  if (val_w > 40) val_w = 40;
  fprintf(out, "%-*s  %-*s  %s\n", name_w, "# setting", val_w, "value", "source");
  for (size_t i = 0; i < wk_config_count(); i++) {
    char src[300] = "default";
    if (sources) wk_config__source_text(&sources->item[i], src, sizeof src);
    const wk_config_item *it = wk_config_item_at(i);
    wk_config_format_shown(cfg, it, buf, sizeof buf);
    fprintf(out, "%-*s  %-*s  %s\n", name_w, it->name, val_w, buf[0] ? buf : "\"\"", src);
  }
}

static void range_text(const wk_config_item *it, char *out, size_t len) {
  switch (it->type) {
    case WK_CONFIG_UINT:
    case WK_CONFIG_MS:
    case WK_CONFIG_BYTES: snprintf(out, len, "%" PRId64 " .. %" PRId64, it->min, it->max); return;
    case WK_CONFIG_ENUM: wk_config__enum_list(it->choices ? it->choices : "", out, len); return;
    case WK_CONFIG_STRING:
      if (it->min > 0) {
        snprintf(out, len, "1 .. %" PRId64 " bytes", it->max);
      } else {
        snprintf(out, len, "0 .. %" PRId64 " bytes", it->max);
      }
      return;
    case WK_CONFIG_BOOL: snprintf(out, len, "true, false"); return;
  }
  out[0] = '\0';
}

void wk_config_print_markdown(FILE *out) {
  fprintf(out, "| Setting | Environment | Flag | Type | Default | Range | Description |\n");
  fprintf(out, "|---|---|---|---|---|---|---|\n");
  for (size_t i = 0; i < wk_config_count(); i++) {
    const wk_config_item *it = wk_config_item_at(i);
    char env[160], flag[160], range[160];
    wk_config__env_name(it->name, env, sizeof env);
    wk_config__flag_name(it->name, flag, sizeof flag);
    range_text(it, range, sizeof range);
    fprintf(out, "| `%s` | `%s` | `--%s`", it->name, env, flag);
    if (it->alias) fprintf(out, " (or `--%s`)", it->alias);
    if (it->doc_default) {
      fprintf(out, " | %s | %s | %s | %s |\n", wk_config__type_name(it->type), it->doc_default,
              range, it->help);
    } else {
      fprintf(out, " | %s | `%s` | %s | %s |\n", wk_config__type_name(it->type),
              it->def[0] ? it->def : "\"\"", range, it->help);
    }
  }
}

void wk_config_print_help(FILE *out, const char *program, const wk_app_config *defaults) {
  fprintf(out,
          "usage: %s [--config FILE] [--print-config [--json | --markdown]] [--SETTING VALUE]...\n",
          program);
  fputs(
      "\n"
      "Runs Python functions for a coordinator over gRPC (worker.v1.WorkerService).\n"
      "\n"
      "  --config FILE                  read settings from this YAML file (or WORKER_CONFIG)\n"
      "  --print-config                 print the effective configuration with each value's\n"
      "                                 source, check it, and exit (0 valid, 2 invalid)\n"
      "  --json                         with --print-config: as JSON\n"
      "  --markdown                     with --print-config: the settings reference (Markdown)\n"
      "  --version                      print the version and git commit, and exit\n"
      "  -h, --help                     this text\n"
      "\n"
      "Settings: each one is a flag --name-with-dashes VALUE, an environment variable\n"
      "WORKER_NAME and a key name in the file; flags beat the environment, which beats\n"
      "the file, which beats the defaults. Units: ms accepts 30000, 30s, 5m, 1h; bytes\n"
      "accepts 4194304, 64KiB, 4MiB, 1GiB.\n"
      "\n",
      out);
  wk_app_config table[1]; /* the table's defaults, to compare with `defaults` */
  wk_config_defaults(table, NULL);
  for (size_t i = 0; i < wk_config_count(); i++) {
    const wk_config_item *it = wk_config_item_at(i);
    char flag[160], left[256];
    wk_config__flag_name(it->name, flag, sizeof flag);
    snprintf(left, sizeof left, "--%s %s", flag, wk_config__type_meta(it));
    /* the table's words ("256MiB"), unless this program's default differs from it */
    char value[WK_CONFIG_PATH_MAX];
    const char *def = it->doc_default ? it->doc_default : it->def;
    if (defaults &&
        memcmp(wk_config__cfield(defaults, it), wk_config__cfield(table, it), it->size) != 0) {
      def = wk_config_format_shown(defaults, it, value, sizeof value);
    }
    if (strlen(left) > 29) {
      fprintf(out, "  %s\n  %-29s", left, "");
    } else {
      fprintf(out, "  %-29s", left);
    }
    fprintf(out, "  %s (default %s%s%s)\n", it->help, def[0] ? def : "\"\"",
            it->alias ? "; also --" : "", it->alias ? it->alias : "");
  }
  fputs(
      "\nLogs are JSON lines on stderr; SIGINT/SIGTERM drain and stop (a second one skips the "
      "wait).\n",
      out);
}

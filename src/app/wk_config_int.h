/* wk_config_int.h: what the files of the configuration module share, not for its
 * callers (they include wk_config.h). One file per concept:
 *   wk_config_table.c     the settings table and finding a row
 *   wk_config_value.c     parsing and formatting values, units, field access
 *   wk_config_names.c     flag and environment names, "did you mean" suggestions
 *   wk_config_problems.c  problem lines in the caller's buffer
 *   wk_config_yaml.c      the YAML file
 *   wk_config_env.c       WORKER_<NAME> environment variables
 *   wk_config_cli.c       the command line
 *   wk_config_load.c      defaults, sources and the whole load sequence
 *   wk_config_validate.c  checking values and the table
 *   wk_config_print.c     --print-config, --help and the Markdown reference */
#ifndef WK_CONFIG_INT_H
#define WK_CONFIG_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "app/wk_config.h"

/* ---- problems (wk_config_problems.c) ------------------------------------------------ */

/** Problem lines appended to a caller's buffer (may be NULL), and their count. */
typedef struct wk_config__errs {
  char *buf;
  size_t len;
  int n; /* problems so far (warnings not counted) */
} wk_config__errs;

/** Empties buf (when not NULL) and returns a list writing into it. */
wk_config__errs wk_config__errs_init(char *buf, size_t len);

/** Appends one problem line (control bytes shown as '?') and counts it. A full buffer
 * truncates the text, never the count. */
__attribute__((format(printf, 2, 3))) void wk_config__fail(wk_config__errs *e, const char *fmt,
                                                           ...);

/** Appends one warning line, not counted. */
__attribute__((format(printf, 2, 3))) void wk_config__warn(wk_config__errs *e, const char *fmt,
                                                           ...);

/* ---- the table (wk_config_table.c) -------------------------------------------------- */

/** Row index of the setting `name`, or wk_config_count() when there is none. */
size_t wk_config__index_of(const char *name);

/* ---- names (wk_config_names.c) ------------------------------------------------------ */

/** "task_slots" -> "task-slots" (the flag without its "--"), truncated to len. */
void wk_config__flag_name(const char *name, char *out, size_t len);

/** "task_slots" -> "WORKER_TASK_SLOTS", truncated to len. */
void wk_config__env_name(const char *name, char *out, size_t len);

/** The setting an unknown word (n bytes, any case, '-' or '_') most likely meant: a
 * close name, an alias, a name the word is part of; or NULL. */
const wk_config_item *wk_config__suggest(const char *word, size_t n);

/* ---- values (wk_config_value.c) ----------------------------------------------------- */

/** The storage of `it` inside cfg. */
void *wk_config__field(wk_app_config *cfg, const wk_config_item *it);
const void *wk_config__cfield(const wk_app_config *cfg, const wk_config_item *it);

/** A uint32_t or uint64_t field (by size), widened. */
uint64_t wk_config__get_uint(const void *field, size_t size);
int64_t wk_config__get_i64(const void *field);
bool wk_config__get_bool(const void *field);

/** Whether s is one of the '|'-separated choices. */
bool wk_config__enum_has(const char *choices, const char *s);

/** "debug|info" -> "debug, info", truncated to len. */
void wk_config__enum_list(const char *choices, char *out, size_t len);

/** "string", "uint", "ms", "bytes", "bool" or "enum". */
const char *wk_config__type_name(wk_config_type t);

/** The --help placeholder of a setting: its meta, else the type's ("N", "MS", ...). */
const char *wk_config__type_meta(const wk_config_item *it);

/** What a value of the setting's type looks like, for error messages. */
void wk_config__expected(const wk_config_item *it, char *out, size_t len);

/* ---- sources (wk_config_load.c) ----------------------------------------------------- */

/** Records where setting i got its value (sources may be NULL: nothing recorded). */
__attribute__((format(printf, 4, 5))) void wk_config__set_source(wk_config_sources *sources,
                                                                 size_t i, wk_config_origin origin,
                                                                 const char *fmt, ...);

/** A source as shown to people: "default", "file worker.yaml:3", "env WORKER_X". */
void wk_config__source_text(const wk_config_source *s, char *out, size_t len);

/* ---- the sources' parsers, appending to one problem list ---------------------------- */

/** wk_config_load_file into e (wk_config_yaml.c); returns the problems it added. */
int wk_config__load_file(wk_app_config *cfg, const char *path, wk_config_sources *sources,
                         wk_config__errs *e);

/** The value of `name` in envp ("NAME=VALUE" strings; may be NULL), or NULL
 * (wk_config_env.c). */
const char *wk_config__env_lookup(char *const envp[], const char *name);

/** wk_config_apply_env into e (wk_config_env.c); returns the problems it added. */
int wk_config__apply_env(wk_app_config *cfg, char *const envp[], wk_config_sources *sources,
                         wk_config__errs *e);

/** wk_config_apply_flags into e (wk_config_cli.c); returns the problems it added. */
int wk_config__apply_flags(wk_app_config *cfg, const wk_config_cli *cli, wk_config_sources *sources,
                           wk_config__errs *e);

#endif

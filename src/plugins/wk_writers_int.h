/* wk_writers_int.h: what the writer plugins share (src/plugins/wk_writer_*.c):
 * reading the outputs blob into JSON records, encoding a PluginResult, options and
 * error messages. Not for callers outside the writers. */
#ifndef WK_WRITERS_INT_H
#define WK_WRITERS_INT_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "lib/wk_buf.h"
#include "lib/wk_json_out.h"
#include "plugins/wk_writers.h"

extern const wk_writer wk_writer_file;
extern const wk_writer wk_writer_redis;
extern const wk_writer wk_writer_postgres;

/* ---- errors ---------------------------------------------------------------------- */

/** printf into err (NUL-terminated, truncated to len), with every run of control
 * characters (a backend's multi-line message) turned into one space and trailing
 * spaces dropped. Returns -1, so callers can `return wk_werr(...)`. */
int wk_werr(char *err, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/** Each writer's part of wk_writers_mask_secrets: masks its setting's password. */
void wk_redis_mask_secrets(const wk_writer_settings *s, char *text);
void wk_postgres_mask_secrets(const wk_writer_settings *s, char *text);

/* ---- the outputs ------------------------------------------------------------------ */

/* Walks a task's outputs blob (wk_writer_task.outputs), one CallOutput at a time. */
typedef struct wk_output_iter {
  const wk_output_source *source; /* t->source, or NULL: the blob below */
  const uint8_t *p, *end;
  const char *task_id;
  uint64_t n; /* records produced so far */
} wk_output_iter;

void wk_output_iter_init(wk_output_iter *it, const wk_writer_task *t);

/** The next output as its JSON record (see wk_writers.h), replacing rec's contents
 * (no newline). Returns 1 with the record in rec and the call index in *index, 0 at
 * the end of the blob, or -1 with a message (malformed blob). */
int wk_output_iter_next(wk_output_iter *it, wk_buf *rec, uint32_t *index, char *err, size_t len);

/** Appends a TaskResult field-8 record holding PluginResult{plugin, location, records,
 * bytes} to out. */
void wk_put_plugin_result(wk_buf *out, const char *plugin, const char *location, uint64_t records,
                          uint64_t bytes);

/* ---- options ---------------------------------------------------------------------- */

/** Checks that every option key is `allowed` (a single key; NULL = none allowed).
 * Returns 0 or -1 with "<writer>: unknown option 'k' (known: ...)". */
int wk_check_option_keys(const char *writer, const wk_writer_option *options, size_t n,
                         const char *allowed, char *err, size_t len);

/* wk_option_get (lib/wk_options.h) reads an option's value. */

/* ---- settings --------------------------------------------------------------------- */

uint32_t wk_connect_timeout_ms(const wk_writer_settings *s);
uint32_t wk_io_timeout_ms(const wk_writer_settings *s);

/* ---- JSON pieces (exposed for the tests of this module) --------------------------- */

/* wk_json_put_string (lib/wk_json_out.h) writes a JSON string literal. */

/** Appends standard base64 (with padding) of p[0..n). */
void wk_put_base64(wk_buf *b, const uint8_t *p, size_t n);

#endif

/* wk_log.h: JSON-lines logging on stderr, one object per line:
 *   {"ts":"2026-12-02T09:00:00.123Z","level":"info","event":"task_finished",...}
 * Thread-safe (one write per line, or per held batch of whole lines: wk_log_hold).
 * The cores never log; adapters and the app do. */
#ifndef WK_LOG_H
#define WK_LOG_H

#include <jansson.h>
#include <stdbool.h>

typedef enum wk_log_level {
  WK_LOG_DEBUG = 0,
  WK_LOG_INFO = 1,
  WK_LOG_WARN = 2,
  WK_LOG_ERROR = 3,
} wk_log_level;

/** Sets the lowest level written (default INFO). */
void wk_log_set_level(wk_log_level level);

/** Parses "debug", "info", "warn", "error"; returns -1 for anything else. */
int wk_log_parse_level(const char *s);

/* The lowest level written; read through wk_log_enabled (set with wk_log_set_level). */
extern wk_log_level wk_log_min_level;

/** True when a record at `level` is written: build a costly record only then. */
static inline bool wk_log_enabled(wk_log_level level) { return level >= wk_log_min_level; }

/** Writes one line with `event` and the fields of `fields` (a JSON object, may be
 * NULL), whatever the level. Steals the reference to `fields`. */
void wk_log_json_write(wk_log_level level, const char *event, json_t *fields);

/** Writes one line with `event` and the members of `object` (n bytes of JSON object
 * text, "{...}", as lib/wk_json_out.h writes it), whatever the level. The text is
 * copied; the caller keeps it. */
void wk_log_object_write(wk_log_level level, const char *event, const char *object, size_t n);

/** on: from now on, lines written on the calling thread are kept in a buffer of that
 * thread and written together by wk_log_flush (or at once when 64 KiB are held), so
 * an event loop writes one batch per turn instead of one write per line. Lines stay
 * whole and in order; a crash loses what the thread held. Other threads write each
 * line at once as before. off: writes what is held and frees the thread's buffer (call it
 * before a holding thread ends), then each line at once again. */
void wk_log_hold(bool on);

/** Writes what the calling thread holds (one write; nothing when it holds nothing). */
void wk_log_flush(void);

/** A line with `event` and a "msg" built printf-style, whatever the level. */
void wk_log_write(wk_log_level level, const char *event, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/** Writes one line with `event` and the fields of `fields` (a JSON object, may be NULL;
 * its reference is stolen) when `level` is on. A statement: when the level is off the
 * arguments after `level` are not evaluated, so `fields` (json_pack(...)) is never
 * built. */
#define wk_log_json(level, event, fields)                                                   \
  do {                                                                                      \
    const wk_log_level wk_log_level_ = (level);                                             \
    if (wk_log_enabled(wk_log_level_)) wk_log_json_write(wk_log_level_, (event), (fields)); \
  } while (0)

/** Shorthand: a line with `event` and a "msg" built printf-style, when `level` is on
 * (the format arguments are not evaluated otherwise). */
#define wk_log(level, event, ...)                                                         \
  do {                                                                                    \
    const wk_log_level wk_log_level_ = (level);                                           \
    if (wk_log_enabled(wk_log_level_)) wk_log_write(wk_log_level_, (event), __VA_ARGS__); \
  } while (0)

#endif

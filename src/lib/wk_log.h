/* wk_log.h: JSON-lines logging on stderr, one object per line:
 *   {"ts":"2026-12-02T09:00:00.123Z","level":"info","event":"task_finished",...}
 * Thread-safe (one write per line). The cores never log; adapters and the app do. */
#ifndef WK_LOG_H
#define WK_LOG_H

#include <jansson.h>

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

/** Writes one line with `event` and the fields of `fields` (a JSON object, may be
 * NULL). Steals the reference to `fields`. */
void wk_log_json(wk_log_level level, const char *event, json_t *fields);

/** Shorthand: a line with `event` and a "msg" built printf-style. */
void wk_log(wk_log_level level, const char *event, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif

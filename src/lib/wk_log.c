#include "lib/wk_log.h"

#include <stdarg.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

wk_log_level wk_log_min_level = WK_LOG_INFO;

static const char *level_name(wk_log_level level) {
  switch (level) {
    case WK_LOG_DEBUG: return "debug";
    case WK_LOG_INFO: return "info";
    case WK_LOG_WARN: return "warn";
    case WK_LOG_ERROR: return "error";
  }
  return "info";
}

void wk_log_set_level(wk_log_level level) { wk_log_min_level = level; }

int wk_log_parse_level(const char *s) {
  for (int l = WK_LOG_DEBUG; l <= WK_LOG_ERROR; l++) {
    if (strcmp(s, level_name((wk_log_level)l)) == 0) return l;
  }
  return -1;
}

void wk_log_json_write(wk_log_level level, const char *event, json_t *fields) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  struct tm tm;
  gmtime_r(&ts.tv_sec, &tm);
  char stamp[40];
  size_t n = strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%S", &tm);
  snprintf(stamp + n, sizeof stamp - n, ".%03ldZ", ts.tv_nsec / 1000000);

  json_t *line = json_object();
  json_object_set_new(line, "ts", json_string(stamp));
  json_object_set_new(line, "level", json_string(level_name(level)));
  json_object_set_new(line, "event", json_string(event));
  if (fields) {
    json_object_update(line, fields);
    json_decref(fields);
  }
  char *text = json_dumps(line, JSON_COMPACT);
  json_decref(line);
  if (!text) return;
  size_t len = strlen(text);
  text[len] = '\n'; /* json_dumps leaves room: replace the NUL, write len+1 */
  ssize_t w = write(STDERR_FILENO, text, len + 1);
  (void)w;
  free(text);
}

void wk_log_write(wk_log_level level, const char *event, const char *fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  wk_log_json_write(level, event, json_pack("{s:s}", "msg", msg));
}

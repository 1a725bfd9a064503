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

/* Bytes a holding thread keeps before it writes them without waiting for a flush. */
#define HOLD_MAX ((size_t)64 << 10)

/* Per thread: the held lines (wk_log_hold), and the "YYYY-MM-DDTHH:MM:SS" of the last
 * second a stamp was made for (gmtime and strftime once a second, not once a line). */
static _Thread_local struct {
  bool holding;
  char *buf;
  size_t len, cap;
  time_t stamp_sec;
  char stamp[32];
} tl;

static void write_all(const char *p, size_t n) {
  while (n > 0) {
    ssize_t w = write(STDERR_FILENO, p, n);
    if (w <= 0) return; /* nowhere to report it */
    p += w;
    n -= (size_t)w;
  }
}

void wk_log_hold(bool on) {
  tl.holding = on;
  if (on) return;
  /* the thread may end now: its buffer goes with the lines it held */
  wk_log_flush();
  free(tl.buf);
  tl.buf = NULL;
  tl.cap = 0;
}

void wk_log_flush(void) {
  if (tl.len == 0) return;
  write_all(tl.buf, tl.len);
  tl.len = 0;
}

/* Appends n bytes to the held buffer (grown as needed). */
static void hold_append(const char *p, size_t n) {
  if (tl.len + n > tl.cap) {
    size_t cap = tl.cap ? tl.cap : 4096;
    while (cap < tl.len + n) cap *= 2;
    char *b = realloc(tl.buf, cap);
    if (!b) { /* out of memory: write what is held and this line as they are */
      wk_log_flush();
      write_all(p, n);
      return;
    }
    tl.buf = b;
    tl.cap = cap;
  }
  memcpy(tl.buf + tl.len, p, n);
  tl.len += n;
}

void wk_log_object_write(wk_log_level level, const char *event, const char *object, size_t n) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  if (ts.tv_sec != tl.stamp_sec || tl.stamp[0] == '\0') {
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    strftime(tl.stamp, sizeof tl.stamp, "%Y-%m-%dT%H:%M:%S", &tm);
    tl.stamp_sec = ts.tv_sec;
  }
  /* the head is written here and the object's members after it (its "{" dropped):
   * event names are the program's own identifiers, never text that needs escaping */
  char head[160];
  const char *lv = level_name(level);
  size_t stamp_len = strlen(tl.stamp), lv_len = strlen(lv), ev_len = strlen(event);
  if (stamp_len + lv_len + ev_len + 48 > sizeof head) return;
  size_t hn = 0;
  memcpy(head + hn, "{\"ts\":\"", 7);
  hn += 7;
  memcpy(head + hn, tl.stamp, stamp_len);
  hn += stamp_len;
  long ms = ts.tv_nsec / 1000000;
  head[hn++] = '.';
  head[hn++] = (char)('0' + ms / 100);
  head[hn++] = (char)('0' + ms / 10 % 10);
  head[hn++] = (char)('0' + ms % 10);
  memcpy(head + hn, "Z\",\"level\":\"", 12);
  hn += 12;
  memcpy(head + hn, lv, lv_len);
  hn += lv_len;
  memcpy(head + hn, "\",\"event\":\"", 11);
  hn += 11;
  memcpy(head + hn, event, ev_len);
  hn += ev_len;
  head[hn++] = '"';
  /* object is "{}" or "{...}": after the head, "}" or ",...}" */
  bool members = n > 2 && object[0] == '{';
  const char *rest = members ? object + 1 : "}";
  size_t rn = members ? n - 1 : 1;
  if (tl.holding) {
    hold_append(head, hn);
    if (members) hold_append(",", 1);
    hold_append(rest, rn);
    hold_append("\n", 1);
    if (tl.len >= HOLD_MAX) wk_log_flush();
  } else {
    /* one write per line: lines of several threads never interleave */
    size_t len = hn + 1 + rn + 1;
    char stack[2048];
    char *line = len <= sizeof stack ? stack : malloc(len);
    if (line) {
      size_t at = hn;
      memcpy(line, head, at);
      if (members) line[at++] = ',';
      memcpy(line + at, rest, rn);
      at += rn;
      line[at++] = '\n';
      write_all(line, at);
      if (line != stack) free(line);
    }
  }
}

void wk_log_json_write(wk_log_level level, const char *event, json_t *fields) {
  char *text = NULL;
  if (fields) {
    text = json_dumps(fields, JSON_COMPACT);
    json_decref(fields);
    if (!text) return;
  }
  if (text) {
    wk_log_object_write(level, event, text, strlen(text));
  } else {
    wk_log_object_write(level, event, "{}", 2);
  }
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

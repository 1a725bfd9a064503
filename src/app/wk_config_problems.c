/* wk_config_problems.c: problems as lines appended to the caller's buffer, counted
 * (warnings are lines too, not counted). See wk_config_int.h. */
#include "app/wk_config_int.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

wk_config__errs wk_config__errs_init(char *buf, size_t len) {
  if (buf && len) buf[0] = '\0';
  return (wk_config__errs){.buf = buf, .len = len, .n = 0};
}

static void vappend(wk_config__errs *e, const char *fmt, va_list ap)
    __attribute__((format(printf, 2, 0)));
static void vappend(wk_config__errs *e, const char *fmt, va_list ap) {
  if (!e->buf || e->len == 0) return;
  size_t used = strlen(e->buf);
  if (used + 1 >= e->len) return;
  size_t start = used;
  vsnprintf(e->buf + used, e->len - used, fmt, ap);
  used = strlen(e->buf);
  /* values echoed from files, the environment or flags may hold control bytes: keep
   * one problem on one line, and no terminal escapes */
  for (size_t i = start; i < used; i++) {
    unsigned char ch = (unsigned char)e->buf[i];
    if (ch < 0x20 || ch == 0x7f) e->buf[i] = '?';
  }
  if (used + 1 < e->len) {
    e->buf[used] = '\n';
    e->buf[used + 1] = '\0';
  } else {
    e->buf[e->len - 2] = '\n'; /* truncated: still one line per problem */
  }
}

/** One problem: a line, counted. */
__attribute__((format(printf, 2, 3))) void wk_config__fail(wk_config__errs *e, const char *fmt,
                                                           ...) {
  va_list ap;
  va_start(ap, fmt);
  vappend(e, fmt, ap);
  va_end(ap);
  e->n++;
}

/** A warning: a line, not counted. */
__attribute__((format(printf, 2, 3))) void wk_config__warn(wk_config__errs *e, const char *fmt,
                                                           ...) {
  va_list ap;
  va_start(ap, fmt);
  vappend(e, fmt, ap);
  va_end(ap);
}

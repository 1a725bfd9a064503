/* wk_err.c: see wk_err.h. */
#include "lib/wk_err.h"

#include <stdio.h>

void wk_errf(char *err, size_t err_len, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  wk_verrf(err, err_len, fmt, ap);
  va_end(ap);
}

void wk_verrf(char *err, size_t err_len, const char *fmt, va_list ap) {
  if (!err || err_len == 0) return;
  (void)vsnprintf(err, err_len, fmt, ap);
}

/* wk_err.c: see wk_err.h. */
#include "lib/wk_err.h"

#include <stdarg.h>
#include <stdio.h>

void wk_errf(char *err, size_t err_len, const char *fmt, ...) {
  if (!err || err_len == 0) return;
  va_list ap;
  va_start(ap, fmt);
  (void)vsnprintf(err, err_len, fmt, ap);
  va_end(ap);
}

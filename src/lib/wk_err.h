/* wk_err.h: writing an error message into a caller's buffer. The one convention of
 * the adapters: a function that can fail takes `char *err, size_t err_len`, returns its
 * failure as a value (-1, NULL, false or a negative code) and puts the reason in err. */
#ifndef WK_ERR_H
#define WK_ERR_H

#include <stdarg.h>
#include <stddef.h>

/** Formats into err (err_len bytes, always NUL-terminated, truncated to fit); does
 * nothing when err is NULL or err_len is 0. */
__attribute__((format(printf, 3, 4))) void wk_errf(char *err, size_t err_len, const char *fmt, ...);

/** wk_errf with a va_list, for helpers that take a format themselves; `ap` is consumed. */
__attribute__((format(printf, 3, 0))) void wk_verrf(char *err, size_t err_len, const char *fmt,
                                                    va_list ap);

#endif

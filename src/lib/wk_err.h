/* wk_err.h: writing an error message into a caller's buffer. */
#ifndef WK_ERR_H
#define WK_ERR_H

#include <stddef.h>

/** Formats into err (err_len bytes, always NUL-terminated, truncated to fit); does
 * nothing when err is NULL or err_len is 0. */
__attribute__((format(printf, 3, 4))) void wk_errf(char *err, size_t err_len, const char *fmt, ...);

#endif

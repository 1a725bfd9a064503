/* wk_str.h: small string helpers for hot paths. */
#ifndef WK_STR_H
#define WK_STR_H

#include <stddef.h>
#include <string.h>

/** Copies the C string src into dst of `size` bytes (size > 0), cut to size - 1 bytes
 * and always terminated; returns the bytes copied. What snprintf(dst, size, "%s", src)
 * does, without parsing a format (it shows in the per-task profile). */
static inline size_t wk_str_copy(char *dst, size_t size, const char *src) {
  const char *end = memchr(src, '\0', size - 1);
  size_t n = end != NULL ? (size_t)(end - src) : size - 1;
  memcpy(dst, src, n);
  dst[n] = '\0';
  return n;
}

#endif

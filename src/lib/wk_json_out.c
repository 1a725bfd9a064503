#include "lib/wk_json_out.h"

#include <string.h>

#include "lib/wk_assert.h"

size_t wk_utf8_len(const uint8_t *p, size_t n) {
  uint8_t c = p[0];
  size_t need;
  uint32_t min, cp;
  if (c < 0x80) return 1;
  if ((c & 0xe0) == 0xc0) {
    need = 2, min = 0x80, cp = c & 0x1fu;
  } else if ((c & 0xf0) == 0xe0) {
    need = 3, min = 0x800, cp = c & 0x0fu;
  } else if ((c & 0xf8) == 0xf0) {
    need = 4, min = 0x10000, cp = c & 0x07u;
  } else {
    return 0;
  }
  if (n < need) return 0;
  for (size_t i = 1; i < need; i++) {
    if ((p[i] & 0xc0) != 0x80) return 0;
    cp = (cp << 6) | (p[i] & 0x3fu);
  }
  if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
  return need;
}

/* Nonzero when any of the 8 bytes of x needs more than copying: a control byte
 * (< 0x20), '"', '\\' or a byte of a multi-byte UTF-8 sequence (>= 0x80, checked).
 * Each test is the classic "has a byte below / equal to" word trick: exact as a
 * whole-word answer, which is all it is used for. */
static inline uint64_t word_needs_care(uint64_t x) {
  const uint64_t ones = 0x0101010101010101u, high = 0x8080808080808080u;
  uint64_t quote = x ^ (ones * '"'), backslash = x ^ (ones * '\\');
  uint64_t control = (x - ones * 0x20) & ~x;
  uint64_t is_quote = (quote - ones) & ~quote;
  uint64_t is_backslash = (backslash - ones) & ~backslash;
  return (x | control | is_quote | is_backslash) & high;
}

/* Is c copied as it is? */
static inline bool is_plain(uint8_t c) { return c >= 0x20 && c < 0x80 && c != '"' && c != '\\'; }

/* Writes the one character at p[*i] (n bytes in all) escaped at o + *w, advancing both. */
static void put_char(const uint8_t *p, size_t n, size_t *i, uint8_t *o, size_t *w) {
  static const char hex[] = "0123456789ABCDEF"; /* as jansson writes them */
  uint8_t c = p[*i];
  if (is_plain(c)) {
    o[(*w)++] = c;
    (*i)++;
    return;
  }
  if (c >= 0x80) {
    size_t l = wk_utf8_len(p + *i, n - *i);
    if (l == 0) {
      memcpy(o + *w, "\xef\xbf\xbd", 3); /* U+FFFD, 3 bytes for 1: within the room */
      *w += 3;
      (*i)++;
    } else {
      memcpy(o + *w, p + *i, l);
      *w += l;
      *i += l;
    }
    return;
  }
  (*i)++;
  o[(*w)++] = '\\';
  switch (c) {
    case '"': o[(*w)++] = '"'; break;
    case '\\': o[(*w)++] = '\\'; break;
    case '\n': o[(*w)++] = 'n'; break;
    case '\r': o[(*w)++] = 'r'; break;
    case '\t': o[(*w)++] = 't'; break;
    case '\b': o[(*w)++] = 'b'; break;
    case '\f': o[(*w)++] = 'f'; break;
    default:
      o[(*w)++] = 'u';
      o[(*w)++] = '0';
      o[(*w)++] = '0';
      o[(*w)++] = (uint8_t)hex[c >> 4];
      o[(*w)++] = (uint8_t)hex[c & 15];
  }
}

void wk_json_put_string(wk_buf *b, const char *s, size_t n) {
  const uint8_t *p = (const uint8_t *)s;
  /* room for the worst case (every byte a \u00XX escape) taken once, then filled */
  uint8_t *o = wk_buf_reserve(b, 6 * n + 2);
  size_t w = 0, i = 0;
  o[w++] = '"';
  /* eight plain bytes (the common case: ids, names) go across as one word */
  while (n - i >= 8) {
    uint64_t x;
    memcpy(&x, p + i, 8);
    if (word_needs_care(x) == 0) {
      memcpy(o + w, &x, 8);
      w += 8;
      i += 8;
      continue;
    }
    size_t stop = i + 8;
    while (i < stop) put_char(p, n, &i, o, &w); /* may run past stop: a whole sequence */
  }
  while (i < n) {
    if (is_plain(p[i])) {
      o[w++] = p[i++];
    } else {
      put_char(p, n, &i, o, &w);
    }
  }
  o[w++] = '"';
  b->len += w;
}

void wk_json_obj_begin(wk_json_obj *o, wk_buf *out) {
  o->out = out;
  o->depth = 1;
  o->has[0] = false;
  wk_buf_append(out, "{", 1);
}

bool wk_json__is_identifier(const char *key) {
  if (key[0] == '\0') return false;
  for (const char *c = key; *c; c++) {
    bool ok = (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
              *c == '_';
    if (!ok) return false;
  }
  return true;
}

/* Writes u in decimal at p (room for 20 bytes); returns its length. Two digits a step
 * (task records carry a dozen 13-digit millisecond times). */
static size_t put_decimal(uint8_t *p, uint64_t u) {
  static const char pairs[201] =
      "00010203040506070809101112131415161718192021222324252627282930313233343536373839"
      "40414243444546474849505152535455565758596061626364656667686970717273747576777879"
      "8081828384858687888990919293949596979899";
  uint8_t digits[20]; /* filled from the end */
  size_t at = sizeof digits;
  while (u >= 100) {
    at -= 2;
    memcpy(digits + at, pairs + (u % 100) * 2, 2);
    u /= 100;
  }
  if (u >= 10) {
    at -= 2;
    memcpy(digits + at, pairs + u * 2, 2);
  } else {
    digits[--at] = (uint8_t)('0' + u);
  }
  size_t n = sizeof digits - at;
  memcpy(p, digits + at, n);
  return n;
}

size_t wk_json__decimal(uint8_t *p, int64_t v) {
  size_t w = 0;
  if (v < 0) p[w++] = '-';
  return w + put_decimal(p + w, v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v);
}

void wk_json_obj_end(wk_json_obj *o) {
  WK_ASSERT(o->depth > 0);
  o->depth--;
  wk_buf_append(o->out, "}", 1);
}

/* wk_json_out.h: JSON text written straight into a wk_buf, for records built on a hot
 * path (log lines, usage records, writer records): no tree of values is built and
 * nothing is allocated beyond the buffer's growth. Strings are escaped as jansson's
 * compact dump escapes them; bytes that are not valid UTF-8 become U+FFFD, so the text
 * is always valid JSON whatever it was given. */
#ifndef WK_JSON_OUT_H
#define WK_JSON_OUT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "lib/wk_assert.h"
#include "lib/wk_buf.h"

/** Length of the well-formed UTF-8 sequence at p (n > 0 bytes left): 1 to 4, or 0 when
 * p does not begin one (overlong forms, surrogates, code points above U+10FFFF and cut
 * sequences included). */
size_t wk_utf8_len(const uint8_t *p, size_t n);

/** Appends s (n bytes) as a JSON string literal, quotes included. */
void wk_json_put_string(wk_buf *b, const char *s, size_t n);

/* An object being written: members in the order they are put, objects nested up to
 * WK_JSON_OBJ_DEPTH deep. Keys are the program's own identifiers (letters, digits,
 * '_'), written as they are: never pass text from outside as a key. */
#define WK_JSON_OBJ_DEPTH 8
typedef struct wk_json_obj {
  wk_buf *out;
  uint32_t depth;              /* objects open */
  bool has[WK_JSON_OBJ_DEPTH]; /* has[d]: the object open at depth d has a member */
} wk_json_obj;

/** Starts an object at the end of `out` (which the writer borrows until the object is
 * closed). */
void wk_json_obj_begin(wk_json_obj *o, wk_buf *out);

/* The members' writers are inline: a key is a literal, so its length and its copy
 * fold where they are inlined (a record of ~45 members spent ~40% of its instructions
 * on the out-of-line key writer). The wk_json__ names are theirs alone. */
bool wk_json__is_identifier(const char *key);
size_t wk_json__decimal(uint8_t *p, int64_t v);

/* Writes the separator and "key": of the next member, with room for `extra` more
 * bytes after it; returns where the value goes (len counts the key). */
static inline uint8_t *wk_json__key(wk_json_obj *o, const char *key, size_t n, size_t extra) {
  WK_ASSERT(o->depth > 0);
  WK_DEBUG_ASSERT(wk_json__is_identifier(key) && strlen(key) == n);
  bool *has = &o->has[o->depth - 1];
  uint8_t *p = wk_buf_reserve(o->out, n + 4 + extra);
  size_t w = 0;
  if (*has) p[w++] = ',';
  *has = true;
  p[w++] = '"';
  memcpy(p + w, key, n);
  w += n;
  p[w++] = '"';
  p[w++] = ':';
  o->out->len += w;
  return p + w;
}

/** Puts "key":"s" (s a NUL-terminated string; NULL puts ""). */
static inline void wk_json_obj_str(wk_json_obj *o, const char *key, const char *s) {
  (void)wk_json__key(o, key, strlen(key), 0);
  wk_json_put_string(o->out, s ? s : "", s ? strlen(s) : 0);
}
/** Puts "key":<v>. */
static inline void wk_json_obj_int(wk_json_obj *o, const char *key, int64_t v) {
  uint8_t *p = wk_json__key(o, key, strlen(key), 21); /* a sign and 20 digits */
  o->out->len += wk_json__decimal(p, v);
}
/** Puts "key":true or false. */
static inline void wk_json_obj_bool(wk_json_obj *o, const char *key, bool v) {
  (void)wk_json__key(o, key, strlen(key), 0);
  wk_buf_append(o->out, v ? "true" : "false", v ? 4 : 5);
}
/** Opens an object as the value of "key"; close it with wk_json_obj_end. Aborts when
 * nested deeper than WK_JSON_OBJ_DEPTH (a program error). */
static inline void wk_json_obj_open(wk_json_obj *o, const char *key) {
  WK_ASSERT(o->depth < WK_JSON_OBJ_DEPTH);
  (void)wk_json__key(o, key, strlen(key), 0);
  wk_buf_append(o->out, "{", 1);
  o->has[o->depth++] = false;
}
/** Closes the innermost open object (the outermost one last). */
void wk_json_obj_end(wk_json_obj *o);

#endif

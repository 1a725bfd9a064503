/* wk_mask.c: secrets hidden in text shown to people. See wk_mask.h. */
#include "lib/wk_mask.h"

#include <stdbool.h>
#include <string.h>

/* Appends n bytes of s to out[*pos..len), always leaving it NUL-terminated. */
static void put(char *out, size_t len, size_t *pos, const char *s, size_t n) {
  if (len == 0) return;
  for (size_t i = 0; i < n && *pos + 1 < len; i++) out[(*pos)++] = s[i];
  out[*pos] = '\0';
}

static bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

/* The URL form: "scheme://[userinfo@]host[/path][?query]". */
static void mask_url(const char *in, const char *authority, char *out, size_t len) {
  size_t pos = 0;
  put(out, len, &pos, in, (size_t)(authority - in));
  size_t auth_len = strcspn(authority, "/?#");
  const char *at = NULL;
  for (size_t i = 0; i < auth_len; i++) {
    if (authority[i] == '@') at = authority + i; /* the last '@' ends the userinfo */
  }
  const char *rest = authority;
  if (at) {
    const char *colon = memchr(authority, ':', (size_t)(at - authority));
    if (colon) {
      put(out, len, &pos, authority, (size_t)(colon + 1 - authority)); /* "user:" */
    }
    put(out, len, &pos, WK_MASK, strlen(WK_MASK));
    rest = at;
  }
  /* the query's password=... parameters */
  const char *q = strchr(rest, '?');
  if (!q) {
    put(out, len, &pos, rest, strlen(rest));
    return;
  }
  put(out, len, &pos, rest, (size_t)(q + 1 - rest));
  const char *p = q + 1;
  while (*p) {
    size_t n = strcspn(p, "&");
    static const char key[] = "password=";
    if (n >= sizeof key - 1 && strncmp(p, key, sizeof key - 1) == 0) {
      put(out, len, &pos, key, sizeof key - 1);
      put(out, len, &pos, WK_MASK, strlen(WK_MASK));
    } else {
      put(out, len, &pos, p, n);
    }
    p += n;
    if (*p == '&') put(out, len, &pos, p++, 1);
  }
}

/* The key/value form: "key = value key='quoted \' value' ...". */
static void mask_keyvalue(const char *in, char *out, size_t len) {
  size_t pos = 0;
  const char *p = in;
  while (*p) {
    const char *start = p;
    while (is_space(*p)) p++;
    const char *key = p;
    while (*p && *p != '=' && !is_space(*p)) p++;
    size_t key_len = (size_t)(p - key);
    while (is_space(*p)) p++;
    if (*p != '=') { /* not key=value: copy the rest as it is */
      put(out, len, &pos, start, strlen(start));
      return;
    }
    p++;
    while (is_space(*p)) p++;
    put(out, len, &pos, start, (size_t)(p - start)); /* up to the value */
    const char *value = p;
    if (*p == '\'') {
      for (p++; *p && *p != '\''; p++) {
        if (*p == '\\' && p[1]) p++;
      }
      if (*p == '\'') p++;
    } else {
      while (*p && !is_space(*p)) {
        if (*p == '\\' && p[1]) p++;
        p++;
      }
    }
    if (key_len == strlen("password") && strncmp(key, "password", key_len) == 0) {
      put(out, len, &pos, WK_MASK, strlen(WK_MASK));
    } else {
      put(out, len, &pos, value, (size_t)(p - value));
    }
  }
}

void wk_mask_credentials(const char *in, char *out, size_t len) {
  if (len == 0) return;
  out[0] = '\0';
  const char *sep = strstr(in, "://");
  /* a URL starts with its scheme: letters, digits, '+', '-', '.' */
  if (sep && sep > in &&
      strspn(in, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789+-.") ==
          (size_t)(sep - in)) {
    mask_url(in, sep + 3, out, len);
  } else {
    mask_keyvalue(in, out, len);
  }
}

void wk_mask_value(char *text, const char *secret) {
  size_t n = secret ? strlen(secret) : 0;
  if (!text || n < WK_MASK_VALUE_MIN) return;
  const size_t m = strlen(WK_MASK); /* n >= 4 > m: the text only shrinks */
  char *w = text;
  for (const char *r = text; *r;) {
    if (strncmp(r, secret, n) == 0) {
      memcpy(w, WK_MASK, m);
      w += m;
      r += n;
    } else {
      *w++ = *r++;
    }
  }
  *w = '\0';
}

/* wk_base64.c: see wk_base64.h. */
#include "lib/wk_base64.h"

#include <stdint.h>
#include <stdlib.h>

#include "lib/wk_alloc.h"

static const char k_alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

size_t wk_base64_encoded_len(size_t len) { return (len + 2) / 3 * 4; }

char *wk_base64_encode(const void *data, size_t len) {
  const unsigned char *in = data;
  char *out = wk_xmalloc(wk_base64_encoded_len(len) + 1);
  size_t o = 0;
  size_t i = 0;
  for (; i + 3 <= len; i += 3) {
    uint32_t v = (uint32_t)in[i] << 16 | (uint32_t)in[i + 1] << 8 | (uint32_t)in[i + 2];
    out[o++] = k_alphabet[(v >> 18) & 63u];
    out[o++] = k_alphabet[(v >> 12) & 63u];
    out[o++] = k_alphabet[(v >> 6) & 63u];
    out[o++] = k_alphabet[v & 63u];
  }
  size_t rest = len - i;
  if (rest > 0) {
    uint32_t v = (uint32_t)in[i] << 16;
    if (rest == 2) v |= (uint32_t)in[i + 1] << 8;
    out[o++] = k_alphabet[(v >> 18) & 63u];
    out[o++] = k_alphabet[(v >> 12) & 63u];
    out[o++] = rest == 2 ? k_alphabet[(v >> 6) & 63u] : '=';
    out[o++] = '=';
  }
  out[o] = '\0';
  return out;
}

/* The value of one character, or -1 when it is not in the alphabet `flags` allow. */
static int char_value(unsigned char c, unsigned flags) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  if (flags & WK_BASE64_URL_SAFE) {
    if (c == '-') return 62;
    if (c == '_') return 63;
  }
  return -1;
}

wk_base64_rc wk_base64_decode(const char *text, size_t len, unsigned flags, void *out,
                              size_t out_cap, size_t *decoded) {
  unsigned char *dst = out;
  size_t n = 0;
  uint32_t acc = 0;
  unsigned bits = 0;
  size_t pad = 0;
  for (size_t i = 0; i < len; i++) {
    unsigned char c = (unsigned char)text[i];
    if ((flags & WK_BASE64_SKIP_SPACE) && (c == ' ' || c == '\t' || c == '\r' || c == '\n')) {
      continue;
    }
    if (c == '=') {
      pad++;
      continue;
    }
    int v = char_value(c, flags);
    if (v < 0 || pad > 0) return WK_BASE64_E_CHAR; /* not base64, or data after a '=' */
    acc = acc << 6 | (uint32_t)v;
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      if (n < out_cap) dst[n] = (unsigned char)((acc >> bits) & 0xffu);
      n++;
    }
  }
  if ((flags & WK_BASE64_PAD_MAX_2) && pad > 2) return WK_BASE64_E_LENGTH;
  if (bits >= 6) return WK_BASE64_E_LENGTH; /* one character left over: 4k+1 characters */
  *decoded = n;
  return WK_BASE64_OK;
}

char *wk_base64_decode_alloc(const char *text, size_t len, unsigned flags, size_t *out_len) {
  char *out = wk_xmalloc(len / 4 * 3 + 3);
  size_t n = 0;
  if (wk_base64_decode(text, len, flags, out, len / 4 * 3 + 2, &n) != WK_BASE64_OK) {
    free(out);
    return NULL;
  }
  out[n] = '\0';
  *out_len = n;
  return out;
}

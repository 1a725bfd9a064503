/* wk_base64.h: base64 (RFC 4648) encoding and decoding, the one copy for the project.
 *
 * The encoder writes the standard alphabet with '=' padding. The decoder's leniency is
 * chosen by each caller with flags, because the formats it reads differ:
 *  - etcd's JSON gateway (wk_etcd.c): WK_BASE64_URL_SAFE; any number of trailing '='.
 *  - PEM bodies (wk_pem.c): WK_BASE64_SKIP_SPACE | WK_BASE64_PAD_MAX_2.
 * In every mode '=' may only end the text, and a text whose length (not counting
 * padding and skipped whitespace) is 1 more than a multiple of 4 is refused; the unused
 * low bits of the last character are not checked. */
#ifndef WK_BASE64_H
#define WK_BASE64_H

#include <stddef.h>

enum {
  WK_BASE64_URL_SAFE = 1u << 0,   /* also accept '-' for '+' and '_' for '/' */
  WK_BASE64_SKIP_SPACE = 1u << 1, /* ignore ' ', '\t', '\r', '\n' anywhere */
  WK_BASE64_PAD_MAX_2 = 1u << 2,  /* refuse more than two '=' */
};

/** Length of the encoding of `len` bytes, padding included, NUL not included. */
size_t wk_base64_encoded_len(size_t len);

/** Encodes `len` bytes at `data` (standard alphabet, '=' padding) into a new
 * NUL-terminated string; the caller frees it with free(). Aborts when out of memory. */
char *wk_base64_encode(const void *data, size_t len);

/* Why a text is not base64. */
typedef enum wk_base64_rc {
  WK_BASE64_OK = 0,
  WK_BASE64_E_CHAR = -1,   /* a character outside the alphabet, or data after a '=' */
  WK_BASE64_E_LENGTH = -2, /* 4k+1 characters, or more than two '=' (PAD_MAX_2) */
} wk_base64_rc;

/** Decodes text[0..len) under `flags` (WK_BASE64_*). Writes the first `out_cap` decoded
 * bytes to `out` (NULL with out_cap 0 only counts) and sets *decoded to the full decoded
 * length. Returns WK_BASE64_OK, or why the text is not base64 (the first character
 * error found while scanning, else the length error); *decoded is then unspecified. */
wk_base64_rc wk_base64_decode(const char *text, size_t len, unsigned flags, void *out,
                              size_t out_cap, size_t *decoded);

/** wk_base64_decode into a new buffer with a NUL after the decoded bytes (so text decodes
 * to a C string); *out_len is the decoded length. Returns NULL when the text is not base64;
 * the caller frees the buffer with free(). Aborts when out of memory. */
char *wk_base64_decode_alloc(const char *text, size_t len, unsigned flags, size_t *out_len);

#endif

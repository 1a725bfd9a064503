/* wk_mask.h: secrets hidden in text shown to people (--print-config, logs, errors). */
#ifndef WK_MASK_H
#define WK_MASK_H

#include <stddef.h>

/** What a masked secret is shown as. */
#define WK_MASK "***"

/** Copies the connection string `in` into out (NUL-terminated, truncated to len) with every
 * password replaced by WK_MASK. Understands both forms libpq and Redis URLs use:
 *  - a URL "scheme://user:PASSWORD@host/..." (the userinfo's password; a userinfo
 *    without ':' is a Redis-style "scheme://PASSWORD@host" and is masked whole), and
 *    query parameters "password=..." up to the next '&';
 *  - libpq key/value text "host=db password=PASSWORD" (spaces allowed around '=', the
 *    value plain or single-quoted with backslash escapes).
 * Text with no password is copied as it is. Never fails; allocates nothing. */
void wk_mask_credentials(const char *in, char *out, size_t len);

/** Replaces, in place, every occurrence of `secret` in the NUL-terminated `text` with
 * WK_MASK: the last line of defence for a message built by code that may quote a
 * secret (a library's error text). A NULL or shorter than WK_MASK_VALUE_MIN bytes
 * secret is left alone (masking "ab" everywhere would garble the message and hide
 * nothing). Never fails; allocates nothing. */
void wk_mask_value(char *text, const char *secret);
#define WK_MASK_VALUE_MIN 4

#endif

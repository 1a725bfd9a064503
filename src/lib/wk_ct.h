/* wk_ct.h: comparing secrets (bearer tokens, session cookies) in constant time. */
#ifndef WK_CT_H
#define WK_CT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/** True when got[0..got_len) equals secret[0..secret_len). The time taken depends on
 * secret_len only, never on got's length or on where the bytes differ. */
bool wk_ct_equal(const char *secret, size_t secret_len, const uint8_t *got, size_t got_len);

#endif

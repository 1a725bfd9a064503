/* wk_ct.c: see wk_ct.h. */
#include "lib/wk_ct.h"

bool wk_ct_equal(const char *secret, size_t secret_len, const uint8_t *got, size_t got_len) {
  volatile unsigned diff = got_len == secret_len ? 0u : 1u;
  for (size_t i = 0; i < secret_len; i++) {
    unsigned char g = i < got_len ? got[i] : 0;
    diff |= (unsigned)(g ^ (unsigned char)secret[i]);
  }
  return diff == 0;
}

/* wk_rng.c: xoshiro256** (Blackman and Vigna, public domain reference), state
 * filled by splitmix64 so that every seed, 0 included, gives a non-zero state. */
#include "lib/wk_rng.h"

#include "lib/wk_assert.h"

static uint64_t rotl(uint64_t x, unsigned k) { return (x << k) | (x >> (64u - k)); }

static uint64_t splitmix64(uint64_t *x) {
  uint64_t z = (*x += UINT64_C(0x9E3779B97F4A7C15));
  z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
  z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
  return z ^ (z >> 31);
}

void wk_rng_seed(wk_rng *r, uint64_t seed) {
  uint64_t x = seed;
  for (unsigned i = 0; i < 4; i++) r->s[i] = splitmix64(&x);
  /* splitmix64 is a bijection of distinct counters: four zero outputs cannot happen */
  WK_ASSERT((r->s[0] | r->s[1] | r->s[2] | r->s[3]) != 0);
}

uint64_t wk_rng_next(wk_rng *r) {
  uint64_t *s = r->s;
  uint64_t result = rotl(s[1] * 5u, 7) * 9u;
  uint64_t t = s[1] << 17;
  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = rotl(s[3], 45);
  return result;
}

uint64_t wk_rng_below(wk_rng *r, uint64_t n) {
  if (n == 0) return 0;
  /* reject the top partial stripe: 2^64 mod n values that would bias the modulo */
  uint64_t threshold = (0 - n) % n;
  for (;;) {
    uint64_t x = wk_rng_next(r);
    if (x >= threshold) return x % n;
  }
}

int64_t wk_rng_range(wk_rng *r, int64_t lo, int64_t hi) {
  WK_ASSERT(lo <= hi);
  uint64_t span = (uint64_t)hi - (uint64_t)lo; /* two's complement: exact for lo <= hi */
  uint64_t off = span == UINT64_MAX ? wk_rng_next(r) : wk_rng_below(r, span + 1u);
  return (int64_t)((uint64_t)lo + off);
}

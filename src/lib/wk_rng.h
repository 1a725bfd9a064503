/* wk_rng.h: a small seeded pseudo-random generator (xoshiro256**, seeded through
 * splitmix64). Pure and deterministic: the same seed gives the same sequence on every
 * platform and build, so a simulation or a test that fixes the seed replays exactly.
 * Not for secrets. The caller owns the struct; there is nothing to free. */
#ifndef WK_RNG_H
#define WK_RNG_H

#include <stdint.h>

typedef struct wk_rng {
  uint64_t s[4];
} wk_rng;

/** Seeds `r` from one 64-bit value (any value, 0 included). */
void wk_rng_seed(wk_rng *r, uint64_t seed);

/** The next 64 uniformly distributed bits. */
uint64_t wk_rng_next(wk_rng *r);

/** Uniform in [0, n) without modulo bias; n == 0 returns 0. */
uint64_t wk_rng_below(wk_rng *r, uint64_t n);

/** Uniform in [lo, hi] (inclusive); requires lo <= hi. */
int64_t wk_rng_range(wk_rng *r, int64_t lo, int64_t hi);

#endif

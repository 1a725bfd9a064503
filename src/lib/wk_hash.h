/* wk_hash.h: a fast 64-bit hash of bytes, for hash tables and request digests. */
#ifndef WK_HASH_H
#define WK_HASH_H

#include <stddef.h>
#include <stdint.h>

/** Hashes `len` bytes at `data` with `seed`. Deterministic across runs and builds
 * (little-endian reads), so digests can be compared between processes. */
uint64_t wk_hash64(const void *data, size_t len, uint64_t seed);

/** Mixes a 64-bit value into a running hash (for digests over several fields). */
uint64_t wk_hash64_mix(uint64_t h, uint64_t v);

#endif

/* test_hash.c: the 64-bit hash of lib/wk_hash.h. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "lib/wk_hash.h"

static uint64_t hs(const char *s, uint64_t seed) { return wk_hash64(s, strlen(s), seed); }

/* Digests are compared between processes: these values must never change. */
static void test_known_values(void **state) {
  (void)state;
  assert_int_equal(hs("a", 0), 0xe83e7c0b22b013a4ull);
  assert_int_equal(hs("abc", 0), 0x17c7941249635e5cull);
  assert_int_equal(hs("01234567", 0), 0x260d6f1b03a1bd6aull);
  assert_int_equal(hs("0123456789abcdef", 0), 0xee2ef39ce41b39a0ull);
  assert_int_equal(hs("task-42", 0), 0x1253bbe129a825bcull);
  assert_int_equal(hs("abc", 1), 0x590226020213d454ull);
  assert_int_equal(wk_hash64_mix(0, 0), 0x0000000052dce729ull);
  assert_int_equal(wk_hash64_mix(1, 2), 0x29e3799865ee0dacull);
}

static void test_deterministic(void **state) {
  (void)state;
  uint8_t buf[300];
  for (size_t i = 0; i < sizeof buf; i++) buf[i] = (uint8_t)(i * 31u + 7u);
  for (size_t len = 0; len <= sizeof buf; len += 13) {
    assert_int_equal(wk_hash64(buf, len, 99), wk_hash64(buf, len, 99));
  }
}

static void test_seed_matters(void **state) {
  (void)state;
  char s[16];
  for (int i = 0; i < 200; i++) {
    memset(s, 0, sizeof s);
    s[0] = (char)('a' + i % 26);
    s[1] = (char)('a' + i / 26);
    uint64_t a = wk_hash64(s, 2, 0), b = wk_hash64(s, 2, 1),
             c = wk_hash64(s, 2, 0x8000000000000000ull);
    assert_int_not_equal(a, b);
    assert_int_not_equal(a, c);
    assert_int_not_equal(b, c);
  }
  /* even the empty input */
  assert_int_not_equal(wk_hash64("", 0, 1), wk_hash64("", 0, 2));
}

static void test_length_matters(void **state) {
  (void)state;
  /* all-zero inputs of every length up to 64 hash differently (trailing zero bytes
   * are not the same as a shorter input) */
  uint8_t zeros[64];
  memset(zeros, 0, sizeof zeros);
  uint64_t h[65];
  for (size_t len = 0; len <= 64; len++) {
    h[len] = wk_hash64(zeros, len, 7);
    for (size_t j = 0; j < len; j++) assert_int_not_equal(h[len], h[j]);
  }
  assert_int_not_equal(wk_hash64("a\0", 2, 0), wk_hash64("a", 1, 0));
}

static void test_alignment_does_not_matter(void **state) {
  (void)state;
  static const char text[] = "The quick brown fox jumps over the lazy dog";
  const size_t len = sizeof text - 1;
  uint64_t want = wk_hash64(text, len, 5);
  uint8_t buf[sizeof text + 8];
  for (size_t off = 0; off < 8; off++) {
    memset(buf, 0xee, sizeof buf);
    memcpy(buf + off, text, len);
    assert_int_equal(wk_hash64(buf + off, len, 5), want);
  }
}

static int popcount64(uint64_t v) {
  int n = 0;
  while (v) {
    v &= v - 1;
    n++;
  }
  return n;
}

static uint64_t lcg(uint64_t *s) {
  *s = *s * 6364136223846793005ull + 1442695040888963407ull;
  return *s;
}

/* Output bits that change when bit `bit` of in[0..len) flips (in is restored). */
static int flip_distance(uint8_t *in, size_t len, unsigned bit, uint64_t seed, uint64_t base) {
  in[bit / 8] ^= (uint8_t)(1u << (bit % 8));
  int d = popcount64(base ^ wk_hash64(in, len, seed));
  in[bit / 8] ^= (uint8_t)(1u << (bit % 8));
  return d;
}

static void test_avalanche(void **state) {
  (void)state;
  uint64_t seed = 42;
  long total = 0, samples = 0;
  int worst = 64;
  for (int round = 0; round < 200; round++) {
    uint8_t in[20];
    for (size_t i = 0; i < sizeof in; i++) in[i] = (uint8_t)(lcg(&seed) >> 56);
    uint64_t base = wk_hash64(in, sizeof in, 0);
    for (unsigned bit = 0; bit < 8 * sizeof in; bit++) {
      int d = flip_distance(in, sizeof in, bit, 0, base);
      total += d;
      samples++;
      if (d < worst) worst = d;
    }
  }
  /* 32000 flips: the mean of Binomial(64, 1/2) is 32 with a standard error of 0.02 */
  double mean = (double)total / (double)samples;
  if (mean < 31.5 || mean > 32.5) fail_msg("avalanche mean %.3f bits", mean);
  if (worst < 10) fail_msg("a single bit flip changed only %d output bits", worst);
}

/* Long inputs (an argument's digest): every bit flip and every swap of two 8-byte
 * words changes the hash; a 1-byte tail after the words counts. */
static void test_long_inputs_depend_on_every_bit_and_order(void **state) {
  (void)state;
  uint8_t in[200];
  uint64_t s = 7;
  for (size_t i = 0; i < sizeof in; i++) in[i] = (uint8_t)(lcg(&s) >> 56);
  uint64_t base = wk_hash64(in, sizeof in, 3);
  for (unsigned bit = 0; bit < 8 * sizeof in; bit++) {
    int d = flip_distance(in, sizeof in, bit, 3, base);
    if (d < 10) fail_msg("flipping bit %u of 1600 changed only %d output bits", bit, d);
  }
  for (size_t a = 0; a < 24; a++) {
    for (size_t b = a + 1; b < 24; b++) {
      uint8_t t[8];
      memcpy(t, in + 8 * a, 8);
      memcpy(in + 8 * a, in + 8 * b, 8);
      memcpy(in + 8 * b, t, 8);
      uint64_t h = wk_hash64(in, sizeof in, 3);
      memcpy(in + 8 * b, in + 8 * a, 8);
      memcpy(in + 8 * a, t, 8);
      if (memcmp(in + 8 * a, in + 8 * b, 8) != 0 && h == base)
        fail_msg("swapping words %zu and %zu left the hash unchanged", a, b);
    }
  }
  assert_int_not_equal(wk_hash64(in, 97, 3), wk_hash64(in, 96, 3));
  uint8_t zeros[97] = {0};
  assert_int_not_equal(wk_hash64(zeros, 97, 3), wk_hash64(zeros, 96, 3));
  assert_int_not_equal(wk_hash64(zeros, 64, 3), wk_hash64(zeros, 64, 4));
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return (x > y) - (x < y);
}

static void test_sequential_keys_spread(void **state) {
  (void)state;
  enum { N = 64000, BUCKETS = 64 };
  uint64_t *h = malloc(N * sizeof *h);
  assert_non_null(h);
  unsigned counts[BUCKETS];
  memset(counts, 0, sizeof counts);
  for (uint64_t i = 0; i < N; i++) {
    uint8_t key[8];
    for (unsigned b = 0; b < 8; b++) key[b] = (uint8_t)(i >> (8 * b));
    h[i] = wk_hash64(key, sizeof key, 0);
    counts[h[i] % BUCKETS]++;
  }
  /* each bucket expects 1000 (standard deviation about 31) */
  for (unsigned b = 0; b < BUCKETS; b++) {
    if (counts[b] < 800 || counts[b] > 1200) fail_msg("bucket %u holds %u of %d", b, counts[b], N);
  }
  qsort(h, N, sizeof *h, cmp_u64);
  for (size_t i = 1; i < N; i++) {
    if (h[i] == h[i - 1]) fail_msg("collision among %d sequential keys", N);
  }
  free(h);
}

static void test_mix(void **state) {
  (void)state;
  uint64_t h0 = 0x1234;
  assert_int_equal(wk_hash64_mix(h0, 5), wk_hash64_mix(h0, 5));
  assert_int_not_equal(wk_hash64_mix(h0, 5), wk_hash64_mix(h0, 6));
  assert_int_not_equal(wk_hash64_mix(h0, 5), wk_hash64_mix(h0 + 1, 5));
  /* order of fields matters in a digest */
  assert_int_not_equal(wk_hash64_mix(wk_hash64_mix(h0, 1), 2),
                       wk_hash64_mix(wk_hash64_mix(h0, 2), 1));
  /* distinct values give distinct results over a range */
  enum { N = 4096 };
  uint64_t out[N];
  for (uint64_t v = 0; v < N; v++) out[v] = wk_hash64_mix(h0, v);
  qsort(out, N, sizeof out[0], cmp_u64);
  for (size_t i = 1; i < N; i++) assert_int_not_equal(out[i], out[i - 1]);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_known_values),
      cmocka_unit_test(test_deterministic),
      cmocka_unit_test(test_seed_matters),
      cmocka_unit_test(test_length_matters),
      cmocka_unit_test(test_alignment_does_not_matter),
      cmocka_unit_test(test_avalanche),
      cmocka_unit_test(test_long_inputs_depend_on_every_bit_and_order),
      cmocka_unit_test(test_sequential_keys_spread),
      cmocka_unit_test(test_mix),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

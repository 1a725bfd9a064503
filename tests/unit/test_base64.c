/* test_base64.c: lib/wk_base64.h, in the modes its callers use: etcd's gateway
 * (WK_BASE64_URL_SAFE, lenient padding) and PEM bodies (WK_BASE64_SKIP_SPACE |
 * WK_BASE64_PAD_MAX_2). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "lib/wk_base64.h"

#define ETCD WK_BASE64_URL_SAFE
#define PEM (WK_BASE64_SKIP_SPACE | WK_BASE64_PAD_MAX_2)

/* Decodes text (a C string) under flags into out; returns the rc and sets *n. */
static wk_base64_rc dec(const char *text, unsigned flags, uint8_t *out, size_t cap, size_t *n) {
  *n = (size_t)-1;
  return wk_base64_decode(text, strlen(text), flags, out, cap, n);
}

static void expect_ok(const char *text, unsigned flags, const void *want, size_t want_len) {
  uint8_t out[64];
  size_t n;
  assert_int_equal(dec(text, flags, out, sizeof out, &n), WK_BASE64_OK);
  assert_int_equal(n, want_len);
  if (want_len) assert_memory_equal(out, want, want_len);
}

static void expect_rc(const char *text, unsigned flags, wk_base64_rc want) {
  uint8_t out[64];
  size_t n;
  assert_int_equal(dec(text, flags, out, sizeof out, &n), want);
}

/* RFC 4648 §10 vectors, and a registry key as etcd's gateway sees it. */
static void test_encode_vectors(void **state) {
  (void)state;
  static const char *const in[] = {"", "f", "fo", "foo", "foob", "fooba", "foobar", "/workers/a"};
  static const char *const want[] = {"",         "Zg==",     "Zm8=",     "Zm9v",
                                     "Zm9vYg==", "Zm9vYmE=", "Zm9vYmFy", "L3dvcmtlcnMvYQ=="};
  for (size_t i = 0; i < sizeof in / sizeof in[0]; i++) {
    char *enc = wk_base64_encode(in[i], strlen(in[i]));
    assert_string_equal(enc, want[i]);
    assert_int_equal(strlen(enc), wk_base64_encoded_len(strlen(in[i])));
    free(enc);
  }
  uint8_t bin[] = {0xfb, 0xff, 0xbf, 0x00};
  char *enc = wk_base64_encode(bin, sizeof bin);
  assert_string_equal(enc, "+/+/AA=="); /* always the standard alphabet */
  free(enc);
}

static void test_round_trip(void **state) {
  (void)state;
  const char *samples[] = {"", "a", "ab", "abc", "abcd", "/workers/127.0.0.1:7070"};
  for (size_t i = 0; i < sizeof samples / sizeof samples[0]; i++) {
    char *enc = wk_base64_encode(samples[i], strlen(samples[i]));
    size_t n = 0;
    char *d = wk_base64_decode_alloc(enc, strlen(enc), ETCD, &n);
    assert_non_null(d);
    assert_int_equal(n, strlen(samples[i]));
    assert_memory_equal(d, samples[i], n);
    assert_int_equal(d[n], '\0');
    free(enc);
    free(d);
  }
}

/* Padding: optional, only at the end; etcd's mode takes any number of '=', PEM's two. */
static void test_padding(void **state) {
  (void)state;
  expect_ok("aGVsbG8gd29ybGQ=", ETCD, "hello world", 11);
  expect_ok("aGVsbG8", ETCD, "hello", 5);
  expect_ok("aGVsbG8=", ETCD, "hello", 5);
  expect_ok("YQ==", ETCD, "a", 1);
  expect_ok("YQ==", PEM, "a", 1);
  expect_ok("YQ===", ETCD, "a", 1);
  expect_rc("YQ===", PEM, WK_BASE64_E_LENGTH);
  expect_ok("====", ETCD, "", 0);
  expect_rc("====", PEM, WK_BASE64_E_LENGTH);
  expect_ok("", ETCD, "", 0);
  expect_ok("", PEM, "", 0);
  expect_rc("YQ==YQ==", ETCD, WK_BASE64_E_CHAR); /* data after '=' */
  expect_rc("YQ==YQ==", PEM, WK_BASE64_E_CHAR);
  expect_rc("Y=Q", ETCD, WK_BASE64_E_CHAR);
}

/* 4k+1 significant characters cannot be base64; the unused low bits are not checked. */
static void test_length(void **state) {
  (void)state;
  expect_rc("aGVsb", ETCD, WK_BASE64_E_LENGTH);
  expect_rc("a", ETCD, WK_BASE64_E_LENGTH);
  expect_rc("a===", ETCD, WK_BASE64_E_LENGTH);
  expect_rc("aGVsb", PEM, WK_BASE64_E_LENGTH);
  expect_ok("YR==", ETCD, "a", 1); /* 'R' leaves non-zero bits: accepted */
}

static void test_bad_chars(void **state) {
  (void)state;
  expect_rc("aGV*bG8=", ETCD, WK_BASE64_E_CHAR);
  expect_rc("ab$d", ETCD, WK_BASE64_E_CHAR);
  expect_rc("aGV*bG8=", PEM, WK_BASE64_E_CHAR);
  expect_rc("YW\xff=", ETCD, WK_BASE64_E_CHAR);
  expect_rc("abcde*", ETCD, WK_BASE64_E_CHAR); /* the character error wins over the length */
  uint8_t out[4];
  size_t n;
  assert_int_equal(wk_base64_decode("YQ\0=", 4, ETCD, out, sizeof out, &n), WK_BASE64_E_CHAR);
}

/* '-' and '_' stand for '+' and '/' only in the URL-safe mode (etcd's). */
static void test_url_safe(void **state) {
  (void)state;
  static const uint8_t want[] = {0xfb, 0xff, 0xbf, 0x00};
  expect_ok("-_-_AA==", ETCD, want, sizeof want);
  expect_ok("+/+/AA==", ETCD, want, sizeof want);
  expect_ok("+/+/AA==", PEM, want, sizeof want);
  expect_rc("-_-_AA==", PEM, WK_BASE64_E_CHAR);
  expect_rc("-_-_AA==", 0, WK_BASE64_E_CHAR);
}

/* Whitespace: skipped anywhere in PEM's mode (line breaks in a body), refused otherwise. */
static void test_whitespace(void **state) {
  (void)state;
  expect_ok("YW Jj\r\n", PEM, "abc", 3);
  expect_ok("Zm9v\nYmFy\n", PEM, "foobar", 6);
  expect_ok("YQ= =\n", PEM, "a", 1);
  expect_ok("\tY Q", PEM, "a", 1);
  expect_rc("YW Jj", ETCD, WK_BASE64_E_CHAR);
  expect_rc("Zm9v\nYmFy", ETCD, WK_BASE64_E_CHAR);
  expect_rc("Y\nQ\n=\n=\n=", PEM, WK_BASE64_E_LENGTH);
}

/* A small out buffer gets the first bytes; *decoded is always the whole length. */
static void test_out_cap(void **state) {
  (void)state;
  uint8_t out[2] = {0, 0};
  size_t n = 0;
  assert_int_equal(wk_base64_decode("Zm9vYmFy", 8, PEM, out, sizeof out, &n), WK_BASE64_OK);
  assert_int_equal(n, 6);
  assert_memory_equal(out, "fo", 2);
  assert_int_equal(wk_base64_decode("Zm9vYmFy", 8, PEM, NULL, 0, &n), WK_BASE64_OK);
  assert_int_equal(n, 6);
}

static void test_decode_alloc(void **state) {
  (void)state;
  size_t n = 99;
  char *d = wk_base64_decode_alloc("Zm9v", 4, ETCD, &n);
  assert_non_null(d);
  assert_int_equal(n, 3);
  assert_string_equal(d, "foo");
  free(d);
  d = wk_base64_decode_alloc("AA==", 4, ETCD, &n); /* binary: the NUL is data */
  assert_non_null(d);
  assert_int_equal(n, 1);
  assert_int_equal(d[0], '\0');
  free(d);
  d = wk_base64_decode_alloc("", 0, ETCD, &n);
  assert_non_null(d);
  assert_int_equal(n, 0);
  assert_string_equal(d, "");
  free(d);
  assert_null(wk_base64_decode_alloc("a", 1, ETCD, &n));
  assert_null(wk_base64_decode_alloc("ab$d", 4, ETCD, &n));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_encode_vectors), cmocka_unit_test(test_round_trip),
      cmocka_unit_test(test_padding),        cmocka_unit_test(test_length),
      cmocka_unit_test(test_bad_chars),      cmocka_unit_test(test_url_safe),
      cmocka_unit_test(test_whitespace),     cmocka_unit_test(test_out_cap),
      cmocka_unit_test(test_decode_alloc),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

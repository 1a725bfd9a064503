/* test_json_out.c: unit tests of src/lib/wk_json_out.c, checked against jansson: a string
 * is escaped byte for byte as jansson's compact dump escapes it, any bytes at all give
 * text jansson parses (invalid UTF-8 as U+FFFD), and objects written member by member
 * equal the dump of the same tree. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <jansson.h>
#include <stdlib.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "lib/wk_json_out.h"

static uint64_t rng_state = 0x9e3779b97f4a7c15u;

static uint32_t next_rand(void) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return (uint32_t)(rng_state >> 32);
}

/* The string wk_json_put_string writes for s, NUL-terminated (caller frees). */
static char *put(const char *s, size_t n) {
  wk_buf b = {0};
  wk_json_put_string(&b, s, n);
  wk_buf_append(&b, "", 1);
  return (char *)b.data;
}

/* s (valid UTF-8) is written as jansson's compact dump writes it. */
static void assert_escaped_as_jansson(const char *s, size_t n) {
  json_t *v = json_stringn(s, n);
  assert_non_null(v);
  char *want = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
  char *got = put(s, n);
  assert_string_equal(got, want);
  free(got);
  free(want);
  json_decref(v);
}

/* Appends one random code point as UTF-8: ASCII (controls, quotes and backslashes
 * often), 2-, 3- and 4-byte forms. */
static size_t random_char(char *out) {
  static const char special[] = "\"\\/\n\r\t\b\f\x01\x1f\x7f";
  uint32_t r = next_rand() % 10;
  if (r < 3) {
    out[0] = special[next_rand() % (sizeof special - 1)];
    return 1;
  }
  if (r < 6) {
    out[0] = (char)(0x20 + next_rand() % 0x5f);
    return 1;
  }
  uint32_t cp;
  if (r < 8) {
    cp = 0x80 + next_rand() % (0x800 - 0x80);
  } else if (r < 9) {
    do cp = 0x800 + next_rand() % (0x10000 - 0x800);
    while (cp >= 0xd800 && cp <= 0xdfff);
  } else {
    cp = 0x10000 + next_rand() % (0x110000 - 0x10000);
  }
  if (cp < 0x800) {
    out[0] = (char)(0xc0 | (cp >> 6));
    out[1] = (char)(0x80 | (cp & 0x3f));
    return 2;
  }
  if (cp < 0x10000) {
    out[0] = (char)(0xe0 | (cp >> 12));
    out[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
    out[2] = (char)(0x80 | (cp & 0x3f));
    return 3;
  }
  out[0] = (char)(0xf0 | (cp >> 18));
  out[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
  out[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
  out[3] = (char)(0x80 | (cp & 0x3f));
  return 4;
}

static void test_valid_strings_escaped_as_jansson_does(void **state) {
  (void)state;
  for (int round = 0; round < 2000; round++) {
    char s[256];
    size_t n = 0, chars = next_rand() % 40;
    for (size_t i = 0; i < chars; i++) n += random_char(s + n);
    assert_escaped_as_jansson(s, n);
  }
}

/* Plain text goes across eight bytes at a time: one character that needs care (an
 * escape, a multi-byte sequence, a bad byte) at every offset of strings of 0 to 40
 * plain bytes, sequences crossing a word's end included, comes out as jansson's. */
static void test_one_special_at_every_offset_of_plain_text(void **state) {
  (void)state;
  static const char *specials[] = {"\"",
                                   "\\",
                                   "\n",
                                   "\x01",
                                   "\x1f",
                                   "\x7f",
                                   " ",
                                   "~",
                                   "\xc3\xa9",
                                   "\xe2\x82\xac",
                                   "\xf0\x9f\x98\x80"};
  for (size_t len = 0; len <= 40; len++) {
    for (size_t at = 0; at <= len; at++) {
      for (size_t k = 0; k < sizeof specials / sizeof *specials; k++) {
        char s[64];
        size_t sl = strlen(specials[k]);
        memset(s, 'a', at);
        memcpy(s + at, specials[k], sl);
        memset(s + at + sl, 'b', len - at);
        size_t n = len + sl;
        assert_escaped_as_jansson(s, n);
      }
      /* a bad byte (and a sequence cut by the string's end) becomes U+FFFD */
      char s[64];
      memset(s, 'a', len + 1);
      s[at] = '\xff';
      char *got = put(s, len + 1);
      char want[128];
      snprintf(want, sizeof want, "\"%.*s\xef\xbf\xbd%.*s\"", (int)at, s, (int)(len - at),
               s + at + 1);
      assert_string_equal(got, want);
      free(got);
    }
  }
}

static void test_any_bytes_give_valid_json(void **state) {
  (void)state;
  for (int round = 0; round < 5000; round++) {
    char s[64];
    size_t n = next_rand() % sizeof s;
    for (size_t i = 0; i < n; i++) s[i] = (char)next_rand();
    char *got = put(s, n);
    json_error_t e;
    json_t *v = json_loads(got, JSON_DECODE_ANY | JSON_ALLOW_NUL, &e);
    assert_non_null(v);
    assert_true(json_is_string(v));
    /* valid input comes back as it was */
    json_t *same = json_stringn(s, n);
    if (same) assert_true(json_equal(v, same));
    json_decref(same);
    json_decref(v);
    free(got);
  }
  /* each bad byte is one U+FFFD; a cut sequence at the end too */
  char *got = put("a\xff\xe2\x82", 4);
  assert_string_equal(got, "\"a\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\"");
  free(got);
}

static void test_utf8_len(void **state) {
  (void)state;
  const struct {
    const char *s;
    size_t n, want;
  } cases[] = {
      {"a", 1, 1},
      {"\xc3\xa9", 2, 2},
      {"\xc3", 1, 0},
      {"\xc0\xaf", 2, 0},
      {"\xe2\x82\xac", 3, 3},
      {"\xed\xa0\x80", 3, 0},
      {"\xe0\x80\xaf", 3, 0},
      {"\xf0\x9f\x98\x80", 4, 4},
      {"\xf4\x90\x80\x80", 4, 0},
      {"\x80", 1, 0},
      {"\xf8\x88\x80\x80\x80", 5, 0},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    assert_int_equal(wk_utf8_len((const uint8_t *)cases[i].s, cases[i].n), cases[i].want);
  }
}

static void test_objects_equal_jansson_dump(void **state) {
  (void)state;
  wk_buf b = {0};
  wk_json_obj o;
  wk_json_obj_begin(&o, &b);
  wk_json_obj_str(&o, "task_id", "t-1");
  wk_json_obj_str(&o, "empty", NULL);
  wk_json_obj_int(&o, "zero", 0);
  wk_json_obj_int(&o, "neg", -42);
  wk_json_obj_int(&o, "min", INT64_MIN);
  wk_json_obj_int(&o, "max", INT64_MAX);
  wk_json_obj_bool(&o, "yes", true);
  wk_json_obj_bool(&o, "no", false);
  wk_json_obj_open(&o, "nested");
  wk_json_obj_open(&o, "empty_object");
  wk_json_obj_end(&o);
  wk_json_obj_open(&o, "inner");
  wk_json_obj_str(&o, "k_ey", "v\n");
  wk_json_obj_end(&o);
  wk_json_obj_int(&o, "after", 7);
  wk_json_obj_end(&o);
  wk_json_obj_end(&o);
  wk_buf_append(&b, "", 1);
  json_t *want =
      json_pack("{s:s,s:s,s:I,s:I,s:I,s:I,s:b,s:b,s:{s:{},s:{s:s},s:I}}", "task_id", "t-1", "empty",
                "", "zero", (json_int_t)0, "neg", (json_int_t)-42, "min", (json_int_t)INT64_MIN,
                "max", (json_int_t)INT64_MAX, "yes", 1, "no", 0, "nested", "empty_object", "inner",
                "k_ey", "v\n", "after", (json_int_t)7);
  assert_non_null(want);
  char *text = json_dumps(want, JSON_COMPACT);
  assert_string_equal((char *)b.data, text);
  free(text);
  json_decref(want);
  wk_buf_free(&b);
}

/* Every length of number, odd and even, and the edges of each: as printf writes them. */
static void test_integers_of_every_length_equal_printf(void **state) {
  (void)state;
  int64_t values[200];
  size_t n = 0;
  values[n++] = INT64_MIN;
  values[n++] = INT64_MAX;
  for (int64_t p = 1, d = 1; d <= 18; d++, p *= 10) {
    int64_t edge[] = {p - 1, p, p + 1, 10 * p - 1, p * 7 + 3};
    for (size_t i = 0; i < sizeof edge / sizeof edge[0]; i++) {
      values[n++] = edge[i];
      values[n++] = -edge[i];
    }
  }
  for (size_t i = 0; i < n; i++) {
    wk_buf b = {0};
    wk_json_obj o;
    wk_json_obj_begin(&o, &b);
    wk_json_obj_int(&o, "v", values[i]);
    wk_json_obj_end(&o);
    wk_buf_append(&b, "", 1);
    char want[48];
    snprintf(want, sizeof want, "{\"v\":%" PRId64 "}", values[i]);
    assert_string_equal((char *)b.data, want);
    wk_buf_free(&b);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_valid_strings_escaped_as_jansson_does),
      cmocka_unit_test(test_one_special_at_every_offset_of_plain_text),
      cmocka_unit_test(test_any_bytes_give_valid_json),
      cmocka_unit_test(test_utf8_len),
      cmocka_unit_test(test_objects_equal_jansson_dump),
      cmocka_unit_test(test_integers_of_every_length_equal_printf),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

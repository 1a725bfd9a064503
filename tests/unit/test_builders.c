/* Unit tests of the call builders: single, map, range (streaming). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "plugins/wk_builders.h"

static wk_builder_input json_input(const char *s) {
  return (wk_builder_input){
      .args = (const uint8_t *)s, .args_len = strlen(s), .json = true, .max_calls = 1000};
}

static void expect_args(const wk_call_item *it, const char *s) {
  assert_int_equal(it->len, strlen(s));
  assert_memory_equal(it->args, s, it->len);
}

static void test_single_passes_args_through(void **state) {
  (void)state;
  wk_builder_input in = json_input("{\"a\":1}");
  wk_call_list l = {0};
  char err[256];
  assert_int_equal(wk_builder_find_builtin("single")->build(&in, &l, err, sizeof err), 0);
  assert_int_equal(l.count, 1);
  assert_ptr_equal(l.items[0].args, in.args);
  /* moved, the one call's item is the new list's own (the old list is gone) */
  wk_call_list moved;
  wk_call_list_move(&moved, &l);
  assert_int_equal(l.count, 0);
  assert_null(l.items);
  memset(&l, 0xee, sizeof l);
  assert_int_equal(moved.count, 1);
  assert_ptr_equal(moved.items[0].args, in.args);
  assert_int_equal(moved.items[0].len, in.args_len);
  wk_call_list_free(&moved);
  /* a map's list moves whole too */
  wk_builder_input m = json_input("[1, 2]");
  wk_call_list two = {0};
  assert_int_equal(wk_builder_find_builtin("map")->build(&m, &two, err, sizeof err), 0);
  wk_call_list_move(&moved, &two);
  assert_int_equal(moved.count, 2);
  expect_args(&moved.items[1], "2");
  wk_call_list_free(&moved);
}

static void test_map_one_call_per_item_in_order(void **state) {
  (void)state;
  wk_builder_input in = json_input("[1, {\"b\": [2, 3]}, \"x\", null]");
  wk_call_list l = {0};
  char err[256];
  assert_int_equal(wk_builder_find_builtin("map")->build(&in, &l, err, sizeof err), 0);
  assert_int_equal(l.count, 4);
  expect_args(&l.items[0], "1");
  expect_args(&l.items[1], "{\"b\":[2,3]}");
  expect_args(&l.items[2], "\"x\"");
  expect_args(&l.items[3], "null");
  wk_call_list_free(&l);
}

/* Items whose compact encodings are longer than their text in the input (a real is
 * written with 17 significant digits): the block the items are encoded into grows while
 * they are written, and every item still points at its own bytes. */
static void test_map_items_longer_than_their_input(void **state) {
  (void)state;
  char args[4096];
  size_t at = 0;
  args[at++] = '[';
  for (int i = 0; i < 300; i++)
    at += (size_t)snprintf(args + at, sizeof args - at, "%s0.1", i ? "," : "");
  at += (size_t)snprintf(args + at, sizeof args - at, ",\"\\u00e9\",[ 1 , 2 ]]");
  wk_builder_input in = json_input(args);
  wk_call_list l = {0};
  char err[256];
  assert_int_equal(wk_builder_find_builtin("map")->build(&in, &l, err, sizeof err), 0);
  assert_int_equal(l.count, 302);
  size_t total = 0;
  for (uint32_t i = 0; i < 300; i++) {
    expect_args(&l.items[i], "0.10000000000000001");
    total += l.items[i].len;
  }
  assert_true(total > in.args_len + 64);      /* the block had to grow */
  expect_args(&l.items[300], "\"\xc3\xa9\""); /* the escape decoded: UTF-8 */
  expect_args(&l.items[301], "[1,2]");
  wk_call_list_free(&l);
}

static void expect_map_error(const char *args, bool json, uint32_t max, const char *needle) {
  wk_builder_input in = json_input(args);
  in.json = json;
  in.max_calls = max;
  wk_call_list l = {0};
  char err[256] = "";
  assert_int_equal(wk_builder_find_builtin("map")->build(&in, &l, err, sizeof err), -1);
  if (!strstr(err, needle)) fail_msg("error '%s' lacks '%s'", err, needle);
  assert_int_equal(l.count, 0);
}

static void test_map_errors_say_what_and_where(void **state) {
  (void)state;
  expect_map_error("{\"a\":1}", true, 10, "JSON array of items, got an object");
  expect_map_error("[1, 2,", true, 10, "line 1, column");
  expect_map_error("[1,2,3]", true, 2, "3 items, more than the limit of 2");
  expect_map_error("[1]", false, 10, "needs JSON args");
}

static void test_range_streams_chunks(void **state) {
  (void)state;
  const wk_builder *b = wk_builder_find_builtin("range");
  assert_null(b->build);
  wk_builder_input in = json_input("{\"start\":0,\"stop\":10,\"step\":2,\"chunk\":2}");
  wk_stream_state st;
  char err[256], buf[WK_STREAM_ARGS_MAX];
  assert_int_equal(b->stream_open(&in, &st, err, sizeof err), 0);
  assert_int_equal(st.total, 3); /* items 0,2,4,6,8 in chunks of 2 */
  size_t n = b->stream_args(&st, 0, buf, sizeof buf);
  assert_string_equal((buf[n] = '\0', buf), "{\"start\":0,\"stop\":4,\"step\":2}");
  n = b->stream_args(&st, 1, buf, sizeof buf);
  assert_string_equal((buf[n] = '\0', buf), "{\"start\":4,\"stop\":8,\"step\":2}");
  n = b->stream_args(&st, 2, buf, sizeof buf);
  assert_string_equal((buf[n] = '\0', buf), "{\"start\":8,\"stop\":10,\"step\":2}");
  assert_int_equal(b->stream_args(&st, 3, buf, sizeof buf), 0);
  /* any index again, for a retry */
  n = b->stream_args(&st, 1, buf, sizeof buf);
  assert_string_equal((buf[n] = '\0', buf), "{\"start\":4,\"stop\":8,\"step\":2}");
}

static void test_range_of_ten_million_is_lazy(void **state) {
  (void)state;
  const wk_builder *b = wk_builder_find_builtin("range");
  wk_builder_input in = json_input("{\"stop\":10000000,\"chunk\":1000}");
  in.max_calls = 1000000;
  wk_stream_state st;
  char err[256], buf[WK_STREAM_ARGS_MAX];
  assert_int_equal(b->stream_open(&in, &st, err, sizeof err), 0);
  assert_int_equal(st.total, 10000);
  size_t n = b->stream_args(&st, 9999, buf, sizeof buf);
  assert_string_equal((buf[n] = '\0', buf), "{\"start\":9999000,\"stop\":10000000,\"step\":1}");
}

/* chunk * step overflows int64 (1e9 * (2^40-1)): one call covering the whole range. */
static void test_range_span_past_int64_is_checked(void **state) {
  (void)state;
  const wk_builder *b = wk_builder_find_builtin("range");
  wk_builder_input in = json_input(
      "{\"start\":0,\"stop\":1152921504606846976,\"step\":1099511627775,"
      "\"chunk\":1000000000}");
  wk_stream_state st;
  char err[256], buf[WK_STREAM_ARGS_MAX];
  assert_int_equal(b->stream_open(&in, &st, err, sizeof err), 0);
  assert_int_equal(st.total, 1);
  size_t n = b->stream_args(&st, 0, buf, sizeof buf);
  assert_string_equal((buf[n] = '\0', buf),
                      "{\"start\":0,\"stop\":1152921504606846976,\"step\":1099511627775}");
  /* the widest range allowed, in chunks whose span is just below 2^63 */
  in = json_input(
      "{\"start\":-1152921504606846976,\"stop\":1152921504606846976,"
      "\"step\":1099511627775,\"chunk\":8388608}");
  assert_int_equal(b->stream_open(&in, &st, err, sizeof err), 0);
  assert_int_equal(st.total, 1);
  n = b->stream_args(&st, 0, buf, sizeof buf);
  assert_string_equal((buf[n] = '\0', buf),
                      "{\"start\":-1152921504606846976,"
                      "\"stop\":1152921504606846976,\"step\":1099511627775}");
  assert_int_equal(b->stream_args(&st, 1, buf, sizeof buf), 0);
}

static void expect_range_error(const char *args, const char *needle) {
  wk_builder_input in = json_input(args);
  wk_stream_state st;
  char err[256] = "";
  assert_int_equal(wk_builder_find_builtin("range")->stream_open(&in, &st, err, sizeof err), -1);
  if (!strstr(err, needle)) fail_msg("error '%s' lacks '%s'", err, needle);
}

static void test_range_errors(void **state) {
  (void)state;
  expect_range_error("[1]", "needs an object");
  expect_range_error("{\"start\":0}", "needs \"stop\"");
  expect_range_error("{\"stop\":5,\"step\":0}", "\"step\" must be positive");
  expect_range_error("{\"stop\":5,\"chunk\":0}", "\"chunk\" must be between");
  expect_range_error("{\"stop\":\"5\"}", "\"stop\" must be an integer, got a string");
  expect_range_error("{\"stop\":5,\"stpe\":1}", "does not know the field \"stpe\"");
  expect_range_error("{\"stop\":100000}", "more than the limit of 1000 calls");
}

/* map's option items=FIELD takes the array from a field of an args object. */
static void test_map_items_option(void **state) {
  (void)state;
  const wk_builder *b = wk_builder_find_builtin("map");
  wk_option opt[] = {{"items", "data"}};
  wk_builder_input in = json_input("{\"data\": [1, [2]], \"meta\": \"x\"}");
  in.options = opt;
  in.n_options = 1;
  wk_call_list l = {0};
  char err[256] = "";
  assert_int_equal(b->build(&in, &l, err, sizeof err), 0);
  assert_int_equal(l.count, 2);
  expect_args(&l.items[0], "1");
  expect_args(&l.items[1], "[2]");
  wk_call_list_free(&l);
  in = json_input("{\"meta\": 1}");
  in.options = opt;
  in.n_options = 1;
  assert_int_equal(b->build(&in, &l, err, sizeof err), -1);
  assert_non_null(strstr(err, "items=data names no field"));
  in = json_input("[1]");
  in.options = opt;
  in.n_options = 1;
  assert_int_equal(b->build(&in, &l, err, sizeof err), -1);
  assert_non_null(strstr(err, "needs a JSON object, got an array"));
  assert_int_equal(wk_builder_check_options(b, opt, 1, err, sizeof err), 0);
}

/* Every builder refuses an option it does not take, naming the ones it does. */
static void test_unknown_options_are_refused(void **state) {
  (void)state;
  wk_option opt[] = {{"items", "data"}, {"chunk\n", "5"}};
  const char *names[] = {"single", "map", "range"};
  const char *want[] = {"the single builder: unknown option 'items' (known: none)",
                        "the map builder: unknown option 'chunk?' (known: items)",
                        "the range builder: unknown option 'items' (known: none)"};
  for (int i = 0; i < 3; i++) {
    const wk_builder *b = wk_builder_find_builtin(names[i]);
    char err[256] = "";
    assert_int_equal(wk_builder_check_options(b, opt, 2, err, sizeof err), -1);
    assert_string_equal(err, want[i]);
    wk_builder_input in = json_input("{\"stop\": 3}");
    in.options = opt;
    in.n_options = 2;
    err[0] = '\0';
    wk_call_list l = {0};
    wk_stream_state st;
    int rc =
        b->build ? b->build(&in, &l, err, sizeof err) : b->stream_open(&in, &st, err, sizeof err);
    assert_int_equal(rc, -1);
    assert_string_equal(err, want[i]);
    assert_int_equal(l.count, 0);
  }
}

static void test_registry_lists_only_enabled(void **state) {
  (void)state;
  wk_builder_registry reg = {0};
  assert_int_equal(wk_builder_registry_add(&reg, "single"), 0);
  assert_int_equal(wk_builder_registry_add(&reg, "map"), 0);
  assert_int_equal(wk_builder_registry_add(&reg, "nosuch"), -1);
  assert_non_null(wk_builder_registry_find(&reg, ""));
  assert_null(wk_builder_registry_find(&reg, "range"));
  char names[64];
  assert_string_equal(wk_builder_registry_names(&reg, names, sizeof names), "single, map");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_single_passes_args_through),
      cmocka_unit_test(test_map_one_call_per_item_in_order),
      cmocka_unit_test(test_map_items_longer_than_their_input),
      cmocka_unit_test(test_map_errors_say_what_and_where),
      cmocka_unit_test(test_range_streams_chunks),
      cmocka_unit_test(test_range_of_ten_million_is_lazy),
      cmocka_unit_test(test_range_span_past_int64_is_checked),
      cmocka_unit_test(test_range_errors),
      cmocka_unit_test(test_map_items_option),
      cmocka_unit_test(test_unknown_options_are_refused),
      cmocka_unit_test(test_registry_lists_only_enabled),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

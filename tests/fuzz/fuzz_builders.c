/* fuzz_builders.c: libFuzzer target for the call builders' argument parsing
 * (src/plugins/wk_builders.c): the task's args, as a client sends them.
 *
 * Input: byte 0 picks the builder (low 2 bits: 0 single, 1 map, 2 and 3 range), the
 * content type (bit 2 set: bytes, else JSON) and the options (bit 3: items=data, bit 4:
 * an unknown key); byte 1 picks max_calls (mod 5: 1, 3, 1000, 1000000, UINT32_MAX);
 * the rest is the args. Properties checked beyond "no
 * crash, no sanitizer report" (UBSan aborts on any signed overflow):
 *   - a failure has a message, and a list builder's failure leaves the list empty;
 *   - an option the builder does not take always fails it;
 *   - map: at most max_calls items, each a JSON value that parses again;
 *   - range: at most max_calls calls; the first chunk starts at start, the last ends
 *     at stop, each chunk is non-empty and starts where the one before ended, and no
 *     chunk is produced at or past `total` (the first and last few are checked, so a
 *     range of a billion calls costs no more than a small one).
 *
 * Build (Clang): see tests/fuzz/CMakeLists.txt. Run:
 *   ./fuzz_builders -max_len=4096 tests/fuzz/corpus/builders
 */
#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "plugins/wk_builders.h"

#include "fuzz_check.h"

static const uint32_t max_calls_choice[] = {1, 3, 1000, 1000000, UINT32_MAX};

static void check_map(const wk_builder *b, const wk_builder_input *in) {
  wk_call_list l = {0};
  char err[256] = "";
  if (b->build(in, &l, err, sizeof err) != 0) {
    CHECK(err[0] != '\0' && l.count == 0 && l.items == NULL);
    return;
  }
  CHECK(l.count <= in->max_calls);
  for (uint32_t i = 0; i < l.count; i++) {
    json_error_t je;
    json_t *v = json_loadb((const char *)l.items[i].args, l.items[i].len, JSON_DECODE_ANY, &je);
    CHECK(v != NULL);
    json_decref(v);
  }
  wk_call_list_free(&l);
}

/* Chunk `index`'s bounds from its args; false when none is produced. */
static bool chunk_at(const wk_builder *b, const wk_stream_state *st, uint64_t index, int64_t *start,
                     int64_t *stop) {
  char buf[WK_STREAM_ARGS_MAX];
  size_t n = b->stream_args(st, index, buf, sizeof buf);
  if (n == 0) return false;
  json_error_t je;
  json_t *o = json_loadb(buf, n, 0, &je);
  CHECK(o != NULL);
  json_t *a = json_object_get(o, "start"), *z = json_object_get(o, "stop"),
         *s = json_object_get(o, "step");
  CHECK(json_is_integer(a) && json_is_integer(z) && json_is_integer(s));
  *start = json_integer_value(a);
  *stop = json_integer_value(z);
  CHECK(json_integer_value(s) == st->step);
  CHECK(*start < *stop);
  json_decref(o);
  return true;
}

static void check_range(const wk_builder *b, const wk_builder_input *in) {
  wk_stream_state st;
  char err[256] = "";
  if (b->stream_open(in, &st, err, sizeof err) != 0) {
    CHECK(err[0] != '\0');
    return;
  }
  CHECK(st.total <= in->max_calls);
  int64_t a, z;
  CHECK(!chunk_at(b, &st, st.total, &a, &z));
  if (st.total == 0) {
    CHECK(st.stop <= st.start);
    return;
  }
  uint64_t idx[] = {0, 1, 2, st.total - 3, st.total - 2, st.total - 1};
  for (size_t k = 0; k < sizeof idx / sizeof idx[0]; k++) {
    uint64_t i = idx[k];
    if (i >= st.total) continue;
    CHECK(chunk_at(b, &st, i, &a, &z));
    if (i == 0) CHECK(a == st.start);
    if (i == st.total - 1) CHECK(z == st.stop);
    if (i + 1 < st.total) {
      int64_t a2, z2;
      CHECK(chunk_at(b, &st, i + 1, &a2, &z2));
      CHECK(a2 == z);
    }
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 2) return 0;
  static const char *names[] = {"single", "map", "range", "range"};
  const wk_builder *b = wk_builder_find_builtin(names[data[0] & 3]);
  CHECK(b != NULL);
  size_t n = size - 2;
  uint8_t *args = malloc(n ? n : 1); /* exactly the args: ASan sees any over-read */
  memcpy(args, data + 2, n);
  wk_option opts[2];
  size_t n_opts = 0;
  if (data[0] & 8) opts[n_opts++] = (wk_option){"items", "data"};
  if (data[0] & 16) opts[n_opts++] = (wk_option){"nosuch", "1"};
  wk_builder_input in = {.args = args,
                         .args_len = n,
                         .json = !(data[0] & 4),
                         .max_calls = max_calls_choice[data[1] % 5],
                         .options = opts,
                         .n_options = n_opts};
  char err[256];
  bool refused = wk_builder_check_options(b, opts, n_opts, err, sizeof err) != 0;
  CHECK(!refused || err[0] != '\0');
  if (refused) {
    wk_call_list l = {0};
    wk_stream_state st;
    CHECK((b->build ? b->build(&in, &l, err, sizeof err)
                    : b->stream_open(&in, &st, err, sizeof err)) == -1);
    CHECK(l.count == 0);
  } else if (b->stream_open) {
    check_range(b, &in);
  } else if (strcmp(b->name, "map") == 0) {
    check_map(b, &in);
  } else {
    wk_call_list l = {0};
    CHECK(b->build(&in, &l, err, sizeof err) == 0 && l.count == 1 && l.items[0].len == n);
    wk_call_list_free(&l);
  }
  free(args);
  return 0;
}

/* fuzz_frame.c: libFuzzer target for the executor frame decoder (src/adapters/wk_frame.c).
 *
 * The input is a byte stream as read from an executor's socket. It is decoded frame by
 * frame with two maximum frame sizes (a small one and the default). Properties checked:
 *   - the decoder never reads past its input (AddressSanitizer; the input is copied
 *     into an allocation of exactly its size);
 *   - NEED_MORE asks for more than it was given; errors consume nothing;
 *   - a decoded frame re-encodes to exactly the bytes it was decoded from (the
 *     encoding is canonical), and decoding those bytes again succeeds;
 *   - the lists of a decoded SUBCALLS / SUBCALLS_RESULT iterate exactly `count` items
 *     and end exactly at the end of their encoded bytes; re-encoding them from arrays
 *     of those items gives the same bytes again.
 *
 * Build (Clang): see tests/fuzz/CMakeLists.txt. Run:
 *   ./fuzz_frame -max_len=4096 tests/fuzz/corpus/frame      (explore; adds to the corpus)
 *   ./fuzz_frame -runs=0 tests/fuzz/corpus/frame            (replay the corpus)
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "adapters/wk_frame.h"

#include "fuzz_check.h"

#define LIST_MAX 64 /* lists up to this long are also re-encoded from arrays */

/* Walks the lists of a decoded frame; re-encodes short ones from arrays. */
static void check_lists(const wk_frame *f, const uint8_t *enc, size_t used, uint32_t max_frame) {
  wk_frame g = *f;
  wk_frame_bytes args[LIST_MAX];
  wk_frame_child kids[LIST_MAX];
  wk_frame_iter it;
  uint32_t count = 0;
  if (f->type == WK_FRAME_SUBCALLS) {
    CHECK(f->subcalls.args == NULL && f->subcalls.count >= 1);
    it = wk_frame_subcalls_args(&f->subcalls);
    wk_frame_bytes a;
    while (wk_frame_iter_next_arg(&it, &a)) {
      CHECK(a.len == 0 || (a.ptr >= enc && a.ptr + a.len <= enc + used));
      if (count < LIST_MAX) args[count] = a;
      count++;
    }
    CHECK(count == f->subcalls.count && it.left == 0);
    if (count > LIST_MAX) return;
    g.subcalls.args = args;
    g.subcalls.args_enc.ptr = NULL;
    g.subcalls.args_enc.len = 0;
  } else if (f->type == WK_FRAME_SUBCALLS_RESULT) {
    CHECK(f->subcalls_result.children == NULL && f->subcalls_result.count >= 1);
    it = wk_frame_subcalls_children(&f->subcalls_result);
    wk_frame_child k;
    while (wk_frame_iter_next_child(&it, &k)) {
      if (count < LIST_MAX) kids[count] = k;
      count++;
    }
    CHECK(count == f->subcalls_result.count && it.left == 0);
    if (count > LIST_MAX) return;
    g.subcalls_result.children = kids;
    g.subcalls_result.children_enc.ptr = NULL;
    g.subcalls_result.children_enc.len = 0;
  } else {
    return;
  }
  wk_frame_buf b;
  wk_frame_buf_init(&b, NULL);
  CHECK(wk_frame_encode(&b, &g, max_frame) == WK_FRAME_OK);
  CHECK(wk_frame_buf_size(&b) == used && memcmp(wk_frame_buf_bytes(&b), enc, used) == 0);
  wk_frame_buf_free(&b);
}

static void decode_stream(const uint8_t *in, size_t n, uint32_t max_frame) {
  size_t off = 0;
  wk_frame_buf re;
  wk_frame_buf_init(&re, NULL);
  for (;;) {
    wk_frame f;
    size_t used = 0;
    wk_frame_rc rc = wk_frame_decode(in + off, n - off, max_frame, &f, &used);
    if (rc == WK_FRAME_NEED_MORE) {
      CHECK(used > n - off);
      break;
    }
    if (rc != WK_FRAME_OK) {
      CHECK(rc < 0);
      CHECK(used == 0);
      CHECK(strcmp(wk_frame_rc_name(rc), "UNKNOWN") != 0);
      break;
    }
    CHECK(used >= WK_FRAME_PREFIX_SIZE + 1 && used <= n - off);
    CHECK(used - WK_FRAME_PREFIX_SIZE <= max_frame);
    CHECK(wk_frame_encoded_size(&f) == used);
    wk_frame_buf_clear(&re);
    CHECK(wk_frame_encode(&re, &f, max_frame) == WK_FRAME_OK);
    CHECK(wk_frame_buf_size(&re) == used);
    CHECK(memcmp(wk_frame_buf_bytes(&re), in + off, used) == 0);
    wk_frame g;
    size_t used2 = 0;
    CHECK(wk_frame_decode(wk_frame_buf_bytes(&re), used, max_frame, &g, &used2) == WK_FRAME_OK);
    CHECK(used2 == used && g.type == f.type);
    check_lists(&f, in + off, used, max_frame);
    off += used;
  }
  wk_frame_buf_free(&re);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  uint8_t *in = malloc(size ? size : 1);
  if (!in) return 0;
  if (size) memcpy(in, data, size);
  decode_stream(in, size, 64);
  decode_stream(in, size, WK_FRAME_MAX_DEFAULT);
  free(in);
  return 0;
}

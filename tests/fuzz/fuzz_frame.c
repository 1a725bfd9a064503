/* fuzz_frame.c: libFuzzer target for the executor frame decoder (src/adapters/wk_frame.c).
 *
 * The input is a byte stream as read from an executor's socket. It is decoded frame by
 * frame with two maximum frame sizes (a small one and the default). Properties checked:
 *   - the decoder never reads past its input (AddressSanitizer; the input is copied
 *     into an allocation of exactly its size);
 *   - NEED_MORE asks for more than it was given; errors consume nothing;
 *   - a decoded frame re-encodes to exactly the bytes it was decoded from (the
 *     encoding is canonical), and decoding those bytes again succeeds.
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

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond) \
  do {              \
    if (!(cond)) abort(); \
  } while (0)

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

/* fuzz_validate.c: libFuzzer target for the gRPC request decoder and validator
 * (src/adapters/wk_validate.c), the code that sees every request's bytes first.
 *
 * Input: one byte that picks the method, then the request message bytes as they come
 * off the wire. The low three bits of the first byte and bit 4 make the wk_rpc_method
 * (from WK_RPC_METHOD_COUNT on: an unknown method, ListTasks and GetTaskLogs
 * included); bit 3 picks tight limits (timeout 1000 ms, 4 watched tasks) instead of
 * the Worker's (1 hour, 1024). Properties checked:
 *   - the decoder never reads past its input (AddressSanitizer; the bytes are copied
 *     into an allocation of exactly their size, and an empty request is passed as NULL);
 *   - a rejection leaves a non-empty, NUL-terminated reason of printable ASCII only
 *     (values from the request are echoed only sanitized), shorter than
 *     WK_VALIDATE_ERR_LEN; an unknown method is always rejected;
 *   - the verdict does not depend on the error buffer: the same bytes decoded with no
 *     buffer, and with an 8-byte one (truncated, still terminated), agree;
 *   - an accepted request re-encodes (protobuf_c_message_pack, exactly
 *     get_packed_size bytes) to bytes that are accepted again.
 *
 * Build (Clang): see tests/fuzz/CMakeLists.txt. Run:
 *   ./fuzz_validate -max_total_time=600 scratch/ tests/fuzz/corpus/validate   (explore)
 *   ./fuzz_validate -runs=0 tests/fuzz/corpus/validate                       (replay)
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "adapters/wk_validate.h"
#include "lib/wk_arena.h"

#include "fuzz_check.h"

/* Length of the NUL-terminated string in buf[0..cap), or cap when unterminated. */
static size_t bounded_len(const char *buf, size_t cap) {
  const char *nul = memchr(buf, '\0', cap);
  return nul ? (size_t)(nul - buf) : cap;
}

static void check_reason(const char *err, size_t cap) {
  size_t n = bounded_len(err, cap);
  CHECK(n > 0 && n + 1 < cap); /* not cut: the buffer holds every message */
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)err[i];
    CHECK(c >= 0x20 && c <= 0x7e);
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size == 0) return 0;
  unsigned pick = (data[0] & 7u) | ((data[0] >> 1) & 8u);
  wk_rpc_method m =
      pick < (unsigned)WK_RPC_METHOD_COUNT ? (wk_rpc_method)pick : WK_RPC_METHOD_COUNT;
  wk_validate_limits lim =
      (data[0] & 8u) ? (wk_validate_limits){1000, 4} : (wk_validate_limits){3600000, 1024};
  size_t len = size - 1;
  uint8_t *buf = NULL;
  if (len > 0) {
    buf = malloc(len);
    if (!buf) return 0;
    memcpy(buf, data + 1, len);
  }

  char err[WK_VALIDATE_ERR_LEN];
  memset(err, 'x', sizeof err);
  ProtobufCMessage *msg = wk_validate_decode(m, buf, len, &lim, err, sizeof err);
  if (m == WK_RPC_METHOD_COUNT) CHECK(msg == NULL && wk_validate_descriptor(m) == NULL);
  if (msg == NULL) check_reason(err, sizeof err);

  ProtobufCMessage *quiet = wk_validate_decode(m, buf, len, &lim, NULL, 0);
  CHECK((quiet == NULL) == (msg == NULL));
  if (quiet) protobuf_c_message_free_unpacked(quiet, NULL);

  /* as the server decodes: into an arena, nothing freed piece by piece */
  wk_arena arena;
  wk_arena_init(&arena, len + 384);
  ProtobufCAllocator in_arena = wk_validate_arena_allocator(&arena);
  ProtobufCMessage *arena_msg = wk_validate_decode_in(m, buf, len, &lim, &in_arena, NULL, 0);
  CHECK((arena_msg == NULL) == (msg == NULL));

  char small[8];
  memset(small, 'x', sizeof small);
  ProtobufCMessage *cut = wk_validate_decode(m, buf, len, &lim, small, sizeof small);
  CHECK((cut == NULL) == (msg == NULL));
  if (cut) {
    protobuf_c_message_free_unpacked(cut, NULL);
  } else {
    CHECK(bounded_len(small, sizeof small) == sizeof small - 1);
    CHECK(strncmp(small, err, sizeof small - 1) == 0);
  }

  if (msg) {
    CHECK(msg->descriptor == wk_validate_descriptor(m));
    size_t n = protobuf_c_message_get_packed_size(msg);
    uint8_t *re = malloc(n ? n : 1);
    CHECK(re != NULL);
    CHECK(protobuf_c_message_pack(msg, re) == n);
    uint8_t *from_arena = malloc(n ? n : 1); /* the same message, byte for byte */
    CHECK(from_arena != NULL);
    CHECK(protobuf_c_message_get_packed_size(arena_msg) == n);
    CHECK(protobuf_c_message_pack(arena_msg, from_arena) == n);
    CHECK(memcmp(re, from_arena, n) == 0);
    free(from_arena);
    ProtobufCMessage *again = wk_validate_decode(m, n ? re : NULL, n, &lim, err, sizeof err);
    CHECK(again != NULL);
    protobuf_c_message_free_unpacked(again, NULL);
    free(re);
    protobuf_c_message_free_unpacked(msg, NULL);
  }
  wk_arena_release(&arena);
  free(buf);
  return 0;
}

/* fuzz_deploy.c: libFuzzer target for what DeployCode does with a client's bytes beyond
 * protobuf-c: the file list's path rules, duplicates and sizes
 * (wk_code_store_check_files) and the digest of an accepted list
 * (wk_code_store_digest_files), both in src/adapters/wk_code_store.c; and
 * deploy_allowed_clients against a peer and its certificate names
 * (src/app/wk_deploy_acl.c).
 *
 * Input: byte 0 picks the mode. Even: files; byte 1 sets the limits (low nibble: max
 * files 1..16, 0 = none; high nibble: max bytes 2^n, 0 = none); the rest is a
 * DeployCodeRequest as it comes off the wire (unpacked and string-scanned as the server
 * does). Odd: the ACL; the rest is "spec\npeer\nidentities..." (identities
 * '\n'-separated). Properties checked:
 *   - nothing reads past its input (AddressSanitizer);
 *   - a refused list leaves a non-empty, printable ASCII reason; an accepted one has
 *     only relative paths without "", "." or ".." components, no duplicates, within the
 *     limits, and digests (64 lowercase hex), the same whatever the order of the files;
 *   - an ACL that parses answers, and an empty one allows everyone.
 *
 * Build (Clang): see tests/fuzz/CMakeLists.txt. Run:
 *   ./fuzz_deploy -max_total_time=600 scratch/ tests/fuzz/corpus/deploy
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "adapters/wk_code_store.h"
#include "adapters/wk_validate.h"
#include "app/wk_deploy_acl.h"

#include "fuzz_check.h"

static void check_reason(const char *err, size_t cap) {
  const char *nul = memchr(err, '\0', cap);
  CHECK(nul && nul > err);
  for (const char *c = err; c < nul; c++)
    CHECK((unsigned char)*c >= 0x20 && (unsigned char)*c < 0x7f);
}

static void check_path(const char *p) {
  CHECK(p[0] != '\0' && p[0] != '/');
  for (const char *c = p;;) {
    const char *end = strchr(c, '/');
    size_t len = end ? (size_t)(end - c) : strlen(c);
    CHECK(len > 0);
    CHECK(!(len == 1 && c[0] == '.') && !(len == 2 && c[0] == '.' && c[1] == '.'));
    if (!end) break;
    c = end + 1;
  }
}

static void fuzz_files(const uint8_t *data, size_t size) {
  if (size < 1) return;
  size_t max_files = data[0] & 15u;
  uint64_t max_bytes = (data[0] >> 4) ? (uint64_t)1 << (data[0] >> 4) : 0;
  size_t len = size - 1;
  uint8_t *buf = len ? malloc(len) : NULL;
  if (len) memcpy(buf, data + 1, len);
  const ProtobufCMessageDescriptor *d = &worker__v1__deploy_code_request__descriptor;
  ProtobufCMessage *m = protobuf_c_message_unpack(d, NULL, len, buf);
  char err[512];
  if (m && wk_validate_wire_strings(d, buf, len, err, sizeof err)) {
    const Worker__V1__DeployCodeRequest *req = (const Worker__V1__DeployCodeRequest *)m;
    size_t n = req->n_files;
    wk_code_file *files = calloc(n ? n : 1, sizeof *files);
    for (size_t i = 0; i < n; i++) {
      files[i] = (wk_code_file){.path = req->files[i]->path,
                                .content = req->files[i]->content.data,
                                .len = req->files[i]->content.len,
                                .executable = req->files[i]->executable};
    }
    if (wk_code_store_check_files(files, n, max_files, max_bytes, err, sizeof err) != 0) {
      check_reason(err, sizeof err);
    } else {
      CHECK(n > 0 && (!max_files || n <= max_files));
      uint64_t total = 0;
      for (size_t i = 0; i < n; i++) {
        check_path(files[i].path);
        total += files[i].len;
        for (size_t j = 0; j < i; j++) CHECK(strcmp(files[i].path, files[j].path) != 0);
      }
      CHECK(!max_bytes || total <= max_bytes);
      char a[WK_CODE_STORE_DIGEST_HEX + 1], b[WK_CODE_STORE_DIGEST_HEX + 1];
      CHECK(wk_code_store_digest_files(files, n, a, err, sizeof err) == 0);
      CHECK(strlen(a) == WK_CODE_STORE_DIGEST_HEX);
      for (size_t i = 0; i < n / 2; i++) { /* another order, the same tree */
        wk_code_file t = files[i];
        files[i] = files[n - 1 - i];
        files[n - 1 - i] = t;
      }
      CHECK(wk_code_store_digest_files(files, n, b, err, sizeof err) == 0);
      CHECK(strcmp(a, b) == 0);
    }
    free(files);
  }
  if (m) protobuf_c_message_free_unpacked(m, NULL);
  free(buf);
}

static void fuzz_acl(const uint8_t *data, size_t size) {
  char *text = malloc(size + 1);
  memcpy(text, data, size);
  text[size] = '\0';
  char *peer = strchr(text, '\n');
  if (peer) *peer++ = '\0';
  char *ids = peer ? strchr(peer, '\n') : NULL;
  if (ids) *ids++ = '\0';
  wk_deploy_acl *acl = malloc(sizeof *acl);
  char err[512];
  if (wk_deploy_acl_parse(text, acl, err, sizeof err) == 0) {
    bool ok = wk_deploy_acl_allows(acl, peer ? peer : "", ids ? ids : "");
    if (acl->n == 0) CHECK(ok);
  } else {
    CHECK(err[0] != '\0');
  }
  free(acl);
  free(text);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size == 0) return 0;
  if (data[0] & 1u) {
    fuzz_acl(data + 1, size - 1);
  } else {
    fuzz_files(data + 1, size - 1);
  }
  return 0;
}

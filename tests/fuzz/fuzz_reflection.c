/* fuzz_reflection.c: libFuzzer target for gRPC server reflection
 * (src/adapters/wk_reflection.c): the decoder of the ServerReflectionRequest bytes any
 * client may send on the reflection stream, and the indexer of a FileDescriptorSet.
 *
 * Input: one mode byte, then the bytes. Bit 0 of the mode clear: the bytes are a
 * ServerReflectionRequest answered from the descriptors embedded in the worker (the
 * very ones it serves). Bit 0 set: the bytes are a FileDescriptorSet to index (any
 * set, not only protoc's), then asked list_services and about each service it names.
 * Properties checked:
 *   - nothing reads past its input (AddressSanitizer: the bytes are copied into an
 *     allocation of exactly their size) and nothing leaks (LeakSanitizer);
 *   - a refused request leaves a non-empty, NUL-terminated reason; a request that
 *     protobuf-c decodes is never refused;
 *   - every answer decodes as a ServerReflectionResponse with exactly one of its
 *     responses set, echoing the request; a file answer carries only files of the set,
 *     each a FileDescriptorProto that decodes, the asked one first;
 *   - list_services names exactly the index's services.
 *
 * Build (Clang): see tests/fuzz/CMakeLists.txt. Run:
 *   ./fuzz_reflection -max_total_time=600 scratch/ tests/fuzz/corpus/reflection
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "adapters/wk_reflection.h"
#include "google/protobuf/descriptor.pb-c.h"
#include "grpc/reflection/v1alpha/reflection.pb-c.h"

#include "fuzz_check.h"

typedef Grpc__Reflection__V1alpha__ServerReflectionResponse Response;
typedef Grpc__Reflection__V1alpha__ServerReflectionRequest Request;

/* Answers req with r and checks the answer against the request. */
static void ask(const wk_reflection *r, const uint8_t *req, size_t len) {
  uint8_t *out = NULL;
  size_t out_len = 0;
  char err[256];
  memset(err, 'x', sizeof err);
  int rc = wk_reflection_answer(r, req, len, &out, &out_len, err, sizeof err);
  Request *q = grpc__reflection__v1alpha__server_reflection_request__unpack(NULL, len, req);
  if (rc != 0) {
    CHECK(q == NULL && out == NULL);
    CHECK(memchr(err, '\0', sizeof err) != NULL && err[0] != '\0');
    return;
  }
  CHECK(q != NULL && out != NULL);
  Response *a = grpc__reflection__v1alpha__server_reflection_response__unpack(NULL, out_len, out);
  CHECK(a != NULL);
  CHECK(a->original_request != NULL);
  CHECK(strcmp(a->valid_host, q->host) == 0);
  CHECK(a->original_request->message_request_case == q->message_request_case);
  switch ((int)a->message_response_case) {
    case GRPC__REFLECTION__V1ALPHA__SERVER_REFLECTION_RESPONSE__MESSAGE_RESPONSE_LIST_SERVICES_RESPONSE:
      CHECK(a->list_services_response->n_service == wk_reflection_service_count(r));
      for (size_t i = 0; i < a->list_services_response->n_service; i++) {
        CHECK(strcmp(a->list_services_response->service[i]->name,
                     wk_reflection_service_name(r, i)) == 0);
      }
      break;
    case GRPC__REFLECTION__V1ALPHA__SERVER_REFLECTION_RESPONSE__MESSAGE_RESPONSE_FILE_DESCRIPTOR_RESPONSE: {
      const Grpc__Reflection__V1alpha__FileDescriptorResponse *f = a->file_descriptor_response;
      CHECK(f->n_file_descriptor_proto > 0);
      for (size_t i = 0; i < f->n_file_descriptor_proto; i++) {
        Google__Protobuf__FileDescriptorProto *fd = google__protobuf__file_descriptor_proto__unpack(
            NULL, f->file_descriptor_proto[i].len, f->file_descriptor_proto[i].data);
        CHECK(fd != NULL && fd->name != NULL);
        if (i == 0 &&
            q->message_request_case ==
                GRPC__REFLECTION__V1ALPHA__SERVER_REFLECTION_REQUEST__MESSAGE_REQUEST_FILE_BY_FILENAME) {
          CHECK(strcmp(fd->name, q->file_by_filename) == 0);
        }
        google__protobuf__file_descriptor_proto__free_unpacked(fd, NULL);
      }
      break;
    }
    case GRPC__REFLECTION__V1ALPHA__SERVER_REFLECTION_RESPONSE__MESSAGE_RESPONSE_ERROR_RESPONSE:
      CHECK(a->error_response->error_code == 3 || a->error_response->error_code == 5);
      CHECK(a->error_response->error_message[0] != '\0');
      break;
    case GRPC__REFLECTION__V1ALPHA__SERVER_REFLECTION_RESPONSE__MESSAGE_RESPONSE_ALL_EXTENSION_NUMBERS_RESPONSE:
      CHECK(a->all_extension_numbers_response->n_extension_number == 0);
      break;
    default: CHECK(0); /* exactly one response is set */
  }
  grpc__reflection__v1alpha__server_reflection_response__free_unpacked(a, NULL);
  grpc__reflection__v1alpha__server_reflection_request__free_unpacked(q, NULL);
  free(out);
}

/* A request asking for one string field (tag: field 3, 4 or 7) = s. */
static void ask_string(const wk_reflection *r, int field, const char *s) {
  Request q;
  grpc__reflection__v1alpha__server_reflection_request__init(&q);
  q.message_request_case =
      (Grpc__Reflection__V1alpha__ServerReflectionRequest__MessageRequestCase)field;
  char name[1024];
  size_t sl = strlen(s);
  if (sl >= sizeof name) return;
  memcpy(name, s, sl + 1);
  q.file_by_filename = name; /* the oneof's strings share the union */
  uint8_t buf[4096];
  size_t n = protobuf_c_message_get_packed_size(&q.base);
  if (n > sizeof buf) return;
  protobuf_c_message_pack(&q.base, buf);
  ask(r, buf, n);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size == 0) return 0;
  uint8_t mode = data[0];
  size_t len = size - 1;
  uint8_t *copy = malloc(len ? len : 1);
  CHECK(copy != NULL);
  memcpy(copy, data + 1, len);
  if (!(mode & 1)) {
    ask(wk_reflection_embedded(), len ? copy : NULL, len);
  } else {
    char err[256];
    wk_reflection *r = wk_reflection_new(copy, len, err, sizeof err);
    if (r == NULL) {
      CHECK(err[0] != '\0' && memchr(err, '\0', sizeof err) != NULL);
    } else {
      ask_string(r, 7, "*");
      for (size_t i = 0; i < wk_reflection_service_count(r) && i < 8; i++) {
        ask_string(r, 4, wk_reflection_service_name(r, i));
      }
      wk_reflection_free(r);
    }
  }
  free(copy);
  return 0;
}

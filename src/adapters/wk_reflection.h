/* wk_reflection.h: gRPC server reflection (grpc.reflection.v1alpha and v1
 * ServerReflection): the answers, computed from a FileDescriptorSet (the one embedded at
 * build time from proto/, wk_reflection_embedded). The gRPC server (wk_grpc_server.c)
 * carries the bidirectional stream; this part only turns one request's bytes into one
 * response's bytes, so it can be fuzzed alone (tests/fuzz/fuzz_reflection.c). */
#ifndef WK_REFLECTION_H
#define WK_REFLECTION_H

#include <stddef.h>
#include <stdint.h>

typedef struct wk_reflection wk_reflection;

/** The serialized FileDescriptorSet of every service the worker offers and of what
 * their files import (protoc --descriptor_set_out --include_imports at build time). */
extern const uint8_t wk_reflection_descriptor_set[];
extern const size_t wk_reflection_descriptor_set_len;

/** Indexes a serialized FileDescriptorSet (borrowed: `set` must outlive the index):
 * each file's bytes, name and dependencies, the services, and every symbol a file
 * defines (messages, enums, enum values, services, methods, fields, extensions;
 * nested ones too). NULL with why in err when the set does not decode. Free with
 * wk_reflection_free. */
wk_reflection *wk_reflection_new(const uint8_t *set, size_t len, char *err, size_t err_len);

/** The index over wk_reflection_descriptor_set, built on first use (thread-safe); never
 * NULL (the embedded set is the build's own and always decodes). Owned by the module. */
const wk_reflection *wk_reflection_embedded(void);

/** Frees an index from wk_reflection_new; NULL is a no-op. */
void wk_reflection_free(wk_reflection *r);

/** The number of services (ListServices answers their names in this order) and the
 * name of service i (owned by r). */
size_t wk_reflection_service_count(const wk_reflection *r);
const char *wk_reflection_service_name(const wk_reflection *r, size_t i);

/** Answers one ServerReflectionRequest (`req`, len bytes, from the network) with a
 * ServerReflectionResponse: list_services, file_by_filename and file_containing_symbol
 * (the file and every file it imports, transitively, the file first),
 * all_extension_numbers_of_type (none: the protos declare no extensions) or an
 * error_response (NOT_FOUND for an unknown file, symbol or extension; INVALID_ARGUMENT
 * for a request that asks nothing). Returns 0 with *out (malloc'd, the caller frees it)
 * and *out_len; -1 with why in err when req is not a ServerReflectionRequest (the
 * stream then ends INVALID_ARGUMENT). */
int wk_reflection_answer(const wk_reflection *r, const uint8_t *req, size_t len, uint8_t **out,
                         size_t *out_len, char *err, size_t err_len);

#endif

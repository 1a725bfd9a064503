/* wk_reflection.c: see wk_reflection.h. */
#include "adapters/wk_reflection.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "google/protobuf/descriptor.pb-c.h"
#include "grpc/reflection/v1alpha/reflection.pb-c.h"
#include "lib/wk_alloc.h"
#include "lib/wk_err.h"

enum {
  GRPC_CODE_INVALID_ARGUMENT = 3, /* grpc_status_code values, for ErrorResponse */
  GRPC_CODE_NOT_FOUND = 5,
  NAME_MAX_ECHO = 200, /* bytes of an unknown name quoted in an error message */
};

typedef struct refl_file {
  const uint8_t *bytes; /* the serialized FileDescriptorProto, inside the set */
  size_t len;
  char *name;
  size_t *deps; /* indexes of the files it imports that the set holds */
  size_t n_deps;
} refl_file;

typedef struct refl_symbol {
  char *name; /* fully qualified, no leading dot */
  size_t file;
} refl_symbol;

struct wk_reflection {
  refl_file *files;
  size_t n_files;
  refl_symbol *syms;
  size_t n_syms, cap_syms;
  char **services;
  size_t n_services;
};

/* ---- the index ---------------------------------------------------------------- */

/* "pkg" + "." + "name" ("name" alone for the empty package); owned by the caller. */
static char *qualify(const char *scope, const char *name) {
  const char *n = name ? name : "";
  size_t sl = scope ? strlen(scope) : 0;
  size_t len = sl + 1 + strlen(n) + 1;
  char *out = wk_xmalloc(len);
  if (sl > 0) {
    snprintf(out, len, "%s.%s", scope, n);
  } else {
    snprintf(out, len, "%s", n);
  }
  return out;
}

/* Takes ownership of name. */
static void add_symbol(wk_reflection *r, char *name, size_t file) {
  if (r->n_syms == r->cap_syms) {
    r->cap_syms = r->cap_syms ? r->cap_syms * 2 : 64;
    r->syms = wk_xrealloc(r->syms, r->cap_syms * sizeof *r->syms);
  }
  r->syms[r->n_syms].name = name;
  r->syms[r->n_syms].file = file;
  r->n_syms++;
}

static void add_fields(wk_reflection *r, const char *scope,
                       Google__Protobuf__FieldDescriptorProto **f, size_t n, size_t file) {
  for (size_t i = 0; i < n; i++) add_symbol(r, qualify(scope, f[i]->name), file);
}

static void add_enums(wk_reflection *r, const char *scope,
                      Google__Protobuf__EnumDescriptorProto **e, size_t n, size_t file) {
  for (size_t i = 0; i < n; i++) {
    add_symbol(r, qualify(scope, e[i]->name), file);
    /* enum values live in the enum's enclosing scope (C++ scoping) */
    for (size_t v = 0; v < e[i]->n_value; v++) {
      add_symbol(r, qualify(scope, e[i]->value[v]->name), file);
    }
  }
}

static void add_messages(wk_reflection *r, const char *scope, Google__Protobuf__DescriptorProto **m,
                         size_t n, size_t file, int depth) {
  for (size_t i = 0; i < n; i++) {
    char *name = qualify(scope, m[i]->name);
    if (depth < 64) { /* protoc nests far less; a bound for a set from elsewhere */
      add_fields(r, name, m[i]->field, m[i]->n_field, file);
      add_fields(r, name, m[i]->extension, m[i]->n_extension, file);
      add_enums(r, name, m[i]->enum_type, m[i]->n_enum_type, file);
      add_messages(r, name, m[i]->nested_type, m[i]->n_nested_type, file, depth + 1);
    }
    add_symbol(r, name, file);
  }
}

static void index_file(wk_reflection *r, const Google__Protobuf__FileDescriptorProto *fd,
                       size_t file) {
  const char *pkg = fd->package ? fd->package : "";
  add_messages(r, pkg, fd->message_type, fd->n_message_type, file, 0);
  add_enums(r, pkg, fd->enum_type, fd->n_enum_type, file);
  add_fields(r, pkg, fd->extension, fd->n_extension, file);
  for (size_t i = 0; i < fd->n_service; i++) {
    char *svc = qualify(pkg, fd->service[i]->name);
    for (size_t k = 0; k < fd->service[i]->n_method; k++) {
      add_symbol(r, qualify(svc, fd->service[i]->method[k]->name), file);
    }
    r->services = wk_xrealloc(r->services, (r->n_services + 1) * sizeof *r->services);
    r->services[r->n_services++] = wk_xstrdup(svc);
    add_symbol(r, svc, file);
  }
}

/* Reads a varint at *p (below end); false when it is cut or longer than 10 bytes. */
static bool read_varint(const uint8_t **p, const uint8_t *end, uint64_t *v) {
  *v = 0;
  for (int shift = 0; shift < 64 && *p < end; shift += 7) {
    uint8_t b = *(*p)++;
    *v |= (uint64_t)(b & 0x7f) << shift;
    if (!(b & 0x80)) return true;
  }
  return false;
}

/* The files of a FileDescriptorSet (field 1, repeated bytes), in order. */
static bool split_set(wk_reflection *r, const uint8_t *set, size_t len, char *err, size_t err_len) {
  const uint8_t *p = set, *end = set + len;
  while (p < end) {
    uint64_t tag, n;
    if (!read_varint(&p, end, &tag) || tag != ((1u << 3) | 2u) || !read_varint(&p, end, &n) ||
        n > (uint64_t)(end - p)) {
      wk_errf(err, err_len, "not a FileDescriptorSet (at byte %zu)", (size_t)(p - set));
      return false;
    }
    r->files = wk_xrealloc(r->files, (r->n_files + 1) * sizeof *r->files);
    r->files[r->n_files++] = (refl_file){.bytes = p, .len = (size_t)n};
    p += n;
  }
  return true;
}

static size_t find_file(const wk_reflection *r, const char *name) {
  for (size_t i = 0; i < r->n_files; i++) {
    if (r->files[i].name && strcmp(r->files[i].name, name) == 0) return i;
  }
  return r->n_files;
}

wk_reflection *wk_reflection_new(const uint8_t *set, size_t len, char *err, size_t err_len) {
  wk_reflection *r = wk_xcalloc(1, sizeof *r);
  if (!split_set(r, set, len, err, err_len)) {
    wk_reflection_free(r);
    return NULL;
  }
  Google__Protobuf__FileDescriptorProto **fds = wk_xcalloc(r->n_files + 1, sizeof *fds);
  bool ok = true;
  for (size_t i = 0; i < r->n_files && ok; i++) {
    fds[i] =
        google__protobuf__file_descriptor_proto__unpack(NULL, r->files[i].len, r->files[i].bytes);
    if (!fds[i] || !fds[i]->name) {
      wk_errf(err, err_len, "file %zu of the set is not a FileDescriptorProto with a name", i);
      ok = false;
      break;
    }
    r->files[i].name = wk_xstrdup(fds[i]->name);
    index_file(r, fds[i], i);
  }
  for (size_t i = 0; i < r->n_files && ok; i++) {
    r->files[i].deps = wk_xcalloc(fds[i]->n_dependency + 1, sizeof(size_t));
    for (size_t d = 0; d < fds[i]->n_dependency; d++) {
      size_t k = find_file(r, fds[i]->dependency[d]);
      if (k < r->n_files) r->files[i].deps[r->files[i].n_deps++] = k;
    }
  }
  for (size_t i = 0; i < r->n_files; i++) {
    if (fds[i]) google__protobuf__file_descriptor_proto__free_unpacked(fds[i], NULL);
  }
  free(fds);
  if (!ok) {
    wk_reflection_free(r);
    return NULL;
  }
  return r;
}

void wk_reflection_free(wk_reflection *r) {
  if (!r) return;
  for (size_t i = 0; i < r->n_files; i++) {
    free(r->files[i].name);
    free(r->files[i].deps);
  }
  free(r->files);
  for (size_t i = 0; i < r->n_syms; i++) free(r->syms[i].name);
  free(r->syms);
  for (size_t i = 0; i < r->n_services; i++) free(r->services[i]);
  free(r->services);
  free(r);
}

static pthread_once_t embedded_once = PTHREAD_ONCE_INIT;
static wk_reflection *embedded;

static void build_embedded(void) {
  char err[256];
  embedded = wk_reflection_new(wk_reflection_descriptor_set, wk_reflection_descriptor_set_len, err,
                               sizeof err);
  if (!embedded) {
    fprintf(stderr, "wk_reflection: the embedded descriptor set does not decode: %s\n", err);
    abort(); /* the build made it: a broken build */
  }
}

const wk_reflection *wk_reflection_embedded(void) {
  if (pthread_once(&embedded_once, build_embedded) != 0) abort();
  return embedded;
}

size_t wk_reflection_service_count(const wk_reflection *r) { return r->n_services; }

const char *wk_reflection_service_name(const wk_reflection *r, size_t i) {
  return i < r->n_services ? r->services[i] : NULL;
}

/* ---- answers ------------------------------------------------------------------ */

static size_t find_symbol(const wk_reflection *r, const char *name) {
  if (name[0] == '.') name++; /* ".pkg.Type" as descriptors write type names */
  for (size_t i = 0; i < r->n_syms; i++) {
    if (strcmp(r->syms[i].name, name) == 0) return r->syms[i].file;
  }
  return r->n_files;
}

/* The file and, depth first, every file it imports (each once): the order `out` is
 * filled in, file first. */
static void collect_files(const wk_reflection *r, size_t file, bool *seen, size_t *order,
                          size_t *n) {
  if (seen[file]) return;
  seen[file] = true;
  order[(*n)++] = file;
  for (size_t d = 0; d < r->files[file].n_deps; d++) {
    collect_files(r, r->files[file].deps[d], seen, order, n);
  }
}

/* What the response is built of; everything borrowed from the index or the request. */
typedef struct answer {
  Grpc__Reflection__V1alpha__ServerReflectionResponse resp;
  Grpc__Reflection__V1alpha__FileDescriptorResponse files;
  Grpc__Reflection__V1alpha__ListServiceResponse list;
  Grpc__Reflection__V1alpha__ExtensionNumberResponse ext;
  Grpc__Reflection__V1alpha__ErrorResponse error;
  char error_message[NAME_MAX_ECHO + 96];
  ProtobufCBinaryData *blobs;
  Grpc__Reflection__V1alpha__ServiceResponse *svcs;
  Grpc__Reflection__V1alpha__ServiceResponse **svc_ptrs;
} answer;

static void set_error(answer *a, int code, const char *what, const char *name) {
  size_t n = strlen(name);
  snprintf(a->error_message, sizeof a->error_message, "%s '%.*s%s'", what,
           (int)(n > NAME_MAX_ECHO ? NAME_MAX_ECHO : n), name, n > NAME_MAX_ECHO ? "..." : "");
  a->error.error_code = code;
  a->error.error_message = a->error_message;
  a->resp.message_response_case =
      GRPC__REFLECTION__V1ALPHA__SERVER_REFLECTION_RESPONSE__MESSAGE_RESPONSE_ERROR_RESPONSE;
  a->resp.error_response = &a->error;
}

static void set_files(const wk_reflection *r, answer *a, size_t file) {
  bool *seen = wk_xcalloc(r->n_files, sizeof *seen);
  size_t *order = wk_xcalloc(r->n_files, sizeof *order);
  size_t n = 0;
  collect_files(r, file, seen, order, &n);
  a->blobs = wk_xcalloc(n, sizeof *a->blobs);
  for (size_t i = 0; i < n; i++) {
    a->blobs[i].data = (uint8_t *)(uintptr_t)r->files[order[i]].bytes;
    a->blobs[i].len = r->files[order[i]].len;
  }
  free(seen);
  free(order);
  a->files.n_file_descriptor_proto = n;
  a->files.file_descriptor_proto = a->blobs;
  a->resp.message_response_case =
      GRPC__REFLECTION__V1ALPHA__SERVER_REFLECTION_RESPONSE__MESSAGE_RESPONSE_FILE_DESCRIPTOR_RESPONSE;
  a->resp.file_descriptor_response = &a->files;
}

static void set_services(const wk_reflection *r, answer *a) {
  a->svcs = wk_xcalloc(r->n_services + 1, sizeof *a->svcs);
  a->svc_ptrs = wk_xcalloc(r->n_services + 1, sizeof *a->svc_ptrs);
  for (size_t i = 0; i < r->n_services; i++) {
    grpc__reflection__v1alpha__service_response__init(&a->svcs[i]);
    a->svcs[i].name = r->services[i];
    a->svc_ptrs[i] = &a->svcs[i];
  }
  a->list.n_service = r->n_services;
  a->list.service = a->svc_ptrs;
  a->resp.message_response_case =
      GRPC__REFLECTION__V1ALPHA__SERVER_REFLECTION_RESPONSE__MESSAGE_RESPONSE_LIST_SERVICES_RESPONSE;
  a->resp.list_services_response = &a->list;
}

int wk_reflection_answer(const wk_reflection *r, const uint8_t *req, size_t len, uint8_t **out,
                         size_t *out_len, char *err, size_t err_len) {
  *out = NULL;
  *out_len = 0;
  Grpc__Reflection__V1alpha__ServerReflectionRequest *q =
      grpc__reflection__v1alpha__server_reflection_request__unpack(NULL, len, req);
  if (!q) {
    wk_errf(err, err_len, "the request is not a valid grpc.reflection ServerReflectionRequest");
    return -1;
  }
  answer a;
  memset(&a, 0, sizeof a);
  grpc__reflection__v1alpha__server_reflection_response__init(&a.resp);
  grpc__reflection__v1alpha__file_descriptor_response__init(&a.files);
  grpc__reflection__v1alpha__list_service_response__init(&a.list);
  grpc__reflection__v1alpha__extension_number_response__init(&a.ext);
  grpc__reflection__v1alpha__error_response__init(&a.error);
  /* The request echoed, without what it carried unknown (a field numbered 0 decodes
   * as unknown but would not encode into a response a client can read). */
  Grpc__Reflection__V1alpha__ServerReflectionRequest echo;
  Grpc__Reflection__V1alpha__ExtensionRequest echo_ext;
  grpc__reflection__v1alpha__server_reflection_request__init(&echo);
  grpc__reflection__v1alpha__extension_request__init(&echo_ext);
  echo.host = q->host;
  echo.message_request_case = q->message_request_case;
  if (q->message_request_case ==
      GRPC__REFLECTION__V1ALPHA__SERVER_REFLECTION_REQUEST__MESSAGE_REQUEST_FILE_CONTAINING_EXTENSION) {
    if (q->file_containing_extension) {
      echo_ext.containing_type = q->file_containing_extension->containing_type;
      echo_ext.extension_number = q->file_containing_extension->extension_number;
    }
    echo.file_containing_extension = &echo_ext;
  } else {
    echo.file_by_filename = q->file_by_filename; /* the oneof's strings share the union */
  }
  a.resp.valid_host = q->host;
  a.resp.original_request = &echo;
  size_t f;
  switch ((int)q->message_request_case) { /* int: the enum has a sizing member */
    case GRPC__REFLECTION__V1ALPHA__SERVER_REFLECTION_REQUEST__MESSAGE_REQUEST_LIST_SERVICES:
      set_services(r, &a);
      break;
    case GRPC__REFLECTION__V1ALPHA__SERVER_REFLECTION_REQUEST__MESSAGE_REQUEST_FILE_BY_FILENAME:
      f = find_file(r, q->file_by_filename);
      if (f < r->n_files) {
        set_files(r, &a, f);
      } else {
        set_error(&a, GRPC_CODE_NOT_FOUND, "no such file", q->file_by_filename);
      }
      break;
    case GRPC__REFLECTION__V1ALPHA__SERVER_REFLECTION_REQUEST__MESSAGE_REQUEST_FILE_CONTAINING_SYMBOL:
      f = find_symbol(r, q->file_containing_symbol);
      if (f < r->n_files) {
        set_files(r, &a, f);
      } else {
        set_error(&a, GRPC_CODE_NOT_FOUND, "no such symbol", q->file_containing_symbol);
      }
      break;
    case GRPC__REFLECTION__V1ALPHA__SERVER_REFLECTION_REQUEST__MESSAGE_REQUEST_FILE_CONTAINING_EXTENSION:
      set_error(&a, GRPC_CODE_NOT_FOUND, "no extension of",
                q->file_containing_extension && q->file_containing_extension->containing_type
                    ? q->file_containing_extension->containing_type
                    : "");
      break;
    case GRPC__REFLECTION__V1ALPHA__SERVER_REFLECTION_REQUEST__MESSAGE_REQUEST_ALL_EXTENSION_NUMBERS_OF_TYPE:
      if (find_symbol(r, q->all_extension_numbers_of_type) < r->n_files) {
        a.ext.base_type_name = q->all_extension_numbers_of_type; /* none: no extensions */
        a.resp.message_response_case =
            GRPC__REFLECTION__V1ALPHA__SERVER_REFLECTION_RESPONSE__MESSAGE_RESPONSE_ALL_EXTENSION_NUMBERS_RESPONSE;
        a.resp.all_extension_numbers_response = &a.ext;
      } else {
        set_error(&a, GRPC_CODE_NOT_FOUND, "no such type", q->all_extension_numbers_of_type);
      }
      break;
    default: set_error(&a, GRPC_CODE_INVALID_ARGUMENT, "the request asks nothing", ""); break;
  }
  size_t n = protobuf_c_message_get_packed_size(&a.resp.base);
  *out = wk_xmalloc(n ? n : 1);
  *out_len = protobuf_c_message_pack(&a.resp.base, *out);
  free(a.blobs);
  free(a.svcs);
  free(a.svc_ptrs);
  grpc__reflection__v1alpha__server_reflection_request__free_unpacked(q, NULL);
  return 0;
}

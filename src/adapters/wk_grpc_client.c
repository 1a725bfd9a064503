/* wk_grpc_client.c: a small synchronous gRPC client on gRPC core (see wk_grpc_client.h).
 *
 * Every call gets its own pluck completion queue; ops are started in batches and the
 * caller's thread plucks the batch it waits for. A stream keeps three batches apart:
 * the send batch (initial metadata, the request, half-close, the server's initial
 * metadata), the status batch (started at once, completes when the call ends), and one
 * receive batch at a time. Every batch started is plucked before the queue goes. */
#define _POSIX_C_SOURCE 200809L /* strdup */

#include "adapters/wk_grpc_client.h"

#include <errno.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/grpc_posix.h>
#include <grpc/grpc_security.h>
#include <grpc/slice.h>
#include <grpc/support/alloc.h>
#include <grpc/support/time.h>

#include "adapters/wk_absl_locks.h"
#include "adapters/wk_netaddr.h"
#include "adapters/wk_pem.h"
#include "lib/wk_alloc.h"
#include "lib/wk_assert.h"
#include "lib/wk_err.h"

#define TOKEN_MAX 4096u /* as the server's WK_GRPC_AUTH_TOKEN_MAX */

struct wk_grpc_client {
  grpc_channel *channel;
  char *target;
  char *authorization; /* "Bearer <token>", or NULL */
  int direct_fd;       /* the direct connection's socket (gRPC's), or -1 */
};

struct wk_grpc_stream {
  wk_grpc_client *client;
  grpc_completion_queue *cq;
  grpc_call *call;
  grpc_byte_buffer *send_bb;
  grpc_metadata *md;
  size_t md_count;
  grpc_metadata_array initial_md;
  grpc_metadata_array trailing_md;
  grpc_status_code code;
  grpc_slice details;
  const char *error_string;
  grpc_byte_buffer *recv_bb;
  bool send_plucked;
  bool ended;
  /* their addresses are the batch tags */
  char tag_send;
  char tag_status;
  char tag_recv;
};

/* ---- helpers ------------------------------------------------------------------- */

static void copy_msg(char *dst, size_t dst_len, const char *src, size_t n) {
  if (dst_len == 0) return;
  if (n >= dst_len) n = dst_len - 1;
  if (n > 0) memcpy(dst, src, n);
  dst[n] = '\0';
}

static void local_status(wk_grpc_status *st, grpc_status_code code, const char *msg) {
  if (!st) return;
  st->code = code;
  st->reached_server = false;
  copy_msg(st->message, sizeof st->message, msg, strlen(msg));
}

static gpr_timespec deadline_of(int64_t ms) {
  if (ms <= 0) return gpr_inf_future(GPR_CLOCK_MONOTONIC);
  return gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC), gpr_time_from_millis(ms, GPR_TIMESPAN));
}

/* Plucks `tag`; returns the batch's success flag. */
static bool pluck(grpc_completion_queue *cq, void *tag) {
  grpc_event ev = grpc_completion_queue_pluck(cq, tag, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
  return ev.type == GRPC_OP_COMPLETE && ev.success != 0;
}

static void destroy_cq(grpc_completion_queue *cq) {
  grpc_completion_queue_shutdown(cq);
  grpc_completion_queue_destroy(cq);
}

/* The call's metadata: the caller's n pairs, then the client's authorization (if
 * any). *count is the total. */
static grpc_metadata *make_md(const wk_grpc_client *c, const wk_grpc_md *md, size_t n,
                              size_t *count) {
  size_t total = n + (c->authorization ? 1u : 0u);
  *count = total;
  if (total == 0) return NULL;
  grpc_metadata *out = wk_xcalloc(total, sizeof *out);
  for (size_t i = 0; i < n; i++) {
    out[i].key = grpc_slice_from_copied_string(md[i].key);
    out[i].value = grpc_slice_from_copied_string(md[i].value ? md[i].value : "");
  }
  if (c->authorization) {
    out[n].key = grpc_slice_from_static_string("authorization");
    out[n].value = grpc_slice_from_copied_string(c->authorization);
  }
  return out;
}

static void free_md(grpc_metadata *md, size_t n) {
  if (!md) return;
  for (size_t i = 0; i < n; i++) {
    grpc_slice_unref(md[i].key);
    grpc_slice_unref(md[i].value);
  }
  free(md);
}

static grpc_byte_buffer *make_bb(const uint8_t *data, size_t len) {
  grpc_slice s = grpc_slice_from_copied_buffer((const char *)data, len);
  grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&s, 1);
  grpc_slice_unref(s);
  return bb;
}

/* Copies the whole byte buffer into out (malloc'd; never NULL data). */
static bool take_bb(grpc_byte_buffer *bb, wk_grpc_buf *out) {
  grpc_byte_buffer_reader r;
  if (!grpc_byte_buffer_reader_init(&r, bb)) return false;
  grpc_slice s = grpc_byte_buffer_reader_readall(&r);
  grpc_byte_buffer_reader_destroy(&r);
  size_t n = GRPC_SLICE_LENGTH(s);
  out->data = wk_xmalloc(n ? n : 1);
  if (n) memcpy(out->data, GRPC_SLICE_START_PTR(s), n);
  out->len = n;
  grpc_slice_unref(s);
  return true;
}

static void fill_status(const wk_grpc_client *c, grpc_status_code code, grpc_slice details,
                        const char *error_string, wk_grpc_status *st) {
  if (!st) return;
  st->code = code;
  size_t n = GRPC_SLICE_LENGTH(details);
  if (n > 0) {
    copy_msg(st->message, sizeof st->message, (const char *)GRPC_SLICE_START_PTR(details), n);
  } else if (code != GRPC_STATUS_OK && error_string) {
    copy_msg(st->message, sizeof st->message, error_string, strlen(error_string));
  } else {
    st->message[0] = '\0';
  }
  if (code == GRPC_STATUS_DEADLINE_EXCEEDED) {
    st->reached_server = false;
  } else if (code == GRPC_STATUS_UNAVAILABLE) {
    /* The server says UNAVAILABLE over a live connection (not ready, draining); the
     * transport says it when there is no connection to speak of. */
    st->reached_server = grpc_channel_check_connectivity_state(c->channel, 0) == GRPC_CHANNEL_READY;
  } else {
    st->reached_server = true;
  }
}

void wk_grpc_buf_free(wk_grpc_buf *b) {
  if (!b) return;
  free(b->data);
  b->data = NULL;
  b->len = 0;
}

const char *wk_grpc_status_name(grpc_status_code code) {
  static const char *const names[] = {"OK",
                                      "CANCELLED",
                                      "UNKNOWN",
                                      "INVALID_ARGUMENT",
                                      "DEADLINE_EXCEEDED",
                                      "NOT_FOUND",
                                      "ALREADY_EXISTS",
                                      "PERMISSION_DENIED",
                                      "RESOURCE_EXHAUSTED",
                                      "FAILED_PRECONDITION",
                                      "ABORTED",
                                      "OUT_OF_RANGE",
                                      "UNIMPLEMENTED",
                                      "INTERNAL",
                                      "UNAVAILABLE",
                                      "DATA_LOSS",
                                      "UNAUTHENTICATED"};
  int i = (int)code;
  if (i < 0 || (size_t)i >= sizeof names / sizeof names[0]) return "UNKNOWN_CODE";
  return names[i];
}

/* ---- client ---------------------------------------------------------------------- */

static bool opt_on(const char *v) { return v && *v; }

/* The TLS material of opts (NULL fields: not set). */
typedef struct tls_files {
  char *ca;
  char *cert;
  char *key;
} tls_files;

static void tls_files_free(tls_files *t) {
  wk_pem_free(t->ca);
  wk_pem_free(t->cert);
  wk_pem_free(t->key);
  memset(t, 0, sizeof *t);
}

/* Checks the security options and reads their files: 0, or -1 with a reason. */
static int load_security(const wk_grpc_client_options *opts, tls_files *t, char *err,
                         size_t err_len) {
  memset(t, 0, sizeof *t);
  if (!opts) return 0;
  if (opt_on(opts->token)) {
    size_t n = strnlen(opts->token, TOKEN_MAX + 1);
    bool ok = n <= TOKEN_MAX;
    for (size_t i = 0; ok && i < n; i++) {
      unsigned char ch = (unsigned char)opts->token[i];
      ok = ch > 0x20 && ch < 0x7f;
    }
    if (!ok) {
      wk_errf(err, err_len, "the token must be 1..%u printable ASCII characters without spaces",
              TOKEN_MAX);
      return -1;
    }
  }
  if (opt_on(opts->cert_file) != opt_on(opts->key_file)) {
    wk_errf(err, err_len,
            "a TLS client certificate needs both cert_file and key_file (only %s is set)",
            opt_on(opts->cert_file) ? "cert_file" : "key_file");
    return -1;
  }
  char why[1400] = "";
  bool ok = true;
  if (opt_on(opts->ca_file)) {
    t->ca = wk_pem_read(opts->ca_file, WK_PEM_CERTIFICATES, "CA file", why, sizeof why);
    ok = t->ca != NULL;
  }
  if (ok && opt_on(opts->cert_file)) {
    t->cert = wk_pem_read(opts->cert_file, WK_PEM_CERTIFICATES, "client certificate file", why,
                          sizeof why);
    ok = t->cert != NULL;
    if (ok) {
      t->key = wk_pem_read(opts->key_file, WK_PEM_PRIVATE_KEY, "client key file", why, sizeof why);
      ok = t->key != NULL;
    }
  }
  if (!ok) {
    tls_files_free(t);
    wk_errf(err, err_len, "%s", why);
    return -1;
  }
  return 0;
}

/* A TCP socket connected to target (the first of its addresses that accepts), with
 * TCP_NODELAY as gRPC sets on the sockets it connects itself. -1 with a reason when
 * the target does not resolve or no address accepts; -2 when it is not host:port. */
static int connect_direct(const char *target, char *err, size_t err_len) {
  char host[256], port[16];
  if (!wk_netaddr_split(target, host, sizeof host, port, sizeof port) || host[0] == '\0') {
    wk_errf(err, err_len, "a direct connection needs a host:port target, not '%s'", target);
    return -2;
  }
  struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
  struct addrinfo *res = NULL;
  int gai = getaddrinfo(host, port, &hints, &res);
  if (gai != 0) {
    wk_errf(err, err_len, "cannot resolve %s: %s", target, gai_strerror(gai));
    return -1;
  }
  int fd = -1, why = 0;
  for (const struct addrinfo *a = res; a != NULL && fd < 0; a = a->ai_next) {
    fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      why = errno;
      continue;
    }
    if (connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
      why = errno;
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(res);
  if (fd < 0) {
    wk_errf(err, err_len, "cannot connect to %s: %s", target, strerror(why));
    return -1;
  }
  int one = 1;
  (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one); /* a speed hint only */
  return fd;
}

int wk_grpc_client_open(const char *target, const wk_grpc_client_options *opts,
                        wk_grpc_client **out, char *err, size_t err_len) {
  *out = NULL;
  if (!target || !*target) {
    wk_errf(err, err_len, "no server address given");
    return -1;
  }
  tls_files tls;
  if (load_security(opts, &tls, err, err_len) != 0) return -2;
  bool use_tls = opts && (opt_on(opts->ca_file) || opt_on(opts->cert_file) ||
                          opt_on(opts->key_file) || opt_on(opts->server_name));
  int direct_fd = -1;
  if (opts && opts->direct_connection) {
    if (use_tls) {
      tls_files_free(&tls);
      wk_errf(err, err_len, "a direct connection is plaintext only (TLS options are set)");
      return -2;
    }
    direct_fd = connect_direct(target, err, err_len);
    if (direct_fd < 0) return direct_fd;
  }

  wk_grpc_client *c = wk_xcalloc(1, sizeof *c);
  c->direct_fd = -1;
  c->target = wk_xstrdup(target);
  if (opts && opt_on(opts->token)) {
    size_t n = strlen(opts->token);
    c->authorization = wk_xmalloc(n + sizeof "Bearer ");
    memcpy(c->authorization, "Bearer ", sizeof "Bearer " - 1);
    memcpy(c->authorization + sizeof "Bearer " - 1, opts->token, n + 1);
  }

  size_t max_recv = opts && opts->max_recv_message_bytes ? opts->max_recv_message_bytes
                                                         : WK_GRPC_DEFAULT_MAX_RECV;
  char key_recv[] = GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH;
  char key_ua[] = GRPC_ARG_PRIMARY_USER_AGENT_STRING;
  char key_name[] = GRPC_SSL_TARGET_NAME_OVERRIDE_ARG;
  char key_local[] = GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL;
  char key_retries[] = GRPC_ARG_ENABLE_RETRIES;
  grpc_arg args[5];
  size_t nargs = 0;
  args[nargs].type = GRPC_ARG_INTEGER;
  args[nargs].key = key_recv;
  args[nargs].value.integer = max_recv > (size_t)INT_MAX ? INT_MAX : (int)max_recv;
  nargs++;
  char *ua = NULL;
  if (opts && opts->user_agent) {
    ua = wk_xstrdup(opts->user_agent);
    args[nargs].type = GRPC_ARG_STRING;
    args[nargs].key = key_ua;
    args[nargs].value.string = ua;
    nargs++;
  }
  char *name = NULL;
  if (use_tls && opt_on(opts->server_name)) {
    name = wk_xstrdup(opts->server_name);
    args[nargs].type = GRPC_ARG_STRING;
    args[nargs].key = key_name;
    args[nargs].value.string = name;
    nargs++;
  }
  if (opts && opts->own_connection) {
    args[nargs].type = GRPC_ARG_INTEGER;
    args[nargs].key = key_local;
    args[nargs].value.integer = 1;
    nargs++;
  }
  if (opts && opts->no_retries) {
    args[nargs].type = GRPC_ARG_INTEGER;
    args[nargs].key = key_retries;
    args[nargs].value.integer = 0;
    nargs++;
  }
  grpc_channel_args chargs = {.num_args = nargs, .args = args};

  wk_absl_locks_release_mode(); /* as the worker: no lock graph under every gRPC lock */
  grpc_init();
  grpc_channel_credentials *creds;
  if (use_tls) {
    grpc_ssl_pem_key_cert_pair pair = {.private_key = tls.key, .cert_chain = tls.cert};
    /* gRPC copies the PEM text */
    creds = grpc_ssl_credentials_create_ex(tls.ca, tls.cert ? &pair : NULL, NULL, NULL);
  } else {
    creds = grpc_insecure_credentials_create();
  }
  tls_files_free(&tls);
  if (direct_fd >= 0 && creds) {
    c->channel = grpc_channel_create_from_fd(target, direct_fd, creds, &chargs); /* owns it */
    c->direct_fd = direct_fd;
  } else {
    if (direct_fd >= 0) close(direct_fd);
    c->channel = creds ? grpc_channel_create(target, creds, &chargs) : NULL;
  }
  if (creds) grpc_channel_credentials_release(creds);
  free(ua);
  free(name);
  if (!c->channel) {
    grpc_shutdown();
    free(c->target);
    wk_pem_free(c->authorization);
    free(c);
    if (err && err_len) {
      wk_errf(err, err_len, "cannot create a %schannel to %s", use_tls ? "TLS " : "", target);
    }
    return -1;
  }
  *out = c;
  return 0;
}

void wk_grpc_client_close(wk_grpc_client *c) {
  if (!c) return;
  grpc_channel_destroy(c->channel);
  free(c->target);
  wk_pem_free(c->authorization);
  free(c);
  grpc_shutdown();
}

const char *wk_grpc_client_target(const wk_grpc_client *c) { return c->target; }

int wk_grpc_client_direct_fd(const wk_grpc_client *c) { return c->direct_fd; }

grpc_channel *wk_grpc_client_channel(wk_grpc_client *c) { return c->channel; }

/* ---- unary ------------------------------------------------------------------------- */

grpc_status_code wk_grpc_client_unary(wk_grpc_client *c, const char *method, const uint8_t *req,
                                      size_t req_len, const wk_grpc_md *md, size_t md_count,
                                      int64_t deadline_ms, wk_grpc_buf *resp, wk_grpc_status *st) {
  WK_ASSERT(c && c->channel && method && method[0] == '/');
  WK_ASSERT(resp && st && (req || req_len == 0) && (md || md_count == 0));
  resp->data = NULL;
  resp->len = 0;
  grpc_completion_queue *cq = grpc_completion_queue_create_for_pluck(NULL);
  grpc_slice method_slice = grpc_slice_from_copied_string(method);
  grpc_call *call = grpc_channel_create_call(c->channel, NULL, GRPC_PROPAGATE_DEFAULTS, cq,
                                             method_slice, NULL, deadline_of(deadline_ms), NULL);
  grpc_slice_unref(method_slice);

  size_t gmd_count = 0;
  grpc_metadata *gmd = make_md(c, md, md_count, &gmd_count);
  grpc_byte_buffer *req_bb = make_bb(req, req_len);
  grpc_byte_buffer *resp_bb = NULL;
  grpc_metadata_array initial_md, trailing_md;
  grpc_metadata_array_init(&initial_md);
  grpc_metadata_array_init(&trailing_md);
  grpc_status_code code = GRPC_STATUS_UNKNOWN;
  grpc_slice details = grpc_empty_slice();
  const char *error_string = NULL;

  grpc_op ops[6];
  memset(ops, 0, sizeof ops);
  ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
  ops[0].data.send_initial_metadata.count = gmd_count;
  ops[0].data.send_initial_metadata.metadata = gmd;
  ops[1].op = GRPC_OP_SEND_MESSAGE;
  ops[1].data.send_message.send_message = req_bb;
  ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
  ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
  ops[3].data.recv_initial_metadata.recv_initial_metadata = &initial_md;
  ops[4].op = GRPC_OP_RECV_MESSAGE;
  ops[4].data.recv_message.recv_message = &resp_bb;
  ops[5].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
  ops[5].data.recv_status_on_client.trailing_metadata = &trailing_md;
  ops[5].data.recv_status_on_client.status = &code;
  ops[5].data.recv_status_on_client.status_details = &details;
  ops[5].data.recv_status_on_client.error_string = &error_string;

  char tag;
  grpc_call_error ce = grpc_call_start_batch(call, ops, 6, &tag, NULL);
  if (ce != GRPC_CALL_OK) {
    char m[128];
    snprintf(m, sizeof m, "cannot start the call (grpc_call_error %d%s)", (int)ce,
             ce == GRPC_CALL_ERROR_INVALID_METADATA ? ": invalid metadata" : "");
    local_status(st, GRPC_STATUS_INTERNAL, m);
    code = GRPC_STATUS_INTERNAL;
  } else {
    (void)pluck(cq, &tag); /* the status is in `code` whatever the batch's flag */
    fill_status(c, code, details, error_string, st);
    if (code == GRPC_STATUS_OK) {
      if (!resp_bb || !take_bb(resp_bb, resp)) {
        code = GRPC_STATUS_INTERNAL;
        local_status(st, code, "the server answered OK without a response message");
        if (st) st->reached_server = true;
      }
    }
  }

  if (resp_bb) grpc_byte_buffer_destroy(resp_bb);
  grpc_byte_buffer_destroy(req_bb);
  free_md(gmd, gmd_count);
  grpc_metadata_array_destroy(&initial_md);
  grpc_metadata_array_destroy(&trailing_md);
  grpc_slice_unref(details);
  gpr_free((void *)(uintptr_t)error_string);
  grpc_call_unref(call);
  destroy_cq(cq);
  return code;
}

/* ---- server streaming ---------------------------------------------------------------- */

static void stream_free(wk_grpc_stream *s) {
  if (s->recv_bb) grpc_byte_buffer_destroy(s->recv_bb);
  if (s->send_bb) grpc_byte_buffer_destroy(s->send_bb);
  free_md(s->md, s->md_count);
  grpc_metadata_array_destroy(&s->initial_md);
  grpc_metadata_array_destroy(&s->trailing_md);
  grpc_slice_unref(s->details);
  gpr_free((void *)(uintptr_t)s->error_string);
  if (s->call) grpc_call_unref(s->call);
  destroy_cq(s->cq);
  free(s);
}

int wk_grpc_stream_open(wk_grpc_client *c, const char *method, const uint8_t *req, size_t req_len,
                        const wk_grpc_md *md, size_t md_count, int64_t deadline_ms,
                        wk_grpc_stream **out, wk_grpc_status *st) {
  WK_ASSERT(c && c->channel && method && method[0] == '/');
  WK_ASSERT(out && st && (req || req_len == 0) && (md || md_count == 0));
  *out = NULL;
  wk_grpc_stream *s = wk_xcalloc(1, sizeof *s);
  s->client = c;
  s->cq = grpc_completion_queue_create_for_pluck(NULL);
  grpc_slice method_slice = grpc_slice_from_copied_string(method);
  s->call = grpc_channel_create_call(c->channel, NULL, GRPC_PROPAGATE_DEFAULTS, s->cq, method_slice,
                                     NULL, deadline_of(deadline_ms), NULL);
  grpc_slice_unref(method_slice);
  s->md = make_md(c, md, md_count, &s->md_count);
  s->send_bb = make_bb(req, req_len);
  grpc_metadata_array_init(&s->initial_md);
  grpc_metadata_array_init(&s->trailing_md);
  s->code = GRPC_STATUS_UNKNOWN;
  s->details = grpc_empty_slice();

  grpc_op ops[4];
  memset(ops, 0, sizeof ops);
  ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
  ops[0].data.send_initial_metadata.count = s->md_count;
  ops[0].data.send_initial_metadata.metadata = s->md;
  ops[1].op = GRPC_OP_SEND_MESSAGE;
  ops[1].data.send_message.send_message = s->send_bb;
  ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
  ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
  ops[3].data.recv_initial_metadata.recv_initial_metadata = &s->initial_md;
  grpc_call_error ce = grpc_call_start_batch(s->call, ops, 4, &s->tag_send, NULL);
  if (ce != GRPC_CALL_OK) {
    char m[128];
    snprintf(m, sizeof m, "cannot start the call (grpc_call_error %d%s)", (int)ce,
             ce == GRPC_CALL_ERROR_INVALID_METADATA ? ": invalid metadata" : "");
    local_status(st, GRPC_STATUS_INTERNAL, m);
    stream_free(s); /* nothing was started: nothing to pluck */
    return -1;
  }
  s->send_plucked = false;

  grpc_op sop;
  memset(&sop, 0, sizeof sop);
  sop.op = GRPC_OP_RECV_STATUS_ON_CLIENT;
  sop.data.recv_status_on_client.trailing_metadata = &s->trailing_md;
  sop.data.recv_status_on_client.status = &s->code;
  sop.data.recv_status_on_client.status_details = &s->details;
  sop.data.recv_status_on_client.error_string = &s->error_string;
  ce = grpc_call_start_batch(s->call, &sop, 1, &s->tag_status, NULL);
  if (ce != GRPC_CALL_OK) {
    /* Cannot happen for a fresh call; end it cleanly anyway. */
    grpc_call_cancel(s->call, NULL);
    (void)pluck(s->cq, &s->tag_send);
    local_status(st, GRPC_STATUS_INTERNAL, "cannot start the call's status batch");
    stream_free(s);
    return -1;
  }
  *out = s;
  return 0;
}

int wk_grpc_stream_next(wk_grpc_stream *s, wk_grpc_buf *msg) {
  WK_ASSERT(s && s->call && msg);
  WK_ASSERT(s->recv_bb == NULL); /* one receive at a time */
  msg->data = NULL;
  msg->len = 0;
  if (s->ended) return 0;
  grpc_op op;
  memset(&op, 0, sizeof op);
  op.op = GRPC_OP_RECV_MESSAGE;
  op.data.recv_message.recv_message = &s->recv_bb;
  if (grpc_call_start_batch(s->call, &op, 1, &s->tag_recv, NULL) != GRPC_CALL_OK) {
    s->ended = true;
    return 0;
  }
  bool ok = pluck(s->cq, &s->tag_recv);
  if (!s->send_plucked) {
    /* The server's initial metadata precedes its first message or its status. */
    (void)pluck(s->cq, &s->tag_send);
    s->send_plucked = true;
  }
  if (!ok || !s->recv_bb) {
    if (s->recv_bb) grpc_byte_buffer_destroy(s->recv_bb);
    s->recv_bb = NULL;
    s->ended = true;
    return 0;
  }
  bool took = take_bb(s->recv_bb, msg);
  grpc_byte_buffer_destroy(s->recv_bb);
  s->recv_bb = NULL;
  if (!took) {
    grpc_call_cancel_with_status(s->call, GRPC_STATUS_INTERNAL, "undecodable message", NULL);
    s->ended = true;
    return 0;
  }
  return 1;
}

void wk_grpc_stream_cancel(wk_grpc_stream *s) { grpc_call_cancel(s->call, NULL); }

grpc_status_code wk_grpc_stream_finish(wk_grpc_stream *s, wk_grpc_status *st) {
  WK_ASSERT(s && s->call && s->cq);
  if (!s->ended) grpc_call_cancel(s->call, NULL);
  if (!s->send_plucked) {
    (void)pluck(s->cq, &s->tag_send);
    s->send_plucked = true;
  }
  (void)pluck(s->cq, &s->tag_status);
  grpc_status_code code = s->code;
  fill_status(s->client, code, s->details, s->error_string, st);
  stream_free(s);
  return code;
}

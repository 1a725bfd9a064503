/* wk_grpc_client.h: a small synchronous gRPC client on gRPC core's C API.
 *
 * Used by workerctl and by the Worker's shadow forwarder. It moves encoded protobuf
 * bytes only: the caller packs requests and unpacks responses (protobuf-c).
 *
 *   wk_grpc_client *c;
 *   wk_grpc_client_open("127.0.0.1:7070", NULL, &c, err, sizeof err);
 *   wk_grpc_status st;
 *   wk_grpc_buf resp;
 *   if (wk_grpc_client_unary(c, "/worker.v1.WorkerService/GetTaskResult", req, req_len,
 *                            NULL, 0, 5000, &resp, &st) == GRPC_STATUS_OK) { ...; }
 *   wk_grpc_buf_free(&resp);
 *   wk_grpc_client_close(c);
 *
 * Threads: a client (one channel, one HTTP/2 connection) may be used by many threads at
 * once; every call runs on its own completion queue and blocks only its caller. A
 * stream is used by one thread at a time, except wk_grpc_stream_cancel, which any
 * thread may call while another blocks in wk_grpc_stream_next.
 *
 * Security: plaintext by default; TLS (and mutual TLS with a client certificate) and
 * a bearer token through wk_grpc_client_options. The token is sent as the metadata
 * "authorization: Bearer <token>" on every call, over TLS or not (without TLS anyone on
 * the path can read it).
 *
 * Global state: none beyond gRPC's own; each open client holds one grpc_init()
 * reference, released by wk_grpc_client_close (grpc_shutdown). Opening one turns
 * abseil's mutex deadlock detection off for the process (adapters/wk_absl_locks.h), as
 * the worker does: workerctl and the load generator pay no lock graph either. */
#ifndef WK_GRPC_CLIENT_H
#define WK_GRPC_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <grpc/status.h>

typedef struct wk_grpc_client wk_grpc_client;
typedef struct wk_grpc_stream wk_grpc_stream;

#define WK_GRPC_STATUS_MESSAGE_MAX 1024u
#define WK_GRPC_DEFAULT_MAX_RECV (64u << 20) /* 64 MiB: a TaskResult may carry outputs */

/* One metadata pair to send. Keys are lower case ("x-shadow-submit"); values printable
 * ASCII (keys ending in "-bin" take any bytes, NUL-terminated here). */
typedef struct wk_grpc_md {
  const char *key;
  const char *value;
} wk_grpc_md;

/* Final status of a call. */
typedef struct wk_grpc_status {
  grpc_status_code code;
  /* True when the status came from the server; false when the call failed before the
   * server answered (connection refused or lost, name not resolved, deadline passed
   * before a connection) as far as the client can tell: an UNAVAILABLE while the
   * channel is not connected, or a DEADLINE_EXCEEDED. */
  bool reached_server;
  char message[WK_GRPC_STATUS_MESSAGE_MAX]; /* the status message, NUL-terminated */
} wk_grpc_status;

/* Bytes owned by the caller: free with wk_grpc_buf_free. */
typedef struct wk_grpc_buf {
  uint8_t *data;
  size_t len;
} wk_grpc_buf;

typedef struct wk_grpc_client_options {
  size_t max_recv_message_bytes; /* 0 = WK_GRPC_DEFAULT_MAX_RECV */
  const char *user_agent;        /* primary user agent; NULL = gRPC's own */
  /* TLS is on when any of the next four is set (NULL or "" = unset). Files are read
   * by wk_grpc_client_open only. */
  const char *ca_file;     /* PEM CA certificate(s) that must have signed the server's
                              certificate; unset = gRPC's default roots
                              ($GRPC_DEFAULT_SSL_ROOTS_FILE_PATH or its roots.pem) */
  const char *cert_file;   /* PEM client certificate chain for mutual TLS; needs key_file */
  const char *key_file;    /* PEM (unencrypted) private key of cert_file */
  const char *server_name; /* the name the server's certificate must carry, instead of
                              the target's host (GRPC_SSL_TARGET_NAME_OVERRIDE_ARG) */
  const char *token;       /* set = "authorization: Bearer <token>" on every call;
                              printable ASCII without spaces */
  bool own_connection;     /* true = this client never shares its HTTP/2 connection with
                              another client to the same target (gRPC shares them by
                              default): a load generator opens several on purpose */
  bool no_retries;         /* true = the channel has no gRPC retry layer (not even its
                              transparent retries): a failed call fails at once. About
                              an eighth cheaper per call on the client (callgrind); for a
                              client that checks every call and retries, if at all, itself */
  bool direct_connection;  /* true = wk_grpc_client_open connects one TCP socket to the
                              target ("host:port", plaintext only) and the channel runs
                              on it alone (grpc_channel_create_from_fd): no name
                              resolution, load balancing, subchannel or reconnection
                              (11-16% of a load generator's instructions per task); a
                              broken connection fails every later call. Implies
                              own_connection */
} wk_grpc_client_options;

/** Frees the bytes of b (NULL data is fine) and zeroes it. */
void wk_grpc_buf_free(wk_grpc_buf *b);

/** Creates a client for `target` ("host:port", or any gRPC target URI) over HTTP/2,
 * plaintext or TLS as opts say. Connects lazily, at the first call: a failed TLS
 * handshake (untrusted server, missing or rejected client certificate, plaintext
 * server) shows as UNAVAILABLE on the calls; with direct_connection it connects now.
 * opts may be NULL. Returns 0; -1 with a reason in err when the target is empty, the
 * channel cannot be created or (direct_connection) no address of the target accepts
 * the connection; -2 with a reason when an option is invalid (a TLS file unreadable or
 * not PEM, cert_file without key_file, a token with spaces, direct_connection with TLS
 * or with a target that is not host:port). */
int wk_grpc_client_open(const char *target, const wk_grpc_client_options *opts,
                        wk_grpc_client **out, char *err, size_t err_len);

/** Destroys the channel (calls still running on it fail CANCELLED; finish every
 * stream first) and releases the client's grpc_init reference. NULL is a no-op. */
void wk_grpc_client_close(wk_grpc_client *c);

/** The target the client was opened with. */
const char *wk_grpc_client_target(const wk_grpc_client *c);

/** The socket of a direct connection (options.direct_connection), or -1. It is gRPC's:
 * valid while the client is open, for socket options only (a load generator corks it
 * while it starts a burst of calls); never read, write or close it. */
int wk_grpc_client_direct_fd(const wk_grpc_client *c);

/** The client's gRPC channel (owned by the client, valid until wk_grpc_client_close),
 * for callers that run their own asynchronous calls on a completion queue of theirs
 * (bench/wk_loadgen.c). Such calls do not get the client's bearer token. */
struct grpc_channel *wk_grpc_client_channel(wk_grpc_client *c);

/** Unary call of `method` ("/pkg.Service/Method") with the encoded request, sending
 * the md_count metadata pairs in md (md may be NULL when md_count is 0). deadline_ms
 * is relative to now; 0 or negative means none. Fails fast (UNAVAILABLE) when the
 * server cannot be reached rather than waiting for it. On OK *resp holds the encoded
 * response (possibly empty); otherwise resp is empty. Writes the final status to *st
 * and returns its code. */
grpc_status_code wk_grpc_client_unary(wk_grpc_client *c, const char *method, const uint8_t *req,
                                      size_t req_len, const wk_grpc_md *md, size_t md_count,
                                      int64_t deadline_ms, wk_grpc_buf *resp, wk_grpc_status *st);

/** Starts a server-streaming call: sends the request and half-closes. deadline_ms as
 * for wk_grpc_client_unary (0 = none, the usual choice for a watch). Returns 0 and a
 * stream, to be read with wk_grpc_stream_next and ended with wk_grpc_stream_finish;
 * failures to reach the server show up there. Returns -1 with *st filled (and no
 * stream) only when the call cannot be started at all (invalid metadata). */
int wk_grpc_stream_open(wk_grpc_client *c, const char *method, const uint8_t *req, size_t req_len,
                        const wk_grpc_md *md, size_t md_count, int64_t deadline_ms,
                        wk_grpc_stream **out, wk_grpc_status *st);

/** Blocks for the next message. Returns 1 with the encoded message in *msg (caller
 * frees), or 0 when the stream has ended (normally, with an error, or cancelled):
 * then call wk_grpc_stream_finish for the status. After 0, further calls return 0. */
int wk_grpc_stream_next(wk_grpc_stream *s, wk_grpc_buf *msg);

/** Cancels the stream: a blocked wk_grpc_stream_next returns 0 and the status is
 * CANCELLED (unless the server's status arrived first). Any thread. */
void wk_grpc_stream_cancel(wk_grpc_stream *s);

/** Ends the stream (cancelling it when it has not ended yet), writes its final
 * status to *st (st may be NULL), frees the stream and returns the status code. */
grpc_status_code wk_grpc_stream_finish(wk_grpc_stream *s, wk_grpc_status *st);

/** Name of a status code as in the gRPC spec ("NOT_FOUND"); "UNKNOWN_CODE" otherwise. */
const char *wk_grpc_status_name(grpc_status_code code);

#endif

/* wk_grpc_server.h: the Worker's gRPC server on gRPC core's C API.
 *
 * One TCP port serves worker.v1.WorkerService (RequestTaskSlot, SubmitTask,
 * GetTaskResult, WatchTasks, CancelTask) and grpc.health.v1.Health (Check, Watch).
 * A single completion-queue thread accepts calls, decodes the request with
 * protobuf-c and validates every field. Invalid requests are answered on that thread
 * (INVALID_ARGUMENT, with a message a person can act on) and never reach the
 * sink; unknown methods are answered UNIMPLEMENTED at once. Valid requests are
 * handed to the sink (the orchestrator), which answers from any thread.
 *
 * Ownership: the server owns every wk_rpc. The sink receives one reference with
 * on_rpc and gives it back with wk_rpc_release once it will touch the rpc no more
 * (after wk_rpc_reply/wk_rpc_fail for unary calls; after wk_rpc_finish, or after
 * on_closed, for streams). The server frees the rpc when gRPC is done with it and
 * the sink's reference is released.
 *
 * Transport security (see wk_grpc_server_config):
 *   - TLS: with tls_cert_file and tls_key_file the port speaks only TLS (plaintext
 *     clients fail at the handshake: gRPC reports UNAVAILABLE to them).
 *   - Mutual TLS: with tls_client_ca_file too, every client must present a
 *     certificate that chains to one of those CAs, or the handshake fails.
 *   - Bearer token: with auth_token, every call, Health.Check and Health.Watch
 *     included (a load balancer's health probe must send it too), must carry the
 *     metadata "authorization: Bearer <auth_token>" (the scheme matched
 *     case-insensitively, the token compared in constant time); otherwise it is
 *     answered UNAUTHENTICATED "missing or wrong bearer token; pass --token /
 *     WORKERCTL_TOKEN" on the completion-queue thread and never reaches the sink.
 *     Unknown methods are answered UNAUTHENTICATED too, before UNIMPLEMENTED. The
 *     token works without TLS, but then travels in clear text.
 *   The files are read once, at start; an unreadable file or one that is not PEM of
 *   the right kind fails the start with a message naming the setting and the file. */
#ifndef WK_GRPC_SERVER_H
#define WK_GRPC_SERVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <grpc/status.h>

#include "adapters/wk_grpc_listener.h"
#include "adapters/wk_rpc_method.h"
#include "lib/wk_shared.h"

typedef struct wk_grpc_server wk_grpc_server;
typedef struct wk_rpc wk_rpc;

/** Full gRPC path of a method ("/worker.v1.WorkerService/SubmitTask"). */
const char *wk_rpc_method_path(wk_rpc_method m);
/** Short name ("SubmitTask") for logs and metrics. */
const char *wk_rpc_method_name(wk_rpc_method m);

typedef struct wk_grpc_server_sink {
  /* A decoded, validated request. Called on the completion-queue thread: must not
   * block (post to the actor and return). The sink now holds one reference. */
  void (*on_rpc)(void *ud, wk_rpc *rpc);
  /* A streaming rpc ended on the client's side: `cancelled` is true when the client
   * went away or cancelled before the server finished the stream. Called once per
   * streaming rpc on the completion-queue thread, before the rpc can be freed; the
   * sink's reference stays valid until it calls wk_rpc_release.
   * It comes after a normal wk_rpc_finish too (cancelled false, once the status is
   * out), and also while the server stops (cancelled true). If the sink has already
   * released the rpc, the rpc is valid only during this call: a sink that hands the
   * rpc to another thread from here should release streams only after on_closed.
   * May be NULL. */
  void (*on_closed)(void *ud, wk_rpc *rpc, bool cancelled);
  /* The completion-queue thread has handled every event that was ready (or a batch of
   * WK_GRPC_BATCH_EVENTS_MAX of them) and is about to wait or go on: the sink wakes its
   * actor once for all it was handed since the last call, rather than once per rpc.
   * Called on the completion-queue thread, also once as it exits. May be NULL (then
   * on_rpc and on_closed must each wake the actor themselves). */
  void (*on_batch_end)(void *ud);
  void *ud;
} wk_grpc_server_sink;

/* At most this many completion-queue events between two on_batch_end calls. */
#define WK_GRPC_BATCH_EVENTS_MAX 64u

typedef struct wk_grpc_server_config {
  const char *listen_addr;         /* "host:port"; port 0 picks a free one */
  size_t max_message_bytes;        /* larger requests: INVALID_ARGUMENT naming max_message_bytes */
  size_t deploy_max_message_bytes; /* DeployCode requests may be this large when it is above
                                      max_message_bytes (0 = no exception) */
  uint32_t max_connections;        /* TCP connections open at once; more are closed at once
                                (wk_grpc_listener.h); 0 = no cap */
  uint64_t max_ttl_ms;             /* ttl_ms above this is capped by the core, above 2^40 invalid */
  uint64_t max_timeout_ms;         /* timeout_ms above this: INVALID_ARGUMENT */
  uint32_t max_watch_tasks;        /* task_ids per WatchTasks request */
  uint32_t max_stream_queue;       /* queued messages per stream before wk_rpc_send fails */
  /* Unsent bytes (queued, and the message gRPC has not yet taken) per stream, and over
   * all streams with a shared body counted once (lib/wk_send_budget.h): a message over
   * either is refused (wk_rpc_send_parts). A stream with nothing unsent always takes
   * one message. */
  size_t max_stream_bytes;
  size_t max_total_stream_bytes;
  /* Transport security; NULL or "" leaves a setting off. Paths are read at start only
   * (the strings need not outlive wk_grpc_server_start). */
  const char *tls_cert_file;      /* PEM certificate chain, server certificate first:
                                     with tls_key_file, the port speaks TLS only */
  const char *tls_key_file;       /* PEM private key of that certificate (unencrypted) */
  const char *tls_client_ca_file; /* PEM CA certificate(s): set = mutual TLS, every client
                                     must present a certificate they signed (needs
                                     tls_cert_file and tls_key_file) */
  const char *auth_token;         /* set = every call must send "authorization: Bearer
                                     <auth_token>"; 1..4096 printable ASCII characters,
                                     no spaces */
  /* gRPC server reflection (grpc.reflection.v1alpha and v1 ServerReflection, answered
   * by the server itself from the descriptors embedded at build time, wk_reflection.h);
   * false: those methods are unknown (UNIMPLEMENTED). Behind auth_token like the rest. */
  bool reflection;
  /* Called once per call with its method name (wk_rpc_method_name, or "unknown" for
   * an unregistered one) and the status code sent, or CANCELLED for a call that ended
   * before a status was sent (the client cancelled or went away); on the thread that
   * sends the status or sees the end (keep it short; it must not call back into the
   * server). NULL = none. */
  void (*on_status)(void *ud, const char *method, int code);
  void *on_status_ud;
} wk_grpc_server_config;
/* A zero limit above selects its default: */
#define WK_GRPC_DEFAULT_MAX_MESSAGE_BYTES ((size_t)4 << 20)
#define WK_GRPC_DEFAULT_MAX_TIMEOUT_MS ((uint64_t)24 * 3600 * 1000)
#define WK_GRPC_DEFAULT_MAX_WATCH_TASKS 1024u
#define WK_GRPC_DEFAULT_MAX_STREAM_QUEUE 256u
#define WK_GRPC_DEFAULT_MAX_STREAM_BYTES ((size_t)8 << 20)
#define WK_GRPC_DEFAULT_MAX_TOTAL_STREAM_BYTES ((size_t)256 << 20)

#define WK_GRPC_AUTH_TOKEN_MAX 4096u
/* The status message of a call refused for its token (UNAUTHENTICATED). */
#define WK_GRPC_UNAUTHENTICATED_MESSAGE \
  "missing or wrong bearer token; pass --token / WORKERCTL_TOKEN"

/** Binds, starts the server and its completion-queue thread. Writes the bound port
 * to *port. Returns 0, or -1 with a reason in err (e.g. the address is in use, a TLS
 * file is unreadable or not PEM, the key does not belong to the certificate, an
 * auth_token with spaces). */
int wk_grpc_server_start(const wk_grpc_server_config *cfg, wk_grpc_server_sink sink,
                         wk_grpc_server **out, int *port, char *err, size_t err_len);

/** The TCP listener's connection counters and state (wk_grpc_listener.h): connections
 * open, refused, and whether the worker is out of descriptors and cannot accept. All
 * zero for a unix: address. Any thread. */
void wk_grpc_server_conn_stats(const wk_grpc_server *server, wk_grpc_conn_stats *out);

/** Stops accepting calls, cancels calls still open, waits for the completion-queue
 * thread and frees the server. The sink must have released every rpc, or will get
 * no further callbacks; rpcs it still holds stay valid until released. on_closed
 * may still be called (cancelled true) for open streams while stop runs, and
 * answers that race with stop are dropped. Call from any thread but the
 * completion-queue thread (not from a sink callback). NULL is a no-op. */
void wk_grpc_server_stop(wk_grpc_server *server);

/** Send batches the sink asks for (wk_rpc_reply, _send, _finish, _fail) start on the
 * completion-queue thread: the sink's thread leaves them in the server's outbox and
 * nudges that thread (one empty batch on the queue). With `on`, the calling thread
 * (an event loop answering many rpcs per turn) stops nudging per answer and must call
 * wk_grpc_server_flush before it next waits; off again restores the nudge per answer.
 * Per thread, for every server; cannot fail. */
void wk_grpc_server_defer_on_this_thread(bool on);

/** Nudges the completion-queue thread when the outbox holds batches to start (one
 * nudge for all of them). Any thread; NULL is a no-op. */
void wk_grpc_server_flush(wk_grpc_server *server);

wk_rpc_method wk_rpc_method_of(const wk_rpc *rpc);
/** The decoded request (protobuf-c message of the method's type); owned by the rpc. */
const void *wk_rpc_request(const wk_rpc *rpc);
/** Value of a request metadata key (e.g. "x-shadow-submit", "traceparent") copied
 * into buf (NUL-terminated, cut to buf_len - 1 bytes); returns false when absent.
 * Keys match case-insensitively. "authorization" is consumed by the server and
 * always absent here (the token never reaches the sink). */
bool wk_rpc_metadata(const wk_rpc *rpc, const char *key, char *buf, size_t buf_len);
/** The names of the client's verified certificate (mutual TLS): its subject common name
 * and subject alternative names, '\n'-separated; "" without a verified certificate.
 * Collected for DeployCode and SetCurrentEpoch only ("" for other methods). */
const char *wk_rpc_peer_identities(const wk_rpc *rpc);
/** Peer address as gRPC reports it ("ipv4:127.0.0.1:5555"). */
const char *wk_rpc_peer(const wk_rpc *rpc);

/** Unary: answers OK with the encoded response message (copied). Only the first of
 * reply / fail / finish counts; later ones, and answers after the client went away,
 * are ignored. Thread-safe. */
void wk_rpc_reply(wk_rpc *rpc, const uint8_t *msg, size_t len);
/** Unary or stream: answers `code` with `message` (copied). On a stream, messages
 * queued and not yet started are dropped. Thread-safe. */
void wk_rpc_fail(wk_rpc *rpc, grpc_status_code code, const char *message);
/** Stream: queues one encoded message (copied); messages go out in order, one
 * SEND_MESSAGE in flight at a time. Returns false (and queues nothing) when the queue
 * is full, a byte bound is reached, or the stream is finished or cancelled, and on a
 * unary rpc. Thread-safe. */
bool wk_rpc_send(wk_rpc *rpc, const uint8_t *msg, size_t len);

typedef enum wk_rpc_send_status {
  WK_RPC_SEND_OK = 0,
  WK_RPC_SEND_ENDED,             /* finished, cancelled or closed, or not a stream */
  WK_RPC_SEND_QUEUE_FULL,        /* max_stream_queue messages wait already */
  WK_RPC_SEND_OVER_STREAM_BYTES, /* this stream would hold over max_stream_bytes unsent */
  WK_RPC_SEND_OVER_TOTAL_BYTES,  /* all streams would hold over max_total_stream_bytes */
} wk_rpc_send_status;

/** Stream: queues one message made of `head` (copied) followed by the bytes of `body`
 * (NULL: none). The body is not copied: the rpc takes its own reference until gRPC is
 * done with it, so one encoded body may go to many streams. The message counts toward
 * the byte bounds (see wk_grpc_server_config) until gRPC has taken it. Returns
 * WK_RPC_SEND_OK, or why nothing was queued. The caller keeps its reference to body.
 * Thread-safe. */
wk_rpc_send_status wk_rpc_send_parts(wk_rpc *rpc, const uint8_t *head, size_t head_len,
                                     wk_shared *body);
/** Stream: from now on, messages that queue up behind the one in flight go out as one
 * message (up to WK_RPC_MERGE_MAX_BYTES, the first always): the oldest as it is and
 * each later one appended as the length-delimited protobuf field `field`, so a reader
 * decodes the first message with the others, in order, in its repeated field `field`.
 * A stream that is idle still sends each message at once, alone. 0 turns it off (the
 * default). Thread-safe. */
void wk_rpc_merge_queued(wk_rpc *rpc, uint32_t field);
#define WK_RPC_MERGE_MAX_BYTES ((size_t)256 << 10)

/** Stream or unary: ends the call now with `code`/`message` (copied), dropping every
 * message not yet sent, the one gRPC holds included (unlike wk_rpc_fail, which waits
 * for it: a client that never reads would never let it go). The client sees the
 * status if it reads on; the stream's on_closed follows with cancelled true. Later
 * sends fail. No-op once a status is out or the call is closed. Thread-safe. */
void wk_rpc_abort(wk_rpc *rpc, grpc_status_code code, const char *message);
/** Stream: ends it with `code`/`message` after every queued message is sent.
 * Thread-safe; later sends fail. */
void wk_rpc_finish(wk_rpc *rpc, grpc_status_code code, const char *message);
/** Gives back the sink's reference. */
void wk_rpc_release(wk_rpc *rpc);

#endif

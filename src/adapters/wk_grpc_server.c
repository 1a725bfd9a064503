/* wk_grpc_server.c: the Worker's gRPC server on gRPC core's C API. See
 * wk_grpc_server.h for the contract and DESIGN.md §3, §11.
 *
 * Threads. One completion-queue (CQ) thread runs grpc_completion_queue_next and owns
 * accepting, decoding, validating, answering invalid or unknown calls, and the
 * completions of every batch. The sink answers from any thread: wk_rpc_reply / _fail /
 * _send / _finish take the rpc's mutex and queue what is to go out.
 *
 * The outbox. Send batches start on the CQ thread: the sink's thread puts the rpc in
 * the server's outbox and nudges the CQ thread (an empty batch on a call of a lame
 * channel bound to the CQ, which completes there at once). Started from the sink's
 * thread while the CQ thread reads, batches contended for gRPC's transport locks and
 * gRPC handed the work to its executor thread: measured with 2 cores, the worker used
 * ~25% more CPU per task and a futex wake-up of that thread per answer. An event loop
 * (the worker's) calls wk_grpc_server_defer_on_this_thread: its answers of one turn
 * share one nudge (wk_grpc_server_flush, before it waits), and a turn that answers a
 * single rpc starts it itself, so a lone answer costs no hop. A stream that reaches its
 * queue bound while in the outbox starts its batch at once (the bound counts what waits
 * behind the batch in flight).
 *
 * Corking. gRPC writes each started batch at once (one sendmsg per answer). When the
 * nudge starts a burst of answers, a connection with two or more of them in a window
 * of CORK_BURST_MAX is corked (TCP_CORK) while they start and uncorked after, so they
 * leave in one send. A call's socket is found from its peer string through the
 * listener's index (wk_grpc_listener_peer_fd); the descriptor is gRPC's and may have
 * been closed or reused since, which only means some socket is corked and uncorked
 * within the window.
 *
 * Sends. An rpc has at most one send batch in flight. Messages the sink queues while
 * one is in flight wait in a bounded FIFO; when the batch completes, the CQ thread
 * starts the next one (a stream set to merge, wk_rpc_merge_queued, sends all that
 * waited, up to a byte bound, as one message: their slices, never copied). The first batch carries SEND_INITIAL_METADATA; the status goes
 * out with the last queued message (a unary reply is one batch: metadata, message,
 * status, and RECV_CLOSE_ON_SERVER). A stream has its RECV_CLOSE_ON_SERVER batch from
 * the start, which completes when the call is over and says whether it was cancelled
 * (the sink's on_closed); a unary call's sink answers without waiting on the client,
 * so its close rides in the reply's batch: one batch and one completion fewer per call
 * (4,000-6,000 of the worker's instructions, bench_instructions.py).
 *
 * Lifetime. An rpc is reference-counted: one reference per batch in flight, one for
 * the sink (from on_rpc to wk_rpc_release), and one the CQ thread holds while it
 * accepts the call. The last one frees it, and unrefs the grpc_call.
 *
 * Shutdown (the "gate"). Every operation that will post to the CQ (a batch, a
 * request for a call, the shutdown notification) first enters the gate, which counts
 * it as outstanding; the CQ thread leaves the gate for each event. Stopping closes the
 * gate, waits for the count to reach zero, and only then shuts the CQ down: nothing
 * can post to a CQ that is shut down, whichever thread the sink answers from.
 *
 * Security (wk_grpc_auth.c). TLS and mutual TLS are gRPC core's (ssl server credentials
 * on the port); the files are read and checked (wk_pem.h) at start. The bearer token is
 * checked on the CQ thread as a call is accepted, before its request is decoded: a call
 * without it is answered UNAUTHENTICATED like an invalid one, and never reaches the sink.
 *
 * Unsent bytes (wk_send_budget.h). Every message queued on a stream is charged to the
 * server's budget until gRPC has taken it (its send batch completed) or it is dropped:
 * per stream (max_stream_bytes) and in all (max_total_stream_bytes, shared bodies
 * once). A message over either bound is refused (wk_rpc_send_parts says which); the
 * sink then ends the stream with wk_rpc_abort, which cancels the call at once, the
 * message in flight included (a client that never reads never completes it). A
 * message's shared body goes to gRPC as a slice over the wk_shared, never copied.
 *
 * Locks: rpc->mu guards one rpc's send state; the gate is atomic (its mutex only
 * wakes stop); server->list_mu guards the live list and is never held with rpc->mu;
 * server->budget_mu and server->outbox_mu are taken inside rpc->mu, and nothing
 * inside them. */
#define _GNU_SOURCE /* pthread_setname_np */
#include "lib/wk_assert.h"
#include "lib/wk_err.h"
#include "adapters/wk_grpc_server.h"

#include <limits.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/slice.h>
#include <grpc/support/alloc.h>
#include <grpc/support/time.h>

#include "adapters/wk_grpc_auth.h"
#include "adapters/wk_grpc_listener.h"
#include "adapters/wk_pem.h"
#include "adapters/wk_reflection.h"
#include "adapters/wk_validate.h"
#include "lib/wk_alloc.h"
#include "lib/wk_arena.h"
#include "lib/wk_buf.h"
#include "lib/wk_send_budget.h"
#include "lib/wk_shared.h"

/* ---- constants ---------------------------------------------------------------- */

enum {
  CONN_FD_UNKNOWN = -2,      /* wk_rpc.conn_fd before its lookup */
  CORK_BURST_MAX = 64,       /* answers started in one cork window (bounds their delay) */
  CORK_CONNS_MAX = 8,        /* connections corked in one window; more go uncorked */
  SLOTS_PER_METHOD = 8,      /* calls requested ahead per registered method */
  GENERIC_SLOTS = 2,         /* calls requested ahead for unknown methods */
  STATUS_MESSAGE_MAX = 4096, /* bytes of a status message sent */
  UNKNOWN_PATH_MAX = 200,    /* bytes of an unknown method's path echoed back */
};

typedef struct method_info {
  const char *path;
  const char *name;
  bool streaming;
} method_info;

static const method_info k_methods[WK_RPC_METHOD_COUNT] = {
    [WK_RPC_REQUEST_TASK_SLOT] = {"/worker.v1.WorkerService/RequestTaskSlot", "RequestTaskSlot",
                                  false},
    [WK_RPC_SUBMIT_TASK] = {"/worker.v1.WorkerService/SubmitTask", "SubmitTask", false},
    [WK_RPC_GET_TASK_RESULT] = {"/worker.v1.WorkerService/GetTaskResult", "GetTaskResult", false},
    [WK_RPC_WATCH_TASKS] = {"/worker.v1.WorkerService/WatchTasks", "WatchTasks", true},
    [WK_RPC_CANCEL_TASK] = {"/worker.v1.WorkerService/CancelTask", "CancelTask", false},
    [WK_RPC_HEALTH_CHECK] = {"/grpc.health.v1.Health/Check", "Health.Check", false},
    [WK_RPC_HEALTH_WATCH] = {"/grpc.health.v1.Health/Watch", "Health.Watch", true},
    [WK_RPC_LIST_TASKS] = {"/worker.v1.WorkerService/ListTasks", "ListTasks", false},
    [WK_RPC_GET_TASK_LOGS] = {"/worker.v1.WorkerService/GetTaskLogs", "GetTaskLogs", false},
    [WK_RPC_DEPLOY_CODE] = {"/worker.v1.WorkerService/DeployCode", "DeployCode", false},
    [WK_RPC_SET_CURRENT_EPOCH] = {"/worker.v1.WorkerService/SetCurrentEpoch", "SetCurrentEpoch",
                                  false},
};

/* ---- types -------------------------------------------------------------------- */

/* What a CQ event's tag points at; embedded in the owning struct. */
typedef enum tag_kind {
  TAG_REQUEST,       /* request_slot: a registered method's call arrived */
  TAG_GENERIC,       /* generic_slot: a call for an unknown method arrived */
  TAG_UNIMPLEMENTED, /* unimplemented_call: its answer batch is done (UNIMPLEMENTED, or
                        UNAUTHENTICATED for an unknown method without the token) */
  TAG_CLOSE,         /* wk_rpc: RECV_CLOSE_ON_SERVER is done */
  TAG_SEND,          /* wk_rpc: a send batch is done */
  TAG_SHUTDOWN,      /* the server has shut down */
  TAG_REFL_REQUEST,  /* refl_slot: a reflection call arrived */
  TAG_REFL,          /* refl_call: its batch is done */
  TAG_NUDGE,         /* the server's nudge: the outbox has send batches to start */
} tag_kind;

typedef struct wk_tag {
  tag_kind kind;
} wk_tag;

#define CONTAINER_OF(ptr, type, member) ((type *)(void *)((char *)(ptr)-offsetof(type, member)))

typedef struct request_slot {
  wk_tag tag;
  wk_grpc_server *server;
  wk_rpc_method method;
  grpc_call *call;
  gpr_timespec deadline;
  grpc_metadata_array md;
  grpc_byte_buffer *payload;
} request_slot;

typedef struct generic_slot {
  wk_tag tag;
  wk_grpc_server *server;
  grpc_call *call;
  grpc_call_details details;
  grpc_metadata_array md;
} generic_slot;

/* Server reflection: one registered method per protocol version (v1alpha, v1). Its
 * calls never reach the sink: the CQ thread reads each request, answers it from the
 * embedded descriptors (wk_reflection_answer) and reads the next, one batch in flight,
 * until the client half-closes (status OK) or the call breaks. */
enum { REFL_VERSIONS = 2, REFL_SLOTS = 2 };
static const char *const k_refl_paths[REFL_VERSIONS] = {
    "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
    "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
};
#define REFL_METHOD_NAME "ServerReflection"

typedef struct refl_slot {
  wk_tag tag;
  wk_grpc_server *server;
  int version;
  grpc_call *call;
  gpr_timespec deadline;
  grpc_metadata_array md;
} refl_slot;

typedef enum refl_state { REFL_RECEIVING, REFL_SENDING, REFL_FINISHING } refl_state;

typedef struct refl_call {
  wk_tag tag;
  wk_grpc_server *server;
  grpc_call *call;
  refl_state state;
  bool md_sent;
  grpc_byte_buffer *recv; /* RECV_MESSAGE's target */
  grpc_byte_buffer *send; /* the response in flight */
  grpc_slice details;
  bool has_details;
  int cancelled;
} refl_call;

typedef struct unimplemented_call {
  wk_tag tag;
  grpc_call *call;
  grpc_slice details;
  int cancelled;
} unimplemented_call;

/* A queued message: its bytes as one or two slices (a copied head, and a body shared
 * with the caller), made into a byte buffer only when its batch starts: messages
 * merged into one send never get one of their own. */
typedef struct msg_node {
  struct msg_node *next;
  grpc_slice parts[2];
  uint8_t nparts;        /* 1 or 2 */
  size_t len;            /* the message's bytes, all parts */
  bool charged;          /* a stream message counted in the server's budget */
  wk_send_charge charge; /* its bytes, when charged (charge.body: a reference) */
} msg_node;

struct wk_rpc {
  wk_grpc_server *server; /* holds a server reference */
  atomic_uint refs;
  wk_rpc_method method;
  bool streaming;
  bool to_sink; /* handed to the sink; CQ thread only */

  /* live list, under server->list_mu */
  wk_rpc *prev;
  wk_rpc *next;
  bool in_list;

  grpc_call *call;           /* NULL once stop has detached the rpc (then closed is true) */
  ProtobufCMessage *request; /* decoded into `arena`: freed with it */
  wk_arena arena;
  char *peer;         /* gpr_malloc'ed by gRPC */
  int conn_fd;        /* its connection's socket (CONN_FD_UNKNOWN: not looked up yet,
                         -1: not one the listener accepted); CQ thread only */
  char *identities;   /* the client certificate's names, '\n'-separated (deploy methods) */
  wk_grpc_auth_md md; /* the request metadata but "authorization" */

  wk_tag close_tag;
  int cancelled; /* written by RECV_CLOSE_ON_SERVER */
  wk_tag send_tag;

  pthread_mutex_t mu;
  /* ---- under mu ---- */
  bool closed;           /* no batch may start: call over, failed, or server stopping */
  bool initial_md_sent;  /* a batch with SEND_INITIAL_METADATA has started */
  bool send_in_flight;   /* a send batch is started and not completed */
  bool finish_requested; /* reply / fail / finish was called */
  bool status_sent;      /* the batch with the status has started */
  msg_node *inflight;    /* the messages of the send batch in flight, oldest first
                            (linked by next; more than one when merged) */
  grpc_byte_buffer *inflight_message; /* the one message they went out as */
  uint32_t merge_field;               /* wk_rpc_merge_queued; 0 = each message alone */
  grpc_slice inflight_details;
  bool inflight_has_details;
  msg_node *q_head;
  msg_node *q_tail;
  uint32_t q_len;
  wk_send_stream budget; /* this stream's unsent bytes (under server->budget_mu too) */
  grpc_status_code finish_code;
  char *finish_message;
  msg_node reply_node; /* wk_rpc_reply's message (at most one per rpc): no allocation */
  bool start_deferred; /* in the server's outbox: its next send batch starts on the CQ thread */

  wk_rpc *outbox_next; /* under server->outbox_mu */
};

struct wk_grpc_server {
  wk_grpc_server_config cfg; /* the TLS and token pointers are NULL: not kept */
  char *listen_addr;
  char *auth_token; /* NULL: no token required */
  size_t auth_token_len;
  wk_validate_limits limits;
  wk_grpc_server_sink sink;
  atomic_uint refs; /* the owner's (until stop) plus one per rpc */

  grpc_server *server;
  wk_grpc_listener *listener; /* the TCP accept loop; NULL for unix: addresses */
  grpc_completion_queue *cq;
  void *registered[WK_RPC_METHOD_COUNT];
  request_slot slots[WK_RPC_METHOD_COUNT][SLOTS_PER_METHOD];
  generic_slot generic[GENERIC_SLOTS];
  void *refl_registered[REFL_VERSIONS]; /* NULL: reflection off */
  refl_slot refl_slots[REFL_VERSIONS][REFL_SLOTS];
  const wk_reflection *reflection;
  wk_tag shutdown_tag;
  pthread_t thread;

  /* The gate: lock-free on the way in and out; mu/cv only wake stop(). */
  atomic_bool gate_closed;
  atomic_size_t outstanding; /* operations that will post one CQ event */
  atomic_bool shutting_down; /* stop() has begun: failed requests are not renewed */
  pthread_mutex_t mu;
  pthread_cond_t cv;

  pthread_mutex_t list_mu; /* the live list */
  pthread_cond_t list_cv;
  wk_rpc *live;

  /* The outbox: rpcs whose next send batch the CQ thread starts (see "Sends" above).
   * outbox_mu is taken inside an rpc's mu, and nothing inside it. */
  pthread_mutex_t outbox_mu;
  wk_rpc *outbox_head, *outbox_tail;
  atomic_bool nudge_pending;         /* a nudge is posted and its event not handled yet */
  atomic_uint_fast64_t sends_corked; /* send batches started on a corked connection */
  grpc_channel *nudge_channel;       /* a lame channel: its call only carries empty batches */
  grpc_call *nudge_call;             /* bound to cq: an empty batch completes there at once */
  wk_tag nudge_tag;

  /* Streams' unsent bytes: taken inside an rpc's mu, never the other way round. */
  pthread_mutex_t budget_mu;
  wk_send_budget budget;
};

/* ---- small helpers ------------------------------------------------------------ */

__attribute__((format(printf, 1, 2))) static void log_error(const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  (void)vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  /* msg comes from our own format strings: no quotes or control characters */
  fprintf(stderr, "{\"level\":\"error\",\"component\":\"grpc_server\",\"msg\":\"%s\"}\n", msg);
}

static void lock(pthread_mutex_t *m) {
  int rc = pthread_mutex_lock(m);
  if (rc != 0) abort();
}

static void unlock(pthread_mutex_t *m) {
  int rc = pthread_mutex_unlock(m);
  if (rc != 0) abort();
}

static grpc_byte_buffer *make_message(const uint8_t *msg, size_t len) {
  grpc_slice s = grpc_slice_from_copied_buffer(len > 0 ? (const char *)msg : "", len);
  grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&s, 1);
  grpc_slice_unref(s);
  return bb;
}

static void unref_shared(void *p) { wk_shared_unref(p); }

/* Sets node's message: `head` (copied) followed by `body`'s bytes (not copied: the
 * slice holds a reference to body; NULL or empty: none). */
static void node_set_message(msg_node *node, const uint8_t *head, size_t head_len,
                             wk_shared *body) {
  node->parts[0] = grpc_slice_from_copied_buffer(head_len > 0 ? (const char *)head : "", head_len);
  node->nparts = 1;
  node->len = head_len;
  if (body != NULL && body->len > 0) {
    node->parts[1] =
        grpc_slice_new_with_user_data(body->data, body->len, unref_shared, wk_shared_ref(body));
    node->nparts = 2;
    node->len += body->len;
  }
}

/* Drops node's slices (its message is sent or dropped). */
static void node_drop_message(msg_node *node) {
  for (uint8_t i = 0; i < node->nparts; i++) grpc_slice_unref(node->parts[i]);
  node->nparts = 0;
}

/* ---- names -------------------------------------------------------------------- */

const char *wk_rpc_method_path(wk_rpc_method m) {
  return (unsigned)m < (unsigned)WK_RPC_METHOD_COUNT ? k_methods[m].path : "";
}

const char *wk_rpc_method_name(wk_rpc_method m) {
  return (unsigned)m < (unsigned)WK_RPC_METHOD_COUNT ? k_methods[m].name : "unknown";
}

/* ---- the gate ----------------------------------------------------------------- */

/* One counted operation posted its event (or failed to start). */
static void gate_leave(wk_grpc_server *s) {
  size_t before = atomic_fetch_sub(&s->outstanding, 1);
  WK_ASSERT(before > 0);
  if (before == 1 && atomic_load(&s->gate_closed)) {
    lock(&s->mu); /* stop() checks the count under mu: no lost wake-up */
    pthread_cond_broadcast(&s->cv);
    unlock(&s->mu);
  }
}

/* Counts one operation that will post a CQ event; false once stopping. Sequentially
 * consistent: either stop() sees the increment, or this sees the gate closed. */
static bool gate_enter(wk_grpc_server *s) {
  atomic_fetch_add(&s->outstanding, 1);
  if (atomic_load(&s->gate_closed)) {
    gate_leave(s);
    return false;
  }
  return true;
}

/* stop(): no operation starts after this returns, and every counted one has posted
 * its event (the CQ thread has taken it off the queue). */
static void gate_close_and_drain(wk_grpc_server *s) {
  atomic_store(&s->gate_closed, true);
  lock(&s->mu);
  while (atomic_load(&s->outstanding) > 0) pthread_cond_wait(&s->cv, &s->mu);
  unlock(&s->mu);
}

/* ---- server and rpc lifetime -------------------------------------------------- */

static void server_free(wk_grpc_server *s) {
  WK_ASSERT(s->live == NULL);
  pthread_mutex_destroy(&s->mu);
  pthread_cond_destroy(&s->cv);
  pthread_mutex_destroy(&s->list_mu);
  pthread_cond_destroy(&s->list_cv);
  WK_ASSERT(s->budget.total == 0);
  pthread_mutex_destroy(&s->budget_mu);
  WK_ASSERT(s->outbox_head == NULL);
  pthread_mutex_destroy(&s->outbox_mu);
  free(s->listen_addr);
  wk_pem_free(s->auth_token);
  free(s);
}

static void server_unref(wk_grpc_server *s) {
  unsigned before = atomic_fetch_sub_explicit(&s->refs, 1, memory_order_acq_rel);
  WK_ASSERT(before > 0);
  if (before == 1) server_free(s);
}

/* Gives back a message's bytes to the budget (it was the stream's oldest unsent one;
 * `next` follows it) and frees the node. Caller holds r->mu (or the only reference). */
static void release_node_locked(wk_rpc *r, msg_node *node, msg_node *next) {
  if (node->charged) {
    wk_grpc_server *s = r->server;
    lock(&s->budget_mu);
    wk_send_budget_release(&s->budget, &r->budget, &node->charge,
                           next != NULL && next->charged ? &next->charge : NULL);
    if (r->budget.unsent == 0) r->budget.last_body = NULL;
    unlock(&s->budget_mu);
    wk_shared_unref(node->charge.body);
  }
  node_drop_message(node);
  if (node != &r->reply_node) free(node);
}

/* Drops the queued messages (not the one in flight: gRPC still has it). */
static void drop_queue_locked(wk_rpc *r) {
  msg_node *n = r->q_head;
  r->q_head = NULL;
  r->q_tail = NULL;
  r->q_len = 0;
  while (n != NULL) {
    msg_node *next = n->next;
    release_node_locked(r, n, next);
    n = next;
  }
  /* the newest unsent message is now the newest in flight, if any */
  msg_node *last = r->inflight;
  while (last != NULL && last->next != NULL) last = last->next;
  r->budget.last_body = last != NULL && last->charged ? last->charge.body : NULL;
}

static void rpc_free(wk_rpc *r) {
  wk_grpc_server *s = r->server;
  WK_ASSERT(!r->send_in_flight);
  /* Unlink and unref the call under list_mu: stop() waits on list_cv for frees that
   * race with it, so no grpc_call outlives the server's teardown. */
  lock(&s->list_mu);
  if (r->in_list) {
    if (r->prev != NULL) r->prev->next = r->next;
    else s->live = r->next;
    if (r->next != NULL) r->next->prev = r->prev;
    r->in_list = false;
  }
  if (r->call != NULL) {
    grpc_call_unref(r->call);
    r->call = NULL;
  }
  pthread_cond_broadcast(&s->list_cv);
  unlock(&s->list_mu);

  drop_queue_locked(r); /* no other reference: no lock needed */
  free(r->finish_message);
  wk_arena_release(&r->arena); /* the request */
  if (r->peer != NULL) gpr_free(r->peer);
  free(r->identities);
  wk_grpc_auth_md_free(&r->md);
  pthread_mutex_destroy(&r->mu);
  free(r);
  server_unref(s);
}

static void rpc_ref(wk_rpc *r) {
  unsigned before = atomic_fetch_add_explicit(&r->refs, 1, memory_order_relaxed);
  WK_ASSERT(before > 0);
  (void)before;
}

static void rpc_unref(wk_rpc *r) {
  unsigned before = atomic_fetch_sub_explicit(&r->refs, 1, memory_order_acq_rel);
  WK_ASSERT(before > 0);
  if (before == 1) rpc_free(r);
}

/* Drops a reference known not to be the last (the caller holds another). */
static void rpc_unref_not_last(wk_rpc *r) {
  unsigned before = atomic_fetch_sub_explicit(&r->refs, 1, memory_order_acq_rel);
  WK_ASSERT(before > 1);
  (void)before;
}

/* Takes a reference unless the count already reached zero (a free is under way). */
static bool rpc_try_ref(wk_rpc *r) {
  unsigned cur = atomic_load_explicit(&r->refs, memory_order_relaxed);
  while (cur > 0) {
    if (atomic_compare_exchange_weak_explicit(&r->refs, &cur, cur + 1, memory_order_acq_rel,
                                              memory_order_relaxed)) {
      return true;
    }
  }
  return false;
}

/* A new rpc for an accepted call, holding the CQ thread's (accept) reference, on the
 * live list. Takes ownership of call. */
static wk_rpc *rpc_new(wk_grpc_server *s, wk_rpc_method m, grpc_call *call,
                       const grpc_metadata_array *md) {
  wk_rpc *r = wk_xcalloc(1, sizeof *r);
  atomic_init(&r->refs, 1);
  r->server = s;
  r->method = m;
  r->streaming = k_methods[m].streaming;
  r->call = call;
  r->close_tag.kind = TAG_CLOSE;
  r->send_tag.kind = TAG_SEND;
  r->finish_code = GRPC_STATUS_OK;
  if (pthread_mutex_init(&r->mu, NULL) != 0) abort();
  wk_grpc_auth_md_copy(&r->md, md);
  r->peer = grpc_call_get_peer(call);
  r->conn_fd = CONN_FD_UNKNOWN;
  if (m == WK_RPC_DEPLOY_CODE || m == WK_RPC_SET_CURRENT_EPOCH) {
    r->identities = wk_grpc_auth_peer_identities(call); /* for deploy_allowed_clients */
  }
  atomic_fetch_add_explicit(&s->refs, 1, memory_order_relaxed);

  lock(&s->list_mu);
  r->next = s->live;
  if (s->live != NULL) s->live->prev = r;
  s->live = r;
  r->in_list = true;
  unlock(&s->list_mu);
  return r;
}

/* ---- sending ------------------------------------------------------------------ */

/* How many queued messages the next batch carries: 1, or with merging on as many as
 * fit in WK_RPC_MERGE_MAX_BYTES (the first whatever its size). Caller holds r->mu. */
static size_t merge_count_locked(const wk_rpc *r) {
  if (r->merge_field == 0) return 1;
  size_t take = 1;
  size_t bytes = r->q_head->len;
  for (const msg_node *m = r->q_head->next; m != NULL; m = m->next) {
    bytes += m->len + 16; /* its key and length */
    if (bytes > WK_RPC_MERGE_MAX_BYTES) break;
    take++;
  }
  return take;
}

/* The one message of the chain `first`: its parts; for two or more, the first's parts,
 * then for each later one the key of `field` (length-delimited), its length, and its
 * parts. The slices are referenced, not copied; the nodes keep theirs. */
static grpc_byte_buffer *chain_message(msg_node *first, uint32_t field) {
  if (first->next == NULL) return grpc_raw_byte_buffer_create(first->parts, first->nparts);
  size_t count = 0;
  for (const msg_node *m = first; m != NULL; m = m->next) {
    count += m->nparts + (m != first ? 1u : 0u);
  }
  grpc_slice *slices = wk_xcalloc(count, sizeof *slices);
  size_t at = 0;
  for (const msg_node *m = first; m != NULL; m = m->next) {
    if (m != first) {
      uint8_t prefix[20];
      size_t pn = wk_varint_put(prefix, ((uint64_t)field << 3) | 2u);
      pn += wk_varint_put(prefix + pn, m->len);
      slices[at++] = grpc_slice_from_copied_buffer((const char *)prefix, pn);
    }
    for (uint8_t i = 0; i < m->nparts; i++) slices[at++] = grpc_slice_ref(m->parts[i]);
  }
  WK_ASSERT(at == count);
  grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(slices, count); /* takes refs */
  for (size_t i = 0; i < count; i++) grpc_slice_unref(slices[i]);
  free(slices);
  return bb;
}

/* Releases a chain of sent (or refused) messages, oldest first: each gives its bytes
 * back to the budget as the stream's oldest unsent one. Caller holds r->mu. */
static void release_chain_locked(wk_rpc *r, msg_node *chain) {
  while (chain != NULL) {
    msg_node *next = chain->next;
    release_node_locked(r, chain, next != NULL ? next : r->q_head);
    chain = next;
  }
}

/* Starts the next send batch when one is due: queued messages first, the status
 * with (or after) the last of them. Caller holds r->mu and a reference. */
static void start_send_locked(wk_rpc *r) {
  WK_ASSERT(!r->send_in_flight);
  if (r->closed || r->status_sent) return;
  bool want_msg = r->q_head != NULL;
  /* the messages this batch carries: the oldest, and those merged behind it */
  size_t take = want_msg ? merge_count_locked(r) : 0;
  msg_node *rest = r->q_head;
  for (size_t i = 0; i < take; i++) rest = rest->next;
  bool want_status = r->finish_requested && rest == NULL;
  if (!want_msg && !want_status) return;
  if (!gate_enter(r->server)) {
    r->closed = true;
    drop_queue_locked(r);
    return;
  }

  grpc_op ops[4];
  memset(ops, 0, sizeof ops);
  size_t n = 0;
  if (!r->initial_md_sent) {
    ops[n].op = GRPC_OP_SEND_INITIAL_METADATA;
    n++;
  }
  msg_node *node = NULL;
  grpc_byte_buffer *message = NULL;
  if (want_msg) {
    node = r->q_head;
    msg_node *last = node;
    for (size_t i = 1; i < take; i++) last = last->next;
    r->q_head = last->next;
    if (r->q_head == NULL) r->q_tail = NULL;
    r->q_len -= (uint32_t)take;
    last->next = NULL;
    message = chain_message(node, r->merge_field);
    ops[n].op = GRPC_OP_SEND_MESSAGE;
    ops[n].data.send_message.send_message = message;
    n++;
  }
  grpc_slice details = grpc_empty_slice();
  bool has_details = false;
  if (want_status) {
    ops[n].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
    ops[n].data.send_status_from_server.status = r->finish_code;
    if (r->finish_message != NULL && r->finish_message[0] != '\0') {
      details = grpc_slice_from_copied_string(r->finish_message);
      has_details = true;
      ops[n].data.send_status_from_server.status_details = &details;
    }
    n++;
    if (!r->streaming) { /* a unary call's close rides with its status (see the top) */
      ops[n].op = GRPC_OP_RECV_CLOSE_ON_SERVER;
      ops[n].data.recv_close_on_server.cancelled = &r->cancelled;
      n++;
    }
  }
  WK_ASSERT(n > 0 && n <= 4);

  rpc_ref(r); /* the batch's */
  grpc_call_error e = grpc_call_start_batch(r->call, ops, n, &r->send_tag, NULL);
  if (e != GRPC_CALL_OK) {
    log_error("%s: send batch refused: %s", k_methods[r->method].name,
              grpc_call_error_to_string(e));
    release_chain_locked(r, node);
    if (message != NULL) grpc_byte_buffer_destroy(message);
    if (has_details) grpc_slice_unref(details);
    r->closed = true;
    drop_queue_locked(r);
    gate_leave(r->server);
    rpc_unref_not_last(r);
    return;
  }
  if (want_status && r->server->cfg.on_status) {
    r->server->cfg.on_status(r->server->cfg.on_status_ud, k_methods[r->method].name,
                             (int)r->finish_code);
  }
  r->send_in_flight = true;
  r->initial_md_sent = true;
  r->inflight = node;
  r->inflight_message = message;
  r->inflight_details = details;
  r->inflight_has_details = has_details;
  if (want_status) r->status_sent = true;
}

/* CQ thread: a send batch completed; start the next one if any is due. */
static void on_send_done(wk_rpc *r, bool ok) {
  lock(&r->mu);
  WK_ASSERT(r->send_in_flight);
  r->send_in_flight = false;
  msg_node *done = r->inflight;
  r->inflight = NULL;
  release_chain_locked(r, done);
  if (r->inflight_message != NULL) {
    grpc_byte_buffer_destroy(r->inflight_message);
    r->inflight_message = NULL;
  }
  if (r->inflight_has_details) {
    grpc_slice_unref(r->inflight_details);
    r->inflight_has_details = false;
  }
  if (!ok || (r->status_sent && !r->streaming)) {
    /* the call is broken or cancelled, or a unary call is over (its close rode along) */
    r->closed = true;
    drop_queue_locked(r);
  } else {
    start_send_locked(r);
  }
  unlock(&r->mu);
  rpc_unref(r);
}

/* CQ thread: the call is over (finished or cancelled). */
static void on_close_done(wk_rpc *r) {
  wk_grpc_server *s = r->server;
  lock(&r->mu);
  r->closed = true;
  drop_queue_locked(r);
  bool cancelled = r->cancelled != 0;
  bool answered = r->status_sent;
  unlock(&r->mu);
  if (!answered && s->cfg.on_status) {
    /* ended without our status (the client cancelled or went away): counted once */
    s->cfg.on_status(s->cfg.on_status_ud, k_methods[r->method].name, (int)GRPC_STATUS_CANCELLED);
  }
  if (r->streaming && r->to_sink && s->sink.on_closed != NULL) {
    s->sink.on_closed(s->sink.ud, r, cancelled);
  }
  rpc_unref(r);
}

/* ---- the outbox ---------------------------------------------------------------- */

/* The CQ thread starts batches itself; a thread that called
 * wk_grpc_server_defer_on_this_thread leaves its nudges to wk_grpc_server_flush. */
static _Thread_local bool tls_cq_thread;
static _Thread_local bool tls_deferring;

/* Posts an empty batch on the nudge call, unless one is pending: the CQ thread wakes
 * and empties the outbox. A closed gate (stopping) posts nothing: stop empties it. */
static void nudge(wk_grpc_server *s) {
  if (atomic_exchange(&s->nudge_pending, true)) return;
  if (!gate_enter(s)) {
    atomic_store(&s->nudge_pending, false);
    return;
  }
  grpc_call_error e = grpc_call_start_batch(s->nudge_call, NULL, 0, &s->nudge_tag, NULL);
  if (e != GRPC_CALL_OK) { /* cannot happen for an empty batch; the next push retries */
    log_error("nudge refused: %s", grpc_call_error_to_string(e));
    atomic_store(&s->nudge_pending, false);
    gate_leave(s);
  }
}

/* A send batch of r is due (caller holds r->mu, nothing in flight): the CQ thread
 * starts it now; any other thread leaves it in the outbox for the CQ thread, so gRPC's
 * transport is driven from one thread and the caller never waits on its locks. */
static void start_send_or_defer_locked(wk_rpc *r) {
  if (tls_cq_thread) {
    start_send_locked(r);
    return;
  }
  if (r->start_deferred || r->closed) return;
  r->start_deferred = true;
  rpc_ref(r); /* the outbox's */
  wk_grpc_server *s = r->server;
  lock(&s->outbox_mu);
  if (s->outbox_tail != NULL) s->outbox_tail->outbox_next = r;
  else s->outbox_head = r;
  s->outbox_tail = r;
  unlock(&s->outbox_mu);
  if (!tls_deferring) nudge(s);
}

/* Takes the outbox's rpcs, oldest first. */
static wk_rpc *outbox_take(wk_grpc_server *s) {
  lock(&s->outbox_mu);
  wk_rpc *list = s->outbox_head;
  s->outbox_head = s->outbox_tail = NULL;
  unlock(&s->outbox_mu);
  return list;
}

/* Starts the batch of r, taken out of the outbox, and drops the outbox's reference. */
static void start_taken(wk_rpc *r) {
  r->outbox_next = NULL;
  lock(&r->mu);
  r->start_deferred = false;
  if (!r->send_in_flight) start_send_locked(r);
  unlock(&r->mu);
  rpc_unref(r);
}

/* ---- corking ------------------------------------------------------------------- */

/* The connections of one cork window and how many of its answers each carries. */
typedef struct cork_set {
  int fd[CORK_CONNS_MAX];
  uint32_t sends[CORK_CONNS_MAX];
  size_t n;
} cork_set;

/* CQ thread: the socket of r's connection, or -1. */
static int conn_fd_of(wk_rpc *r) {
  if (r->conn_fd == CONN_FD_UNKNOWN) {
    r->conn_fd = wk_grpc_listener_peer_fd(r->server->listener, r->peer);
  }
  return r->conn_fd;
}

static void cork_count(cork_set *c, int fd) {
  if (fd < 0) return;
  for (size_t i = 0; i < c->n; i++) {
    if (c->fd[i] == fd) {
      c->sends[i]++;
      return;
    }
  }
  if (c->n == CORK_CONNS_MAX) return;
  c->fd[c->n] = fd;
  c->sends[c->n++] = 1;
}

/* Sets or clears TCP_CORK on every connection of c with two answers or more; returns
 * how many answers those carry. Clearing sends what the cork held at once. A failure
 * changes nothing (a descriptor gRPC closed since, or reused for another socket, is
 * corked and uncorked within the window, which is harmless to any socket). */
static uint64_t cork_set_all(const cork_set *c, int on) {
  uint64_t sends = 0;
  for (size_t i = 0; i < c->n; i++) {
    if (c->sends[i] < 2) continue;
    (void)setsockopt(c->fd[i], IPPROTO_TCP, TCP_CORK, &on, sizeof on);
    sends += c->sends[i];
#if WK_DEBUG_ASSERTS_ON
    if (!on) { /* nothing is left corked: that would hold answers up to 200 ms */
      int now = 0;
      socklen_t len = sizeof now;
      WK_DEBUG_ASSERT(getsockopt(c->fd[i], IPPROTO_TCP, TCP_CORK, &now, &len) != 0 || now == 0);
    }
#endif
  }
  return sends;
}

/* CQ thread: the nudge's event. Cleared first, so a push that comes while the list
 * is worked on nudges again. Its batches start in windows of up to CORK_BURST_MAX; in
 * each, a connection with two answers or more is corked while they start, so they
 * leave in one send instead of a segment (and a wake-up of the peer) each. */
static void on_nudge(wk_grpc_server *s) {
  atomic_store(&s->nudge_pending, false);
  wk_rpc *r = outbox_take(s);
  while (r != NULL) {
    cork_set corks = {.n = 0};
    wk_rpc *end = r;
    for (size_t k = 0; end != NULL && k < CORK_BURST_MAX; end = end->outbox_next, k++) {
      cork_count(&corks, conn_fd_of(end));
    }
    uint64_t corked = cork_set_all(&corks, 1);
    while (r != end) {
      wk_rpc *next = r->outbox_next;
      start_taken(r); /* may free r */
      r = next;
    }
    (void)cork_set_all(&corks, 0);
    if (corked > 0) atomic_fetch_add_explicit(&s->sends_corked, corked, memory_order_relaxed);
  }
}

void wk_grpc_server_defer_on_this_thread(bool on) { tls_deferring = on; }

void wk_grpc_server_flush(wk_grpc_server *s) {
  if (s == NULL) return;
  lock(&s->outbox_mu);
  wk_rpc *only = NULL; /* a lone answer starts here: no hop, and nothing to contend with */
  if (s->outbox_head != NULL && s->outbox_head == s->outbox_tail && !s->nudge_pending) {
    only = s->outbox_head;
    s->outbox_head = s->outbox_tail = NULL;
  }
  bool due = s->outbox_head != NULL;
  unlock(&s->outbox_mu);
  if (only != NULL) start_taken(only);
  if (due) nudge(s);
}

/* Ends the call with code/message after what is queued (drop_queued: discard queued
 * messages first). Takes ownership of message. */
static void finish_with(wk_rpc *r, grpc_status_code code, char *message, bool drop_queued) {
  lock(&r->mu);
  if (!r->closed && !r->finish_requested) {
    if (drop_queued) drop_queue_locked(r);
    r->finish_requested = true;
    r->finish_code = code;
    r->finish_message = message;
    message = NULL;
    if (!r->send_in_flight) start_send_or_defer_locked(r);
  }
  unlock(&r->mu);
  free(message);
}

/* ---- accepting calls ---------------------------------------------------------- */

static void post_request(wk_grpc_server *s, request_slot *slot) {
  if (!gate_enter(s)) return;
  grpc_call_error e = grpc_server_request_registered_call(s->server, s->registered[slot->method],
                                                          &slot->call, &slot->deadline, &slot->md,
                                                          &slot->payload, s->cq, s->cq, &slot->tag);
  if (e != GRPC_CALL_OK) {
    log_error("%s: request_registered_call failed: %s", k_methods[slot->method].name,
              grpc_call_error_to_string(e));
    gate_leave(s);
  }
}

static void post_generic(wk_grpc_server *s, generic_slot *g) {
  if (!gate_enter(s)) return;
  grpc_call_error e =
      grpc_server_request_call(s->server, &g->call, &g->details, &g->md, s->cq, s->cq, &g->tag);
  if (e != GRPC_CALL_OK) {
    log_error("request_call failed: %s", grpc_call_error_to_string(e));
    gate_leave(s);
  }
}

/* The largest request method m takes: max_message_bytes, or for DeployCode
 * deploy_max_message_bytes when that is larger. */
static size_t message_limit(const wk_grpc_server *s, wk_rpc_method m) {
  if (m == WK_RPC_DEPLOY_CODE && s->cfg.deploy_max_message_bytes > s->cfg.max_message_bytes)
    return s->cfg.deploy_max_message_bytes;
  return s->cfg.max_message_bytes;
}

/* Decodes and validates r's request from `payload` into r's arena: one block from
 * malloc for every string, array and sub-message of it (protobuf-c's default makes a
 * malloc for each, freed one by one on another thread), released with the rpc. A
 * payload that came as one uncompressed slice (the usual small request) is decoded
 * where it lies; others are read out first (joined, or decompressed). NULL with the
 * reason in err when the bytes are not a valid request. */
static ProtobufCMessage *decode_request(wk_rpc *r, grpc_byte_buffer *payload, char *err,
                                        size_t err_len) {
  const wk_validate_limits *lim = &r->server->limits;
  size_t len = grpc_byte_buffer_length(payload);
  WK_ASSERT(r->arena.blocks == NULL);  /* one request per rpc */
  wk_arena_init(&r->arena, len + 384); /* the bytes fields' copies and ~300 B of structs */
  /* protobuf-c keeps no allocator in the message: this one is needed only here */
  ProtobufCAllocator in_arena = wk_validate_arena_allocator(&r->arena);
  if (payload->type == GRPC_BB_RAW && payload->data.raw.compression == GRPC_COMPRESS_NONE &&
      payload->data.raw.slice_buffer.count == 1) {
    grpc_slice one = payload->data.raw.slice_buffer.slices[0];
    return wk_validate_decode_in(r->method, GRPC_SLICE_START_PTR(one), GRPC_SLICE_LENGTH(one), lim,
                                 &in_arena, err, err_len);
  }
  grpc_byte_buffer_reader rd;
  if (!grpc_byte_buffer_reader_init(&rd, payload)) {
    wk_errf(err, err_len, "request is not a valid %s (undecompressable)",
            wk_validate_descriptor(r->method)->name);
    return NULL;
  }
  grpc_slice bytes = grpc_byte_buffer_reader_readall(&rd);
  grpc_byte_buffer_reader_destroy(&rd);
  ProtobufCMessage *msg =
      wk_validate_decode_in(r->method, GRPC_SLICE_START_PTR(bytes), GRPC_SLICE_LENGTH(bytes), lim,
                            &in_arena, err, err_len);
  grpc_slice_unref(bytes);
  return msg;
}

/* Decodes and validates the request; answers INVALID_ARGUMENT itself or hands the
 * rpc to the sink. Consumes payload. */
static void dispatch_request(wk_grpc_server *s, wk_rpc *r, grpc_byte_buffer *payload) {
  char err[WK_VALIDATE_ERR_LEN];
  ProtobufCMessage *msg = NULL;
  if (payload == NULL) {
    wk_errf(err, sizeof err, "request message is missing: %s expects one %s",
            k_methods[r->method].name, wk_validate_descriptor(r->method)->name);
  } else if (r->method == WK_RPC_DEPLOY_CODE &&
             grpc_byte_buffer_length(payload) > message_limit(s, r->method)) {
    wk_errf(err, sizeof err,
            "DeployCode request is %zu bytes, above the %zu this worker takes (deploy_max_bytes "
            "of content plus max_message_bytes for the rest): deploy less code, or raise "
            "deploy_max_bytes on the worker",
            grpc_byte_buffer_length(payload), message_limit(s, r->method));
    grpc_byte_buffer_destroy(payload);
  } else if (grpc_byte_buffer_length(payload) > message_limit(s, r->method)) {
    /* gRPC's own limit is off (see wk_grpc_server_start): this is the size check */
    wk_errf(err, sizeof err,
            "request message is %zu bytes, above max_message_bytes (%zu bytes): send a "
            "smaller %s (e.g. large arguments through storage), or raise max_message_bytes "
            "on the worker",
            grpc_byte_buffer_length(payload), s->cfg.max_message_bytes,
            wk_validate_descriptor(r->method)->name);
    grpc_byte_buffer_destroy(payload);
  } else {
    msg = decode_request(r, payload, err, sizeof err);
    grpc_byte_buffer_destroy(payload);
  }
  if (msg == NULL) {
    finish_with(r, GRPC_STATUS_INVALID_ARGUMENT, wk_xstrndup(err, sizeof err), true);
    return;
  }
  r->request = msg;
  r->to_sink = true;
  rpc_ref(r); /* the sink's */
  s->sink.on_rpc(s->sink.ud, r);
}

/* A request for a call failed: expected only once stop() has begun; otherwise ask
 * again, so no method ever runs out of requested calls. */
static bool renew_failed_request(wk_grpc_server *s) {
  if (atomic_load(&s->shutting_down)) return false;
  log_error("a request for a call failed while serving; requesting again");
  return true;
}

static void on_request(request_slot *slot, bool ok) {
  wk_grpc_server *s = slot->server;
  if (!ok) {
    if (renew_failed_request(s)) post_request(s, slot);
    return;
  }
  grpc_call *call = slot->call;
  grpc_byte_buffer *payload = slot->payload;
  slot->call = NULL;
  slot->payload = NULL;
  WK_ASSERT(call != NULL);
  bool authenticated = wk_grpc_auth_token_ok(s->auth_token, s->auth_token_len, &slot->md);
  wk_rpc *r = rpc_new(s, slot->method, call, &slot->md);
  grpc_metadata_array_destroy(&slot->md);
  grpc_metadata_array_init(&slot->md);
  post_request(s, slot);

  /* Taken on, unless stopping. A stream's RECV_CLOSE_ON_SERVER first, so its
   * cancellation is seen whatever happens next; a unary call's goes with its reply. */
  bool accepted = false;
  if (!r->streaming) {
    accepted = !atomic_load(&s->gate_closed);
  } else if (gate_enter(s)) {
    grpc_op op;
    memset(&op, 0, sizeof op);
    op.op = GRPC_OP_RECV_CLOSE_ON_SERVER;
    op.data.recv_close_on_server.cancelled = &r->cancelled;
    rpc_ref(r); /* the close batch's */
    grpc_call_error e = grpc_call_start_batch(r->call, &op, 1, &r->close_tag, NULL);
    if (e == GRPC_CALL_OK) {
      accepted = true;
    } else {
      log_error("%s: recv_close batch refused: %s", k_methods[r->method].name,
                grpc_call_error_to_string(e));
      gate_leave(s);
      rpc_unref_not_last(r);
    }
  }
  if (accepted && !authenticated) {
    if (payload != NULL) grpc_byte_buffer_destroy(payload);
    finish_with(r, GRPC_STATUS_UNAUTHENTICATED,
                wk_xstrndup(WK_GRPC_UNAUTHENTICATED_MESSAGE, STATUS_MESSAGE_MAX), true);
  } else if (accepted) {
    dispatch_request(s, r, payload);
  } else {
    /* stopping (or a broken call): drop it; the final unref cancels the call */
    if (payload != NULL) grpc_byte_buffer_destroy(payload);
    lock(&r->mu);
    r->closed = true;
    unlock(&r->mu);
  }
  rpc_unref(r); /* the accept reference */
}

/* Answers a call that has no rpc (an unknown method) with code/message. */
static void answer_status(wk_grpc_server *s, grpc_call *call, grpc_status_code code,
                          const char *message) {
  if (!gate_enter(s)) {
    grpc_call_unref(call);
    return;
  }
  unimplemented_call *u = wk_xcalloc(1, sizeof *u);
  u->tag.kind = TAG_UNIMPLEMENTED;
  u->call = call;
  u->details = grpc_slice_from_copied_string(message);
  grpc_op ops[3];
  memset(ops, 0, sizeof ops);
  ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
  ops[1].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
  ops[1].data.send_status_from_server.status = code;
  ops[1].data.send_status_from_server.status_details = &u->details;
  ops[2].op = GRPC_OP_RECV_CLOSE_ON_SERVER;
  ops[2].data.recv_close_on_server.cancelled = &u->cancelled;
  grpc_call_error e = grpc_call_start_batch(call, ops, 3, &u->tag, NULL);
  if (e != GRPC_CALL_OK) {
    log_error("%s answer refused: %s",
              code == GRPC_STATUS_UNIMPLEMENTED ? "unimplemented" : "unauthenticated",
              grpc_call_error_to_string(e));
    gate_leave(s);
    grpc_call_unref(call);
    grpc_slice_unref(u->details);
    free(u);
    return;
  }
  if (s->cfg.on_status) s->cfg.on_status(s->cfg.on_status_ud, "unknown", (int)code);
}

static void on_unimplemented_done(unimplemented_call *u) {
  grpc_call_unref(u->call);
  grpc_slice_unref(u->details);
  free(u);
}

static void on_generic(generic_slot *g, bool ok) {
  wk_grpc_server *s = g->server;
  if (!ok) {
    if (renew_failed_request(s)) post_generic(s, g);
    return;
  }
  grpc_call *call = g->call;
  g->call = NULL;
  if (!wk_grpc_auth_token_ok(s->auth_token, s->auth_token_len, &g->md)) {
    /* no word on which methods exist to a caller without the token */
    grpc_call_details_destroy(&g->details);
    grpc_call_details_init(&g->details);
    grpc_metadata_array_destroy(&g->md);
    grpc_metadata_array_init(&g->md);
    post_generic(s, g);
    answer_status(s, call, GRPC_STATUS_UNAUTHENTICATED, WK_GRPC_UNAUTHENTICATED_MESSAGE);
    return;
  }
  char message[UNKNOWN_PATH_MAX + 64];
  size_t n = GRPC_SLICE_LENGTH(g->details.method);
  const uint8_t *p = GRPC_SLICE_START_PTR(g->details.method);
  size_t keep = n > UNKNOWN_PATH_MAX ? UNKNOWN_PATH_MAX : n;
  int off = snprintf(message, sizeof message, "unknown method ");
  WK_ASSERT(off > 0);
  size_t at = (size_t)off;
  for (size_t i = 0; i < keep; i++) {
    message[at++] = (p[i] >= 0x20 && p[i] <= 0x7e) ? (char)p[i] : '?';
  }
  if (keep < n) {
    memcpy(message + at, "...", 3);
    at += 3;
  }
  WK_ASSERT(at < sizeof message);
  message[at] = '\0';
  grpc_call_details_destroy(&g->details);
  grpc_call_details_init(&g->details);
  grpc_metadata_array_destroy(&g->md);
  grpc_metadata_array_init(&g->md);
  post_generic(s, g);
  answer_status(s, call, GRPC_STATUS_UNIMPLEMENTED, message);
}

/* ---- server reflection ---------------------------------------------------------- */

static void post_refl_request(wk_grpc_server *s, refl_slot *slot) {
  if (!gate_enter(s)) return;
  grpc_call_error e = grpc_server_request_registered_call(
      s->server, s->refl_registered[slot->version], &slot->call, &slot->deadline, &slot->md, NULL,
      s->cq, s->cq, &slot->tag);
  if (e != GRPC_CALL_OK) {
    log_error("reflection: request_registered_call failed: %s", grpc_call_error_to_string(e));
    gate_leave(s);
  }
}

static void refl_free(refl_call *c) {
  if (c->recv != NULL) grpc_byte_buffer_destroy(c->recv);
  if (c->send != NULL) grpc_byte_buffer_destroy(c->send);
  if (c->has_details) grpc_slice_unref(c->details);
  grpc_call_unref(c->call);
  free(c);
}

/* Starts c's next batch (ops, n); frees c when it cannot start. */
static void refl_start(refl_call *c, const grpc_op *ops, size_t n, refl_state state) {
  if (!gate_enter(c->server)) {
    refl_free(c);
    return;
  }
  c->state = state;
  grpc_call_error e = grpc_call_start_batch(c->call, ops, n, &c->tag, NULL);
  if (e != GRPC_CALL_OK) {
    log_error("reflection: batch refused: %s", grpc_call_error_to_string(e));
    gate_leave(c->server);
    refl_free(c);
  }
}

static void refl_receive(refl_call *c) {
  grpc_op op;
  memset(&op, 0, sizeof op);
  op.op = GRPC_OP_RECV_MESSAGE;
  op.data.recv_message.recv_message = &c->recv;
  refl_start(c, &op, 1, REFL_RECEIVING);
}

/* Ends the call with code and message (NULL: none). */
static void refl_finish(refl_call *c, grpc_status_code code, const char *message) {
  grpc_op ops[3];
  memset(ops, 0, sizeof ops);
  size_t n = 0;
  if (!c->md_sent) ops[n++].op = GRPC_OP_SEND_INITIAL_METADATA;
  c->md_sent = true;
  ops[n].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
  ops[n].data.send_status_from_server.status = code;
  if (message != NULL) {
    c->details = grpc_slice_from_copied_string(message);
    c->has_details = true;
    ops[n].data.send_status_from_server.status_details = &c->details;
  }
  n++;
  ops[n].op = GRPC_OP_RECV_CLOSE_ON_SERVER;
  ops[n].data.recv_close_on_server.cancelled = &c->cancelled;
  n++;
  wk_grpc_server *s = c->server;
  if (s->cfg.on_status) s->cfg.on_status(s->cfg.on_status_ud, REFL_METHOD_NAME, (int)code);
  refl_start(c, ops, n, REFL_FINISHING);
}

/* A request arrived: answers it (then reads the next), or ends the call. */
static void refl_answer(refl_call *c) {
  wk_grpc_server *s = c->server;
  grpc_byte_buffer *bb = c->recv;
  c->recv = NULL;
  char err[256];
  if (grpc_byte_buffer_length(bb) > s->cfg.max_message_bytes) {
    grpc_byte_buffer_destroy(bb);
    snprintf(err, sizeof err, "request message is above max_message_bytes (%zu bytes)",
             s->cfg.max_message_bytes);
    refl_finish(c, GRPC_STATUS_INVALID_ARGUMENT, err);
    return;
  }
  grpc_byte_buffer_reader rd;
  if (!grpc_byte_buffer_reader_init(&rd, bb)) {
    grpc_byte_buffer_destroy(bb);
    refl_finish(c, GRPC_STATUS_INVALID_ARGUMENT, "request is not a valid ServerReflectionRequest");
    return;
  }
  grpc_slice bytes = grpc_byte_buffer_reader_readall(&rd);
  grpc_byte_buffer_reader_destroy(&rd);
  grpc_byte_buffer_destroy(bb);
  uint8_t *out = NULL;
  size_t out_len = 0;
  int rc = wk_reflection_answer(s->reflection, GRPC_SLICE_START_PTR(bytes),
                                GRPC_SLICE_LENGTH(bytes), &out, &out_len, err, sizeof err);
  grpc_slice_unref(bytes);
  if (rc != 0) {
    refl_finish(c, GRPC_STATUS_INVALID_ARGUMENT, err);
    return;
  }
  c->send = make_message(out, out_len);
  free(out);
  grpc_op ops[2];
  memset(ops, 0, sizeof ops);
  size_t n = 0;
  if (!c->md_sent) ops[n++].op = GRPC_OP_SEND_INITIAL_METADATA;
  c->md_sent = true;
  ops[n].op = GRPC_OP_SEND_MESSAGE;
  ops[n].data.send_message.send_message = c->send;
  n++;
  refl_start(c, ops, n, REFL_SENDING);
}

/* CQ thread: c's batch is done. */
static void on_refl_done(refl_call *c, bool ok) {
  if (c->state == REFL_FINISHING) {
    refl_free(c);
  } else if (!ok) { /* cancelled, or the connection went away */
    wk_grpc_server *s = c->server;
    if (s->cfg.on_status) {
      s->cfg.on_status(s->cfg.on_status_ud, REFL_METHOD_NAME, (int)GRPC_STATUS_CANCELLED);
    }
    refl_free(c);
  } else if (c->state == REFL_SENDING) {
    grpc_byte_buffer_destroy(c->send);
    c->send = NULL;
    refl_receive(c);
  } else if (c->recv == NULL) { /* the client is done asking */
    refl_finish(c, GRPC_STATUS_OK, NULL);
  } else {
    refl_answer(c);
  }
}

static void on_refl_request(refl_slot *slot, bool ok) {
  wk_grpc_server *s = slot->server;
  if (!ok) {
    if (renew_failed_request(s)) post_refl_request(s, slot);
    return;
  }
  grpc_call *call = slot->call;
  slot->call = NULL;
  bool authenticated = wk_grpc_auth_token_ok(s->auth_token, s->auth_token_len, &slot->md);
  grpc_metadata_array_destroy(&slot->md);
  grpc_metadata_array_init(&slot->md);
  post_refl_request(s, slot);
  if (!authenticated) {
    answer_status(s, call, GRPC_STATUS_UNAUTHENTICATED, WK_GRPC_UNAUTHENTICATED_MESSAGE);
    return;
  }
  refl_call *c = wk_xcalloc(1, sizeof *c);
  c->tag.kind = TAG_REFL;
  c->server = s;
  c->call = call;
  refl_receive(c);
}

/* ---- the completion-queue thread ---------------------------------------------- */

static void dispatch_event(wk_tag *tag, bool ok) {
  switch (tag->kind) {
    case TAG_REQUEST: on_request(CONTAINER_OF(tag, request_slot, tag), ok); break;
    case TAG_GENERIC: on_generic(CONTAINER_OF(tag, generic_slot, tag), ok); break;
    case TAG_UNIMPLEMENTED:
      on_unimplemented_done(CONTAINER_OF(tag, unimplemented_call, tag));
      break;
    case TAG_CLOSE: on_close_done(CONTAINER_OF(tag, wk_rpc, close_tag)); break;
    case TAG_SEND: on_send_done(CONTAINER_OF(tag, wk_rpc, send_tag), ok); break;
    case TAG_SHUTDOWN: break;
    case TAG_REFL_REQUEST: on_refl_request(CONTAINER_OF(tag, refl_slot, tag), ok); break;
    case TAG_REFL: on_refl_done(CONTAINER_OF(tag, refl_call, tag), ok); break;
    case TAG_NUDGE: on_nudge(CONTAINER_OF(tag, wk_grpc_server, nudge_tag)); break;
  }
}

static void batch_end(wk_grpc_server *s, uint32_t *handled) {
  *handled = 0;
  if (s->sink.on_batch_end != NULL) s->sink.on_batch_end(s->sink.ud);
}

/* Takes the events that are ready without waiting, then tells the sink the batch is
 * over (one wake-up of its actor for all the rpcs of the batch) before it blocks. */
static void *cq_thread_main(void *arg) {
  wk_grpc_server *s = arg;
  (void)pthread_setname_np(pthread_self(), "wk-grpc-cq");
  tls_cq_thread = true;
  uint32_t handled = 0;
  for (;;) {
    grpc_event ev = grpc_completion_queue_next(s->cq, gpr_inf_past(GPR_CLOCK_MONOTONIC), NULL);
    if (ev.type == GRPC_QUEUE_TIMEOUT) {
      batch_end(s, &handled);
      ev = grpc_completion_queue_next(s->cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
    }
    if (ev.type == GRPC_QUEUE_SHUTDOWN) break;
    if (ev.type != GRPC_OP_COMPLETE) continue;
    dispatch_event(ev.tag, ev.success != 0);
    gate_leave(s);
    if (++handled >= WK_GRPC_BATCH_EVENTS_MAX) batch_end(s, &handled);
  }
  batch_end(s, &handled);
  return NULL;
}

/* ---- start and stop ----------------------------------------------------------- */

/* Tears down a server that never started its thread (start failed). */
static void abandon_server(wk_grpc_server *s) {
  if (s->server != NULL) {
    grpc_server_shutdown_and_notify(s->server, s->cq, &s->shutdown_tag);
    for (;;) {
      grpc_event ev = grpc_completion_queue_next(
          s->cq, gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC), gpr_time_from_seconds(5, GPR_TIMESPAN)),
          NULL);
      if (ev.type != GRPC_OP_COMPLETE || ev.tag == &s->shutdown_tag) break;
    }
    grpc_server_destroy(s->server);
  }
  wk_grpc_listener_close(s->listener);
  s->listener = NULL;
  if (s->cq != NULL) {
    grpc_completion_queue_shutdown(s->cq);
    for (;;) {
      grpc_event ev = grpc_completion_queue_next(s->cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
      if (ev.type == GRPC_QUEUE_SHUTDOWN) break;
    }
    grpc_completion_queue_destroy(s->cq);
  }
  server_unref(s);
  grpc_shutdown();
}

int wk_grpc_server_start(const wk_grpc_server_config *cfg, wk_grpc_server_sink sink,
                         wk_grpc_server **out, int *port, char *err, size_t err_len) {
  if (err != NULL && err_len > 0) err[0] = '\0';
  if (cfg == NULL || out == NULL || cfg->listen_addr == NULL || cfg->listen_addr[0] == '\0') {
    wk_errf(err, err_len, "grpc server: listen_addr is required");
    return -1;
  }
  if (sink.on_rpc == NULL) {
    wk_errf(err, err_len, "grpc server: sink.on_rpc is required");
    return -1;
  }
  *out = NULL;
  wk_grpc_auth_tls tls;
  if (wk_grpc_auth_load(cfg, &tls, err, err_len) != 0) return -1;
  grpc_init();

  wk_grpc_server *s = wk_xcalloc(1, sizeof *s);
  atomic_init(&s->refs, 1);
  atomic_init(&s->gate_closed, false);
  atomic_init(&s->outstanding, 0);
  atomic_init(&s->shutting_down, false);
  s->cfg = *cfg;
  s->listen_addr = wk_xstrndup(cfg->listen_addr, 1024);
  s->cfg.listen_addr = s->listen_addr;
  s->cfg.tls_cert_file = NULL;
  s->cfg.tls_key_file = NULL;
  s->cfg.tls_client_ca_file = NULL;
  s->cfg.auth_token = NULL;
  if (cfg->auth_token != NULL && cfg->auth_token[0] != '\0') {
    s->auth_token = wk_xstrndup(cfg->auth_token, WK_GRPC_AUTH_TOKEN_MAX);
    s->auth_token_len = strlen(s->auth_token);
  }
  if (s->cfg.max_message_bytes == 0) s->cfg.max_message_bytes = WK_GRPC_DEFAULT_MAX_MESSAGE_BYTES;
  if (s->cfg.max_message_bytes > INT_MAX) s->cfg.max_message_bytes = INT_MAX;
  if (s->cfg.max_timeout_ms == 0) s->cfg.max_timeout_ms = WK_GRPC_DEFAULT_MAX_TIMEOUT_MS;
  if (s->cfg.max_watch_tasks == 0) s->cfg.max_watch_tasks = WK_GRPC_DEFAULT_MAX_WATCH_TASKS;
  if (s->cfg.max_stream_queue == 0) s->cfg.max_stream_queue = WK_GRPC_DEFAULT_MAX_STREAM_QUEUE;
  if (s->cfg.max_stream_bytes == 0) s->cfg.max_stream_bytes = WK_GRPC_DEFAULT_MAX_STREAM_BYTES;
  if (s->cfg.max_total_stream_bytes == 0) {
    s->cfg.max_total_stream_bytes = WK_GRPC_DEFAULT_MAX_TOTAL_STREAM_BYTES;
  }
  s->budget.stream_max = s->cfg.max_stream_bytes;
  s->budget.total_max = s->cfg.max_total_stream_bytes;
  s->limits.max_timeout_ms = s->cfg.max_timeout_ms;
  s->limits.max_watch_tasks = s->cfg.max_watch_tasks;
  s->sink = sink;
  s->shutdown_tag.kind = TAG_SHUTDOWN;
  s->nudge_tag.kind = TAG_NUDGE;
  if (pthread_mutex_init(&s->mu, NULL) != 0 || pthread_cond_init(&s->cv, NULL) != 0 ||
      pthread_mutex_init(&s->list_mu, NULL) != 0 || pthread_cond_init(&s->list_cv, NULL) != 0 ||
      pthread_mutex_init(&s->budget_mu, NULL) != 0 ||
      pthread_mutex_init(&s->outbox_mu, NULL) != 0) {
    abort();
  }

  /* TCP: the worker binds and accepts itself (wk_grpc_listener.h: gRPC's listener
   * never accepts again after EMFILE) and hands each connection to gRPC */
  int listener_port = 0;
  if (wk_grpc_listener_handles(s->listen_addr)) {
    char lerr[512];
    s->listener = wk_grpc_listener_open(s->listen_addr, &listener_port, lerr, sizeof lerr);
    if (s->listener == NULL) {
      wk_errf(err, err_len, "grpc server: %s", lerr);
      abandon_server(s);
      return -1;
    }
  }

  grpc_arg args[3];
  memset(args, 0, sizeof args);
  /* No receive limit in gRPC: 1.51 holds a whole message before it checks the limit
   * anyway (measured: a 200 MB request to a 4 MiB limit raised the worker's peak RSS by
   * 199 MB, as with no limit), and its refusal is a bare RESOURCE_EXHAUSTED "Received
   * message larger than max". dispatch_request checks max_message_bytes instead and
   * answers what the proto documents (INVALID_ARGUMENT naming the setting). */
  args[0].type = GRPC_ARG_INTEGER;
  args[0].key = (char *)(uintptr_t)GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH;
  args[0].value.integer = -1;
  args[1].type = GRPC_ARG_INTEGER;
  args[1].key = (char *)(uintptr_t)GRPC_ARG_ALLOW_REUSEPORT; /* so "in use" is an error */
  args[1].value.integer = 0;
  size_t nargs = 2;
  if (s->listener != NULL) args[nargs++] = wk_grpc_listener_channel_arg(s->listener);
  grpc_channel_args chargs = {.num_args = nargs, .args = args};

  s->server = grpc_server_create(&chargs, NULL);
  s->cq = grpc_completion_queue_create_for_next(NULL);
  grpc_server_register_completion_queue(s->server, s->cq, NULL);
  for (int m = 0; m < (int)WK_RPC_METHOD_COUNT; m++) {
    s->registered[m] = grpc_server_register_method(s->server, k_methods[m].path, NULL,
                                                   GRPC_SRM_PAYLOAD_READ_INITIAL_BYTE_BUFFER, 0);
    if (s->registered[m] == NULL) {
      wk_errf(err, err_len, "grpc server: cannot register %s", k_methods[m].path);
      wk_grpc_auth_tls_free(&tls);
      abandon_server(s);
      return -1;
    }
  }
  if (s->cfg.reflection) {
    s->reflection = wk_reflection_embedded(); /* indexed now, not on the first call */
    for (int v = 0; v < REFL_VERSIONS; v++) {
      s->refl_registered[v] =
          grpc_server_register_method(s->server, k_refl_paths[v], NULL, GRPC_SRM_PAYLOAD_NONE, 0);
      if (s->refl_registered[v] == NULL) {
        wk_errf(err, err_len, "grpc server: cannot register %s", k_refl_paths[v]);
        wk_grpc_auth_tls_free(&tls);
        abandon_server(s);
        return -1;
      }
    }
  }
  grpc_server_credentials *creds = wk_grpc_auth_credentials(&tls);
  bool with_tls = tls.cert != NULL;
  wk_grpc_auth_tls_free(&tls);
  if (creds == NULL) {
    wk_errf(err, err_len,
            "grpc server: gRPC refused the TLS settings (tls_cert_file, "
            "tls_key_file, tls_client_ca_file)");
    abandon_server(s);
    return -1;
  }
  const char *port_name =
      s->listener != NULL ? wk_grpc_listener_port_name(s->listener) : s->listen_addr;
  int bound = grpc_server_add_http2_port(s->server, port_name, creds);
  grpc_server_credentials_release(creds);
  if (s->listener != NULL) bound = wk_grpc_listener_attached(s->listener) ? listener_port : 0;
  if (bound <= 0 && with_tls) {
    /* gRPC builds its TLS context here: a key that is not the certificate's, or a
     * certificate OpenSSL cannot load, fails the port as an unusable address does.
     * Binding without TLS tells the two apart (the server is abandoned either way). */
    grpc_server_credentials *plain = grpc_insecure_server_credentials_create();
    int probe = grpc_server_add_http2_port(s->server, port_name, plain);
    grpc_server_credentials_release(plain);
    if (s->listener != NULL) probe = wk_grpc_listener_attached(s->listener) ? 1 : 0;
    if (probe > 0) {
      wk_errf(err, err_len,
              "grpc server: gRPC (OpenSSL) refused the TLS certificate or key: does "
              "tls_key_file belong to the first certificate of tls_cert_file, and do "
              "tls_cert_file and tls_client_ca_file hold valid certificates? (gRPC's own "
              "log line above says more)");
      abandon_server(s);
      return -1;
    }
  }
  if (bound <= 0) {
    wk_errf(err, err_len,
            "grpc server: cannot listen on %s (address in use, not local, or not "
            "host:port)",
            s->listen_addr);
    abandon_server(s);
    return -1;
  }
  grpc_server_start(s->server);
  if (s->listener != NULL &&
      wk_grpc_listener_start(s->listener, s->cfg.max_connections, err, err_len) != 0) {
    abandon_server(s);
    return -1;
  }

  for (int m = 0; m < (int)WK_RPC_METHOD_COUNT; m++) {
    for (int i = 0; i < SLOTS_PER_METHOD; i++) {
      request_slot *slot = &s->slots[m][i];
      slot->tag.kind = TAG_REQUEST;
      slot->server = s;
      slot->method = (wk_rpc_method)m;
      grpc_metadata_array_init(&slot->md);
      post_request(s, slot);
    }
  }
  for (int v = 0; v < REFL_VERSIONS && s->refl_registered[v] != NULL; v++) {
    for (int i = 0; i < REFL_SLOTS; i++) {
      refl_slot *slot = &s->refl_slots[v][i];
      slot->tag.kind = TAG_REFL_REQUEST;
      slot->server = s;
      slot->version = v;
      grpc_metadata_array_init(&slot->md);
      post_refl_request(s, slot);
    }
  }
  for (int i = 0; i < GENERIC_SLOTS; i++) {
    generic_slot *g = &s->generic[i];
    g->tag.kind = TAG_GENERIC;
    g->server = s;
    grpc_call_details_init(&g->details);
    grpc_metadata_array_init(&g->md);
    post_generic(s, g);
  }
  /* the nudge: a call of a lame channel, bound to cq, that never starts an operation;
   * an empty batch on it completes on cq at once (grpc_call_start_batch, nops 0) */
  s->nudge_channel = grpc_lame_client_channel_create("nudge", GRPC_STATUS_UNAVAILABLE, "nudge");
  s->nudge_call = grpc_channel_create_call(s->nudge_channel, NULL, GRPC_PROPAGATE_DEFAULTS, s->cq,
                                           grpc_slice_from_static_string("/wk.nudge"), NULL,
                                           gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
  if (s->nudge_call == NULL) abort();
  if (pthread_create(&s->thread, NULL, cq_thread_main, s) != 0) abort();
  if (port != NULL) *port = bound;
  *out = s;
  return 0;
}

void wk_grpc_server_stop(wk_grpc_server *s) {
  if (s == NULL) return;
  /* 1. No new connections (gRPC frees the listener's handler as it shuts down), no
   * new calls; cancel the open ones so every pending batch completes. */
  wk_grpc_listener_stop(s->listener);
  atomic_store(&s->shutting_down, true);
  bool entered = gate_enter(s); /* the shutdown notification */
  WK_ASSERT(entered);
  (void)entered;
  grpc_server_shutdown_and_notify(s->server, s->cq, &s->shutdown_tag);
  grpc_server_cancel_all_calls(s->server);

  /* 2. Close the gate and wait for every counted operation to post its event. */
  gate_close_and_drain(s);

  /* 3. Nothing can post any more: stop the CQ thread. */
  grpc_server_destroy(s->server);
  s->server = NULL;
  wk_grpc_listener_close(s->listener);
  s->listener = NULL;
  grpc_completion_queue_shutdown(s->cq);
  if (pthread_join(s->thread, NULL) != 0) abort();

  /* 4. Detach the rpcs the sink still holds: they stay valid, but their calls go. */
  wk_rpc *detached = NULL;
  lock(&s->list_mu);
  for (;;) {
    wk_rpc *r = s->live;
    while (r != NULL) {
      wk_rpc *next = r->next;
      if (rpc_try_ref(r)) {
        if (r->prev != NULL) r->prev->next = r->next;
        else s->live = r->next;
        if (r->next != NULL) r->next->prev = r->prev;
        r->in_list = false;
        r->prev = NULL;
        r->next = detached;
        detached = r;
      }
      r = next;
    }
    if (s->live == NULL) break;
    pthread_cond_wait(&s->list_cv, &s->list_mu); /* frees under way: let them finish */
  }
  unlock(&s->list_mu);
  while (detached != NULL) {
    wk_rpc *r = detached;
    detached = r->next;
    r->next = NULL;
    lock(&r->mu);
    WK_ASSERT(!r->send_in_flight);
    r->closed = true;
    drop_queue_locked(r);
    grpc_call *call = r->call;
    r->call = NULL;
    unlock(&r->mu);
    if (call != NULL) grpc_call_unref(call);
    rpc_unref(r);
  }
  /* 5. Batches left in the outbox never start: their rpcs are closed by now (every
   * push came before its rpc closed), so only the outbox's references go. */
  for (wk_rpc *r = outbox_take(s), *next; r != NULL; r = next) {
    next = r->outbox_next;
    r->outbox_next = NULL;
    lock(&r->mu);
    r->start_deferred = false;
    unlock(&r->mu);
    rpc_unref(r);
  }
  grpc_call_unref(s->nudge_call);
  s->nudge_call = NULL;
  grpc_channel_destroy(s->nudge_channel);
  s->nudge_channel = NULL;

  for (int m = 0; m < (int)WK_RPC_METHOD_COUNT; m++) {
    for (int i = 0; i < SLOTS_PER_METHOD; i++) {
      WK_ASSERT(s->slots[m][i].payload == NULL);
      grpc_metadata_array_destroy(&s->slots[m][i].md);
    }
  }
  for (int i = 0; i < GENERIC_SLOTS; i++) {
    grpc_call_details_destroy(&s->generic[i].details);
    grpc_metadata_array_destroy(&s->generic[i].md);
  }
  for (int v = 0; v < REFL_VERSIONS && s->refl_registered[v] != NULL; v++) {
    for (int i = 0; i < REFL_SLOTS; i++) grpc_metadata_array_destroy(&s->refl_slots[v][i].md);
  }
  grpc_completion_queue_destroy(s->cq);
  s->cq = NULL;
  server_unref(s);
  grpc_shutdown();
}

/* ---- the rpc API -------------------------------------------------------------- */

wk_rpc_method wk_rpc_method_of(const wk_rpc *rpc) {
  WK_ASSERT(rpc != NULL);
  return rpc->method;
}

const void *wk_rpc_request(const wk_rpc *rpc) {
  WK_ASSERT(rpc != NULL);
  return rpc->request;
}

bool wk_rpc_metadata(const wk_rpc *rpc, const char *key, char *buf, size_t buf_len) {
  WK_ASSERT(rpc != NULL);
  return wk_grpc_auth_md_get(&rpc->md, key, buf, buf_len);
}

const char *wk_rpc_peer_identities(const wk_rpc *rpc) {
  WK_ASSERT(rpc != NULL);
  return rpc->identities != NULL ? rpc->identities : "";
}

const char *wk_rpc_peer(const wk_rpc *rpc) {
  WK_ASSERT(rpc != NULL);
  return rpc->peer != NULL ? rpc->peer : "";
}

void wk_rpc_reply(wk_rpc *rpc, const uint8_t *msg, size_t len) {
  WK_ASSERT(rpc != NULL);
  lock(&rpc->mu);
  if (!rpc->closed && !rpc->finish_requested) {
    /* finish_requested is set once and for all below: the rpc's own node is free */
    msg_node *node = &rpc->reply_node;
    *node = (msg_node){.next = NULL};
    node_set_message(node, msg, len, NULL);
    if (rpc->q_tail != NULL) rpc->q_tail->next = node;
    else rpc->q_head = node;
    rpc->q_tail = node;
    rpc->q_len++;
    rpc->finish_requested = true;
    rpc->finish_code = GRPC_STATUS_OK;
    if (!rpc->send_in_flight) start_send_or_defer_locked(rpc);
  }
  unlock(&rpc->mu);
}

void wk_rpc_fail(wk_rpc *rpc, grpc_status_code code, const char *message) {
  WK_ASSERT(rpc != NULL);
  finish_with(rpc, code, wk_xstrndup(message != NULL ? message : "", STATUS_MESSAGE_MAX), true);
}

wk_rpc_send_status wk_rpc_send_parts(wk_rpc *rpc, const uint8_t *head, size_t head_len,
                                     wk_shared *body) {
  WK_ASSERT(rpc != NULL);
  if (!rpc->streaming) return WK_RPC_SEND_ENDED;
  wk_grpc_server *s = rpc->server;
  msg_node *node = wk_xcalloc(1, sizeof *node);
  node->charged = true;
  node->charge.own = head_len;
  node->charge.body = body != NULL ? wk_shared_ref(body) : NULL;
  wk_rpc_send_status st = WK_RPC_SEND_ENDED;
  lock(&rpc->mu);
  if (!rpc->closed && rpc->start_deferred && !rpc->send_in_flight &&
      rpc->q_len >= s->cfg.max_stream_queue) {
    /* full while its batch waits in the outbox: that batch starts now, so the bound
     * counts the messages behind the one in flight, as when batches start at once */
    start_send_locked(rpc);
  }
  if (rpc->closed || rpc->finish_requested) {
    st = WK_RPC_SEND_ENDED;
  } else if (rpc->send_in_flight && rpc->q_len >= s->cfg.max_stream_queue) {
    st = WK_RPC_SEND_QUEUE_FULL;
  } else {
    lock(&s->budget_mu);
    wk_send_verdict v = wk_send_budget_add(&s->budget, &rpc->budget, &node->charge);
    unlock(&s->budget_mu);
    st = v == WK_SEND_FITS          ? WK_RPC_SEND_OK
         : v == WK_SEND_OVER_STREAM ? WK_RPC_SEND_OVER_STREAM_BYTES
                                    : WK_RPC_SEND_OVER_TOTAL_BYTES;
  }
  if (st == WK_RPC_SEND_OK) {
    node_set_message(node, head, head_len, body);
    if (rpc->q_tail != NULL) rpc->q_tail->next = node;
    else rpc->q_head = node;
    rpc->q_tail = node;
    rpc->q_len++;
    node = NULL;
    if (!rpc->send_in_flight) start_send_or_defer_locked(rpc);
    if (rpc->closed) st = WK_RPC_SEND_ENDED;
  }
  unlock(&rpc->mu);
  if (node != NULL) {
    wk_shared_unref(node->charge.body);
    free(node);
  }
  return st;
}

void wk_rpc_merge_queued(wk_rpc *rpc, uint32_t field) {
  WK_ASSERT(rpc != NULL);
  lock(&rpc->mu);
  rpc->merge_field = rpc->streaming ? field : 0;
  unlock(&rpc->mu);
}

bool wk_rpc_send(wk_rpc *rpc, const uint8_t *msg, size_t len) {
  return wk_rpc_send_parts(rpc, msg, len, NULL) == WK_RPC_SEND_OK;
}

void wk_rpc_abort(wk_rpc *rpc, grpc_status_code code, const char *message) {
  WK_ASSERT(rpc != NULL);
  wk_grpc_server *s = rpc->server;
  bool counted = false;
  lock(&rpc->mu);
  if (!rpc->closed && !rpc->status_sent) {
    /* the status goes out with the cancellation, ahead of anything unsent */
    rpc->finish_requested = true;
    rpc->status_sent = true;
    rpc->closed = true;
    drop_queue_locked(rpc);
    grpc_call_error e =
        grpc_call_cancel_with_status(rpc->call, code, message != NULL ? message : "", NULL);
    if (e != GRPC_CALL_OK) {
      log_error("%s: cancel refused: %s", k_methods[rpc->method].name,
                grpc_call_error_to_string(e));
    }
    counted = true;
  }
  unlock(&rpc->mu);
  if (counted && s->cfg.on_status) {
    s->cfg.on_status(s->cfg.on_status_ud, k_methods[rpc->method].name, (int)code);
  }
}

void wk_rpc_finish(wk_rpc *rpc, grpc_status_code code, const char *message) {
  WK_ASSERT(rpc != NULL);
  finish_with(rpc, code, message != NULL ? wk_xstrndup(message, STATUS_MESSAGE_MAX) : NULL, false);
}

void wk_rpc_release(wk_rpc *rpc) {
  if (rpc == NULL) return;
  rpc_unref(rpc);
}

void wk_grpc_server_conn_stats(const wk_grpc_server *server, wk_grpc_conn_stats *out) {
  if (server == NULL || server->listener == NULL) {
    *out = (wk_grpc_conn_stats){0};
    return;
  }
  wk_grpc_listener_stats(server->listener, out);
  out->sends_corked = atomic_load_explicit(&((wk_grpc_server *)(uintptr_t)server)->sends_corked,
                                           memory_order_relaxed);
}

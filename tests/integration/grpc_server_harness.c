/* grpc_server_harness.c: the gRPC server adapter with a canned sink, for
 * tests/integration/test_grpc_server.py.
 *
 * The sink posts every rpc (and every on_closed) to an "actor" thread through a
 * mutex + condvar queue, as the orchestrator does; the actor answers:
 *   RequestTaskSlot  slot_id 7, lease_expires_unix_ms 1234, state PREPARING
 *   SubmitTask       echoes task_id and slot_id, state PREPARING; duplicate is true
 *                    when the request carries metadata x-shadow-submit: 1
 *   GetTaskResult    NOT_FOUND "no task"
 *   WatchTasks       SNAPSHOT, PHASE_CHANGED, TERMINAL per task id, then OK; a task
 *                    id starting "big:" gets its three events with one shared
 *                    256 KiB result (wk_rpc_send_parts), and a send refused over a
 *                    byte bound ends the stream with wk_rpc_abort RESOURCE_EXHAUSTED
 *                    "over stream bytes" / "over total bytes"
 *   CancelTask       TaskResult: the task_id, CANCELLED, failure_message = reason
 *                    ("authorization visible to the sink" if wk_rpc_metadata shows
 *                    that key, which the server must consume)
 *   Health.Check     SERVING for "" and "worker.v1.WorkerService", else NOT_FOUND
 *   Health.Watch     SERVING (SERVICE_UNKNOWN for other names), then holds the
 *                    stream open until the client goes away
 * Streams are released when on_closed arrives (never before).
 *
 * Usage: grpc_server_harness [--tls-cert PEM --tls-key PEM [--tls-client-ca PEM]]
 *                            [--token TOKEN] [host:port]   (default 127.0.0.1:0)
 *   --tls-cert/--tls-key  serve TLS only (wk_grpc_server_config.tls_cert_file/_key_file)
 *   --tls-client-ca       require client certificates signed by it (mutual TLS)
 *   --token               require "authorization: Bearer TOKEN" on every call
 * (used by tests/integration/test_grpc_tls.py). A failed start prints
 * "harness: <reason>" on stderr and exits 1.
 * Environment: WK_HARNESS_MAX_MESSAGE_BYTES (default 1 MiB),
 *              WK_HARNESS_MAX_STREAM_QUEUE (default 256; WatchTasks answers
 *              RESOURCE_EXHAUSTED "stream queue full" when a send is refused),
 *              WK_HARNESS_MAX_STREAM_BYTES, WK_HARNESS_MAX_TOTAL_STREAM_BYTES (the
 *              server's byte bounds; default: the server's defaults),
 *              WK_HARNESS_INLINE_HEALTH=1 answers Health.Check on the completion-queue
 *              thread (no hop), to compare latencies;
 *              WK_HARNESS_DEFER=1: the actor answers as the worker's loop does
 *              (wk_grpc_server_defer_on_this_thread, one wk_grpc_server_flush before
 *              it waits), else every answer nudges the completion-queue thread.
 * Prints "PORT <n>" once listening; SIGTERM or SIGINT stops the server and exits 0.
 */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "adapters/wk_grpc_server.h"
#include "lib/wk_shared.h"
#include "grpc/health/v1/health.pb-c.h"
#include "worker/v1/worker.pb-c.h"

/* ---- the actor's queue -------------------------------------------------------- */

typedef struct item {
  struct item *next;
  wk_rpc *rpc;
  bool closed; /* an on_closed event, else a new rpc */
  bool cancelled;
} item;

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_cv = PTHREAD_COND_INITIALIZER;
static item *g_head;
static item *g_tail;
static bool g_stop;
static bool g_inline_health;
static bool g_defer;
static wk_grpc_server *g_server; /* under g_mu; NULL before start and from stop on */
static unsigned long g_cancelled_streams;

static void post(wk_rpc *rpc, bool closed, bool cancelled) {
  item *it = calloc(1, sizeof *it);
  if (it == NULL) abort();
  it->rpc = rpc;
  it->closed = closed;
  it->cancelled = cancelled;
  pthread_mutex_lock(&g_mu);
  if (g_tail != NULL) g_tail->next = it;
  else g_head = it;
  g_tail = it;
  pthread_cond_signal(&g_cv);
  pthread_mutex_unlock(&g_mu);
}

/* ---- answers ------------------------------------------------------------------ */

static void reply_packed(wk_rpc *rpc, const ProtobufCMessage *msg) {
  size_t n = protobuf_c_message_get_packed_size(msg);
  uint8_t *buf = malloc(n > 0 ? n : 1);
  if (buf == NULL) abort();
  size_t packed = protobuf_c_message_pack(msg, buf);
  if (packed != n) abort();
  wk_rpc_reply(rpc, buf, n);
  free(buf);
}

static bool send_packed(wk_rpc *rpc, const ProtobufCMessage *msg) {
  size_t n = protobuf_c_message_get_packed_size(msg);
  uint8_t *buf = malloc(n > 0 ? n : 1);
  if (buf == NULL) abort();
  size_t packed = protobuf_c_message_pack(msg, buf);
  if (packed != n) abort();
  bool ok = wk_rpc_send(rpc, buf, n);
  free(buf);
  return ok;
}

static bool health_known(const char *service) {
  return service[0] == '\0' || strcmp(service, "worker.v1.WorkerService") == 0;
}

static void answer_health_check(wk_rpc *rpc) {
  const Grpc__Health__V1__HealthCheckRequest *req = wk_rpc_request(rpc);
  if (!health_known(req->service)) {
    wk_rpc_fail(rpc, GRPC_STATUS_NOT_FOUND, "unknown service");
    return;
  }
  Grpc__Health__V1__HealthCheckResponse resp;
  grpc__health__v1__health_check_response__init(&resp);
  resp.status = GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING;
  reply_packed(rpc, &resp.base);
}

#define BIG_RESULT_BYTES (256u * 1024u)

/* A "big:" task's three events: one encoded TaskResult (a 256 KiB failure_message)
 * shared by all three, behind each event's own head. False when a send was refused
 * (the stream is then ended). */
static bool watch_big(wk_rpc *rpc, char *task_id, const Worker__V1__TaskEvent__Kind kinds[3]) {
  char *text = malloc(BIG_RESULT_BYTES + 1);
  if (text == NULL) abort();
  memset(text, 'x', BIG_RESULT_BYTES);
  text[BIG_RESULT_BYTES] = '\0';
  Worker__V1__TaskResult result;
  worker__v1__task_result__init(&result);
  result.task_id = task_id;
  result.state = WORKER__V1__TASK_STATE__TASK_STATE_SUCCEEDED;
  result.failure_message = text;
  size_t n = worker__v1__task_result__get_packed_size(&result);
  uint8_t *packed = malloc(n);
  if (packed == NULL) abort();
  worker__v1__task_result__pack(&result, packed);
  free(text);
  wk_shared *body = wk_shared_copy(packed, n);
  free(packed);
  bool ok = true;
  for (int k = 0; k < 3 && ok; k++) {
    Worker__V1__TaskEvent ev;
    worker__v1__task_event__init(&ev);
    ev.task_id = task_id;
    ev.kind = kinds[k];
    uint8_t head[256];
    size_t h = worker__v1__task_event__pack(&ev, head);
    head[h++] = (3u << 3) | 2u; /* field 3 (result), length-delimited */
    for (size_t v = n;; v >>= 7) {
      head[h++] = (uint8_t)(v >= 0x80 ? (v & 0x7f) | 0x80 : v);
      if (v < 0x80) break;
    }
    wk_rpc_send_status st = wk_rpc_send_parts(rpc, head, h, body);
    if (st == WK_RPC_SEND_OVER_STREAM_BYTES) {
      wk_rpc_abort(rpc, GRPC_STATUS_RESOURCE_EXHAUSTED, "over stream bytes");
    } else if (st == WK_RPC_SEND_OVER_TOTAL_BYTES) {
      wk_rpc_abort(rpc, GRPC_STATUS_RESOURCE_EXHAUSTED, "over total bytes");
    }
    ok = st == WK_RPC_SEND_OK;
  }
  wk_shared_unref(body);
  return ok;
}

static void watch_tasks(wk_rpc *rpc) {
  const Worker__V1__WatchTasksRequest *req = wk_rpc_request(rpc);
  static const Worker__V1__TaskEvent__Kind kinds[3] = {
      WORKER__V1__TASK_EVENT__KIND__KIND_SNAPSHOT, WORKER__V1__TASK_EVENT__KIND__KIND_PHASE_CHANGED,
      WORKER__V1__TASK_EVENT__KIND__KIND_TERMINAL};
  static const Worker__V1__TaskState states[3] = {WORKER__V1__TASK_STATE__TASK_STATE_PREPARING,
                                                  WORKER__V1__TASK_STATE__TASK_STATE_RUNNING,
                                                  WORKER__V1__TASK_STATE__TASK_STATE_SUCCEEDED};
  for (size_t i = 0; i < req->n_task_ids; i++) {
    if (strncmp(req->task_ids[i], "big:", 4) == 0) {
      if (!watch_big(rpc, req->task_ids[i], kinds)) return;
      continue;
    }
    for (int k = 0; k < 3; k++) {
      Worker__V1__TaskResult result;
      worker__v1__task_result__init(&result);
      result.task_id = req->task_ids[i];
      result.state = states[k];
      Worker__V1__TaskEvent ev;
      worker__v1__task_event__init(&ev);
      ev.task_id = req->task_ids[i];
      ev.kind = kinds[k];
      ev.result = &result;
      if (!send_packed(rpc, &ev.base)) {
        /* queue full (or the stream is gone, and this is ignored) */
        wk_rpc_fail(rpc, GRPC_STATUS_RESOURCE_EXHAUSTED, "stream queue full");
        return;
      }
    }
  }
  wk_rpc_finish(rpc, GRPC_STATUS_OK, NULL);
}

/* Answers a new rpc. Unary rpcs are released here; streams on on_closed. */
static void handle(wk_rpc *rpc) {
  switch (wk_rpc_method_of(rpc)) {
    case WK_RPC_REQUEST_TASK_SLOT: {
      Worker__V1__RequestTaskSlotResponse resp;
      worker__v1__request_task_slot_response__init(&resp);
      resp.slot_id = 7;
      resp.lease_expires_unix_ms = 1234;
      resp.state = WORKER__V1__TASK_STATE__TASK_STATE_PREPARING;
      reply_packed(rpc, &resp.base);
      wk_rpc_release(rpc);
      return;
    }
    case WK_RPC_SUBMIT_TASK: {
      const Worker__V1__SubmitTaskRequest *req = wk_rpc_request(rpc);
      char shadow[8];
      Worker__V1__SubmitTaskResponse resp;
      worker__v1__submit_task_response__init(&resp);
      resp.task_id = req->task_id;
      resp.slot_id = req->slot_id;
      resp.state = WORKER__V1__TASK_STATE__TASK_STATE_PREPARING;
      resp.duplicate = wk_rpc_metadata(rpc, "x-shadow-submit", shadow, sizeof shadow) &&
                       strcmp(shadow, "1") == 0;
      resp.accepted_unix_ms = 1;
      reply_packed(rpc, &resp.base);
      wk_rpc_release(rpc);
      return;
    }
    case WK_RPC_GET_TASK_RESULT:
    case WK_RPC_GET_TASK_LOGS:
    case WK_RPC_DEPLOY_CODE: /* nor code */
    case WK_RPC_SET_CURRENT_EPOCH:
    case WK_RPC_LIST_TASKS: /* the harness keeps no tasks */
      wk_rpc_fail(rpc, GRPC_STATUS_NOT_FOUND, "no task");
      wk_rpc_release(rpc);
      return;
    case WK_RPC_WATCH_TASKS: watch_tasks(rpc); return;
    case WK_RPC_CANCEL_TASK: {
      const Worker__V1__CancelTaskRequest *req = wk_rpc_request(rpc);
      Worker__V1__TaskResult resp;
      worker__v1__task_result__init(&resp);
      resp.task_id = req->task_id;
      resp.state = WORKER__V1__TASK_STATE__TASK_STATE_CANCELLED;
      resp.failure_code = WORKER__V1__FAILURE_CODE__FAILURE_CODE_CANCELLED;
      resp.failure_message = req->reason;
      /* the server consumes the bearer token: the sink must never see it */
      if (wk_rpc_metadata(rpc, "authorization", NULL, 0)) {
        resp.failure_message = (char *)(uintptr_t) "authorization visible to the sink";
      }
      reply_packed(rpc, &resp.base);
      wk_rpc_release(rpc);
      return;
    }
    case WK_RPC_HEALTH_CHECK:
      answer_health_check(rpc);
      wk_rpc_release(rpc);
      return;
    case WK_RPC_HEALTH_WATCH: {
      const Grpc__Health__V1__HealthCheckRequest *req = wk_rpc_request(rpc);
      Grpc__Health__V1__HealthCheckResponse resp;
      grpc__health__v1__health_check_response__init(&resp);
      resp.status = health_known(req->service)
                        ? GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING
                        : GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVICE_UNKNOWN;
      (void)send_packed(rpc, &resp.base);
      return; /* held open until on_closed */
    }
    case WK_RPC_METHOD_COUNT: break;
  }
  abort();
}

static void *actor_main(void *arg) {
  (void)arg;
  if (g_defer) wk_grpc_server_defer_on_this_thread(true);
  for (;;) {
    pthread_mutex_lock(&g_mu);
    while (g_head == NULL && !g_stop) {
      if (g_defer) wk_grpc_server_flush(g_server); /* what it answered goes, once */
      pthread_cond_wait(&g_cv, &g_mu);
    }
    item *it = g_head;
    if (it == NULL) {
      pthread_mutex_unlock(&g_mu);
      return NULL; /* stopping and drained */
    }
    g_head = it->next;
    if (g_head == NULL) g_tail = NULL;
    pthread_mutex_unlock(&g_mu);
    if (it->closed) {
      if (it->cancelled) g_cancelled_streams++;
      wk_rpc_release(it->rpc);
    } else {
      handle(it->rpc);
    }
    free(it);
  }
}

/* ---- the sink ----------------------------------------------------------------- */

static void on_rpc(void *ud, wk_rpc *rpc) {
  (void)ud;
  if (g_inline_health && wk_rpc_method_of(rpc) == WK_RPC_HEALTH_CHECK) {
    answer_health_check(rpc);
    wk_rpc_release(rpc);
    return;
  }
  post(rpc, false, false);
}

static void on_closed(void *ud, wk_rpc *rpc, bool cancelled) {
  (void)ud;
  post(rpc, true, cancelled);
}

/* ---- main --------------------------------------------------------------------- */

int main(int argc, char **argv) {
  /* Block the stop signals before any thread exists (gRPC's included): only sigwait
   * below sees them. */
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  if (pthread_sigmask(SIG_BLOCK, &stop_signals, NULL) != 0) return 2;

  const char *inline_health = getenv("WK_HARNESS_INLINE_HEALTH");
  g_inline_health = inline_health != NULL && strcmp(inline_health, "1") == 0;
  const char *defer = getenv("WK_HARNESS_DEFER");
  g_defer = defer != NULL && strcmp(defer, "1") == 0;
  size_t max_message = (size_t)1 << 20;
  const char *mm = getenv("WK_HARNESS_MAX_MESSAGE_BYTES");
  if (mm != NULL && mm[0] != '\0') max_message = (size_t)strtoull(mm, NULL, 10);

  uint32_t max_queue = 256;
  const char *mq = getenv("WK_HARNESS_MAX_STREAM_QUEUE");
  if (mq != NULL && mq[0] != '\0') max_queue = (uint32_t)strtoul(mq, NULL, 10);

  const char *msb = getenv("WK_HARNESS_MAX_STREAM_BYTES");
  const char *mtb = getenv("WK_HARNESS_MAX_TOTAL_STREAM_BYTES");
  size_t max_stream_bytes = msb != NULL ? (size_t)strtoull(msb, NULL, 10) : 0;
  size_t max_total_bytes = mtb != NULL ? (size_t)strtoull(mtb, NULL, 10) : 0;

  const char *listen_addr = "127.0.0.1:0";
  const char *tls_cert = NULL;
  const char *tls_key = NULL;
  const char *tls_client_ca = NULL;
  const char *token = NULL;
  for (int i = 1; i < argc; i++) {
    const char **dst = NULL;
    if (strcmp(argv[i], "--tls-cert") == 0) dst = &tls_cert;
    else if (strcmp(argv[i], "--tls-key") == 0) dst = &tls_key;
    else if (strcmp(argv[i], "--tls-client-ca") == 0) dst = &tls_client_ca;
    else if (strcmp(argv[i], "--token") == 0) dst = &token;
    if (dst == NULL) {
      if (argv[i][0] == '-') {
        fprintf(stderr, "harness: unknown option %s\n", argv[i]);
        return 2;
      }
      listen_addr = argv[i];
      continue;
    }
    if (i + 1 >= argc) {
      fprintf(stderr, "harness: %s needs a value\n", argv[i]);
      return 2;
    }
    *dst = argv[++i];
  }

  pthread_t actor;
  if (pthread_create(&actor, NULL, actor_main, NULL) != 0) return 2;

  wk_grpc_server_config cfg = {
      .listen_addr = listen_addr,
      .max_message_bytes = max_message,
      .max_ttl_ms = 3600u * 1000u,
      .max_timeout_ms = 3600u * 1000u,
      .max_watch_tasks = 64,
      .max_stream_queue = max_queue,
      .max_stream_bytes = max_stream_bytes,
      .max_total_stream_bytes = max_total_bytes,
      .tls_cert_file = tls_cert,
      .tls_key_file = tls_key,
      .tls_client_ca_file = tls_client_ca,
      .auth_token = token,
  };
  wk_grpc_server_sink sink = {.on_rpc = on_rpc, .on_closed = on_closed, .ud = NULL};
  wk_grpc_server *server = NULL;
  int port = 0;
  char err[256];
  if (wk_grpc_server_start(&cfg, sink, &server, &port, err, sizeof err) != 0) {
    fprintf(stderr, "harness: %s\n", err);
    pthread_mutex_lock(&g_mu);
    g_stop = true;
    pthread_cond_signal(&g_cv);
    pthread_mutex_unlock(&g_mu);
    pthread_join(actor, NULL);
    return 1;
  }
  pthread_mutex_lock(&g_mu);
  g_server = server;
  pthread_mutex_unlock(&g_mu);
  printf("PORT %d\n", port);
  fflush(stdout);

  int sig = 0;
  if (sigwait(&stop_signals, &sig) != 0) return 2;

  pthread_mutex_lock(&g_mu);
  g_server = NULL; /* the actor flushes no more: stop takes what is left */
  pthread_mutex_unlock(&g_mu);
  wk_grpc_server_stop(server); /* open streams get on_closed(cancelled) meanwhile */
  pthread_mutex_lock(&g_mu);
  g_stop = true;
  pthread_cond_signal(&g_cv);
  pthread_mutex_unlock(&g_mu);
  pthread_join(actor, NULL);
  fprintf(stderr, "harness: stopped on signal %d, %lu streams cancelled\n", sig,
          g_cancelled_streams);
  return 0;
}

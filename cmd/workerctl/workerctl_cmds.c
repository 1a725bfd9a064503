/* workerctl_cmds.c: the commands: RPCs to a worker, and the local code store. */
#define _GNU_SOURCE /* getrandom, clock_gettime */

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "adapters/wk_code_store.h"
#include "adapters/wk_etcd_registry.h"
#include "adapters/wk_grpc_client.h"
#include "grpc/health/v1/health.pb-c.h"
#include "workerctl.h"
#include "lib/wk_alloc.h"
#include "lib/wk_version.h"

#define M_SLOT "/worker.v1.WorkerService/RequestTaskSlot"
#define M_SUBMIT "/worker.v1.WorkerService/SubmitTask"
#define M_GET "/worker.v1.WorkerService/GetTaskResult"
#define M_WATCH "/worker.v1.WorkerService/WatchTasks"
#define M_CANCEL "/worker.v1.WorkerService/CancelTask"
#define M_HEALTH "/grpc.health.v1.Health/Check"

#define ARGS_MAX_BYTES (64u << 20) /* the client's receive limit; the worker's is its own */

/* ---- plumbing ------------------------------------------------------------------------ */

static int64_t now_unix_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The client options: user agent, TLS files and token from the command line. */
static char user_agent[64];
static void make_user_agent(void) {
  snprintf(user_agent, sizeof user_agent, "workerctl/%s", wk_version);
}

/* The client options of every call; safe from several threads at once (the fleet
 * deploy's): the shared user-agent text is written once, before any thread reads it. */
static wk_grpc_client_options client_options(const ctl_args *a) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, make_user_agent);
  wk_grpc_client_options opts = {.max_recv_message_bytes = 0,
                                 .user_agent = user_agent,
                                 .ca_file = a->tls_ca,
                                 .cert_file = a->tls_cert,
                                 .key_file = a->tls_key,
                                 .server_name = a->tls_server_name,
                                 .token = a->token};
  return opts;
}

static int first_registered(ctl_args *a);
static int call_discovered(ctl_args *a, const char *method, const ProtobufCMessage *req,
                           const Worker__V1__FunctionCallConfig *fn, wk_grpc_client **out,
                           wk_grpc_buf *resp);

/* A client of a->addr; with etcd and no worker chosen yet, of the first registered
 * worker (ctl_etcd_lookup_order). 0 or an exit code (reported). */
static int open_client(ctl_args *a, wk_grpc_client **c) {
  char err[1536];
  *c = NULL;
  if (a->use_etcd && !a->discovered) {
    int frc = first_registered(a);
    if (frc != 0) return frc;
  }
  wk_grpc_client_options opts = client_options(a);
  int rc = wk_grpc_client_open(a->addr, &opts, c, err, sizeof err);
  if (rc == -2) {
    /* a TLS file or the token: the command line (or environment) is at fault */
    return ctl_usage_error(a, "%s", err);
  }
  if (rc != 0) {
    fprintf(stderr, "workerctl: %s\n", err);
    return CTL_EXIT_UNREACHABLE;
  }
  return CTL_EXIT_OK;
}

/* Reports a failed call; returns 3 (the worker answered) or 4 (not reached). */
static int report_status(const ctl_args *a, const wk_grpc_status *st) {
  const char *code = wk_grpc_status_name(st->code);
  bool unreachable = !st->reached_server;
  if (st->code == GRPC_STATUS_DEADLINE_EXCEEDED) {
    fprintf(stderr,
            "workerctl: %s: no complete answer from the worker at %s within the deadline "
            "(--deadline-ms): %s\n",
            code, a->addr, st->message);
  } else if (unreachable) {
    if (a->discovered) {
      fprintf(stderr, "workerctl: cannot reach the worker at %s: %s: %s\n", a->addr, code,
              st->message);
    } else {
      fprintf(stderr, "workerctl: cannot reach the worker at %s (%s): %s: %s\n", a->addr,
              a->addr_source, code, st->message);
    }
    /* A TLS worker closes a plaintext connection, and a mutual-TLS one a connection
     * without a client certificate, with no word on why. */
    bool tls = a->tls_ca || a->tls_cert || a->tls_server_name;
    if (strstr(st->message, "Socket closed") != NULL && !tls) {
      fprintf(stderr, "workerctl: (if the worker serves TLS, pass --tls-ca FILE)\n");
    } else if (strstr(st->message, "Socket closed") != NULL && !a->tls_cert) {
      fprintf(stderr,
              "workerctl: (if the worker requires mutual TLS, pass --tls-cert FILE "
              "--tls-key FILE)\n");
    }
  } else {
    fprintf(stderr, "workerctl: %s: %s\n", code, st->message);
  }
  if (a->json) {
    json_t *e = json_object();
    json_object_set_new(e, "code", json_string(code));
    json_t *m = json_string(st->message);
    json_object_set_new(e, "message", m ? m : json_string(""));
    json_object_set_new(e, "unreachable", json_boolean(unreachable));
    if (a->discovered) json_object_set_new(e, "worker", json_string(a->addr));
    json_t *j = json_object();
    json_object_set_new(j, "error", e);
    ctl_json_print(stdout, j);
  }
  return unreachable ? CTL_EXIT_UNREACHABLE : CTL_EXIT_STATUS;
}

static int report_decode_error(const ctl_args *a, const char *what) {
  wk_grpc_status st = {.code = GRPC_STATUS_INTERNAL, .reached_server = true, .message = ""};
  snprintf(st.message, sizeof st.message, "cannot decode the worker's %s", what);
  return report_status(a, &st);
}

static uint8_t *pack(const ProtobufCMessage *m, size_t *len) {
  *len = protobuf_c_message_get_packed_size(m);
  uint8_t *buf = wk_xmalloc(*len ? *len : 1);
  protobuf_c_message_pack(m, buf);
  return buf;
}

/* One unary call: 0 with *resp filled, else the exit code (error reported). */
static int call(const ctl_args *a, wk_grpc_client *c, const char *method,
                const ProtobufCMessage *req, wk_grpc_buf *resp) {
  size_t len;
  uint8_t *buf = pack(req, &len);
  wk_grpc_status st;
  grpc_status_code code =
      wk_grpc_client_unary(c, method, buf, len, NULL, 0, a->deadline_ms, resp, &st);
  free(buf);
  if (code != GRPC_STATUS_OK) return report_status(a, &st);
  return 0;
}

/* ---- the workers registered in etcd (workerctl_target.c has the rule) ----------------- */

/* Reports that no worker is registered under the prefix: exit 4. */
static int report_no_worker(const ctl_args *a, const char *what) {
  char msg[1024];
  snprintf(msg, sizeof msg,
           "no %s registered under %s in etcd %s (see workerctl workers --etcd %s --prefix %s; "
           "or pass --addr HOST:PORT)",
           what, a->etcd_prefix, a->etcd_endpoints, a->etcd_endpoints, a->etcd_prefix);
  fprintf(stderr, "workerctl: %s\n", msg);
  if (a->json) {
    json_t *e = json_object();
    json_object_set_new(e, "code", json_string("NO_WORKER"));
    json_t *m = json_string(msg);
    json_object_set_new(e, "message", m ? m : json_string(""));
    json_object_set_new(e, "unreachable", json_true());
    json_t *j = json_object();
    json_object_set_new(j, "error", e);
    ctl_json_print(stdout, j);
  }
  return CTL_EXIT_UNREACHABLE;
}

static int first_registered(ctl_args *a) {
  wk_etcd_workers ws;
  int rc = ctl_etcd_lookup_order(a, &ws);
  if (rc != 0) return rc;
  if (ws.n == 0) rc = report_no_worker(a, "worker");
  if (ws.n > 0) ctl_set_discovered(a, ws.items[0].address);
  wk_etcd_workers_free(&ws);
  return rc;
}

/* With etcd: the unary call on each registered worker in lookup order until one answers
 * anything but NOT_FOUND or UNAVAILABLE (or cannot be reached): the worker that holds a
 * task. 0 with *resp and a->addr that worker; else the exit code after reporting each
 * worker tried and its answer (3 when one answered NOT_FOUND, 4 when none was
 * reached). */
static int call_registered(ctl_args *a, const char *method, const ProtobufCMessage *req,
                           wk_grpc_buf *resp) {
  wk_etcd_workers ws;
  int rc = ctl_etcd_lookup_order(a, &ws);
  if (rc != 0) return rc;
  if (ws.n == 0) {
    wk_etcd_workers_free(&ws);
    return report_no_worker(a, "worker");
  }
  size_t len;
  uint8_t *buf = pack(req, &len);
  wk_grpc_client_options opts = client_options(a);
  char tried[2048] = "";
  size_t used = 0;
  bool answered = false;
  wk_grpc_status st = {0};
  rc = -1;
  for (size_t i = 0; i < ws.n && rc < 0; i++) {
    ctl_set_discovered(a, ws.items[i].address);
    wk_grpc_client *c = NULL;
    char oerr[1536];
    int orc = wk_grpc_client_open(a->addr, &opts, &c, oerr, sizeof oerr);
    if (orc == -2) {
      rc = ctl_usage_error(a, "%s", oerr);
      break;
    }
    grpc_status_code code = GRPC_STATUS_UNAVAILABLE;
    st.reached_server = false;
    if (orc == 0)
      code = wk_grpc_client_unary(c, method, buf, len, NULL, 0, a->deadline_ms, resp, &st);
    wk_grpc_client_close(c);
    if (code == GRPC_STATUS_OK) {
      rc = 0;
    } else if (code != GRPC_STATUS_NOT_FOUND && code != GRPC_STATUS_UNAVAILABLE &&
               st.reached_server) {
      rc = report_status(a, &st);
    } else {
      answered = answered || code == GRPC_STATUS_NOT_FOUND;
      int w = snprintf(tried + used, sizeof tried - used, "%s%s (%s)", used ? ", " : "", a->addr,
                       wk_grpc_status_name(code));
      if (w > 0) used += (size_t)w < sizeof tried - used ? (size_t)w : sizeof tried - used - 1;
    }
  }
  free(buf);
  if (rc < 0) {
    char msg[WK_GRPC_STATUS_MESSAGE_MAX];
    snprintf(msg, sizeof msg, "none of the %zu workers registered under %s in etcd %s has it: %s",
             ws.n, a->etcd_prefix, a->etcd_endpoints, tried);
    const char *code = answered ? "NOT_FOUND" : "UNAVAILABLE";
    fprintf(stderr, "workerctl: %s: %s\n", code, msg);
    if (a->json) {
      json_t *e = json_object();
      json_object_set_new(e, "code", json_string(code));
      json_t *m = json_string(msg);
      json_object_set_new(e, "message", m ? m : json_string(""));
      json_object_set_new(e, "unreachable", json_boolean(!answered));
      json_t *j = json_object();
      json_object_set_new(j, "error", e);
      ctl_json_print(stdout, j);
    }
    a->discovered = false;
    rc = answered ? CTL_EXIT_STATUS : CTL_EXIT_UNREACHABLE;
  }
  wk_etcd_workers_free(&ws);
  return rc;
}

/* Connects, calls, and hands back the response bytes: 0 or an exit code. With etcd, on
 * the registered worker that answers (call_registered). */
static int call_once(ctl_args *a, const char *method, const ProtobufCMessage *req,
                     wk_grpc_buf *resp) {
  if (a->use_etcd && !a->discovered) return call_registered(a, method, req, resp);
  wk_grpc_client *c;
  int rc = open_client(a, &c);
  if (rc != 0) return rc;
  rc = call(a, c, method, req, resp);
  wk_grpc_client_close(c);
  return rc;
}

/* Prints a TaskResult and returns the exit code its state implies. */
static int print_result(const ctl_args *a, const Worker__V1__TaskResult *r) {
  if (a->quiet) {
    char b[32];
    printf("%s\n", ctl_enum_name(&worker__v1__task_state__descriptor, (int)r->state, b, sizeof b));
  } else if (a->json) {
    json_t *j = ctl_result_json(r);
    if (a->discovered) json_object_set_new(j, "worker", json_string(a->addr));
    ctl_json_print(stdout, j);
  } else {
    ctl_print_result(stdout, r);
  }
  return ctl_state_exit(r->state);
}

/* ---- watch --------------------------------------------------------------------------- */

/* Watches `ids` (workerctl_progress.c): as an observer, or as the owner with
 * terminal_only (submit --watch, which owns the task it submitted). */
static int watch_tasks(const ctl_args *a, wk_grpc_client *c, char **ids, size_t n,
                       bool terminal_only) {
  ctl_watch_opts o = {
      .terminal_only = terminal_only, .own = terminal_only || a->set[F_OWN], .owner_grace_ms = -1};
  return ctl_watch(a, c, ids, n, &o);
}

/* ---- slot, get, cancel, health ----------------------------------------------------------- */

int ctl_cmd_slot(ctl_args *a) {
  Worker__V1__RequestTaskSlotRequest req;
  worker__v1__request_task_slot_request__init(&req);
  req.task_id = a->pos[0];
  if (a->set[F_TTL_MS] && !ctl_parse_u64(a->val[F_TTL_MS], 0, UINT64_MAX, &req.ttl_ms)) {
    return ctl_usage_error(a, "--ttl-ms takes a number of ms, got '%s'", a->val[F_TTL_MS]);
  }
  wk_grpc_buf resp;
  int rc;
  if (a->use_etcd) { /* a worker with a free slot, as submit picks one */
    wk_grpc_client *c = NULL;
    rc = call_discovered(a, M_SLOT, &req.base, NULL, &c, &resp);
    wk_grpc_client_close(c);
  } else {
    rc = call_once(a, M_SLOT, &req.base, &resp);
  }
  if (rc != 0) return rc;
  Worker__V1__RequestTaskSlotResponse *r =
      worker__v1__request_task_slot_response__unpack(NULL, resp.len, resp.data);
  wk_grpc_buf_free(&resp);
  if (!r) return report_decode_error(a, "RequestTaskSlotResponse");
  if (a->json) {
    json_t *j = ctl_slot_json(r);
    if (a->discovered) json_object_set_new(j, "worker", json_string(a->addr));
    ctl_json_print(stdout, j);
  } else {
    ctl_print_slot(stdout, a->pos[0], r, now_unix_ms());
    if (a->discovered) printf("on worker %s (submit there with --addr %s)\n", a->addr, a->addr);
  }
  worker__v1__request_task_slot_response__free_unpacked(r, NULL);
  return CTL_EXIT_OK;
}

static int result_call(ctl_args *a, const char *method, const ProtobufCMessage *req) {
  wk_grpc_buf resp;
  int rc = call_once(a, method, req, &resp);
  if (rc != 0) return rc;
  Worker__V1__TaskResult *r = worker__v1__task_result__unpack(NULL, resp.len, resp.data);
  wk_grpc_buf_free(&resp);
  if (!r) return report_decode_error(a, "TaskResult");
  rc = print_result(a, r);
  worker__v1__task_result__free_unpacked(r, NULL);
  return rc;
}

int ctl_cmd_get(ctl_args *a) {
  Worker__V1__GetTaskResultRequest req;
  worker__v1__get_task_result_request__init(&req);
  req.task_id = a->pos[0];
  return result_call(a, M_GET, &req.base);
}

int ctl_cmd_cancel(ctl_args *a) {
  Worker__V1__CancelTaskRequest req;
  worker__v1__cancel_task_request__init(&req);
  req.task_id = a->pos[0];
  if (a->set[F_REASON]) req.reason = (char *)(uintptr_t)a->val[F_REASON];
  /* The snapshot at the time of the request: the cancellation itself succeeded. */
  int rc = result_call(a, M_CANCEL, &req.base);
  return rc == CTL_EXIT_TASK_FAILED ? CTL_EXIT_OK : rc;
}

static int64_t now_mono_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* One Health/Check: GRPC_STATUS_OK with *status filled, else the failure in *st (not
 * reported) or GRPC_STATUS_INTERNAL for an answer that does not decode. */
static grpc_status_code health_check(const ctl_args *a, wk_grpc_client *c, const uint8_t *req,
                                     size_t len, int64_t deadline_ms, int *status,
                                     wk_grpc_status *st) {
  wk_grpc_buf resp;
  grpc_status_code code =
      wk_grpc_client_unary(c, M_HEALTH, req, len, NULL, 0, deadline_ms, &resp, st);
  if (code != GRPC_STATUS_OK) return code;
  Grpc__Health__V1__HealthCheckResponse *r =
      grpc__health__v1__health_check_response__unpack(NULL, resp.len, resp.data);
  wk_grpc_buf_free(&resp);
  if (!r) {
    *st = (wk_grpc_status){.code = GRPC_STATUS_INTERNAL, .reached_server = true};
    snprintf(st->message, sizeof st->message, "cannot decode the worker's HealthCheckResponse");
    return GRPC_STATUS_INTERNAL;
  }
  *status = (int)r->status;
  grpc__health__v1__health_check_response__free_unpacked(r, NULL);
  (void)a;
  return GRPC_STATUS_OK;
}

#define HEALTH_SERVING GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING

/* Health/Check on a->addr, again every 100 ms until SERVING for at most wait_ms: the
 * last gRPC code, with *status or *st. An exit code (reported) in *rc when no client
 * could be made. */
static grpc_status_code health_wait(ctl_args *a, const uint8_t *buf, size_t len, uint64_t wait_ms,
                                    int *status, wk_grpc_status *st, int *rc) {
  int64_t give_up = now_mono_ms() + (int64_t)wait_ms;
  grpc_status_code code;
  *rc = 0;
  for (;;) {
    int64_t left = give_up - now_mono_ms();
    int64_t deadline = wait_ms && left > 0 && left < a->deadline_ms ? left : a->deadline_ms;
    /* a new channel each time: a failed one waits out gRPC's reconnect backoff */
    wk_grpc_client *c;
    *rc = open_client(a, &c);
    if (*rc != 0) return GRPC_STATUS_UNAVAILABLE;
    code = health_check(a, c, buf, len, deadline, status, st);
    wk_grpc_client_close(c);
    if ((code == GRPC_STATUS_OK && *status == HEALTH_SERVING) || now_mono_ms() + 100 > give_up) {
      return code;
    }
    struct timespec pause = {.tv_sec = 0, .tv_nsec = 100 * 1000000L};
    nanosleep(&pause, NULL);
  }
}

static const char *health_name(int status, char *b, size_t len) {
  return ctl_enum_name(&grpc__health__v1__health_check_response__serving_status__descriptor, status,
                       b, len);
}

/* With etcd: every registered worker's health, one line (or JSON object) each. Exit 0
 * when all are SERVING, 1 otherwise, 4 when none is registered. */
static int health_registered(ctl_args *a, const uint8_t *buf, size_t len, uint64_t wait_ms) {
  wk_etcd_workers ws;
  int rc = ctl_etcd_lookup_order(a, &ws);
  if (rc != 0) return rc;
  if (ws.n == 0) rc = report_no_worker(a, "worker");
  for (size_t i = 0; i < ws.n; i++) {
    ctl_set_discovered(a, ws.items[i].address);
    int status = 0, orc = 0;
    wk_grpc_status st;
    grpc_status_code code = health_wait(a, buf, len, wait_ms, &status, &st, &orc);
    if (orc == CTL_EXIT_USAGE) {
      rc = orc;
      break;
    }
    char b[32];
    const char *name =
        code == GRPC_STATUS_OK ? health_name(status, b, sizeof b) : wk_grpc_status_name(code);
    if (a->json) {
      json_t *j = json_object();
      json_object_set_new(j, "worker", json_string(a->addr));
      json_object_set_new(j, "status", json_string(name));
      if (code != GRPC_STATUS_OK) json_object_set_new(j, "message", json_string(st.message));
      ctl_json_print(stdout, j);
    } else if (code == GRPC_STATUS_OK) {
      printf("%s %s\n", a->addr, name);
    } else {
      printf("%s %s: %s\n", a->addr, name, st.message);
    }
    if (code != GRPC_STATUS_OK || status != HEALTH_SERVING) rc = CTL_EXIT_TASK_FAILED;
  }
  wk_etcd_workers_free(&ws);
  return rc;
}

int ctl_cmd_health(ctl_args *a) {
  Grpc__Health__V1__HealthCheckRequest req;
  grpc__health__v1__health_check_request__init(&req);
  if (a->set[F_SERVICE]) req.service = (char *)(uintptr_t)a->val[F_SERVICE];
  uint64_t wait_ms = 0;
  if (a->set[F_WAIT_MS] && !ctl_parse_u64(a->val[F_WAIT_MS], 0, 86400000u, &wait_ms)) {
    return ctl_usage_error(a, "--wait-ms takes a number of ms in 0..86400000, got '%s'",
                           a->val[F_WAIT_MS]);
  }
  size_t len;
  uint8_t *buf = pack(&req.base, &len);
  if (a->use_etcd) {
    int rc = health_registered(a, buf, len, wait_ms);
    free(buf);
    return rc;
  }
  int status = 0, rc = 0;
  wk_grpc_status st;
  grpc_status_code code = health_wait(a, buf, len, wait_ms, &status, &st, &rc);
  free(buf);
  if (rc != 0) return rc;
  if (code != GRPC_STATUS_OK) return report_status(a, &st);
  char b[32];
  const char *name = health_name(status, b, sizeof b);
  if (a->json) {
    json_t *j = json_object();
    json_object_set_new(j, "status", json_string(name));
    ctl_json_print(stdout, j);
  } else {
    printf("%s\n", name);
  }
  return status == HEALTH_SERVING ? CTL_EXIT_OK : CTL_EXIT_TASK_FAILED;
}

/* ---- watch ------------------------------------------------------------------------------ */

/* With etcd: finds the registered worker that holds each task (GetTaskResult on each in
 * turn, call_registered) and leaves a->addr on it. They must all be on one worker (one
 * stream). 0 or an exit code (reported). */
static int locate_tasks(ctl_args *a, char **ids, size_t n) {
  char first[sizeof a->addr_buf] = "";
  for (size_t i = 0; i < n; i++) {
    Worker__V1__GetTaskResultRequest req;
    worker__v1__get_task_result_request__init(&req);
    req.task_id = ids[i];
    wk_grpc_buf resp;
    a->discovered = false;
    int rc = call_registered(a, M_GET, &req.base, &resp);
    if (rc != 0) {
      fprintf(stderr, "workerctl: (looking for task %s)\n", ids[i]);
      return rc;
    }
    wk_grpc_buf_free(&resp);
    if (i == 0) {
      snprintf(first, sizeof first, "%s", a->addr);
    } else if (strcmp(first, a->addr) != 0) {
      return ctl_usage_error(a,
                             "task %s is on worker %s and task %s on %s: watch them apart (one "
                             "worker a stream), e.g. workerctl --addr %s watch %s",
                             ids[0], first, ids[i], a->addr, a->addr, ids[i]);
    }
  }
  ctl_set_discovered(a, first);
  return 0;
}

int ctl_cmd_watch(ctl_args *a) {
  char *ids[CTL_MAX_POSITIONAL];
  size_t n = 0;
  for (size_t i = 0; i < a->npos; i++) {
    bool dup = false;
    for (size_t k = 0; k < n; k++) dup = dup || strcmp(ids[k], a->pos[i]) == 0;
    if (!dup) ids[n++] = a->pos[i];
  }
  if (a->use_etcd) {
    int rc = locate_tasks(a, ids, n);
    if (rc != 0) return rc;
  }
  wk_grpc_client *c;
  int rc = open_client(a, &c);
  if (rc != 0) return rc;
  rc = watch_tasks(a, c, ids, n, false);
  wk_grpc_client_close(c);
  return rc;
}

/* ---- submit ------------------------------------------------------------------------------ */

static void gen_task_id(char *buf, size_t len) {
  uint32_t r = 0;
  int64_t now = now_unix_ms();
  if (getrandom(&r, sizeof r, 0) != (ssize_t)sizeof r) {
    r = (uint32_t)getpid() * 2654435761u ^ (uint32_t)now;
  }
  snprintf(buf, len, "t-%" PRIx64 "-%08" PRIx32, (uint64_t)now, r);
}

/* Reads a whole file ('-' = standard input) into *out (malloc'd). 0 or -1 (errno). */
static int read_file(const char *path, uint8_t **out, size_t *len) {
  FILE *f = strcmp(path, "-") == 0 ? stdin : fopen(path, "rb");
  if (!f) return -1;
  size_t cap = 4096, n = 0;
  uint8_t *buf = wk_xmalloc(cap);
  for (;;) {
    if (n == cap) {
      if (cap >= ARGS_MAX_BYTES) {
        free(buf);
        if (f != stdin) fclose(f);
        errno = EFBIG;
        return -1;
      }
      cap *= 2;
      uint8_t *nb = wk_xrealloc(buf, cap);
      buf = nb;
    }
    size_t r = fread(buf + n, 1, cap - n, f);
    n += r;
    if (r == 0) break;
  }
  int err = ferror(f);
  if (f != stdin) fclose(f);
  if (err) {
    free(buf);
    errno = EIO;
    return -1;
  }
  *out = buf;
  *len = n;
  return 0;
}

/* protobuf-c messages hold `char *`; packing only reads them. */
static char *mutable_str(const char *s) { return (char *)(uintptr_t)s; }

/* A protobuf-c map<string, string> entry: every generated entry type has this layout
 * and is told apart by its descriptor (checked for the three maps we send). */
typedef struct string_entry {
  ProtobufCMessage base;
  char *key;
  char *value;
} string_entry;

#define IS_STRING_ENTRY(T)                                                                 \
  (sizeof(T) == sizeof(string_entry) && offsetof(T, key) == offsetof(string_entry, key) && \
   offsetof(T, value) == offsetof(string_entry, value))
_Static_assert(IS_STRING_ENTRY(Worker__V1__SubmitTaskRequest__LabelsEntry), "labels");
_Static_assert(IS_STRING_ENTRY(Worker__V1__FunctionCallConfig__OptionsEntry), "options");
_Static_assert(IS_STRING_ENTRY(Worker__V1__ResultHandler__OptionsEntry), "result options");

/* One map field's entries in the shape protobuf-c wants. */
typedef struct string_map {
  string_entry entries[CTL_MAX_KV];
  string_entry *ptrs[CTL_MAX_KV];
} string_map;

/* Fills m with kvs as entries of the map type `d` describes (keys and values are
 * borrowed from kvs) and returns the pointer array a map field takes (kvs->n long). */
static void *string_map_fill(string_map *m, const ctl_kvs *kvs,
                             const ProtobufCMessageDescriptor *d) {
  for (size_t i = 0; i < kvs->n; i++) {
    m->entries[i] = (string_entry){
        .base = PROTOBUF_C_MESSAGE_INIT(d),
        .key = kvs->items[i].key,
        .value = mutable_str(kvs->items[i].value),
    };
    m->ptrs[i] = &m->entries[i];
  }
  return m->ptrs;
}

/* ---- submit to a worker picked from etcd ---------------------------------------------- */

static uint64_t tie_seed(void) {
  uint64_t s = 0;
  if (getrandom(&s, sizeof s, 0) != (ssize_t)sizeof s) {
    s = (uint64_t)now_unix_ms() * UINT64_C(0x9e3779b97f4a7c15) ^ (uint64_t)getpid();
  }
  return s | 1u; /* 0 would order ties by address: every client on the same worker */
}

/* The index of the first candidate after `from` whose address was not tried yet
 * (candidates[0..from] were); n when there is none. */
static size_t next_untried(const wk_etcd_workers *cands, size_t from) {
  for (size_t i = from + 1; i < cands->n; i++) {
    bool dup = false;
    for (size_t k = 0; k <= from && !dup; k++) {
      dup = strcmp(cands->items[k].address, cands->items[i].address) == 0;
    }
    if (!dup) return i;
  }
  return cands->n;
}

/* A refusal of the request's size, not of a slot: gRPC's own RESOURCE_EXHAUSTED
 * "Received message larger than max" / "Sent message larger than max" (an older
 * worker, or this client's send limit). The worker itself answers INVALID_ARGUMENT
 * naming max_message_bytes. Another worker would refuse the same bytes. */
static bool request_too_large(const wk_grpc_status *st) {
  return strstr(st->message, "larger than max") != NULL ||
         strstr(st->message, "max_message_bytes") != NULL;
}

/* Moves the candidates [from, to) that the back-off table holds back behind the
 * others, each group in its order. */
static void back_off_last(wk_etcd_workers *cands, size_t from, size_t to, const ctl_backoff *bo) {
  size_t n = to - from, k = 0;
  if (n < 2) return;
  wk_etcd_worker *tmp = wk_xcalloc(n, sizeof *tmp);
  for (int late = 0; late < 2; late++) {
    for (size_t i = from; i < to; i++) {
      const wk_etcd_worker *w = &cands->items[i];
      if (ctl_backoff_active(bo, w->address, w->updated_unix_ms) == (late == 1)) tmp[k++] = *w;
    }
  }
  memcpy(&cands->items[from], tmp, n * sizeof *tmp);
  free(tmp);
}

/* The picking rule's order (README "Picking a worker"): the ready, not draining workers
 * with a free slot, best first (wk_etcd_find_candidates); for a pinned epoch those whose
 * record lists it, then those whose record cannot tell; within each group the workers
 * backed off after a refusal last. 0, or an exit code (reported) when none is left. */
static int order_candidates(ctl_args *a, wk_etcd_workers *cands,
                            const Worker__V1__FunctionCallConfig *fn, const ctl_backoff *bo) {
  size_t unknown = 0;
  if (fn && fn->epoch) {
    size_t before = cands->n;
    wk_etcd_workers_order_for_epoch(cands, fn->name, fn->epoch, &unknown);
    if (cands->n == 0) {
      char what[256];
      snprintf(what, sizeof what,
               "ready worker with free slots that holds epoch %" PRIu64 " of %s (%zu without it)",
               fn->epoch, fn->name, before);
      return report_no_worker(a, what);
    }
  }
  back_off_last(cands, 0, cands->n - unknown, bo);
  back_off_last(cands, cands->n - unknown, cands->n, bo);
  return 0;
}

/* Sends req (SubmitTask or RequestTaskSlot: `method`; fn: the task's function, NULL for a
 * slot) to the workers registered under the prefix in etcd that can take a task, in the
 * picking rule's order (order_candidates), moving on while a worker answers
 * RESOURCE_EXHAUSTED (but not for the request's size) or UNAVAILABLE (or cannot be
 * reached), at most CTL_SUBMIT_MAX_TRIES; each such worker is backed off
 * (workerctl_backoff.c), the one that took the request forgiven.
 * Other answers, DEADLINE_EXCEEDED included (the worker may have taken the task), end
 * the search. Returns 0 with *out the chosen worker's client (a->addr its address) and
 * *resp the answer, or an exit code after reporting the failure. */
static int call_discovered(ctl_args *a, const char *method, const ProtobufCMessage *req,
                           const Worker__V1__FunctionCallConfig *fn, wk_grpc_client **out,
                           wk_grpc_buf *resp) {
  const char *endpoints = a->etcd_endpoints;
  const char *prefix = a->etcd_prefix;
  *out = NULL;
  char err[512];
  wk_etcd_workers cands_list = {NULL, 0};
  wk_etcd_workers *cands = &cands_list;
  int erc = wk_etcd_find_candidates(endpoints, prefix, a->deadline_ms, 0, tie_seed(), cands, err,
                                    sizeof err);
  if (erc == WK_ETCD_E_INVALID) return ctl_usage_error(a, "--etcd: %s", err);
  if (erc != WK_ETCD_OK) return ctl_report_etcd_error(a, endpoints, erc, err);
  if (cands->n == 0) {
    wk_etcd_workers_free(cands);
    return report_no_worker(a, "ready worker with free slots");
  }
  ctl_backoff *bo = ctl_backoff_load();
  int prc = order_candidates(a, cands, fn, bo);
  if (prc != 0) {
    ctl_backoff_save(bo);
    wk_etcd_workers_free(cands);
    return prc;
  }

  size_t len;
  uint8_t *buf = pack(req, &len);
  wk_grpc_client_options opts = client_options(a);
  size_t tries = 0;
  int rc = CTL_EXIT_UNREACHABLE;
  for (size_t i = 0; i < cands->n; i = next_untried(cands, i)) {
    ctl_set_discovered(a, cands->items[i].address);
    tries++;
    wk_grpc_client *c = NULL;
    wk_grpc_status st;
    char oerr[1536];
    int orc = wk_grpc_client_open(a->addr, &opts, &c, oerr, sizeof oerr);
    if (orc == -2) { /* a TLS file or the token: the same for every worker */
      rc = ctl_usage_error(a, "%s", oerr);
      break;
    }
    if (orc != 0) {
      st.code = GRPC_STATUS_UNAVAILABLE;
      st.reached_server = false;
      snprintf(st.message, sizeof st.message, "%.1000s", oerr);
    } else if (wk_grpc_client_unary(c, method, buf, len, NULL, 0, a->deadline_ms, resp, &st) ==
               GRPC_STATUS_OK) {
      *out = c;
      ctl_backoff_ok(bo, a->addr);
      rc = 0;
      break;
    }
    wk_grpc_client_close(c);
    bool skip = (st.code == GRPC_STATUS_RESOURCE_EXHAUSTED && !request_too_large(&st)) ||
                st.code == GRPC_STATUS_UNAVAILABLE;
    if (skip) ctl_backoff_fail(bo, a->addr, cands->items[i].updated_unix_ms);
    size_t next = next_untried(cands, i);
    if (skip && next < cands->n && tries < (size_t)CTL_SUBMIT_MAX_TRIES) {
      const char *code = wk_grpc_status_name(st.code);
      if (st.reached_server) {
        fprintf(stderr, "workerctl: %s answered %s; trying %s\n", a->addr, code,
                cands->items[next].address);
      } else {
        fprintf(stderr, "workerctl: cannot reach %s (%s); trying %s\n", a->addr, code,
                cands->items[next].address);
      }
      continue;
    }
    rc = report_status(a, &st);
    if (skip && tries > 1) {
      fprintf(stderr,
              "workerctl: none of the %zu workers tried took the task (registered under %s in "
              "etcd %s)%s\n",
              tries, prefix, endpoints,
              next < cands->n ? "; stopped at the limit of " CTL_STR(CTL_SUBMIT_MAX_TRIES) " tries"
                              : "");
    }
    break;
  }
  free(buf);
  ctl_backoff_save(bo);
  wk_etcd_workers_free(cands);
  return rc;
}

/* ---- submit ------------------------------------------------------------------------------ */

/* A SubmitTaskRequest and everything it points to, for one send. */
typedef struct submit_msg {
  Worker__V1__SubmitTaskRequest req;
  Worker__V1__FunctionCallConfig fn;
  Worker__V1__CallFailurePolicy fail;
  Worker__V1__CallRetryPolicy retry;
  Worker__V1__ResultHandler rh;
  char task_id[CTL_TASK_ID_MAX + 1];
  uint8_t *args; /* owned */
  size_t args_len;
  string_map labels, options, result_options;
} submit_msg;

/* The function name and where to send (--addr, or a worker from etcd: *discover). */
static int check_submit_target(const ctl_args *a, bool *discover) {
  const char *function = a->pos[0];
  if (!wk_code_store_valid_function_name(function)) {
    return ctl_usage_error(a,
                           "invalid function name '%s': use 1..%u characters of "
                           "[A-Za-z0-9_.-], not starting with '.'",
                           function, WK_CODE_STORE_NAME_MAX);
  }
  if (a->npos == 2 && a->set[F_ARGS_FILE]) {
    return ctl_usage_error(a, "give ARGS or --args-file, not both");
  }
  /* Where to: the target rule (workerctl_target.c); with etcd, a worker picked there. */
  *discover = a->use_etcd;
  if (*discover && a->set[F_SLOT_ID]) {
    return ctl_usage_error(a, "--slot-id is a slot on one worker: give that worker's --addr");
  }
  return CTL_EXIT_OK;
}

/* The function's arguments (ARGS, --args-file, or none), checked as JSON unless raw,
 * before anything is sent. */
static int read_submit_args(const ctl_args *a, bool raw, submit_msg *m) {
  if (a->set[F_ARGS_FILE]) {
    if (read_file(a->val[F_ARGS_FILE], &m->args, &m->args_len) != 0) {
      return ctl_usage_error(a, "cannot read --args-file %s: %s", a->val[F_ARGS_FILE],
                             strerror(errno));
    }
  } else {
    const char *text = a->npos == 2 ? a->pos[1] : (raw ? "" : "null");
    m->args_len = strlen(text);
    m->args = wk_xmalloc(m->args_len ? m->args_len : 1);
    memcpy(m->args, text, m->args_len);
  }
  if (raw) return CTL_EXIT_OK;
  json_error_t jerr;
  json_t *v =
      json_loadb((const char *)m->args, m->args_len, JSON_DECODE_ANY | JSON_ALLOW_NUL, &jerr);
  if (!v) {
    return ctl_usage_error(a,
                           "ARGS is not valid JSON (%s, line %d column %d); quote it for the "
                           "shell, e.g. '{\"n\": 3}', or pass --bytes for raw bytes",
                           jerr.text, jerr.line, jerr.column);
  }
  json_decref(v);
  return CTL_EXIT_OK;
}

/* The task id: --task-id, or a fresh one. */
static int set_task_id(const ctl_args *a, submit_msg *m) {
  if (a->set[F_TASK_ID]) {
    snprintf(m->task_id, sizeof m->task_id, "%s", a->val[F_TASK_ID]);
    if (strlen(a->val[F_TASK_ID]) > CTL_TASK_ID_MAX) {
      return ctl_usage_error(a, "--task-id is longer than %u bytes", CTL_TASK_ID_MAX);
    }
  } else {
    gen_task_id(m->task_id, sizeof m->task_id);
  }
  m->req.task_id = m->task_id;
  return CTL_EXIT_OK;
}

/* The FunctionCallConfig: name, builder, arguments, entrypoint, epoch. */
static int set_function(const ctl_args *a, bool raw, submit_msg *m) {
  Worker__V1__FunctionCallConfig *fn = &m->fn;
  int rc = CTL_EXIT_OK;
  m->req.function = fn;
  fn->name = mutable_str(a->pos[0]);
  fn->type = mutable_str(a->set[F_BUILDER] ? a->val[F_BUILDER] : "single");
  fn->args.data = m->args;
  fn->args.len = m->args_len;
  fn->content_type = raw ? WORKER__V1__CONTENT_TYPE__CONTENT_TYPE_BYTES
                         : WORKER__V1__CONTENT_TYPE__CONTENT_TYPE_JSON;
  if (a->set[F_BUILDER] && !*a->val[F_BUILDER]) {
    rc = ctl_usage_error(a, "--builder is empty (single, map or range)");
  }
  if (a->set[F_ENTRYPOINT]) {
    const char *ep = a->val[F_ENTRYPOINT];
    const char *colon = strchr(ep, ':');
    if (!colon || colon == ep || colon[1] == '\0') {
      rc = ctl_usage_error(a, "--entrypoint takes MODULE:ATTRIBUTE (e.g. main:handler), got '%s'",
                           ep);
    }
    fn->entrypoint = mutable_str(ep);
  }
  if (rc == 0 && a->set[F_EPOCH] && !ctl_parse_u64(a->val[F_EPOCH], 0, UINT64_MAX, &fn->epoch)) {
    rc = ctl_usage_error(a, "--epoch takes an epoch number, got '%s'", a->val[F_EPOCH]);
  }
  return rc;
}

/* --continue: the failure policy. */
static int set_failure_policy(const ctl_args *a, submit_msg *m) {
  uint64_t n = 0;
  int rc = CTL_EXIT_OK;
  if (!ctl_parse_u64(a->val[F_CONTINUE], 0, UINT32_MAX, &n)) {
    rc = ctl_usage_error(a, "--continue takes the number of failed calls to tolerate, got '%s'",
                         a->val[F_CONTINUE]);
  }
  m->fail.mode = WORKER__V1__CALL_FAILURE_MODE__CALL_FAILURE_MODE_CONTINUE;
  m->fail.max_failed_calls = (uint32_t)n;
  m->req.call_failure_policy = &m->fail;
  return rc;
}

/* --retries: the retry policy (100 ms doubling to 10 s, executor loss retried). */
static int set_retry_policy(const ctl_args *a, submit_msg *m) {
  uint64_t n = 0;
  int rc = CTL_EXIT_OK;
  if (!ctl_parse_u64(a->val[F_RETRIES], 0, 1000, &n)) {
    rc = ctl_usage_error(a, "--retries takes a number in 0..1000, got '%s'", a->val[F_RETRIES]);
  }
  m->retry.max_attempts = (uint32_t)n + 1u;
  m->retry.initial_backoff_ms = 100;
  m->retry.max_backoff_ms = 10000;
  m->retry.backoff_multiplier = 2.0;
  m->retry.retry_on_executor_lost = true;
  m->req.call_retry_policy = &m->retry;
  return rc;
}

/* The slot, the timeout, the policies and the result handler; the first problem ends
 * the checks. */
static int set_task_options(const ctl_args *a, submit_msg *m) {
  Worker__V1__SubmitTaskRequest *req = &m->req;
  if (a->set[F_SLOT_ID] && !ctl_parse_u64(a->val[F_SLOT_ID], 0, UINT64_MAX, &req->slot_id)) {
    return ctl_usage_error(a, "--slot-id takes a slot id from `workerctl slot`, got '%s'",
                           a->val[F_SLOT_ID]);
  }
  if (a->set[F_TIMEOUT_MS] &&
      !ctl_parse_u64(a->val[F_TIMEOUT_MS], 0, UINT64_MAX, &req->timeout_ms)) {
    return ctl_usage_error(a, "--timeout-ms takes a number of ms, got '%s'", a->val[F_TIMEOUT_MS]);
  }
  if (a->set[F_CALL_TIMEOUT_MS] &&
      !ctl_parse_u64(a->val[F_CALL_TIMEOUT_MS], 1, UINT64_MAX, &req->call_timeout_ms)) {
    return ctl_usage_error(a, "--call-timeout-ms takes a positive number of ms, got '%s'",
                           a->val[F_CALL_TIMEOUT_MS]);
  }
  int rc = CTL_EXIT_OK;
  if (a->set[F_CONTINUE] && (rc = set_failure_policy(a, m)) != 0) return rc;
  if (a->set[F_RETRIES] && (rc = set_retry_policy(a, m)) != 0) return rc;
  if (a->set[F_RESULT_HANDLER] || a->result_options.n) {
    if (!a->set[F_RESULT_HANDLER] || !*a->val[F_RESULT_HANDLER]) {
      rc = ctl_usage_error(a, "--result-option needs --result-handler TYPE");
    }
    m->rh.type = mutable_str(a->val[F_RESULT_HANDLER]);
    req->result_handler = &m->rh;
  }
  return rc;
}

/* --label, --option and --result-option. */
static void set_maps(const ctl_args *a, submit_msg *m) {
  m->req.n_labels = a->labels.n;
  m->req.labels = string_map_fill(&m->labels, &a->labels,
                                  &worker__v1__submit_task_request__labels_entry__descriptor);
  m->fn.n_options = a->options.n;
  m->fn.options = string_map_fill(&m->options, &a->options,
                                  &worker__v1__function_call_config__options_entry__descriptor);
  m->rh.n_options = a->result_options.n;
  m->rh.options = string_map_fill(&m->result_options, &a->result_options,
                                  &worker__v1__result_handler__options_entry__descriptor);
}

/* Every part of the request from the command line; an exit code after reporting the
 * first problem. */
static int build_submit(const ctl_args *a, submit_msg *m) {
  bool raw = a->set[F_BYTES];
  worker__v1__submit_task_request__init(&m->req);
  worker__v1__function_call_config__init(&m->fn);
  worker__v1__call_failure_policy__init(&m->fail);
  worker__v1__call_retry_policy__init(&m->retry);
  worker__v1__result_handler__init(&m->rh);
  int rc = read_submit_args(a, raw, m);
  if (rc == 0) rc = set_task_id(a, m);
  if (rc == 0) rc = set_function(a, raw, m);
  if (rc == 0) rc = set_task_options(a, m);
  if (rc == 0) set_maps(a, m);
  return rc;
}

/* Prints the answer; with --watch, watches the task on the same worker. */
static int show_submitted(ctl_args *a, wk_grpc_client *c, const Worker__V1__SubmitTaskResponse *r,
                          char *task_id) {
  const char *worker = a->discovered ? a->addr : NULL;
  if (a->quiet && !a->set[F_WATCH]) {
    printf("%s\n", task_id); /* for TASK=$(workerctl submit ... --quiet) */
    return CTL_EXIT_OK;
  }
  if (!a->set[F_WATCH]) {
    if (a->json) {
      ctl_json_print(stdout, ctl_submit_json(r, worker));
    } else {
      ctl_print_submit(stdout, r, worker);
    }
    return CTL_EXIT_OK;
  }
  if (!a->json && !a->quiet) ctl_print_submit(stdout, r, worker);
  char *ids[1] = {task_id};
  ctl_watch_opts o = {
      .terminal_only = true, .own = true, .owner_grace_ms = (int64_t)r->owner_grace_ms};
  return ctl_watch(a, c, ids, 1, &o);
}

/* Sends the request (to --addr or a worker from etcd), then shows the answer. */
static int send_submit(ctl_args *a, submit_msg *m, bool discover) {
  wk_grpc_client *c = NULL;
  wk_grpc_buf resp = {NULL, 0};
  int rc;
  if (discover) {
    rc = call_discovered(a, M_SUBMIT, &m->req.base, &m->fn, &c, &resp);
  } else {
    rc = open_client(a, &c);
    if (rc == 0) rc = call(a, c, M_SUBMIT, &m->req.base, &resp);
  }
  Worker__V1__SubmitTaskResponse *r = NULL;
  if (rc == 0) {
    r = worker__v1__submit_task_response__unpack(NULL, resp.len, resp.data);
    wk_grpc_buf_free(&resp);
    if (!r) rc = report_decode_error(a, "SubmitTaskResponse");
  }
  if (rc == 0) rc = show_submitted(a, c, r, m->task_id);
  if (r) worker__v1__submit_task_response__free_unpacked(r, NULL);
  wk_grpc_client_close(c);
  return rc;
}

int ctl_cmd_submit(ctl_args *a) {
  bool discover = false;
  int rc = check_submit_target(a, &discover);
  if (rc != 0) return rc;
  submit_msg *m = wk_xcalloc(1, sizeof *m);
  rc = build_submit(a, m);
  if (rc == 0) rc = send_submit(a, m, discover);
  free(m->args);
  free(m);
  return rc;
}

/* ---- local code store ---------------------------------------------------------------- */

static const char *code_root(ctl_args *a) {
  if (a->set[F_CODE_ROOT]) return a->val[F_CODE_ROOT];
  const char *env = getenv("WORKER_CODE_ROOT");
  return env && *env ? env : NULL;
}

int ctl_cmd_deploy(ctl_args *a) {
  if (a->set[F_FLEET]) return ctl_cmd_fleet_deploy(a);
  const char *root = code_root(a);
  if (!root)
    return ctl_usage_error(a, "no code root: pass --code-root DIR or set WORKER_CODE_ROOT");
  const char *function = a->pos[0];
  if (!wk_code_store_valid_function_name(function)) {
    return ctl_usage_error(a,
                           "invalid function name '%s': use 1..%u characters of "
                           "[A-Za-z0-9_.-], not starting with '.'",
                           function, WK_CODE_STORE_NAME_MAX);
  }
  ctl_check check;
  wk_code_deploy_opts opts = {0};
  if (!a->set[F_NO_CHECK]) {
    int rc = ctl_check_from_args(a, &check);
    if (rc != 0) return rc;
    opts = (wk_code_deploy_opts){.check = ctl_check_code, .check_ud = &check};
  }
  wk_code_deploy_result r;
  char err[2048];
  if (wk_code_store_deploy_opts(root, function, a->pos[1], &opts, &r, err, sizeof err) != 0) {
    fprintf(stderr, "workerctl deploy: %s\n", err);
    return CTL_EXIT_TASK_FAILED;
  }
  char path[4096];
  uint64_t got = 0;
  if (wk_code_store_resolve(root, function, r.epoch, &got, path, sizeof path, err, sizeof err) !=
      0) {
    snprintf(path, sizeof path, "%s/%s/%" PRIu64, root, function, r.epoch);
  }
  if (a->json) {
    json_t *j = json_object();
    json_object_set_new(j, "function", json_string(function));
    json_object_set_new(j, "epoch", ctl_json_u64(r.epoch));
    json_t *p = json_string(path);
    json_object_set_new(j, "path", p ? p : json_null());
    json_object_set_new(j, "sha256", json_string(r.digest));
    json_object_set_new(j, "reused", json_boolean(r.reused));
    ctl_json_print(stdout, j);
  } else {
    /* The epoch alone on stdout, for epoch=$(workerctl deploy ...); context on stderr. */
    printf("%" PRIu64 "\n", r.epoch);
    fprintf(stderr, "%s %s epoch %" PRIu64 " at %s (now CURRENT) sha256:%s\n",
            r.reused ? "unchanged content: already" : "deployed", function, r.epoch, path,
            r.digest);
  }
  return CTL_EXIT_OK;
}

int ctl_cmd_rollback(ctl_args *a) {
  const char *root = code_root(a);
  if (!root)
    return ctl_usage_error(a, "no code root: pass --code-root DIR or set WORKER_CODE_ROOT");
  uint64_t epoch = 0;
  if (a->npos > 1 && !ctl_parse_u64(a->pos[1], 1, UINT64_MAX, &epoch))
    return ctl_usage_error(a, "EPOCH must be a positive number, got '%s'", a->pos[1]);
  uint64_t now = 0;
  char err[1024];
  if (wk_code_store_set_current(root, a->pos[0], epoch, &now, err, sizeof err) != 0) {
    fprintf(stderr, "workerctl rollback: %s\n", err);
    return CTL_EXIT_TASK_FAILED;
  }
  char hex[WK_CODE_STORE_DIGEST_HEX + 1];
  bool have = wk_code_store_digest(root, a->pos[0], now, hex) == 0;
  if (a->json) {
    json_t *j = json_object();
    json_object_set_new(j, "function", json_string(a->pos[0]));
    json_object_set_new(j, "current", ctl_json_u64(now));
    json_object_set_new(j, "sha256", have ? json_string(hex) : json_null());
    ctl_json_print(stdout, j);
  } else {
    printf("%" PRIu64 "\n", now);
    fprintf(stderr, "%s: CURRENT is epoch %" PRIu64 " sha256:%s\n", a->pos[0], now,
            have ? hex : "(not recorded)");
  }
  return CTL_EXIT_OK;
}

int ctl_cmd_epochs(ctl_args *a) {
  const char *root = code_root(a);
  if (!root)
    return ctl_usage_error(a, "no code root: pass --code-root DIR or set WORKER_CODE_ROOT");
  const char *function = a->pos[0];
  size_t count = 0;
  uint64_t current = 0;
  char err[1024];
  if (wk_code_store_list(root, function, NULL, 0, &count, &current, err, sizeof err) != 0) {
    fprintf(stderr, "workerctl epochs: %s\n", err);
    return CTL_EXIT_TASK_FAILED;
  }
  uint64_t *epochs = wk_xcalloc(count ? count : 1, sizeof *epochs);
  size_t got = 0;
  if (wk_code_store_list(root, function, epochs, count, &got, &current, err, sizeof err) != 0) {
    free(epochs);
    fprintf(stderr, "workerctl epochs: %s\n", err);
    return CTL_EXIT_TASK_FAILED;
  }
  if (got > count) got = count; /* a deploy in between: show what we have room for */
  if (a->json) {
    json_t *j = json_object();
    json_object_set_new(j, "function", json_string(function));
    json_t *arr = json_array();
    json_t *digests = json_object();
    for (size_t i = 0; i < got; i++) {
      json_array_append_new(arr, ctl_json_u64(epochs[i]));
      char key[24], hex[WK_CODE_STORE_DIGEST_HEX + 1];
      snprintf(key, sizeof key, "%" PRIu64, epochs[i]);
      bool have = wk_code_store_digest(root, function, epochs[i], hex) == 0;
      json_object_set_new(digests, key, have ? json_string(hex) : json_null());
    }
    json_object_set_new(j, "epochs", arr);
    json_object_set_new(j, "sha256", digests); /* by epoch; null when not recorded */
    json_object_set_new(j, "current", ctl_json_u64(current));
    ctl_json_print(stdout, j);
  } else if (got == 0) {
    printf("%s: no epoch deployed under %s\n", function, root);
  } else {
    for (size_t i = 0; i < got; i++) {
      char hex[WK_CODE_STORE_DIGEST_HEX + 1];
      bool have = wk_code_store_digest(root, function, epochs[i], hex) == 0;
      printf("%s %" PRIu64 " sha256:%s%s\n", function, epochs[i], have ? hex : "-",
             epochs[i] == current ? " CURRENT" : "");
    }
  }
  free(epochs);
  return CTL_EXIT_OK;
}

/* ---- shared with the other command files (workerctl.h) ------------------------------ */

int ctl_open_client(ctl_args *a, wk_grpc_client **c) { return open_client(a, c); }

wk_grpc_client_options ctl_client_options(const ctl_args *a) { return client_options(a); }

int ctl_report_status(const ctl_args *a, const wk_grpc_status *st) { return report_status(a, st); }

int ctl_call_once(ctl_args *a, const char *method, const ProtobufCMessage *req, wk_grpc_buf *resp) {
  return call_once(a, method, req, resp);
}

int ctl_show_result(const ctl_args *a, const Worker__V1__TaskResult *r) {
  return print_result(a, r);
}

int ctl_report_decode_error(const ctl_args *a, const char *what) {
  return report_decode_error(a, what);
}

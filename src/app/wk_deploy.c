/* wk_deploy.c: DeployCode and SetCurrentEpoch (see wk_deploy.h). */
#include "app/wk_deploy.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "adapters/wk_code_check.h"
#include "adapters/wk_code_store.h"
#include "adapters/wk_grpc_client.h"
#include "adapters/wk_reaper.h"
#include "adapters/wk_validate.h"
#include "lib/wk_alloc.h"
#include "lib/wk_err.h"
#include "lib/wk_log.h"

#define DEPLOY_ERR_LEN 2048u

/* ---- the handler ------------------------------------------------------------------- */

typedef struct op {
  struct op *next;
  wk_rpc *rpc;
  wk_rpc_method method;
  char client[300]; /* peer and certificate names, for the log */
  /* results, written by the threadpool */
  int rc;
  wk_code_publish_result pub;
  uint64_t now, previous;
  uint64_t files, bytes;
  char err[DEPLOY_ERR_LEN];
  grpc_status_code refusal; /* set when the handler refused before the store ran */
} op;

struct wk_deploy {
  uv_loop_t *loop;
  bool enabled, closing, running;
  wk_deploy_acl acl;
  char *code_root;
  uint64_t max_bytes;
  uint32_t max_files;
  char *python, *script;
  char **env; /* the check's environment */
  int64_t check_timeout_ms;
  uint32_t uid, gid;
  void (*on_changed)(void *ud, const char *function);
  void *on_changed_ud;
  op *head, *tail;
  size_t queued;
  uv_work_t work;
  op *current;
};

static char *env_entry(const char *name, const char *value) {
  size_t n = strlen(name) + strlen(value) + 2;
  char *s = wk_xmalloc(n);
  snprintf(s, n, "%s=%s", name, value);
  return s;
}

wk_deploy *wk_deploy_create(uv_loop_t *loop, const wk_deploy_config *cfg, char *err,
                            size_t err_len) {
  wk_deploy *d = wk_xcalloc(1, sizeof *d);
  if (wk_deploy_acl_parse(cfg->allowed_clients, &d->acl, err, err_len) != 0) {
    free(d);
    return NULL;
  }
  d->loop = loop;
  d->enabled = cfg->enabled;
  d->code_root = wk_xstrdup(cfg->code_root ? cfg->code_root : "");
  d->max_bytes = cfg->max_bytes;
  d->max_files = cfg->max_files;
  d->python = wk_xstrdup(cfg->python ? cfg->python : "/usr/bin/python3");
  d->script = wk_xstrdup(cfg->script ? cfg->script : "");
  d->check_timeout_ms =
      cfg->check_timeout_ms > 0 ? cfg->check_timeout_ms : WK_CODE_CHECK_TIMEOUT_MS;
  d->uid = cfg->uid;
  d->gid = cfg->gid;
  d->on_changed = cfg->on_changed;
  d->on_changed_ud = cfg->on_changed_ud;
  /* what an executor gets (wk_executor_pool.c): a scrubbed environment and executor_env */
  size_t extra = 0;
  while (cfg->executor_env && cfg->executor_env[extra]) extra++;
  d->env = wk_xcalloc(extra + 6, sizeof *d->env);
  size_t n = 0;
  d->env[n++] = env_entry("PATH", "/usr/local/bin:/usr/bin:/bin");
  d->env[n++] = env_entry("LANG", "C.UTF-8");
  d->env[n++] = env_entry("PYTHONPATH", cfg->python_path ? cfg->python_path : "");
  d->env[n++] = env_entry("HOME", "/");
  for (size_t i = 0; i < extra; i++) {
    const char *v = cfg->executor_env[i];
    if (strncmp(v, "PATH=", 5) == 0) {
      free(d->env[0]);
      d->env[0] = wk_xstrdup(v);
    } else if (strncmp(v, "LANG=", 5) == 0) {
      free(d->env[1]);
      d->env[1] = wk_xstrdup(v);
    } else {
      d->env = wk_xrealloc(d->env, (n + 2 + (extra - i)) * sizeof *d->env);
      d->env[n++] = wk_xstrdup(v);
    }
  }
  d->env[n] = NULL;
  return d;
}

static void free_deploy(wk_deploy *d) {
  for (char **e = d->env; e && *e; e++) free(*e);
  free(d->env);
  free(d->code_root);
  free(d->python);
  free(d->script);
  free(d);
}

/* "ipv4:1.2.3.4:5 (certificate a,b)" */
static void describe_client(wk_rpc *rpc, char *out, size_t len) {
  const char *ids = wk_rpc_peer_identities(rpc);
  if (!ids[0]) {
    snprintf(out, len, "%s", wk_rpc_peer(rpc));
    return;
  }
  char names[200];
  snprintf(names, sizeof names, "%s", ids);
  for (char *c = names; *c; c++)
    if (*c == '\n') *c = ',';
  snprintf(out, len, "%s (certificate %s)", wk_rpc_peer(rpc), names);
}

static const char *fn_of(const op *o) {
  const void *req = wk_rpc_request(o->rpc);
  return o->method == WK_RPC_DEPLOY_CODE
             ? ((const Worker__V1__DeployCodeRequest *)req)->function
             : ((const Worker__V1__SetCurrentEpochRequest *)req)->function;
}

static uint64_t epoch_of(const op *o) {
  const void *req = wk_rpc_request(o->rpc);
  return o->method == WK_RPC_DEPLOY_CODE ? ((const Worker__V1__DeployCodeRequest *)req)->epoch
                                         : ((const Worker__V1__SetCurrentEpochRequest *)req)->epoch;
}

/* Threadpool: one DeployCode. */
static void run_deploy(wk_deploy *d, op *o) {
  const Worker__V1__DeployCodeRequest *req = wk_rpc_request(o->rpc);
  o->files = req->n_files;
  if (req->n_files > d->max_files) {
    wk_errf(o->err, sizeof o->err,
            "DeployCode holds %zu files, more than deploy_max_files (%u) on this worker: deploy "
            "fewer files, or raise deploy_max_files",
            req->n_files, d->max_files);
    o->rc = WK_CODE_STORE_E_INVALID;
    return;
  }
  for (size_t i = 0; i < req->n_files; i++) o->bytes += req->files[i]->content.len;
  if (o->bytes > d->max_bytes) {
    wk_errf(o->err, sizeof o->err,
            "DeployCode holds %" PRIu64
            " bytes of file contents, more than deploy_max_bytes "
            "(%" PRIu64 ") on this worker: deploy less, or raise deploy_max_bytes",
            o->bytes, d->max_bytes);
    o->rc = WK_CODE_STORE_E_INVALID;
    return;
  }
  wk_code_file *files = wk_xcalloc(req->n_files ? req->n_files : 1, sizeof *files);
  for (size_t i = 0; i < req->n_files; i++) {
    const Worker__V1__CodeFile *f = req->files[i];
    files[i] = (wk_code_file){.path = f->path ? f->path : "",
                              .content = f->content.data,
                              .len = f->content.len,
                              .executable = f->executable};
  }
  wk_code_check check = {
      .python = d->python,
      .script = d->script,
      .entrypoint = req->entrypoint && req->entrypoint[0] ? req->entrypoint : "main:handler",
      .timeout_ms = d->check_timeout_ms,
      .env = (const char *const *)d->env,
      .uid = d->uid,
      .gid = d->gid,
      /* the worker is a subreaper whose sweep ends unknown children: the check is known */
      .before_fork = wk_reaper_fork_begin,
      .after_fork = wk_reaper_fork_end,
      .reaped = wk_reaper_disown,
  };
  wk_code_publish_opts opts = {
      .epoch = req->epoch,
      .digest = req->digest,
      .make_current = req->make_current,
      .max_files = d->max_files,
      .max_bytes = d->max_bytes,
      .check = wk_code_check_run,
      .check_ud = &check,
  };
  o->rc = wk_code_store_publish_files(d->code_root, req->function, files, req->n_files, &opts,
                                      &o->pub, o->err, sizeof o->err);
  free(files);
}

static void on_work(uv_work_t *w) {
  wk_deploy *d = w->data;
  op *o = d->current;
  if (o->method == WK_RPC_DEPLOY_CODE) {
    run_deploy(d, o);
  } else {
    const Worker__V1__SetCurrentEpochRequest *req = wk_rpc_request(o->rpc);
    o->rc = wk_code_store_set_current_digest(d->code_root, req->function, req->epoch, req->digest,
                                             &o->now, &o->previous, o->err, sizeof o->err);
  }
}

static grpc_status_code status_of(int rc) {
  switch (rc) {
    case WK_CODE_STORE_OK: return GRPC_STATUS_OK;
    case WK_CODE_STORE_E_INVALID:
    case WK_CODE_STORE_E_DIGEST:
    case WK_CODE_STORE_E_CHECK: return GRPC_STATUS_INVALID_ARGUMENT;
    case WK_CODE_STORE_E_CONFLICT: return GRPC_STATUS_FAILED_PRECONDITION;
    case WK_CODE_STORE_E_NOT_FOUND: return GRPC_STATUS_NOT_FOUND;
    default: return GRPC_STATUS_INTERNAL;
  }
}

static void reply(wk_rpc *rpc, const ProtobufCMessage *m) {
  size_t n = protobuf_c_message_get_packed_size(m);
  uint8_t *buf = wk_xmalloc(n ? n : 1);
  protobuf_c_message_pack(m, buf);
  wk_rpc_reply(rpc, buf, n);
  free(buf);
}

/* Loop: answers, logs, tells on_changed. */
static void finish(wk_deploy *d, op *o) {
  const char *function = fn_of(o);
  grpc_status_code code = status_of(o->rc);
  bool deploy = o->method == WK_RPC_DEPLOY_CODE;
  if (code != GRPC_STATUS_OK) {
    char msg[DEPLOY_ERR_LEN + 64];
    snprintf(msg, sizeof msg, "%s refused: %s", deploy ? "DeployCode" : "SetCurrentEpoch", o->err);
    json_t *f =
        json_pack("{s:s,s:s,s:I,s:s,s:s,s:s}", "rpc", deploy ? "DeployCode" : "SetCurrentEpoch",
                  "function", function, "epoch", (json_int_t)epoch_of(o), "client", o->client,
                  "code", wk_grpc_status_name(code), "error", o->err);
    wk_log_json(WK_LOG_WARN, deploy ? "code_deploy_refused" : "code_current_refused", f);
    wk_rpc_fail(o->rpc, code, msg);
    return;
  }
  if (deploy) {
    Worker__V1__DeployCodeResponse r = WORKER__V1__DEPLOY_CODE_RESPONSE__INIT;
    r.epoch = o->pub.epoch;
    r.digest = o->pub.digest;
    r.reused = o->pub.reused;
    r.current_epoch = o->pub.current;
    json_t *f = json_pack("{s:s,s:I,s:s,s:b,s:I,s:I,s:s,s:I,s:I}", "function", function, "epoch",
                          (json_int_t)o->pub.epoch, "digest", o->pub.digest, "reused",
                          (int)o->pub.reused, "current", (json_int_t)o->pub.current, "previous",
                          (json_int_t)o->pub.previous, "client", o->client, "files",
                          (json_int_t)o->files, "bytes", (json_int_t)o->bytes);
    wk_log_json(WK_LOG_INFO, "code_deployed", f); /* before the answer: logged when heard */
    reply(o->rpc, &r.base);
    if ((!o->pub.reused || o->pub.current != o->pub.previous) && d->on_changed)
      d->on_changed(d->on_changed_ud, function);
  } else {
    Worker__V1__SetCurrentEpochResponse r = WORKER__V1__SET_CURRENT_EPOCH_RESPONSE__INIT;
    r.current_epoch = o->now;
    r.previous_epoch = o->previous;
    char hex[WK_CODE_STORE_DIGEST_HEX + 1] = "";
    (void)wk_code_store_digest(d->code_root, function, o->now, hex);
    json_t *f =
        json_pack("{s:s,s:I,s:I,s:s,s:s}", "function", function, "epoch", (json_int_t)o->now,
                  "previous", (json_int_t)o->previous, "digest", hex, "client", o->client);
    wk_log_json(WK_LOG_INFO, "code_current_set", f);
    reply(o->rpc, &r.base);
    if (o->now != o->previous && d->on_changed) d->on_changed(d->on_changed_ud, function);
  }
}

static void start_next(wk_deploy *d);

static void on_done(uv_work_t *w, int status) {
  wk_deploy *d = w->data;
  op *o = d->current;
  d->current = NULL;
  d->running = false;
  if (status != 0) {
    wk_rpc_fail(o->rpc, GRPC_STATUS_UNAVAILABLE,
                "the deploy was cancelled: the worker is stopping");
  } else {
    finish(d, o);
  }
  wk_rpc_release(o->rpc);
  free(o);
  if (d->closing) {
    if (!d->head) free_deploy(d);
    return;
  }
  start_next(d);
}

static void start_next(wk_deploy *d) {
  if (d->running || !d->head) return;
  op *o = d->head;
  d->head = o->next;
  if (!d->head) d->tail = NULL;
  d->queued--;
  d->current = o;
  d->running = true;
  d->work.data = d;
  if (uv_queue_work(d->loop, &d->work, on_work, on_done) != 0) {
    d->running = false;
    d->current = NULL;
    wk_rpc_fail(o->rpc, GRPC_STATUS_INTERNAL, "cannot queue the deploy on the threadpool");
    wk_rpc_release(o->rpc);
    free(o);
    start_next(d);
  }
}

void wk_deploy_handle(void *ud, wk_rpc *rpc) {
  wk_deploy *d = ud;
  wk_rpc_method m = wk_rpc_method_of(rpc);
  const char *what = m == WK_RPC_DEPLOY_CODE ? "DeployCode" : "SetCurrentEpoch";
  char client[300];
  describe_client(rpc, client, sizeof client);
  char msg[600];
  grpc_status_code code = GRPC_STATUS_OK;
  if (!d || d->closing) {
    code = GRPC_STATUS_UNAVAILABLE;
    snprintf(msg, sizeof msg, "the worker is shutting down");
  } else if (!d->enabled) {
    code = GRPC_STATUS_UNIMPLEMENTED;
    snprintf(msg, sizeof msg,
             "%s is off on this worker: start it with deploy_enabled: true (--deploy-enabled true, "
             "WORKER_DEPLOY_ENABLED=true) and list who may deploy in deploy_allowed_clients",
             what);
  } else if (!wk_deploy_acl_allows(&d->acl, wk_rpc_peer(rpc), wk_rpc_peer_identities(rpc))) {
    code = GRPC_STATUS_PERMISSION_DENIED;
    snprintf(msg, sizeof msg,
             "client %s may not call %s on this worker: add its address, network or client "
             "certificate name to the worker's deploy_allowed_clients",
             client, what);
  } else if (d->queued >= WK_DEPLOY_QUEUE_MAX) {
    code = GRPC_STATUS_UNAVAILABLE;
    snprintf(msg, sizeof msg, "%zu deploys are waiting on this worker already: retry later",
             d->queued);
  }
  if (code != GRPC_STATUS_OK) {
    wk_rpc_fail(rpc, code, msg);
    if (d && code == GRPC_STATUS_PERMISSION_DENIED) {
      json_t *f = json_pack("{s:s,s:s,s:s}", "rpc", what, "client", client, "error", msg);
      wk_log_json(WK_LOG_WARN, "code_deploy_denied", f);
    }
    wk_rpc_release(rpc);
    return;
  }
  op *o = wk_xcalloc(1, sizeof *o);
  o->rpc = rpc;
  o->method = m;
  snprintf(o->client, sizeof o->client, "%s", client);
  if (d->tail) {
    d->tail->next = o;
  } else {
    d->head = o;
  }
  d->tail = o;
  d->queued++;
  start_next(d);
}

void wk_deploy_close(wk_deploy *d) {
  if (!d) return;
  d->closing = true;
  while (d->head) {
    op *o = d->head;
    d->head = o->next;
    wk_rpc_fail(o->rpc, GRPC_STATUS_UNAVAILABLE, "the worker is shutting down");
    wk_rpc_release(o->rpc);
    free(o);
  }
  d->tail = NULL;
  d->queued = 0;
  if (!d->running) free_deploy(d);
}

/* workerctl_fleet_deploy.c: `workerctl deploy --fleet FUNCTION DIR`, the function's code
 * on every selected worker under one fleet-wide epoch (issue 15 §1).
 *
 *   1. The tree is read by the local deploy's rules (wk_code_store_read_tree: regular
 *      files and directories, no __pycache__, links only inside the tree) and digested
 *      by the code store's rule.
 *   2. The epoch comes from etcd, under --epoch-prefix (default /worker-epochs/) +
 *      FUNCTION + "/": "by-digest/<hex>" names the epoch of that content (created if
 *      absent, so identical content gets the same epoch however often and wherever it
 *      is deployed) and "counter" the highest epoch given out. A new epoch is above the
 *      counter and above every epoch any registered worker lists for FUNCTION; both keys
 *      are written in one transaction guarded on their revisions, so a concurrent fleet
 *      deploy of other content gets another number.
 *   3. The workers: every valid registration under every deployment's prefix (as
 *      `workerctl workers`), or --prefix / --deployment, or the --addr list.
 *   4. DeployCode(make_current=false) on them, --parallel at a time (default 4), one
 *      line each on stderr; then, only when every one holds the epoch, SetCurrentEpoch
 *      on each. Any failure: CURRENT moves nowhere, exit 1, the failed workers named and
 *      how to retry. --rolling: worker by worker, DeployCode(make_current=true), stopping
 *      at the first failure.
 * Output: the epoch alone on stdout; --json: one object with every worker's outcome. */
#define _GNU_SOURCE

#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "adapters/wk_code_store.h"
#include "adapters/wk_etcd_registry.h"
#include "adapters/wk_grpc_client.h"
#include "lib/wk_alloc.h"
#include "workerctl.h"

#define M_DEPLOY "/worker.v1.WorkerService/DeployCode"
#define M_SET_CURRENT "/worker.v1.WorkerService/SetCurrentEpoch"
#define FLEET_DEFAULT_PARALLEL 4u
#define FLEET_DEFAULT_EPOCH_PREFIX "/worker-epochs/"
#define FLEET_DEPLOY_DEADLINE_MS 120000 /* the worker checks the code (compile, import) */
#define FLEET_EPOCH_TRIES 32            /* transactions lost to concurrent deploys */

/* One selected worker and what happened there. */
typedef struct fleet_target {
  char *addr; /* owned */
  bool ok;    /* DeployCode (and, when asked, SetCurrentEpoch) succeeded */
  bool tried;
  bool reused;
  uint64_t current; /* CURRENT after the last call that answered */
  const char *phase;
  wk_grpc_status st; /* the failure */
} fleet_target;

typedef struct fleet_job {
  ctl_args *a;
  fleet_target *targets;
  size_t n;
  atomic_size_t next;
  const uint8_t *req; /* the packed request, the same for every worker */
  size_t req_len;
  const char *method;
  bool set_current;       /* the SetCurrentEpoch pass (method M_SET_CURRENT) */
  const char *entrypoint; /* --entrypoint, NULL: the worker's default */
  int64_t deadline_ms;
} fleet_job;

/* ---- the file list ------------------------------------------------------------------ */

typedef struct fleet_code {
  wk_code_file *files;
  size_t n;
  char digest[WK_CODE_STORE_DIGEST_HEX + 1];
} fleet_code;

/* ---- choosing the workers ----------------------------------------------------------- */

static void add_target(fleet_target **ts, size_t *n, const char *addr) {
  for (size_t i = 0; i < *n; i++) {
    if (strcmp((*ts)[i].addr, addr) == 0) return;
  }
  *ts = wk_xrealloc(*ts, (*n + 1) * sizeof **ts);
  (*ts)[(*n)++] = (fleet_target){.addr = wk_xstrdup(addr)};
}

/* The --addr list (comma-separated, blanks ignored). */
static void targets_from_list(const char *list, fleet_target **ts, size_t *n) {
  char *copy = wk_xstrdup(list), *save = NULL;
  for (char *t = strtok_r(copy, ", \t", &save); t; t = strtok_r(NULL, ", \t", &save)) {
    add_target(ts, n, t);
  }
  free(copy);
}

/* ---- the fleet-wide epoch ------------------------------------------------------------ */

static bool parse_epoch_value(const wk_etcd_kv *kv, uint64_t *out) {
  return ctl_parse_u64(kv->value, 1, UINT64_MAX - 1, out);
}

/* The epoch of `digest` for `function` under prefix (see the top of the file): 0 with
 * *epoch and *existed, or an exit code (reported). floor: the highest epoch any
 * registered worker lists. */
static int fleet_epoch(ctl_args *a, wk_etcd *c, const char *prefix, const char *function,
                       const char *digest, uint64_t floor, uint64_t *epoch, bool *existed) {
  char by_digest[512], counter[512];
  snprintf(by_digest, sizeof by_digest, "%s%s/by-digest/%s", prefix, function, digest);
  snprintf(counter, sizeof counter, "%s%s/counter", prefix, function);
  for (int attempt = 0; attempt < FLEET_EPOCH_TRIES; attempt++) {
    wk_etcd_kv kv;
    bool found = false;
    int rc = wk_etcd_get(c, by_digest, &kv, &found);
    if (rc != WK_ETCD_OK)
      return ctl_report_etcd_error(a, wk_etcd_endpoint(c), rc, wk_etcd_errmsg(c));
    if (found) {
      bool ok = parse_epoch_value(&kv, epoch);
      wk_etcd_kv_free(&kv);
      if (!ok) {
        fprintf(stderr, "workerctl deploy: etcd key %s does not hold an epoch number\n", by_digest);
        return CTL_EXIT_STATUS;
      }
      *existed = true;
      return 0;
    }
    uint64_t highest = 0;
    int64_t rev = 0;
    rc = wk_etcd_get(c, counter, &kv, &found);
    if (rc != WK_ETCD_OK)
      return ctl_report_etcd_error(a, wk_etcd_endpoint(c), rc, wk_etcd_errmsg(c));
    if (found) {
      rev = kv.mod_revision;
      bool ok = parse_epoch_value(&kv, &highest);
      wk_etcd_kv_free(&kv);
      if (!ok) {
        fprintf(stderr, "workerctl deploy: etcd key %s does not hold an epoch number\n", counter);
        return CTL_EXIT_STATUS;
      }
    }
    uint64_t next = (highest > floor ? highest : floor) + 1;
    char value[24];
    int len = snprintf(value, sizeof value, "%" PRIu64, next);
    wk_etcd_guard guards[2] = {{by_digest, 0}, {counter, rev}};
    wk_etcd_put_op puts[2] = {{counter, value, (size_t)len}, {by_digest, value, (size_t)len}};
    bool won = false;
    rc = wk_etcd_txn_put(c, guards, 2, puts, 2, &won);
    if (rc != WK_ETCD_OK)
      return ctl_report_etcd_error(a, wk_etcd_endpoint(c), rc, wk_etcd_errmsg(c));
    if (won) {
      *epoch = next;
      *existed = false;
      return 0;
    }
    /* another deploy moved the counter or named this content first: look again */
  }
  fprintf(stderr,
          "workerctl deploy: could not take an epoch for %s in etcd after %d tries (other "
          "deploys of %s kept winning); run the command again\n",
          function, FLEET_EPOCH_TRIES, function);
  return CTL_EXIT_STATUS;
}

/* ---- calls ----------------------------------------------------------------------------- */

static void set_status(fleet_target *t, grpc_status_code code, bool reached, const char *msg) {
  t->st.code = code;
  t->st.reached_server = reached;
  snprintf(t->st.message, sizeof t->st.message, "%.1000s", msg);
}

/* One worker's call of the job; the outcome into t. */
static void call_target(fleet_job *j, fleet_target *t) {
  wk_grpc_client_options opts = ctl_client_options(j->a);
  wk_grpc_client *c = NULL;
  char err[1536];
  t->tried = true;
  t->phase = j->set_current ? "SetCurrentEpoch" : "DeployCode";
  if (wk_grpc_client_open(t->addr, &opts, &c, err, sizeof err) != 0) {
    t->ok = false;
    set_status(t, GRPC_STATUS_UNAVAILABLE, false, err);
    return;
  }
  wk_grpc_buf resp = {0};
  grpc_status_code code = wk_grpc_client_unary(c, j->method, j->req, j->req_len, NULL, 0,
                                               j->deadline_ms, &resp, &t->st);
  wk_grpc_client_close(c);
  t->ok = code == GRPC_STATUS_OK;
  if (!t->ok) return;
  if (j->set_current) {
    Worker__V1__SetCurrentEpochResponse *r =
        worker__v1__set_current_epoch_response__unpack(NULL, resp.len, resp.data);
    if (r) t->current = r->current_epoch;
    t->ok = r != NULL;
    if (r) worker__v1__set_current_epoch_response__free_unpacked(r, NULL);
  } else {
    Worker__V1__DeployCodeResponse *r =
        worker__v1__deploy_code_response__unpack(NULL, resp.len, resp.data);
    if (r) {
      t->reused = r->reused;
      t->current = r->current_epoch;
      worker__v1__deploy_code_response__free_unpacked(r, NULL);
    }
    t->ok = r != NULL;
  }
  if (!t->ok) set_status(t, GRPC_STATUS_INTERNAL, true, "cannot decode the worker's answer");
  wk_grpc_buf_free(&resp);
}

static void *job_thread(void *arg) {
  fleet_job *j = arg;
  for (;;) {
    size_t i = atomic_fetch_add(&j->next, 1);
    if (i >= j->n) return NULL;
    call_target(j, &j->targets[i]);
  }
}

/* The job's call on every target, `parallel` at a time. */
static void run_parallel(fleet_job *j, unsigned parallel) {
  size_t nthreads = parallel < j->n ? parallel : j->n;
  pthread_t *th = wk_xcalloc(nthreads ? nthreads : 1, sizeof *th);
  size_t started = 0;
  for (size_t i = 0; i < nthreads; i++) {
    if (pthread_create(&th[i], NULL, job_thread, j) != 0) break;
    started++;
  }
  if (started == 0) job_thread(j); /* no thread: do it here */
  for (size_t i = 0; i < started; i++) pthread_join(th[i], NULL);
  free(th);
}

/* ---- output ----------------------------------------------------------------------------- */

static void print_target(const fleet_target *t, uint64_t epoch) {
  if (!t->tried) {
    fprintf(stderr, "  %s  not tried\n", t->addr);
  } else if (t->ok && t->current) {
    fprintf(stderr, "  %s  epoch %" PRIu64 " %s (CURRENT %" PRIu64 ")\n", t->addr, epoch,
            t->reused ? "reused (already held)" : "deployed", t->current);
  } else if (t->ok) {
    fprintf(stderr, "  %s  epoch %" PRIu64 " %s (no CURRENT yet)\n", t->addr, epoch,
            t->reused ? "reused (already held)" : "deployed");
  } else {
    fprintf(stderr, "  %s  FAILED at %s: %s%s: %s\n", t->addr, t->phase,
            t->st.reached_server ? "" : "unreachable: ", wk_grpc_status_name(t->st.code),
            t->st.message);
  }
}

static json_t *target_json(const fleet_target *t) {
  json_t *j = json_object();
  json_object_set_new(j, "worker", json_string(t->addr));
  json_object_set_new(j, "tried", json_boolean(t->tried));
  json_object_set_new(j, "ok", json_boolean(t->ok));
  if (t->tried && t->ok) {
    json_object_set_new(j, "reused", json_boolean(t->reused));
    json_object_set_new(j, "current_epoch", ctl_json_u64(t->current));
  }
  if (t->tried && !t->ok) {
    json_t *e = json_object();
    json_object_set_new(e, "phase", json_string(t->phase));
    json_object_set_new(e, "code", json_string(wk_grpc_status_name(t->st.code)));
    json_t *m = json_string(t->st.message);
    json_object_set_new(e, "message", m ? m : json_string(""));
    json_object_set_new(e, "unreachable", json_boolean(!t->st.reached_server));
    json_object_set_new(j, "error", e);
  }
  return j;
}

/* The failed and untried workers as "a, b" into buf. */
static void failed_list(const fleet_target *ts, size_t n, char *buf, size_t len) {
  size_t used = 0;
  buf[0] = '\0';
  for (size_t i = 0; i < n && used + 1 < len; i++) {
    if (ts[i].ok) continue;
    int w = snprintf(buf + used, len - used, "%s%s", used ? ", " : "", ts[i].addr);
    if (w > 0) used += (size_t)w < len - used ? (size_t)w : len - used - 1;
  }
}

/* The closing line on stderr: where CURRENT is, and how to retry. */
static void report_outcome(const char *function, uint64_t epoch, const fleet_target *ts, size_t n,
                           bool moved, bool rolling, bool switching) {
  char failed[2048];
  failed_list(ts, n, failed, sizeof failed);
  size_t done = 0;
  for (size_t i = 0; i < n; i++) done += ts[i].ok;
  const char *retry =
      "run the same command again (identical content keeps its epoch; workers "
      "that hold it answer reused)";
  if (moved) {
    fprintf(stderr, "workerctl deploy: CURRENT of %s is epoch %" PRIu64 " on every worker (%zu)\n",
            function, epoch, n);
  } else if (rolling || switching) {
    fprintf(stderr,
            "workerctl deploy: %s: CURRENT of %s is epoch %" PRIu64
            " on %zu of %zu workers, not on %s; %s\n",
            rolling ? "stopped at the first failure" : "every worker holds the epoch", function,
            epoch, done, n, failed, retry);
  } else {
    fprintf(stderr,
            "workerctl deploy: CURRENT of %s moved nowhere: failed on %s; fix them and %s\n",
            function, failed, retry);
  }
}

/* ---- the command ---------------------------------------------------------------------- */

typedef struct fleet_opts {
  unsigned parallel;
  bool rolling;
  const char *epoch_prefix;
  const char *endpoints;
} fleet_opts;

static int parse_fleet_opts(ctl_args *a, fleet_opts *o) {
  *o = (fleet_opts){.parallel = FLEET_DEFAULT_PARALLEL,
                    .rolling = a->set[F_ROLLING],
                    .epoch_prefix = FLEET_DEFAULT_EPOCH_PREFIX,
                    .endpoints = ctl_etcd_endpoints(a)};
  uint64_t p = 0;
  if (a->set[F_PARALLEL]) {
    if (!ctl_parse_u64(a->val[F_PARALLEL], 1, 256, &p))
      return ctl_usage_error(a, "--parallel takes a number in 1..256, got '%s'",
                             a->val[F_PARALLEL]);
    o->parallel = (unsigned)p;
  }
  if (a->set[F_EPOCH_PREFIX]) {
    o->epoch_prefix = a->val[F_EPOCH_PREFIX];
    size_t l = strlen(o->epoch_prefix);
    if (l == 0 || o->epoch_prefix[l - 1] != '/')
      return ctl_usage_error(a, "--epoch-prefix takes a key prefix ending in '/', got '%s'",
                             o->epoch_prefix);
  }
  if (a->set[F_ADDR] && (a->set[F_PREFIX] || a->set[F_DEPLOYMENT]))
    return ctl_usage_error(a,
                           "give --addr (these workers) or --prefix/--deployment (the workers "
                           "registered there), not both");
  if (!wk_code_store_valid_function_name(a->pos[0])) {
    return ctl_usage_error(a,
                           "invalid function name '%s': use 1..%u characters of "
                           "[A-Za-z0-9_.-], not starting with '.'",
                           a->pos[0], WK_CODE_STORE_NAME_MAX);
  }
  if (a->set[F_CODE_ROOT] || a->set[F_NO_CHECK])
    return ctl_usage_error(a,
                           "--fleet deploys through the workers (each checks the code and "
                           "publishes it in its own code root): drop --code-root/--no-check");
  return 0;
}

/* Reads and digests the tree; 0 or an exit code (reported). */
static int read_code(const char *dir, fleet_code *code) {
  char err[2048];
  *code = (fleet_code){0};
  if (wk_code_store_read_tree(dir, &code->files, &code->n, err, sizeof err) != 0) {
    fprintf(stderr, "workerctl deploy: %s\n", err);
    return CTL_EXIT_TASK_FAILED;
  }
  if (wk_code_store_digest_files(code->files, code->n, code->digest, err, sizeof err) != 0) {
    fprintf(stderr, "workerctl deploy: %s\n", err);
    return CTL_EXIT_TASK_FAILED;
  }
  return 0;
}

/* The packed DeployCodeRequest. */
static uint8_t *pack_deploy(const char *function, const char *entrypoint, uint64_t epoch,
                            const fleet_code *code, bool make_current, size_t *len) {
  Worker__V1__DeployCodeRequest req;
  worker__v1__deploy_code_request__init(&req);
  Worker__V1__CodeFile *files = wk_xcalloc(code->n ? code->n : 1, sizeof *files);
  Worker__V1__CodeFile **ptrs = wk_xcalloc(code->n ? code->n : 1, sizeof *ptrs);
  for (size_t i = 0; i < code->n; i++) {
    worker__v1__code_file__init(&files[i]);
    files[i].path = (char *)(uintptr_t)code->files[i].path;
    files[i].content.data = (uint8_t *)(uintptr_t)code->files[i].content;
    files[i].content.len = code->files[i].len;
    files[i].executable = code->files[i].executable;
    ptrs[i] = &files[i];
  }
  req.function = (char *)(uintptr_t)function;
  req.epoch = epoch;
  req.digest = (char *)(uintptr_t)code->digest;
  req.n_files = code->n;
  req.files = ptrs;
  req.make_current = make_current;
  req.entrypoint = (char *)(uintptr_t)(entrypoint ? entrypoint : "");
  *len = protobuf_c_message_get_packed_size(&req.base);
  uint8_t *buf = wk_xmalloc(*len ? *len : 1);
  protobuf_c_message_pack(&req.base, buf);
  free(ptrs);
  free(files);
  return buf;
}

static uint8_t *pack_set_current(const char *function, uint64_t epoch, const char *digest,
                                 size_t *len) {
  Worker__V1__SetCurrentEpochRequest req;
  worker__v1__set_current_epoch_request__init(&req);
  req.function = (char *)(uintptr_t)function;
  req.epoch = epoch;
  req.digest = (char *)(uintptr_t)digest;
  *len = protobuf_c_message_get_packed_size(&req.base);
  uint8_t *buf = wk_xmalloc(*len ? *len : 1);
  protobuf_c_message_pack(&req.base, buf);
  return buf;
}

/* Every worker at once (a bound at a time): DeployCode, then SetCurrentEpoch when all
 * hold the epoch. True when CURRENT moved everywhere. */
static bool deploy_all_then_switch(fleet_job *j, const fleet_opts *o, const char *function,
                                   uint64_t epoch, const fleet_code *code) {
  size_t len;
  uint8_t *req = pack_deploy(function, j->entrypoint, epoch, code, false, &len);
  j->req = req;
  j->req_len = len;
  j->method = M_DEPLOY;
  run_parallel(j, o->parallel);
  free(req);
  for (size_t i = 0; i < j->n; i++) print_target(&j->targets[i], epoch);
  for (size_t i = 0; i < j->n; i++) {
    if (!j->targets[i].ok) return false;
  }
  req = pack_set_current(function, epoch, code->digest, &len);
  j->req = req;
  j->req_len = len;
  j->method = M_SET_CURRENT;
  j->set_current = true;
  j->deadline_ms = j->a->deadline_ms;
  atomic_store(&j->next, 0);
  run_parallel(j, o->parallel);
  free(req);
  bool all = true;
  for (size_t i = 0; i < j->n; i++) {
    if (!j->targets[i].ok) {
      all = false;
      print_target(&j->targets[i], epoch);
    }
  }
  return all;
}

/* Worker by worker: DeployCode with make_current, stopping at the first failure. */
static bool deploy_rolling(fleet_job *j, const char *function, uint64_t epoch,
                           const fleet_code *code) {
  size_t len;
  uint8_t *req = pack_deploy(function, j->entrypoint, epoch, code, true, &len);
  j->req = req;
  j->req_len = len;
  j->method = M_DEPLOY;
  bool all = true;
  for (size_t i = 0; i < j->n && all; i++) {
    call_target(j, &j->targets[i]);
    print_target(&j->targets[i], epoch);
    all = j->targets[i].ok;
  }
  free(req);
  return all;
}

/* The selected workers: the --addr list, or the registrations; *floor gets the highest
 * epoch of `function` any registration lists. 0 or an exit code (reported). */
static int select_targets(ctl_args *a, wk_etcd *c, const char *function, fleet_target **ts,
                          size_t *n, uint64_t *floor) {
  wk_etcd_workers all = {0};
  /* the floor counts every registered worker, selected or not */
  int rc = ctl_registered_workers(a, c, false, &all);
  if (rc != 0) return rc;
  *floor = wk_etcd_workers_max_epoch(&all, function);
  wk_etcd_workers_free(&all);
  if (a->set[F_ADDR]) {
    targets_from_list(a->val[F_ADDR], ts, n);
    return 0;
  }
  rc = ctl_registered_workers(a, c, true, &all);
  if (rc != 0) return rc;
  for (size_t i = 0; i < all.n; i++) {
    if (all.items[i].valid && *all.items[i].address) add_target(ts, n, all.items[i].address);
  }
  wk_etcd_workers_free(&all);
  return 0;
}

static void print_json(const char *function, uint64_t epoch, const fleet_code *code, bool existed,
                       bool rolling, bool moved, const fleet_target *ts, size_t n) {
  json_t *j = json_object();
  json_object_set_new(j, "function", json_string(function));
  json_object_set_new(j, "epoch", ctl_json_u64(epoch));
  json_object_set_new(j, "sha256", json_string(code->digest));
  json_object_set_new(j, "epoch_existed", json_boolean(existed));
  json_object_set_new(j, "rolling", json_boolean(rolling));
  json_object_set_new(j, "current_moved", json_boolean(moved));
  json_t *arr = json_array();
  for (size_t i = 0; i < n; i++) json_array_append_new(arr, target_json(&ts[i]));
  json_object_set_new(j, "workers", arr);
  ctl_json_print(stdout, j);
}

int ctl_cmd_fleet_deploy(ctl_args *a) {
  fleet_opts o;
  int rc = parse_fleet_opts(a, &o);
  if (rc != 0) return rc;
  const char *function = a->pos[0];
  fleet_code code;
  rc = read_code(a->pos[1], &code);
  if (rc != 0) return rc;
  char err[512];
  wk_etcd *c = wk_etcd_new(o.endpoints, a->deadline_ms, err, sizeof err);
  if (!c) {
    wk_code_store_files_free(code.files, code.n);
    return ctl_usage_error(a, "--etcd: %s", err);
  }
  fleet_target *ts = NULL;
  size_t n = 0;
  uint64_t floor = 0, epoch = 0;
  bool existed = false;
  rc = select_targets(a, c, function, &ts, &n, &floor);
  if (rc == 0 && n == 0) {
    fprintf(stderr, "workerctl deploy: no worker to deploy to: none registered in etcd %s%s%s\n",
            o.endpoints, a->set[F_PREFIX] ? " under " : "",
            a->set[F_PREFIX] ? a->val[F_PREFIX] : "");
    rc = CTL_EXIT_UNREACHABLE;
  }
  if (rc == 0)
    rc = fleet_epoch(a, c, o.epoch_prefix, function, code.digest, floor, &epoch, &existed);
  wk_etcd_free(c);
  bool moved = false;
  if (rc == 0) {
    fprintf(stderr,
            "workerctl deploy: %s sha256:%s (%zu file%s) is fleet epoch %" PRIu64
            "%s; %s to %zu worker%s\n",
            function, code.digest, code.n, code.n == 1 ? "" : "s", epoch,
            existed ? " (this content had it already)" : " (new)",
            o.rolling ? "rolling" : "deploying", n, n == 1 ? "" : "s");
    fleet_job j = {
        .a = a,
        .targets = ts,
        .n = n,
        .entrypoint = a->set[F_ENTRYPOINT] ? a->val[F_ENTRYPOINT] : NULL,
        .deadline_ms = a->set[F_DEADLINE_MS] ? a->deadline_ms : FLEET_DEPLOY_DEADLINE_MS};
    atomic_init(&j.next, 0);
    moved = o.rolling ? deploy_rolling(&j, function, epoch, &code)
                      : deploy_all_then_switch(&j, &o, function, epoch, &code);
    report_outcome(function, epoch, ts, n, moved, o.rolling, j.set_current);
    if (a->json) {
      print_json(function, epoch, &code, existed, o.rolling, moved, ts, n);
    } else if (moved) {
      printf("%" PRIu64 "\n", epoch);
    }
    rc = moved ? CTL_EXIT_OK : CTL_EXIT_TASK_FAILED;
  }
  for (size_t i = 0; i < n; i++) free(ts[i].addr);
  free(ts);
  wk_code_store_files_free(code.files, code.n);
  return rc;
}

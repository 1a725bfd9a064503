/* workerctl_workers.c: `workerctl workers`, the workers registered in etcd (read with
 * wk_etcd from the registry prefixes; no worker is contacted). Without --prefix it reads
 * every deployment's prefix, so bundle workers are listed beside block workers. */
#define _GNU_SOURCE /* clock_gettime */

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "adapters/wk_etcd_registry.h"
#include "lib/wk_alloc.h"
#include "workerctl.h"

static int64_t now_unix_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static const char *state_name(const wk_etcd_worker *w) {
  if (!w->valid) return "invalid";
  if (w->draining) return "draining";
  return w->ready ? "ready" : "not-ready";
}

/* "850ms", "3.2s", "4m05s", "2h10m"; "-" when unknown. */
static void format_age(int64_t age_ms, bool known, char *buf, size_t len) {
  if (!known) {
    snprintf(buf, len, "-");
  } else if (age_ms < 0) {
    snprintf(buf, len, "in %" PRId64 "ms", -age_ms); /* clocks disagree */
  } else if (age_ms < 1000) {
    snprintf(buf, len, "%" PRId64 "ms", age_ms);
  } else if (age_ms < 60000) {
    snprintf(buf, len, "%" PRId64 ".%" PRId64 "s", age_ms / 1000, age_ms % 1000 / 100);
  } else if (age_ms < 3600000) {
    snprintf(buf, len, "%" PRId64 "m%02" PRId64 "s", age_ms / 60000, age_ms % 60000 / 1000);
  } else {
    snprintf(buf, len, "%" PRId64 "h%02" PRId64 "m", age_ms / 3600000, age_ms % 3600000 / 60000);
  }
}

static json_t *worker_json(const wk_etcd_worker *w, int64_t now) {
  json_t *j = json_object();
  json_object_set_new(j, "key", json_string(w->key));
  json_object_set_new(j, "address", json_string(w->address));
  json_object_set_new(j, "valid", json_boolean(w->valid));
  if (!w->valid) {
    json_object_set_new(j, "error", json_string(w->error));
  } else {
    json_object_set_new(j, "state", json_string(state_name(w)));
    json_object_set_new(j, "ready", json_boolean(w->ready));
    json_object_set_new(j, "draining", json_boolean(w->draining));
    json_object_set_new(j, "task_slots", json_integer(w->task_slots));
    json_object_set_new(j, "free_slots", json_integer(w->free_slots));
    json_object_set_new(j, "running_tasks", json_integer(w->running_tasks));
    json_object_set_new(j, "reserved_slots", json_integer(w->reserved_slots));
    json_object_set_new(j, "deployment", json_string(w->deployment));
    json_object_set_new(j, "service", json_string(w->service));
    json_object_set_new(j, "version", json_string(w->version));
    json_object_set_new(j, "updated_unix_ms", json_integer((json_int_t)w->updated_unix_ms));
    json_object_set_new(j, "updated_age_ms", json_integer((json_int_t)(now - w->updated_unix_ms)));
  }
  char lease[24];
  snprintf(lease, sizeof lease, "%" PRId64, w->lease); /* int64 beyond 2^53: a string */
  json_object_set_new(j, "lease", json_string(lease));
  return j;
}

/* The registry prefixes of the Profiles this repository builds (cmd/worker/profile.c,
 * cmd/bundle_worker/profile.c): what `workers` reads without --prefix. */
static const char *const deployment_prefixes[] = {CTL_DEFAULT_PREFIX, "/bundle-workers/"};

static void print_table(FILE *f, const wk_etcd_workers *ws, int64_t now) {
  int addr_w = (int)strlen("ADDRESS");
  int ver_w = (int)strlen("VERSION");
  int dep_w = (int)strlen("DEPLOYMENT");
  for (size_t i = 0; i < ws->n; i++) {
    int a = (int)strlen(ws->items[i].address);
    int v = (int)strlen(ws->items[i].version);
    int d = (int)strlen(ws->items[i].deployment);
    if (a > addr_w) addr_w = a;
    if (v > ver_w) ver_w = v;
    if (d > dep_w) dep_w = d;
  }
  fprintf(f, "%-*s  %-9s  %10s  %7s  %8s  %-*s  %-*s  %s\n", addr_w, "ADDRESS", "STATE",
          "FREE/SLOTS", "RUNNING", "RESERVED", dep_w, "DEPLOYMENT", ver_w, "VERSION", "UPDATED");
  for (size_t i = 0; i < ws->n; i++) {
    const wk_etcd_worker *w = &ws->items[i];
    if (!w->valid) {
      fprintf(f, "%-*s  %-9s  %s: %s\n", addr_w, w->address, state_name(w), w->key, w->error);
      continue;
    }
    char slots[32], age[32];
    snprintf(slots, sizeof slots, "%" PRIu32 "/%" PRIu32, w->free_slots, w->task_slots);
    format_age(now - w->updated_unix_ms, w->updated_unix_ms > 0, age, sizeof age);
    fprintf(f, "%-*s  %-9s  %10s  %7" PRIu32 "  %8" PRIu32 "  %-*s  %-*s  %s%s\n", addr_w,
            w->address, state_name(w), slots, w->running_tasks, w->reserved_slots, dep_w,
            *w->deployment ? w->deployment : "-", ver_w, *w->version ? w->version : "-", age,
            w->updated_unix_ms > 0 ? " ago" : "");
  }
}

const char *ctl_etcd_endpoints(const ctl_args *a) {
  if (a->set[F_ETCD]) return a->val[F_ETCD];
  const char *env = getenv("WORKERCTL_ETCD");
  return env && *env ? env : CTL_DEFAULT_ETCD;
}

const char *ctl_etcd_prefix(const ctl_args *a) {
  return a->set[F_PREFIX] ? a->val[F_PREFIX] : CTL_DEFAULT_PREFIX;
}

int ctl_report_etcd_error(const ctl_args *a, const char *endpoints, int rc, const char *msg) {
  bool unreachable = rc == WK_ETCD_E_UNREACHABLE;
  fprintf(stderr, "workerctl: %s etcd (%s); %s\n", unreachable ? "cannot reach" : "error from",
          endpoints, msg);
  if (a->json) {
    json_t *e = json_object();
    json_object_set_new(e, "code", json_string(wk_etcd_rc_name(rc)));
    json_t *m = json_string(msg);
    json_object_set_new(e, "message", m ? m : json_string(""));
    json_object_set_new(e, "unreachable", json_boolean(unreachable));
    json_t *j = json_object();
    json_object_set_new(j, "error", e);
    ctl_json_print(stdout, j);
  }
  return unreachable ? CTL_EXIT_UNREACHABLE : CTL_EXIT_STATUS;
}

/* Moves the entries of *from that --deployment keeps (all without it) to the end of
 * *to; *from is freed. */
static void take_workers(wk_etcd_workers *to, wk_etcd_workers *from, const char *deployment) {
  to->items = wk_xrealloc(to->items, (to->n + from->n + 1) * sizeof *to->items);
  for (size_t i = 0; i < from->n; i++) {
    wk_etcd_worker *w = &from->items[i];
    if (deployment && (!w->valid || strcmp(w->deployment, deployment) != 0)) {
      wk_etcd_worker_clear(w);
      continue;
    }
    to->items[to->n++] = *w;
  }
  free(from->items);
  *from = (wk_etcd_workers){0};
}

int ctl_registered_workers(ctl_args *a, wk_etcd *c, bool filtered, wk_etcd_workers *out) {
  const char *one_prefix = a->set[F_PREFIX] ? a->val[F_PREFIX] : NULL;
  const char *deployment = filtered && a->set[F_DEPLOYMENT] ? a->val[F_DEPLOYMENT] : NULL;
  size_t n_std = sizeof deployment_prefixes / sizeof deployment_prefixes[0];
  const char *prefixes[sizeof deployment_prefixes / sizeof deployment_prefixes[0] + 1];
  size_t n_prefixes = 0;
  if (one_prefix) prefixes[n_prefixes++] = one_prefix;
  for (size_t i = 0; i < n_std && (!one_prefix || !filtered); i++) {
    if (!one_prefix || strcmp(one_prefix, deployment_prefixes[i]) != 0)
      prefixes[n_prefixes++] = deployment_prefixes[i];
  }
  *out = (wk_etcd_workers){0};
  for (size_t p = 0; p < n_prefixes; p++) {
    wk_etcd_workers under;
    int rc = wk_etcd_list_workers(c, prefixes[p], &under);
    if (rc != WK_ETCD_OK) {
      rc = ctl_report_etcd_error(a, wk_etcd_endpoint(c), rc, wk_etcd_errmsg(c));
      wk_etcd_workers_free(out);
      return rc;
    }
    take_workers(out, &under, deployment);
  }
  return 0;
}

int ctl_cmd_workers(ctl_args *a) {
  const char *endpoints = ctl_etcd_endpoints(a);
  const char *one_prefix = a->set[F_PREFIX] ? a->val[F_PREFIX] : NULL;
  if (one_prefix && !*one_prefix)
    return ctl_usage_error(a, "--prefix is empty (it would list every etcd key)");
  const char *deployment = a->set[F_DEPLOYMENT] ? a->val[F_DEPLOYMENT] : NULL;
  const char *const *prefixes = one_prefix ? &one_prefix : deployment_prefixes;
  size_t n_prefixes = one_prefix ? 1 : sizeof deployment_prefixes / sizeof deployment_prefixes[0];
  char err[256];
  wk_etcd *c = wk_etcd_new(endpoints, a->deadline_ms, err, sizeof err);
  if (!c) return ctl_usage_error(a, "%s", err);

  wk_etcd_workers ws = {0};
  int rc = ctl_registered_workers(a, c, true, &ws);
  if (rc != 0) {
    wk_etcd_free(c);
    return rc;
  }
  int64_t now = now_unix_ms();
  if (ws.n == 0) {
    char where[512] = "";
    for (size_t p = 0; p < n_prefixes; p++) {
      size_t used = strlen(where);
      snprintf(where + used, sizeof where - used, "%s'%s'", p ? " or " : "", prefixes[p]);
    }
    fprintf(stderr, "workerctl: no %s%sworkers registered under %s at %s\n",
            deployment ? deployment : "", deployment ? " " : "", where, wk_etcd_endpoint(c));
  } else if (a->json) {
    for (size_t i = 0; i < ws.n; i++) ctl_json_print(stdout, worker_json(&ws.items[i], now));
  } else {
    print_table(stdout, &ws, now);
  }
  wk_etcd_workers_free(&ws);
  wk_etcd_free(c);
  return CTL_EXIT_OK;
}

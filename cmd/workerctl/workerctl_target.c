/* workerctl_target.c: which worker a command talks to. One rule for every command:
 *
 *   1. --addr HOST:PORT
 *   2. --etcd ENDPOINTS (or --prefix P) on the command line: the workers registered
 *      in etcd
 *   3. $WORKERCTL_ADDR
 *   4. $WORKERCTL_ETCD: the workers registered in etcd
 *   5. 127.0.0.1:7070
 *
 * A flag beats a variable, and an address beats etcd among flags and among variables.
 * What a command does with the registered workers (submit and slot pick one with a free
 * slot, task commands ask each until one knows the task, health asks them all) is in
 * workerctl_cmds.c; the README's workerctl section documents it for other clients. */
#include <stdlib.h>
#include <string.h>

#include "workerctl.h"

int ctl_resolve_target(ctl_args *a) {
  const char *env_addr = getenv("WORKERCTL_ADDR");
  const char *env_etcd = getenv("WORKERCTL_ETCD");
  bool has_env_addr = env_addr && *env_addr;
  bool has_env_etcd = env_etcd && *env_etcd;
  bool etcd_flags = a->set[F_ETCD] || a->set[F_PREFIX];
  /* workers, top and deploy --fleet read etcd (or a status address) themselves, by their
   * own rules */
  bool workers_cmd = a->cmd && (a->cmd->run == ctl_cmd_workers || a->cmd->run == ctl_cmd_top ||
                                (a->cmd->run == ctl_cmd_deploy && a->set[F_FLEET]));
  a->etcd_prefix = a->set[F_PREFIX] ? a->val[F_PREFIX] : CTL_DEFAULT_PREFIX;
  a->etcd_endpoints = a->set[F_ETCD] ? a->val[F_ETCD] : (has_env_etcd ? env_etcd : NULL);
  if (a->set[F_ADDR]) {
    if (etcd_flags && !workers_cmd) {
      return ctl_usage_error(a,
                             "give --addr (this worker) or --etcd/--prefix (the workers "
                             "registered in etcd), not both");
    }
    a->addr = a->val[F_ADDR];
    a->addr_source = "--addr";
  } else if (etcd_flags || (!has_env_addr && has_env_etcd)) {
    a->use_etcd = true;
    a->addr = NULL;
    a->addr_source = a->set[F_ETCD] ? "--etcd" : (etcd_flags ? "--prefix" : "$WORKERCTL_ETCD");
  } else if (has_env_addr) {
    a->addr = env_addr;
    a->addr_source = "$WORKERCTL_ADDR";
  } else {
    a->addr = CTL_DEFAULT_ADDR;
    a->addr_source = "the default; none of --addr, --etcd, $WORKERCTL_ADDR, $WORKERCTL_ETCD is set";
  }
  if (workers_cmd) return 0;
  if (a->addr && !*a->addr) return ctl_usage_error(a, "--addr is empty");
  if (a->use_etcd && !a->etcd_endpoints) {
    return ctl_usage_error(
        a, "--prefix needs the etcd endpoints: --etcd ENDPOINTS or $WORKERCTL_ETCD");
  }
  if (a->use_etcd && !*a->etcd_endpoints) return ctl_usage_error(a, "--etcd is empty");
  if (a->use_etcd && !*a->etcd_prefix) return ctl_usage_error(a, "--prefix is empty");
  return 0;
}

void ctl_set_discovered(ctl_args *a, const char *addr) {
  snprintf(a->addr_buf, sizeof a->addr_buf, "%s", addr);
  a->addr = a->addr_buf;
  a->discovered = true;
}

/* 0: ready for tasks, 1: another valid heartbeat (draining, not ready, full). */
static int lookup_class(const wk_etcd_worker *w) { return w->ready && !w->draining ? 0 : 1; }

int ctl_etcd_lookup_order(ctl_args *a, wk_etcd_workers *out) {
  *out = (wk_etcd_workers){NULL, 0};
  char err[512];
  wk_etcd *c = wk_etcd_new(a->etcd_endpoints, a->deadline_ms, err, sizeof err);
  if (!c) return ctl_usage_error(a, "--etcd: %s", err);
  wk_etcd_workers all;
  int rc = wk_etcd_list_workers(c, a->etcd_prefix, &all);
  if (rc != WK_ETCD_OK) {
    rc = ctl_report_etcd_error(a, a->etcd_endpoints, rc, wk_etcd_errmsg(c));
    wk_etcd_free(c);
    return rc;
  }
  wk_etcd_free(c);
  /* valid heartbeats with an address, the ready ones first, each class in key order */
  size_t n = 0;
  for (int cls = 0; cls < 2; cls++) {
    for (size_t i = 0; i < all.n; i++) {
      wk_etcd_worker *w = &all.items[i];
      if (!w->key || !w->valid || !*w->address || lookup_class(w) != cls) continue;
      wk_etcd_worker tmp = all.items[n];
      all.items[n] = *w;
      *w = tmp;
      n++;
    }
  }
  for (size_t i = n; i < all.n; i++) wk_etcd_worker_clear(&all.items[i]);
  all.n = n;
  *out = all;
  return 0;
}

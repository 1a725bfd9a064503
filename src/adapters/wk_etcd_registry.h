/* wk_etcd_registry.h: reading the registry of Workers in etcd, for `workerctl workers`
 * and `workerctl submit` without --addr. Each Worker's EtcdPublisher
 * (wk_etcd_publisher.h) keeps one leased key under the registry prefix
 * (WK_ETCD_DEFAULT_PREFIX, "/workers/") whose value is its heartbeat; this side lists
 * those keys through wk_etcd, parses the heartbeats, and ranks the Workers that can take
 * a task. The Worker itself never reads the registry (target wk_etcd_registry, linked
 * by workerctl). */
#ifndef WK_ETCD_REGISTRY_H
#define WK_ETCD_REGISTRY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "adapters/wk_etcd.h"

/* The value a Worker's EtcdPublisher puts under registry_prefix + address:
 *   {"address","task_slots","reserved_slots","running_tasks","free_slots","ready",
 *    "draining","deployment","service","version","updated_unix_ms"[,"status_addr"]} */
typedef struct wk_etcd_worker {
  char *key;     /* the etcd key, owned */
  char *address; /* owned; "" when absent */
  uint32_t task_slots, reserved_slots, running_tasks, free_slots;
  bool ready, draining;
  char *deployment, *service, *version; /* owned; "" when absent */
  char *status_addr;                    /* owned: its status page's host:port; "" = none */
  int64_t updated_unix_ms;
  int64_t lease;
  bool valid; /* false: the value is not a worker heartbeat (error says why) */
  char error[128];
} wk_etcd_worker;

typedef struct wk_etcd_workers {
  wk_etcd_worker *items; /* owned; free with wk_etcd_workers_free */
  size_t n;
} wk_etcd_workers;

/** Frees every entry of *ws and its array, and zeroes it; NULL is a no-op. */
void wk_etcd_workers_free(wk_etcd_workers *ws);

/** Parses one registry entry (key and JSON value) into *out (free its strings with
 * wk_etcd_worker_clear). Never fails: an unparseable value gives valid = false and
 * the reason in out->error; a missing "address" is taken from the key after `prefix`. */
void wk_etcd_worker_parse(const char *prefix, const char *key, const char *value, size_t value_len,
                          int64_t lease, wk_etcd_worker *out);
/** Frees the strings of *w and zeroes it; NULL is a no-op. */
void wk_etcd_worker_clear(wk_etcd_worker *w);

/** Lists every worker registered under `prefix` (in key order, invalid values
 * included with valid = false). *out is reset first. Errors as for wk_etcd_range_prefix
 * (the message in wk_etcd_errmsg(c)). */
int wk_etcd_list_workers(wk_etcd *c, const char *prefix, wk_etcd_workers *out);

/** True when w can take a task: a valid heartbeat, ready, not draining, free_slots
 * > 0, and (when max_age_ms > 0) updated no longer than max_age_ms before now. */
bool wk_etcd_worker_eligible(const wk_etcd_worker *w, int64_t now_unix_ms, int64_t max_age_ms);

/** Keeps only the eligible workers of *ws and orders them best first: most free
 * slots, then fewest running tasks, then (ties) by a hash of the address mixed with
 * tie_seed (0: by address), so many clients with different seeds spread over equals.
 * Returns how many remain (ws->n). Ineligible entries are freed. */
size_t wk_etcd_workers_rank(wk_etcd_workers *ws, int64_t now_unix_ms, int64_t max_age_ms,
                            uint64_t tie_seed);

/** For `workerctl submit` without --addr: lists the workers under `prefix` at
 * `endpoints` and leaves in *out only the candidates, best first (as
 * wk_etcd_workers_rank with max_age_ms and tie_seed). Returns WK_ETCD_OK (out->n may
 * be 0: nothing registered, or no worker with a free slot) or a negative wk_etcd_rc
 * with a message in err. */
int wk_etcd_find_candidates(const char *endpoints, const char *prefix, int64_t timeout_ms,
                            int64_t max_age_ms, uint64_t tie_seed, wk_etcd_workers *out, char *err,
                            size_t len);

#endif

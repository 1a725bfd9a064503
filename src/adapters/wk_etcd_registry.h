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

/* One function of a record's "code": the epochs the worker holds, highest first. */
typedef struct wk_etcd_code_epoch {
  uint64_t epoch;
  char digest[65]; /* sha256 hex, "" when the worker has none recorded */
} wk_etcd_code_epoch;

typedef struct wk_etcd_code_fn {
  char *function; /* owned */
  uint64_t current;
  wk_etcd_code_epoch *epochs; /* owned, n_epochs long */
  size_t n_epochs;
} wk_etcd_code_fn;

/* The value a Worker's EtcdPublisher puts under registry_prefix + address:
 *   {"address","task_slots","reserved_slots","running_tasks","free_slots","ready",
 *    "draining","deployment","service","version","updated_unix_ms"[,"status_addr"]
 *    [,"code":{"<fn>":{"current":N,"epochs":[{"epoch":N,"digest":"hex"},...]}},
 *     "code_truncated":bool]} */
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
  /* The code it holds: has_code false when the record has no (well-formed) "code";
   * code_truncated when the worker left functions or epochs out for size. */
  bool has_code, code_truncated;
  wk_etcd_code_fn *code; /* owned, n_code long */
  size_t n_code;
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

/* ---- the code a worker holds (its record's "code") ----------------------------------- */

typedef enum wk_etcd_holds {
  WK_ETCD_HOLDS_NO = 0,      /* its record lists the function's epochs, not this one */
  WK_ETCD_HOLDS_YES = 1,     /* its record lists the epoch */
  WK_ETCD_HOLDS_UNKNOWN = 2, /* no "code" in the record, or code_truncated without it */
} wk_etcd_holds;

/** The record's entry for `function`, or NULL when it lists none. */
const wk_etcd_code_fn *wk_etcd_worker_code(const wk_etcd_worker *w, const char *function);

/** Whether w's record says it holds `epoch` of `function` (epoch > 0). */
wk_etcd_holds wk_etcd_worker_holds(const wk_etcd_worker *w, const char *function, uint64_t epoch);

/** For a task that pins `epoch` of `function`: reorders ws (already ranked) so the
 * workers that list the epoch come first and those whose record cannot tell
 * (WK_ETCD_HOLDS_UNKNOWN) after them, each group in its previous order; workers whose
 * record lists the function without that epoch are freed. epoch 0 (CURRENT) keeps
 * everyone. Returns how many remain (ws->n); *unknown (may be NULL) gets how many of
 * them are last resorts. */
size_t wk_etcd_workers_order_for_epoch(wk_etcd_workers *ws, const char *function, uint64_t epoch,
                                       size_t *unknown);

/** The highest epoch of `function` any valid record in ws lists (0: none). */
uint64_t wk_etcd_workers_max_epoch(const wk_etcd_workers *ws, const char *function);

#endif

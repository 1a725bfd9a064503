/* wk_etcd_publisher.h: the EtcdPublisher. Registers the Worker in etcd under
 * key_prefix + advertise_addr, on a lease kept alive, with the latest heartbeat as a
 * JSON value:
 *
 *   {"address","task_slots","reserved_slots","running_tasks","free_slots","ready",
 *    "draining","deployment","service","version","updated_unix_ms"[,"status_addr"]
 *    [,"code","code_truncated"]}
 *
 * ("status_addr": where its status page and /status are served, when they are. "code":
 * the functions, epochs and digests the worker holds, wk_etcd_publisher_set_code.)
 *
 * It runs its own thread; the API is thread-safe and never waits for etcd (update()
 * takes a mutex that the thread holds only to copy a few fields). The Worker keeps
 * serving whatever etcd does.
 *
 * Behaviour:
 *  - Nothing is put before the first update(); the lease is granted at once.
 *  - A changed heartbeat is put within coalesce_ms (a burst of updates → one put);
 *    a heartbeat that turns `draining` on is put at once (no coalescing, and one
 *    attempt even during a backoff), so clients see a drain as early as possible.
 *    The value is re-put at least every refresh_interval_ms (with a fresh
 *    updated_unix_ms), so a key deleted by someone else comes back at the next refresh.
 *  - The lease (lease_ttl_s) gets a keepalive every TTL/3. A keepalive answer without a
 *    TTL, or a put refused with "lease not found", means the lease is gone: a new one is
 *    granted and the value put again at once.
 *  - etcd down, hung or failing: retries with exponential backoff and jitter (from
 *    backoff_initial_ms doubling up to backoff_max_ms), trying the endpoints in turn;
 *    every request is bounded by request_timeout_ms. When etcd answers again the lease
 *    is kept alive (or re-granted if gone) and the value re-put.
 *  - Logs (wk_log, JSON lines) once per state change: etcd_registered,
 *    etcd_unreachable (first failure after being registered or at start),
 *    etcd_lease_lost, etcd_reregistered, etcd_deregistered.
 */
#ifndef WK_ETCD_PUBLISHER_H
#define WK_ETCD_PUBLISHER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define WK_ETCD_PUB_DEFAULT_TTL_S 10
#define WK_ETCD_PUB_DEFAULT_REFRESH_MS 3000
#define WK_ETCD_PUB_DEFAULT_COALESCE_MS 20
#define WK_ETCD_PUB_DEFAULT_BACKOFF_INITIAL_MS 100
#define WK_ETCD_PUB_DEFAULT_BACKOFF_MAX_MS 5000
#define WK_ETCD_PUB_DEREGISTER_BUDGET_MS 2000

typedef struct wk_etcd_publisher_config {
  const char *endpoints;       /* comma-separated http://host:port; required */
  const char *key_prefix;      /* registry prefix; NULL → "/workers/" */
  const char *advertise_addr;  /* host:port coordinators dial; required, no spaces */
  int64_t lease_ttl_s;         /* 0 → 10; 1..3600 */
  int64_t refresh_interval_ms; /* value re-put; 0 → 3000; 10..3600000 */
  int64_t request_timeout_ms;  /* per etcd request; 0 → TTL/4 clamped to 200..2000 */
  int64_t coalesce_ms;         /* delay after a change before the put; 0 → 20; ≤ 1000 */
  int64_t backoff_initial_ms;  /* 0 → 100 */
  int64_t backoff_max_ms;      /* 0 → 5000; ≥ backoff_initial_ms */
  /* static labels copied into the value (NULL → "") */
  const char *deployment;
  const char *service;
  const char *version;
  const char *status_addr; /* host:port of the status page; NULL or "" = not in the value */
  /* Called on the publisher's thread after every successful put (NULL = none): must be
   * quick and thread-safe (e.g. uv_async_send to wake the caller's loop). */
  void (*on_published)(void *ud);
  void *on_published_ud;
} wk_etcd_publisher_config;

/* The dynamic part of the value; the Worker maps wk_core_derive_heartbeat() into it. */
typedef struct wk_etcd_heartbeat {
  uint32_t task_slots;
  uint32_t reserved; /* ALLOCATED slots → "reserved_slots" */
  uint32_t running;  /* RUNNING slots → "running_tasks" */
  uint32_t free;     /* → "free_slots" */
  bool ready;
  bool draining;
} wk_etcd_heartbeat;

typedef struct wk_etcd_publisher_stats {
  uint64_t puts_ok, puts_failed;
  uint64_t keepalives_ok, keepalives_failed;
  uint64_t lease_grants, lease_grants_failed;
  uint64_t leases_lost;     /* leases found gone (keepalive or put said so) */
  uint64_t updates;         /* wk_etcd_publisher_update calls */
  bool registered;          /* the last put succeeded and nothing has failed since */
  int64_t lease_id;         /* current lease, 0 when none */
  int64_t granted_ttl_s;    /* as granted by etcd */
  int64_t last_put_unix_ms; /* wall clock of the last successful put, 0 if none */
  uint64_t put_gen;         /* the update generation (see update()) etcd last acknowledged */
  int64_t put_revision;     /* etcd's revision of that put (its mod_revision), 0 if none */
  char last_error[512];     /* the last failure ("" if none yet) */
  char endpoint[256];       /* the endpoint last used */
} wk_etcd_publisher_stats;

typedef struct wk_etcd_publisher wk_etcd_publisher;

/** Validates cfg, copies it and starts the publisher thread; no etcd I/O happens in
 * the caller. Returns NULL with one line in err on a bad config (missing endpoints
 * or advertise address, a value out of range) or when the thread cannot start. */
wk_etcd_publisher *wk_etcd_publisher_start(const wk_etcd_publisher_config *cfg, char *err,
                                           size_t len);

/** Hands over the latest heartbeat (copied). Coalesced: an unchanged heartbeat costs
 * nothing; a changed one is put within coalesce_ms (at once when it turns draining
 * on), the newest winning. Never blocks on etcd. Returns the generation of the
 * heartbeat now held (bumped by every change): once stats' put_gen reaches it, etcd
 * has acknowledged this heartbeat or a newer one. */
uint64_t wk_etcd_publisher_update(wk_etcd_publisher *p, const wk_etcd_heartbeat *hb);

/** Sets the value's "code" field to `code_json` (a JSON object's text, copied; NULL
 * leaves "code" and "code_truncated" out) and "code_truncated" to `truncated`. A change
 * is put within coalesce_ms, like a changed heartbeat; the same text again costs nothing.
 * Thread-safe, never blocks on etcd. */
void wk_etcd_publisher_set_code(wk_etcd_publisher *p, const char *code_json, bool truncated);

/** Copies the counters and the last error. */
void wk_etcd_publisher_stats_get(wk_etcd_publisher *p, wk_etcd_publisher_stats *out);

/** The etcd key this publisher writes (prefix + advertise address); owned by p. */
const char *wk_etcd_publisher_key(const wk_etcd_publisher *p);

/** Stops the thread (an etcd request in flight is abandoned within ~50 ms) and frees
 * p. With deregister, first removes the key (only if still on our lease) and revokes
 * the lease, within WK_ETCD_PUB_DEREGISTER_BUDGET_MS in total; without it the key
 * stays until the lease expires (at most the TTL). Returns 0, or -1 when deregister
 * was asked and did not complete (etcd unreachable: the lease then expires on its
 * own). NULL p is a no-op returning 0. No other call on p may be in progress or come
 * after (p is freed). */
int wk_etcd_publisher_stop(wk_etcd_publisher *p, bool deregister);

#endif

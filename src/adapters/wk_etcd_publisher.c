/* wk_etcd_publisher.c: the EtcdPublisher (see wk_etcd_publisher.h).
 *
 * One thread owns the etcd client and the lease; the caller's threads only touch the
 * shared block under `mu` (the latest heartbeat, its generation, the counters). The
 * thread never holds `mu` during I/O, so update() and stats_get() never wait for etcd.
 *
 * The thread's loop: compute the next due time (lease grant, keepalive, coalesced
 * put, refresh, or the end of a backoff), sleep on the condition variable until then
 * (update() and stop() wake it), run one step of I/O, record the outcome. */
#include "adapters/wk_etcd_publisher.h"

#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "adapters/wk_etcd.h"
#include "lib/wk_alloc.h"
#include "lib/wk_err.h"
#include "lib/wk_log.h"

typedef enum pub_state {
  PUB_STARTING,    /* not registered yet, no failure yet */
  PUB_REGISTERED,  /* the last put succeeded */
  PUB_UNREACHABLE, /* failing since the last success (or since start) */
  PUB_LEASE_LOST,  /* the lease was found gone; re-registering */
} pub_state;

struct wk_etcd_publisher {
  /* configuration (owned copies, read-only after start) */
  char *key, *address, *deployment, *service, *version;
  char *status_addr; /* "" = none */
  int64_t ttl_s, refresh_ms, timeout_ms, coalesce_ms, backoff_initial_ms, backoff_max_ms;
  void (*on_published)(void *ud);
  void *on_published_ud;

  pthread_t thread;
  pthread_mutex_t mu;
  pthread_cond_t cv; /* on CLOCK_MONOTONIC */
  atomic_bool stopping;

  /* shared, under mu */
  wk_etcd_heartbeat hb;
  bool have_hb;
  char *code;          /* the "code" field's JSON (wk_etcd_publisher_set_code); NULL = none */
  bool code_truncated; /* → "code_truncated" */
  uint64_t hb_gen;     /* bumped by every update that changes hb */
  int64_t dirty_since; /* mono ms of the first change not yet put; 0: none */
  bool urgent;         /* draining turned on: put at once, even during a backoff */
  wk_etcd_publisher_stats stats;

  /* the thread's own (and stop()'s after the join) */
  wk_etcd *etcd;
  int64_t lease, granted_ttl_s;
  int64_t last_keepalive_ms, last_put_ms; /* mono */
  uint64_t put_gen;                       /* hb_gen of the last successful put */
  bool need_put;                          /* put as soon as possible (new lease, recovery) */
  int64_t backoff_ms, retry_at_ms;
  pub_state state;
  bool ever_registered;
  uint64_t rng;
};

/* ---- small helpers ---------------------------------------------------------------- */

static int64_t wall_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static char *dup_or_empty(const char *s) {
  char *d = wk_xstrdup(s ? s : "");
  return d;
}

static uint64_t next_rand(wk_etcd_publisher *p) { /* xorshift64* */
  uint64_t x = p->rng;
  x ^= x >> 12;
  x ^= x << 25;
  x ^= x >> 27;
  p->rng = x;
  return x * 2685821657736338717ull;
}

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

static int64_t keepalive_interval_ms(const wk_etcd_publisher *p) {
  int64_t ttl = p->granted_ttl_s > 0 ? p->granted_ttl_s : p->ttl_s;
  int64_t iv = ttl * 1000 / 3;
  return iv < 100 ? 100 : iv;
}

#define STAT_INC(p, field)          \
  do {                              \
    pthread_mutex_lock(&(p)->mu);   \
    (p)->stats.field++;             \
    pthread_mutex_unlock(&(p)->mu); \
  } while (0)

static void record_error(wk_etcd_publisher *p, const char *msg) {
  pthread_mutex_lock(&p->mu);
  snprintf(p->stats.last_error, sizeof p->stats.last_error, "%s", msg);
  p->stats.registered = false;
  pthread_mutex_unlock(&p->mu);
}

static void log_event(wk_etcd_publisher *p, wk_log_level level, const char *event,
                      const char *msg) {
  json_t *f = json_pack("{s:s,s:s,s:I,s:s}", "msg", msg, "key", p->key, "lease",
                        (json_int_t)p->lease, "endpoint", wk_etcd_endpoint(p->etcd));
  wk_log_json(level, event, f);
}

/* ---- one step of I/O ------------------------------------------------------------------ */

static int grant(wk_etcd_publisher *p) {
  int64_t id = 0, ttl = 0;
  int rc = wk_etcd_lease_grant(p->etcd, p->ttl_s, &id, &ttl);
  if (rc != WK_ETCD_OK) {
    if (rc != WK_ETCD_E_ABORTED) STAT_INC(p, lease_grants_failed);
    return rc;
  }
  p->lease = id;
  p->granted_ttl_s = ttl;
  p->last_keepalive_ms = wk_etcd_mono_ms();
  p->need_put = true;
  pthread_mutex_lock(&p->mu);
  p->stats.lease_grants++;
  p->stats.lease_id = id;
  p->stats.granted_ttl_s = ttl;
  pthread_mutex_unlock(&p->mu);
  return WK_ETCD_OK;
}

static void lease_gone(wk_etcd_publisher *p) {
  char msg[600];
  snprintf(msg, sizeof msg, "%s; granting a new lease and putting the key again",
           wk_etcd_errmsg(p->etcd));
  log_event(p, WK_LOG_WARN, "etcd_lease_lost", msg);
  p->lease = 0;
  p->granted_ttl_s = 0;
  p->need_put = true;
  if (p->state == PUB_REGISTERED || p->state == PUB_STARTING) p->state = PUB_LEASE_LOST;
  pthread_mutex_lock(&p->mu);
  p->stats.leases_lost++;
  p->stats.lease_id = 0;
  p->stats.registered = false; /* and why, as for every other way of losing the key */
  snprintf(p->stats.last_error, sizeof p->stats.last_error, "lease lost: %.480s",
           wk_etcd_errmsg(p->etcd));
  pthread_mutex_unlock(&p->mu);
}

static char *build_value(wk_etcd_publisher *p, const wk_etcd_heartbeat *hb) {
  json_t *v = json_pack("{s:s,s:I,s:I,s:I,s:I,s:b,s:b,s:s,s:s,s:s,s:I}", "address", p->address,
                        "task_slots", (json_int_t)hb->task_slots, "reserved_slots",
                        (json_int_t)hb->reserved, "running_tasks", (json_int_t)hb->running,
                        "free_slots", (json_int_t)hb->free, "ready", (int)hb->ready, "draining",
                        (int)hb->draining, "deployment", p->deployment, "service", p->service,
                        "version", p->version, "updated_unix_ms", (json_int_t)wall_ms());
  if (!v) abort();
  if (p->status_addr[0]) json_object_set_new(v, "status_addr", json_string(p->status_addr));
  pthread_mutex_lock(&p->mu); /* the code is set from another thread */
  json_t *code = p->code ? json_loads(p->code, 0, NULL) : NULL;
  bool truncated = p->code_truncated;
  pthread_mutex_unlock(&p->mu);
  if (code) {
    json_object_set_new(v, "code", code);
    json_object_set_new(v, "code_truncated", json_boolean(truncated));
  }
  char *text = json_dumps(v, JSON_COMPACT | JSON_PRESERVE_ORDER);
  json_decref(v);
  if (!text) abort();
  return text;
}

static int put_value(wk_etcd_publisher *p, const wk_etcd_heartbeat *hb, int64_t *revision) {
  char *value = build_value(p, hb);
  int rc = wk_etcd_put_rev(p->etcd, p->key, value, strlen(value), p->lease, revision);
  free(value);
  if (rc == WK_ETCD_OK) {
    STAT_INC(p, puts_ok);
  } else if (rc != WK_ETCD_E_ABORTED) {
    STAT_INC(p, puts_failed);
  }
  return rc;
}

/* Grants a lease if needed, sends a keepalive if due, puts the value if due (at once
 * when urgent). Returns WK_ETCD_OK or the first failure. */
static int step(wk_etcd_publisher *p, int64_t now, const wk_etcd_heartbeat *hb, uint64_t gen,
                int64_t dirty_since, bool urgent) {
  int rc;
  if (p->lease == 0) {
    rc = grant(p);
    if (rc != WK_ETCD_OK) return rc;
  } else if (now >= p->last_keepalive_ms + keepalive_interval_ms(p)) {
    rc = wk_etcd_lease_keepalive(p->etcd, p->lease, NULL);
    if (rc == WK_ETCD_E_LEASE_NOT_FOUND) {
      STAT_INC(p, keepalives_failed);
      lease_gone(p);
      rc = grant(p);
      if (rc != WK_ETCD_OK) return rc;
    } else if (rc != WK_ETCD_OK) {
      if (rc != WK_ETCD_E_ABORTED) STAT_INC(p, keepalives_failed);
      return rc;
    } else {
      STAT_INC(p, keepalives_ok);
      p->last_keepalive_ms = now;
    }
  }
  if (!hb) return WK_ETCD_OK; /* nothing to publish before the first update */
  bool dirty = gen != p->put_gen && (urgent || now >= dirty_since + p->coalesce_ms);
  bool refresh = now >= p->last_put_ms + p->refresh_ms;
  if (!p->need_put && !dirty && !refresh) return WK_ETCD_OK;
  int64_t revision = 0;
  rc = put_value(p, hb, &revision);
  if (rc == WK_ETCD_E_LEASE_NOT_FOUND) {
    lease_gone(p);
    rc = grant(p);
    if (rc != WK_ETCD_OK) return rc;
    rc = put_value(p, hb, &revision);
  }
  if (rc != WK_ETCD_OK) return rc;
  p->put_gen = gen;
  p->last_put_ms = now;
  p->need_put = false;
  const char *event = NULL;
  wk_log_level level = WK_LOG_INFO;
  if (!p->ever_registered) {
    event = "etcd_registered";
  } else if (p->state != PUB_REGISTERED) {
    event = "etcd_reregistered";
  }
  if (event) {
    char msg[160];
    snprintf(msg, sizeof msg, "registered in etcd with a %" PRId64 " s lease", p->granted_ttl_s);
    log_event(p, level, event, msg);
  }
  p->ever_registered = true;
  p->state = PUB_REGISTERED;
  pthread_mutex_lock(&p->mu);
  p->stats.registered = true;
  p->stats.last_put_unix_ms = wall_ms();
  p->stats.put_gen = gen;
  p->stats.put_revision = revision;
  p->dirty_since = p->hb_gen == gen ? 0 : wk_etcd_mono_ms(); /* changed during the put */
  pthread_mutex_unlock(&p->mu);
  if (p->on_published) p->on_published(p->on_published_ud);
  return WK_ETCD_OK;
}

static void on_failure(wk_etcd_publisher *p, int rc) {
  const char *msg = wk_etcd_errmsg(p->etcd);
  record_error(p, msg);
  p->need_put = true; /* whatever happened, re-put once etcd answers again */
  if (p->state != PUB_UNREACHABLE) {
    char line[700];
    snprintf(line, sizeof line, "etcd request failed (%s): %s; retrying with backoff",
             wk_etcd_rc_name(rc), msg);
    log_event(p, WK_LOG_WARN, "etcd_unreachable", line);
    p->state = PUB_UNREACHABLE;
  }
  int64_t b = p->backoff_ms;
  int64_t half = b / 2;
  int64_t delay = half + (int64_t)(next_rand(p) % (uint64_t)(b - half + 1));
  p->retry_at_ms = wk_etcd_mono_ms() + delay;
  p->backoff_ms = min64(b * 2, p->backoff_max_ms);
}

/* ---- the thread --------------------------------------------------------------------------- */

/* Next time the thread has something to do (mono ms). Under mu. */
static int64_t next_due(const wk_etcd_publisher *p, int64_t now) {
  if (p->urgent) return now;
  if (p->retry_at_ms > now) return p->retry_at_ms;
  if (p->lease == 0) return now;
  int64_t due = p->last_keepalive_ms + keepalive_interval_ms(p);
  if (p->have_hb) {
    if (p->need_put) return now;
    if (p->hb_gen != p->put_gen) due = min64(due, p->dirty_since + p->coalesce_ms);
    due = min64(due, p->last_put_ms + p->refresh_ms);
  }
  return due;
}

static void wait_until(wk_etcd_publisher *p, int64_t due_ms) {
  struct timespec ts = {.tv_sec = (time_t)(due_ms / 1000),
                        .tv_nsec = (long)(due_ms % 1000) * 1000000L};
  pthread_cond_timedwait(&p->cv, &p->mu, &ts);
}

static void *run(void *arg) {
  wk_etcd_publisher *p = arg;
  pthread_mutex_lock(&p->mu);
  while (!atomic_load(&p->stopping)) {
    int64_t now = wk_etcd_mono_ms();
    int64_t due = next_due(p, now);
    if (due > now) {
      wait_until(p, due);
      continue;
    }
    wk_etcd_heartbeat hb = p->hb;
    bool have = p->have_hb;
    uint64_t gen = p->hb_gen;
    int64_t dirty_since = p->dirty_since;
    bool urgent = p->urgent;
    p->urgent = false;
    pthread_mutex_unlock(&p->mu);

    int rc = step(p, now, have ? &hb : NULL, gen, dirty_since, urgent);
    if (rc == WK_ETCD_OK) {
      p->backoff_ms = p->backoff_initial_ms;
      p->retry_at_ms = 0;
    } else if (rc != WK_ETCD_E_ABORTED) {
      on_failure(p, rc);
    }
    pthread_mutex_lock(&p->mu);
    snprintf(p->stats.endpoint, sizeof p->stats.endpoint, "%s", wk_etcd_endpoint(p->etcd));
  }
  pthread_mutex_unlock(&p->mu);
  return NULL;
}

/* ---- API ------------------------------------------------------------------------------- */

static bool in_range(int64_t v, int64_t lo, int64_t hi) { return v >= lo && v <= hi; }

wk_etcd_publisher *wk_etcd_publisher_start(const wk_etcd_publisher_config *cfg, char *err,
                                           size_t len) {
  if (!cfg || !cfg->advertise_addr || !*cfg->advertise_addr) {
    wk_errf(err, len, "etcd publisher: no advertise address");
    return NULL;
  }
  for (const char *s = cfg->advertise_addr; *s; s++) {
    if ((unsigned char)*s <= ' ' || *s == 0x7f) {
      wk_errf(err, len, "etcd publisher: advertise address '%s' has a space or control character",
              cfg->advertise_addr);
      return NULL;
    }
  }
  int64_t ttl = cfg->lease_ttl_s ? cfg->lease_ttl_s : WK_ETCD_PUB_DEFAULT_TTL_S;
  int64_t refresh =
      cfg->refresh_interval_ms ? cfg->refresh_interval_ms : WK_ETCD_PUB_DEFAULT_REFRESH_MS;
  int64_t timeout = cfg->request_timeout_ms;
  if (timeout == 0) {
    timeout = ttl * 1000 / 4;
    if (timeout < 200) timeout = 200;
    if (timeout > 2000) timeout = 2000;
  }
  int64_t coalesce = cfg->coalesce_ms ? cfg->coalesce_ms : WK_ETCD_PUB_DEFAULT_COALESCE_MS;
  int64_t b0 =
      cfg->backoff_initial_ms ? cfg->backoff_initial_ms : WK_ETCD_PUB_DEFAULT_BACKOFF_INITIAL_MS;
  int64_t b1 = cfg->backoff_max_ms ? cfg->backoff_max_ms : WK_ETCD_PUB_DEFAULT_BACKOFF_MAX_MS;
  const char *bad = NULL;
  if (!in_range(ttl, 1, 3600)) bad = "lease TTL must be 1..3600 s";
  if (!in_range(refresh, 10, 3600000)) bad = "refresh interval must be 10..3600000 ms";
  if (!in_range(timeout, 1, 60000)) bad = "request timeout must be 1..60000 ms";
  if (!in_range(coalesce, 1, 1000)) bad = "coalesce delay must be 1..1000 ms";
  if (!in_range(b0, 1, 600000) || !in_range(b1, b0, 600000)) {
    bad = "backoff must be 1 <= initial <= max <= 600000 ms";
  }
  if (bad) {
    wk_errf(err, len, "etcd publisher: %s", bad);
    return NULL;
  }
  wk_etcd *etcd = wk_etcd_new(cfg->endpoints, timeout, err, len);
  if (!etcd) return NULL;

  wk_etcd_publisher *p = wk_xcalloc(1, sizeof *p);
  const char *prefix = cfg->key_prefix ? cfg->key_prefix : WK_ETCD_DEFAULT_PREFIX;
  size_t klen = strlen(prefix) + strlen(cfg->advertise_addr) + 1;
  p->key = wk_xmalloc(klen);
  snprintf(p->key, klen, "%s%s", prefix, cfg->advertise_addr);
  p->address = dup_or_empty(cfg->advertise_addr);
  p->deployment = dup_or_empty(cfg->deployment);
  p->service = dup_or_empty(cfg->service);
  p->version = dup_or_empty(cfg->version);
  p->status_addr = dup_or_empty(cfg->status_addr);
  p->ttl_s = ttl;
  p->refresh_ms = refresh;
  p->timeout_ms = timeout;
  p->coalesce_ms = coalesce;
  p->backoff_initial_ms = b0;
  p->backoff_max_ms = b1;
  p->backoff_ms = b0;
  p->on_published = cfg->on_published;
  p->on_published_ud = cfg->on_published_ud;
  p->etcd = etcd;
  p->state = PUB_STARTING;
  atomic_init(&p->stopping, false);
  wk_etcd_set_abort(etcd, &p->stopping);
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  p->rng = ((uint64_t)ts.tv_nsec << 20) ^ (uint64_t)ts.tv_sec ^ ((uint64_t)getpid() << 40) ^
           (uint64_t)(uintptr_t)p;
  if (p->rng == 0) p->rng = 0x9e3779b97f4a7c15ull;
  snprintf(p->stats.endpoint, sizeof p->stats.endpoint, "%s", wk_etcd_endpoint(etcd));

  pthread_mutex_init(&p->mu, NULL);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&p->cv, &ca);
  pthread_condattr_destroy(&ca);
  /* The thread takes no signals: they go to the Worker's own threads. */
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  int e = pthread_create(&p->thread, NULL, run, p);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  if (e == 0) pthread_setname_np(p->thread, "wk-etcd");
  if (e != 0) {
    wk_errf(err, len, "etcd publisher: cannot start its thread: %s", strerror(e));
    pthread_cond_destroy(&p->cv);
    pthread_mutex_destroy(&p->mu);
    wk_etcd_free(etcd);
    free(p->key);
    free(p->address);
    free(p->deployment);
    free(p->service);
    free(p->version);
    free(p->status_addr);
    free(p);
    return NULL;
  }
  return p;
}

static bool hb_equal(const wk_etcd_heartbeat *a, const wk_etcd_heartbeat *b) {
  return a->task_slots == b->task_slots && a->reserved == b->reserved && a->running == b->running &&
         a->free == b->free && a->ready == b->ready && a->draining == b->draining;
}

uint64_t wk_etcd_publisher_update(wk_etcd_publisher *p, const wk_etcd_heartbeat *hb) {
  pthread_mutex_lock(&p->mu);
  p->stats.updates++;
  if (!p->have_hb || !hb_equal(&p->hb, hb)) {
    if (hb->draining && !(p->have_hb && p->hb.draining)) p->urgent = true;
    p->hb = *hb;
    p->have_hb = true;
    p->hb_gen++;
    if (p->dirty_since == 0) p->dirty_since = wk_etcd_mono_ms();
    pthread_cond_signal(&p->cv);
  }
  uint64_t gen = p->hb_gen;
  pthread_mutex_unlock(&p->mu);
  return gen;
}

void wk_etcd_publisher_set_code(wk_etcd_publisher *p, const char *code_json, bool truncated) {
  pthread_mutex_lock(&p->mu);
  bool same = (p->code == NULL) == (code_json == NULL) &&
              (!code_json || strcmp(p->code, code_json) == 0) && p->code_truncated == truncated;
  if (!same) {
    free(p->code);
    p->code = code_json ? wk_xstrdup(code_json) : NULL;
    p->code_truncated = truncated;
    if (p->have_hb) { /* put within coalesce_ms, as a changed heartbeat is */
      p->hb_gen++;
      if (p->dirty_since == 0) p->dirty_since = wk_etcd_mono_ms();
      pthread_cond_signal(&p->cv);
    }
  }
  pthread_mutex_unlock(&p->mu);
}

void wk_etcd_publisher_stats_get(wk_etcd_publisher *p, wk_etcd_publisher_stats *out) {
  pthread_mutex_lock(&p->mu);
  *out = p->stats;
  pthread_mutex_unlock(&p->mu);
}

const char *wk_etcd_publisher_key(const wk_etcd_publisher *p) { return p->key; }

static int deregister(wk_etcd_publisher *p) {
  if (p->lease == 0) return 0; /* nothing of ours is in etcd (or it has already expired) */
  int64_t start = wk_etcd_mono_ms();
  wk_etcd_set_deadline(p->etcd, start + WK_ETCD_PUB_DEREGISTER_BUDGET_MS);
  int64_t deleted = 0;
  int rc = wk_etcd_delete_if_lease(p->etcd, p->key, p->lease, &deleted);
  char msg[700];
  if (rc != WK_ETCD_OK) {
    snprintf(msg, sizeof msg, "deleting the key failed: %s", wk_etcd_errmsg(p->etcd));
    log_event(p, WK_LOG_WARN, "etcd_deregister_failed", msg);
  }
  int rc2 = wk_etcd_lease_revoke(p->etcd, p->lease);
  if (rc2 == WK_ETCD_E_LEASE_NOT_FOUND) rc2 = WK_ETCD_OK; /* already gone: fine */
  if (rc2 != WK_ETCD_OK) {
    snprintf(msg, sizeof msg,
             "revoking the lease failed: %s; the key goes when the lease expires (%" PRId64 " s)",
             wk_etcd_errmsg(p->etcd), p->granted_ttl_s);
    log_event(p, WK_LOG_WARN, "etcd_deregister_failed", msg);
    return -1;
  }
  snprintf(msg, sizeof msg, "deregistered in %" PRId64 " ms", wk_etcd_mono_ms() - start);
  log_event(p, WK_LOG_INFO, "etcd_deregistered", msg);
  p->lease = 0;
  return 0;
}

int wk_etcd_publisher_stop(wk_etcd_publisher *p, bool deregister_key) {
  if (!p) return 0;
  pthread_mutex_lock(&p->mu);
  atomic_store(&p->stopping, true);
  pthread_cond_signal(&p->cv);
  pthread_mutex_unlock(&p->mu);
  pthread_join(p->thread, NULL);

  int rc = 0;
  if (deregister_key) {
    wk_etcd_set_abort(p->etcd, NULL);
    rc = deregister(p);
  }
  wk_etcd_free(p->etcd);
  pthread_cond_destroy(&p->cv);
  pthread_mutex_destroy(&p->mu);
  free(p->key);
  free(p->address);
  free(p->deployment);
  free(p->service);
  free(p->version);
  free(p->status_addr);
  free(p->code);
  free(p);
  return rc;
}

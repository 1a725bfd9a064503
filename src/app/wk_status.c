/* wk_status.c: the worker's live status document (see wk_status.h). */
#include "app/wk_status.h"

#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/wk_types.h"
#include "lib/wk_alloc.h"
#include "lib/wk_assert.h"

/* One terminal task, as the page lists it. */
typedef struct recent_task {
  char id[WK_TASK_ID_MAX + 1];
  char function[WK_FUNCTION_NAME_MAX + 1];
  wk_task_state state;
  wk_failure_code failure_code;
  int64_t finished_unix_ms;
  int64_t duration_ms;
} recent_task;

/* One second of history. Negative figures: nothing to measure (no task ended, no
 * executor ran). */
typedef struct sample {
  int64_t t_unix_ms;
  double tasks_per_s, calls_per_s;
  double p50_ms, p99_ms;
  double utilisation; /* busy executors / ready executors, averaged over the second */
} sample;

struct wk_status {
  uv_loop_t *loop;
  uv_async_t wake;
  wk_status_sources_fn sources;
  void *ud;
  /* shared with wk_status_json's threads, under mu */
  pthread_mutex_t mu;
  pthread_cond_t cv;
  char *doc;
  size_t doc_len;
  int64_t doc_built_ms; /* CLOCK_MONOTONIC */
  uint64_t asked, built;
  bool open;
  /* the loop's own */
  int64_t started_unix_ms;
  recent_task recent[WK_STATUS_RECENT];
  size_t recent_next, recent_n;
  sample history[WK_STATUS_HISTORY];
  size_t history_next, history_n;
  uint64_t tasks_total, tasks_failed;
  /* the second being sampled */
  int64_t bucket_start_ms; /* loop ms; 0 = not started */
  uint64_t bucket_tasks;
  uint64_t bucket_results_at_start; /* the pool's RESULT count then */
  double util_sum;
  uint32_t util_n;
  int64_t latencies[WK_STATUS_LATENCIES];
  uint64_t latencies_seen;
  uint64_t rng;
};

static int64_t clock_ms(clockid_t id) {
  struct timespec ts;
  clock_gettime(id, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static char *dup_text(const char *s, size_t len) {
  char *c = wk_xmalloc(len + 1);
  memcpy(c, s, len);
  c[len] = '\0';
  return c;
}

/* ---- the document ------------------------------------------------------------------ */

static json_t *str_or_null(const char *s) { return s ? json_string(s) : json_null(); }

static json_t *worker_json(const wk_status *st, const wk_status_sources *src, int64_t now_unix) {
  return json_pack("{s:s,s:s,s:s,s:s,s:s,s:s,s:s,s:s,s:I,s:I,s:I,s:o,s:b}", "state", src->state,
                   "deployment", src->deployment, "service", src->service, "version", src->version,
                   "listen_addr", src->listen_addr, "advertise_addr", src->advertise_addr,
                   "status_addr", src->status_addr, "executor_isolation", src->isolation, "pid",
                   (json_int_t)getpid(), "started_unix_ms", (json_int_t)st->started_unix_ms,
                   "uptime_ms", (json_int_t)(now_unix - st->started_unix_ms), "admission_paused",
                   str_or_null(src->admission_paused), "executors_unavailable",
                   (int)src->executors_unavailable);
}

static json_t *etcd_json(const wk_status_sources *src) {
  if (!src->publisher) return json_pack("{s:b,s:s}", "enabled", 0, "state", "stand-alone");
  wk_etcd_publisher_stats e;
  wk_etcd_publisher_stats_get(src->publisher, &e);
  char lease[32];
  snprintf(lease, sizeof lease, "%llx", (unsigned long long)e.lease_id);
  const char *state = e.registered ? "registered"
                      : e.lease_id ? "lease held, not registered"
                                   : "not registered";
  return json_pack("{s:b,s:s,s:b,s:s,s:I,s:I,s:I,s:I,s:s,s:s,s:s}", "enabled", 1, "state", state,
                   "registered", (int)e.registered, "lease_id", e.lease_id ? lease : "",
                   "lease_ttl_s", (json_int_t)e.granted_ttl_s, "last_put_unix_ms",
                   (json_int_t)e.last_put_unix_ms, "leases_lost", (json_int_t)e.leases_lost,
                   "puts_failed", (json_int_t)e.puts_failed, "last_error", e.last_error, "endpoint",
                   e.endpoint, "endpoints", src->etcd_endpoints);
}

static json_t *slots_json(wk_orch *orch) {
  wk_heartbeat hb = wk_orch_heartbeat(orch);
  return json_pack("{s:I,s:I,s:I,s:I,s:b,s:b}", "total", (json_int_t)hb.task_slots, "free",
                   (json_int_t)hb.free, "allocated", (json_int_t)hb.reserved, "running",
                   (json_int_t)hb.running, "ready", (int)hb.ready, "draining", (int)hb.draining);
}

static json_t *executors_json(const wk_status_sources *src, int64_t now_ms) {
  wk_pool_executor_view *v = wk_xcalloc(WK_STATUS_MAX_EXECS, sizeof *v);
  size_t n = wk_pool_list_executors(src->pool, v, WK_STATUS_MAX_EXECS);
  json_t *list = json_array();
  uint32_t busy = 0;
  for (size_t i = 0; i < n; i++) {
    if (strcmp(v[i].state, "busy") == 0) busy++;
    json_array_append_new(
        list,
        json_pack("{s:I,s:i,s:s,s:s,s:I,s:I,s:I,s:I}", "id", (json_int_t)v[i].id, "pid", v[i].pid,
                  "state", v[i].state, "function", v[i].function, "calls_done",
                  (json_int_t)v[i].calls_done, "inflight", (json_int_t)v[i].inflight, "rss_kb",
                  (json_int_t)v[i].rss_kb, "age_ms", (json_int_t)(now_ms - v[i].spawned_ms)));
  }
  free(v);
  return json_pack(
      "{s:I,s:I,s:I,s:I,s:I,s:o}", "running", (json_int_t)wk_pool_running_executors(src->pool),
      "ready", (json_int_t)wk_pool_ready_executors(src->pool), "busy", (json_int_t)busy, "min",
      (json_int_t)src->executors_min, "max", (json_int_t)src->executors_max, "list", list);
}

static json_t *tasks_json(wk_orch *orch, int64_t now_ms) {
  wk_orch_task_view *v = wk_xcalloc(WK_STATUS_MAX_TASKS, sizeof *v);
  size_t n = wk_orch_list_tasks(orch, v, WK_STATUS_MAX_TASKS);
  json_t *list = json_array();
  for (size_t i = 0; i < n; i++) {
    json_array_append_new(
        list,
        json_pack("{s:s,s:s,s:I,s:s,s:s,s:I,s:I,s:I,s:I}", "id", v[i].id.bytes, "function",
                  v[i].function, "epoch", (json_int_t)v[i].code_epoch, "phase",
                  wk_phase_name(v[i].phase), "state", wk_task_state_name(v[i].state), "calls_done",
                  (json_int_t)v[i].calls_done, "calls_total", (json_int_t)v[i].calls_total,
                  "age_ms", (json_int_t)(now_ms - v[i].accepted_ms), "slot_id",
                  (json_int_t)v[i].slot_id));
  }
  free(v);
  uint32_t live = wk_orch_live_tasks(orch);
  return json_pack("{s:I,s:b,s:o}", "live", (json_int_t)live, "truncated", (int)(live > n), "list",
                   list);
}

static json_t *recent_one(const recent_task *t) {
  return json_pack("{s:s,s:s,s:s,s:s,s:I,s:I}", "id", t->id, "function", t->function, "state",
                   wk_task_state_name(t->state), "failure_code",
                   wk_failure_code_name(t->failure_code), "finished_unix_ms",
                   (json_int_t)t->finished_unix_ms, "duration_ms", (json_int_t)t->duration_ms);
}

/* The recent terminal tasks, failures (anything but SUCCEEDED) first, newest first. */
static json_t *recent_json(const wk_status *st) {
  json_t *list = json_array();
  for (int pass = 0; pass < 2; pass++) {
    for (size_t k = 1; k <= st->recent_n; k++) {
      const recent_task *t =
          &st->recent[(st->recent_next + WK_STATUS_RECENT - k) % WK_STATUS_RECENT];
      bool failed = t->state != WK_TASK_SUCCEEDED;
      if (failed == (pass == 0)) json_array_append_new(list, recent_one(t));
    }
  }
  return list;
}

static json_t *figure(double v) { return v < 0 ? json_null() : json_real(v); }

static json_t *history_json(const wk_status *st) {
  json_t *t = json_array(), *tasks = json_array(), *calls = json_array(), *p50 = json_array(),
         *p99 = json_array(), *util = json_array();
  for (size_t k = st->history_n; k >= 1; k--) {
    const sample *s = &st->history[(st->history_next + WK_STATUS_HISTORY - k) % WK_STATUS_HISTORY];
    json_array_append_new(t, json_integer(s->t_unix_ms));
    json_array_append_new(tasks, json_real(s->tasks_per_s));
    json_array_append_new(calls, json_real(s->calls_per_s));
    json_array_append_new(p50, figure(s->p50_ms));
    json_array_append_new(p99, figure(s->p99_ms));
    json_array_append_new(util, figure(s->utilisation));
  }
  return json_pack("{s:i,s:i,s:o,s:o,s:o,s:o,s:o,s:o}", "interval_ms", 1000, "capacity",
                   (int)WK_STATUS_HISTORY, "t_unix_ms", t, "tasks_per_s", tasks, "calls_per_s",
                   calls, "p50_ms", p50, "p99_ms", p99, "utilisation", util);
}

static json_t *build(wk_status *st) {
  wk_status_sources src = {0};
  st->sources(st->ud, &src);
  int64_t now_unix = clock_ms(CLOCK_REALTIME);
  uv_update_time(st->loop);
  int64_t now_ms = (int64_t)uv_now(st->loop);
  json_t *doc = json_object();
  json_object_set_new(doc, "now_unix_ms", json_integer(now_unix));
  json_object_set_new(doc, "worker", worker_json(st, &src, now_unix));
  json_object_set_new(doc, "etcd", etcd_json(&src));
  json_t *code = src.code ? json_loads(src.code, 0, NULL) : NULL;
  if (code) { /* what the etcd record's "code" says (wk_code_registry.h) */
    json_object_set_new(doc, "code", code);
    json_object_set_new(doc, "code_truncated", json_boolean(src.code_truncated));
  }
  if (src.orch) {
    json_object_set_new(doc, "slots", slots_json(src.orch));
    json_object_set_new(doc, "tasks", tasks_json(src.orch, now_ms));
  }
  if (src.pool) json_object_set_new(doc, "executors", executors_json(&src, now_ms));
  json_object_set_new(doc, "recent", recent_json(st));
  json_object_set_new(doc, "totals",
                      json_pack("{s:I,s:I}", "tasks_finished", (json_int_t)st->tasks_total,
                                "tasks_failed", (json_int_t)st->tasks_failed));
  json_object_set_new(doc, "history", history_json(st));
  return doc;
}

/* Builds the document and publishes it to the waiting threads (loop thread). */
static void rebuild(wk_status *st) {
  pthread_mutex_lock(&st->mu);
  uint64_t target = st->asked;
  pthread_mutex_unlock(&st->mu);
  json_t *doc = build(st);
  char *text = json_dumps(doc, JSON_COMPACT | JSON_PRESERVE_ORDER);
  json_decref(doc);
  if (!text) abort();
  pthread_mutex_lock(&st->mu);
  free(st->doc);
  st->doc = text;
  st->doc_len = strlen(text);
  st->doc_built_ms = clock_ms(CLOCK_MONOTONIC);
  if (st->built < target) st->built = target;
  pthread_cond_broadcast(&st->cv);
  pthread_mutex_unlock(&st->mu);
}

static void on_wake(uv_async_t *a) { rebuild(a->data); }

/* The document as built, or, when the loop did not answer in time, the same document
 * opening with "stale_ms": how old it is (the page says the loop is stuck). Under mu. */
static char *copy_doc(const wk_status *st, bool stale, size_t *len) {
  if (!st->doc) return NULL;
  if (!stale || st->doc_len < 2 || st->doc[0] != '{') {
    if (len) *len = st->doc_len;
    return dup_text(st->doc, st->doc_len);
  }
  char head[48];
  int n = snprintf(head, sizeof head, "{\"stale_ms\":%lld,",
                   (long long)(clock_ms(CLOCK_MONOTONIC) - st->doc_built_ms));
  size_t total = (size_t)n + st->doc_len - 1;
  char *out = wk_xmalloc(total + 1);
  memcpy(out, head, (size_t)n);
  memcpy(out + n, st->doc + 1, st->doc_len - 1);
  out[total] = '\0';
  if (len) *len = total;
  return out;
}

char *wk_status_json(void *ud, size_t *len) {
  wk_status *st = ud;
  pthread_mutex_lock(&st->mu);
  bool stale = false;
  if (st->open && (!st->doc || clock_ms(CLOCK_MONOTONIC) - st->doc_built_ms > WK_STATUS_FRESH_MS)) {
    uint64_t target = ++st->asked;
    uv_async_send(&st->wake);
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    until.tv_sec += WK_STATUS_WAIT_MS / 1000;
    until.tv_nsec += (long)(WK_STATUS_WAIT_MS % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L) {
      until.tv_sec++;
      until.tv_nsec -= 1000000000L;
    }
    while (st->open && st->built < target) {
      if (pthread_cond_timedwait(&st->cv, &st->mu, &until) != 0) break; /* the last one */
    }
    stale = st->open && st->built < target;
  }
  char *out = copy_doc(st, stale, len);
  pthread_mutex_unlock(&st->mu);
  return out;
}

/* ---- life ---------------------------------------------------------------------------- */

wk_status *wk_status_new(uv_loop_t *loop, wk_status_sources_fn sources, void *ud) {
  wk_status *st = wk_xcalloc(1, sizeof *st);
  st->loop = loop;
  st->sources = sources;
  st->ud = ud;
  pthread_mutex_init(&st->mu, NULL);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&st->cv, &ca);
  pthread_condattr_destroy(&ca);
  uv_async_init(loop, &st->wake, on_wake);
  st->wake.data = st;
  st->open = true;
  st->started_unix_ms = clock_ms(CLOCK_REALTIME);
  st->rng = (uint64_t)st->started_unix_ms | 1u;
  return st;
}

void wk_status_close(wk_status *st) {
  if (!st || !st->open) return;
  rebuild(st); /* the last word: "stopping" */
  pthread_mutex_lock(&st->mu);
  st->open = false;
  pthread_cond_broadcast(&st->cv);
  pthread_mutex_unlock(&st->mu);
  uv_close((uv_handle_t *)&st->wake, NULL);
}

void wk_status_free(wk_status *st) {
  if (!st) return;
  WK_ASSERT(!st->open); /* closed, so no thread can wake the loop through it */
  pthread_cond_destroy(&st->cv);
  pthread_mutex_destroy(&st->mu);
  free(st->doc);
  free(st);
}

/* ---- what happens ------------------------------------------------------------------- */

static uint64_t next_rand(wk_status *st) {
  st->rng ^= st->rng << 13;
  st->rng ^= st->rng >> 7;
  st->rng ^= st->rng << 17;
  return st->rng;
}

void wk_status_on_task_ended(void *ud, const wk_task_result *r, const char *function) {
  wk_status *st = ud;
  const wk_task_statistic *s = &r->statistic;
  int64_t duration = s->finished_ms >= s->accepted_ms ? s->finished_ms - s->accepted_ms : 0;
  recent_task *t = &st->recent[st->recent_next];
  st->recent_next = (st->recent_next + 1) % WK_STATUS_RECENT;
  if (st->recent_n < WK_STATUS_RECENT) st->recent_n++;
  size_t id_len = r->task_id_len < WK_TASK_ID_MAX ? r->task_id_len : WK_TASK_ID_MAX;
  memcpy(t->id, r->task_id, id_len);
  t->id[id_len] = '\0';
  snprintf(t->function, sizeof t->function, "%s", function ? function : "");
  t->state = r->state;
  t->failure_code = r->failure_code;
  t->finished_unix_ms = clock_ms(CLOCK_REALTIME);
  t->duration_ms = duration;
  st->tasks_total++;
  if (r->state != WK_TASK_SUCCEEDED) st->tasks_failed++;
  st->bucket_tasks++;
  /* a uniform sample of this second's latencies (reservoir) */
  uint64_t seen = st->latencies_seen++;
  if (seen < WK_STATUS_LATENCIES) st->latencies[seen] = duration;
  else {
    uint64_t j = next_rand(st) % (seen + 1);
    if (j < WK_STATUS_LATENCIES) st->latencies[j] = duration;
  }
}

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

/* The q-quantile (nearest rank) of the sorted v[0..n). */
static double quantile(const int64_t *v, size_t n, double q) {
  size_t rank = (size_t)(q * (double)n + 0.999999);
  if (rank < 1) rank = 1;
  if (rank > n) rank = n;
  return (double)v[rank - 1];
}

void wk_status_tick(wk_status *st, int64_t now_ms, int64_t wall_offset_ms, const wk_pool *pool) {
  uint64_t results = pool ? wk_pool_get_stats(pool).results : 0;
  if (st->bucket_start_ms == 0) {
    st->bucket_start_ms = now_ms;
    st->bucket_results_at_start = results;
  }
  uint32_t ready = pool ? wk_pool_ready_executors(pool) : 0;
  if (ready) {
    st->util_sum += (double)wk_pool_busy_executors(pool) / (double)ready;
    st->util_n++;
  }
  int64_t elapsed = now_ms - st->bucket_start_ms;
  if (elapsed < 1000) return;
  double secs = (double)elapsed / 1000.0;
  sample *s = &st->history[st->history_next];
  st->history_next = (st->history_next + 1) % WK_STATUS_HISTORY;
  if (st->history_n < WK_STATUS_HISTORY) st->history_n++;
  s->t_unix_ms = now_ms + wall_offset_ms;
  s->tasks_per_s = (double)st->bucket_tasks / secs;
  s->calls_per_s = (double)(results - st->bucket_results_at_start) / secs;
  size_t n =
      st->latencies_seen < WK_STATUS_LATENCIES ? (size_t)st->latencies_seen : WK_STATUS_LATENCIES;
  if (n) {
    qsort(st->latencies, n, sizeof st->latencies[0], cmp_i64);
    s->p50_ms = quantile(st->latencies, n, 0.50);
    s->p99_ms = quantile(st->latencies, n, 0.99);
  } else {
    s->p50_ms = s->p99_ms = -1;
  }
  s->utilisation = st->util_n ? st->util_sum / st->util_n : -1;
  st->bucket_start_ms = now_ms;
  st->bucket_results_at_start = results;
  st->bucket_tasks = 0;
  st->latencies_seen = 0;
  st->util_sum = 0;
  st->util_n = 0;
}

/* wk_shadow.c: the shadow forwarder (see wk_shadow.h).
 *
 * State, all under `mu`:
 *   head/tail  the queue of copied requests, oldest first
 *   reserved   requests admitted by wk_shadow_offer whose copy is still being made
 *              outside the mutex; they count against the capacity already
 *   bytes      bytes admitted (queued + reserved)
 * The forwarding thread waits on `work_cv` for a request or for stop; wk_shadow_wait_idle
 * waits on `idle_cv`, signalled whenever the forwarder finishes a request and finds
 * nothing else admitted. */
#define _GNU_SOURCE /* pthread_setname_np */

#include "adapters/wk_shadow.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "adapters/wk_grpc_client.h"
#include "lib/wk_err.h"
#include "lib/wk_log.h"
#include "lib/wk_rng.h"

typedef struct shadow_item {
  struct shadow_item *next;
  size_t len;
  uint8_t data[];
} shadow_item;

struct wk_shadow {
  pthread_mutex_t mu;
  pthread_cond_t work_cv;
  pthread_cond_t idle_cv;
  pthread_t thread;
  wk_grpc_client *client;
  char *target;
  uint64_t threshold; /* a 53-bit draw below this is sampled in; 2^53 = always */
  uint32_t capacity;
  size_t max_bytes;
  int64_t deadline_ms;
  wk_rng rng;
  shadow_item *head;
  shadow_item *tail;
  uint32_t count;    /* queued */
  uint32_t reserved; /* admitted, copy in progress */
  size_t bytes;      /* of queued + reserved */
  bool in_flight;
  bool stopping;
  bool failing; /* the last answer was a failure (for the log transitions) */
  wk_shadow_stats stats;
};

/* ---- helpers ------------------------------------------------------------------- */

struct timespec wk_shadow_deadline_in(int64_t ms) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  ts.tv_sec += (time_t)(ms / 1000);
  ts.tv_nsec += (long)((ms % 1000) * 1000000);
  if (ts.tv_nsec >= 1000000000L) {
    ts.tv_sec += 1;
    ts.tv_nsec -= 1000000000L;
  }
  return ts;
}

static bool idle_locked(const wk_shadow *s) {
  return s->count == 0 && s->reserved == 0 && !s->in_flight;
}

/* Logs with a snapshot of the counters; called without the mutex (stderr may block). */
static void log_counters(wk_log_level level, const char *event, const char *target,
                         const wk_shadow_stats *st, bool with_error, uint64_t discarded) {
  json_t *f = json_object();
  if (f == NULL) return;
  json_object_set_new(f, "target", json_string(target));
  if (with_error) json_object_set_new(f, "error", json_string(st->last_error));
  json_object_set_new(f, "offered", json_integer((json_int_t)st->offered));
  json_object_set_new(f, "sampled_out", json_integer((json_int_t)st->sampled_out));
  json_object_set_new(f, "dropped", json_integer((json_int_t)st->dropped));
  json_object_set_new(f, "mirrored", json_integer((json_int_t)st->mirrored));
  json_object_set_new(f, "failed", json_integer((json_int_t)st->failed));
  if (discarded > 0) json_object_set_new(f, "discarded", json_integer((json_int_t)discarded));
  wk_log_json(level, event, f);
}

/* ---- the forwarding thread --------------------------------------------------------- */

/* Sends one request; called without the mutex. Returns the status in *st. */
static void forward(wk_shadow *s, const shadow_item *it, wk_grpc_status *st) {
  static const wk_grpc_md md[1] = {{WK_SHADOW_METADATA_KEY, WK_SHADOW_METADATA_VALUE}};
  wk_grpc_buf resp = {0};
  (void)wk_grpc_client_unary(s->client, WK_SHADOW_SUBMIT_METHOD, it->len > 0 ? it->data : NULL,
                             it->len, md, 1, s->deadline_ms, &resp, st);
  wk_grpc_buf_free(&resp);
}

typedef enum transition { NO_CHANGE, NOW_FAILING, RECOVERED } transition;

/* Counts one answer (under the mutex); says whether the failing state changed. */
static transition record(wk_shadow *s, const wk_grpc_status *st) {
  if (st->code == GRPC_STATUS_OK) {
    s->stats.mirrored++;
    transition t = s->failing ? RECOVERED : NO_CHANGE;
    s->failing = false;
    return t;
  }
  s->stats.failed++;
  if (!st->reached_server) s->stats.unreachable++;
  s->stats.last_error_code = (int)st->code;
  snprintf(s->stats.last_error, sizeof s->stats.last_error, "%s: %.200s",
           wk_grpc_status_name(st->code), st->message);
  transition t = s->failing ? NO_CHANGE : NOW_FAILING;
  s->failing = true;
  return t;
}

static void *run(void *arg) {
  wk_shadow *s = arg;
  (void)pthread_setname_np(pthread_self(), "wk-shadow");
  pthread_mutex_lock(&s->mu);
  for (;;) {
    while (!s->stopping && s->head == NULL) pthread_cond_wait(&s->work_cv, &s->mu);
    if (s->stopping) break;
    shadow_item *it = s->head;
    s->head = it->next;
    if (s->head == NULL) s->tail = NULL;
    s->count--;
    s->bytes -= it->len;
    s->in_flight = true;
    pthread_mutex_unlock(&s->mu);

    wk_grpc_status st;
    forward(s, it, &st);
    free(it);

    pthread_mutex_lock(&s->mu);
    s->in_flight = false;
    transition t = record(s, &st);
    if (idle_locked(s)) pthread_cond_broadcast(&s->idle_cv);
    if (t != NO_CHANGE) {
      wk_shadow_stats snap = s->stats;
      pthread_mutex_unlock(&s->mu);
      if (t == NOW_FAILING) {
        log_counters(WK_LOG_WARN, "shadow_failing", s->target, &snap, true, 0);
      } else {
        log_counters(WK_LOG_INFO, "shadow_recovered", s->target, &snap, false, 0);
      }
      pthread_mutex_lock(&s->mu);
    }
  }
  /* Stopping: discard what is left (offers no longer come, so reserved is 0). */
  uint64_t discarded = 0;
  while (s->head != NULL) {
    shadow_item *it = s->head;
    s->head = it->next;
    s->bytes -= it->len;
    free(it);
    discarded++;
  }
  s->tail = NULL;
  s->count = 0;
  pthread_cond_broadcast(&s->idle_cv);
  wk_shadow_stats snap = s->stats;
  pthread_mutex_unlock(&s->mu);
  log_counters(WK_LOG_INFO, "shadow_stopped", s->target, &snap, false, discarded);
  return NULL;
}

/* ---- API ----------------------------------------------------------------------------- */

static wk_shadow *fail(char *err, size_t len, const char *msg) {
  wk_errf(err, len, "shadow forwarder: %s", msg);
  return NULL;
}

wk_shadow *wk_shadow_start(const wk_shadow_config *cfg, char *err, size_t len) {
  if (err != NULL && len > 0) err[0] = '\0';
  if (cfg == NULL) return fail(err, len, "no configuration");
  if (cfg->target == NULL || cfg->target[0] == '\0') {
    return fail(err, len, "a target address (host:port) is required");
  }
  double rate = cfg->sample_rate;
  if (isnan(rate) || rate < 0.0 || rate > 1.0) {
    char m[128];
    wk_errf(m, sizeof m, "sample_rate must be between 0.0 and 1.0, got %g", rate);
    return fail(err, len, m);
  }
  if (cfg->queue_capacity > WK_SHADOW_MAX_QUEUE_CAPACITY) {
    char m[128];
    wk_errf(m, sizeof m, "queue_capacity must be at most %u, got %u", WK_SHADOW_MAX_QUEUE_CAPACITY,
            cfg->queue_capacity);
    return fail(err, len, m);
  }
  if (cfg->deadline_ms > WK_SHADOW_MAX_DEADLINE_MS) {
    char m[128];
    wk_errf(m, sizeof m, "deadline_ms must be at most %u, got %u", WK_SHADOW_MAX_DEADLINE_MS,
            cfg->deadline_ms);
    return fail(err, len, m);
  }

  wk_shadow *s = calloc(1, sizeof *s);
  if (s == NULL) return fail(err, len, "out of memory");
  s->target = strdup(cfg->target);
  if (s->target == NULL) {
    free(s);
    return fail(err, len, "out of memory");
  }
  /* rate * 2^53 is exact for every double in [0, 1]: a 53-bit draw below it has
   * probability rate; 0 never passes, 1 always does. */
  s->threshold = (uint64_t)ldexp(rate, 53);
  s->capacity = cfg->queue_capacity ? cfg->queue_capacity : WK_SHADOW_DEFAULT_QUEUE_CAPACITY;
  s->max_bytes = cfg->max_queued_bytes ? cfg->max_queued_bytes : WK_SHADOW_DEFAULT_MAX_QUEUED_BYTES;
  s->deadline_ms = (int64_t)(cfg->deadline_ms ? cfg->deadline_ms : WK_SHADOW_DEFAULT_DEADLINE_MS);
  wk_rng_seed(&s->rng, cfg->seed);

  char cerr[256];
  wk_grpc_client_options opts = {.max_recv_message_bytes = 1u << 20, .user_agent = "wk-shadow"};
  if (wk_grpc_client_open(s->target, &opts, &s->client, cerr, sizeof cerr) != 0) {
    free(s->target);
    free(s);
    return fail(err, len, cerr);
  }

  pthread_mutex_init(&s->mu, NULL);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&s->work_cv, &ca);
  pthread_cond_init(&s->idle_cv, &ca);
  pthread_condattr_destroy(&ca);

  /* The thread takes no signals: they go to the Worker's own threads. */
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  int e = pthread_create(&s->thread, NULL, run, s);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  if (e != 0) {
    char m[128];
    wk_errf(m, sizeof m, "cannot start its thread: %s", strerror(e));
    pthread_cond_destroy(&s->idle_cv);
    pthread_cond_destroy(&s->work_cv);
    pthread_mutex_destroy(&s->mu);
    wk_grpc_client_close(s->client);
    free(s->target);
    free(s);
    return fail(err, len, m);
  }
  return s;
}

void wk_shadow_offer(wk_shadow *s, const uint8_t *req, size_t len) {
  pthread_mutex_lock(&s->mu);
  s->stats.offered++;
  if ((wk_rng_next(&s->rng) >> 11) >= s->threshold) {
    s->stats.sampled_out++;
    pthread_mutex_unlock(&s->mu);
    return;
  }
  if (s->stopping || s->count + s->reserved >= s->capacity || len > s->max_bytes - s->bytes) {
    s->stats.dropped++;
    pthread_mutex_unlock(&s->mu);
    return;
  }
  s->reserved++;
  s->bytes += len;
  s->stats.enqueued++;
  pthread_mutex_unlock(&s->mu);

  /* The copy happens outside the mutex: the room is reserved. */
  shadow_item *it = malloc(sizeof *it + len);
  if (it != NULL) {
    it->next = NULL;
    it->len = len;
    if (len > 0) memcpy(it->data, req, len);
  }

  pthread_mutex_lock(&s->mu);
  s->reserved--;
  if (it == NULL) {
    s->bytes -= len;
    s->stats.enqueued--;
    s->stats.dropped++;
    if (idle_locked(s)) pthread_cond_broadcast(&s->idle_cv);
  } else {
    if (s->tail != NULL) s->tail->next = it;
    else s->head = it;
    s->tail = it;
    s->count++;
    pthread_cond_signal(&s->work_cv);
  }
  pthread_mutex_unlock(&s->mu);
}

void wk_shadow_stats_get(wk_shadow *s, wk_shadow_stats *out) {
  pthread_mutex_lock(&s->mu);
  *out = s->stats;
  out->queued = s->count + s->reserved; /* reserved: being copied, as good as queued */
  out->in_flight = s->in_flight;
  pthread_mutex_unlock(&s->mu);
}

bool wk_shadow_wait_idle(wk_shadow *s, int64_t timeout_ms) {
  struct timespec until = wk_shadow_deadline_in(timeout_ms > 0 ? timeout_ms : 0);
  pthread_mutex_lock(&s->mu);
  while (!idle_locked(s) && !s->stopping && timeout_ms > 0) {
    if (pthread_cond_timedwait(&s->idle_cv, &s->mu, &until) == ETIMEDOUT) break;
  }
  bool idle = idle_locked(s);
  pthread_mutex_unlock(&s->mu);
  return idle;
}

const char *wk_shadow_target(const wk_shadow *s) { return s->target; }

void wk_shadow_stop(wk_shadow *s) {
  if (s == NULL) return;
  pthread_mutex_lock(&s->mu);
  s->stopping = true;
  pthread_cond_broadcast(&s->work_cv);
  pthread_mutex_unlock(&s->mu);
  pthread_join(s->thread, NULL); /* at most the deadline of a request in flight */
  wk_grpc_client_close(s->client);
  pthread_cond_destroy(&s->idle_cv);
  pthread_cond_destroy(&s->work_cv);
  pthread_mutex_destroy(&s->mu);
  free(s->target);
  free(s);
}

bool wk_shadow_is_shadow_request(const char *metadata_value) {
  return metadata_value != NULL && strcmp(metadata_value, WK_SHADOW_METADATA_VALUE) == 0;
}

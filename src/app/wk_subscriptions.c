#include "app/wk_subscriptions.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app/wk_wire.h"
#include "lib/wk_hash.h"
#include "lib/wk_log.h"
#include "lib/wk_shared.h"
#include "worker/v1/worker.pb-c.h"
#include "lib/wk_alloc.h"

#define BUCKETS 4096u
/* Encoded terminal results kept for streams that attach later (see wk_subs_tick). */
#define BODY_CACHE 64u

typedef struct wk_sub wk_sub;

/* One (stream, task) pair still waiting for its terminal event. */
typedef struct wk_watch_entry {
  struct wk_watch_entry *next; /* in the bucket */
  wk_sub *sub;
  uint64_t hash;
  bool owner;         /* false: an observer, which never counts for the core's watch grace */
  bool progress;      /* the stream asked for PROGRESS events */
  bool phase_pending; /* a PHASE_CHANGED is due at the end of this loop turn */
  char task_id[WK_TASK_ID_MAX + 1];
} wk_watch_entry;

struct wk_sub {
  wk_sub *next, *prev;
  wk_rpc *rpc;
  uint32_t remaining; /* tasks without their terminal event yet */
  bool finished;      /* status sent */
  bool overflowed;    /* ended for a bound: a disconnected watcher when it closes */
};

/* A terminal task's encoded TaskResult, shared by every stream that sends it. */
typedef struct cached_body {
  uint64_t hash;
  char task_id[WK_TASK_ID_MAX + 1];
  wk_shared *body; /* NULL: a free entry */
} cached_body;

/* A task whose phase changed this loop turn (wk_subs_flush_phases sends the latest). */
typedef struct pending_phase {
  uint64_t hash;
  char task_id[WK_TASK_ID_MAX + 1];
} pending_phase;

struct wk_subs {
  wk_core *core;
  uint64_t owner_grace_ms; /* told in every SNAPSHOT */
  wk_sub *streams;
  uint32_t n_streams;
  wk_watch_entry *buckets[BUCKETS];
  cached_body cache[BODY_CACHE];
  pending_phase *pending; /* each task once, with its entries marked phase_pending */
  size_t n_pending, cap_pending;
};

wk_subs *wk_subs_create(wk_core *core) {
  wk_subs *s = wk_xcalloc(1, sizeof *s);
  s->core = core;
  return s;
}

static uint64_t id_hash(const char *id) { return wk_hash64(id, strlen(id), 0x5eedu); }

/* The owners watching task `id`: only they count for the core's watch grace. */
static uint32_t owners_of(const wk_subs *s, const char *id, uint64_t h) {
  uint32_t n = 0;
  for (const wk_watch_entry *e = s->buckets[h % BUCKETS]; e; e = e->next) {
    if (e->owner && e->hash == h && strcmp(e->task_id, id) == 0) n++;
  }
  return n;
}

/* An event is a head (task_id, kind, and the tag and length of field 3, or of field 4
 * for PROGRESS) followed by the encoded TaskResult or TaskProgress (the body, shared by
 * every stream that gets it). */
static void encode_head_grace(wk_buf *out, const char *task_id, Worker__V1__TaskEvent__Kind kind,
                              uint64_t owner_grace_ms, const wk_shared *body) {
  wk_buf_clear(out);
  Worker__V1__TaskEvent ev = WORKER__V1__TASK_EVENT__INIT;
  ev.task_id = (char *)(uintptr_t)task_id;
  ev.kind = kind;
  ev.owner_grace_ms = owner_grace_ms;
  size_t n = worker__v1__task_event__get_packed_size(&ev);
  worker__v1__task_event__pack(&ev, wk_buf_reserve(out, n));
  out->len += n;
  uint32_t field = kind == WORKER__V1__TASK_EVENT__KIND__KIND_PROGRESS ? 4u : 3u;
  wk_buf_append_varint(out, (field << 3) | 2u);
  wk_buf_append_varint(out, body->len);
}

static void encode_head(wk_buf *out, const char *task_id, Worker__V1__TaskEvent__Kind kind,
                        const wk_shared *body) {
  encode_head_grace(out, task_id, kind, 0, body);
}

static wk_shared *encode_body(const wk_task_result *r, int64_t wall_offset_ms) {
  wk_buf result = {0};
  wk_wire_append_task_result(&result, r, wall_offset_ms);
  return wk_shared_take(&result);
}

/* ---- the cache of terminal bodies -------------------------------------------------- */

/* Forgets the bodies no stream holds any more: only the cache's reference is left, and
 * only this (the actor) thread takes new ones, so that count cannot grow behind us. */
static void sweep_cache(wk_subs *s) {
  for (uint32_t i = 0; i < BODY_CACHE; i++) {
    cached_body *c = &s->cache[i];
    if (c->body != NULL && wk_shared_refs(c->body) == 1) {
      wk_shared_unref(c->body);
      c->body = NULL;
    }
  }
}

static cached_body *cache_find(wk_subs *s, const char *id, uint64_t h) {
  for (uint32_t i = 0; i < BODY_CACHE; i++) {
    cached_body *c = &s->cache[i];
    if (c->body != NULL && c->hash == h && strcmp(c->task_id, id) == 0) return c;
  }
  return NULL;
}

/* The encoded terminal result of `r` (a new reference): the cached one while a stream
 * still holds it, else a new encoding, cached when there is room. */
static wk_shared *terminal_body(wk_subs *s, const char *id, uint64_t h, const wk_task_result *r,
                                int64_t wall_offset_ms) {
  cached_body *c = cache_find(s, id, h);
  if (c != NULL) return wk_shared_ref(c->body);
  wk_shared *body = encode_body(r, wall_offset_ms);
  sweep_cache(s);
  for (uint32_t i = 0; i < BODY_CACHE; i++) {
    c = &s->cache[i];
    if (c->body == NULL) {
      c->hash = h;
      snprintf(c->task_id, sizeof c->task_id, "%s", id);
      c->body = wk_shared_ref(body);
      break;
    }
  }
  return body;
}

void wk_subs_tick(wk_subs *s) { sweep_cache(s); }

void wk_subs_set_owner_grace(wk_subs *s, uint64_t ms) { s->owner_grace_ms = ms; }

uint32_t wk_subs_cached_bodies(const wk_subs *s) {
  uint32_t n = 0;
  for (uint32_t i = 0; i < BODY_CACHE; i++) n += s->cache[i].body != NULL;
  return n;
}

static void unlink_sub(wk_subs *s, wk_sub *sub) {
  if (sub->prev) {
    sub->prev->next = sub->next;
  } else {
    s->streams = sub->next;
  }
  if (sub->next) sub->next->prev = sub->prev;
  s->n_streams--;
}

/* Removes every entry of `sub`; for live tasks left without a watcher, tells the core
 * the stream broke (disconnected) or left cleanly. */
static void drop_entries(wk_subs *s, wk_sub *sub, bool disconnected, int64_t now_ms) {
  for (uint32_t b = 0; b < BUCKETS && sub->remaining; b++) {
    wk_watch_entry **pp = &s->buckets[b];
    while (*pp) {
      wk_watch_entry *e = *pp;
      if (e->sub != sub) {
        pp = &e->next;
        continue;
      }
      *pp = e->next;
      sub->remaining--;
      if (e->owner && owners_of(s, e->task_id, e->hash) == 0) {
        size_t len = strlen(e->task_id);
        if (disconnected) {
          wk_core_handle_watch_disconnected(s->core, e->task_id, len, now_ms);
        } else {
          wk_core_handle_watch_detached(s->core, e->task_id, len, now_ms);
        }
      }
      free(e);
    }
  }
}

static void finish(wk_sub *sub, grpc_status_code code, const char *msg) {
  if (sub->finished) return;
  sub->finished = true;
  if (code == GRPC_STATUS_OK) {
    wk_rpc_finish(sub->rpc, code, msg);
  } else {
    wk_rpc_fail(sub->rpc, code, msg);
  }
}

/* Sends one event to sub; a stream that cannot take it (over a bound) is ended at once
 * with RESOURCE_EXHAUSTED naming the bound, and counts as a disconnected watcher when
 * it closes. Returns false when the event was not queued. */
static bool send_event(wk_sub *sub, const wk_buf *head, wk_shared *body) {
  if (sub->finished) return false;
  wk_rpc_send_status st = wk_rpc_send_parts(sub->rpc, head->data, head->len, body);
  if (st == WK_RPC_SEND_OK) return true;
  if (st == WK_RPC_SEND_ENDED) return false; /* closing: on_closed follows */
  const char *setting, *msg;
  if (st == WK_RPC_SEND_OVER_STREAM_BYTES) {
    setting = "watch_stream_max_bytes";
    msg =
        "this stream's unsent events would exceed watch_stream_max_bytes: the watcher "
        "does not read them fast enough (or watches too many tasks with large results "
        "on one stream); the stream was ended";
  } else if (st == WK_RPC_SEND_OVER_TOTAL_BYTES) {
    setting = "watch_total_max_bytes";
    msg =
        "the unsent events of all watch streams would exceed watch_total_max_bytes: "
        "this stream was ended; watch again later";
  } else {
    setting = "events_queued";
    msg =
        "too many events queued for this stream: the watcher does not read them fast "
        "enough; the stream was ended";
  }
  sub->finished = true;
  sub->overflowed = true;
  wk_rpc_abort(sub->rpc, GRPC_STATUS_RESOURCE_EXHAUSTED, msg);
  wk_log_json(WK_LOG_WARN, "watch_stream_ended",
              json_pack("{s:s, s:s, s:I}", "setting", setting, "peer", wk_rpc_peer(sub->rpc),
                        "event_bytes", (json_int_t)(head->len + (body ? body->len : 0))));
  return false;
}

void wk_subs_watch(wk_subs *s, wk_rpc *rpc, int64_t now_ms, int64_t wall_offset_ms) {
  const Worker__V1__WatchTasksRequest *req = wk_rpc_request(rpc);
  for (size_t i = 0; i < req->n_task_ids; i++) {
    const wk_task_result *r;
    if (wk_core_get_result(s->core, req->task_ids[i], strlen(req->task_ids[i]), &r) != WK_OK) {
      char msg[256];
      wk_rpc_fail(rpc, GRPC_STATUS_NOT_FOUND,
                  wk_wire_error_message(WK_ERR_NOT_FOUND, req->task_ids[i], msg, sizeof msg));
      wk_rpc_release(rpc);
      return;
    }
  }
  wk_sub *sub = wk_xcalloc(1, sizeof *sub);
  sub->rpc = rpc;
  sub->next = s->streams;
  if (s->streams) s->streams->prev = sub;
  s->streams = sub;
  s->n_streams++;

  wk_buf msg = {0};
  for (size_t i = 0; i < req->n_task_ids; i++) {
    const char *id = req->task_ids[i];
    uint64_t h = id_hash(id);
    const wk_task_result *r;
    wk_core_get_result(s->core, id, strlen(id), &r);
    bool terminal = wk_task_state_terminal(r->state);
    /* a finished task's SNAPSHOT and TERMINAL carry the same result: one body */
    wk_shared *body =
        terminal ? terminal_body(s, id, h, r, wall_offset_ms) : encode_body(r, wall_offset_ms);
    encode_head_grace(&msg, id, WORKER__V1__TASK_EVENT__KIND__KIND_SNAPSHOT, s->owner_grace_ms,
                      body);
    bool ok = send_event(sub, &msg, body);
    if (ok && terminal) {
      encode_head(&msg, id, WORKER__V1__TASK_EVENT__KIND__KIND_TERMINAL, body);
      ok = send_event(sub, &msg, body);
    }
    wk_shared_unref(body);
    if (!ok) {
      /* ended for a bound (or closing): what it attached so far is a broken watch */
      sub->finished = true;
      drop_entries(s, sub, true, now_ms);
      wk_buf_free(&msg);
      return;
    }
    if (terminal) continue;
    wk_watch_entry *e = wk_xcalloc(1, sizeof *e);
    e->sub = sub;
    e->hash = h;
    e->owner = !req->observe;
    e->progress = req->progress;
    snprintf(e->task_id, sizeof e->task_id, "%s", id);
    bool first = e->owner && owners_of(s, id, e->hash) == 0;
    e->next = s->buckets[e->hash % BUCKETS];
    s->buckets[e->hash % BUCKETS] = e;
    sub->remaining++;
    if (first) wk_core_handle_watch_attached(s->core, id, strlen(id), now_ms);
  }
  wk_buf_free(&msg);
  if (sub->remaining == 0) finish(sub, GRPC_STATUS_OK, "");
}

/* Sends `r` as a `kind` event to the watchers of task `id` (hash h); a PHASE_CHANGED
 * only to those marked phase_pending (their marks are cleared). */
static void notify(wk_subs *s, const char *id, uint64_t h, const wk_task_result *r,
                   Worker__V1__TaskEvent__Kind kind, int64_t wall_offset_ms) {
  wk_buf msg = {0};
  wk_shared *body = NULL; /* encoded once, for every watcher */
  bool terminal = kind == WORKER__V1__TASK_EVENT__KIND__KIND_TERMINAL;
  wk_watch_entry **pp = &s->buckets[h % BUCKETS];
  while (*pp) {
    wk_watch_entry *e = *pp;
    if (e->hash != h || strcmp(e->task_id, id) != 0 || (!terminal && !e->phase_pending)) {
      pp = &e->next;
      continue;
    }
    e->phase_pending = false;
    if (body == NULL) {
      body = terminal ? terminal_body(s, id, h, r, wall_offset_ms) : encode_body(r, wall_offset_ms);
      encode_head(&msg, id, kind, body);
    }
    wk_sub *sub = e->sub;
    (void)send_event(sub, &msg, body);
    if (terminal) {
      *pp = e->next;
      free(e);
      sub->remaining--;
      if (sub->remaining == 0) finish(sub, GRPC_STATUS_OK, "");
    } else {
      pp = &e->next;
    }
  }
  wk_shared_unref(body);
  wk_buf_free(&msg);
}

static void result_id(const wk_task_result *r, char id[WK_TASK_ID_MAX + 1]) {
  memcpy(id, r->task_id, r->task_id_len);
  id[r->task_id_len] = '\0';
}

void wk_subs_on_phase(wk_subs *s, const wk_task_result *r) {
  char id[WK_TASK_ID_MAX + 1];
  result_id(r, id);
  uint64_t h = id_hash(id);
  bool watched = false, queued = false;
  for (wk_watch_entry *e = s->buckets[h % BUCKETS]; e; e = e->next) {
    if (e->hash != h || strcmp(e->task_id, id) != 0) continue;
    watched = true;
    queued = queued || e->phase_pending; /* already due this turn: it sends the latest */
    e->phase_pending = true;
  }
  if (!watched || queued) return;
  if (s->n_pending == s->cap_pending) {
    s->cap_pending = s->cap_pending ? s->cap_pending * 2 : 64;
    s->pending = wk_xrealloc(s->pending, s->cap_pending * sizeof *s->pending);
  }
  pending_phase *p = &s->pending[s->n_pending++];
  p->hash = h;
  memcpy(p->task_id, id, sizeof id);
}

size_t wk_subs_flush_phases(wk_subs *s, int64_t wall_offset_ms) {
  size_t n = s->n_pending;
  for (size_t i = 0; i < n; i++) {
    const pending_phase *p = &s->pending[i];
    const wk_task_result *r;
    /* the task's state now: the latest phase; a task that converged since sent its
     * TERMINAL already (and dropped its watchers' marks), one forgotten has none left */
    if (wk_core_get_result(s->core, p->task_id, strlen(p->task_id), &r) != WK_OK ||
        wk_task_state_terminal(r->state)) {
      continue;
    }
    notify(s, p->task_id, p->hash, r, WORKER__V1__TASK_EVENT__KIND__KIND_PHASE_CHANGED,
           wall_offset_ms);
  }
  s->n_pending = 0;
  return n;
}

bool wk_subs_phases_pending(const wk_subs *s) { return s->n_pending > 0; }

/* The TaskProgress of `r` as it stands. */
static wk_shared *encode_progress(const wk_task_result *r, int64_t wall_offset_ms) {
  const wk_call_stats *c = &r->statistic.calls;
  Worker__V1__TaskProgress p = WORKER__V1__TASK_PROGRESS__INIT;
  p.phase = (Worker__V1__Phase)wk_wire_phase(r->phase);
  p.calls_total = c->calls_total;
  p.total_known = r->statistic.calls_started_ms != 0;
  p.calls_done = c->calls_succeeded + c->calls_failed;
  p.calls_succeeded = c->calls_succeeded;
  p.calls_failed = c->calls_failed;
  p.calls_retried = c->calls_retried;
  p.calls_started_unix_ms = wk_wire_unix_ms(r->statistic.calls_started_ms, wall_offset_ms);
  wk_buf b = {0};
  size_t n = worker__v1__task_progress__get_packed_size(&p);
  worker__v1__task_progress__pack(&p, wk_buf_reserve(&b, n));
  b.len += n;
  return wk_shared_take(&b);
}

void wk_subs_on_progress(wk_subs *s, const wk_task_result *r, int64_t wall_offset_ms) {
  char id[WK_TASK_ID_MAX + 1];
  result_id(r, id);
  uint64_t h = id_hash(id);
  wk_buf msg = {0};
  wk_shared *body = NULL; /* encoded once, for every watcher, and only when one watches */
  for (wk_watch_entry *e = s->buckets[h % BUCKETS]; e; e = e->next) {
    if (!e->progress || e->hash != h || strcmp(e->task_id, id) != 0) continue;
    if (body == NULL) {
      body = encode_progress(r, wall_offset_ms);
      encode_head(&msg, id, WORKER__V1__TASK_EVENT__KIND__KIND_PROGRESS, body);
    }
    (void)send_event(e->sub, &msg, body);
  }
  wk_shared_unref(body);
  wk_buf_free(&msg);
}

void wk_subs_on_terminal(wk_subs *s, const wk_task_result *r, int64_t wall_offset_ms) {
  char id[WK_TASK_ID_MAX + 1];
  result_id(r, id);
  notify(s, id, id_hash(id), r, WORKER__V1__TASK_EVENT__KIND__KIND_TERMINAL, wall_offset_ms);
}

static wk_sub *find_sub(const wk_subs *s, const wk_rpc *rpc) {
  for (wk_sub *sub = s->streams; sub; sub = sub->next) {
    if (sub->rpc == rpc) return sub;
  }
  return NULL;
}

bool wk_subs_owns(const wk_subs *s, const wk_rpc *rpc) { return find_sub(s, rpc) != NULL; }

uint32_t wk_subs_streams(const wk_subs *s) { return s->n_streams; }

void wk_subs_on_closed(wk_subs *s, wk_rpc *rpc, bool cancelled, int64_t now_ms) {
  wk_sub *sub = find_sub(s, rpc);
  if (!sub) return;
  /* broken: the client went away, or it closed before we ended it, or we ended it for a
   * bound (a watcher that cannot keep up has left, as one that disconnects) */
  drop_entries(s, sub, cancelled || !sub->finished || sub->overflowed, now_ms);
  unlink_sub(s, sub);
  wk_rpc_release(sub->rpc);
  free(sub);
}

void wk_subs_destroy(wk_subs *s) {
  while (s->streams) {
    wk_sub *sub = s->streams;
    finish(sub, GRPC_STATUS_UNAVAILABLE, "the worker is shutting down");
    drop_entries(s, sub, false, 0);
    unlink_sub(s, sub);
    wk_rpc_release(sub->rpc);
    free(sub);
  }
  for (uint32_t i = 0; i < BODY_CACHE; i++) wk_shared_unref(s->cache[i].body);
  free(s->pending);
  free(s);
}

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
#include "lib/wk_assert.h"
#include "lib/wk_freelist.h"
#include "lib/wk_str.h"

/* Encoded terminal results kept for streams that attach later (see wk_subs_tick). */
#define BODY_CACHE 64u
_Static_assert((BODY_CACHE & (BODY_CACHE - 1)) == 0, "BODY_CACHE: a power of two");
/* Buckets of the two tables (tasks watched, streams by rpc) when they are first used;
 * each doubles when it holds more entries than buckets and is never shrunk (a peak of
 * N watched tasks or streams keeps N bucket pointers). */
#define TABLE_MIN 64u
/* Entry and task records kept for reuse (wk_freelist.h): a full pipeline's turn of
 * watches and terminals. */
#define POOL_MAX 256u

typedef struct wk_sub wk_sub;
typedef struct watched_task watched_task;

/* One (stream, task) pair still waiting for its terminal event: in its task's list and
 * in its stream's list, so a terminal event, a detach and a stream's close each touch
 * only the entries concerned. */
typedef struct wk_watch_entry {
  struct wk_watch_entry *tnext, *tprev; /* the watchers of its task */
  struct wk_watch_entry *snext, *sprev; /* the entries of its stream */
  wk_sub *sub;
  watched_task *task;
  bool owner;         /* false: an observer, which never counts for the core's watch grace */
  bool progress;      /* the stream asked for PROGRESS events */
  bool phase_pending; /* a PHASE_CHANGED is due at the end of this loop turn */
} wk_watch_entry;

/* A task with at least one entry; freed with its last entry. */
struct watched_task {
  watched_task *bnext; /* in its bucket of the task table */
  wk_watch_entry *watchers;
  uint64_t hash;
  uint32_t owners;   /* entries that are owners */
  uint32_t progress; /* entries that asked for PROGRESS */
  size_t pending_at; /* 1 + its index in wk_subs.pending; 0: no PHASE_CHANGED due */
  size_t id_len;
  char task_id[]; /* NUL-terminated */
};

struct wk_sub {
  wk_sub *next, *prev; /* every stream (for destroy) */
  wk_sub *bnext;       /* in its bucket of the rpc table */
  wk_rpc *rpc;
  wk_watch_entry *entries;
  uint32_t remaining; /* tasks without their terminal event yet (= entries) */
  bool finished;      /* status sent */
  bool overflowed;    /* ended for a bound: a disconnected watcher when it closes */
};

/* A terminal task's encoded TaskResult, shared by every stream that sends it. */
typedef struct cached_body {
  uint64_t hash;
  char task_id[WK_TASK_ID_MAX + 1];
  wk_shared *body; /* NULL: a free entry */
} cached_body;

struct wk_subs {
  wk_core *core;
  uint64_t owner_grace_ms; /* told in every SNAPSHOT */
  wk_sub *streams;
  uint32_t n_streams;
  wk_sub **sub_buckets; /* streams by rpc pointer */
  size_t n_sub_buckets;
  watched_task **task_buckets; /* tasks by id */
  size_t n_task_buckets, n_tasks;
  cached_body cache[BODY_CACHE];
  watched_task **pending; /* tasks with a PHASE_CHANGED due, each once */
  size_t n_pending, cap_pending;
  wk_buf msg;             /* an event's head, reused: wk_rpc_send_parts copies it */
  wk_freelist entry_pool; /* wk_watch_entry records, reused (one per watched task) */
  wk_freelist task_pool;  /* watched_task records with room for the longest id */
};

wk_subs *wk_subs_create(wk_core *core) {
  wk_subs *s = wk_xcalloc(1, sizeof *s);
  s->core = core;
  wk_freelist_init(&s->entry_pool, sizeof(wk_watch_entry), POOL_MAX);
  wk_freelist_init(&s->task_pool, sizeof(watched_task) + WK_TASK_ID_MAX + 1, POOL_MAX);
  return s;
}

static uint64_t id_hash(const char *id, size_t len) { return wk_hash64(id, len, 0x5eedu); }

static uint64_t rpc_hash(const wk_rpc *rpc) {
  return wk_hash64_mix(0x5eedu, (uint64_t)(uintptr_t)rpc);
}

/* ---- the task table ------------------------------------------------------------------ */

static watched_task *task_find(const wk_subs *s, const char *id, size_t len, uint64_t h) {
  if (s->n_task_buckets == 0) return NULL;
  for (watched_task *t = s->task_buckets[h & (s->n_task_buckets - 1)]; t; t = t->bnext) {
    if (t->hash == h && t->id_len == len && memcmp(t->task_id, id, len) == 0) return t;
  }
  return NULL;
}

/* Doubles the bucket array of a table (TABLE_MIN buckets when it has none yet) and
 * moves each element `x` of type `type` (chained by its `bnext`) to the bucket of
 * `hash_expr`. */
#define REHASH(type, buckets, n_buckets, hash_expr)      \
  do {                                                   \
    size_t nb = (n_buckets) ? (n_buckets)*2 : TABLE_MIN; \
    type **nbk = wk_xcalloc(nb, sizeof *nbk);            \
    for (size_t i = 0; i < (n_buckets); i++) {           \
      type *x = (buckets)[i];                            \
      while (x) {                                        \
        type *nx = x->bnext;                             \
        size_t b = (size_t)(hash_expr) & (nb - 1);       \
        x->bnext = nbk[b];                               \
        nbk[b] = x;                                      \
        x = nx;                                          \
      }                                                  \
    }                                                    \
    free(buckets);                                       \
    (buckets) = nbk;                                     \
    (n_buckets) = nb;                                    \
  } while (0)

/* The task entry of `id`, made (with no watchers) when there is none. */
static watched_task *task_get(wk_subs *s, const char *id, size_t len, uint64_t h) {
  watched_task *t = task_find(s, id, len, h);
  if (t != NULL) return t;
  if (s->n_tasks >= s->n_task_buckets) {
    REHASH(watched_task, s->task_buckets, s->n_task_buckets, x->hash);
  }
  WK_ASSERT(len <= WK_TASK_ID_MAX); /* ids are validated */
  t = wk_freelist_calloc(&s->task_pool);
  t->hash = h;
  t->id_len = len;
  memcpy(t->task_id, id, len);
  watched_task **b = &s->task_buckets[h & (s->n_task_buckets - 1)];
  t->bnext = *b;
  *b = t;
  s->n_tasks++;
  return t;
}

static void pending_remove(wk_subs *s, watched_task *t) {
  if (t->pending_at == 0) return;
  size_t i = t->pending_at - 1;
  watched_task *last = s->pending[--s->n_pending];
  s->pending[i] = last;
  last->pending_at = i + 1;
  t->pending_at = 0;
}

/* Frees `t` once its last entry is gone. */
static void task_release_if_empty(wk_subs *s, watched_task *t) {
  if (t->watchers != NULL) return;
  pending_remove(s, t);
  watched_task **pp = &s->task_buckets[t->hash & (s->n_task_buckets - 1)];
  while (*pp != t) pp = &(*pp)->bnext;
  *pp = t->bnext;
  s->n_tasks--;
  wk_freelist_put(&s->task_pool, t);
}

/* ---- entries ------------------------------------------------------------------------- */

static wk_watch_entry *entry_add(wk_subs *s, watched_task *t, wk_sub *sub, bool owner,
                                 bool progress) {
  wk_watch_entry *e = wk_freelist_calloc(&s->entry_pool);
  e->sub = sub;
  e->task = t;
  e->owner = owner;
  e->progress = progress;
  e->tnext = t->watchers;
  if (t->watchers) t->watchers->tprev = e;
  t->watchers = e;
  e->snext = sub->entries;
  if (sub->entries) sub->entries->sprev = e;
  sub->entries = e;
  sub->remaining++;
  t->owners += owner;
  t->progress += progress;
  return e;
}

/* Unlinks `e` from its task and its stream and frees it (not its task). */
static void entry_remove(wk_subs *s, wk_watch_entry *e) {
  watched_task *t = e->task;
  wk_sub *sub = e->sub;
  if (e->tprev) {
    e->tprev->tnext = e->tnext;
  } else {
    t->watchers = e->tnext;
  }
  if (e->tnext) e->tnext->tprev = e->tprev;
  if (e->sprev) {
    e->sprev->snext = e->snext;
  } else {
    sub->entries = e->snext;
  }
  if (e->snext) e->snext->sprev = e->sprev;
  sub->remaining--;
  t->owners -= e->owner;
  t->progress -= e->progress;
  wk_freelist_put(&s->entry_pool, e);
}

/* ---- the stream table ---------------------------------------------------------------- */

static void sub_index(wk_subs *s, wk_sub *sub) {
  if (s->n_streams >= s->n_sub_buckets) {
    REHASH(wk_sub, s->sub_buckets, s->n_sub_buckets, rpc_hash(x->rpc));
  }
  wk_sub **b = &s->sub_buckets[rpc_hash(sub->rpc) & (s->n_sub_buckets - 1)];
  sub->bnext = *b;
  *b = sub;
}

static wk_sub *find_sub(const wk_subs *s, const wk_rpc *rpc) {
  if (s->n_sub_buckets == 0) return NULL;
  for (wk_sub *sub = s->sub_buckets[rpc_hash(rpc) & (s->n_sub_buckets - 1)]; sub;
       sub = sub->bnext) {
    if (sub->rpc == rpc) return sub;
  }
  return NULL;
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

/* The cache is direct-mapped: a task's body can only be in the entry its hash picks,
 * so a terminal event costs one look instead of a walk of every entry (two walks, with
 * the sweep, were ~1,300 of the worker's instructions per task). */
static cached_body *cache_entry(wk_subs *s, uint64_t h) { return &s->cache[h & (BODY_CACHE - 1)]; }

/* The encoded terminal result of `r` (a new reference): the cached one while a stream
 * still holds it, else a new encoding, cached when its entry is free or no stream
 * holds the body there. */
static wk_shared *terminal_body(wk_subs *s, const char *id, uint64_t h, const wk_task_result *r,
                                int64_t wall_offset_ms) {
  cached_body *c = cache_entry(s, h);
  if (c->body != NULL && c->hash == h && strcmp(c->task_id, id) == 0) {
    return wk_shared_ref(c->body);
  }
  wk_shared *body = encode_body(r, wall_offset_ms);
  if (c->body != NULL && wk_shared_refs(c->body) == 1) { /* only the cache holds it */
    wk_shared_unref(c->body);
    c->body = NULL;
  }
  if (c->body == NULL) {
    c->hash = h;
    wk_str_copy(c->task_id, sizeof c->task_id, id);
    c->body = wk_shared_ref(body);
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
  wk_sub **pp = &s->sub_buckets[rpc_hash(sub->rpc) & (s->n_sub_buckets - 1)];
  while (*pp != sub) pp = &(*pp)->bnext;
  *pp = sub->bnext;
  s->n_streams--;
}

/* Removes every entry of `sub`; for live tasks left without an owner, tells the core
 * the stream broke (disconnected) or left cleanly. */
static void drop_entries(wk_subs *s, wk_sub *sub, bool disconnected, int64_t now_ms) {
  while (sub->entries) {
    wk_watch_entry *e = sub->entries;
    watched_task *t = e->task;
    bool owner = e->owner;
    entry_remove(s, e);
    if (owner && t->owners == 0) {
      if (disconnected) {
        wk_core_handle_watch_disconnected(s->core, t->task_id, t->id_len, now_ms);
      } else {
        wk_core_handle_watch_detached(s->core, t->task_id, t->id_len, now_ms);
      }
    }
    task_release_if_empty(s, t);
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
  if (req->batch_events) {
    /* events that wait behind the one being sent go out together, in TaskEvent.more */
    const ProtobufCFieldDescriptor *more = protobuf_c_message_descriptor_get_field_by_name(
        &worker__v1__task_event__descriptor, "more");
    WK_ASSERT(more != NULL);
    wk_rpc_merge_queued(rpc, more->id);
  }
  wk_sub *sub = wk_xcalloc(1, sizeof *sub);
  sub->rpc = rpc;
  sub->next = s->streams;
  if (s->streams) s->streams->prev = sub;
  s->streams = sub;
  sub_index(s, sub);
  s->n_streams++;

  wk_buf *msg = &s->msg; /* (heads are copied when sent) */
  for (size_t i = 0; i < req->n_task_ids; i++) {
    const char *id = req->task_ids[i];
    size_t len = strlen(id);
    uint64_t h = id_hash(id, len);
    const wk_task_result *r;
    wk_core_get_result(s->core, id, len, &r);
    bool terminal = wk_task_state_terminal(r->state);
    /* a finished task's SNAPSHOT and TERMINAL carry the same result: one body */
    wk_shared *body =
        terminal ? terminal_body(s, id, h, r, wall_offset_ms) : encode_body(r, wall_offset_ms);
    encode_head_grace(msg, id, WORKER__V1__TASK_EVENT__KIND__KIND_SNAPSHOT, s->owner_grace_ms,
                      body);
    bool ok = send_event(sub, msg, body);
    if (ok && terminal) {
      encode_head(msg, id, WORKER__V1__TASK_EVENT__KIND__KIND_TERMINAL, body);
      ok = send_event(sub, msg, body);
    }
    wk_shared_unref(body);
    if (!ok) {
      /* ended for a bound (or closing): what it attached so far is a broken watch */
      sub->finished = true;
      drop_entries(s, sub, true, now_ms);
      return;
    }
    if (terminal) continue;
    watched_task *t = task_get(s, id, len, h);
    bool first = !req->observe && t->owners == 0;
    (void)entry_add(s, t, sub, !req->observe, req->progress);
    if (first) wk_core_handle_watch_attached(s->core, id, len, now_ms);
  }
  if (sub->remaining == 0) finish(sub, GRPC_STATUS_OK, "");
}

/* Sends `r` as a `kind` event to the watchers of task `t`; a PHASE_CHANGED only to
 * those marked phase_pending (their marks are cleared); after a TERMINAL every entry
 * of `t` is gone and so is `t`. */
static void notify(wk_subs *s, watched_task *t, const wk_task_result *r,
                   Worker__V1__TaskEvent__Kind kind, int64_t wall_offset_ms) {
  wk_buf *msg = &s->msg;  /* (heads are copied when sent) */
  wk_shared *body = NULL; /* encoded once, for every watcher */
  bool terminal = kind == WORKER__V1__TASK_EVENT__KIND__KIND_TERMINAL;
  wk_watch_entry *e = t->watchers;
  while (e) {
    wk_watch_entry *next = e->tnext;
    if (!terminal && !e->phase_pending) {
      e = next;
      continue;
    }
    e->phase_pending = false;
    if (body == NULL) {
      body = terminal ? terminal_body(s, t->task_id, t->hash, r, wall_offset_ms)
                      : encode_body(r, wall_offset_ms);
      encode_head(msg, t->task_id, kind, body);
    }
    wk_sub *sub = e->sub;
    (void)send_event(sub, msg, body);
    if (terminal) {
      entry_remove(s, e);
      if (sub->remaining == 0) finish(sub, GRPC_STATUS_OK, "");
    }
    e = next;
  }
  if (terminal) task_release_if_empty(s, t);
  wk_shared_unref(body);
}

/* The watched task of result `r`, NULL when nobody watches it. */
static watched_task *task_of(const wk_subs *s, const wk_task_result *r) {
  if (s->n_tasks == 0) return NULL;
  return task_find(s, r->task_id, r->task_id_len, id_hash(r->task_id, r->task_id_len));
}

void wk_subs_on_phase(wk_subs *s, const wk_task_result *r) {
  watched_task *t = task_of(s, r);
  if (t == NULL) return;
  for (wk_watch_entry *e = t->watchers; e; e = e->tnext) e->phase_pending = true;
  if (t->pending_at != 0) return; /* already due this turn: it sends the latest */
  if (s->n_pending == s->cap_pending) {
    s->cap_pending = s->cap_pending ? s->cap_pending * 2 : 64;
    s->pending = wk_xrealloc(s->pending, s->cap_pending * sizeof *s->pending);
  }
  s->pending[s->n_pending++] = t;
  t->pending_at = s->n_pending;
}

size_t wk_subs_flush_phases(wk_subs *s, int64_t wall_offset_ms) {
  /* sending a PHASE_CHANGED frees no task (only a TERMINAL or a close does), so the
   * list stays as it is while it is walked */
  size_t n = s->n_pending;
  for (size_t i = 0; i < n; i++) {
    watched_task *t = s->pending[i];
    t->pending_at = 0;
    const wk_task_result *r;
    /* the task's state now: the latest phase; a task that converged since sent its
     * TERMINAL already (and is gone from the list), one forgotten has none left */
    if (wk_core_get_result(s->core, t->task_id, t->id_len, &r) != WK_OK ||
        wk_task_state_terminal(r->state)) {
      continue;
    }
    notify(s, t, r, WORKER__V1__TASK_EVENT__KIND__KIND_PHASE_CHANGED, wall_offset_ms);
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
  watched_task *t = task_of(s, r);
  if (t == NULL || t->progress == 0) return;
  wk_buf *msg = &s->msg;                                /* (heads are copied when sent) */
  wk_shared *body = encode_progress(r, wall_offset_ms); /* once, for every watcher */
  encode_head(msg, t->task_id, WORKER__V1__TASK_EVENT__KIND__KIND_PROGRESS, body);
  for (wk_watch_entry *e = t->watchers; e; e = e->tnext) {
    if (e->progress) (void)send_event(e->sub, msg, body);
  }
  wk_shared_unref(body);
}

bool wk_subs_progress_wanted(const wk_subs *s, const char *id, size_t len) {
  if (s->n_tasks == 0) return false;
  const watched_task *t = task_find(s, id, len, id_hash(id, len));
  return t != NULL && t->progress > 0;
}

void wk_subs_on_terminal(wk_subs *s, const wk_task_result *r, int64_t wall_offset_ms) {
  watched_task *t = task_of(s, r);
  if (t == NULL) return;
  notify(s, t, r, WORKER__V1__TASK_EVENT__KIND__KIND_TERMINAL, wall_offset_ms);
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
  wk_buf_free(&s->msg);
  wk_freelist_drain(&s->entry_pool);
  wk_freelist_drain(&s->task_pool);
  free(s->task_buckets);
  free(s->sub_buckets);
  free(s);
}

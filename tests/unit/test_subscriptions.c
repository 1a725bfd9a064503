/* test_subscriptions.c: the SubscriptionManager (src/app/wk_subscriptions.c) over a
 * real WorkerCore, with fake WatchTasks streams.
 *
 * The fake wk_rpc below stands in for the gRPC server's: it hands out a
 * WatchTasksRequest, decodes and records every event sent, records the status and
 * the release, and can refuse sends (a stream whose queue is full). The core's watch
 * entry points are wrapped (ld --wrap, see CMakeLists.txt) to count the events the
 * manager feeds the core, and then forwarded to the real core, so the grace and
 * OWNER_LOST are the core's own. No sockets, no threads, no clock: every time is a
 * number chosen here. */
#include "core_fixture.h"

#include <stdio.h>
#include <stdlib.h>

#include <grpc/status.h>

#include "adapters/wk_grpc_server.h"
#include "app/wk_subscriptions.h"
#include "worker/v1/worker.pb-c.h"

/* ---- the fake stream --------------------------------------------------------------- */

#define MAX_IDS 4
#define MAX_EVENTS 16

typedef struct event {
  Worker__V1__TaskEvent__Kind kind;
  char task_id[WK_TASK_ID_MAX + 1];
  Worker__V1__TaskState state;
  Worker__V1__Phase phase;
  wk_shared *body; /* the shared TaskResult bytes, held (unsent) until drain() */
} event;

struct wk_rpc {
  Worker__V1__WatchTasksRequest req;
  char *ids[MAX_IDS];
  char id_buf[MAX_IDS][WK_TASK_ID_MAX + 1];
  event events[MAX_EVENTS];
  size_t n_events;
  wk_rpc_send_status refuse; /* not OK: sends fail so, as when a bound is reached */
  bool ended;                /* a status was sent (or the call aborted) */
  bool aborted;              /* ended by wk_rpc_abort */
  grpc_status_code code;
  bool released;
  uint32_t merge_field; /* wk_rpc_merge_queued */
};

const void *wk_rpc_request(const wk_rpc *rpc) { return &rpc->req; }

const char *wk_rpc_peer(const wk_rpc *rpc) {
  (void)rpc;
  return "fake";
}

/* Decodes head + body as the client would (the bytes must be one TaskEvent) and keeps
 * a reference to the body, as the server does until the message is sent. */
wk_rpc_send_status wk_rpc_send_parts(wk_rpc *rpc, const uint8_t *head, size_t head_len,
                                     wk_shared *body) {
  assert_false(rpc->ended);
  assert_false(rpc->released);
  if (rpc->refuse != WK_RPC_SEND_OK) return rpc->refuse;
  size_t len = head_len + (body ? body->len : 0);
  uint8_t *msg = malloc(len + 1);
  assert_non_null(msg);
  memcpy(msg, head, head_len);
  if (body) memcpy(msg + head_len, body->data, body->len);
  Worker__V1__TaskEvent *ev = worker__v1__task_event__unpack(NULL, len, msg);
  free(msg);
  assert_non_null(ev);
  assert_non_null(ev->result);
  assert_string_equal(ev->result->task_id, ev->task_id);
  assert_true(rpc->n_events < MAX_EVENTS);
  event *e = &rpc->events[rpc->n_events++];
  e->kind = ev->kind;
  snprintf(e->task_id, sizeof e->task_id, "%s", ev->task_id);
  e->state = ev->result->state;
  e->phase = ev->result->phase;
  e->body = body ? wk_shared_ref(body) : NULL;
  worker__v1__task_event__free_unpacked(ev, NULL);
  return WK_RPC_SEND_OK;
}

/* The client read every event: the stream lets go of their bodies. */
static void drain(wk_rpc *rpc) {
  for (size_t i = 0; i < rpc->n_events; i++) {
    wk_shared_unref(rpc->events[i].body);
    rpc->events[i].body = NULL;
  }
}

static void end_rpc(wk_rpc *rpc, grpc_status_code code) {
  assert_false(rpc->ended); /* one status per stream */
  assert_false(rpc->released);
  rpc->ended = true;
  rpc->code = code;
}

void wk_rpc_fail(wk_rpc *rpc, grpc_status_code code, const char *message) {
  assert_int_not_equal(code, GRPC_STATUS_OK);
  assert_non_null(message);
  end_rpc(rpc, code);
}

void wk_rpc_finish(wk_rpc *rpc, grpc_status_code code, const char *message) {
  assert_non_null(message);
  end_rpc(rpc, code);
}

void wk_rpc_abort(wk_rpc *rpc, grpc_status_code code, const char *message) {
  assert_int_not_equal(code, GRPC_STATUS_OK);
  assert_non_null(message);
  end_rpc(rpc, code);
  rpc->aborted = true;
  drain(rpc); /* the unsent events are dropped */
}

void wk_rpc_merge_queued(wk_rpc *rpc, uint32_t field) { rpc->merge_field = field; }

void wk_rpc_release(wk_rpc *rpc) {
  assert_false(rpc->released);
  rpc->released = true;
}

/* A stream watching id0 and, unless NULL, id1. */
static wk_rpc *stream(const char *id0, const char *id1) {
  wk_rpc *rpc = calloc(1, sizeof *rpc);
  assert_non_null(rpc);
  worker__v1__watch_tasks_request__init(&rpc->req);
  const char *ids[2] = {id0, id1};
  for (size_t i = 0; i < 2 && ids[i]; i++) {
    snprintf(rpc->id_buf[i], sizeof rpc->id_buf[i], "%s", ids[i]);
    rpc->ids[i] = rpc->id_buf[i];
    rpc->req.n_task_ids++;
  }
  rpc->req.task_ids = rpc->ids;
  return rpc;
}

static void expect_event_at(const wk_rpc *rpc, size_t i, Worker__V1__TaskEvent__Kind kind,
                            const char *task_id, Worker__V1__TaskState state, FX_LOC) {
  FX_TRUE(i < rpc->n_events);
  FX_EQ(rpc->events[i].kind, kind);
  FX_STR(rpc->events[i].task_id, task_id);
  FX_EQ(rpc->events[i].state, state);
}
#define EXPECT_EVENT(rpc, i, kind, id, state) \
  expect_event_at((rpc), (i), (kind), (id), (state), FX_AT)

#define SNAPSHOT WORKER__V1__TASK_EVENT__KIND__KIND_SNAPSHOT
#define PHASE_CHANGED WORKER__V1__TASK_EVENT__KIND__KIND_PHASE_CHANGED
#define TERMINAL WORKER__V1__TASK_EVENT__KIND__KIND_TERMINAL
#define RUNNING WORKER__V1__TASK_STATE__TASK_STATE_RUNNING
#define SUCCEEDED WORKER__V1__TASK_STATE__TASK_STATE_SUCCEEDED
#define FAILED WORKER__V1__TASK_STATE__TASK_STATE_FAILED

/* ---- the core's watch events, counted on their way to the real core --------------- */

static struct {
  int attached, detached, disconnected;
  char last_id[WK_TASK_ID_MAX + 1];
} g_core_events;

wk_err __real_wk_core_handle_watch_attached(wk_core *core, const char *task_id, size_t task_id_len,
                                            int64_t now_ms);
wk_err __real_wk_core_handle_watch_detached(wk_core *core, const char *task_id, size_t task_id_len,
                                            int64_t now_ms);
wk_err __real_wk_core_handle_watch_disconnected(wk_core *core, const char *task_id,
                                                size_t task_id_len, int64_t now_ms);
wk_err __wrap_wk_core_handle_watch_attached(wk_core *core, const char *task_id, size_t task_id_len,
                                            int64_t now_ms);
wk_err __wrap_wk_core_handle_watch_detached(wk_core *core, const char *task_id, size_t task_id_len,
                                            int64_t now_ms);
wk_err __wrap_wk_core_handle_watch_disconnected(wk_core *core, const char *task_id,
                                                size_t task_id_len, int64_t now_ms);

static void note(const char *task_id, size_t len) {
  snprintf(g_core_events.last_id, sizeof g_core_events.last_id, "%.*s", (int)len, task_id);
}

wk_err __wrap_wk_core_handle_watch_attached(wk_core *core, const char *task_id, size_t task_id_len,
                                            int64_t now_ms) {
  g_core_events.attached++;
  note(task_id, task_id_len);
  wk_err err = __real_wk_core_handle_watch_attached(core, task_id, task_id_len, now_ms);
  assert_int_equal(err, WK_OK);
  return err;
}

wk_err __wrap_wk_core_handle_watch_detached(wk_core *core, const char *task_id, size_t task_id_len,
                                            int64_t now_ms) {
  g_core_events.detached++;
  note(task_id, task_id_len);
  return __real_wk_core_handle_watch_detached(core, task_id, task_id_len, now_ms);
}

wk_err __wrap_wk_core_handle_watch_disconnected(wk_core *core, const char *task_id,
                                                size_t task_id_len, int64_t now_ms) {
  g_core_events.disconnected++;
  note(task_id, task_id_len);
  return __real_wk_core_handle_watch_disconnected(core, task_id, task_id_len, now_ms);
}

static void expect_core_events_at(int attached, int detached, int disconnected, FX_LOC) {
  FX_EQ(g_core_events.attached, attached);
  FX_EQ(g_core_events.detached, detached);
  FX_EQ(g_core_events.disconnected, disconnected);
}
#define EXPECT_CORE_EVENTS(a, d, x) expect_core_events_at((a), (d), (x), FX_AT)

/* ---- fixture: a ready core (grace FX_GRACE) and a manager over it ------------------ */

typedef struct fixture {
  wk_core *core;
  wk_subs *subs;
} fixture;

static int setup(void **state) {
  static fixture f;
  memset(&g_core_events, 0, sizeof g_core_events);
  if (fx_setup(state) != 0) return -1;
  f.core = *state;
  f.subs = wk_subs_create(f.core);
  *state = &f;
  return 0;
}

static int teardown(void **state) {
  fixture *f = *state;
  wk_subs_destroy(f->subs);
  wk_core_destroy(f->core);
  return 0;
}

static int ctx_a, ctx_b;

/* Ends a stream from the client side and frees the fake; `cancelled`: it went away. */
static void close_stream(fixture *f, wk_rpc *rpc, bool cancelled, int64_t now_ms) {
  wk_subs_on_closed(f->subs, rpc, cancelled, now_ms);
  assert_false(wk_subs_owns(f->subs, rpc));
  assert_true(rpc->released);
  drain(rpc);
  free(rpc);
}

static wk_task_id g_ids[4];

static size_t grace_over(const fixture *f, int64_t now_ms) {
  return wk_core_watch_disconnected_tasks(f->core, now_ms, g_ids, 4);
}

/* Task t1 running its builder since 1000, watched by one stream from 1500 that breaks
 * at 2000: the grace runs until 2000 + FX_GRACE. Returns t1's slot id. */
static uint64_t watched_then_broken(fixture *f) {
  uint64_t slot = FX_RUN_TO_BUILDER(f->core, ID("t1"), &ctx_a, 1000);
  wk_rpc *a = stream("t1", NULL);
  wk_subs_watch(f->subs, a, 1500, 0);
  close_stream(f, a, true, 2000);
  EXPECT_CORE_EVENTS(1, 0, 1);
  return slot;
}

/* ---- tests ------------------------------------------------------------------------- */

/* The first stream on a live task attaches it in the core, the second does not; each
 * gets its SNAPSHOT. */
static void test_first_attach(void **state) {
  fixture *f = *state;
  FX_RUN_TO_BUILDER(f->core, ID("t1"), &ctx_a, 1000);
  wk_rpc *a = stream("t1", NULL), *b = stream("t1", NULL);

  wk_subs_watch(f->subs, a, 1500, 0);
  EXPECT_CORE_EVENTS(1, 0, 0);
  assert_string_equal(g_core_events.last_id, "t1");
  assert_int_equal(a->n_events, 1);
  EXPECT_EVENT(a, 0, SNAPSHOT, "t1", RUNNING);
  assert_false(a->ended);

  wk_subs_watch(f->subs, b, 1600, 0);
  EXPECT_CORE_EVENTS(1, 0, 0); /* not the first */
  assert_int_equal(b->n_events, 1);
  EXPECT_EVENT(b, 0, SNAPSHOT, "t1", RUNNING);
  assert_int_equal(wk_subs_streams(f->subs), 2);
  assert_true(wk_subs_owns(f->subs, a) && wk_subs_owns(f->subs, b));
  FX_INV(f->core);

  close_stream(f, a, true, 1700);
  EXPECT_CORE_EVENTS(1, 0, 0);
  /* closed before the manager ended it: broken, whatever the cancelled flag says */
  close_stream(f, b, false, 1800);
  EXPECT_CORE_EVENTS(1, 0, 1);
}

/* Only the last stream to leave reaches the core: a broken stream as
 * WatchDisconnected (grace starts), one we ended ourselves as a clean detach (none). */
static void test_last_detach(void **state) {
  fixture *f = *state;
  FX_RUN_TO_BUILDER(f->core, ID("t1"), &ctx_a, 1000);
  FX_RUN_TO_BUILDER(f->core, ID("t2"), &ctx_b, 1000);
  wk_rpc *a = stream("t1", NULL), *b = stream("t1", NULL), *c = stream("t2", NULL);
  wk_subs_watch(f->subs, a, 1500, 0);
  wk_subs_watch(f->subs, b, 1500, 0);
  wk_subs_watch(f->subs, c, 1500, 0);
  EXPECT_CORE_EVENTS(2, 0, 0);

  close_stream(f, a, true, 2000); /* b still watches t1 */
  EXPECT_CORE_EVENTS(2, 0, 0);
  close_stream(f, b, true, 2100); /* the last watcher of t1 broke */
  EXPECT_CORE_EVENTS(2, 0, 1);
  assert_string_equal(g_core_events.last_id, "t1");
  assert_int_equal(grace_over(f, 2100 + FX_GRACE - 1), 0);
  assert_int_equal(grace_over(f, 2100 + FX_GRACE), 1);
  assert_string_equal(g_ids[0].bytes, "t1");

  /* c cannot keep up: the manager ends it at once (RESOURCE_EXHAUSTED); a watcher that
   * cannot keep up has left, as one that disconnects (issue 11 §6): when it closes, t2
   * lost its only watcher and its grace starts, whatever the cancelled flag says. */
  const wk_task_result *r = FX_GET(f->core, ID("t2"));
  c->refuse = WK_RPC_SEND_OVER_STREAM_BYTES;
  wk_subs_on_phase(f->subs, r);
  assert_false(c->ended); /* not before the end of the turn */
  assert_int_equal(wk_subs_flush_phases(f->subs, 0), 1);
  assert_true(c->ended && c->aborted);
  assert_int_equal(c->code, GRPC_STATUS_RESOURCE_EXHAUSTED);
  EXPECT_CORE_EVENTS(2, 0, 1);
  close_stream(f, c, false, 2200);
  EXPECT_CORE_EVENTS(2, 0, 2);
  assert_string_equal(g_core_events.last_id, "t2");
  assert_int_equal(grace_over(f, 2200 + FX_GRACE - 1), 1); /* t1 only, so far */
  assert_string_equal(g_ids[0].bytes, "t1");
  assert_int_equal(grace_over(f, 2200 + FX_GRACE), 2);
  assert_int_equal(wk_subs_streams(f->subs), 0);
  FX_INV(f->core);
}

/* Several streams on one task, one of them on two tasks: each gets every event, a
 * stream ends OK once all its tasks sent TERMINAL, and a terminal task needs no
 * detach. */
static void test_several_streams_on_one_task(void **state) {
  fixture *f = *state;
  uint64_t s1 = FX_RUN_TO_BUILDER(f->core, ID("t1"), &ctx_a, 1000);
  FX_RUN_TO_BUILDER(f->core, ID("t2"), &ctx_b, 1000);
  wk_rpc *a = stream("t1", NULL), *b = stream("t1", NULL), *c = stream("t1", "t2");
  wk_subs_watch(f->subs, a, 1500, 0);
  wk_subs_watch(f->subs, b, 1500, 0);
  wk_subs_watch(f->subs, c, 1500, 0);
  EXPECT_CORE_EVENTS(2, 0, 0); /* t1 once, t2 once */
  EXPECT_EVENT(c, 0, SNAPSHOT, "t1", RUNNING);
  EXPECT_EVENT(c, 1, SNAPSHOT, "t2", RUNNING);

  FX_BUILDER_OK(f->core, ID("t1"), s1, &ctx_a, NULL, false, 1600);
  wk_subs_on_phase(f->subs, FX_GET(f->core, ID("t1")));
  assert_int_equal(wk_subs_flush_phases(f->subs, 0), 1);
  FX_CALLS_OK(f->core, ID("t1"), s1, &ctx_a, NULL, 0, 1700);
  FX_WRITER_OK(f->core, ID("t1"), s1, &ctx_a, NULL, 0, 1800);
  wk_subs_on_terminal(f->subs, FX_GET(f->core, ID("t1")), 0);
  wk_rpc *ab[2] = {a, b};
  for (size_t i = 0; i < 2; i++) {
    assert_int_equal(ab[i]->n_events, 3);
    EXPECT_EVENT(ab[i], 1, PHASE_CHANGED, "t1", RUNNING);
    EXPECT_EVENT(ab[i], 2, TERMINAL, "t1", SUCCEEDED);
    assert_true(ab[i]->ended);
    assert_int_equal(ab[i]->code, GRPC_STATUS_OK);
  }
  assert_int_equal(c->n_events, 4);
  EXPECT_EVENT(c, 3, TERMINAL, "t1", SUCCEEDED);
  assert_false(c->ended); /* t2 still to come */
  /* one encoding of the result for every watcher, shared, not copied */
  assert_non_null(a->events[2].body);
  assert_ptr_equal(a->events[2].body, b->events[2].body);
  assert_ptr_equal(a->events[2].body, c->events[3].body);
  close_stream(f, a, false, 1900);
  close_stream(f, b, false, 1900);
  EXPECT_CORE_EVENTS(2, 0, 0);

  wk_transition_result out;
  wk_core_handle_abort(f->core, ID("t2"), WK_FAIL_CANCELLED, "stop", 2000, &out);
  FX_ERR(out.err, WK_OK);
  wk_subs_on_terminal(f->subs, FX_GET(f->core, ID("t2")), 0);
  assert_int_equal(c->n_events, 5);
  EXPECT_EVENT(c, 4, TERMINAL, "t2", WORKER__V1__TASK_STATE__TASK_STATE_CANCELLED);
  assert_true(c->ended);
  assert_int_equal(c->code, GRPC_STATUS_OK);
  close_stream(f, c, false, 2100);
  EXPECT_CORE_EVENTS(2, 0, 0);
  assert_int_equal(grace_over(f, 99999), 0);
  FX_INV(f->core);
}

/* Phase changes within one loop turn coalesce: every watcher gets one PHASE_CHANGED
 * with the latest phase, the same encoded bytes for all; a watcher that attached in
 * between has that phase in its SNAPSHOT and gets no PHASE_CHANGED for it; a task that
 * converges before the turn ends sends its TERMINAL (never skipped) and no
 * PHASE_CHANGED for the phases it left. */
static void test_phases_coalesce_terminal_never_skipped(void **state) {
  fixture *f = *state;
  enum { N = 6 };
  uint64_t s1 = FX_RUN_TO_BUILDER(f->core, ID("t1"), &ctx_a, 1000);
  wk_rpc *w[N + 1];
  for (size_t i = 0; i < N; i++) {
    w[i] = stream("t1", NULL);
    wk_subs_watch(f->subs, w[i], 1100, 0);
  }
  FX_BUILDER_OK(f->core, ID("t1"), s1, &ctx_a, NULL, false, 1200);
  wk_subs_on_phase(f->subs, FX_GET(f->core, ID("t1"))); /* CALLS */
  FX_CALLS_OK(f->core, ID("t1"), s1, &ctx_a, NULL, 0, 1300);
  wk_subs_on_phase(f->subs, FX_GET(f->core, ID("t1"))); /* WRITER, same turn */
  assert_true(wk_subs_phases_pending(f->subs));
  w[N] = stream("t1", NULL); /* attaches before the turn ends: WRITER in its SNAPSHOT */
  wk_subs_watch(f->subs, w[N], 1300, 0);
  EXPECT_EVENT(w[N], 0, SNAPSHOT, "t1", RUNNING);
  assert_int_equal(w[N]->events[0].phase, WORKER__V1__PHASE__PHASE_WRITER);
  assert_int_equal(wk_subs_flush_phases(f->subs, 0), 1);
  assert_false(wk_subs_phases_pending(f->subs));
  assert_int_equal(w[N]->n_events, 1);
  for (size_t i = 0; i < N; i++) {
    assert_int_equal(w[i]->n_events, 2);
    EXPECT_EVENT(w[i], 1, PHASE_CHANGED, "t1", RUNNING);
    assert_int_equal(w[i]->events[1].phase, WORKER__V1__PHASE__PHASE_WRITER);
    assert_ptr_equal(w[i]->events[1].body, w[0]->events[1].body); /* encoded once */
  }
  assert_int_equal(wk_subs_flush_phases(f->subs, 0), 0); /* nothing due twice */

  /* a phase change, then convergence in the same turn: TERMINAL only */
  wk_subs_on_phase(f->subs, FX_GET(f->core, ID("t1")));
  FX_WRITER_OK(f->core, ID("t1"), s1, &ctx_a, NULL, 0, 1400);
  wk_subs_on_terminal(f->subs, FX_GET(f->core, ID("t1")), 0);
  (void)wk_subs_flush_phases(f->subs, 0);
  for (size_t i = 0; i <= N; i++) {
    size_t last = w[i]->n_events - 1;
    assert_int_equal(last, i < N ? 2 : 1);
    EXPECT_EVENT(w[i], last, TERMINAL, "t1", SUCCEEDED);
    assert_ptr_equal(w[i]->events[last].body, w[0]->events[2].body);
    assert_true(w[i]->ended);
    assert_int_equal(w[i]->code, GRPC_STATUS_OK);
  }
  for (size_t i = 0; i <= N; i++) close_stream(f, w[i], false, 1500);
  EXPECT_CORE_EVENTS(1, 0, 0);
  FX_INV(f->core);
}

/* A finished task's SNAPSHOT and TERMINAL carry one encoding of its result, and a stream
 * that attaches while an earlier one still holds it unsent gets the same bytes; once no
 * stream holds it, the tick forgets it. */
static void test_finished_task_encoded_once(void **state) {
  fixture *f = *state;
  uint64_t s1 = FX_RUN_TO_BUILDER(f->core, ID("t1"), &ctx_a, 1000);
  FX_BUILDER_OK(f->core, ID("t1"), s1, &ctx_a, NULL, false, 1100);
  FX_CALLS_OK(f->core, ID("t1"), s1, &ctx_a, NULL, 0, 1200);
  FX_WRITER_OK(f->core, ID("t1"), s1, &ctx_a, NULL, 0, 1300);
  wk_subs_on_terminal(f->subs, FX_GET(f->core, ID("t1")), 0); /* nobody watches yet */

  wk_rpc *a = stream("t1", NULL), *b = stream("t1", NULL);
  wk_subs_watch(f->subs, a, 1400, 0);
  assert_int_equal(a->n_events, 2);
  EXPECT_EVENT(a, 0, SNAPSHOT, "t1", SUCCEEDED);
  EXPECT_EVENT(a, 1, TERMINAL, "t1", SUCCEEDED);
  assert_true(a->ended);
  assert_int_equal(a->code, GRPC_STATUS_OK);
  assert_non_null(a->events[0].body);
  assert_ptr_equal(a->events[0].body, a->events[1].body);
  wk_subs_watch(f->subs, b, 1500, 0); /* a has not sent it yet */
  assert_int_equal(b->n_events, 2);
  assert_ptr_equal(b->events[0].body, a->events[0].body);
  assert_ptr_equal(b->events[1].body, a->events[0].body);

  assert_int_equal(wk_subs_cached_bodies(f->subs), 1);
  const wk_shared *first = a->events[0].body;
  close_stream(f, a, false, 1600);
  wk_subs_tick(f->subs);
  assert_int_equal(wk_subs_cached_bodies(f->subs), 1); /* b still holds it */
  assert_ptr_equal(b->events[0].body, first);
  close_stream(f, b, false, 1600);
  wk_subs_tick(f->subs);
  assert_int_equal(wk_subs_cached_bodies(f->subs), 0); /* nobody does: forgotten (freed) */

  wk_rpc *c = stream("t1", NULL); /* a later watcher: a new encoding */
  wk_subs_watch(f->subs, c, 1700, 0);
  assert_int_equal(c->n_events, 2);
  EXPECT_EVENT(c, 1, TERMINAL, "t1", SUCCEEDED);
  assert_int_equal(wk_subs_cached_bodies(f->subs), 1);
  close_stream(f, c, false, 1800);
  EXPECT_CORE_EVENTS(0, 0, 0); /* a finished task is never attached */
  FX_INV(f->core);
}

/* A stream breaks, another attaches within the grace: the grace is cancelled and the
 * task lives on; the core's grace expiry is then stale. */
static void test_reattach_within_grace(void **state) {
  fixture *f = *state;
  uint64_t s1 = watched_then_broken(f);
  assert_int_equal(wk_core_next_deadline(f->core), 2000 + FX_GRACE);

  wk_rpc *b = stream("t1", NULL);
  wk_subs_watch(f->subs, b, 2000 + FX_GRACE - 1, 0);
  EXPECT_CORE_EVENTS(2, 0, 1); /* the first watcher again */
  EXPECT_EVENT(b, 0, SNAPSHOT, "t1", RUNNING);
  assert_int_equal(grace_over(f, 2000 + FX_GRACE), 0);
  wk_transition_result out;
  wk_core_handle_watch_grace_expired(f->core, ID("t1"), 2000 + FX_GRACE, &out);
  FX_ERR(out.err, WK_ERR_STALE);
  assert_int_equal(out.cmds.count, 0);
  FX_RES(FX_GET(f->core, ID("t1")), s1, WK_TASK_RUNNING, WK_PHASE_BUILDER, WK_FAIL_NONE, "", 7);
  close_stream(f, b, true, 5000);
  EXPECT_CORE_EVENTS(2, 0, 2);
  FX_INV(f->core);
}

/* The last stream breaks and nobody comes back: at the end of the grace the core's
 * scan names the task and its handling fails it OWNER_LOST; the TERMINAL goes to no
 * one, and a stream watching it afterwards gets SNAPSHOT and TERMINAL and ends OK
 * without attaching. */
static void test_grace_expiry_owner_lost(void **state) {
  fixture *f = *state;
  uint64_t s1 = watched_then_broken(f);

  assert_int_equal(grace_over(f, 2000 + FX_GRACE - 1), 0);
  assert_int_equal(grace_over(f, 2000 + FX_GRACE), 1);
  wk_transition_result out;
  wk_core_handle_watch_grace_expired(f->core, g_ids[0].bytes, g_ids[0].len, 2000 + FX_GRACE, &out);
  FX_CANCEL_CONVERGE(out, ID("t1"), s1, &ctx_a, WK_TASK_FAILED, WK_FAIL_OWNER_LOST, NULL, 7,
                     2000 + FX_GRACE);
  wk_subs_on_terminal(f->subs, out.cmds.items[1].u.converge.result, 0);

  wk_rpc *b = stream("t1", NULL);
  wk_subs_watch(f->subs, b, 5000, 0);
  EXPECT_CORE_EVENTS(1, 0, 1); /* terminal: nothing to attach */
  assert_int_equal(b->n_events, 2);
  EXPECT_EVENT(b, 0, SNAPSHOT, "t1", FAILED);
  EXPECT_EVENT(b, 1, TERMINAL, "t1", FAILED);
  assert_true(b->ended);
  assert_int_equal(b->code, GRPC_STATUS_OK);
  close_stream(f, b, false, 5100);
  EXPECT_CORE_EVENTS(1, 0, 1);
  FX_INV(f->core);
}

/* An unknown task id ends the stream NOT_FOUND before anything is attached, and the
 * manager gives the rpc back at once. */
static void test_unknown_task_not_found(void **state) {
  fixture *f = *state;
  FX_RUN_TO_BUILDER(f->core, ID("t1"), &ctx_a, 1000);
  wk_rpc *a = stream("t1", "nope");
  wk_subs_watch(f->subs, a, 1500, 0);
  assert_true(a->ended);
  assert_int_equal(a->code, GRPC_STATUS_NOT_FOUND);
  assert_true(a->released);
  assert_int_equal(a->n_events, 0);
  assert_false(wk_subs_owns(f->subs, a));
  EXPECT_CORE_EVENTS(0, 0, 0);
  free(a);
}

/* A stream that cannot take even its SNAPSHOT is ended RESOURCE_EXHAUSTED and counts
 * as broken for what it attached; shutdown ends the rest UNAVAILABLE, detaching. */
static void test_full_stream_and_shutdown(void **state) {
  fixture *f = *state;
  FX_RUN_TO_BUILDER(f->core, ID("t1"), &ctx_a, 1000);
  FX_RUN_TO_BUILDER(f->core, ID("t2"), &ctx_b, 1000);
  wk_rpc *a = stream("t1", "t2");
  wk_subs_watch(f->subs, a, 1500, 0);
  EXPECT_CORE_EVENTS(2, 0, 0);

  wk_rpc *b = stream("t1", NULL);
  b->refuse = WK_RPC_SEND_OVER_TOTAL_BYTES;
  wk_subs_watch(f->subs, b, 1600, 0);
  assert_true(b->ended);
  assert_int_equal(b->code, GRPC_STATUS_RESOURCE_EXHAUSTED);
  EXPECT_CORE_EVENTS(2, 0, 0); /* it never attached; a still watches t1 */
  close_stream(f, b, false, 1700);
  EXPECT_CORE_EVENTS(2, 0, 0);

  wk_subs_destroy(f->subs);
  f->subs = wk_subs_create(f->core); /* for the teardown */
  assert_true(a->ended);
  assert_int_equal(a->code, GRPC_STATUS_UNAVAILABLE);
  assert_true(a->released);
  EXPECT_CORE_EVENTS(2, 2, 0);
  assert_int_equal(grace_over(f, 99999), 0);
  drain(a);
  free(a);
  FX_INV(f->core);
}

/* Observers (WatchTasksRequest.observe) never count for the grace: an observer alone
 * neither attaches nor, when its stream breaks, starts a grace; an owner's broken
 * stream starts it even while observers still watch, and an observer attaching during
 * the grace does not stop it (issue 13 §3). */
static void test_observers_never_own(void **state) {
  fixture *f = *state;
  FX_RUN_TO_BUILDER(f->core, ID("t1"), &ctx_a, 1000);
  wk_rpc *obs = stream("t1", NULL);
  obs->req.observe = true;
  wk_subs_watch(f->subs, obs, 1500, 0);
  EXPECT_EVENT(obs, 0, SNAPSHOT, "t1", RUNNING);
  EXPECT_CORE_EVENTS(0, 0, 0);
  close_stream(f, obs, true, 1600);
  EXPECT_CORE_EVENTS(0, 0, 0);
  assert_int_equal(grace_over(f, 99999), 0); /* nothing to lose: never owned */

  wk_rpc *own = stream("t1", NULL), *obs2 = stream("t1", NULL), *obs3 = stream("t1", NULL);
  obs2->req.observe = true;
  obs3->req.observe = true;
  wk_subs_watch(f->subs, obs2, 1700, 0);
  wk_subs_watch(f->subs, own, 1800, 0);
  EXPECT_CORE_EVENTS(1, 0, 0);
  close_stream(f, own, true, 2000); /* the owner broke; an observer still watches */
  EXPECT_CORE_EVENTS(1, 0, 1);
  wk_subs_watch(f->subs, obs3, 2100, 0); /* observing does not re-attach */
  EXPECT_CORE_EVENTS(1, 0, 1);
  assert_int_equal(grace_over(f, 2000 + FX_GRACE - 1), 0);
  assert_int_equal(grace_over(f, 2000 + FX_GRACE), 1);
  assert_string_equal(g_ids[0].bytes, "t1");
  close_stream(f, obs2, true, 2200);
  close_stream(f, obs3, true, 2200);
  EXPECT_CORE_EVENTS(1, 0, 1);
  FX_INV(f->core);
}

/* ---- many watchers on many tasks, in random order ---------------------------------- */

#define R_TASKS 48
#define R_STREAMS 400
#define R_SLOTS 64

static uint64_t r_next(uint64_t *x) { /* splitmix64 */
  uint64_t z = (*x += 0x9e3779b97f4a7c15u);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
  return z ^ (z >> 31);
}

typedef struct r_stream {
  wk_rpc *rpc; /* NULL once closed */
  size_t tasks[MAX_IDS];
  size_t n_tasks;
  bool owner;
  bool progress;
  size_t phases_seen[MAX_IDS]; /* PHASE_CHANGED expected so far, per task */
  bool terminal_seen[MAX_IDS]; /* TERMINAL expected */
} r_stream;

typedef struct r_world {
  fixture *f;
  char ids[R_TASKS][16];
  uint64_t slots[R_TASKS];
  int phase[R_TASKS]; /* 0 builder, 1 calls, 2 writer, 3 converged */
  r_stream streams[R_STREAMS];
  size_t n_streams;
  int owners[R_TASKS]; /* the model's owners per task */
  int attached, detached, disconnected;
  int64_t now;
} r_world;

static void r_check_core(const r_world *w) {
  assert_int_equal(g_core_events.attached, w->attached);
  assert_int_equal(g_core_events.detached, w->detached);
  assert_int_equal(g_core_events.disconnected, w->disconnected);
  /* PROGRESS is wanted of a task exactly while a stream that asked for it waits for
   * the task's TERMINAL */
  for (size_t t = 0; t < R_TASKS; t++) {
    bool want = false;
    for (size_t i = 0; i < w->n_streams; i++) {
      const r_stream *st = &w->streams[i];
      if (st->rpc == NULL || !st->progress) continue;
      for (size_t k = 0; k < st->n_tasks; k++)
        want = want || (st->tasks[k] == t && !st->terminal_seen[k]);
    }
    assert_int_equal(wk_subs_progress_wanted(w->f->subs, w->ids[t], strlen(w->ids[t])), want);
  }
}

/* Every event of stream `st` so far, against the model: one SNAPSHOT per task first,
 * the expected number of PHASE_CHANGED, and one TERMINAL exactly when the task
 * converged while the stream watched it; the stream ended OK once every TERMINAL went. */
static void r_check_stream(const r_world *w, const r_stream *st) {
  const wk_rpc *rpc = st->rpc;
  size_t terminals = 0;
  for (size_t k = 0; k < st->n_tasks; k++) {
    const char *id = w->ids[st->tasks[k]];
    size_t snap = 0, phases = 0, term = 0;
    for (size_t i = 0; i < rpc->n_events; i++) {
      const event *e = &rpc->events[i];
      if (strcmp(e->task_id, id) != 0) continue;
      if (e->kind == SNAPSHOT) {
        assert_int_equal(snap + phases + term, 0); /* the first of its events */
        snap++;
      } else if (e->kind == PHASE_CHANGED) {
        assert_int_equal(term, 0);
        phases++;
      } else if (e->kind == TERMINAL) {
        term++;
      }
    }
    assert_int_equal(snap, 1);
    assert_int_equal(phases, st->phases_seen[k]);
    assert_int_equal(term, st->terminal_seen[k] ? 1 : 0);
    terminals += term;
  }
  assert_int_equal(rpc->ended, terminals == st->n_tasks);
  if (rpc->ended) assert_int_equal(rpc->code, GRPC_STATUS_OK);
}

static void r_open(r_world *w, uint64_t *rng) {
  size_t live[R_TASKS], n_live = 0;
  for (size_t t = 0; t < R_TASKS; t++) {
    if (w->phase[t] < 3) live[n_live++] = t;
  }
  if (n_live == 0 || w->n_streams == R_STREAMS) return;
  r_stream *st = &w->streams[w->n_streams++];
  memset(st, 0, sizeof *st);
  size_t want = 1 + (size_t)(r_next(rng) % MAX_IDS);
  while (st->n_tasks < want && st->n_tasks < n_live) {
    size_t t = live[r_next(rng) % n_live];
    bool dup = false;
    for (size_t k = 0; k < st->n_tasks; k++) dup = dup || st->tasks[k] == t;
    if (!dup) st->tasks[st->n_tasks++] = t;
  }
  wk_rpc *rpc = calloc(1, sizeof *rpc);
  assert_non_null(rpc);
  worker__v1__watch_tasks_request__init(&rpc->req);
  for (size_t k = 0; k < st->n_tasks; k++) {
    snprintf(rpc->id_buf[k], sizeof rpc->id_buf[k], "%s", w->ids[st->tasks[k]]);
    rpc->ids[k] = rpc->id_buf[k];
  }
  rpc->req.n_task_ids = st->n_tasks;
  rpc->req.task_ids = rpc->ids;
  st->owner = r_next(rng) % 4 != 0; /* a quarter observe */
  rpc->req.observe = !st->owner;
  st->progress = r_next(rng) % 2 == 0;
  rpc->req.progress = st->progress;
  st->rpc = rpc;
  for (size_t k = 0; k < st->n_tasks; k++) {
    if (st->owner && w->owners[st->tasks[k]]++ == 0) w->attached++;
  }
  wk_subs_watch(w->f->subs, rpc, w->now, 0);
  assert_true(wk_subs_owns(w->f->subs, rpc));
}

static void r_close(r_world *w, r_stream *st, bool cancelled) {
  bool broken = cancelled || !st->rpc->ended;
  for (size_t k = 0; k < st->n_tasks; k++) {
    size_t t = st->tasks[k];
    if (!st->owner || st->terminal_seen[k]) continue;
    if (--w->owners[t] == 0) {
      if (broken) {
        w->disconnected++;
      } else {
        w->detached++;
      }
    }
  }
  r_check_stream(w, st);
  close_stream(w->f, st->rpc, cancelled, w->now);
  st->rpc = NULL;
}

/* A task moves on a phase (then the turn ends), or converges (cancelled). */
static void r_task_event(r_world *w, size_t t, bool converge) {
  fixture *f = w->f;
  const char *id = w->ids[t];
  size_t len = strlen(id);
  if (converge || w->phase[t] == 2) {
    wk_transition_result out;
    wk_core_handle_abort(f->core, id, len, WK_FAIL_CANCELLED, "stop", w->now, &out);
    assert_int_equal(out.err, WK_OK);
    w->phase[t] = 3;
    w->owners[t] = 0; /* a terminal task needs no detach */
    for (size_t i = 0; i < w->n_streams; i++) {
      r_stream *st = &w->streams[i];
      if (st->rpc == NULL) continue;
      for (size_t k = 0; k < st->n_tasks; k++) {
        if (st->tasks[k] == t) st->terminal_seen[k] = true;
      }
    }
    wk_subs_on_terminal(f->subs, fx_get_at(f->core, id, len, FX_AT), 0);
    return;
  }
  if (w->phase[t] == 0) {
    fx_builder_ok_at(f->core, id, len, w->slots[t], &ctx_a, NULL, false, w->now, FX_AT);
  } else {
    fx_calls_ok_at(f->core, id, len, w->slots[t], &ctx_a, NULL, 0, w->now, FX_AT);
  }
  w->phase[t]++;
  for (size_t i = 0; i < w->n_streams; i++) {
    r_stream *st = &w->streams[i];
    if (st->rpc == NULL) continue;
    for (size_t k = 0; k < st->n_tasks; k++) {
      if (st->tasks[k] == t) st->phases_seen[k]++;
    }
  }
  wk_subs_on_phase(f->subs, fx_get_at(f->core, id, len, FX_AT));
  (void)wk_subs_flush_phases(f->subs, 0);
}

/* Hundreds of streams (owners and observers) on dozens of tasks, opened, closed
 * (cancelled or not) and served in a random order: every stream gets each of its
 * events exactly once, the TERMINAL of a task is one encoding for all, and the core
 * hears one attach for each task's first owner and one detach or disconnect for its
 * last. */
static void test_many_watchers_random_order(void **state) {
  (void)state;
  for (uint64_t seed = 1; seed <= 8; seed++) {
    memset(&g_core_events, 0, sizeof g_core_events);
    wk_core_config cfg = fx_config(R_SLOTS);
    void *core_state = NULL;
    assert_int_equal(fx_setup_cfg(&core_state, &cfg), 0);
    fixture fx = {.core = core_state, .subs = NULL};
    fx.subs = wk_subs_create(fx.core);
    static r_world w;
    memset(&w, 0, sizeof w);
    w.f = &fx;
    w.now = 1000;
    for (size_t t = 0; t < R_TASKS; t++) {
      snprintf(w.ids[t], sizeof w.ids[t], "r%zu", t);
      w.slots[t] = fx_run_to_builder_at(fx.core, w.ids[t], strlen(w.ids[t]), &ctx_a, w.now, FX_AT);
    }
    uint64_t rng = seed;
    for (int step = 0; step < 3000; step++) {
      w.now++;
      uint64_t op = r_next(&rng) % 10;
      if (op < 4) {
        r_open(&w, &rng);
      } else if (op < 7) {
        size_t open[R_STREAMS], n_open = 0;
        for (size_t i = 0; i < w.n_streams; i++) {
          if (w.streams[i].rpc != NULL) open[n_open++] = i;
        }
        if (n_open) r_close(&w, &w.streams[open[r_next(&rng) % n_open]], r_next(&rng) % 2 == 0);
      } else {
        size_t t = (size_t)(r_next(&rng) % R_TASKS);
        if (w.phase[t] < 3) r_task_event(&w, t, r_next(&rng) % 8 == 0);
      }
      r_check_core(&w);
    }
    /* what is left converges, then every stream closes */
    for (size_t t = 0; t < R_TASKS; t++) {
      if (w.phase[t] < 3) r_task_event(&w, t, true);
    }
    for (size_t i = 0; i < w.n_streams; i++) {
      r_stream *st = &w.streams[i];
      if (st->rpc == NULL) continue;
      assert_true(st->rpc->ended);
      /* every TERMINAL of one task is the same encoding */
      for (size_t e = 0; e < st->rpc->n_events; e++) {
        if (st->rpc->events[e].kind != TERMINAL) continue;
        for (size_t j = 0; j < i; j++) {
          const wk_rpc *o = w.streams[j].rpc;
          if (o == NULL) continue;
          for (size_t e2 = 0; e2 < o->n_events; e2++) {
            if (o->events[e2].kind == TERMINAL &&
                strcmp(o->events[e2].task_id, st->rpc->events[e].task_id) == 0) {
              assert_ptr_equal(o->events[e2].body, st->rpc->events[e].body);
            }
          }
        }
      }
    }
    for (size_t i = 0; i < w.n_streams; i++) {
      if (w.streams[i].rpc != NULL) r_close(&w, &w.streams[i], false);
    }
    r_check_core(&w);
    assert_int_equal(wk_subs_streams(fx.subs), 0);
    assert_true(w.attached > 20);
    assert_true(w.disconnected > 5);
    fx_inv_at(fx.core, FX_AT);
    wk_subs_destroy(fx.subs);
    wk_core_destroy(fx.core);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_first_attach, setup, teardown),
      cmocka_unit_test_setup_teardown(test_last_detach, setup, teardown),
      cmocka_unit_test_setup_teardown(test_observers_never_own, setup, teardown),
      cmocka_unit_test_setup_teardown(test_several_streams_on_one_task, setup, teardown),
      cmocka_unit_test_setup_teardown(test_finished_task_encoded_once, setup, teardown),
      cmocka_unit_test_setup_teardown(test_phases_coalesce_terminal_never_skipped, setup, teardown),
      cmocka_unit_test_setup_teardown(test_reattach_within_grace, setup, teardown),
      cmocka_unit_test_setup_teardown(test_grace_expiry_owner_lost, setup, teardown),
      cmocka_unit_test_setup_teardown(test_unknown_task_not_found, setup, teardown),
      cmocka_unit_test_setup_teardown(test_full_stream_and_shutdown, setup, teardown),
      cmocka_unit_test(test_many_watchers_random_order),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

/* test_shadow.c: the shadow forwarder (src/adapters/wk_shadow.c) against real targets.
 *
 * Targets, all in this process on loopback:
 *  - the Worker's own gRPC server adapter (wk_grpc_server) with a recording sink: an
 *    "actor" thread stores every SubmitTask it receives (the decoded request packed
 *    again with protobuf-c, and its x-shadow-submit metadata) and answers, optionally
 *    after a delay (a slow target);
 *  - a closed port (a target that is down);
 *  - a plain TCP listener that accepts connections and never reads or answers (a
 *    target that hangs).
 * The sent bytes are packed by protobuf-c as the Worker's clients' would be, so the
 * receiver's re-packing of the decoded request reproduces them exactly when nothing
 * was rewritten. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "adapters/wk_grpc_server.h"
#include "adapters/wk_shadow.h"
#include "worker/v1/worker.pb-c.h"

/* ---- time ------------------------------------------------------------------------ */

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static void sleep_ms(int64_t ms) {
  struct timespec ts = {.tv_sec = (time_t)(ms / 1000), .tv_nsec = (long)((ms % 1000) * 1000000)};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

/* ---- requests -------------------------------------------------------------------- */

typedef struct encoded {
  uint8_t *data;
  size_t len;
  char task_id[32];
} encoded;

/* A valid SubmitTaskRequest for task "shadow-<i>"; with a result handler when asked. */
static encoded make_request(int i, bool with_result_handler) {
  encoded e = {0};
  snprintf(e.task_id, sizeof e.task_id, "shadow-%d", i);
  char type[] = "single";
  char name[] = "fn_echo";
  char payload[64];
  int pn = snprintf(payload, sizeof payload, "{\"n\": %d}", i);
  char rh_type[] = "file";
  char opt_key[] = "path";
  char opt_val[] = "/tmp/shadow-results";
  char label_key[] = "team";
  char label_val[] = "search";

  Worker__V1__FunctionCallConfig fn;
  worker__v1__function_call_config__init(&fn);
  fn.type = type;
  fn.name = name;
  fn.args.data = (uint8_t *)payload;
  fn.args.len = (size_t)pn;

  Worker__V1__ResultHandler__OptionsEntry opt;
  worker__v1__result_handler__options_entry__init(&opt);
  opt.key = opt_key;
  opt.value = opt_val;
  Worker__V1__ResultHandler__OptionsEntry *opts[1] = {&opt};
  Worker__V1__ResultHandler rh;
  worker__v1__result_handler__init(&rh);
  rh.type = rh_type;
  rh.n_options = 1;
  rh.options = opts;

  Worker__V1__SubmitTaskRequest__LabelsEntry label;
  worker__v1__submit_task_request__labels_entry__init(&label);
  label.key = label_key;
  label.value = label_val;
  Worker__V1__SubmitTaskRequest__LabelsEntry *labels[1] = {&label};

  Worker__V1__SubmitTaskRequest req;
  worker__v1__submit_task_request__init(&req);
  req.task_id = e.task_id;
  req.slot_id = (uint64_t)i + 1;
  req.function = &fn;
  req.result_handler = with_result_handler ? &rh : NULL;
  req.timeout_ms = 30000;
  req.n_labels = 1;
  req.labels = labels;

  e.len = worker__v1__submit_task_request__get_packed_size(&req);
  e.data = malloc(e.len);
  assert_non_null(e.data);
  assert_int_equal(worker__v1__submit_task_request__pack(&req, e.data), e.len);
  return e;
}

/* ---- the receiving Worker: wk_grpc_server with a recording sink ------------------- */

typedef struct received {
  uint8_t *data; /* the decoded request packed again */
  size_t len;
  char task_id[32];
  bool has_shadow_md;
  char shadow_md[16];
  bool has_result_handler;
} received;

typedef struct pending {
  struct pending *next;
  wk_rpc *rpc;
} pending;

typedef struct receiver {
  wk_grpc_server *server;
  int port;
  char addr[64];
  pthread_t actor;
  pthread_mutex_t mu;
  pthread_cond_t cv;     /* the actor: work or stop */
  pthread_cond_t rec_cv; /* the test: a request was recorded */
  pending *head, *tail;
  bool stop;
  int64_t delay_ms; /* before each answer */
  received *recs;
  size_t n_recs, cap_recs;
} receiver;

static void receiver_record(receiver *r, wk_rpc *rpc) {
  const Worker__V1__SubmitTaskRequest *req = wk_rpc_request(rpc);
  received rec = {0};
  rec.len = worker__v1__submit_task_request__get_packed_size(req);
  rec.data = malloc(rec.len > 0 ? rec.len : 1);
  assert_non_null(rec.data);
  worker__v1__submit_task_request__pack(req, rec.data);
  snprintf(rec.task_id, sizeof rec.task_id, "%s", req->task_id);
  rec.has_shadow_md =
      wk_rpc_metadata(rpc, WK_SHADOW_METADATA_KEY, rec.shadow_md, sizeof rec.shadow_md);
  rec.has_result_handler = req->result_handler != NULL;
  pthread_mutex_lock(&r->mu);
  if (r->n_recs == r->cap_recs) {
    r->cap_recs = r->cap_recs ? r->cap_recs * 2 : 64;
    r->recs = realloc(r->recs, r->cap_recs * sizeof *r->recs);
    assert_non_null(r->recs);
  }
  r->recs[r->n_recs++] = rec;
  pthread_cond_broadcast(&r->rec_cv);
  pthread_mutex_unlock(&r->mu);
}

static void receiver_answer(wk_rpc *rpc) {
  if (wk_rpc_method_of(rpc) != WK_RPC_SUBMIT_TASK) {
    wk_rpc_fail(rpc, GRPC_STATUS_UNIMPLEMENTED, "not in this test");
    return;
  }
  const Worker__V1__SubmitTaskRequest *req = wk_rpc_request(rpc);
  char md[16];
  Worker__V1__SubmitTaskResponse resp;
  worker__v1__submit_task_response__init(&resp);
  resp.task_id = req->task_id;
  resp.slot_id = req->slot_id;
  resp.state = WORKER__V1__TASK_STATE__TASK_STATE_PREPARING;
  resp.duplicate = wk_rpc_metadata(rpc, WK_SHADOW_METADATA_KEY, md, sizeof md) &&
                   wk_shadow_is_shadow_request(md);
  size_t n = worker__v1__submit_task_response__get_packed_size(&resp);
  uint8_t buf[256];
  assert_true(n <= sizeof buf);
  worker__v1__submit_task_response__pack(&resp, buf);
  wk_rpc_reply(rpc, buf, n);
}

static void *receiver_actor(void *arg) {
  receiver *r = arg;
  pthread_mutex_lock(&r->mu);
  for (;;) {
    while (r->head == NULL && !r->stop) pthread_cond_wait(&r->cv, &r->mu);
    pending *p = r->head;
    if (p == NULL) break; /* stopping and drained */
    r->head = p->next;
    if (r->head == NULL) r->tail = NULL;
    pthread_mutex_unlock(&r->mu);

    if (wk_rpc_method_of(p->rpc) == WK_RPC_SUBMIT_TASK) receiver_record(r, p->rpc);

    pthread_mutex_lock(&r->mu);
    if (r->delay_ms > 0 && !r->stop) {
      struct timespec until = wk_shadow_deadline_in(r->delay_ms);
      while (!r->stop && pthread_cond_timedwait(&r->cv, &r->mu, &until) != ETIMEDOUT) {
      }
    }
    pthread_mutex_unlock(&r->mu);
    receiver_answer(p->rpc);
    wk_rpc_release(p->rpc);
    free(p);
    pthread_mutex_lock(&r->mu);
  }
  pthread_mutex_unlock(&r->mu);
  return NULL;
}

static void receiver_on_rpc(void *ud, wk_rpc *rpc) {
  receiver *r = ud;
  pending *p = calloc(1, sizeof *p);
  assert_non_null(p);
  p->rpc = rpc;
  pthread_mutex_lock(&r->mu);
  if (r->tail != NULL) r->tail->next = p;
  else r->head = p;
  r->tail = p;
  pthread_cond_signal(&r->cv);
  pthread_mutex_unlock(&r->mu);
}

static receiver *receiver_start(int64_t delay_ms) {
  receiver *r = calloc(1, sizeof *r);
  assert_non_null(r);
  r->delay_ms = delay_ms;
  pthread_mutex_init(&r->mu, NULL);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&r->cv, &ca);
  pthread_cond_init(&r->rec_cv, &ca);
  pthread_condattr_destroy(&ca);
  assert_int_equal(pthread_create(&r->actor, NULL, receiver_actor, r), 0);
  wk_grpc_server_config cfg = {.listen_addr = "127.0.0.1:0"};
  wk_grpc_server_sink sink = {.on_rpc = receiver_on_rpc, .on_closed = NULL, .ud = r};
  char err[256];
  int rc = wk_grpc_server_start(&cfg, sink, &r->server, &r->port, err, sizeof err);
  if (rc != 0) fail_msg("cannot start the receiving server: %s", err);
  snprintf(r->addr, sizeof r->addr, "127.0.0.1:%d", r->port);
  return r;
}

static void receiver_stop(receiver *r) {
  pthread_mutex_lock(&r->mu);
  r->delay_ms = 0;
  pthread_mutex_unlock(&r->mu);
  wk_grpc_server_stop(r->server);
  pthread_mutex_lock(&r->mu);
  r->stop = true;
  pthread_cond_broadcast(&r->cv);
  pthread_mutex_unlock(&r->mu);
  pthread_join(r->actor, NULL);
  for (size_t i = 0; i < r->n_recs; i++) free(r->recs[i].data);
  free(r->recs);
  pthread_cond_destroy(&r->rec_cv);
  pthread_cond_destroy(&r->cv);
  pthread_mutex_destroy(&r->mu);
  free(r);
}

static size_t receiver_count(receiver *r) {
  pthread_mutex_lock(&r->mu);
  size_t n = r->n_recs;
  pthread_mutex_unlock(&r->mu);
  return n;
}

/* Waits until at least n requests were recorded, at most timeout_ms; returns the count. */
static size_t receiver_wait(receiver *r, size_t n, int64_t timeout_ms) {
  struct timespec until = wk_shadow_deadline_in(timeout_ms);
  pthread_mutex_lock(&r->mu);
  while (r->n_recs < n) {
    if (pthread_cond_timedwait(&r->rec_cv, &r->mu, &until) == ETIMEDOUT) break;
  }
  size_t got = r->n_recs;
  pthread_mutex_unlock(&r->mu);
  return got;
}

/* ---- targets that are down or hang --------------------------------------------------- */

static int listen_loopback(int *port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  assert_true(fd >= 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
  socklen_t al = sizeof a;
  assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &al), 0);
  *port = ntohs(a.sin_port);
  return fd;
}

/* A loopback port with nothing listening (bound, then closed). */
static int closed_port(void) {
  int port = 0;
  int fd = listen_loopback(&port);
  close(fd);
  return port;
}

typedef struct hang_listener {
  int fd;
  int port;
  int stop_pipe[2];
  pthread_t thread;
  int conns[64];
  size_t n_conns;
} hang_listener;

/* Accepts connections and keeps them open without reading or writing a byte. */
static void *hang_main(void *arg) {
  hang_listener *h = arg;
  for (;;) {
    struct pollfd p[2] = {{.fd = h->fd, .events = POLLIN},
                          {.fd = h->stop_pipe[0], .events = POLLIN}};
    if (poll(p, 2, -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (p[1].revents != 0) break;
    if (p[0].revents & POLLIN) {
      int c = accept4(h->fd, NULL, NULL, SOCK_CLOEXEC);
      if (c < 0) continue;
      if (h->n_conns < sizeof h->conns / sizeof h->conns[0]) h->conns[h->n_conns++] = c;
      else close(c);
    }
  }
  return NULL;
}

static hang_listener *hang_start(void) {
  hang_listener *h = calloc(1, sizeof *h);
  assert_non_null(h);
  h->fd = listen_loopback(&h->port);
  assert_int_equal(listen(h->fd, 16), 0);
  assert_int_equal(pipe2(h->stop_pipe, O_CLOEXEC), 0);
  assert_int_equal(pthread_create(&h->thread, NULL, hang_main, h), 0);
  return h;
}

static size_t hang_stop(hang_listener *h) {
  char b = 'x';
  assert_int_equal(write(h->stop_pipe[1], &b, 1), 1);
  pthread_join(h->thread, NULL);
  size_t n = h->n_conns;
  for (size_t i = 0; i < h->n_conns; i++) close(h->conns[i]);
  close(h->fd);
  close(h->stop_pipe[0]);
  close(h->stop_pipe[1]);
  free(h);
  return n;
}

/* ---- helpers ---------------------------------------------------------------------- */

static wk_shadow *start_shadow(const char *target, double rate, uint32_t capacity,
                               uint32_t deadline_ms, uint64_t seed) {
  wk_shadow_config cfg = {.target = target,
                          .sample_rate = rate,
                          .queue_capacity = capacity,
                          .deadline_ms = deadline_ms,
                          .seed = seed};
  char err[256];
  wk_shadow *s = wk_shadow_start(&cfg, err, sizeof err);
  if (s == NULL) fail_msg("wk_shadow_start: %s", err);
  return s;
}

static void check_balance(const wk_shadow_stats *st) {
  assert_int_equal(st->offered, st->sampled_out + st->dropped + st->enqueued);
  assert_int_equal(st->mirrored + st->failed + st->queued + (st->in_flight ? 1u : 0u),
                   st->enqueued);
}

/* ---- tests ------------------------------------------------------------------------ */

static void test_is_shadow_request(void **state) {
  (void)state;
  assert_true(wk_shadow_is_shadow_request("1"));
  assert_false(wk_shadow_is_shadow_request(NULL));
  assert_false(wk_shadow_is_shadow_request(""));
  assert_false(wk_shadow_is_shadow_request("0"));
  assert_false(wk_shadow_is_shadow_request("true"));
  assert_false(wk_shadow_is_shadow_request("11"));
  assert_false(wk_shadow_is_shadow_request(" 1"));
}

static void test_rejects_bad_config(void **state) {
  (void)state;
  char err[256];
  wk_shadow_config cfg = {.target = NULL, .sample_rate = 0.5};
  assert_null(wk_shadow_start(&cfg, err, sizeof err));
  assert_non_null(strstr(err, "target"));
  cfg.target = "";
  assert_null(wk_shadow_start(&cfg, err, sizeof err));
  cfg.target = "127.0.0.1:1";
  const double bad_rates[] = {-0.1, 1.0001, nan(""), HUGE_VAL};
  for (size_t i = 0; i < sizeof bad_rates / sizeof bad_rates[0]; i++) {
    cfg.sample_rate = bad_rates[i];
    err[0] = '\0';
    assert_null(wk_shadow_start(&cfg, err, sizeof err));
    assert_non_null(strstr(err, "sample_rate"));
  }
  cfg.sample_rate = 1.0;
  cfg.queue_capacity = WK_SHADOW_MAX_QUEUE_CAPACITY + 1;
  assert_null(wk_shadow_start(&cfg, err, sizeof err));
  cfg.queue_capacity = 0;
  cfg.deadline_ms = WK_SHADOW_MAX_DEADLINE_MS + 1;
  assert_null(wk_shadow_start(&cfg, err, sizeof err));
  assert_null(wk_shadow_start(NULL, err, sizeof err));
  wk_shadow_stop(NULL); /* a no-op */
}

/* Every request arrives once, in order, with x-shadow-submit: 1 and its bytes
 * unchanged (result_handler included: the receiver strips it, not the sender). */
static void test_mirrors_bytes_and_metadata(void **state) {
  (void)state;
  receiver *r = receiver_start(0);
  wk_shadow *s = start_shadow(r->addr, 1.0, 0, 0, 1);
  assert_string_equal(wk_shadow_target(s), r->addr);
  enum { N = 200 };
  static encoded sent[N];
  for (int i = 0; i < N; i++) sent[i] = make_request(i, i % 2 == 0);
  for (int i = 0; i < N; i++) wk_shadow_offer(s, sent[i].data, sent[i].len);
  assert_true(wk_shadow_wait_idle(s, 20000));

  wk_shadow_stats st;
  wk_shadow_stats_get(s, &st);
  check_balance(&st);
  assert_int_equal(st.offered, N);
  assert_int_equal(st.sampled_out, 0);
  assert_int_equal(st.dropped, 0);
  assert_int_equal(st.enqueued, N);
  assert_int_equal(st.mirrored, N);
  assert_int_equal(st.failed, 0);
  assert_int_equal(st.queued, 0);
  assert_false(st.in_flight);
  assert_string_equal(st.last_error, "");

  assert_int_equal(receiver_count(r), N);
  for (int i = 0; i < N; i++) {
    const received *rec = &r->recs[i];
    assert_string_equal(rec->task_id, sent[i].task_id);
    assert_true(rec->has_shadow_md);
    assert_string_equal(rec->shadow_md, "1");
    assert_true(wk_shadow_is_shadow_request(rec->shadow_md));
    assert_int_equal(rec->has_result_handler, i % 2 == 0);
    assert_int_equal(rec->len, sent[i].len);
    assert_memory_equal(rec->data, sent[i].data, sent[i].len);
  }
  wk_shadow_stop(s);
  receiver_stop(r);
  for (int i = 0; i < N; i++) free(sent[i].data);
}

static void test_sample_rate_zero_sends_nothing(void **state) {
  (void)state;
  receiver *r = receiver_start(0);
  wk_shadow *s = start_shadow(r->addr, 0.0, 0, 0, 7);
  encoded e = make_request(1, true);
  for (int i = 0; i < 500; i++) wk_shadow_offer(s, e.data, e.len);
  assert_true(wk_shadow_wait_idle(s, 5000));
  wk_shadow_stats st;
  wk_shadow_stats_get(s, &st);
  check_balance(&st);
  assert_int_equal(st.offered, 500);
  assert_int_equal(st.sampled_out, 500);
  assert_int_equal(st.enqueued, 0);
  assert_int_equal(st.mirrored, 0);
  wk_shadow_stop(s);
  /* nothing can still be on its way: the forwarder has stopped */
  assert_int_equal(receiver_count(r), 0);
  receiver_stop(r);
  free(e.data);
}

/* Runs 1000 offers at rate 0.5 with `seed`; returns the count mirrored and writes the
 * task ids received, in order, into ids (a '\n'-joined string). */
static size_t run_half(receiver *r, uint64_t seed, char *ids, size_t ids_len) {
  enum { N = 1000 };
  size_t before = receiver_count(r);
  wk_shadow *s = start_shadow(r->addr, 0.5, 2048, 0, seed);
  static encoded sent[N];
  for (int i = 0; i < N; i++) sent[i] = make_request(i, false);
  for (int i = 0; i < N; i++) wk_shadow_offer(s, sent[i].data, sent[i].len);
  assert_true(wk_shadow_wait_idle(s, 30000));
  wk_shadow_stats st;
  wk_shadow_stats_get(s, &st);
  check_balance(&st);
  assert_int_equal(st.offered, N);
  assert_int_equal(st.dropped, 0);
  assert_int_equal(st.failed, 0);
  assert_int_equal(st.mirrored, st.enqueued);
  assert_int_equal(st.sampled_out + st.enqueued, N);
  /* Binomial(1000, 0.5): sd ~ 16; 400..600 is beyond 6 sd either way. */
  assert_in_range(st.enqueued, 400, 600);
  wk_shadow_stop(s);
  size_t after = receiver_count(r);
  assert_int_equal(after - before, st.enqueued);
  size_t off = 0;
  ids[0] = '\0';
  pthread_mutex_lock(&r->mu);
  for (size_t i = before; i < after && off < ids_len; i++) {
    int n = snprintf(ids + off, ids_len - off, "%s\n", r->recs[i].task_id);
    if (n > 0) off += (size_t)n;
  }
  pthread_mutex_unlock(&r->mu);
  for (int i = 0; i < N; i++) free(sent[i].data);
  print_message("rate 0.5, seed %llu: %llu of %d mirrored\n", (unsigned long long)seed,
                (unsigned long long)st.enqueued, N);
  return (size_t)st.enqueued;
}

static void test_sample_rate_half_is_seeded(void **state) {
  (void)state;
  receiver *r = receiver_start(0);
  static char a[32768], b[32768], c[32768];
  size_t na = run_half(r, 12345, a, sizeof a);
  size_t nb = run_half(r, 12345, b, sizeof b);
  size_t nc = run_half(r, 999, c, sizeof c);
  assert_int_equal(na, nb);
  assert_string_equal(a, b); /* the same seed picks the same requests */
  (void)nc;
  assert_string_not_equal(a, c); /* another seed picks others */
  receiver_stop(r);
}

/* Nothing listens: offers return at once, every mirrored request fails as unreachable. */
static void test_target_down(void **state) {
  (void)state;
  char addr[64];
  snprintf(addr, sizeof addr, "127.0.0.1:%d", closed_port());
  wk_shadow *s = start_shadow(addr, 1.0, 0, 1000, 3);
  encoded e = make_request(1, true);
  double t0 = now_ms();
  for (int i = 0; i < 100; i++) wk_shadow_offer(s, e.data, e.len);
  double dt = now_ms() - t0;
  print_message("100 offers to a down target: %.3f ms\n", dt);
  assert_true(dt < 50.0);
  assert_true(wk_shadow_wait_idle(s, 20000));
  wk_shadow_stats st;
  wk_shadow_stats_get(s, &st);
  check_balance(&st);
  assert_int_equal(st.offered, 100);
  assert_int_equal(st.enqueued, 100);
  assert_int_equal(st.mirrored, 0);
  assert_int_equal(st.failed, 100);
  assert_int_equal(st.unreachable, 100);
  assert_int_equal(st.last_error_code, GRPC_STATUS_UNAVAILABLE);
  assert_non_null(strstr(st.last_error, "UNAVAILABLE"));
  print_message("last error: %s\n", st.last_error);

  /* still failing fast, still counting */
  for (int i = 0; i < 10; i++) wk_shadow_offer(s, e.data, e.len);
  assert_true(wk_shadow_wait_idle(s, 20000));
  wk_shadow_stats_get(s, &st);
  assert_int_equal(st.failed, 110);
  t0 = now_ms();
  wk_shadow_stop(s);
  assert_true(now_ms() - t0 < 1000.0);
  free(e.data);
}

/* TCP accepted, never answered: offers never block, the queue fills and drops are
 * counted, each request in flight fails at its deadline, stop returns within the
 * deadline plus a second. */
static void test_target_hangs(void **state) {
  (void)state;
  hang_listener *h = hang_start();
  char addr[64];
  snprintf(addr, sizeof addr, "127.0.0.1:%d", h->port);
  const uint32_t deadline_ms = 1000;
  const uint32_t capacity = 64;
  wk_shadow *s = start_shadow(addr, 1.0, capacity, deadline_ms, 5);
  encoded e = make_request(1, true);

  double t0 = now_ms();
  for (int i = 0; i < 10000; i++) wk_shadow_offer(s, e.data, e.len);
  double dt = now_ms() - t0;
  print_message("10000 offers to a hung target: %.3f ms\n", dt);
  assert_true(dt < 100.0);

  wk_shadow_stats st;
  wk_shadow_stats_get(s, &st);
  check_balance(&st);
  assert_int_equal(st.offered, 10000);
  /* at most the capacity plus the one taken by the forwarder got in */
  assert_true(st.enqueued <= capacity + 1);
  assert_true(st.dropped >= 10000 - capacity - 1);
  assert_int_equal(st.mirrored, 0);
  assert_true(st.queued >= capacity - 1);

  /* the request in flight fails at its deadline, the next one goes out */
  double waited = 0;
  t0 = now_ms();
  do {
    wk_shadow_stats_get(s, &st);
    if (st.failed >= 1) break;
    sleep_ms(20);
    waited = now_ms() - t0;
  } while (waited < deadline_ms * 3.0);
  assert_true(st.failed >= 1);
  assert_int_equal(st.last_error_code, GRPC_STATUS_DEADLINE_EXCEEDED);
  assert_true(st.unreachable >= 1);
  print_message("first failure after %.0f ms: %s\n", now_ms() - t0, st.last_error);
  assert_false(wk_shadow_wait_idle(s, 0));

  /* still never blocks while a request hangs */
  t0 = now_ms();
  for (int i = 0; i < 10000; i++) wk_shadow_offer(s, e.data, e.len);
  dt = now_ms() - t0;
  assert_true(dt < 100.0);
  wk_shadow_stats_get(s, &st);
  check_balance(&st);
  assert_int_equal(st.offered, 20000);
  assert_true(st.dropped >= 20000 - 2 * (capacity + 1) - st.failed);

  t0 = now_ms();
  wk_shadow_stop(s);
  dt = now_ms() - t0;
  print_message("stop with a request in flight and %u queued: %.0f ms\n", st.queued, dt);
  assert_true(dt < deadline_ms + 1000.0);
  size_t conns = hang_stop(h);
  assert_true(conns >= 1); /* the target did accept TCP */
  free(e.data);
}

/* A slow target: answers inside the deadline count as mirrored, answers past it as
 * failed; the offers never wait for either. */
static void test_slow_target(void **state) {
  (void)state;
  receiver *r = receiver_start(150);
  wk_shadow *s = start_shadow(r->addr, 1.0, 0, 2000, 9);
  encoded e = make_request(1, false);
  double t0 = now_ms();
  for (int i = 0; i < 5; i++) wk_shadow_offer(s, e.data, e.len);
  double dt = now_ms() - t0;
  assert_true(dt < 20.0);
  assert_true(wk_shadow_wait_idle(s, 10000));
  wk_shadow_stats st;
  wk_shadow_stats_get(s, &st);
  assert_int_equal(st.mirrored, 5);
  assert_int_equal(st.failed, 0);
  wk_shadow_stop(s);

  pthread_mutex_lock(&r->mu);
  r->delay_ms = 1000;
  pthread_mutex_unlock(&r->mu);
  s = start_shadow(r->addr, 1.0, 0, 200, 9);
  t0 = now_ms();
  for (int i = 0; i < 3; i++) wk_shadow_offer(s, e.data, e.len);
  dt = now_ms() - t0;
  assert_true(dt < 20.0);
  assert_true(wk_shadow_wait_idle(s, 10000));
  wk_shadow_stats_get(s, &st);
  check_balance(&st);
  assert_int_equal(st.mirrored, 0);
  assert_int_equal(st.failed, 3);
  assert_int_equal(st.last_error_code, GRPC_STATUS_DEADLINE_EXCEEDED);
  assert_true(receiver_wait(r, 5 + 3, 5000) >= 5 + 3); /* they did arrive, slowly answered */
  t0 = now_ms();
  wk_shadow_stop(s);
  assert_true(now_ms() - t0 < 200.0 + 1000.0);
  receiver_stop(r);
  free(e.data);
}

/* Stop while requests are queued behind a slow answer: within the deadline + 1 s, the
 * rest discarded. */
static void test_stop_discards_queue(void **state) {
  (void)state;
  receiver *r = receiver_start(5000);
  const uint32_t deadline_ms = 500;
  wk_shadow *s = start_shadow(r->addr, 1.0, 0, deadline_ms, 11);
  encoded e = make_request(1, true);
  for (int i = 0; i < 100; i++) wk_shadow_offer(s, e.data, e.len);
  assert_int_equal(receiver_wait(r, 1, 5000), 1); /* the first is in flight */
  double t0 = now_ms();
  wk_shadow_stop(s);
  double dt = now_ms() - t0;
  print_message("stop with 99 queued: %.0f ms\n", dt);
  assert_true(dt < deadline_ms + 1000.0);
  receiver_stop(r);
  free(e.data);
}

typedef struct offer_arg {
  wk_shadow *s;
  const encoded *e;
  int n;
} offer_arg;

static void *offer_thread(void *arg) {
  const offer_arg *a = arg;
  for (int i = 0; i < a->n; i++) wk_shadow_offer(a->s, a->e->data, a->e->len);
  return NULL;
}

/* Offers from several threads at once, stats read meanwhile: the counts add up. */
static void test_concurrent_offers(void **state) {
  (void)state;
  receiver *r = receiver_start(0);
  wk_shadow *s = start_shadow(r->addr, 0.75, 4096, 0, 13);
  encoded e = make_request(1, true);
  enum { T = 4, PER = 500 };
  pthread_t th[T];
  offer_arg a = {.s = s, .e = &e, .n = PER};
  for (int i = 0; i < T; i++) assert_int_equal(pthread_create(&th[i], NULL, offer_thread, &a), 0);
  for (int k = 0; k < 20; k++) {
    wk_shadow_stats st;
    wk_shadow_stats_get(s, &st);
    check_balance(&st);
  }
  for (int i = 0; i < T; i++) pthread_join(th[i], NULL);
  assert_true(wk_shadow_wait_idle(s, 30000));
  wk_shadow_stats st;
  wk_shadow_stats_get(s, &st);
  check_balance(&st);
  assert_int_equal(st.offered, T * PER);
  assert_int_equal(st.dropped, 0);
  assert_int_equal(st.mirrored, st.enqueued);
  assert_int_equal(receiver_count(r), st.mirrored);
  wk_shadow_stop(s);
  receiver_stop(r);
  free(e.data);
}

/* The byte bound: a request larger than max_queued_bytes is dropped, one that fits passes. */
static void test_byte_bound(void **state) {
  (void)state;
  receiver *r = receiver_start(0);
  encoded e = make_request(1, false);
  wk_shadow_config cfg = {.target = r->addr, .sample_rate = 1.0, .max_queued_bytes = e.len};
  char err[256];
  wk_shadow *s = wk_shadow_start(&cfg, err, sizeof err);
  assert_non_null(s);
  uint8_t *big = calloc(1, e.len + 1);
  assert_non_null(big);
  wk_shadow_offer(s, big, e.len + 1);
  wk_shadow_offer(s, e.data, e.len);
  assert_true(wk_shadow_wait_idle(s, 5000));
  wk_shadow_stats st;
  wk_shadow_stats_get(s, &st);
  check_balance(&st);
  assert_int_equal(st.dropped, 1);
  assert_int_equal(st.mirrored, 1);
  wk_shadow_stop(s);
  assert_int_equal(receiver_count(r), 1);
  receiver_stop(r);
  free(big);
  free(e.data);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_is_shadow_request),
      cmocka_unit_test(test_rejects_bad_config),
      cmocka_unit_test(test_mirrors_bytes_and_metadata),
      cmocka_unit_test(test_sample_rate_zero_sends_nothing),
      cmocka_unit_test(test_sample_rate_half_is_seeded),
      cmocka_unit_test(test_target_down),
      cmocka_unit_test(test_target_hangs),
      cmocka_unit_test(test_slow_target),
      cmocka_unit_test(test_stop_discards_queue),
      cmocka_unit_test(test_concurrent_offers),
      cmocka_unit_test(test_byte_bound),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

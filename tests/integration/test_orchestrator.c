/* Adapter integration: the orchestrator and the real gRPC server in-process, with a
 * fake executor adapter (no Python). A real gRPC client (wk_grpc_client) drives it.
 * The fake answers a call by its args: "fail" → a call error, "retry" → a retryable
 * error, "hang" → never (until cancelled), anything else → echoes the args.
 * The second half tests the actor invariants I1-I5 (src/app/wk_orchestrator.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>
#include <uv.h>

#include <grpc/grpc.h>

#include "adapters/wk_grpc_client.h"
#include "adapters/wk_grpc_server.h"
#include "app/wk_fs.h"
#include "app/wk_orchestrator.h"
#include "worker/v1/worker.pb-c.h"

/* ---- the fake executor adapter (runs on the loop thread) ------------------------- */

typedef struct fake_call {
  struct fake_call *next;
  uv_timer_t timer;
  void *ctx;
  char args[256];
  bool cancelled;
  bool answered;
} fake_call;

typedef struct fake_exec {
  wk_orch *orch;
  uv_loop_t *loop;
  /* written on the loop thread, read by the test's thread: atomic */
  atomic_int submitted, cancelled, answered;
  uint32_t last_deadline_ms;  /* the last spec's relative deadline */
  char last_scratch_dir[256]; /* the last spec's scratch directory */
} fake_exec;

static fake_exec fake;
/* guards fake.last_*: the loop thread writes them, the test's thread reads them */
static pthread_mutex_t fake_mu = PTHREAD_MUTEX_INITIALIZER;

static void fake_free(uv_handle_t *h) { free(h->data); }

static void fake_answer(uv_timer_t *t) {
  fake_call *c = t->data;
  if (!c->cancelled) {
    c->answered = true;
    fake.answered++;
    wk_call_outcome o = {.status = WK_CALL_OK, .content_type = WK_FRAME_CONTENT_JSON};
    if (strcmp(c->args, "\"fail\"") == 0) {
      o.status = WK_CALL_ERROR;
      o.error_type = wk_frame_bytes_cstr("ValueError");
      o.error_message = wk_frame_bytes_cstr("asked to fail");
    } else if (strcmp(c->args, "\"retry\"") == 0) {
      o.status = WK_CALL_RETRYABLE;
      o.error_type = wk_frame_bytes_cstr("Retryable");
      o.error_message = wk_frame_bytes_cstr("asked to retry");
    } else {
      o.output = wk_frame_bytes_cstr(c->args);
    }
    wk_orch_on_call_result(fake.orch, c->ctx, &o);
  }
  uv_close((uv_handle_t *)&c->timer, fake_free);
}

static void *fake_submit(void *impl, const wk_call_spec *spec, void *ctx) {
  (void)impl;
  fake_call *c = calloc(1, sizeof *c);
  c->ctx = ctx;
  snprintf(c->args, sizeof c->args, "%.*s", (int)spec->args.len, (const char *)spec->args.ptr);
  pthread_mutex_lock(&fake_mu);
  fake.last_deadline_ms = spec->deadline_ms;
  snprintf(fake.last_scratch_dir, sizeof fake.last_scratch_dir, "%s", spec->scratch_dir);
  pthread_mutex_unlock(&fake_mu);
  fake.submitted++; /* after the last_* fields: the test reads them once it sees this */
  uv_timer_init(fake.loop, &c->timer);
  c->timer.data = c;
  if (strcmp(c->args, "\"hang\"") != 0) uv_timer_start(&c->timer, fake_answer, 1, 0);
  return c;
}

static void fake_cancel(void *impl, void *handle) {
  (void)impl;
  fake_call *c = handle;
  fake.cancelled++;
  c->cancelled = true;
  uv_timer_stop(&c->timer);
  uv_close((uv_handle_t *)&c->timer, fake_free);
}

/* ---- the worker under test ---------------------------------------------------------- */

typedef struct harness {
  uv_loop_t loop;
  uv_async_t stop;
  uv_async_t block; /* parks the loop thread until unblock_loop (I1) */
  pthread_mutex_t block_mu;
  pthread_cond_t block_cv;
  bool blocked, parked;
  pthread_t thread;
  wk_orch *orch;
  wk_grpc_server *server;
  wk_grpc_client *client;
  char dir[64];
  char target[64];
  wk_builder_registry builders;
} harness;

static void on_stop(uv_async_t *a) {
  harness *h = a->data;
  wk_orch_close(h->orch);
  uv_close((uv_handle_t *)&h->stop, NULL);
  uv_close((uv_handle_t *)&h->block, NULL);
}

/* On the loop thread: park until unblock_loop. */
static void on_block(uv_async_t *a) {
  harness *h = a->data;
  pthread_mutex_lock(&h->block_mu);
  h->parked = true;
  pthread_cond_broadcast(&h->block_cv);
  while (h->blocked) pthread_cond_wait(&h->block_cv, &h->block_mu);
  h->parked = false;
  pthread_mutex_unlock(&h->block_mu);
}

/* Parks the loop thread; returns once it is parked (nothing of the worker runs). */
static void block_loop(harness *h) {
  pthread_mutex_lock(&h->block_mu);
  h->blocked = true;
  uv_async_send(&h->block);
  while (!h->parked) pthread_cond_wait(&h->block_cv, &h->block_mu);
  pthread_mutex_unlock(&h->block_mu);
}

static void unblock_loop(harness *h) {
  pthread_mutex_lock(&h->block_mu);
  h->blocked = false;
  pthread_cond_broadcast(&h->block_cv);
  pthread_mutex_unlock(&h->block_mu);
}

static void *loop_main(void *arg) {
  harness *h = arg;
  uv_run(&h->loop, UV_RUN_DEFAULT);
  return NULL;
}

static void write_file(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fputs(text, f);
  fclose(f);
}

/* The result handler (writer) submit_with asks for; NULL = none (outputs inline). */
static const char *submit_handler;
/* One label ("run" = submit_run) submit_with adds when not NULL. */
static const char *submit_run;

/* Changes the test's orchestrator configuration before it is created (NULL = none). */
static void (*tweak_config)(wk_orch_config *cfg);

static int setup(void **state) {
  harness *h = calloc(1, sizeof *h);
  snprintf(h->dir, sizeof h->dir, "/tmp/wk-orch-test-XXXXXX");
  assert_non_null(mkdtemp(h->dir));
  char path[256];
  snprintf(path, sizeof path, "%s/code", h->dir);
  mkdir(path, 0700);
  snprintf(path, sizeof path, "%s/code/fn", h->dir);
  mkdir(path, 0700);
  snprintf(path, sizeof path, "%s/code/fn/1", h->dir);
  mkdir(path, 0700);
  snprintf(path, sizeof path, "%s/code/fn/CURRENT", h->dir);
  write_file(path, "1\n");
  snprintf(path, sizeof path, "%s/scratch", h->dir);
  mkdir(path, 0700);

  static char code_root[128], scratch_root[128];
  snprintf(code_root, sizeof code_root, "%s/code", h->dir);
  snprintf(scratch_root, sizeof scratch_root, "%s/scratch", h->dir);
  wk_builder_registry_add(&h->builders, "single");
  wk_orch_config cfg = {
      .code_root = code_root,
      .scratch_root = scratch_root,
      .tick_ms = 50,
      .max_inline_output_bytes = 1 << 20,
      .max_calls_per_task = 1000,
      .builders = &h->builders,
  };
  wk_core_config_default(&cfg.core);
  cfg.core.task_slots = 2;
  wk_disp_config_default(&cfg.calls.disp);
  cfg.calls.escalation_budget_ms = 100;
  if (tweak_config) tweak_config(&cfg);
  char err[256];
  uv_loop_init(&h->loop);
  h->orch = wk_orch_create(&h->loop, &cfg, err, sizeof err);
  assert_non_null(h->orch);
  memset(&fake, 0, sizeof fake);
  fake.orch = h->orch;
  fake.loop = &h->loop;
  wk_orch_set_executor(h->orch, (wk_exec_adapter){.submit = fake_submit, .cancel = fake_cancel});
  wk_orch_set_capacity(h->orch, 8);
  wk_orch_set_ready(h->orch, true);
  uv_async_init(&h->loop, &h->stop, on_stop);
  h->stop.data = h;
  uv_async_init(&h->loop, &h->block, on_block);
  h->block.data = h;
  pthread_mutex_init(&h->block_mu, NULL);
  pthread_cond_init(&h->block_cv, NULL);

  grpc_init();
  wk_grpc_server_config scfg = {.listen_addr = "127.0.0.1:0",
                                .max_message_bytes = 1 << 20,
                                .max_ttl_ms = 600000,
                                .max_timeout_ms = 3600000,
                                .max_watch_tasks = 16,
                                .max_stream_queue = 64};
  int port = 0;
  assert_int_equal(
      wk_grpc_server_start(&scfg, wk_orch_sink(h->orch), &h->server, &port, err, sizeof err), 0);
  pthread_create(&h->thread, NULL, loop_main, h);
  snprintf(h->target, sizeof h->target, "127.0.0.1:%d", port);
  assert_int_equal(wk_grpc_client_open(h->target, NULL, &h->client, err, sizeof err), 0);
  *state = h;
  return 0;
}

static int teardown(void **state) {
  harness *h = *state;
  wk_grpc_client_close(h->client);
  wk_grpc_server_stop(h->server);
  uv_async_send(&h->stop);
  pthread_join(h->thread, NULL);
  uv_run(&h->loop, UV_RUN_DEFAULT);
  assert_int_equal(uv_loop_close(&h->loop), 0);
  grpc_shutdown();
  wk_fs_remove_tree(h->dir);
  pthread_mutex_destroy(&h->block_mu);
  pthread_cond_destroy(&h->block_cv);
  free(h);
  tweak_config = NULL;
  submit_handler = NULL;
  submit_run = NULL;
  return 0;
}

/* ---- client helpers ----------------------------------------------------------------- */

/* SubmitTask of function "fn" with `args`; `retry` may be NULL; `st` (may be NULL)
 * gets the status. */
static grpc_status_code submit_with(harness *h, const char *task_id, const char *args,
                                    uint64_t timeout_ms, const Worker__V1__CallRetryPolicy *retry,
                                    Worker__V1__SubmitTaskResponse **resp, wk_grpc_status *st) {
  Worker__V1__FunctionCallConfig fn = WORKER__V1__FUNCTION_CALL_CONFIG__INIT;
  fn.name = (char *)(uintptr_t) "fn";
  fn.args.data = (uint8_t *)(uintptr_t)args;
  fn.args.len = strlen(args);
  Worker__V1__SubmitTaskRequest req = WORKER__V1__SUBMIT_TASK_REQUEST__INIT;
  req.task_id = (char *)(uintptr_t)task_id;
  req.function = &fn;
  req.timeout_ms = timeout_ms;
  req.call_retry_policy = (Worker__V1__CallRetryPolicy *)(uintptr_t)retry;
  Worker__V1__ResultHandler handler = WORKER__V1__RESULT_HANDLER__INIT;
  if (submit_handler) {
    handler.type = (char *)(uintptr_t)submit_handler;
    req.result_handler = &handler;
  }
  Worker__V1__SubmitTaskRequest__LabelsEntry label =
      WORKER__V1__SUBMIT_TASK_REQUEST__LABELS_ENTRY__INIT;
  Worker__V1__SubmitTaskRequest__LabelsEntry *labels[1] = {&label};
  if (submit_run) {
    label.key = (char *)(uintptr_t) "run";
    label.value = (char *)(uintptr_t)submit_run;
    req.labels = labels;
    req.n_labels = 1;
  }
  uint8_t buf[1024];
  size_t n = worker__v1__submit_task_request__pack(&req, buf);
  wk_grpc_buf out = {0};
  wk_grpc_status local;
  if (!st) st = &local;
  grpc_status_code code = wk_grpc_client_unary(h->client, "/worker.v1.WorkerService/SubmitTask",
                                               buf, n, NULL, 0, 5000, &out, st);
  if (resp)
    *resp = code == GRPC_STATUS_OK
                ? worker__v1__submit_task_response__unpack(NULL, out.len, out.data)
                : NULL;
  wk_grpc_buf_free(&out);
  return code;
}

static grpc_status_code submit(harness *h, const char *task_id, const char *args,
                               uint64_t timeout_ms, Worker__V1__SubmitTaskResponse **resp) {
  return submit_with(h, task_id, args, timeout_ms, NULL, resp, NULL);
}

/* One unary call of WorkerService `method` with `req` (small); the reply's bytes land
 * in *out (the caller frees them). */
static grpc_status_code unary(harness *h, const char *method, const ProtobufCMessage *req,
                              wk_grpc_buf *out) {
  uint8_t buf[256];
  assert_true(protobuf_c_message_get_packed_size(req) <= sizeof buf);
  size_t n = protobuf_c_message_pack(req, buf);
  char path[96];
  snprintf(path, sizeof path, "/worker.v1.WorkerService/%s", method);
  wk_grpc_status st;
  return wk_grpc_client_unary(h->client, path, buf, n, NULL, 0, 5000, out, &st);
}

static Worker__V1__TaskResult *get(harness *h, const char *task_id, grpc_status_code *code) {
  Worker__V1__GetTaskResultRequest req = WORKER__V1__GET_TASK_RESULT_REQUEST__INIT;
  req.task_id = (char *)(uintptr_t)task_id;
  wk_grpc_buf out = {0};
  *code = unary(h, "GetTaskResult", &req.base, &out);
  Worker__V1__TaskResult *r =
      *code == GRPC_STATUS_OK ? worker__v1__task_result__unpack(NULL, out.len, out.data) : NULL;
  wk_grpc_buf_free(&out);
  return r;
}

static Worker__V1__TaskResult *wait_terminal(harness *h, const char *task_id) {
  for (int i = 0; i < 500; i++) {
    grpc_status_code code;
    Worker__V1__TaskResult *r = get(h, task_id, &code);
    assert_int_equal(code, GRPC_STATUS_OK);
    if (r->state >= WORKER__V1__TASK_STATE__TASK_STATE_SUCCEEDED) return r;
    worker__v1__task_result__free_unpacked(r, NULL);
    usleep(10000);
  }
  fail_msg("task %s did not finish", task_id);
  return NULL;
}

/* ---- tests ---------------------------------------------------------------------------- */

static void test_submit_runs_one_call_and_echoes(void **state) {
  harness *h = *state;
  Worker__V1__SubmitTaskResponse *resp;
  assert_int_equal(submit(h, "t1", "{\"x\":1}", 0, &resp), GRPC_STATUS_OK);
  assert_false(resp->duplicate);
  assert_int_not_equal(resp->slot_id, 0);
  worker__v1__submit_task_response__free_unpacked(resp, NULL);
  Worker__V1__TaskResult *r = wait_terminal(h, "t1");
  assert_int_equal(r->state, WORKER__V1__TASK_STATE__TASK_STATE_SUCCEEDED);
  assert_int_equal(r->code_epoch, 1);
  assert_int_equal(r->n_outputs, 1);
  assert_int_equal(r->outputs[0]->value.len, 7);
  assert_memory_equal(r->outputs[0]->value.data, "{\"x\":1}", 7);
  assert_int_equal(r->statistic->calls_total, 1);
  worker__v1__task_result__free_unpacked(r, NULL);
  assert_int_equal(fake.submitted, 1);
}

/* A client on a connection of its own (direct_connection: the channel runs on the one
 * socket the client connected) submits and reads a task like any other. */
static void test_direct_connection_client_runs_a_task(void **state) {
  harness *h = *state;
  wk_grpc_client_close(h->client);
  h->client = NULL;
  wk_grpc_client_options opt = {.direct_connection = true, .no_retries = true};
  char err[256];
  assert_int_equal(wk_grpc_client_open(h->target, &opt, &h->client, err, sizeof err), 0);
  Worker__V1__SubmitTaskResponse *resp;
  assert_int_equal(submit(h, "direct-1", "[7]", 0, &resp), GRPC_STATUS_OK);
  worker__v1__submit_task_response__free_unpacked(resp, NULL);
  Worker__V1__TaskResult *r = wait_terminal(h, "direct-1");
  assert_int_equal(r->state, WORKER__V1__TASK_STATE__TASK_STATE_SUCCEEDED);
  assert_int_equal(r->n_outputs, 1);
  assert_memory_equal(r->outputs[0]->value.data, "[7]", 3);
  worker__v1__task_result__free_unpacked(r, NULL);
}

/* A direct connection is made at open: a port nobody listens on, a target that is not
 * host:port and TLS options each fail there, with a reason, and leave no client. */
static void test_direct_connection_refusals(void **state) {
  (void)state;
  int s = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  assert_int_equal(bind(s, (struct sockaddr *)&sa, sizeof sa), 0);
  socklen_t sl = sizeof sa;
  assert_int_equal(getsockname(s, (struct sockaddr *)&sa, &sl), 0);
  close(s); /* nobody listens there now */
  char target[64], err[256];
  snprintf(target, sizeof target, "127.0.0.1:%d", ntohs(sa.sin_port));
  wk_grpc_client_options opt = {.direct_connection = true};
  static char sentinel;
  wk_grpc_client *c = (wk_grpc_client *)(void *)&sentinel; /* must come back NULL */
  assert_int_equal(wk_grpc_client_open(target, &opt, &c, err, sizeof err), -1);
  assert_null(c);
  assert_non_null(strstr(err, target));
  assert_non_null(strstr(err, "refused"));
  assert_int_equal(wk_grpc_client_open("dns:///localhost:1", &opt, &c, err, sizeof err), -2);
  assert_non_null(strstr(err, "host:port"));
  assert_int_equal(wk_grpc_client_open("localhost", &opt, &c, err, sizeof err), -2);
  opt.server_name = "worker.example";
  assert_int_equal(wk_grpc_client_open(target, &opt, &c, err, sizeof err), -2);
  assert_non_null(strstr(err, "plaintext"));
  assert_null(c);
}

static void test_failed_call_fails_the_task(void **state) {
  harness *h = *state;
  assert_int_equal(submit(h, "t-fail", "\"fail\"", 0, NULL), GRPC_STATUS_OK);
  Worker__V1__TaskResult *r = wait_terminal(h, "t-fail");
  assert_int_equal(r->state, WORKER__V1__TASK_STATE__TASK_STATE_FAILED);
  assert_int_equal(r->failure_code, WORKER__V1__FAILURE_CODE__FAILURE_CODE_CALL_FAILED);
  assert_non_null(strstr(r->failure_message, "ValueError: asked to fail"));
  assert_int_equal(r->outputs[0]->outcome_case, WORKER__V1__CALL_OUTPUT__OUTCOME_ERROR);
  worker__v1__task_result__free_unpacked(r, NULL);
}

static void test_duplicate_submit_runs_once(void **state) {
  harness *h = *state;
  Worker__V1__SubmitTaskResponse *a, *b;
  assert_int_equal(submit(h, "t-dup", "1", 0, &a), GRPC_STATUS_OK);
  assert_int_equal(submit(h, "t-dup", "1", 0, &b), GRPC_STATUS_OK);
  assert_false(a->duplicate);
  assert_true(b->duplicate);
  assert_int_equal(a->slot_id, b->slot_id);
  worker__v1__submit_task_response__free_unpacked(a, NULL);
  worker__v1__submit_task_response__free_unpacked(b, NULL);
  worker__v1__task_result__free_unpacked(wait_terminal(h, "t-dup"), NULL);
  assert_int_equal(submit(h, "t-dup", "2", 0, NULL), GRPC_STATUS_ALREADY_EXISTS);
  assert_int_equal(fake.submitted, 1);
}

static void test_timeout_cancels_the_call_and_frees_the_slot(void **state) {
  harness *h = *state;
  assert_int_equal(submit(h, "t-hang", "\"hang\"", 200, NULL), GRPC_STATUS_OK);
  Worker__V1__TaskResult *r = wait_terminal(h, "t-hang");
  assert_int_equal(r->failure_code, WORKER__V1__FAILURE_CODE__FAILURE_CODE_TASK_TIMEOUT);
  worker__v1__task_result__free_unpacked(r, NULL);
  assert_int_equal(fake.cancelled, 1);
  /* both slots free again: two more tasks are admitted */
  assert_int_equal(submit(h, "t-a", "1", 0, NULL), GRPC_STATUS_OK);
  assert_int_equal(submit(h, "t-b", "1", 0, NULL), GRPC_STATUS_OK);
}

/* CancelTask; returns the task's state from the reply (0 unless OK). */
static int cancel(harness *h, const char *task_id, grpc_status_code *code) {
  Worker__V1__CancelTaskRequest req = WORKER__V1__CANCEL_TASK_REQUEST__INIT;
  req.task_id = (char *)(uintptr_t)task_id;
  uint8_t buf[64];
  size_t n = worker__v1__cancel_task_request__pack(&req, buf);
  wk_grpc_buf out = {0};
  wk_grpc_status st;
  *code = wk_grpc_client_unary(h->client, "/worker.v1.WorkerService/CancelTask", buf, n, NULL, 0,
                               5000, &out, &st);
  int state = 0;
  if (*code == GRPC_STATUS_OK) {
    Worker__V1__TaskResult *r = worker__v1__task_result__unpack(NULL, out.len, out.data);
    assert_non_null(r);
    state = (int)r->state;
    worker__v1__task_result__free_unpacked(r, NULL);
  }
  wk_grpc_buf_free(&out);
  return state;
}

static void test_full_slots_and_cancel(void **state) {
  harness *h = *state;
  assert_int_equal(submit(h, "h1", "\"hang\"", 0, NULL), GRPC_STATUS_OK);
  assert_int_equal(submit(h, "h2", "\"hang\"", 0, NULL), GRPC_STATUS_OK);
  assert_int_equal(submit(h, "h3", "\"hang\"", 0, NULL), GRPC_STATUS_RESOURCE_EXHAUSTED);
  grpc_status_code code;
  assert_int_equal(cancel(h, "h1", &code), WORKER__V1__TASK_STATE__TASK_STATE_CANCELLED);
  assert_int_equal(code, GRPC_STATUS_OK);
  assert_int_equal(submit(h, "h3", "1", 0, NULL), GRPC_STATUS_OK);
}

/* RequestTaskSlot; returns the reply (NULL unless OK) and the status in *code. */
static Worker__V1__RequestTaskSlotResponse *request_slot(harness *h, const char *task_id,
                                                         grpc_status_code *code) {
  Worker__V1__RequestTaskSlotRequest req = WORKER__V1__REQUEST_TASK_SLOT_REQUEST__INIT;
  req.task_id = (char *)(uintptr_t)task_id;
  wk_grpc_buf out = {0};
  *code = unary(h, "RequestTaskSlot", &req.base, &out);
  Worker__V1__RequestTaskSlotResponse *r =
      *code == GRPC_STATUS_OK
          ? worker__v1__request_task_slot_response__unpack(NULL, out.len, out.data)
          : NULL;
  wk_grpc_buf_free(&out);
  return r;
}

/* A reservation cancelled before any submit was never accepted: a later SubmitTask of
 * it is a duplicate whose accepted_unix_ms is 0, as GetTaskResult says, never the zero
 * monotonic time shifted to the wall clock (the machine's boot time). RequestTaskSlot
 * of it answers slot 0 (terminal) and no lease. */
static void test_cancelled_reservation_was_never_accepted(void **state) {
  harness *h = *state;
  grpc_status_code code;
  Worker__V1__RequestTaskSlotResponse *slot = request_slot(h, "r-c", &code);
  assert_int_equal(code, GRPC_STATUS_OK);
  assert_int_not_equal(slot->slot_id, 0);
  assert_true(slot->lease_expires_unix_ms > 0);
  worker__v1__request_task_slot_response__free_unpacked(slot, NULL);
  assert_int_equal(cancel(h, "r-c", &code), WORKER__V1__TASK_STATE__TASK_STATE_CANCELLED);
  assert_int_equal(code, GRPC_STATUS_OK);

  Worker__V1__SubmitTaskResponse *resp;
  assert_int_equal(submit(h, "r-c", "1", 0, &resp), GRPC_STATUS_OK);
  assert_true(resp->duplicate);
  assert_int_equal(resp->state, WORKER__V1__TASK_STATE__TASK_STATE_CANCELLED);
  assert_int_equal(resp->accepted_unix_ms, 0);
  worker__v1__submit_task_response__free_unpacked(resp, NULL);
  Worker__V1__TaskResult *r = get(h, "r-c", &code);
  assert_int_equal(code, GRPC_STATUS_OK);
  assert_int_equal(r->statistic->accepted_unix_ms, 0);
  assert_true(r->statistic->finished_unix_ms > 0);
  worker__v1__task_result__free_unpacked(r, NULL);

  slot = request_slot(h, "r-c", &code);
  assert_int_equal(code, GRPC_STATUS_OK);
  assert_int_equal(slot->slot_id, 0);
  assert_int_equal(slot->lease_expires_unix_ms, 0);
  assert_int_equal(slot->state, WORKER__V1__TASK_STATE__TASK_STATE_CANCELLED);
  worker__v1__request_task_slot_response__free_unpacked(slot, NULL);
  assert_int_equal(fake.submitted, 0);
}

static void test_watch_stream_ends_with_terminal(void **state) {
  harness *h = *state;
  assert_int_equal(submit(h, "w1", "5", 0, NULL), GRPC_STATUS_OK);
  Worker__V1__WatchTasksRequest req = WORKER__V1__WATCH_TASKS_REQUEST__INIT;
  char *ids[] = {(char *)(uintptr_t) "w1"};
  req.n_task_ids = 1;
  req.task_ids = ids;
  uint8_t buf[64];
  size_t n = worker__v1__watch_tasks_request__pack(&req, buf);
  wk_grpc_stream *s;
  wk_grpc_status st;
  assert_int_equal(wk_grpc_stream_open(h->client, "/worker.v1.WorkerService/WatchTasks", buf, n,
                                       NULL, 0, 5000, &s, &st),
                   0);
  wk_grpc_buf msg = {0};
  int events = 0, last_kind = 0;
  while (wk_grpc_stream_next(s, &msg) == 1) {
    Worker__V1__TaskEvent *ev = worker__v1__task_event__unpack(NULL, msg.len, msg.data);
    assert_non_null(ev);
    if (events == 0) assert_int_equal(ev->kind, WORKER__V1__TASK_EVENT__KIND__KIND_SNAPSHOT);
    last_kind = ev->kind;
    events++;
    worker__v1__task_event__free_unpacked(ev, NULL);
    wk_grpc_buf_free(&msg);
  }
  assert_int_equal(wk_grpc_stream_finish(s, &st), GRPC_STATUS_OK);
  assert_true(events >= 2);
  assert_int_equal(last_kind, WORKER__V1__TASK_EVENT__KIND__KIND_TERMINAL);
}

/* ---- the actor invariants (src/app/wk_orchestrator.h) ------------------------------- */

/* An rpc made from another thread, so the test can park the loop meanwhile. */
typedef struct bg_rpc {
  pthread_t thread;
  harness *h;
  const char *task_id;
  bool cancel; /* CancelTask, else SubmitTask of "1" */
  grpc_status_code code;
  int state; /* CancelTask: the state answered */
} bg_rpc;

static void *bg_rpc_main(void *arg) {
  bg_rpc *b = arg;
  if (b->cancel) {
    b->state = cancel(b->h, b->task_id, &b->code);
  } else {
    b->code = submit(b->h, b->task_id, "1", 0, NULL);
  }
  return NULL;
}

static void bg_rpc_start(bg_rpc *b, harness *h, const char *task_id, bool is_cancel) {
  *b = (bg_rpc){.h = h, .task_id = task_id, .cancel = is_cancel};
  assert_int_equal(pthread_create(&b->thread, NULL, bg_rpc_main, b), 0);
}

/* Waits (5 s at most) until `n` rpcs wait in the orchestrator's event queue. */
static void wait_queued(harness *h, uint32_t n) {
  for (int i = 0; i < 500; i++) {
    if (wk_orch_queued_rpcs(h->orch) == n) return;
    usleep(10000);
  }
  fail_msg("%u rpcs never waited in the event queue (%u do)", n, wk_orch_queued_rpcs(h->orch));
}

/* Parks the loop with two rpcs waiting in its queue, in this order: a SubmitTask of
 * `id_a`, then a SubmitTask (or a CancelTask when b_cancels) of `id_b`. */
static void park_with_two(harness *h, bg_rpc *a, const char *id_a, bg_rpc *b, const char *id_b,
                          bool b_cancels) {
  block_loop(h);
  bg_rpc_start(a, h, id_a, false);
  wait_queued(h, 1);
  bg_rpc_start(b, h, id_b, b_cancels);
  wait_queued(h, 2);
}

/* Waits (5 s at most) until the scratch root holds no task directory. */
static void wait_scratch_empty(harness *h) {
  char path[128];
  snprintf(path, sizeof path, "%s/scratch", h->dir);
  for (int i = 0; i < 500; i++) {
    DIR *d = opendir(path);
    assert_non_null(d);
    int entries = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;) entries += e->d_name[0] != '.';
    closedir(d);
    if (entries == 0) return;
    usleep(10000);
  }
  fail_msg("a scratch directory was never removed");
}

/* I1: other threads only queue events. While the loop is parked a submission waits in
 * the queue and the core has not seen it; once the loop runs it is served. */
static void test_i1_core_only_on_the_loop(void **state) {
  harness *h = *state;
  block_loop(h);
  bg_rpc b;
  bg_rpc_start(&b, h, "i1", false);
  wait_queued(h, 1);
  assert_int_equal(wk_orch_live_tasks(h->orch), 0); /* read while the loop is parked */
  unblock_loop(h);
  pthread_join(b.thread, NULL);
  assert_int_equal(b.code, GRPC_STATUS_OK);
  worker__v1__task_result__free_unpacked(wait_terminal(h, "i1"), NULL);
  assert_int_equal(wk_orch_queued_rpcs(h->orch), 0);
}

/* I1: the event queue is bounded. With max_queued_rpcs rpcs waiting, one more is
 * answered UNAVAILABLE at once and changes nothing; the waiting ones are served. */
static void small_queue(wk_orch_config *cfg) { cfg->max_queued_rpcs = 2; }
static int setup_small_queue(void **state) {
  tweak_config = small_queue;
  return setup(state);
}

static void test_i1_event_queue_is_bounded(void **state) {
  harness *h = *state;
  bg_rpc a, b;
  park_with_two(h, &a, "q1", &b, "q2", false);
  wk_grpc_status st;
  assert_int_equal(submit_with(h, "q3", "1", 0, NULL, NULL, &st), GRPC_STATUS_UNAVAILABLE);
  assert_true(st.reached_server);
  assert_non_null(strstr(st.message, "worker event queue full"));
  assert_int_equal(wk_orch_queued_rpcs(h->orch), 2);
  assert_int_equal(wk_orch_live_tasks(h->orch), 0);
  unblock_loop(h);
  pthread_join(a.thread, NULL);
  pthread_join(b.thread, NULL);
  assert_int_equal(a.code, GRPC_STATUS_OK);
  assert_int_equal(b.code, GRPC_STATUS_OK);
  worker__v1__task_result__free_unpacked(wait_terminal(h, "q1"), NULL);
  worker__v1__task_result__free_unpacked(wait_terminal(h, "q2"), NULL);
  grpc_status_code code;
  assert_null(get(h, "q3", &code)); /* the refused submission left no trace */
  assert_int_equal(code, GRPC_STATUS_NOT_FOUND);
  assert_int_equal(fake.submitted, 2);
}

/* I2: CONVERGE is executed once the core's transition is complete. on_task_finished
 * runs while CONVERGE is executed: the task is terminal, not live, its slot free. */
static atomic_int i2_finished, i2_complete; /* written on the loop thread, read by the test */
static void i2_on_finished(void *ud, const wk_task_result *r) {
  (void)ud;
  wk_heartbeat hb = wk_orch_heartbeat(fake.orch);
  i2_finished++;
  if (wk_task_state_terminal(r->state) && wk_orch_live_tasks(fake.orch) == 0 && hb.running == 0 &&
      hb.reserved == 0 && hb.free == hb.task_slots) {
    i2_complete++;
  }
}
static void i2_config(wk_orch_config *cfg) { cfg->on_task_finished = i2_on_finished; }
static int setup_i2(void **state) {
  tweak_config = i2_config;
  i2_finished = i2_complete = 0;
  return setup(state);
}

static void test_i2_commands_follow_the_transition(void **state) {
  harness *h = *state;
  assert_int_equal(submit(h, "i2-ok", "1", 0, NULL), GRPC_STATUS_OK);
  worker__v1__task_result__free_unpacked(wait_terminal(h, "i2-ok"), NULL);
  assert_int_equal(submit(h, "i2-hang", "\"hang\"", 200, NULL), GRPC_STATUS_OK);
  Worker__V1__TaskResult *r = wait_terminal(h, "i2-hang");
  assert_int_equal(r->failure_code, WORKER__V1__FAILURE_CODE__FAILURE_CODE_TASK_TIMEOUT);
  worker__v1__task_result__free_unpacked(r, NULL);
  assert_int_equal(i2_finished, 2);
  assert_int_equal(i2_complete, 2);
}

/* I3: a job that ends after CONVERGE is dropped. A submission and its cancellation
 * reach the loop in one batch: the activation job is still on the threadpool when the
 * task converges CANCELLED; when it ends, nothing runs and the runtime is freed. */
static void test_i3_job_after_converge_is_dropped(void **state) {
  harness *h = *state;
  bg_rpc sub, can;
  park_with_two(h, &sub, "i3", &can, "i3", true);
  unblock_loop(h);
  pthread_join(sub.thread, NULL);
  pthread_join(can.thread, NULL);
  assert_int_equal(sub.code, GRPC_STATUS_OK);
  assert_int_equal(can.code, GRPC_STATUS_OK);
  assert_int_equal(can.state, WORKER__V1__TASK_STATE__TASK_STATE_CANCELLED);
  Worker__V1__TaskResult *r = wait_terminal(h, "i3");
  assert_int_equal(r->state, WORKER__V1__TASK_STATE__TASK_STATE_CANCELLED);
  assert_int_equal(r->code_epoch, 0); /* activation's result never reached the core */
  worker__v1__task_result__free_unpacked(r, NULL);
  wait_scratch_empty(h); /* the job's reference was the last: the runtime is gone */
  assert_int_equal(fake.submitted, 0);
}

/* I4: the adapter reads the core's facts. The executor gets the core's deadline and a
 * scratch directory named after the core's slot; the dispatcher retries by the core's
 * retry policy. */
static void test_i4_facts_come_from_the_core(void **state) {
  harness *h = *state;
  Worker__V1__SubmitTaskResponse *resp;
  assert_int_equal(submit(h, "i4-hang", "\"hang\"", 300, &resp), GRPC_STATUS_OK);
  uint64_t slot_id = resp->slot_id;
  worker__v1__submit_task_response__free_unpacked(resp, NULL);
  for (int i = 0; i < 500 && fake.submitted == 0; i++) usleep(10000);
  assert_int_equal(fake.submitted, 1);
  pthread_mutex_lock(&fake_mu);
  uint32_t last_deadline_ms = fake.last_deadline_ms;
  char last_scratch_dir[sizeof fake.last_scratch_dir];
  memcpy(last_scratch_dir, fake.last_scratch_dir, sizeof last_scratch_dir);
  pthread_mutex_unlock(&fake_mu);
  assert_true(last_deadline_ms > 0 && last_deadline_ms <= 300);
  /* the scratch directory names the core's slot id: ".<slot id in hex>.<24 random hex>" */
  char suffix[32];
  snprintf(suffix, sizeof suffix, ".%llx.", (unsigned long long)slot_id);
  size_t n = strlen(last_scratch_dir), k = strlen(suffix) + 24;
  assert_true(n > k);
  assert_memory_equal(last_scratch_dir + n - k, suffix, strlen(suffix));
  worker__v1__task_result__free_unpacked(wait_terminal(h, "i4-hang"), NULL);

  Worker__V1__CallRetryPolicy retry = WORKER__V1__CALL_RETRY_POLICY__INIT;
  retry.max_attempts = 3;
  retry.initial_backoff_ms = 1;
  retry.max_backoff_ms = 2;
  assert_int_equal(submit_with(h, "i4-retry", "\"retry\"", 0, &retry, NULL, NULL), GRPC_STATUS_OK);
  Worker__V1__TaskResult *r = wait_terminal(h, "i4-retry");
  assert_int_equal(r->failure_code, WORKER__V1__FAILURE_CODE__FAILURE_CODE_CALL_FAILED);
  assert_int_equal(r->statistic->calls_retried, 2);
  worker__v1__task_result__free_unpacked(r, NULL);
  assert_int_equal(fake.submitted, 1 + 3);
}

/* I5: a converged task releases what it held. A task times out holding the only
 * executor semaphore while its call hangs: the call is cancelled, the waiting task
 * gets the semaphore and runs, and every scratch directory goes. */
static void i5_config(wk_orch_config *cfg) {
  cfg->executor_concurrency = 1;
  cfg->io_scope_max_bytes = (uint64_t)1 << 30; /* tracked in the IO scope list */
}
static int setup_i5(void **state) {
  tweak_config = i5_config;
  return setup(state);
}

static void test_i5_converge_releases_everything(void **state) {
  harness *h = *state;
  assert_int_equal(submit(h, "i5-hang", "\"hang\"", 300, NULL), GRPC_STATUS_OK);
  assert_int_equal(submit(h, "i5-next", "1", 0, NULL), GRPC_STATUS_OK);
  Worker__V1__TaskResult *r = wait_terminal(h, "i5-hang");
  assert_int_equal(r->failure_code, WORKER__V1__FAILURE_CODE__FAILURE_CODE_TASK_TIMEOUT);
  worker__v1__task_result__free_unpacked(r, NULL);
  r = wait_terminal(h, "i5-next");
  assert_int_equal(r->state, WORKER__V1__TASK_STATE__TASK_STATE_SUCCEEDED);
  worker__v1__task_result__free_unpacked(r, NULL);
  assert_int_equal(fake.cancelled, 1);
  assert_int_equal(fake.submitted, 2);
  wait_scratch_empty(h);
}

/* The task book forgets a task when the core does, not at a tick: with the tick out of
 * the way and 4 results retained, 150 tasks later the book holds exactly those 4. */
static void few_retained_no_tick(wk_orch_config *cfg) {
  cfg->tick_ms = 60000;
  cfg->core.max_retained_results = 4;
}
static int setup_few_retained(void **state) {
  tweak_config = few_retained_no_tick;
  return setup(state);
}

static void test_book_forgets_as_fast_as_tasks_come(void **state) {
  harness *h = *state;
  for (int i = 0; i < 150; i++) {
    char id[32];
    snprintf(id, sizeof id, "book-%d", i);
    assert_int_equal(submit(h, id, "1", 0, NULL), GRPC_STATUS_OK);
    worker__v1__task_result__free_unpacked(wait_terminal(h, id), NULL);
  }
  block_loop(h);
  size_t entries = wk_orch_book_entries(h->orch);
  unblock_loop(h);
  assert_int_equal(entries, 4);
}

/* A task id the core forgot is new again, and so is its book entry: what ListTasks
 * shows of a resubmitted id is the new task's (its labels), never the forgotten one's.
 * One result retained, a task that hangs in front of the book, no tick: the core
 * forgets "again" when the next task converges, inside an event handler. */
static void one_retained_no_tick(wk_orch_config *cfg) {
  cfg->tick_ms = 60000;
  cfg->core.max_retained_results = 1;
}
static int setup_one_retained(void **state) {
  tweak_config = one_retained_no_tick;
  return setup(state);
}

/* ListTasks of the tasks labelled run=`run`: how many, and the first one's id. */
static size_t list_run(harness *h, const char *run, char *first_id, size_t first_len) {
  Worker__V1__ListTasksRequest__LabelsEntry label =
      WORKER__V1__LIST_TASKS_REQUEST__LABELS_ENTRY__INIT;
  label.key = (char *)(uintptr_t) "run";
  label.value = (char *)(uintptr_t)run;
  Worker__V1__ListTasksRequest__LabelsEntry *labels[1] = {&label};
  Worker__V1__ListTasksRequest req = WORKER__V1__LIST_TASKS_REQUEST__INIT;
  req.labels = labels;
  req.n_labels = 1;
  wk_grpc_buf out = {0};
  assert_int_equal(unary(h, "ListTasks", &req.base, &out), GRPC_STATUS_OK);
  Worker__V1__ListTasksResponse *resp =
      worker__v1__list_tasks_response__unpack(NULL, out.len, out.data);
  wk_grpc_buf_free(&out);
  assert_non_null(resp);
  size_t n = resp->n_tasks;
  if (n > 0) snprintf(first_id, first_len, "%s", resp->tasks[0]->task_id);
  worker__v1__list_tasks_response__free_unpacked(resp, NULL);
  return n;
}

static void test_forgotten_id_gets_a_new_book_entry(void **state) {
  harness *h = *state;
  assert_int_equal(submit(h, "hang", "\"hang\"", 0, NULL), GRPC_STATUS_OK);
  submit_run = "1";
  assert_int_equal(submit(h, "again", "1", 0, NULL), GRPC_STATUS_OK);
  worker__v1__task_result__free_unpacked(wait_terminal(h, "again"), NULL);
  submit_run = NULL;
  assert_int_equal(submit(h, "other", "1", 0, NULL), GRPC_STATUS_OK);
  worker__v1__task_result__free_unpacked(wait_terminal(h, "other"), NULL);
  grpc_status_code code;
  assert_null(get(h, "again", &code)); /* forgotten: one result is retained */
  assert_int_equal(code, GRPC_STATUS_NOT_FOUND);

  submit_run = "2";
  assert_int_equal(submit(h, "again", "2", 0, NULL), GRPC_STATUS_OK);
  char id[32] = "";
  assert_int_equal(list_run(h, "2", id, sizeof id), 1);
  assert_string_equal(id, "again");
  assert_int_equal(list_run(h, "1", id, sizeof id), 0);
}

/* ---- builders off the loop, under the builder semaphore ------------------------------ */

/* The builder spans of finished tasks (monotonic ms, from on_task_finished on the loop). */
typedef struct builder_span {
  char task_id[32];
  int64_t started_ms, finished_ms;
  uint64_t calls;
} builder_span;
static builder_span spans[4];
static int n_spans;
static pthread_mutex_t spans_mu = PTHREAD_MUTEX_INITIALIZER;

static void record_span(void *ud, const wk_task_result *r) {
  (void)ud;
  pthread_mutex_lock(&spans_mu);
  if (n_spans < 4) {
    builder_span *b = &spans[n_spans++];
    snprintf(b->task_id, sizeof b->task_id, "%.*s", (int)r->task_id_len, r->task_id);
    b->started_ms = r->statistic.builder_started_ms;
    b->finished_ms = r->statistic.builder_finished_ms;
    b->calls = r->statistic.calls.calls_total;
  }
  pthread_mutex_unlock(&spans_mu);
}

static wk_builder_registry single_and_map;
static void builders_config(wk_orch_config *cfg) {
  memset(&single_and_map, 0, sizeof single_and_map);
  wk_builder_registry_add(&single_and_map, "single");
  wk_builder_registry_add(&single_and_map, "map");
  cfg->builders = &single_and_map;
  cfg->builder_concurrency = 1;
  cfg->on_task_finished = record_span;
  n_spans = 0;
}
static int setup_builders(void **state) {
  tweak_config = builders_config;
  return setup(state);
}

/* A map task whose args are `items` strings of `item_bytes` each (~ items * item_bytes),
 * with the task timeout `timeout_ms` (0 = the worker's). */
static grpc_status_code submit_map_with_timeout(harness *h, const char *task_id, size_t items,
                                                size_t item_bytes, uint64_t timeout_ms) {
  size_t cap = items * (item_bytes + 3) + 2, len = 0;
  char *args = malloc(cap + 1);
  args[len++] = '[';
  for (size_t i = 0; i < items; i++) {
    if (i) args[len++] = ',';
    args[len++] = '"';
    memset(args + len, 'a' + (char)(i % 26), item_bytes);
    len += item_bytes;
    args[len++] = '"';
  }
  args[len++] = ']';
  Worker__V1__FunctionCallConfig fn = WORKER__V1__FUNCTION_CALL_CONFIG__INIT;
  fn.name = (char *)(uintptr_t) "fn";
  fn.type = (char *)(uintptr_t) "map";
  fn.args.data = (uint8_t *)args;
  fn.args.len = len;
  Worker__V1__SubmitTaskRequest req = WORKER__V1__SUBMIT_TASK_REQUEST__INIT;
  req.task_id = (char *)(uintptr_t)task_id;
  req.function = &fn;
  req.timeout_ms = timeout_ms;
  size_t n = worker__v1__submit_task_request__get_packed_size(&req);
  uint8_t *buf = malloc(n);
  worker__v1__submit_task_request__pack(&req, buf);
  wk_grpc_buf out = {0};
  wk_grpc_status st;
  grpc_status_code code = wk_grpc_client_unary(h->client, "/worker.v1.WorkerService/SubmitTask",
                                               buf, n, NULL, 0, 5000, &out, &st);
  wk_grpc_buf_free(&out);
  free(buf);
  free(args);
  return code;
}

static grpc_status_code submit_map(harness *h, const char *task_id, size_t items,
                                   size_t item_bytes) {
  return submit_map_with_timeout(h, task_id, items, item_bytes, 0);
}

/* builder_concurrency=1: two map builds run one after the other (their measured spans
 * do not overlap), and each span is the build's own time on a worker thread. */
static void test_builder_concurrency_one_serialises(void **state) {
  harness *h = *state;
  /* 900 items of 900 bytes: ~0.8 MB to parse, several ms per build */
  assert_int_equal(submit_map(h, "map-a", 900, 900), GRPC_STATUS_OK);
  assert_int_equal(submit_map(h, "map-b", 900, 900), GRPC_STATUS_OK);
  const char *ids[] = {"map-a", "map-b"};
  for (int i = 0; i < 2; i++) {
    Worker__V1__TaskResult *r = wait_terminal(h, ids[i]);
    assert_int_equal(r->state, WORKER__V1__TASK_STATE__TASK_STATE_SUCCEEDED);
    assert_int_equal(r->n_outputs, 900);
    worker__v1__task_result__free_unpacked(r, NULL);
  }
  pthread_mutex_lock(&spans_mu);
  assert_int_equal(n_spans, 2);
  builder_span a = spans[0], b = spans[1];
  pthread_mutex_unlock(&spans_mu);
  if (a.started_ms > b.started_ms) {
    builder_span t = a;
    a = b;
    b = t;
  }
  assert_true(a.started_ms <= a.finished_ms);
  assert_true(b.started_ms <= b.finished_ms);
  if (b.started_ms < a.finished_ms) {
    fail_msg("builds overlap: %s ran %lld..%lld ms, %s ran %lld..%lld ms", a.task_id,
             (long long)a.started_ms, (long long)a.finished_ms, b.task_id, (long long)b.started_ms,
             (long long)b.finished_ms);
  }
}

/* ---- a writer job and its semaphore ------------------------------------------------ */

/* A Redis "server" that never answers: the kernel completes the connections (listen
 * backlog) and nobody reads. A writer talking to it blocks for its io timeout. */
static int silent_fd = -1;
static int silent_kept = -1; /* a connection left open until after the teardown */
static char silent_addr[32];
static wk_writer_settings silent_settings;

static void silent_writer_config(wk_orch_config *cfg) {
  cfg->plugin_concurrency = 1;
  cfg->writers[0] = "redis";
  silent_settings = (wk_writer_settings){
      .redis_addr = silent_addr, .connect_timeout_ms = 2000, .io_timeout_ms = 3000};
  cfg->writer_settings = &silent_settings;
}

static int setup_silent_writer(void **state) {
  silent_fd = socket(AF_INET, SOCK_STREAM, 0);
  assert_true(silent_fd >= 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  assert_int_equal(bind(silent_fd, (struct sockaddr *)&a, sizeof a), 0);
  assert_int_equal(listen(silent_fd, 16), 0);
  socklen_t len = sizeof a;
  assert_int_equal(getsockname(silent_fd, (struct sockaddr *)&a, &len), 0);
  snprintf(silent_addr, sizeof silent_addr, "127.0.0.1:%u", (unsigned)ntohs(a.sin_port));
  tweak_config = silent_writer_config;
  submit_handler = "redis";
  return setup(state);
}

static int teardown_silent_writer(void **state) {
  int rc = teardown(state);
  if (silent_kept >= 0) close(silent_kept);
  silent_kept = -1;
  close(silent_fd);
  silent_fd = -1;
  return rc;
}

/* The next writer connection to the silent peer within `ms`, or -1. */
static int writer_connects_within(int ms) {
  struct pollfd p = {.fd = silent_fd, .events = POLLIN};
  if (poll(&p, 1, ms) <= 0) return -1;
  return accept(silent_fd, NULL, NULL);
}

static void wait_phase(harness *h, const char *task_id, Worker__V1__Phase phase) {
  for (int i = 0; i < 500; i++) {
    grpc_status_code code;
    Worker__V1__TaskResult *r = get(h, task_id, &code);
    assert_int_equal(code, GRPC_STATUS_OK);
    bool there = r->phase == phase;
    worker__v1__task_result__free_unpacked(r, NULL);
    if (there) return;
    usleep(10000);
  }
  fail_msg("task %s never reached phase %d", task_id, (int)phase);
}

/* plugin_concurrency = 1 and a writer that blocks (on a peer that never answers): its
 * task times out meanwhile. The writer job still runs, so it still holds the plugin
 * semaphore: the next task's writer waits for the job to end, it does not start
 * beside it. */
static void test_a_writer_job_holds_its_semaphore_past_its_task(void **state) {
  harness *h = *state;
  assert_int_equal(submit(h, "wr-a", "1", 400, NULL), GRPC_STATUS_OK);
  int a = writer_connects_within(5000); /* A's writer is blocked on the peer */
  assert_true(a >= 0);
  Worker__V1__TaskResult *r = wait_terminal(h, "wr-a");
  assert_int_equal(r->failure_code, WORKER__V1__FAILURE_CODE__FAILURE_CODE_TASK_TIMEOUT);
  worker__v1__task_result__free_unpacked(r, NULL);

  assert_int_equal(submit(h, "wr-b", "1", 0, NULL), GRPC_STATUS_OK);
  wait_phase(h, "wr-b", WORKER__V1__PHASE__PHASE_WRITER);
  /* A's job runs for its 3 s io timeout: B's writer must not connect meanwhile */
  int b = writer_connects_within(1000);
  if (b >= 0) fail_msg("a second writer started while the first writer job still ran");
  close(a); /* A's writer sees the peer go: its job ends, B's writer runs */
  b = writer_connects_within(5000);
  assert_true(b >= 0);
  close(b);
  r = wait_terminal(h, "wr-b");
  assert_int_equal(r->failure_code, WORKER__V1__FAILURE_CODE__FAILURE_CODE_PLUGIN_FAILED);
  worker__v1__task_result__free_unpacked(r, NULL);
}

/* The worker closes while a writer job blocks and another task waits for the plugin
 * semaphore behind it: the waiter is let go (no reference left behind), and the
 * orchestrator is freed once the job ends (its io timeout, during the teardown). */
static void test_close_drops_the_waiters_of_a_job_semaphore(void **state) {
  harness *h = *state;
  assert_int_equal(submit(h, "wc-a", "1", 0, NULL), GRPC_STATUS_OK);
  int a = writer_connects_within(5000);
  assert_true(a >= 0);
  assert_int_equal(submit(h, "wc-b", "1", 0, NULL), GRPC_STATUS_OK);
  wait_phase(h, "wc-b", WORKER__V1__PHASE__PHASE_WRITER);
  silent_kept = a; /* A's writer stays blocked into the close */
}

/* A task that converges while its builder job runs (timeout after 5 ms, the build takes
 * longer): the job's done callback finds it converged, drops the calls it built and gives
 * the builder semaphore to the next task, which runs; the runtime is freed. */
static void test_builder_outliving_its_task(void **state) {
  harness *h = *state;
  assert_int_equal(submit_map_with_timeout(h, "map-late", 900, 900, 5), GRPC_STATUS_OK);
  assert_int_equal(submit_map_with_timeout(h, "map-next", 10, 10, 0), GRPC_STATUS_OK);
  Worker__V1__TaskResult *r = wait_terminal(h, "map-late");
  assert_int_equal(r->failure_code, WORKER__V1__FAILURE_CODE__FAILURE_CODE_TASK_TIMEOUT);
  worker__v1__task_result__free_unpacked(r, NULL);
  r = wait_terminal(h, "map-next");
  assert_int_equal(r->state, WORKER__V1__TASK_STATE__TASK_STATE_SUCCEEDED);
  assert_int_equal(r->n_outputs, 10);
  worker__v1__task_result__free_unpacked(r, NULL);
  wait_scratch_empty(h);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_submit_runs_one_call_and_echoes, setup, teardown),
      cmocka_unit_test_setup_teardown(test_direct_connection_client_runs_a_task, setup, teardown),
      cmocka_unit_test(test_direct_connection_refusals),
      cmocka_unit_test_setup_teardown(test_failed_call_fails_the_task, setup, teardown),
      cmocka_unit_test_setup_teardown(test_duplicate_submit_runs_once, setup, teardown),
      cmocka_unit_test_setup_teardown(test_timeout_cancels_the_call_and_frees_the_slot, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_full_slots_and_cancel, setup, teardown),
      cmocka_unit_test_setup_teardown(test_cancelled_reservation_was_never_accepted, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_watch_stream_ends_with_terminal, setup, teardown),
      cmocka_unit_test_setup_teardown(test_i1_core_only_on_the_loop, setup, teardown),
      cmocka_unit_test_setup_teardown(test_i1_event_queue_is_bounded, setup_small_queue, teardown),
      cmocka_unit_test_setup_teardown(test_i2_commands_follow_the_transition, setup_i2, teardown),
      cmocka_unit_test_setup_teardown(test_i3_job_after_converge_is_dropped, setup, teardown),
      cmocka_unit_test_setup_teardown(test_i4_facts_come_from_the_core, setup, teardown),
      cmocka_unit_test_setup_teardown(test_i5_converge_releases_everything, setup_i5, teardown),
      cmocka_unit_test_setup_teardown(test_forgotten_id_gets_a_new_book_entry, setup_one_retained,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_book_forgets_as_fast_as_tasks_come, setup_few_retained,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_builder_concurrency_one_serialises, setup_builders,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_a_writer_job_holds_its_semaphore_past_its_task,
                                      setup_silent_writer, teardown_silent_writer),
      cmocka_unit_test_setup_teardown(test_close_drops_the_waiters_of_a_job_semaphore,
                                      setup_silent_writer, teardown_silent_writer),
      cmocka_unit_test_setup_teardown(test_builder_outliving_its_task, setup_builders, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

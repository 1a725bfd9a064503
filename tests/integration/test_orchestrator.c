/* Adapter integration: the orchestrator and the real gRPC server in-process, with a
 * fake executor adapter (no Python). A real gRPC client (wk_grpc_client) drives it.
 * The fake answers a call by its args: "fail" → a call error, "hang" → never (until
 * cancelled), anything else → echoes the args. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
  int submitted, cancelled, answered;
} fake_exec;

static fake_exec fake;

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
  fake.submitted++;
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

  grpc_init();
  wk_grpc_server_config scfg = {.listen_addr = "127.0.0.1:0",
                                .max_message_bytes = 1 << 20,
                                .max_ttl_ms = 600000,
                                .max_timeout_ms = 3600000,
                                .max_watch_tasks = 16,
                                .max_stream_queue = 64};
  int port = 0;
  assert_int_equal(wk_grpc_server_start(&scfg, wk_orch_sink(h->orch), &h->server, &port, err, sizeof err), 0);
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
  free(h);
  return 0;
}

/* ---- client helpers ----------------------------------------------------------------- */

static grpc_status_code submit(harness *h, const char *task_id, const char *args, uint64_t timeout_ms,
                               Worker__V1__SubmitTaskResponse **resp) {
  Worker__V1__FunctionCallConfig fn = WORKER__V1__FUNCTION_CALL_CONFIG__INIT;
  fn.name = (char *)(uintptr_t)"fn";
  fn.args.data = (uint8_t *)(uintptr_t)args;
  fn.args.len = strlen(args);
  Worker__V1__SubmitTaskRequest req = WORKER__V1__SUBMIT_TASK_REQUEST__INIT;
  req.task_id = (char *)(uintptr_t)task_id;
  req.function = &fn;
  req.timeout_ms = timeout_ms;
  uint8_t buf[1024];
  size_t n = worker__v1__submit_task_request__pack(&req, buf);
  wk_grpc_buf out = {0};
  wk_grpc_status st;
  grpc_status_code code = wk_grpc_client_unary(h->client, "/worker.v1.WorkerService/SubmitTask",
                                               buf, n, NULL, 0, 5000, &out, &st);
  if (resp) *resp = code == GRPC_STATUS_OK ? worker__v1__submit_task_response__unpack(NULL, out.len, out.data) : NULL;
  wk_grpc_buf_free(&out);
  return code;
}

static Worker__V1__TaskResult *get(harness *h, const char *task_id, grpc_status_code *code) {
  Worker__V1__GetTaskResultRequest req = WORKER__V1__GET_TASK_RESULT_REQUEST__INIT;
  req.task_id = (char *)(uintptr_t)task_id;
  uint8_t buf[256];
  size_t n = worker__v1__get_task_result_request__pack(&req, buf);
  wk_grpc_buf out = {0};
  wk_grpc_status st;
  *code = wk_grpc_client_unary(h->client, "/worker.v1.WorkerService/GetTaskResult", buf, n, NULL,
                               0, 5000, &out, &st);
  Worker__V1__TaskResult *r = *code == GRPC_STATUS_OK ? worker__v1__task_result__unpack(NULL, out.len, out.data) : NULL;
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

static void test_full_slots_and_cancel(void **state) {
  harness *h = *state;
  assert_int_equal(submit(h, "h1", "\"hang\"", 0, NULL), GRPC_STATUS_OK);
  assert_int_equal(submit(h, "h2", "\"hang\"", 0, NULL), GRPC_STATUS_OK);
  assert_int_equal(submit(h, "h3", "\"hang\"", 0, NULL), GRPC_STATUS_RESOURCE_EXHAUSTED);
  Worker__V1__CancelTaskRequest req = WORKER__V1__CANCEL_TASK_REQUEST__INIT;
  req.task_id = (char *)(uintptr_t)"h1";
  uint8_t buf[64];
  size_t n = worker__v1__cancel_task_request__pack(&req, buf);
  wk_grpc_buf out = {0};
  wk_grpc_status st;
  assert_int_equal(wk_grpc_client_unary(h->client, "/worker.v1.WorkerService/CancelTask", buf, n,
                                        NULL, 0, 5000, &out, &st),
                   GRPC_STATUS_OK);
  Worker__V1__TaskResult *r = worker__v1__task_result__unpack(NULL, out.len, out.data);
  assert_int_equal(r->state, WORKER__V1__TASK_STATE__TASK_STATE_CANCELLED);
  worker__v1__task_result__free_unpacked(r, NULL);
  wk_grpc_buf_free(&out);
  assert_int_equal(submit(h, "h3", "1", 0, NULL), GRPC_STATUS_OK);
}

static void test_watch_stream_ends_with_terminal(void **state) {
  harness *h = *state;
  assert_int_equal(submit(h, "w1", "5", 0, NULL), GRPC_STATUS_OK);
  Worker__V1__WatchTasksRequest req = WORKER__V1__WATCH_TASKS_REQUEST__INIT;
  char *ids[] = {(char *)(uintptr_t)"w1"};
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

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_submit_runs_one_call_and_echoes, setup, teardown),
      cmocka_unit_test_setup_teardown(test_failed_call_fails_the_task, setup, teardown),
      cmocka_unit_test_setup_teardown(test_duplicate_submit_runs_once, setup, teardown),
      cmocka_unit_test_setup_teardown(test_timeout_cancels_the_call_and_frees_the_slot, setup, teardown),
      cmocka_unit_test_setup_teardown(test_full_slots_and_cancel, setup, teardown),
      cmocka_unit_test_setup_teardown(test_watch_stream_ends_with_terminal, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

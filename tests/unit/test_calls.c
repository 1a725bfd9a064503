/* The calls phase driver (src/app/wk_calls.c) with a fake executor adapter: list and
 * stream calls (backpressure refills), retries, fail-fast cancellation, subcalls,
 * deadlines and stop. Deterministic: no loop, no sockets, no clock: the test decides
 * every `now` and answers each call itself. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "adapters/wk_code_store.h"
#include "app/wk_calls.h"
#include "app/wk_fs.h"
#include "app/wk_task_code.h"
#include "app/wk_output_spool.h"
#include "app/wk_task_runtime.h"
#include "worker/v1/worker.pb-c.h"

/* ---- the fake executor adapter ------------------------------------------------------ */

#define FAKE_CALLS_MAX 64

typedef struct fake_call {
  void *ctx; /* the driver's attempt */
  char args[WK_STREAM_ARGS_MAX];
  char function[WK_FUNCTION_NAME_MAX + 1];
  char entrypoint[WK_ENTRYPOINT_MAX + 1];
  char code_dir[512];
  uint64_t epoch;
  uint32_t deadline_ms;
  bool cancelled;
  bool answered;
  /* a parent's subcalls answer */
  uint32_t children;
  wk_frame_status child_status[8];
  char child_output[8][32];
  char child_error[8][256];
} fake_call;

typedef struct fake_exec {
  fake_call calls[FAKE_CALLS_MAX];
  int submitted, cancelled, subcall_answers;
  /* set: a call whose args are "sync" is answered (an error) before submit returns,
   * as the adapter's contract allows (wk_exec_adapter.h) */
  wk_calls *sync_answers;
} fake_exec;

static void *fake_submit(void *impl, const wk_call_spec *spec, void *ctx) {
  fake_exec *f = impl;
  assert_true(f->submitted < FAKE_CALLS_MAX);
  fake_call *c = &f->calls[f->submitted++];
  c->ctx = ctx;
  snprintf(c->args, sizeof c->args, "%.*s", (int)spec->args.len, (const char *)spec->args.ptr);
  snprintf(c->function, sizeof c->function, "%s", spec->function);
  snprintf(c->entrypoint, sizeof c->entrypoint, "%s", spec->entrypoint);
  snprintf(c->code_dir, sizeof c->code_dir, "%s", spec->code_dir);
  c->epoch = spec->epoch;
  c->deadline_ms = spec->deadline_ms;
  if (f->sync_answers && strcmp(c->args, "\"sync\"") == 0) {
    c->answered = true;
    wk_call_outcome o = {.status = WK_CALL_ERROR,
                         .error_type = wk_frame_bytes_cstr("ArgsTooLarge"),
                         .error_message = wk_frame_bytes_cstr("answered inside submit")};
    wk_calls_on_result(f->sync_answers, ctx, &o, 0);
    return NULL;
  }
  return c;
}

static void fake_cancel(void *impl, void *handle) {
  fake_exec *f = impl;
  fake_call *c = handle;
  assert_false(c->cancelled);
  assert_false(c->answered); /* a call is cancelled only while it runs */
  c->cancelled = true;
  f->cancelled++;
}

static void fake_answer_subcalls(void *impl, void *handle, uint64_t request_id,
                                 const wk_frame_child *children, uint32_t count) {
  fake_exec *f = impl;
  fake_call *c = handle;
  assert_int_equal(request_id, 77);
  assert_true(count <= 8);
  c->children = count;
  for (uint32_t i = 0; i < count; i++) {
    c->child_status[i] = children[i].status;
    snprintf(c->child_output[i], sizeof c->child_output[i], "%.*s", (int)children[i].output.len,
             (const char *)children[i].output.ptr);
    snprintf(c->child_error[i], sizeof c->child_error[i], "%.*s: %.*s",
             (int)children[i].error_type.len, (const char *)children[i].error_type.ptr,
             (int)children[i].error_message.len, (const char *)children[i].error_message.ptr);
  }
  f->subcall_answers++;
}

/* ---- the fixture: a driver, a task runtime, the done callback ------------------------ */

typedef struct fx {
  fake_exec exec;
  wk_exec_adapter adapter;
  wk_calls *calls;
  wk_task_rt *rt;
  char code_root[64]; /* a real code store: child_fn deployed, epochs 1 and 2 */
  wk_code_pins *pins;
  wk_task_code_env env;
  int done; /* on_done calls */
  bool ok;  /* rt->calls.ok when it came */
} fx;

static void on_done(void *ud, wk_task_rt *rt) {
  fx *f = ud;
  assert_ptr_equal(rt, f->rt);
  f->done++;
  f->ok = rt->calls.ok;
}

/* Deploys `name` (a main.py) into the fixture's code store; returns its epoch. */
static uint64_t deploy(fx *f, const char *name) {
  char src[128], file[160], err[256];
  snprintf(src, sizeof src, "%s.src", f->code_root);
  (void)mkdir(src, 0755);
  snprintf(file, sizeof file, "%s/main.py", src);
  FILE *fp = fopen(file, "w");
  assert_non_null(fp);
  static int version; /* new content each time: a new epoch */
  fprintf(fp, "def handler(args, ctx):\n    return args  # %d\n", ++version);
  fclose(fp);
  uint64_t epoch = 0;
  int rc = wk_code_store_deploy(f->code_root, name, src, &epoch, err, sizeof err);
  assert_int_equal(rc, 0);
  wk_fs_remove_tree(src);
  return epoch;
}

static int setup_limit(void **state, size_t max_inline_output_bytes) {
  fx *f = calloc(1, sizeof *f);
  snprintf(f->code_root, sizeof f->code_root, "/tmp/wk-test-calls-XXXXXX");
  assert_non_null(mkdtemp(f->code_root));
  f->adapter = (wk_exec_adapter){.impl = &f->exec,
                                 .submit = fake_submit,
                                 .cancel = fake_cancel,
                                 .answer_subcalls = fake_answer_subcalls};
  wk_calls_config cfg = {.escalation_budget_ms = 20,
                         .stream_low_water = 2,
                         .stream_batch = 3,
                         .code = {.code_root = f->code_root, .audit_deny = "secret*, fn:main:d*"},
                         .max_inline_output_bytes = max_inline_output_bytes};
  f->pins = wk_code_pins_create();
  cfg.code.pins = f->pins;
  f->env = cfg.code;
  wk_disp_config_default(&cfg.disp);
  char err[128];
  f->calls = wk_calls_create(&cfg, &f->adapter, on_done, f, err, sizeof err);
  assert_non_null(f->calls);
  wk_calls_set_capacity(f->calls, 16, 0);

  Worker__V1__FunctionCallConfig fn = WORKER__V1__FUNCTION_CALL_CONFIG__INIT;
  fn.name = (char *)(uintptr_t) "fn";
  fn.content_type = WORKER__V1__CONTENT_TYPE__CONTENT_TYPE_JSON;
  Worker__V1__SubmitTaskRequest req = WORKER__V1__SUBMIT_TASK_REQUEST__INIT;
  req.task_id = (char *)(uintptr_t) "t1";
  req.function = &fn;
  f->rt =
      wk_task_rt_create(NULL, NULL, &req, NULL, false); /* no scratch directory: no loop needed */
  /* what activation made: the task's own function at epoch 3 */
  f->rt->act.epoch = 3;
  snprintf(f->rt->act.code_dir, sizeof f->rt->act.code_dir, "%s/fn/3", f->code_root);
  wk_task_code_adopt(f->rt, &f->env);
  deploy(f, "child_fn");
  *state = f;
  return 0;
}

static int setup(void **state) { return setup_limit(state, 1u << 20); }

/* Inline outputs of at most 40 bytes (a record of a 10-byte value: 14 bytes, 16 from
 * index 1 on). */
static int setup_small(void **state) { return setup_limit(state, 40); }

static int teardown(void **state) {
  fx *f = *state;
  wk_calls_stop(f->calls, f->rt, 0);
  wk_task_code_unpin(f->rt, &f->env, NULL, NULL);
  wk_task_rt_unref(f->rt);
  wk_calls_destroy(f->calls);
  wk_fs_remove_tree(f->code_root);
  wk_code_pins_destroy(f->pins);
  free(f);
  return 0;
}

/* The core's view of the task: deadline and policies. */
static wk_task_view view(int64_t deadline_ms, wk_call_failure_policy policy,
                         uint32_t max_attempts) {
  return (wk_task_view){
      .deadline_ms = deadline_ms,
      .call_failure_policy = policy,
      .retry = {.max_attempts = max_attempts, .initial_backoff_ms = 10, .max_backoff_ms = 10}};
}

/* Plays the builder (a list of calls with these args), then starts the calls under the
 * core's view `v` at `now`. */
static void start_list(fx *f, const char *const *args, uint32_t n, wk_task_view v, int64_t now) {
  wk_call_list *l = &f->rt->build.list;
  l->count = n;
  l->items = calloc(n, sizeof *l->items);
  for (uint32_t i = 0; i < n; i++)
    l->items[i] = (wk_call_item){(const uint8_t *)args[i], strlen(args[i])};
  f->rt->build.calls_total = n;
  wk_calls_start(f->calls, f->rt, &v, now);
}

static void answer(fx *f, int i, wk_call_status status, const char *output, int64_t now) {
  fake_call *c = &f->exec.calls[i];
  assert_false(c->cancelled);
  assert_false(c->answered);
  c->answered = true;
  wk_call_outcome o = {.status = status,
                       .content_type = WK_FRAME_CONTENT_JSON,
                       .output = wk_frame_bytes_cstr(output)};
  if (status != WK_CALL_OK) {
    o.output = (wk_frame_bytes){0};
    o.error_type = wk_frame_bytes_cstr("ValueError");
    o.error_message = wk_frame_bytes_cstr(output);
  }
  wk_calls_on_result(f->calls, c->ctx, &o, now);
}

/* The outputs as the TaskResult will hold them. */
static Worker__V1__TaskResult *outputs(const fx *f) {
  wk_buf b = {0};
  wk_task_rt_collect_outputs(f->rt, &b);
  Worker__V1__TaskResult *r = worker__v1__task_result__unpack(NULL, b.len, b.data);
  wk_buf_free(&b);
  assert_non_null(r);
  return r;
}

/* ---- tests ------------------------------------------------------------------------------ */

static void test_list_outputs_land_in_call_order(void **state) {
  fx *f = *state;
  const char *args[] = {"\"a\"", "\"b\"", "\"c\""};
  start_list(f, args, 3, view(100000, WK_CALL_FAIL_FAST, 1), 0);
  assert_int_equal(f->exec.submitted, 3);
  answer(f, 2, WK_CALL_OK, "\"C\"", 1);
  answer(f, 0, WK_CALL_OK, "\"A\"", 2);
  assert_int_equal(f->done, 0);
  answer(f, 1, WK_CALL_OK, "\"B\"", 3);
  assert_int_equal(f->done, 1);
  assert_true(f->ok);
  assert_int_equal(f->rt->calls.done, 3);
  assert_int_equal(f->rt->calls.stats.calls_succeeded, 3);
  Worker__V1__TaskResult *r = outputs(f);
  assert_int_equal(r->n_outputs, 3);
  const char *want[] = {"\"A\"", "\"B\"", "\"C\""};
  for (uint32_t i = 0; i < 3; i++) {
    assert_int_equal(r->outputs[i]->index, i);
    assert_memory_equal(r->outputs[i]->value.data, want[i], 3);
  }
  worker__v1__task_result__free_unpacked(r, NULL);
}

/* Outputs count as they arrive: the call that passes max_inline_output_bytes ends the
 * phase at once (the other calls still run), and the outputs kept so far are freed. */
static void test_inline_limit_ends_the_phase_as_outputs_arrive(void **state) {
  fx *f = *state;
  const char *args[] = {"0", "1", "2", "3", "4", "5", "6", "7"};
  start_list(f, args, 8, view(100000, WK_CALL_FAIL_FAST, 1), 0);
  assert_true(f->exec.submitted >= 4);
  answer(f, 0, WK_CALL_OK, "\"12345678\"", 1);
  answer(f, 1, WK_CALL_OK, "\"12345678\"", 2);
  assert_int_equal(f->done, 0);
  assert_int_equal(f->rt->calls.output_bytes, 30); /* 14 + 16 (index 1) */
  answer(f, 2, WK_CALL_OK, "\"12345678\"", 3);     /* 46 > 40 */
  assert_int_equal(f->done, 1);
  assert_false(f->ok);
  assert_true(f->rt->calls.over_limit);
  assert_int_equal(f->rt->calls.output_bytes, 46);
  for (uint32_t i = 0; i < 8; i++) assert_int_equal(f->rt->calls.outputs[i].encoded.len, 0);
  /* a result that comes before the orchestrator stops the task is not kept either */
  answer(f, 3, WK_CALL_OK, "\"12345678\"", 4);
  assert_int_equal(f->rt->calls.outputs[3].encoded.len, 0);
  assert_int_equal(f->done, 1);
}

/* A task with a writer spools its outputs as they arrive (nothing kept in memory) and
 * is not bounded by the inline limit. */
static void test_a_writer_task_spools_its_outputs(void **state) {
  fx *f = *state;
  char path[] = "/tmp/wk-calls-spool-XXXXXX", err[256];
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  close(fd);
  unlink(path);
  snprintf(f->rt->req.result_handler, sizeof f->rt->req.result_handler, "file");
  f->rt->act.spool = wk_output_spool_create(path, err, sizeof err);
  assert_non_null(f->rt->act.spool);
  const char *args[] = {"0", "1", "2", "3"};
  start_list(f, args, 4, view(100000, WK_CALL_FAIL_FAST, 1), 0);
  assert_null(f->rt->calls.outputs);
  for (int i = 3; i >= 0; i--) answer(f, i, WK_CALL_OK, "\"12345678\"", 4 - i);
  assert_int_equal(f->done, 1);
  assert_true(f->ok);
  assert_false(f->rt->calls.over_limit);
  assert_int_equal(wk_output_spool_count(f->rt->act.spool), 4);
  assert_int_equal(f->rt->calls.output_bytes, 14 + 3 * 16);
  wk_buf none = {0};
  wk_task_rt_collect_outputs(f->rt, &none);
  assert_int_equal(none.len, 0); /* nothing inline */
}

static void test_retry_waits_its_backoff(void **state) {
  fx *f = *state;
  const char *args[] = {"1"};
  start_list(f, args, 1, view(100000, WK_CALL_FAIL_FAST, 3), 0);
  answer(f, 0, WK_CALL_RETRYABLE, "busy", 5);
  assert_int_equal(f->exec.submitted, 1); /* nothing before the backoff is over */
  int64_t at = wk_calls_next_deadline(f->calls);
  assert_true(at > 5 && at <= 15);
  wk_calls_tick(f->calls, at - 1);
  assert_int_equal(f->exec.submitted, 1);
  wk_calls_tick(f->calls, at);
  assert_int_equal(f->exec.submitted, 2);
  assert_string_equal(f->exec.calls[1].args, "1");
  answer(f, 1, WK_CALL_OK, "2", at + 1);
  assert_int_equal(f->done, 1);
  assert_true(f->ok);
  assert_int_equal(f->rt->calls.stats.calls_retried, 1);
}

static void test_fail_fast_cancels_the_rest(void **state) {
  fx *f = *state;
  const char *args[] = {"1", "2", "3"};
  start_list(f, args, 3, view(100000, WK_CALL_FAIL_FAST, 1), 0);
  answer(f, 1, WK_CALL_ERROR, "bad input", 1);
  assert_int_equal(f->done, 1);
  assert_false(f->ok);
  assert_int_equal(f->exec.cancelled, 2);
  assert_true(f->exec.calls[0].cancelled && f->exec.calls[2].cancelled);
  assert_int_equal(f->rt->calls.failed, 1);
  assert_non_null(strstr(f->rt->calls.first_failure, "call 1 failed: ValueError: bad input"));
}

static void test_stream_refills_in_batches(void **state) {
  fx *f = *state;
  const wk_builder *range = wk_builder_find_builtin("range");
  const char *json = "{\"start\":0,\"stop\":10,\"step\":1,\"chunk\":1}";
  wk_builder_input in = {
      .args = (const uint8_t *)json, .args_len = strlen(json), .json = true, .max_calls = 100};
  char err[128];
  assert_int_equal(range->stream_open(&in, &f->rt->build.stream, err, sizeof err), 0);
  f->rt->build.impl = range;
  f->rt->build.streaming = true;
  f->rt->build.calls_total = f->rt->build.stream.total;
  assert_int_equal(f->rt->build.calls_total, 10);
  wk_task_view v = view(100000, WK_CALL_FAIL_FAST, 1);
  wk_calls_start(f->calls, f->rt, &v, 0);
  /* one batch (stream_batch 3) while fewer than stream_low_water (2) wait */
  assert_int_equal(f->rt->calls.added, 3);
  assert_int_equal(f->exec.submitted, 3);
  assert_string_equal(f->exec.calls[0].args, "{\"start\":0,\"stop\":1,\"step\":1}");
  answer(f, 0, WK_CALL_OK, "0", 1);
  assert_int_equal(f->rt->calls.added, 6);
  int64_t now = 2;
  for (int i = 1; i < f->exec.submitted; i++) answer(f, i, WK_CALL_OK, "0", now++);
  assert_int_equal(f->exec.submitted, 10);
  assert_int_equal(f->rt->calls.added, 10);
  assert_int_equal(f->done, 1);
  assert_true(f->ok);
  Worker__V1__TaskResult *r = outputs(f);
  assert_int_equal(r->n_outputs, 10);
  worker__v1__task_result__free_unpacked(r, NULL);
}

/* The encoded args of a SUBCALLS frame: u32 little-endian length + bytes, each. */
static size_t encode_args(uint8_t *buf, const char *const *args, uint32_t n) {
  size_t at = 0;
  for (uint32_t i = 0; i < n; i++) {
    uint32_t len = (uint32_t)strlen(args[i]);
    for (int k = 0; k < 4; k++) buf[at++] = (uint8_t)(len >> (8 * k));
    memcpy(buf + at, args[i], len);
    at += len;
  }
  return at;
}

static void test_subcalls_answer_the_waiting_parent(void **state) {
  fx *f = *state;
  const char *args[] = {"\"parent\""};
  start_list(f, args, 1, view(100000, WK_CALL_FAIL_FAST, 1), 0);
  assert_int_equal(f->exec.submitted, 1);

  const char *child_args[] = {"10", "20"};
  uint8_t enc[64];
  size_t n = encode_args(enc, child_args, 2);
  wk_frame_subcalls req = {.request_id = 77,
                           .function = wk_frame_bytes_cstr("child_fn"),
                           .content_type = WK_FRAME_CONTENT_JSON,
                           .count = 2,
                           .args_enc = {enc, (uint32_t)n}};
  wk_calls_on_subcalls(f->calls, f->exec.calls[0].ctx, &req, 1);
  assert_int_equal(f->exec.submitted, 3);
  assert_string_equal(f->exec.calls[1].function, "child_fn");
  /* the children run child_fn's own code: its epoch, its directory, main:handler */
  char want_dir[128];
  snprintf(want_dir, sizeof want_dir, "%s/child_fn/1", f->code_root);
  assert_int_equal(f->exec.calls[1].epoch, 1);
  assert_string_equal(f->exec.calls[1].code_dir, want_dir);
  assert_string_equal(f->exec.calls[1].entrypoint, "main:handler");
  assert_int_equal(f->rt->calls.stats.subcalls, 2);
  /* children answer out of order; the parent gets them in request order, once */
  int first = strcmp(f->exec.calls[1].args, "10") == 0 ? 1 : 2;
  answer(f, 3 - first, WK_CALL_OK, "21", 2);
  assert_int_equal(f->exec.subcall_answers, 0);
  answer(f, first, WK_CALL_OK, "11", 3);
  assert_int_equal(f->exec.subcall_answers, 1);
  fake_call *parent = &f->exec.calls[0];
  assert_int_equal(parent->children, 2);
  assert_int_equal(parent->child_status[0], WK_FRAME_STATUS_OK);
  assert_string_equal(parent->child_output[0], "11");
  assert_string_equal(parent->child_output[1], "21");
  assert_int_equal(f->done, 0);
  answer(f, 0, WK_CALL_OK, "31", 4);
  assert_int_equal(f->done, 1);
  assert_true(f->ok);
}

/* A SUBCALLS of one "null" arg to `fn` from call `i` (request 77). */
static void subcall(fx *f, int i, const char *fn, const char *entrypoint, int64_t now) {
  const char *child_args[] = {"null"};
  uint8_t enc[32];
  size_t n = encode_args(enc, child_args, 1);
  wk_frame_subcalls req = {.request_id = 77,
                           .function = wk_frame_bytes_cstr(fn),
                           .entrypoint = wk_frame_bytes_cstr(entrypoint),
                           .content_type = WK_FRAME_CONTENT_JSON,
                           .count = 1,
                           .args_enc = {enc, (uint32_t)n}};
  wk_calls_on_subcalls(f->calls, f->exec.calls[i].ctx, &req, now);
}

static void test_a_subcall_target_keeps_its_first_epoch(void **state) {
  fx *f = *state;
  const char *args[] = {"1", "2"};
  start_list(f, args, 2, view(100000, WK_CALL_FAIL_FAST, 1), 0);
  subcall(f, 0, "child_fn", "", 1);
  assert_int_equal(f->exec.submitted, 3);
  assert_int_equal(f->exec.calls[2].epoch, 1);
  assert_int_equal(deploy(f, "child_fn"), 2); /* CURRENT moves on */
  subcall(f, 1, "child_fn", "", 2);
  assert_int_equal(f->exec.submitted, 4);
  assert_int_equal(f->exec.calls[3].epoch, 1); /* the task's pin, not CURRENT */
  /* a child naming no function runs its own (child_fn@1), not the task's fn@3 */
  subcall(f, 3, "", "", 3);
  assert_int_equal(f->exec.submitted, 5);
  assert_string_equal(f->exec.calls[4].function, "child_fn");
  assert_int_equal(f->exec.calls[4].epoch, 1);
  assert_string_equal(f->exec.calls[4].entrypoint, "main:handler");
  /* the task's own function from a child: the task's epoch and entry point */
  subcall(f, 4, "fn", "", 4);
  assert_int_equal(f->exec.submitted, 6);
  assert_string_equal(f->exec.calls[5].function, "fn");
  assert_int_equal(f->exec.calls[5].epoch, 3);
  assert_int_equal(f->rt->code.count, 2);
  /* pinned once each, for the task, whatever the number of subcalls */
  assert_int_equal(wk_code_pins_count(f->pins, "fn", 3), 1);
  assert_int_equal(wk_code_pins_count(f->pins, "child_fn", 1), 1);
  assert_int_equal(wk_code_pins_count(f->pins, "child_fn", 0), 0); /* no hold left */
  wk_task_code_unpin(f->rt, &f->env, NULL, NULL);
  assert_int_equal(wk_code_pins_count(f->pins, "child_fn", 1), 0);
  assert_int_equal(wk_code_pins_count(f->pins, "fn", 3), 0);
}

static void test_a_target_that_cannot_run_fails_its_subcalls_and_runs_nothing(void **state) {
  fx *f = *state;
  const char *args[] = {"1"};
  start_list(f, args, 1, view(100000, WK_CALL_FAIL_FAST, 1), 0);
  deploy(f, "secret_fn");
  const struct {
    const char *fn, *entrypoint, *want;
  } cases[] = {
      {"nosuch", "", "FunctionNotFound: function 'nosuch' is not deployed"},
      {"../fn", "", "FunctionNotFound: invalid function name '../fn'"},
      {"secret_fn", "",
       "FunctionDenied: function 'secret_fn' (entry point main:handler) is denied by this "
       "worker's audit_deny (secret*)"},
      /* the task's own function, at an entry point the deny list names */
      {"", "main:danger",
       "FunctionDenied: function 'fn' (entry point main:danger) is denied by this worker's "
       "audit_deny (fn:main:d*)"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    subcall(f, 0, cases[i].fn, cases[i].entrypoint, (int64_t)i + 1);
    assert_int_equal(f->exec.submitted, 1); /* no child was sent anywhere */
    assert_int_equal(f->exec.subcall_answers, (int)i + 1);
    assert_int_equal(f->exec.calls[0].child_status[0], WK_FRAME_STATUS_ERROR);
    assert_non_null(strstr(f->exec.calls[0].child_error[0], cases[i].want));
  }
  assert_int_equal(f->rt->code.count, 1);
  assert_int_equal(f->rt->calls.stats.subcalls, 0);
}

static void test_call_timeout_reaches_the_executor_early(void **state) {
  fx *f = *state;
  const char *args[] = {"1"};
  f->rt->req.call_timeout_ms = 100; /* the request's: the dispatcher gets 100 + 20 (escalation) */
  start_list(f, args, 1, view(100000, WK_CALL_FAIL_FAST, 1), 0);
  assert_int_equal(f->exec.calls[0].deadline_ms, 100); /* the budget taken off again */
  wk_calls_tick(f->calls, 119);
  assert_int_equal(f->done, 0);
  wk_calls_tick(f->calls, 120); /* the executor never answered: the dispatcher's backstop */
  assert_int_equal(f->done, 1);
  assert_false(f->ok);
  assert_int_equal(f->exec.cancelled, 1);
  assert_non_null(strstr(f->rt->calls.first_failure, "DeadlineExceeded"));
}

static void test_task_deadline_is_passed_as_it_is(void **state) {
  fx *f = *state;
  const char *args[] = {"1"};
  f->rt->req.call_timeout_ms = 5000; /* later than the task's deadline: that one wins */
  start_list(f, args, 1, view(300, WK_CALL_FAIL_FAST, 1), 100);
  assert_int_equal(f->exec.calls[0].deadline_ms, 200);
}

/* The adapter may deliver a call's outcome from inside submit (then returns NULL): the
 * driver is in the middle of its actions then. That outcome is taken once, the other
 * calls are sent once each, and nothing of the answered attempt is touched after. */
static void test_an_outcome_delivered_inside_submit(void **state) {
  fx *f = *state;
  f->exec.sync_answers = f->calls;
  const char *args[] = {"1", "\"sync\"", "3", "4"};
  wk_task_view v = view(100000, WK_CALL_CONTINUE, 1);
  v.max_failed_calls = 4;
  start_list(f, args, 4, v, 0);
  assert_int_equal(f->exec.submitted, 4); /* each call sent once */
  assert_int_equal(f->rt->calls.done, 1);
  assert_int_equal(f->rt->calls.failed, 1);
  assert_non_null(strstr(f->rt->calls.first_failure, "call 1 failed: ArgsTooLarge"));
  answer(f, 0, WK_CALL_OK, "1", 1);
  answer(f, 2, WK_CALL_OK, "3", 2);
  assert_int_equal(f->done, 0);
  answer(f, 3, WK_CALL_OK, "4", 3);
  assert_int_equal(f->done, 1);
  assert_true(f->ok); /* CONTINUE: one failure of four allowed */
  assert_int_equal(f->rt->calls.done, 4);
  assert_int_equal(f->rt->calls.stats.calls_succeeded, 3);
  assert_int_equal(f->exec.submitted, 4);
  assert_null(f->rt->calls.attempts); /* every attempt is over and freed */
}

static void test_stop_cancels_and_forgets(void **state) {
  fx *f = *state;
  const char *args[] = {"1", "2"};
  start_list(f, args, 2, view(100000, WK_CALL_CONTINUE, 1), 0);
  assert_int_equal(f->exec.submitted, 2);
  wk_calls_stop(f->calls, f->rt, 1);
  assert_int_equal(f->exec.cancelled, 2);
  assert_int_equal(f->done, 0); /* stopping is not finishing */
  assert_null(f->rt->calls.attempts);
  assert_int_equal(f->rt->calls.disp_task, 0);
  assert_int_equal(wk_calls_stats(f->calls).tasks, 0);
  assert_int_equal(wk_calls_next_deadline(f->calls), INT64_MAX);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_list_outputs_land_in_call_order, setup, teardown),
      cmocka_unit_test_setup_teardown(test_inline_limit_ends_the_phase_as_outputs_arrive,
                                      setup_small, teardown),
      cmocka_unit_test_setup_teardown(test_a_writer_task_spools_its_outputs, setup_small, teardown),
      cmocka_unit_test_setup_teardown(test_retry_waits_its_backoff, setup, teardown),
      cmocka_unit_test_setup_teardown(test_fail_fast_cancels_the_rest, setup, teardown),
      cmocka_unit_test_setup_teardown(test_stream_refills_in_batches, setup, teardown),
      cmocka_unit_test_setup_teardown(test_subcalls_answer_the_waiting_parent, setup, teardown),
      cmocka_unit_test_setup_teardown(test_a_subcall_target_keeps_its_first_epoch, setup, teardown),
      cmocka_unit_test_setup_teardown(
          test_a_target_that_cannot_run_fails_its_subcalls_and_runs_nothing, setup, teardown),
      cmocka_unit_test_setup_teardown(test_call_timeout_reaches_the_executor_early, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_task_deadline_is_passed_as_it_is, setup, teardown),
      cmocka_unit_test_setup_teardown(test_an_outcome_delivered_inside_submit, setup, teardown),
      cmocka_unit_test_setup_teardown(test_stop_cancels_and_forgets, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

/* test_validate.c: request validation (src/adapters/wk_validate.c), the gate every
 * gRPC request passes before the orchestrator sees it. Each rule is checked on both
 * sides (the last value accepted, the first refused) with the exact message; the gRPC
 * server answers a refused request INVALID_ARGUMENT with that message
 * (tests/integration/test_grpc_server.py checks the status end to end). Requests are
 * built with protobuf-c, as structs for the field rules and as wire bytes for decoding
 * and the UTF-8/NUL scan. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "adapters/wk_validate.h"
#include "lib/wk_arena.h"

/* protobuf-c declares string fields `char *`; the requests built here point them at
 * literals and never write through them. */
#pragma GCC diagnostic ignored "-Wdiscarded-qualifiers"

#define TASK_ID_RULE "must be 1 to 128 printable ASCII characters (0x21-0x7e)"
#define NAME_RULE "must be 1 to 128 characters of [A-Za-z0-9_.-] not starting with '.'"
#define TYPE_RULE "must be empty or 1 to 32 characters of [a-z0-9_]"
#define ENTRYPOINT_RULE \
  "must be empty or \"module:attr\" (dotted Python identifiers, at most 256 bytes)"

static const wk_validate_limits k_lim = {.max_timeout_ms = 3600000, .max_watch_tasks = 4};
static char err[WK_VALIDATE_ERR_LEN];

/* A refused check: false, and exactly this message. */
#define REFUSED(call, msg)           \
  do {                               \
    err[0] = '\0';                   \
    assert_false(call);              \
    assert_string_equal(err, (msg)); \
  } while (0)

#define ACCEPTED(call)            \
  do {                            \
    err[0] = '\0';                \
    assert_true(call);            \
    assert_string_equal(err, ""); \
  } while (0)

/* A string of n copies of c (static storage, one per call site is enough). */
static char *repeat(char *buf, char c, size_t n) {
  memset(buf, c, n);
  buf[n] = '\0';
  return buf;
}

/* ---- a valid SubmitTaskRequest, changed one field at a time --------------------- */

typedef struct submit {
  Worker__V1__SubmitTaskRequest req;
  Worker__V1__FunctionCallConfig fn;
  Worker__V1__CallRetryPolicy retry;
  Worker__V1__CallFailurePolicy failure;
  Worker__V1__ResultHandler handler;
} submit;

static void submit_init(submit *s) {
  worker__v1__submit_task_request__init(&s->req);
  worker__v1__function_call_config__init(&s->fn);
  worker__v1__call_retry_policy__init(&s->retry);
  worker__v1__call_failure_policy__init(&s->failure);
  worker__v1__result_handler__init(&s->handler);
  s->req.task_id = "t-1";
  s->fn.name = "hello";
  s->req.function = &s->fn;
}

static bool check_submit(const submit *s) {
  return wk_validate_submit_task(&s->req, &k_lim, err, sizeof err);
}

/* ---- task ids --------------------------------------------------------------------- */

static void test_task_id(void **state) {
  (void)state;
  char buf[200];
  ACCEPTED(wk_validate_task_id("task_id", "a", err, sizeof err));
  ACCEPTED(wk_validate_task_id("task_id", "!~", err, sizeof err));
  ACCEPTED(wk_validate_task_id("task_id", repeat(buf, 'x', 128), err, sizeof err));
  REFUSED(wk_validate_task_id("task_id", repeat(buf, 'x', 129), err, sizeof err),
          "task_id " TASK_ID_RULE ", got 129 bytes");
  REFUSED(wk_validate_task_id("task_id", "", err, sizeof err),
          "task_id " TASK_ID_RULE ", got 0 bytes");
  REFUSED(wk_validate_task_id("task_id", NULL, err, sizeof err),
          "task_id " TASK_ID_RULE ", got 0 bytes");
  REFUSED(wk_validate_task_id("task_id", "ab c", err, sizeof err),
          "task_id " TASK_ID_RULE ", got byte 0x20 at offset 2");
  REFUSED(wk_validate_task_id("task_ids[3]", "a\x7f", err, sizeof err),
          "task_ids[3] " TASK_ID_RULE ", got byte 0x7f at offset 1");
  REFUSED(wk_validate_task_id("task_id", "\xc3\xa9", err, sizeof err),
          "task_id " TASK_ID_RULE ", got byte 0xc3 at offset 0");
}

/* The message is cut to the caller's buffer, and nothing is written without one. */
static void test_err_buffer(void **state) {
  (void)state;
  char small[8];
  assert_false(wk_validate_task_id("task_id", "", small, sizeof small));
  assert_string_equal(small, "task_id");
  assert_false(wk_validate_task_id("task_id", "", NULL, 0));
}

/* ---- RequestTaskSlot ------------------------------------------------------------- */

static void test_request_task_slot(void **state) {
  (void)state;
  Worker__V1__RequestTaskSlotRequest r;
  worker__v1__request_task_slot_request__init(&r);
  r.task_id = "t-1";
  ACCEPTED(wk_validate_request_task_slot(&r, err, sizeof err));
  r.ttl_ms = UINT64_C(1) << 40;
  ACCEPTED(wk_validate_request_task_slot(&r, err, sizeof err));
  r.ttl_ms++;
  REFUSED(wk_validate_request_task_slot(&r, err, sizeof err),
          "ttl_ms must be at most 1099511627776 (2^40), got 1099511627777");
  r.task_id = "";
  REFUSED(wk_validate_request_task_slot(&r, err, sizeof err),
          "task_id " TASK_ID_RULE ", got 0 bytes");
}

/* ---- SubmitTask ------------------------------------------------------------------ */

static void test_submit_minimal(void **state) {
  (void)state;
  submit s;
  submit_init(&s);
  ACCEPTED(check_submit(&s));
  s.req.task_id = "a b";
  REFUSED(check_submit(&s), "task_id " TASK_ID_RULE ", got byte 0x20 at offset 1");
}

static void test_function_name(void **state) {
  (void)state;
  char buf[200];
  submit s;
  submit_init(&s);
  s.req.function = NULL;
  REFUSED(check_submit(&s), "function is required (a FunctionCallConfig with a name)");
  s.req.function = &s.fn;
  s.fn.name = "my_fn-2.v1";
  ACCEPTED(check_submit(&s));
  s.fn.name = repeat(buf, 'f', 128);
  ACCEPTED(check_submit(&s));
  s.fn.name = repeat(buf, 'f', 129);
  REFUSED(check_submit(&s), "function.name " NAME_RULE ", got 129 bytes");
  s.fn.name = "";
  REFUSED(check_submit(&s), "function.name " NAME_RULE ", got 0 bytes");
  s.fn.name = ".hidden";
  REFUSED(check_submit(&s), "function.name " NAME_RULE ", got \".hidden\"");
  s.fn.name = "a/b";
  REFUSED(check_submit(&s), "function.name " NAME_RULE ", got byte 0x2f at offset 1");
}

static void test_function_type(void **state) {
  (void)state;
  char buf[64];
  submit s;
  submit_init(&s);
  s.fn.type = "map_2";
  ACCEPTED(check_submit(&s));
  s.fn.type = repeat(buf, 'm', 32);
  ACCEPTED(check_submit(&s));
  s.fn.type = repeat(buf, 'm', 33);
  REFUSED(check_submit(&s),
          "function.type " TYPE_RULE ", got \"mmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmm\"");
  s.fn.type = "Map";
  REFUSED(check_submit(&s), "function.type " TYPE_RULE ", got \"Map\"");
}

static void test_function_entrypoint(void **state) {
  (void)state;
  char buf[300];
  submit s;
  submit_init(&s);
  static const char *const ok[] = {"", "main:handler", "pkg.mod:Obj.attr", "_m1:_f2"};
  for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
    s.fn.entrypoint = (char *)(uintptr_t)ok[i];
    ACCEPTED(check_submit(&s));
  }
  static const char *const bad[] = {"main", "main:", ":f", "1m:f", "a..b:f", "a.:f", "m:f g"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    s.fn.entrypoint = (char *)(uintptr_t)bad[i];
    char want[200];
    (void)snprintf(want, sizeof want, "function.entrypoint " ENTRYPOINT_RULE ", got \"%s\"",
                   bad[i]);
    REFUSED(check_submit(&s), want);
  }
  /* 256 bytes is the limit; the message shows 40 bytes and "..." */
  memset(buf, 'a', 256);
  buf[0] = 'm';
  buf[1] = ':';
  buf[256] = '\0';
  s.fn.entrypoint = buf;
  ACCEPTED(check_submit(&s));
  buf[256] = 'a';
  buf[257] = '\0';
  REFUSED(check_submit(&s), "function.entrypoint " ENTRYPOINT_RULE
                            ", got \"m:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa...\"");
  /* the excerpt never echoes quotes or control bytes */
  s.fn.entrypoint = "a\"b\x01:c";
  REFUSED(check_submit(&s), "function.entrypoint " ENTRYPOINT_RULE ", got \"a?b?:c\"");
}

static void test_function_content_type_and_options(void **state) {
  (void)state;
  submit s;
  submit_init(&s);
  s.fn.content_type = WORKER__V1__CONTENT_TYPE__CONTENT_TYPE_BYTES;
  ACCEPTED(check_submit(&s));
  s.fn.content_type = (Worker__V1__ContentType)7;
  REFUSED(check_submit(&s),
          "function.content_type 7 is not a known ContentType "
          "(0 CONTENT_TYPE_JSON, 1 CONTENT_TYPE_BYTES)");
  s.fn.content_type = (Worker__V1__ContentType)-1;
  REFUSED(check_submit(&s),
          "function.content_type -1 is not a known ContentType "
          "(0 CONTENT_TYPE_JSON, 1 CONTENT_TYPE_BYTES)");
  s.fn.content_type = WORKER__V1__CONTENT_TYPE__CONTENT_TYPE_JSON;
  Worker__V1__FunctionCallConfig__OptionsEntry e;
  worker__v1__function_call_config__options_entry__init(&e);
  Worker__V1__FunctionCallConfig__OptionsEntry *opts[65];
  for (size_t i = 0; i < 65; i++) opts[i] = &e;
  s.fn.options = opts;
  s.fn.n_options = 64;
  ACCEPTED(check_submit(&s));
  s.fn.n_options = 65;
  REFUSED(check_submit(&s), "function.options may hold at most 64 entries, got 65");
}

static void test_timeout_and_failure_policy(void **state) {
  (void)state;
  submit s;
  submit_init(&s);
  s.req.timeout_ms = 3600000;
  ACCEPTED(check_submit(&s));
  s.req.timeout_ms = 3600001;
  REFUSED(check_submit(&s), "timeout_ms must be at most 3600000, got 3600001");
  s.req.timeout_ms = 0;
  s.req.call_failure_policy = &s.failure;
  s.failure.mode = WORKER__V1__CALL_FAILURE_MODE__CALL_FAILURE_MODE_CONTINUE;
  ACCEPTED(check_submit(&s));
  s.failure.mode = (Worker__V1__CallFailureMode)2;
  REFUSED(check_submit(&s),
          "call_failure_policy.mode 2 is not a known CallFailureMode "
          "(0 CALL_FAILURE_MODE_FAIL_FAST, 1 CALL_FAILURE_MODE_CONTINUE)");
}

static void test_retry_policy(void **state) {
  (void)state;
  submit s;
  submit_init(&s);
  s.req.call_retry_policy = &s.retry;
  ACCEPTED(check_submit(&s)); /* all defaults */
  s.retry.max_attempts = 100;
  ACCEPTED(check_submit(&s));
  s.retry.max_attempts = 101;
  REFUSED(check_submit(&s), "call_retry_policy.max_attempts must be at most 100, got 101");
  s.retry.max_attempts = 3;

  static const double ok[] = {0.0, 1.0, 2.5, 100.0};
  for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
    s.retry.backoff_multiplier = ok[i];
    ACCEPTED(check_submit(&s));
  }
  static const double bad[] = {0.5, 100.5, -1.0, INFINITY};
  static const char *const shown[] = {"0.5", "100.5", "-1", "inf"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    s.retry.backoff_multiplier = bad[i];
    char want[200];
    (void)snprintf(want, sizeof want,
                   "call_retry_policy.backoff_multiplier must be 0 (the default) or between 1 "
                   "and 100, got %s",
                   shown[i]);
    REFUSED(check_submit(&s), want);
  }
  s.retry.backoff_multiplier = NAN;
  err[0] = '\0';
  assert_false(check_submit(&s));
  assert_non_null(strstr(err, "call_retry_policy.backoff_multiplier must be 0 (the default)"));
  assert_non_null(strstr(err, "nan"));
  s.retry.backoff_multiplier = 2.0;

  s.retry.initial_backoff_ms = 3600000;
  s.retry.max_backoff_ms = 3600000;
  ACCEPTED(check_submit(&s));
  s.retry.initial_backoff_ms = 3600001;
  REFUSED(check_submit(&s),
          "call_retry_policy.initial_backoff_ms must be at most 3600000 "
          "(one hour), got 3600001");
  s.retry.initial_backoff_ms = 100;
  s.retry.max_backoff_ms = 3600001;
  REFUSED(check_submit(&s),
          "call_retry_policy.max_backoff_ms must be at most 3600000 "
          "(one hour), got 3600001");
  s.retry.initial_backoff_ms = 1000;
  s.retry.max_backoff_ms = 500;
  REFUSED(check_submit(&s),
          "call_retry_policy.max_backoff_ms (500) must not be below "
          "initial_backoff_ms (1000)");
  s.retry.max_backoff_ms = 0; /* 0: the default, no ordering to check */
  ACCEPTED(check_submit(&s));
  s.retry.initial_backoff_ms = 0;
  s.retry.max_backoff_ms = 500;
  ACCEPTED(check_submit(&s));
}

static void test_labels(void **state) {
  (void)state;
  char big[300];
  submit s;
  submit_init(&s);
  Worker__V1__SubmitTaskRequest__LabelsEntry e;
  worker__v1__submit_task_request__labels_entry__init(&e);
  e.key = "team";
  e.value = "core";
  Worker__V1__SubmitTaskRequest__LabelsEntry *labels[65];
  for (size_t i = 0; i < 65; i++) labels[i] = &e;
  s.req.labels = labels;
  s.req.n_labels = 64;
  ACCEPTED(check_submit(&s));
  s.req.n_labels = 65;
  REFUSED(check_submit(&s), "labels may hold at most 64 entries, got 65");
  s.req.n_labels = 1;
  e.key = repeat(big, 'k', 256);
  ACCEPTED(check_submit(&s));
  e.key = repeat(big, 'k', 257);
  REFUSED(check_submit(&s),
          "labels key \"kkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkk...\" must "
          "be at most 256 bytes, got 257");
  e.key = "team";
  e.value = repeat(big, 'v', 256);
  ACCEPTED(check_submit(&s));
  e.value = repeat(big, 'v', 257);
  REFUSED(check_submit(&s), "labels value for key \"team\" must be at most 256 bytes, got 257");
}

static void test_result_handler(void **state) {
  (void)state;
  submit s;
  submit_init(&s);
  s.req.result_handler = &s.handler;
  ACCEPTED(check_submit(&s)); /* empty type: none */
  s.handler.type = "redis";
  ACCEPTED(check_submit(&s));
  s.handler.type = "Redis!";
  REFUSED(check_submit(&s), "result_handler.type " TYPE_RULE ", got \"Redis!\"");
  s.handler.type = "file";
  Worker__V1__ResultHandler__OptionsEntry e;
  worker__v1__result_handler__options_entry__init(&e);
  Worker__V1__ResultHandler__OptionsEntry *opts[65];
  for (size_t i = 0; i < 65; i++) opts[i] = &e;
  s.handler.options = opts;
  s.handler.n_options = 64;
  ACCEPTED(check_submit(&s));
  s.handler.n_options = 65;
  REFUSED(check_submit(&s), "result_handler.options may hold at most 64 entries, got 65");
}

/* The first invalid field is the one reported, in the order the request lists them. */
static void test_submit_first_error_wins(void **state) {
  (void)state;
  submit s;
  submit_init(&s);
  s.req.task_id = "";
  s.fn.name = "";
  s.req.timeout_ms = UINT64_MAX;
  REFUSED(check_submit(&s), "task_id " TASK_ID_RULE ", got 0 bytes");
  s.req.task_id = "t";
  REFUSED(check_submit(&s), "function.name " NAME_RULE ", got 0 bytes");
  s.fn.name = "f";
  REFUSED(check_submit(&s), "timeout_ms must be at most 3600000, got 18446744073709551615");
}

/* ---- GetTaskResult, CancelTask, Health --------------------------------------------- */

static void test_get_task_result(void **state) {
  (void)state;
  Worker__V1__GetTaskResultRequest r;
  worker__v1__get_task_result_request__init(&r);
  r.task_id = "t-1";
  ACCEPTED(wk_validate_get_task_result(&r, err, sizeof err));
  r.task_id = "";
  REFUSED(wk_validate_get_task_result(&r, err, sizeof err),
          "task_id " TASK_ID_RULE ", got 0 bytes");
}

static void test_cancel_task(void **state) {
  (void)state;
  char buf[1100];
  Worker__V1__CancelTaskRequest r;
  worker__v1__cancel_task_request__init(&r);
  r.task_id = "t-1";
  ACCEPTED(wk_validate_cancel_task(&r, err, sizeof err));
  r.reason = repeat(buf, 'r', 1024);
  ACCEPTED(wk_validate_cancel_task(&r, err, sizeof err));
  r.reason = repeat(buf, 'r', 1025);
  REFUSED(wk_validate_cancel_task(&r, err, sizeof err),
          "reason must be at most 1024 bytes, got 1025");
  r.task_id = "\t";
  REFUSED(wk_validate_cancel_task(&r, err, sizeof err),
          "task_id " TASK_ID_RULE ", got byte 0x09 at offset 0");
}

static void test_health(void **state) {
  (void)state;
  char buf[300];
  Grpc__Health__V1__HealthCheckRequest r;
  grpc__health__v1__health_check_request__init(&r);
  ACCEPTED(wk_validate_health(&r, err, sizeof err));
  r.service = "worker.v1.WorkerService";
  ACCEPTED(wk_validate_health(&r, err, sizeof err));
  r.service = repeat(buf, 's', 256);
  ACCEPTED(wk_validate_health(&r, err, sizeof err));
  r.service = repeat(buf, 's', 257);
  REFUSED(wk_validate_health(&r, err, sizeof err), "service must be at most 256 bytes, got 257");
}

/* ---- WatchTasks -------------------------------------------------------------------- */

static bool check_watch(char **ids, size_t n) {
  Worker__V1__WatchTasksRequest r;
  worker__v1__watch_tasks_request__init(&r);
  r.task_ids = ids;
  r.n_task_ids = n;
  return wk_validate_watch_tasks(&r, &k_lim, err, sizeof err);
}

static void test_watch_tasks(void **state) {
  (void)state;
  char *ids[5] = {"a", "b", "c", "d", "e"};
  ACCEPTED(check_watch(ids, 1));
  ACCEPTED(check_watch(ids, 4));
  REFUSED(check_watch(ids, 0), "task_ids must hold 1 to 4 task ids, got 0");
  REFUSED(check_watch(ids, 5), "task_ids must hold 1 to 4 task ids, got 5");
  char *bad[] = {"a", "", "c"};
  REFUSED(check_watch(bad, 3), "task_ids[1] " TASK_ID_RULE ", got 0 bytes");
}

/* Duplicates: the earliest repeated entry is named, with the entry it repeats. */
static void test_watch_tasks_duplicates(void **state) {
  (void)state;
  char *abab[] = {"a", "b", "a", "b"};
  REFUSED(check_watch(abab, 4), "task_ids[2] duplicates task_ids[0]; list each task once");
  char *xyyx[] = {"x", "y", "y", "x"};
  REFUSED(check_watch(xyyx, 4), "task_ids[2] duplicates task_ids[1]; list each task once");
  char *aaa[] = {"a", "a", "a"};
  REFUSED(check_watch(aaa, 3), "task_ids[1] duplicates task_ids[0]; list each task once");
  char *late[] = {"q", "r", "s", "q"};
  REFUSED(check_watch(late, 4), "task_ids[3] duplicates task_ids[0]; list each task once");
}

/* ---- decoding wire bytes ------------------------------------------------------------ */

/* Packs a message into buf (at most cap bytes); returns its length. */
static size_t pack(const ProtobufCMessage *m, uint8_t *buf, size_t cap) {
  size_t n = protobuf_c_message_get_packed_size(m);
  assert_true(n <= cap);
  assert_int_equal(protobuf_c_message_pack(m, buf), n);
  return n;
}

static void test_decode_valid(void **state) {
  (void)state;
  submit s;
  submit_init(&s);
  s.req.timeout_ms = 5000;
  uint8_t buf[256];
  size_t n = pack(&s.req.base, buf, sizeof buf);
  err[0] = '\0';
  ProtobufCMessage *m = wk_validate_decode(WK_RPC_SUBMIT_TASK, buf, n, &k_lim, err, sizeof err);
  assert_non_null(m);
  assert_string_equal(err, "");
  const Worker__V1__SubmitTaskRequest *r = (const Worker__V1__SubmitTaskRequest *)m;
  assert_string_equal(r->task_id, "t-1");
  assert_string_equal(r->function->name, "hello");
  assert_int_equal(r->timeout_ms, 5000);
  protobuf_c_message_free_unpacked(m, NULL);

  /* an empty Health request is valid: no bytes, no buffer */
  m = wk_validate_decode(WK_RPC_HEALTH_CHECK, NULL, 0, &k_lim, err, sizeof err);
  assert_non_null(m);
  protobuf_c_message_free_unpacked(m, NULL);
  m = wk_validate_decode(WK_RPC_HEALTH_WATCH, NULL, 0, &k_lim, err, sizeof err);
  assert_non_null(m);
  protobuf_c_message_free_unpacked(m, NULL);
}

/* An arena allocator that counts the pieces it hands out. */
typedef struct counted_arena {
  wk_arena arena;
  int pieces;
} counted_arena;

static void *count_alloc(void *ud, size_t n) {
  counted_arena *c = ud;
  c->pieces++;
  return wk_arena_alloc(&c->arena, n);
}

static void count_free(void *ud, void *p) { /* freed with the arena */
  (void)ud;
  (void)p;
}

/* Decoded into an arena (as the server does): every piece of the message comes from it,
 * the message is whole, and an invalid request decoded there leaves nothing to free but
 * the arena. AddressSanitizer (the test build) reports any piece left outside it. */
static void test_decode_into_arena(void **state) {
  (void)state;
  submit s;
  submit_init(&s);
  uint8_t buf[256];
  size_t n = pack(&s.req.base, buf, sizeof buf);
  counted_arena c = {.pieces = 0};
  wk_arena_init(&c.arena, n + 384);
  ProtobufCAllocator alloc = {count_alloc, count_free, &c};
  ProtobufCMessage *m =
      wk_validate_decode_in(WK_RPC_SUBMIT_TASK, buf, n, &k_lim, &alloc, err, sizeof err);
  assert_non_null(m);
  const Worker__V1__SubmitTaskRequest *r = (const Worker__V1__SubmitTaskRequest *)m;
  assert_string_equal(r->task_id, "t-1");
  assert_string_equal(r->function->name, "hello");
  assert_true(c.pieces >= 3);              /* the request, its function, their strings */
  assert_int_equal(c.arena.held, n + 384); /* one block held them all */
  wk_arena_release(&c.arena);

  s.req.task_id = "bad id";
  n = pack(&s.req.base, buf, sizeof buf);
  assert_null(wk_validate_decode_in(WK_RPC_SUBMIT_TASK, buf, n, &k_lim, &alloc, err, sizeof err));
  assert_non_null(strstr(err, "task_id"));
  wk_arena_release(&c.arena);
}

/* Decoding applies the method's rules. */
static void test_decode_applies_rules(void **state) {
  (void)state;
  static const wk_rpc_method methods[] = {WK_RPC_REQUEST_TASK_SLOT, WK_RPC_SUBMIT_TASK,
                                          WK_RPC_GET_TASK_RESULT, WK_RPC_CANCEL_TASK};
  for (size_t i = 0; i < sizeof methods / sizeof methods[0]; i++) {
    err[0] = '\0';
    assert_null(wk_validate_decode(methods[i], NULL, 0, &k_lim, err, sizeof err));
    assert_string_equal(err, "task_id " TASK_ID_RULE ", got 0 bytes");
  }
  err[0] = '\0';
  assert_null(wk_validate_decode(WK_RPC_WATCH_TASKS, NULL, 0, &k_lim, err, sizeof err));
  assert_string_equal(err, "task_ids must hold 1 to 4 task ids, got 0");
}

static void test_decode_undecodable(void **state) {
  (void)state;
  static const uint8_t junk[] = {0xff, 0xff, 0xff};
  err[0] = '\0';
  assert_null(
      wk_validate_decode(WK_RPC_GET_TASK_RESULT, junk, sizeof junk, &k_lim, err, sizeof err));
  assert_string_equal(err, "request is not a valid worker.v1.GetTaskResultRequest");
  err[0] = '\0';
  assert_null(wk_validate_decode(WK_RPC_SUBMIT_TASK, NULL, 3, &k_lim, err, sizeof err));
  assert_string_equal(err, "request is not a valid worker.v1.SubmitTaskRequest");
  /* a length that runs past the end */
  static const uint8_t cut[] = {0x0a, 0x05, 'a', 'b'};
  err[0] = '\0';
  assert_null(wk_validate_decode(WK_RPC_GET_TASK_RESULT, cut, sizeof cut, &k_lim, err, sizeof err));
  assert_string_equal(err, "request is not a valid worker.v1.GetTaskResultRequest");
  err[0] = '\0';
  assert_null(wk_validate_decode(WK_RPC_METHOD_COUNT, junk, sizeof junk, &k_lim, err, sizeof err));
  char unknown[32];
  snprintf(unknown, sizeof unknown, "unknown method %d", (int)WK_RPC_METHOD_COUNT);
  assert_string_equal(err, unknown);
  assert_null(wk_validate_descriptor(WK_RPC_METHOD_COUNT));
  assert_ptr_equal(wk_validate_descriptor(WK_RPC_HEALTH_WATCH),
                   &grpc__health__v1__health_check_request__descriptor);
}

/* ListTasks and GetTaskLogs (issue 13 §4): bounded pages, tokens only as the worker
 * makes them, known states, labels as a submission's; a call only with one_call. */
static void test_list_tasks_and_logs(void **state) {
  (void)state;
  Worker__V1__ListTasksRequest lr = WORKER__V1__LIST_TASKS_REQUEST__INIT;
  assert_true(wk_validate_list_tasks(&lr, err, sizeof err));
  lr.page_size = 1000;
  lr.page_token = (char *)(uintptr_t) "s18446744073709551";
  assert_true(wk_validate_list_tasks(&lr, err, sizeof err));
  lr.page_size = 1001;
  assert_false(wk_validate_list_tasks(&lr, err, sizeof err));
  assert_string_equal(err, "page_size must be at most 1000 (0 = 100), got 1001");
  lr.page_size = 0;
  const char *bad_tokens[] = {"s", "s0", "s01", "x1", "s1a", "s12345678901234567890"};
  for (size_t i = 0; i < sizeof bad_tokens / sizeof bad_tokens[0]; i++) {
    lr.page_token = (char *)(uintptr_t)bad_tokens[i];
    assert_false(wk_validate_list_tasks(&lr, err, sizeof err));
    assert_non_null(strstr(err, "page_token must be empty or a next_page_token"));
  }
  uint64_t seq;
  assert_true(wk_validate_page_token("s42", &seq));
  assert_int_equal(seq, 42);
  lr.page_token = (char *)(uintptr_t) "";
  Worker__V1__TaskState states[2] = {WORKER__V1__TASK_STATE__TASK_STATE_RUNNING,
                                     (Worker__V1__TaskState)6};
  lr.states = states;
  lr.n_states = 2;
  assert_false(wk_validate_list_tasks(&lr, err, sizeof err));
  assert_string_equal(err, "states[1] must be a TaskState from PREPARING to CANCELLED, got 6");
  lr.n_states = 1;
  assert_true(wk_validate_list_tasks(&lr, err, sizeof err));

  Worker__V1__GetTaskLogsRequest gr = WORKER__V1__GET_TASK_LOGS_REQUEST__INIT;
  assert_false(wk_validate_get_task_logs(&gr, err, sizeof err)); /* no task id */
  gr.task_id = (char *)(uintptr_t) "t1";
  assert_true(wk_validate_get_task_logs(&gr, err, sizeof err));
  gr.call = 3;
  assert_false(wk_validate_get_task_logs(&gr, err, sizeof err));
  assert_string_equal(err, "call is 3 but one_call is false: set one_call to pick a call");
  gr.one_call = true;
  assert_true(wk_validate_get_task_logs(&gr, err, sizeof err));
}

/* protobuf-c checks neither UTF-8 nor NUL bytes in strings: the wire scan does, and
 * names the field, nested and repeated ones by path. */
static void test_decode_strings(void **state) {
  (void)state;
  /* GetTaskResultRequest{task_id (1) = "a\0b"} */
  static const uint8_t nul[] = {0x0a, 0x03, 'a', 0x00, 'b'};
  err[0] = '\0';
  assert_null(wk_validate_decode(WK_RPC_GET_TASK_RESULT, nul, sizeof nul, &k_lim, err, sizeof err));
  assert_string_equal(err, "task_id must not contain NUL bytes (one at offset 1)");
  static const uint8_t bad_utf8[] = {0x0a, 0x02, 'a', 0xff};
  err[0] = '\0';
  assert_null(wk_validate_decode(WK_RPC_GET_TASK_RESULT, bad_utf8, sizeof bad_utf8, &k_lim, err,
                                 sizeof err));
  assert_string_equal(err, "task_id must be valid UTF-8 (bad byte 0xff at offset 1)");
  /* overlong (0xc0 0x80) and surrogate (0xed 0xa0 0x80) encodings are not UTF-8 */
  static const uint8_t overlong[] = {0x0a, 0x02, 0xc0, 0x80};
  err[0] = '\0';
  assert_null(wk_validate_decode(WK_RPC_GET_TASK_RESULT, overlong, sizeof overlong, &k_lim, err,
                                 sizeof err));
  assert_string_equal(err, "task_id must be valid UTF-8 (bad byte 0xc0 at offset 0)");
  static const uint8_t surrogate[] = {0x0a, 0x03, 0xed, 0xa0, 0x80};
  err[0] = '\0';
  assert_null(wk_validate_decode(WK_RPC_GET_TASK_RESULT, surrogate, sizeof surrogate, &k_lim, err,
                                 sizeof err));
  assert_string_equal(err, "task_id must be valid UTF-8 (bad byte 0xed at offset 0)");
  /* CancelTaskRequest{task_id = "t", reason (2) = "é" then a bad byte}: UTF-8 passes, then fails */
  static const uint8_t reason[] = {0x0a, 0x01, 't', 0x12, 0x03, 0xc3, 0xa9, 0x80};
  err[0] = '\0';
  assert_null(
      wk_validate_decode(WK_RPC_CANCEL_TASK, reason, sizeof reason, &k_lim, err, sizeof err));
  assert_string_equal(err, "reason must be valid UTF-8 (bad byte 0x80 at offset 2)");
  /* WatchTasksRequest{task_ids (1) = ["a", "\0"]}: the repeated field is indexed */
  static const uint8_t watch[] = {0x0a, 0x01, 'a', 0x0a, 0x01, 0x00};
  err[0] = '\0';
  assert_null(wk_validate_decode(WK_RPC_WATCH_TASKS, watch, sizeof watch, &k_lim, err, sizeof err));
  assert_string_equal(err, "task_ids[1] must not contain NUL bytes (one at offset 0)");
  /* SubmitTaskRequest{task_id = "t", function (3) = {name (2) = "f\xfe"}}: a nested path */
  static const uint8_t nested[] = {0x0a, 0x01, 't', 0x1a, 0x04, 0x12, 0x02, 'f', 0xfe};
  err[0] = '\0';
  assert_null(
      wk_validate_decode(WK_RPC_SUBMIT_TASK, nested, sizeof nested, &k_lim, err, sizeof err));
  assert_string_equal(err, "function.name must be valid UTF-8 (bad byte 0xfe at offset 1)");
  /* valid multi-byte UTF-8 in a free-text field passes */
  static const uint8_t ok[] = {0x0a, 0x01, 't', 0x12, 0x04, 0xf0, 0x9f, 0x98, 0x80};
  ProtobufCMessage *m =
      wk_validate_decode(WK_RPC_CANCEL_TASK, ok, sizeof ok, &k_lim, err, sizeof err);
  assert_non_null(m);
  protobuf_c_message_free_unpacked(m, NULL);
}

/* Field number 0 (an overlong tag protobuf-c lets through) is refused. */
static void test_decode_field_zero(void **state) {
  (void)state;
  static const uint8_t tag0[] = {0x80, 0x00, 0x00};
  err[0] = '\0';
  ProtobufCMessage *m =
      wk_validate_decode(WK_RPC_GET_TASK_RESULT, tag0, sizeof tag0, &k_lim, err, sizeof err);
  assert_null(m);
  assert_string_equal(err, "request is not a valid worker.v1.GetTaskResultRequest");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_task_id),
      cmocka_unit_test(test_err_buffer),
      cmocka_unit_test(test_request_task_slot),
      cmocka_unit_test(test_submit_minimal),
      cmocka_unit_test(test_function_name),
      cmocka_unit_test(test_function_type),
      cmocka_unit_test(test_function_entrypoint),
      cmocka_unit_test(test_function_content_type_and_options),
      cmocka_unit_test(test_timeout_and_failure_policy),
      cmocka_unit_test(test_retry_policy),
      cmocka_unit_test(test_labels),
      cmocka_unit_test(test_result_handler),
      cmocka_unit_test(test_submit_first_error_wins),
      cmocka_unit_test(test_get_task_result),
      cmocka_unit_test(test_cancel_task),
      cmocka_unit_test(test_health),
      cmocka_unit_test(test_watch_tasks),
      cmocka_unit_test(test_watch_tasks_duplicates),
      cmocka_unit_test(test_decode_valid),
      cmocka_unit_test(test_decode_into_arena),
      cmocka_unit_test(test_decode_applies_rules),
      cmocka_unit_test(test_decode_undecodable),
      cmocka_unit_test(test_list_tasks_and_logs),
      cmocka_unit_test(test_decode_strings),
      cmocka_unit_test(test_decode_field_zero),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

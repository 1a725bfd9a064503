/* test_wire.c: unit tests of src/app/wk_wire.c's TaskResult encoder, against
 * protobuf-c's own packer of the same message (the encoder is written by hand). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <string.h>

#include "app/wk_wire.h"
#include "worker/v1/worker.pb-c.h"

static uint64_t rng_state = 0x9e3779b97f4a7c15u;

static uint64_t next_rand(void) { /* xorshift64*: the same cases every run */
  rng_state ^= rng_state >> 12;
  rng_state ^= rng_state << 25;
  rng_state ^= rng_state >> 27;
  return rng_state * 0x2545f4914f6cdd1du;
}

/* A value of a random size class: 0 (the default, not sent), one byte, a few bytes, or
 * up to all 64 bits (10-byte varints). */
static uint64_t any_value(void) {
  switch (next_rand() % 4) {
    case 0: return 0;
    case 1: return next_rand() % 128;
    case 2: return next_rand() % 100000000;
    default: return next_rand();
  }
}

/* A monotonic time: 0 (never) or positive, small or large (below 2^61, so that it
 * plus an offset below 2^61 stays an int64). */
static int64_t any_time(void) { return (int64_t)(any_value() >> 3); }

/* The oracle: the same TaskResult packed by protobuf-c, outputs and plugin results
 * appended as the encoder appends them. */
static void pack_with_protobuf_c(wk_buf *out, const wk_task_result *r, int64_t off) {
  const wk_task_statistic *s = &r->statistic;
  Worker__V1__TaskStatistic st = WORKER__V1__TASK_STATISTIC__INIT;
  st.accepted_unix_ms = wk_wire_unix_ms(s->accepted_ms, off);
  st.started_unix_ms = wk_wire_unix_ms(s->activated_ms, off);
  st.finished_unix_ms = wk_wire_unix_ms(s->finished_ms, off);
  int64_t ms;
  (void)wk_task_phase_ms(s, WK_PHASE_BUILDER, s->finished_ms, &ms);
  st.builder_ms = (uint64_t)ms;
  (void)wk_task_phase_ms(s, WK_PHASE_CALLS, s->finished_ms, &ms);
  st.calls_ms = (uint64_t)ms;
  (void)wk_task_phase_ms(s, WK_PHASE_WRITER, s->finished_ms, &ms);
  st.writer_ms = (uint64_t)ms;
  st.calls_total = s->calls.calls_total;
  st.calls_succeeded = s->calls.calls_succeeded;
  st.calls_failed = s->calls.calls_failed;
  st.calls_retried = s->calls.calls_retried;
  st.calls_done = s->calls.calls_succeeded + s->calls.calls_failed;
  st.subcalls = s->calls.subcalls;
  st.executor_cpu_ms = s->calls.executor_cpu_us / 1000u;
  st.bytes_in = s->calls.bytes_in;
  st.bytes_out = s->calls.bytes_out;
  char id[WK_TASK_ID_MAX + 1];
  memcpy(id, r->task_id, r->task_id_len);
  id[r->task_id_len] = '\0';
  Worker__V1__TaskResult m = WORKER__V1__TASK_RESULT__INIT;
  m.task_id = id;
  m.state = (Worker__V1__TaskState)wk_wire_task_state(r->state);
  m.phase = (Worker__V1__Phase)wk_wire_phase(r->phase);
  m.failure_code = (Worker__V1__FailureCode)r->failure_code;
  m.failure_message = (char *)(uintptr_t)r->failure_message;
  m.code_epoch = r->code_epoch;
  m.statistic = &st;
  size_t n = worker__v1__task_result__get_packed_size(&m);
  worker__v1__task_result__pack(&m, wk_buf_reserve(out, n));
  out->len += n;
  wk_buf_append(out, r->outputs.data, r->outputs.len);
  wk_buf_append(out, r->plugin_results.data, r->plugin_results.len);
}

static void assert_same_bytes(const wk_task_result *r, int64_t off) {
  wk_buf mine = {0}, theirs = {0};
  wk_buf_append(&mine, "prefix", 6); /* appends: what is there stays */
  wk_buf_append(&theirs, "prefix", 6);
  wk_wire_append_task_result(&mine, r, off);
  pack_with_protobuf_c(&theirs, r, off);
  assert_int_equal(mine.len, theirs.len);
  assert_memory_equal(mine.data, theirs.data, mine.len);
  wk_buf_free(&mine);
  wk_buf_free(&theirs);
}

/* Every field at its default, a fresh (PREPARING) result, and the edges of each. */
static void test_defaults_and_edges_match_protobuf_c(void **state) {
  (void)state;
  wk_task_result r = {0};
  r.task_id = "t";
  r.task_id_len = 1;
  r.failure_message = "";
  assert_same_bytes(&r, 0); /* the statistic is sent even when every field is 0 */
  r.state = WK_TASK_FAILED;
  r.phase = WK_PHASE_WRITER;
  r.failure_code = WK_FAIL_WORKER_SHUTDOWN;
  char msg[WK_CORE_FAILURE_MESSAGE_BYTES];
  memset(msg, 'm', sizeof msg - 1);
  msg[sizeof msg - 1] = '\0';
  r.failure_message = msg; /* a length varint of two bytes */
  char id[WK_TASK_ID_MAX];
  memset(id, 'i', sizeof id);
  r.task_id = id;
  r.task_id_len = sizeof id;
  r.code_epoch = UINT64_MAX;
  r.statistic.accepted_ms = 1;
  r.statistic.finished_ms = INT64_MAX / 2;
  r.statistic.calls.calls_total = UINT64_MAX;
  r.statistic.calls.executor_cpu_us = 999; /* 0 ms: not sent */
  assert_same_bytes(&r, 0);
  assert_same_bytes(&r, -1); /* times before the epoch: negative int64, 10 bytes */
  assert_same_bytes(&r, INT64_MAX / 4);
}

/* 2,000 results of random field values, outputs and plugin records included. */
static void test_random_results_match_protobuf_c(void **state) {
  (void)state;
  static const char *messages[] = {"", "x", "the call raised ValueError: bad input"};
  for (int i = 0; i < 2000; i++) {
    wk_task_result r = {0};
    char id[WK_TASK_ID_MAX];
    size_t id_len = 1 + next_rand() % sizeof id;
    for (size_t k = 0; k < id_len; k++) id[k] = (char)('a' + next_rand() % 26);
    r.task_id = id;
    r.task_id_len = id_len;
    r.state = (wk_task_state)(next_rand() % (WK_TASK_CANCELLED + 1));
    r.phase = (wk_phase)(next_rand() % (WK_PHASE_DONE + 1));
    r.failure_code = (wk_failure_code)(next_rand() % WK_FAIL_COUNT);
    r.failure_message = messages[next_rand() % 3];
    r.code_epoch = any_value();
    wk_task_statistic *s = &r.statistic;
    s->accepted_ms = any_time();
    s->activated_ms = any_time();
    s->builder_started_ms = any_time();
    s->builder_finished_ms = any_time();
    s->calls_started_ms = any_time();
    s->calls_finished_ms = any_time();
    s->writer_started_ms = any_time();
    s->writer_finished_ms = any_time();
    s->finished_ms = any_time();
    s->calls.calls_total = any_value();
    s->calls.calls_succeeded = any_value() >> 1;
    s->calls.calls_failed = any_value() >> 1;
    s->calls.calls_retried = any_value();
    s->calls.subcalls = any_value();
    s->calls.executor_cpu_us = any_value();
    s->calls.bytes_in = any_value();
    s->calls.bytes_out = any_value();
    uint8_t records[64];
    size_t n_out = next_rand() % 2 ? 0 : 20, n_plugin = next_rand() % 2 ? 0 : 30;
    for (size_t k = 0; k < sizeof records; k++) records[k] = (uint8_t)next_rand();
    r.outputs = (wk_bytes){records, n_out};
    r.plugin_results = (wk_bytes){records + 20, n_plugin};
    assert_same_bytes(&r, (int64_t)(any_value() >> 3));
  }
}

/* What the encoder writes decodes as the message it stands for. */
static void test_decodes_with_its_outputs(void **state) {
  (void)state;
  Worker__V1__CallOutput co = WORKER__V1__CALL_OUTPUT__INIT;
  co.index = 3;
  co.outcome_case = WORKER__V1__CALL_OUTPUT__OUTCOME_VALUE;
  uint8_t value[] = {0x34, 0x32}; /* "42" */
  co.value.data = value;
  co.value.len = 2;
  uint8_t packed[64];
  size_t packed_len = worker__v1__call_output__pack(&co, packed);
  wk_buf outputs = {0};
  wk_wire_append_bytes_field(&outputs, 7, packed, packed_len);
  wk_task_result r = {0};
  r.task_id = "task-1";
  r.task_id_len = 6;
  r.state = WK_TASK_SUCCEEDED;
  r.failure_message = "";
  r.code_epoch = 7;
  r.outputs = (wk_bytes){outputs.data, outputs.len};
  r.statistic.accepted_ms = 100;
  r.statistic.finished_ms = 250;
  r.statistic.calls.calls_total = 1;
  r.statistic.calls.calls_succeeded = 1;
  wk_buf b = {0};
  wk_wire_append_task_result(&b, &r, 1000);
  Worker__V1__TaskResult *m = worker__v1__task_result__unpack(NULL, b.len, b.data);
  assert_non_null(m);
  assert_string_equal(m->task_id, "task-1");
  assert_int_equal(m->state, WORKER__V1__TASK_STATE__TASK_STATE_SUCCEEDED);
  assert_int_equal(m->code_epoch, 7);
  assert_non_null(m->statistic);
  assert_int_equal(m->statistic->accepted_unix_ms, 1100);
  assert_int_equal(m->statistic->finished_unix_ms, 1250);
  assert_int_equal(m->statistic->calls_done, 1);
  assert_int_equal(m->n_outputs, 1);
  assert_int_equal(m->outputs[0]->index, 3);
  assert_memory_equal(m->outputs[0]->value.data, "42", 2);
  worker__v1__task_result__free_unpacked(m, NULL);
  wk_buf_free(&b);
  wk_buf_free(&outputs);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_defaults_and_edges_match_protobuf_c),
      cmocka_unit_test(test_random_results_match_protobuf_c),
      cmocka_unit_test(test_decodes_with_its_outputs),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

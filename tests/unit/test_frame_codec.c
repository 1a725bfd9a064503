/* test_frame_codec.c: the executor frame codec (src/adapters/wk_frame.c) on its own:
 * round trips of every frame type, batches, every truncation, oversized and malformed
 * input, the lists of SUBCALLS and SUBCALLS_RESULT, seeded garbage, and the buffer.
 * No I/O. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "adapters/wk_frame.h"

#define MAX_FRAME (1u << 20)

/* ---- helpers -------------------------------------------------------------------- */

static wk_frame_bytes B(const char *s) { return wk_frame_bytes_cstr(s); }

static void assert_bytes_eq(wk_frame_bytes got, wk_frame_bytes want) {
  assert_int_equal(got.len, want.len);
  if (want.len) assert_memory_equal(got.ptr, want.ptr, want.len);
}

static const uint8_t ARGS_BIN[] = {0x00, 0xff, 0x01, 0x80, 0x7f, 0x00};

static wk_frame sample_call(void) {
  wk_frame f;
  memset(&f, 0, sizeof f);
  f.type = WK_FRAME_CALL;
  f.call.call_id = 0x0102030405060708u;
  f.call.task_id = B("task-1");
  f.call.function = B("echo");
  f.call.epoch = 42;
  f.call.code_dir = B("/code/echo/42");
  f.call.entrypoint = B("main:handler");
  f.call.content_type = WK_FRAME_CONTENT_BYTES;
  f.call.call_index = 7;
  f.call.deadline_ms = 30000;
  f.call.scratch_dir = B("/scratch/task-1");
  f.call.traceparent = B("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01");
  f.call.args.ptr = ARGS_BIN;
  f.call.args.len = sizeof ARGS_BIN;
  return f;
}

static wk_frame sample_result(void) {
  wk_frame f;
  memset(&f, 0, sizeof f);
  f.type = WK_FRAME_RESULT;
  f.result.call_id = UINT64_MAX;
  f.result.status = WK_FRAME_STATUS_RETRYABLE;
  f.result.content_type = WK_FRAME_CONTENT_JSON;
  f.result.output = B("");
  f.result.error_type = B("Retryable");
  f.result.error_message = B("backend busy");
  f.result.traceback = B("Traceback (most recent call last):\n  ...\n");
  f.result.cpu_us = 1234567;
  f.result.max_rss_kb = 20480;
  f.result.stdout_bytes = B("hello\n");
  f.result.stderr_bytes = B("");
  return f;
}

static const wk_frame_bytes SUB_ARGS[] = {
    {(const uint8_t *)"[1]", 3}, {NULL, 0}, {ARGS_BIN, sizeof ARGS_BIN}};

static wk_frame sample_subcalls(void) {
  wk_frame f;
  memset(&f, 0, sizeof f);
  f.type = WK_FRAME_SUBCALLS;
  f.subcalls.parent_call_id = 0x0102030405060708u;
  f.subcalls.request_id = 3;
  f.subcalls.function = B("child");
  f.subcalls.entrypoint = B("");
  f.subcalls.content_type = WK_FRAME_CONTENT_BYTES;
  f.subcalls.count = 3;
  f.subcalls.args = SUB_ARGS;
  return f;
}

static const wk_frame_child SUB_CHILDREN[] = {
    {WK_FRAME_STATUS_OK,
     WK_FRAME_CONTENT_JSON,
     {(const uint8_t *)"{\"a\":1}", 7},
     {NULL, 0},
     {NULL, 0},
     {NULL, 0}},
    {WK_FRAME_STATUS_ERROR,
     WK_FRAME_CONTENT_JSON,
     {NULL, 0},
     {(const uint8_t *)"ValueError", 10},
     {(const uint8_t *)"bad", 3},
     {(const uint8_t *)"Traceback\n", 10}},
    {WK_FRAME_STATUS_RETRYABLE,
     WK_FRAME_CONTENT_BYTES,
     {ARGS_BIN, sizeof ARGS_BIN},
     {(const uint8_t *)"Retryable", 9},
     {NULL, 0},
     {NULL, 0}},
};

static wk_frame sample_subcalls_result(void) {
  wk_frame f;
  memset(&f, 0, sizeof f);
  f.type = WK_FRAME_SUBCALLS_RESULT;
  f.subcalls_result.request_id = UINT64_MAX - 1;
  f.subcalls_result.count = 3;
  f.subcalls_result.children = SUB_CHILDREN;
  return f;
}

/* The i-th arg of a SUBCALLS, from its array or by walking its encoded list. */
static wk_frame_bytes nth_arg(const wk_frame_subcalls *s, uint32_t i) {
  if (s->args) return s->args[i];
  wk_frame_iter it = wk_frame_subcalls_args(s);
  wk_frame_bytes b = {NULL, 0};
  for (uint32_t k = 0; k <= i; k++) assert_true(wk_frame_iter_next_arg(&it, &b));
  return b;
}

static wk_frame_child nth_child(const wk_frame_subcalls_result *r, uint32_t i) {
  if (r->children) return r->children[i];
  wk_frame_iter it = wk_frame_subcalls_children(r);
  wk_frame_child k;
  memset(&k, 0, sizeof k);
  for (uint32_t j = 0; j <= i; j++) assert_true(wk_frame_iter_next_child(&it, &k));
  return k;
}

static void assert_frames_eq(const wk_frame *got, const wk_frame *want) {
  assert_int_equal(got->type, want->type);
  switch (want->type) {
    case WK_FRAME_HELLO:
      assert_int_equal(got->hello.version, want->hello.version);
      assert_int_equal(got->hello.pid, want->hello.pid);
      break;
    case WK_FRAME_CALL:
      assert_true(got->call.call_id == want->call.call_id);
      assert_bytes_eq(got->call.task_id, want->call.task_id);
      assert_bytes_eq(got->call.function, want->call.function);
      assert_true(got->call.epoch == want->call.epoch);
      assert_bytes_eq(got->call.code_dir, want->call.code_dir);
      assert_bytes_eq(got->call.entrypoint, want->call.entrypoint);
      assert_int_equal(got->call.content_type, want->call.content_type);
      assert_int_equal(got->call.call_index, want->call.call_index);
      assert_int_equal(got->call.deadline_ms, want->call.deadline_ms);
      assert_bytes_eq(got->call.scratch_dir, want->call.scratch_dir);
      assert_bytes_eq(got->call.traceparent, want->call.traceparent);
      assert_bytes_eq(got->call.args, want->call.args);
      break;
    case WK_FRAME_RESULT:
      assert_true(got->result.call_id == want->result.call_id);
      assert_int_equal(got->result.status, want->result.status);
      assert_int_equal(got->result.content_type, want->result.content_type);
      assert_bytes_eq(got->result.output, want->result.output);
      assert_bytes_eq(got->result.error_type, want->result.error_type);
      assert_bytes_eq(got->result.error_message, want->result.error_message);
      assert_bytes_eq(got->result.traceback, want->result.traceback);
      assert_true(got->result.cpu_us == want->result.cpu_us);
      assert_true(got->result.max_rss_kb == want->result.max_rss_kb);
      assert_bytes_eq(got->result.stdout_bytes, want->result.stdout_bytes);
      assert_bytes_eq(got->result.stderr_bytes, want->result.stderr_bytes);
      break;
    case WK_FRAME_CANCEL:
    case WK_FRAME_RECALL: assert_true(got->cancel.call_id == want->cancel.call_id); break;
    case WK_FRAME_PING:
    case WK_FRAME_PONG: assert_true(got->ping.nonce == want->ping.nonce); break;
    case WK_FRAME_SHUTDOWN: break;
    case WK_FRAME_SUBCALLS:
      assert_true(got->subcalls.parent_call_id == want->subcalls.parent_call_id);
      assert_true(got->subcalls.request_id == want->subcalls.request_id);
      assert_bytes_eq(got->subcalls.function, want->subcalls.function);
      assert_bytes_eq(got->subcalls.entrypoint, want->subcalls.entrypoint);
      assert_int_equal(got->subcalls.content_type, want->subcalls.content_type);
      assert_int_equal(got->subcalls.count, want->subcalls.count);
      for (uint32_t i = 0; i < want->subcalls.count; i++) {
        assert_bytes_eq(nth_arg(&got->subcalls, i), nth_arg(&want->subcalls, i));
      }
      break;
    case WK_FRAME_SUBCALLS_RESULT:
      assert_true(got->subcalls_result.request_id == want->subcalls_result.request_id);
      assert_int_equal(got->subcalls_result.count, want->subcalls_result.count);
      for (uint32_t i = 0; i < want->subcalls_result.count; i++) {
        wk_frame_child g = nth_child(&got->subcalls_result, i);
        wk_frame_child w = nth_child(&want->subcalls_result, i);
        assert_int_equal(g.status, w.status);
        assert_int_equal(g.content_type, w.content_type);
        assert_bytes_eq(g.output, w.output);
        assert_bytes_eq(g.error_type, w.error_type);
        assert_bytes_eq(g.error_message, w.error_message);
        assert_bytes_eq(g.traceback, w.traceback);
      }
      break;
    case WK_FRAME_STACK_REQUEST:
      assert_true(got->stack_request.call_id == want->stack_request.call_id);
      break;
    case WK_FRAME_STACK:
      assert_true(got->stack.call_id == want->stack.call_id);
      assert_bytes_eq(got->stack.stack, want->stack.stack);
      break;
    case WK_FRAME_SCRATCH:
      assert_true(got->scratch.call_id == want->scratch.call_id);
      assert_true(got->scratch.request_id == want->scratch.request_id);
      break;
    case WK_FRAME_SCRATCH_RESULT:
      assert_true(got->scratch_result.request_id == want->scratch_result.request_id);
      assert_bytes_eq(got->scratch_result.error, want->scratch_result.error);
      break;
  }
}

#define N_TYPES 14 /* frame types 1..14 */

/* Every sample frame, one per type. */
static size_t all_samples(wk_frame *out) {
  size_t n = 0;
  memset(out, 0, N_TYPES * sizeof *out);
  out[n].type = WK_FRAME_HELLO;
  out[n].hello.version = WK_FRAME_VERSION;
  out[n++].hello.pid = 4242;
  out[n++] = sample_call();
  out[n++] = sample_result();
  out[n].type = WK_FRAME_CANCEL;
  out[n++].cancel.call_id = 99;
  out[n].type = WK_FRAME_PING;
  out[n++].ping.nonce = 0x1122334455667788u;
  out[n].type = WK_FRAME_PONG;
  out[n++].ping.nonce = 1;
  out[n++].type = WK_FRAME_SHUTDOWN;
  out[n++] = sample_subcalls();
  out[n++] = sample_subcalls_result();
  out[n].type = WK_FRAME_STACK_REQUEST;
  out[n++].stack_request.call_id = 77;
  out[n].type = WK_FRAME_STACK;
  out[n].stack.call_id = 77;
  out[n++].stack.stack = B("  File \"main.py\", line 3, in handler\n    while True: pass\n");
  out[n].type = WK_FRAME_RECALL;
  out[n++].cancel.call_id = 98;
  out[n].type = WK_FRAME_SCRATCH;
  out[n].scratch.call_id = 97;
  out[n++].scratch.request_id = 3;
  out[n].type = WK_FRAME_SCRATCH_RESULT;
  out[n].scratch_result.request_id = 3;
  out[n++].scratch_result.error = B("cannot create the task's scratch directory");
  assert_int_equal(n, N_TYPES);
  return n;
}

/* A heap copy of exactly `n` bytes, so that AddressSanitizer (or valgrind) catches any
 * read past the input. */
static uint8_t *exact_copy(const uint8_t *p, size_t n) {
  uint8_t *c = malloc(n ? n : 1);
  assert_non_null(c);
  if (n) memcpy(c, p, n);
  return c;
}

static wk_frame_rc decode_exact(const uint8_t *p, size_t n, uint32_t max, wk_frame *f, size_t *sz) {
  uint8_t *c = exact_copy(p, n);
  wk_frame_rc rc = wk_frame_decode(c, n, max, f, sz);
  free(c);
  return rc;
}

static void put_u32(uint8_t *p, uint32_t v) {
  p[0] = (uint8_t)v;
  p[1] = (uint8_t)(v >> 8);
  p[2] = (uint8_t)(v >> 16);
  p[3] = (uint8_t)(v >> 24);
}

/* ---- round trips -------------------------------------------------------------- */

static void test_roundtrip_each_type(void **state) {
  (void)state;
  wk_frame samples[N_TYPES];
  size_t n = all_samples(samples);
  for (size_t i = 0; i < n; i++) {
    wk_frame_buf b;
    wk_frame_buf_init(&b, NULL);
    assert_int_equal(wk_frame_encode(&b, &samples[i], MAX_FRAME), WK_FRAME_OK);
    assert_int_equal(wk_frame_buf_size(&b), wk_frame_encoded_size(&samples[i]));
    wk_frame f;
    size_t used = 0;
    assert_int_equal(
        wk_frame_decode(wk_frame_buf_bytes(&b), wk_frame_buf_size(&b), MAX_FRAME, &f, &used),
        WK_FRAME_OK);
    assert_int_equal(used, wk_frame_buf_size(&b));
    assert_frames_eq(&f, &samples[i]);
    /* canonical: re-encoding the decoded frame gives the same bytes */
    wk_frame_buf b2;
    wk_frame_buf_init(&b2, NULL);
    assert_int_equal(wk_frame_encode(&b2, &f, MAX_FRAME), WK_FRAME_OK);
    assert_int_equal(wk_frame_buf_size(&b2), wk_frame_buf_size(&b));
    assert_memory_equal(wk_frame_buf_bytes(&b2), wk_frame_buf_bytes(&b), wk_frame_buf_size(&b));
    wk_frame_buf_free(&b2);
    /* wk_frame_encode_alloc: the same bytes, in a block of exactly their size */
    uint8_t *alone = NULL;
    size_t alone_len = 0;
    assert_int_equal(wk_frame_encode_alloc(&samples[i], MAX_FRAME, &alone, &alone_len),
                     WK_FRAME_OK);
    assert_int_equal(alone_len, wk_frame_buf_size(&b));
    assert_memory_equal(alone, wk_frame_buf_bytes(&b), alone_len);
    free(alone);
    wk_frame_buf_free(&b);
  }
}

static void test_known_bytes(void **state) {
  (void)state;
  /* the layout spelled out in docs/specs/executor-protocol.md */
  wk_frame f;
  memset(&f, 0, sizeof f);
  f.type = WK_FRAME_PING;
  f.ping.nonce = 0x0807060504030201u;
  wk_frame_buf b;
  wk_frame_buf_init(&b, NULL);
  assert_int_equal(wk_frame_encode(&b, &f, MAX_FRAME), WK_FRAME_OK);
  const uint8_t want[] = {9, 0, 0, 0, 5, 1, 2, 3, 4, 5, 6, 7, 8};
  assert_int_equal(wk_frame_buf_size(&b), sizeof want);
  assert_memory_equal(wk_frame_buf_bytes(&b), want, sizeof want);

  wk_frame_buf_clear(&b);
  memset(&f, 0, sizeof f);
  f.type = WK_FRAME_HELLO;
  f.hello.version = WK_FRAME_VERSION;
  f.hello.pid = 0x01020304;
  assert_int_equal(wk_frame_encode(&b, &f, MAX_FRAME), WK_FRAME_OK);
  const uint8_t hello[] = {9, 0, 0, 0, 1, 5, 0, 0, 0, 4, 3, 2, 1};
  assert_int_equal(wk_frame_buf_size(&b), sizeof hello);
  assert_memory_equal(wk_frame_buf_bytes(&b), hello, sizeof hello);

  wk_frame_buf_clear(&b);
  memset(&f, 0, sizeof f);
  f.type = WK_FRAME_SCRATCH; /* executor-protocol.md §2's example */
  f.scratch.call_id = 7;
  f.scratch.request_id = 2;
  assert_int_equal(wk_frame_encode(&b, &f, MAX_FRAME), WK_FRAME_OK);
  const uint8_t scratch[] = {17, 0, 0, 0, 13, 7, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0};
  assert_int_equal(wk_frame_buf_size(&b), sizeof scratch);
  assert_memory_equal(wk_frame_buf_bytes(&b), scratch, sizeof scratch);

  wk_frame_buf_clear(&b);
  memset(&f, 0, sizeof f);
  f.type = WK_FRAME_SHUTDOWN;
  assert_int_equal(wk_frame_encode(&b, &f, MAX_FRAME), WK_FRAME_OK);
  const uint8_t shut[] = {1, 0, 0, 0, 7};
  assert_int_equal(wk_frame_buf_size(&b), sizeof shut);
  assert_memory_equal(wk_frame_buf_bytes(&b), shut, sizeof shut);
  wk_frame_buf_free(&b);
}

static void test_batch_back_to_back(void **state) {
  (void)state;
  wk_frame samples[N_TYPES];
  size_t n = all_samples(samples);
  wk_frame_buf b;
  wk_frame_buf_init(&b, NULL);
  for (int rep = 0; rep < 50; rep++) {
    for (size_t i = 0; i < n; i++) {
      assert_int_equal(wk_frame_encode(&b, &samples[i], MAX_FRAME), WK_FRAME_OK);
    }
  }
  const uint8_t *p = wk_frame_buf_bytes(&b);
  size_t left = wk_frame_buf_size(&b);
  size_t count = 0;
  while (left > 0) {
    wk_frame f;
    size_t used = 0;
    assert_int_equal(wk_frame_decode(p, left, MAX_FRAME, &f, &used), WK_FRAME_OK);
    assert_frames_eq(&f, &samples[count % n]);
    p += used;
    left -= used;
    count++;
  }
  assert_int_equal(count, 50 * n);
  wk_frame_buf_free(&b);
}

static void test_empty_fields_and_null_views(void **state) {
  (void)state;
  wk_frame f;
  memset(&f, 0, sizeof f); /* every view {NULL, 0} */
  f.type = WK_FRAME_CALL;
  wk_frame_buf b;
  wk_frame_buf_init(&b, NULL);
  assert_int_equal(wk_frame_encode(&b, &f, MAX_FRAME), WK_FRAME_OK);
  /* prefix + type + u64 + 2 strings + u64 + 2 strings + u8 + u32 + u32 + 3 strings */
  assert_int_equal(wk_frame_buf_size(&b), 4 + 1 + 8 + 8 + 8 + 8 + 1 + 4 + 4 + 12);
  wk_frame g;
  size_t used = 0;
  assert_int_equal(
      wk_frame_decode(wk_frame_buf_bytes(&b), wk_frame_buf_size(&b), MAX_FRAME, &g, &used),
      WK_FRAME_OK);
  assert_frames_eq(&g, &f);
  wk_frame_buf_free(&b);
}

/* ---- truncation and limits ------------------------------------------------------ */

static void test_every_truncation_needs_more(void **state) {
  (void)state;
  wk_frame samples[N_TYPES];
  size_t n = all_samples(samples);
  for (size_t i = 0; i < n; i++) {
    wk_frame_buf b;
    wk_frame_buf_init(&b, NULL);
    assert_int_equal(wk_frame_encode(&b, &samples[i], MAX_FRAME), WK_FRAME_OK);
    size_t total = wk_frame_buf_size(&b);
    for (size_t k = 0; k < total; k++) {
      wk_frame f;
      size_t need = 0;
      wk_frame_rc rc = decode_exact(wk_frame_buf_bytes(&b), k, MAX_FRAME, &f, &need);
      assert_int_equal(rc, WK_FRAME_NEED_MORE);
      assert_true(need > k);
      assert_int_equal(need, k < WK_FRAME_PREFIX_SIZE ? WK_FRAME_PREFIX_SIZE : total);
    }
    wk_frame_buf_free(&b);
  }
  wk_frame f;
  size_t need = 0;
  assert_int_equal(wk_frame_decode(NULL, 0, MAX_FRAME, &f, &need), WK_FRAME_NEED_MORE);
  assert_int_equal(need, 4);
}

static void test_oversized_prefix_rejected_early(void **state) {
  (void)state;
  uint8_t pfx[4];
  wk_frame f;
  size_t sz = 123;
  put_u32(pfx, 1001);
  /* only the prefix is in: the error comes without waiting for 1001 bytes */
  assert_int_equal(decode_exact(pfx, 4, 1000, &f, &sz), WK_FRAME_E_TOO_LARGE);
  assert_int_equal(sz, 0);
  put_u32(pfx, UINT32_MAX);
  assert_int_equal(decode_exact(pfx, 4, MAX_FRAME, &f, &sz), WK_FRAME_E_TOO_LARGE);
  assert_int_equal(decode_exact(pfx, 4, UINT32_MAX, &f, &sz), WK_FRAME_NEED_MORE);
  assert_true(sz == (size_t)UINT32_MAX + 4u);

  /* exactly max_frame is fine: a CANCEL is 9 bytes after the prefix */
  const uint8_t cancel[] = {9, 0, 0, 0, 4, 1, 0, 0, 0, 0, 0, 0, 0};
  assert_int_equal(decode_exact(cancel, sizeof cancel, 9, &f, &sz), WK_FRAME_OK);
  assert_int_equal(sz, sizeof cancel);
  assert_int_equal(f.type, WK_FRAME_CANCEL);
  assert_true(f.cancel.call_id == 1);
  assert_int_equal(decode_exact(cancel, sizeof cancel, 8, &f, &sz), WK_FRAME_E_TOO_LARGE);
}

static void test_encoder_limits(void **state) {
  (void)state;
  wk_frame f = sample_call();
  uint64_t total = wk_frame_encoded_size(&f);
  wk_frame_buf b;
  wk_frame_buf_init(&b, NULL);
  assert_int_equal(wk_frame_encode(&b, &f, (uint32_t)(total - 4)), WK_FRAME_OK);
  size_t held = wk_frame_buf_size(&b);
  assert_int_equal(wk_frame_encode(&b, &f, (uint32_t)(total - 5)), WK_FRAME_E_TOO_LARGE);
  assert_int_equal(wk_frame_buf_size(&b), held); /* unchanged */
  uint8_t *alone = (uint8_t *)&held;             /* must stay as it is on an error */
  size_t alone_len = 7;
  assert_int_equal(wk_frame_encode_alloc(&f, (uint32_t)(total - 5), &alone, &alone_len),
                   WK_FRAME_E_TOO_LARGE);
  assert_ptr_equal(alone, (uint8_t *)&held);
  assert_int_equal(alone_len, 7);

  f.call.content_type = (wk_frame_content)2;
  assert_int_equal(wk_frame_encode(&b, &f, MAX_FRAME), WK_FRAME_E_VALUE);
  wk_frame r = sample_result();
  r.result.status = (wk_frame_status)4;
  assert_int_equal(wk_frame_encode(&b, &r, MAX_FRAME), WK_FRAME_E_VALUE);
  r = sample_result();
  r.result.content_type = (wk_frame_content)9;
  assert_int_equal(wk_frame_encode(&b, &r, MAX_FRAME), WK_FRAME_E_VALUE);
  wk_frame bad;
  memset(&bad, 0, sizeof bad);
  assert_int_equal(wk_frame_encode(&b, &bad, MAX_FRAME), WK_FRAME_E_TYPE);
  assert_int_equal(wk_frame_encoded_size(&bad), 0);
  bad.type = (wk_frame_type)15;
  assert_int_equal(wk_frame_encode(&b, &bad, MAX_FRAME), WK_FRAME_E_TYPE);
  assert_int_equal(wk_frame_buf_size(&b), held);
  wk_frame_buf_free(&b);
}

/* ---- malformed input ------------------------------------------------------------ */

static void test_malformed(void **state) {
  (void)state;
  wk_frame f;
  size_t sz;

  const uint8_t empty[] = {0, 0, 0, 0};
  assert_int_equal(decode_exact(empty, sizeof empty, MAX_FRAME, &f, &sz), WK_FRAME_E_EMPTY);

  const uint8_t types[] = {0, 15, 0x7f, 0xff};
  for (size_t i = 0; i < sizeof types; i++) {
    const uint8_t t[] = {1, 0, 0, 0, types[i]};
    assert_int_equal(decode_exact(t, sizeof t, MAX_FRAME, &f, &sz), WK_FRAME_E_TYPE);
    assert_int_equal(sz, 0);
    assert_int_equal(f.type, 0);
  }

  /* a PING with 7 bytes of nonce, and one with 9 */
  const uint8_t short_ping[] = {8, 0, 0, 0, 5, 1, 2, 3, 4, 5, 6, 7};
  assert_int_equal(decode_exact(short_ping, sizeof short_ping, MAX_FRAME, &f, &sz),
                   WK_FRAME_E_TRUNCATED);
  assert_int_equal(f.type, WK_FRAME_PING); /* known type reported for the log */
  const uint8_t long_ping[] = {10, 0, 0, 0, 5, 1, 2, 3, 4, 5, 6, 7, 8, 9};
  assert_int_equal(decode_exact(long_ping, sizeof long_ping, MAX_FRAME, &f, &sz),
                   WK_FRAME_E_TRAILING);
  const uint8_t shut_body[] = {2, 0, 0, 0, 7, 0};
  assert_int_equal(decode_exact(shut_body, sizeof shut_body, MAX_FRAME, &f, &sz),
                   WK_FRAME_E_TRAILING);
}

/* Patches the encoding of sample_call(): field lengths past the frame, bad enums. */
static void test_malformed_call_fields(void **state) {
  (void)state;
  wk_frame c = sample_call();
  wk_frame_buf b;
  wk_frame_buf_init(&b, NULL);
  assert_int_equal(wk_frame_encode(&b, &c, MAX_FRAME), WK_FRAME_OK);
  size_t total = wk_frame_buf_size(&b);
  if (total < 64) abort(); /* (also tells the optimiser the patches below are in bounds) */
  uint8_t *enc = exact_copy(wk_frame_buf_bytes(&b), total);
  wk_frame f;
  size_t sz;

  /* task_id's length field sits right after the u64 call_id */
  size_t task_len_at = 4 + 1 + 8;
  const uint32_t lens[] = {UINT32_MAX, (uint32_t)total, (uint32_t)(total - task_len_at - 4 + 1)};
  for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++) {
    uint8_t *m = exact_copy(enc, total);
    put_u32(m + task_len_at, lens[i]);
    assert_int_equal(wk_frame_decode(m, total, MAX_FRAME, &f, &sz), WK_FRAME_E_TRUNCATED);
    free(m);
  }

  /* the args length is the last field: one byte short of the frame's end */
  {
    uint8_t *m = exact_copy(enc, total);
    size_t args_len_at = total - sizeof ARGS_BIN - 4;
    put_u32(m + args_len_at, sizeof ARGS_BIN + 1);
    assert_int_equal(wk_frame_decode(m, total, MAX_FRAME, &f, &sz), WK_FRAME_E_TRUNCATED);
    put_u32(m + args_len_at, sizeof ARGS_BIN - 1);
    assert_int_equal(wk_frame_decode(m, total, MAX_FRAME, &f, &sz), WK_FRAME_E_TRAILING);
    free(m);
  }

  /* content_type byte: after call_id, task_id, function, epoch, code_dir, entrypoint */
  {
    size_t at = 4 + 1 + 8 + (4 + 6) + (4 + 4) + 8 + (4 + 13) + (4 + 12);
    assert_int_equal(enc[at], WK_FRAME_CONTENT_BYTES);
    uint8_t *m = exact_copy(enc, total);
    m[at] = 2;
    assert_int_equal(wk_frame_decode(m, total, MAX_FRAME, &f, &sz), WK_FRAME_E_VALUE);
    assert_int_equal(f.type, WK_FRAME_CALL);
    free(m);
  }

  /* the frame's own length smaller than its fields */
  {
    uint8_t *m = exact_copy(enc, total);
    put_u32(m, (uint32_t)(total - 4 - 1));
    assert_int_equal(wk_frame_decode(m, total, MAX_FRAME, &f, &sz), WK_FRAME_E_TRUNCATED);
    free(m);
  }
  free(enc);
  wk_frame_buf_free(&b);
}

static void test_malformed_result_status(void **state) {
  (void)state;
  wk_frame r = sample_result();
  wk_frame_buf b;
  wk_frame_buf_init(&b, NULL);
  assert_int_equal(wk_frame_encode(&b, &r, MAX_FRAME), WK_FRAME_OK);
  size_t total = wk_frame_buf_size(&b);
  uint8_t *m = exact_copy(wk_frame_buf_bytes(&b), total);
  wk_frame f;
  size_t sz;
  size_t status_at = 4 + 1 + 8;
  assert_int_equal(m[status_at], WK_FRAME_STATUS_RETRYABLE);
  m[status_at] = 3; /* NOT_STARTED: a RESULT may say it */
  assert_int_equal(wk_frame_decode(m, total, MAX_FRAME, &f, &sz), WK_FRAME_OK);
  assert_int_equal(f.result.status, WK_FRAME_STATUS_NOT_STARTED);
  m[status_at] = 4;
  assert_int_equal(wk_frame_decode(m, total, MAX_FRAME, &f, &sz), WK_FRAME_E_VALUE);
  m[status_at] = 0;
  m[status_at + 1] = 0xff; /* content_type */
  assert_int_equal(wk_frame_decode(m, total, MAX_FRAME, &f, &sz), WK_FRAME_E_VALUE);
  m[status_at + 1] = 1;
  assert_int_equal(wk_frame_decode(m, total, MAX_FRAME, &f, &sz), WK_FRAME_OK);
  assert_int_equal(f.result.status, WK_FRAME_STATUS_OK);
  assert_int_equal(f.result.content_type, WK_FRAME_CONTENT_BYTES);
  free(m);
  wk_frame_buf_free(&b);
}

/* Seeded garbage: the decoder never crashes, never reads past its input (ASan), and
 * what it accepts re-encodes to the same bytes. */
static uint64_t xorshift(uint64_t *s) {
  uint64_t x = *s;
  x ^= x << 13;
  x ^= x >> 7;
  x ^= x << 17;
  return *s = x;
}

static void test_garbage(void **state) {
  (void)state;
  uint64_t seed = 0x9e3779b97f4a7c15u;
  wk_frame samples[N_TYPES];
  size_t ns = all_samples(samples);
  wk_frame_buf valid;
  wk_frame_buf_init(&valid, NULL);
  for (size_t i = 0; i < ns; i++)
    assert_int_equal(wk_frame_encode(&valid, &samples[i], MAX_FRAME), 0);
  size_t counts[16] = {0};
  for (int iter = 0; iter < 20000; iter++) {
    size_t n = (size_t)(xorshift(&seed) % 300);
    uint8_t *in = malloc(n ? n : 1);
    assert_non_null(in);
    if (iter % 2 == 0) {
      for (size_t i = 0; i < n; i++) in[i] = (uint8_t)xorshift(&seed);
      if (n >= 4 && iter % 4 == 0) put_u32(in, (uint32_t)(n - 4)); /* plausible length */
      if (n >= 5 && iter % 8 == 0) in[4] = (uint8_t)(1 + xorshift(&seed) % N_TYPES);
    } else {
      /* valid frames with a few bytes flipped */
      size_t vn = wk_frame_buf_size(&valid);
      n = n < vn ? n : vn;
      memcpy(in, wk_frame_buf_bytes(&valid), n);
      for (int k = 0; k < 3 && n; k++) in[xorshift(&seed) % n] = (uint8_t)xorshift(&seed);
    }
    size_t off = 0;
    for (;;) {
      wk_frame f;
      size_t used = 0;
      wk_frame_rc rc = wk_frame_decode(in + off, n - off, 4096, &f, &used);
      counts[rc + 8]++;
      if (rc == WK_FRAME_NEED_MORE) {
        assert_true(used > n - off);
        break;
      }
      if (rc != WK_FRAME_OK) {
        assert_true(rc < 0);
        assert_int_equal(used, 0);
        assert_string_not_equal(wk_frame_rc_name(rc), "UNKNOWN");
        break;
      }
      assert_true(used >= 5 && used <= n - off);
      wk_frame_buf re;
      wk_frame_buf_init(&re, NULL);
      assert_int_equal(wk_frame_encode(&re, &f, 4096), WK_FRAME_OK);
      assert_int_equal(wk_frame_buf_size(&re), used);
      assert_memory_equal(wk_frame_buf_bytes(&re), in + off, used);
      wk_frame_buf_free(&re);
      off += used;
    }
    free(in);
  }
  /* the garbage reached every outcome */
  assert_true(counts[WK_FRAME_OK + 8] > 0);
  assert_true(counts[WK_FRAME_NEED_MORE + 8] > 0);
  assert_true(counts[WK_FRAME_E_TOO_LARGE + 8] > 0);
  assert_true(counts[WK_FRAME_E_TYPE + 8] > 0);
  assert_true(counts[WK_FRAME_E_TRUNCATED + 8] > 0);
  assert_true(counts[WK_FRAME_E_TRAILING + 8] > 0);
  wk_frame_buf_free(&valid);
}

/* ---- lists: SUBCALLS and SUBCALLS_RESULT ---------------------------------------------- */

/* The examples spelled out in docs/specs/executor-protocol.md. */
static void test_known_bytes_subcalls(void **state) {
  (void)state;
  wk_frame_buf b;
  wk_frame_buf_init(&b, NULL);
  wk_frame f;

  const wk_frame_bytes args[] = {B("1"), B("[2]")};
  memset(&f, 0, sizeof f);
  f.type = WK_FRAME_SUBCALLS;
  f.subcalls.parent_call_id = 5;
  f.subcalls.request_id = 1;
  f.subcalls.function = B("sq");
  f.subcalls.content_type = WK_FRAME_CONTENT_JSON;
  f.subcalls.count = 2;
  f.subcalls.args = args;
  assert_int_equal(wk_frame_encode(&b, &f, MAX_FRAME), WK_FRAME_OK);
  const uint8_t sub[] = {44, 0, 0, 0, 8,               /* length, SUBCALLS */
                         5,  0, 0, 0, 0,   0,   0,  0, /* parent_call_id */
                         1,  0, 0, 0, 0,   0,   0,  0, /* request_id */
                         2,  0, 0, 0, 's', 'q',        /* function */
                         0,  0, 0, 0,                  /* entrypoint: the parent's */
                         0,                            /* JSON */
                         2,  0, 0, 0,                  /* count */
                         1,  0, 0, 0, '1',             /* args[0] */
                         3,  0, 0, 0, '[', '2', ']'};  /* args[1] */
  assert_int_equal(wk_frame_buf_size(&b), sizeof sub);
  assert_memory_equal(wk_frame_buf_bytes(&b), sub, sizeof sub);

  wk_frame_buf_clear(&b);
  const wk_frame_child kids[] = {
      {WK_FRAME_STATUS_OK, WK_FRAME_CONTENT_JSON, B("1"), B(""), B(""), B("")},
      {WK_FRAME_STATUS_ERROR, WK_FRAME_CONTENT_JSON, B(""), B("E"), B("m"), B("")},
  };
  memset(&f, 0, sizeof f);
  f.type = WK_FRAME_SUBCALLS_RESULT;
  f.subcalls_result.request_id = 1;
  f.subcalls_result.count = 2;
  f.subcalls_result.children = kids;
  assert_int_equal(wk_frame_encode(&b, &f, MAX_FRAME), WK_FRAME_OK);
  const uint8_t res[] = {52, 0, 0, 0, 9,            /* SUBCALLS_RESULT */
                         1,  0, 0, 0, 0, 0, 0,   0, /* request_id */
                         2,  0, 0, 0,               /* count */
                         0,  0, 1, 0, 0, 0, '1', 0, 0, 0,   0, 0, 0, 0, 0,   0, 0, 0, 0, 1,
                         0,  0, 0, 0, 0, 1, 0,   0, 0, 'E', 1, 0, 0, 0, 'm', 0, 0, 0, 0};
  assert_int_equal(wk_frame_buf_size(&b), sizeof res);
  assert_memory_equal(wk_frame_buf_bytes(&b), res, sizeof res);

  wk_frame_buf_clear(&b);
  memset(&f, 0, sizeof f);
  f.type = WK_FRAME_STACK_REQUEST;
  f.stack_request.call_id = 0x0807060504030201u;
  assert_int_equal(wk_frame_encode(&b, &f, MAX_FRAME), WK_FRAME_OK);
  const uint8_t sreq[] = {9, 0, 0, 0, 10, 1, 2, 3, 4, 5, 6, 7, 8};
  assert_int_equal(wk_frame_buf_size(&b), sizeof sreq);
  assert_memory_equal(wk_frame_buf_bytes(&b), sreq, sizeof sreq);

  wk_frame_buf_clear(&b);
  memset(&f, 0, sizeof f);
  f.type = WK_FRAME_STACK;
  f.stack.call_id = 7;
  f.stack.stack = B("ab");
  assert_int_equal(wk_frame_encode(&b, &f, MAX_FRAME), WK_FRAME_OK);
  const uint8_t stk[] = {15, 0, 0, 0, 11, 7, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 'a', 'b'};
  assert_int_equal(wk_frame_buf_size(&b), sizeof stk);
  assert_memory_equal(wk_frame_buf_bytes(&b), stk, sizeof stk);
  wk_frame_buf_free(&b);
}

/* Decoded lists are walked by the iterators, item by item, and re-encode from their
 * encoded form; the encoder checks an encoded list against its count. */
static void test_list_iterators_and_encoded_form(void **state) {
  (void)state;
  wk_frame_buf b, b2;
  wk_frame_buf_init(&b, NULL);
  wk_frame_buf_init(&b2, NULL);
  wk_frame s = sample_subcalls();
  assert_int_equal(wk_frame_encode(&b, &s, MAX_FRAME), WK_FRAME_OK);
  wk_frame f;
  size_t used = 0;
  assert_int_equal(
      wk_frame_decode(wk_frame_buf_bytes(&b), wk_frame_buf_size(&b), MAX_FRAME, &f, &used),
      WK_FRAME_OK);
  assert_null(f.subcalls.args);
  assert_int_equal(f.subcalls.args_enc.len, (4 + 3) + 4 + (4 + sizeof ARGS_BIN));
  wk_frame_iter it = wk_frame_subcalls_args(&f.subcalls);
  wk_frame_bytes a;
  for (uint32_t i = 0; i < 3; i++) {
    assert_true(wk_frame_iter_next_arg(&it, &a));
    assert_bytes_eq(a, SUB_ARGS[i]);
  }
  assert_false(wk_frame_iter_next_arg(&it, &a));
  assert_false(wk_frame_iter_next_arg(&it, &a));
  assert_int_equal(it.left, 0);

  /* the encoded form must match its count */
  wk_frame g = f;
  g.subcalls.count = 2;
  assert_int_equal(wk_frame_encode(&b2, &g, MAX_FRAME), WK_FRAME_E_VALUE); /* one item left over */
  g.subcalls.count = 4;
  assert_int_equal(wk_frame_encode(&b2, &g, MAX_FRAME), WK_FRAME_E_VALUE); /* runs out */
  g.subcalls.count = 0;
  assert_int_equal(wk_frame_encode(&b2, &g, MAX_FRAME), WK_FRAME_E_VALUE);
  g = f;
  g.subcalls.args_enc.len -= 1;
  assert_int_equal(wk_frame_encode(&b2, &g, MAX_FRAME), WK_FRAME_E_VALUE);
  g = f;
  g.subcalls.content_type = (wk_frame_content)2;
  assert_int_equal(wk_frame_encode(&b2, &g, MAX_FRAME), WK_FRAME_E_VALUE);
  g = sample_subcalls();
  g.subcalls.count = 0;
  assert_int_equal(wk_frame_encode(&b2, &g, MAX_FRAME), WK_FRAME_E_VALUE);
  assert_int_equal(wk_frame_buf_size(&b2), 0);

  /* a malformed encoded list stops the iterator */
  const uint8_t broken[] = {1, 0, 0, 0, 'x', 9, 0, 0, 0, 'y'};
  wk_frame_subcalls h;
  memset(&h, 0, sizeof h);
  h.count = 2;
  h.args_enc.ptr = broken;
  h.args_enc.len = sizeof broken;
  it = wk_frame_subcalls_args(&h);
  assert_true(wk_frame_iter_next_arg(&it, &a));
  assert_bytes_eq(a, B("x"));
  assert_false(wk_frame_iter_next_arg(&it, &a));
  assert_false(wk_frame_iter_next_arg(&it, &a));

  /* children */
  wk_frame_buf_clear(&b);
  wk_frame r = sample_subcalls_result();
  assert_int_equal(wk_frame_encode(&b, &r, MAX_FRAME), WK_FRAME_OK);
  assert_int_equal(
      wk_frame_decode(wk_frame_buf_bytes(&b), wk_frame_buf_size(&b), MAX_FRAME, &f, &used),
      WK_FRAME_OK);
  assert_null(f.subcalls_result.children);
  it = wk_frame_subcalls_children(&f.subcalls_result);
  wk_frame_child k;
  for (uint32_t i = 0; i < 3; i++) {
    assert_true(wk_frame_iter_next_child(&it, &k));
    assert_int_equal(k.status, SUB_CHILDREN[i].status);
    assert_int_equal(k.content_type, SUB_CHILDREN[i].content_type);
    assert_bytes_eq(k.output, SUB_CHILDREN[i].output);
    assert_bytes_eq(k.error_type, SUB_CHILDREN[i].error_type);
    assert_bytes_eq(k.error_message, SUB_CHILDREN[i].error_message);
    assert_bytes_eq(k.traceback, SUB_CHILDREN[i].traceback);
  }
  assert_false(wk_frame_iter_next_child(&it, &k));
  g = f;
  g.subcalls_result.count = 2;
  assert_int_equal(wk_frame_encode(&b2, &g, MAX_FRAME), WK_FRAME_E_VALUE);
  g.subcalls_result.count = 0;
  assert_int_equal(wk_frame_encode(&b2, &g, MAX_FRAME), WK_FRAME_E_VALUE);
  wk_frame_child bad_kids[3];
  memcpy(bad_kids, SUB_CHILDREN, sizeof bad_kids);
  bad_kids[2].status = (wk_frame_status)3;
  r.subcalls_result.children = bad_kids;
  assert_int_equal(wk_frame_encode(&b2, &r, MAX_FRAME), WK_FRAME_E_VALUE);
  bad_kids[2].status = WK_FRAME_STATUS_OK;
  bad_kids[1].content_type = (wk_frame_content)2;
  assert_int_equal(wk_frame_encode(&b2, &r, MAX_FRAME), WK_FRAME_E_VALUE);
  assert_int_equal(wk_frame_buf_size(&b2), 0);
  /* an encoded list with a bad status inside, as a hand-built frame might carry */
  uint8_t *m = exact_copy(f.subcalls_result.children_enc.ptr, f.subcalls_result.children_enc.len);
  m[0] = 7;
  g = f;
  g.subcalls_result.children_enc.ptr = m;
  assert_int_equal(wk_frame_encode(&b2, &g, MAX_FRAME), WK_FRAME_E_VALUE);
  it = wk_frame_subcalls_children(&g.subcalls_result);
  assert_false(wk_frame_iter_next_child(&it, &k));
  free(m);

  /* a list's size saturates instead of wrapping */
  wk_frame_bytes huge[2] = {{ARGS_BIN, UINT32_MAX}, {ARGS_BIN, UINT32_MAX}};
  wk_frame big = sample_subcalls();
  big.subcalls.count = 2;
  big.subcalls.args = huge;
  assert_true(wk_frame_encoded_size(&big) > 2ull * UINT32_MAX);
  assert_int_equal(wk_frame_encode(&b2, &big, UINT32_MAX), WK_FRAME_E_TOO_LARGE);
  wk_frame_buf_free(&b);
  wk_frame_buf_free(&b2);
}

/* Builds a frame of `type` from `body` into `out` (at most `cap` bytes). */
static size_t raw_frame(uint8_t *out, size_t cap, uint8_t type, const uint8_t *body, size_t n) {
  assert_true(n + 5 <= cap);
  put_u32(out, (uint32_t)(n + 1));
  out[4] = type;
  if (n) memcpy(out + 5, body, n);
  return n + 5;
}

static void test_malformed_lists(void **state) {
  (void)state;
  uint8_t fr[256];
  wk_frame f;
  size_t sz, n;

  /* SUBCALLS header: parent, request, function "", entrypoint "", content, count */
  uint8_t sub[64];
  memset(sub, 0, sizeof sub);
  size_t count_at = 8 + 8 + 4 + 4 + 1;
  size_t hdr = count_at + 4;
  /* count 0, nothing after it */
  n = raw_frame(fr, sizeof fr, WK_FRAME_SUBCALLS, sub, hdr);
  assert_int_equal(decode_exact(fr, n, MAX_FRAME, &f, &sz), WK_FRAME_E_VALUE);
  assert_int_equal(f.type, WK_FRAME_SUBCALLS);
  /* count 1 with one empty arg: fine */
  put_u32(sub + count_at, 1);
  n = raw_frame(fr, sizeof fr, WK_FRAME_SUBCALLS, sub, hdr + 4);
  assert_int_equal(decode_exact(fr, n, MAX_FRAME, &f, &sz), WK_FRAME_OK);
  assert_int_equal(f.subcalls.count, 1);
  assert_int_equal(f.subcalls.args_enc.len, 4);
  /* ... with content_type 2 */
  sub[count_at - 1] = 2;
  n = raw_frame(fr, sizeof fr, WK_FRAME_SUBCALLS, sub, hdr + 4);
  assert_int_equal(decode_exact(fr, n, MAX_FRAME, &f, &sz), WK_FRAME_E_VALUE);
  sub[count_at - 1] = 1;
  /* count 2 with one arg: truncated; count 1 with two: trailing */
  put_u32(sub + count_at, 2);
  n = raw_frame(fr, sizeof fr, WK_FRAME_SUBCALLS, sub, hdr + 4);
  assert_int_equal(decode_exact(fr, n, MAX_FRAME, &f, &sz), WK_FRAME_E_TRUNCATED);
  put_u32(sub + count_at, 1);
  n = raw_frame(fr, sizeof fr, WK_FRAME_SUBCALLS, sub, hdr + 8);
  assert_int_equal(decode_exact(fr, n, MAX_FRAME, &f, &sz), WK_FRAME_E_TRAILING);
  /* a hostile count fails at once (and truncation wins over a bad content_type) */
  put_u32(sub + count_at, UINT32_MAX);
  sub[count_at - 1] = 9;
  n = raw_frame(fr, sizeof fr, WK_FRAME_SUBCALLS, sub, hdr + 8);
  assert_int_equal(decode_exact(fr, n, MAX_FRAME, &f, &sz), WK_FRAME_E_TRUNCATED);
  sub[count_at - 1] = 0;
  /* an arg whose length runs past the frame */
  put_u32(sub + count_at, 1);
  put_u32(sub + hdr, 5);
  n = raw_frame(fr, sizeof fr, WK_FRAME_SUBCALLS, sub, hdr + 8);
  assert_int_equal(decode_exact(fr, n, MAX_FRAME, &f, &sz), WK_FRAME_E_TRUNCATED);
  put_u32(sub + hdr, 4);
  n = raw_frame(fr, sizeof fr, WK_FRAME_SUBCALLS, sub, hdr + 8);
  assert_int_equal(wk_frame_decode(fr, n, MAX_FRAME, &f, &sz), WK_FRAME_OK); /* views into fr */
  assert_bytes_eq(nth_arg(&f.subcalls, 0), (wk_frame_bytes){fr + 5 + hdr + 4, 4});

  /* SUBCALLS_RESULT: request, count, then 18-byte empty children */
  uint8_t res[128];
  memset(res, 0, sizeof res);
  n = raw_frame(fr, sizeof fr, WK_FRAME_SUBCALLS_RESULT, res, 12);
  assert_int_equal(decode_exact(fr, n, MAX_FRAME, &f, &sz), WK_FRAME_E_VALUE); /* count 0 */
  put_u32(res + 8, 2);
  n = raw_frame(fr, sizeof fr, WK_FRAME_SUBCALLS_RESULT, res, 12 + 36);
  assert_int_equal(decode_exact(fr, n, MAX_FRAME, &f, &sz), WK_FRAME_OK);
  assert_int_equal(f.subcalls_result.count, 2);
  res[12 + 18] = 3; /* second child's status */
  n = raw_frame(fr, sizeof fr, WK_FRAME_SUBCALLS_RESULT, res, 12 + 36);
  assert_int_equal(decode_exact(fr, n, MAX_FRAME, &f, &sz), WK_FRAME_E_VALUE);
  assert_int_equal(f.type, WK_FRAME_SUBCALLS_RESULT);
  res[12 + 18] = 2;
  res[12 + 1] = 2; /* first child's content_type */
  n = raw_frame(fr, sizeof fr, WK_FRAME_SUBCALLS_RESULT, res, 12 + 36);
  assert_int_equal(decode_exact(fr, n, MAX_FRAME, &f, &sz), WK_FRAME_E_VALUE);
  res[12 + 1] = 1;
  n = raw_frame(fr, sizeof fr, WK_FRAME_SUBCALLS_RESULT, res, 12 + 35);
  assert_int_equal(decode_exact(fr, n, MAX_FRAME, &f, &sz), WK_FRAME_E_TRUNCATED);
  n = raw_frame(fr, sizeof fr, WK_FRAME_SUBCALLS_RESULT, res, 12 + 37);
  assert_int_equal(decode_exact(fr, n, MAX_FRAME, &f, &sz), WK_FRAME_E_TRAILING);
  put_u32(res + 8, UINT32_MAX);
  n = raw_frame(fr, sizeof fr, WK_FRAME_SUBCALLS_RESULT, res, 12 + 36);
  assert_int_equal(decode_exact(fr, n, MAX_FRAME, &f, &sz), WK_FRAME_E_TRUNCATED);

  /* STACK_REQUEST and STACK */
  const uint8_t body[16] = {1, 2, 3, 4, 5, 6, 7, 8, 0, 0, 0, 0};
  n = raw_frame(fr, sizeof fr, WK_FRAME_STACK_REQUEST, body, 7);
  assert_int_equal(decode_exact(fr, n, MAX_FRAME, &f, &sz), WK_FRAME_E_TRUNCATED);
  n = raw_frame(fr, sizeof fr, WK_FRAME_STACK_REQUEST, body, 9);
  assert_int_equal(decode_exact(fr, n, MAX_FRAME, &f, &sz), WK_FRAME_E_TRAILING);
  n = raw_frame(fr, sizeof fr, WK_FRAME_STACK, body, 12);
  assert_int_equal(decode_exact(fr, n, MAX_FRAME, &f, &sz), WK_FRAME_OK);
  assert_int_equal(f.stack.stack.len, 0);
  n = raw_frame(fr, sizeof fr, WK_FRAME_STACK, body, 11);
  assert_int_equal(decode_exact(fr, n, MAX_FRAME, &f, &sz), WK_FRAME_E_TRUNCATED);
  n = raw_frame(fr, sizeof fr, WK_FRAME_STACK, body, 13);
  assert_int_equal(decode_exact(fr, n, MAX_FRAME, &f, &sz), WK_FRAME_E_TRAILING);
}

/* ---- buffer ----------------------------------------------------------------------- */

static void test_buffer(void **state) {
  (void)state;
  wk_frame_buf b;
  wk_frame_buf_init(&b, NULL);
  assert_null(wk_frame_buf_bytes(&b));
  assert_int_equal(wk_frame_buf_size(&b), 0);

  /* read side: reserve, commit part, decode, consume: views survive consume */
  wk_frame samples[N_TYPES];
  size_t ns = all_samples(samples);
  wk_frame_buf enc;
  wk_frame_buf_init(&enc, NULL);
  for (size_t i = 0; i < ns; i++)
    assert_int_equal(wk_frame_encode(&enc, &samples[i], MAX_FRAME), 0);
  const uint8_t *src = wk_frame_buf_bytes(&enc);
  size_t src_len = wk_frame_buf_size(&enc);
  size_t fed = 0;
  size_t decoded = 0;
  while (decoded < ns) {
    size_t chunk = src_len - fed < 5 ? src_len - fed : 5; /* trickle 5 bytes at a time */
    uint8_t *dst = wk_frame_buf_reserve(&b, 64);
    memcpy(dst, src + fed, chunk);
    wk_frame_buf_commit(&b, chunk);
    fed += chunk;
    for (;;) {
      wk_frame f;
      size_t used;
      wk_frame_rc rc =
          wk_frame_decode(wk_frame_buf_bytes(&b), wk_frame_buf_size(&b), MAX_FRAME, &f, &used);
      if (rc == WK_FRAME_NEED_MORE) break;
      assert_int_equal(rc, WK_FRAME_OK);
      wk_frame_buf_consume(&b, used);
      assert_frames_eq(&f, &samples[decoded]); /* after consume: still valid */
      decoded++;
    }
  }
  assert_int_equal(fed, src_len);
  assert_int_equal(wk_frame_buf_size(&b), 0);

  /* compaction keeps the held bytes */
  wk_frame_buf_clear(&b);
  for (int i = 0; i < 200; i++) {
    uint8_t v = (uint8_t)i;
    wk_frame_buf_append(&b, &v, 1);
  }
  wk_frame_buf_consume(&b, 150);
  size_t cap = b.cap;
  (void)wk_frame_buf_reserve(&b, cap - 60); /* fits only once compacted */
  assert_int_equal(b.cap, cap);
  assert_int_equal(wk_frame_buf_size(&b), 50);
  for (int i = 0; i < 50; i++) assert_int_equal(wk_frame_buf_bytes(&b)[i], 150 + i);
  (void)wk_frame_buf_reserve(&b, cap * 3); /* grows */
  assert_true(b.cap >= cap * 3 + 50);
  for (int i = 0; i < 50; i++) assert_int_equal(wk_frame_buf_bytes(&b)[i], 150 + i);
  wk_frame_buf_append(&b, NULL, 0);
  assert_int_equal(wk_frame_buf_size(&b), 50);
  wk_frame_buf_free(&b);
  assert_null(b.data);
  wk_frame_buf_free(&b); /* twice is harmless */
  wk_frame_buf_free(&enc);
}

/* wk_frame_buf_partial: the size of a frame begun in the buffer and what it still
 * lacks, from its length prefix alone, at every cut of a 3-frame stream. */
static void test_buffer_partial_frame(void **state) {
  (void)state;
  wk_frame_buf enc;
  wk_frame_buf_init(&enc, NULL);
  wk_frame samples[N_TYPES];
  size_t ns = all_samples(samples);
  assert_true(ns >= 3);
  size_t ends[3];
  for (size_t i = 0; i < 3; i++) {
    assert_int_equal(wk_frame_encode(&enc, &samples[i], MAX_FRAME), 0);
    ends[i] = wk_frame_buf_size(&enc);
  }
  const uint8_t *src = wk_frame_buf_bytes(&enc);
  for (size_t cut = 0; cut <= ends[2]; cut++) {
    wk_frame_buf b;
    wk_frame_buf_init(&b, NULL);
    wk_frame_buf_append(&b, src, cut);
    size_t begin = 0, i = 0; /* consume the whole frames, as the reader does */
    while (i < 3 && ends[i] <= cut) begin = ends[i++];
    wk_frame_buf_consume(&b, begin);
    uint64_t total = 0, rest = 0;
    bool partial = wk_frame_buf_partial(&b, &total, &rest);
    if (i == 3 || cut - begin < WK_FRAME_PREFIX_SIZE) {
      assert_false(partial); /* nothing begun, or no whole prefix yet */
    } else {
      assert_true(partial);
      assert_int_equal(total, ends[i] - begin);
      assert_int_equal(rest, ends[i] - cut);
    }
    wk_frame_buf_free(&b);
  }
  /* a prefix claiming more than any limit is reported as it is (the decoder refuses it) */
  wk_frame_buf b;
  wk_frame_buf_init(&b, NULL);
  const uint8_t huge[] = {0xff, 0xff, 0xff, 0xff, 1};
  wk_frame_buf_append(&b, huge, sizeof huge);
  uint64_t total = 0, rest = 0;
  assert_true(wk_frame_buf_partial(&b, &total, &rest));
  assert_int_equal(total, 4 + (uint64_t)UINT32_MAX);
  assert_int_equal(rest, total - sizeof huge);
  wk_frame_buf_free(&b);
  wk_frame_buf_free(&enc);
}

static int g_allocs;
static void *count_alloc(void *ud, size_t size) {
  (void)ud;
  g_allocs++;
  return malloc(size);
}
static void count_free(void *ud, void *p, size_t size) {
  (void)ud;
  (void)size;
  g_allocs--;
  free(p);
}

static void test_buffer_allocator(void **state) {
  (void)state;
  wk_allocator a = {count_alloc, count_free, NULL};
  wk_frame_buf b;
  wk_frame_buf_init(&b, &a);
  wk_frame c = sample_call();
  for (int i = 0; i < 1000; i++) assert_int_equal(wk_frame_encode(&b, &c, MAX_FRAME), WK_FRAME_OK);
  assert_int_equal(g_allocs, 1); /* growth frees the old block */
  wk_frame_buf_free(&b);
  assert_int_equal(g_allocs, 0);
}

static void test_names(void **state) {
  (void)state;
  for (int rc = -6; rc <= 1; rc++) {
    assert_string_not_equal(wk_frame_rc_name((wk_frame_rc)rc), "UNKNOWN");
    assert_string_not_equal(wk_frame_rc_describe((wk_frame_rc)rc), "unknown return code");
  }
  assert_string_equal(wk_frame_rc_name((wk_frame_rc)-99), "UNKNOWN");
  assert_string_equal(wk_frame_rc_name(WK_FRAME_E_TRUNCATED), "E_TRUNCATED");
  for (int t = 1; t <= N_TYPES; t++) {
    assert_string_not_equal(wk_frame_type_name((wk_frame_type)t), "UNKNOWN");
  }
  assert_string_equal(wk_frame_type_name((wk_frame_type)0), "UNKNOWN");
  assert_string_equal(wk_frame_type_name((wk_frame_type)(N_TYPES + 1)), "UNKNOWN");
  assert_string_equal(wk_frame_type_name(WK_FRAME_SUBCALLS_RESULT), "SUBCALLS_RESULT");
  assert_string_equal(wk_frame_type_name(WK_FRAME_STACK_REQUEST), "STACK_REQUEST");
  assert_string_equal(wk_frame_type_name(WK_FRAME_CALL), "CALL");
  assert_true(wk_frame_bytes_eq_cstr(B("abc"), "abc"));
  assert_false(wk_frame_bytes_eq_cstr(B("abc"), "abd"));
  assert_false(wk_frame_bytes_eq_cstr(B("abc"), "ab"));
  assert_true(wk_frame_bytes_eq_cstr(B(NULL), ""));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_roundtrip_each_type),
      cmocka_unit_test(test_known_bytes),
      cmocka_unit_test(test_batch_back_to_back),
      cmocka_unit_test(test_empty_fields_and_null_views),
      cmocka_unit_test(test_every_truncation_needs_more),
      cmocka_unit_test(test_oversized_prefix_rejected_early),
      cmocka_unit_test(test_encoder_limits),
      cmocka_unit_test(test_malformed),
      cmocka_unit_test(test_malformed_call_fields),
      cmocka_unit_test(test_malformed_result_status),
      cmocka_unit_test(test_known_bytes_subcalls),
      cmocka_unit_test(test_list_iterators_and_encoded_form),
      cmocka_unit_test(test_malformed_lists),
      cmocka_unit_test(test_garbage),
      cmocka_unit_test(test_buffer),
      cmocka_unit_test(test_buffer_partial_frame),
      cmocka_unit_test(test_buffer_allocator),
      cmocka_unit_test(test_names),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

/* test_executor_roundtrip.c: the real Python executor (python/worker_executor.py)
 * against the C frame codec over a Unix-domain socket.
 *
 * Each test gets its own temporary 0700 directory, listening socket and executor
 * process (spawned with posix_spawn), and plays the Worker's side by hand: every
 * read and write is bounded by poll() with a timeout, so a broken executor fails the
 * test instead of hanging it.
 *
 * The interpreter is /usr/bin/python3 unless WK_TEST_PYTHON names another. */
#define _XOPEN_SOURCE 700

#include "executor_fixture.h"

#define BATCH 100

static int setup(void **state) { return setup_with(state, NULL); }

/* ---- tests ------------------------------------------------------------------------- */

static const char ECHO_PY[] =
    "def handler(args, ctx):\n"
    "    return {\"echo\": args, \"idx\": ctx.call_index}\n";

static void test_batch_of_100_calls_in_one_write(void **state) {
  fixture *fx = *state;
  write_function(fx, "echo", 1, "main.py", ECHO_PY);
  uint64_t ids[BATCH];
  char args[BATCH][32];
  for (uint32_t i = 0; i < BATCH; i++) {
    snprintf(args[i], sizeof args[i], "[%u,\"x\"]", i);
    ids[i] = queue_json_call(fx, "echo", args[i], i);
  }
  size_t batch_bytes = wk_frame_buf_size(&fx->wbuf);
  assert_true(batch_bytes > BATCH * 50);
  flush(fx);
  for (uint32_t i = 0; i < BATCH; i++) {
    wk_frame f;
    recv_result(fx, ids[i], &f); /* one executor runs them in order */
    assert_int_equal(f.result.status, WK_FRAME_STATUS_OK);
    assert_int_equal(f.result.content_type, WK_FRAME_CONTENT_JSON);
    char want[96];
    snprintf(want, sizeof want, "{\"echo\":[%u,\"x\"],\"idx\":%u}", i, i);
    assert_bytes_str(f.result.output, want);
    assert_int_equal(f.result.error_type.len, 0);
    assert_int_equal(f.result.traceback.len, 0);
    assert_true(f.result.cpu_us < 10u * 1000 * 1000);
    assert_true(f.result.max_rss_kb > 1000); /* an interpreter is megabytes */
    assert_int_equal(f.result.stdout_bytes.len, 0);
    assert_int_equal(f.result.stderr_bytes.len, 0);
  }
}

static void test_raising_handler(void **state) {
  fixture *fx = *state;
  write_function(fx, "boom", 1, "main.py",
                 "def helper(n):\n"
                 "    raise ValueError('bad input %d' % n)\n"
                 "def handler(args, ctx):\n"
                 "    print('about to fail')\n"
                 "    ctx.logger.warning('failing now')\n"
                 "    helper(args['n'])\n");
  uint64_t id = queue_json_call(fx, "boom", "{\"n\":7}", 0);
  flush(fx);
  wk_frame f;
  recv_result(fx, id, &f);
  assert_int_equal(f.result.status, WK_FRAME_STATUS_ERROR);
  assert_bytes_str(f.result.error_type, "ValueError");
  assert_bytes_str(f.result.error_message, "bad input 7");
  assert_int_equal(f.result.output.len, 0);
  assert_true(bytes_contain(f.result.traceback, "Traceback (most recent call last)"));
  assert_true(bytes_contain(f.result.traceback, "main.py"));
  assert_true(bytes_contain(f.result.traceback, "in helper"));
  assert_true(bytes_contain(f.result.traceback, "ValueError: bad input 7"));
  assert_false(
      bytes_contain(f.result.traceback, "worker_executor.py"));    /* executor frames trimmed */
  assert_false(bytes_contain(f.result.traceback, "wk_executor/")); /* (the package's too) */
  assert_bytes_str(f.result.stdout_bytes, "about to fail\n");
  assert_true(bytes_contain(f.result.stderr_bytes, "WARNING worker.fn.boom: failing now"));
}

static void test_retryable(void **state) {
  fixture *fx = *state;
  write_function(fx, "flaky", 1, "main.py",
                 "import worker\n"
                 "def handler(args, ctx):\n"
                 "    raise worker.Retryable('backend busy, try again')\n");
  uint64_t id = queue_json_call(fx, "flaky", "null", 0);
  flush(fx);
  wk_frame f;
  recv_result(fx, id, &f);
  assert_int_equal(f.result.status, WK_FRAME_STATUS_RETRYABLE);
  assert_bytes_str(f.result.error_type, "Retryable");
  assert_bytes_str(f.result.error_message, "backend busy, try again");
  assert_true(bytes_contain(f.result.traceback, "Retryable: backend busy"));
}

static void test_bytes_content(void **state) {
  fixture *fx = *state;
  write_function(fx, "rev", 1, "main.py",
                 "def handler(args, ctx):\n"
                 "    assert isinstance(args, bytes), type(args)\n"
                 "    return bytes(reversed(args))\n");
  const uint8_t in[] = {0x00, 0x01, 0xfe, 0xff, 0x00, 'a'};
  call_spec cs = {"rev", 1, "main:handler", WK_FRAME_CONTENT_BYTES, in, sizeof in, 0, 0};
  uint64_t id = queue_call(fx, &cs);
  flush(fx);
  wk_frame f;
  recv_result(fx, id, &f);
  assert_int_equal(f.result.status, WK_FRAME_STATUS_OK);
  assert_int_equal(f.result.content_type, WK_FRAME_CONTENT_BYTES);
  const uint8_t want[] = {'a', 0x00, 0xff, 0xfe, 0x01, 0x00};
  assert_int_equal(f.result.output.len, sizeof want);
  assert_memory_equal(f.result.output.ptr, want, sizeof want);
}

static void test_ping_pong(void **state) {
  fixture *fx = *state;
  queue_u64_frame(fx, WK_FRAME_PING, 0x1122334455667788u);
  queue_u64_frame(fx, WK_FRAME_PING, 0);
  flush(fx);
  wk_frame f;
  recv_frame(fx, &f);
  assert_int_equal(f.type, WK_FRAME_PONG);
  assert_true(f.ping.nonce == 0x1122334455667788u);
  recv_frame(fx, &f);
  assert_int_equal(f.type, WK_FRAME_PONG);
  assert_true(f.ping.nonce == 0);
}

static const char SLOW_PY[] =
    "import time, worker\n"
    "def handler(args, ctx):\n"
    "    end = time.monotonic() + 5\n"
    "    while time.monotonic() < end:\n"
    "        ctx.check_cancelled()\n"
    "        time.sleep(0.005)\n"
    "    return 'not cancelled'\n";

/* PING is answered and a queued call can be cancelled while another call runs; the
 * running call sees its CANCEL cooperatively. */
static void test_cancel_queued_and_running(void **state) {
  fixture *fx = *state;
  write_function(fx, "slow", 1, "main.py", SLOW_PY);
  write_function(fx, "echo", 1, "main.py", ECHO_PY);
  uint64_t slow = queue_json_call(fx, "slow", "null", 0);
  uint64_t queued = queue_json_call(fx, "echo", "1", 1);
  queue_u64_frame(fx, WK_FRAME_CANCEL, queued);
  queue_u64_frame(fx, WK_FRAME_PING, 5);
  flush(fx);
  int64_t t0 = now_ms();

  wk_frame f;
  recv_result(fx, queued, &f); /* answered before the running call ends */
  assert_int_equal(f.result.status, WK_FRAME_STATUS_ERROR);
  assert_bytes_str(f.result.error_type, "Cancelled");
  recv_frame(fx, &f);
  assert_int_equal(f.type, WK_FRAME_PONG);
  assert_true(f.ping.nonce == 5);
  assert_true(now_ms() - t0 < 4000);

  queue_u64_frame(fx, WK_FRAME_CANCEL, slow);
  queue_u64_frame(fx, WK_FRAME_CANCEL, 987654); /* unknown: ignored */
  flush(fx);
  recv_result(fx, slow, &f);
  assert_int_equal(f.result.status, WK_FRAME_STATUS_ERROR);
  assert_bytes_str(f.result.error_type, "Cancelled");
  assert_true(now_ms() - t0 < 4000);

  /* the executor is still healthy */
  uint64_t id = queue_json_call(fx, "echo", "2", 2);
  flush(fx);
  recv_result(fx, id, &f);
  assert_bytes_str(f.result.output, "{\"echo\":2,\"idx\":2}");
}

/* --started-file: the executor writes the id of each call it starts there, before it
 * runs it; RECALL gives a queued call back (RESULT NOT_STARTED) and leaves a started
 * one alone (executor-protocol.md §6, §7). */
static char started_path[64];

static int setup_started(void **state) {
  snprintf(started_path, sizeof started_path, "/tmp/wk-started-XXXXXX");
  int fd = mkstemp(started_path);
  assert_true(fd >= 0);
  assert_int_equal(ftruncate(fd, 8), 0);
  close(fd);
  const char *const extra[] = {"--started-file", started_path, NULL};
  return setup_with(state, extra);
}

static int teardown_started(void **state) {
  unlink(started_path);
  return teardown(state);
}

static uint64_t read_started(void) {
  uint8_t b[8] = {0};
  FILE *f = fopen(started_path, "rb");
  assert_non_null(f);
  assert_int_equal(fread(b, 1, 8, f), 8);
  fclose(f);
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = v << 8 | b[i];
  return v;
}

static void test_recall_and_started_file(void **state) {
  fixture *fx = *state;
  write_function(fx, "slow", 1, "main.py", SLOW_PY);
  write_function(fx, "echo", 1, "main.py", ECHO_PY);
  assert_true(read_started() == 0);
  uint64_t slow = queue_json_call(fx, "slow", "null", 0);
  uint64_t queued = queue_json_call(fx, "echo", "1", 1);
  flush(fx);
  int64_t deadline = now_ms() + IO_TIMEOUT_MS;
  const struct timespec tick = {0, 2000000};
  while (read_started() != slow && now_ms() < deadline) nanosleep(&tick, NULL);
  assert_true(read_started() == slow); /* marked before it runs; `queued` is not */

  wk_frame f;
  memset(&f, 0, sizeof f);
  f.type = WK_FRAME_RECALL;
  f.cancel.call_id = queued;
  queue_frame(fx, &f);
  f.cancel.call_id = slow; /* started: not given back */
  queue_frame(fx, &f);
  flush(fx);
  recv_result(fx, queued, &f);
  assert_int_equal(f.result.status, WK_FRAME_STATUS_NOT_STARTED);
  assert_int_equal(f.result.output.len, 0);

  queue_u64_frame(fx, WK_FRAME_CANCEL, slow);
  flush(fx);
  recv_result(fx, slow, &f);
  assert_int_equal(f.result.status, WK_FRAME_STATUS_ERROR);
  assert_bytes_str(f.result.error_type, "Cancelled");
  /* the recalled call never ran: the next call is the one started after `slow` */
  uint64_t id = queue_json_call(fx, "echo", "2", 2);
  flush(fx);
  recv_result(fx, id, &f);
  assert_bytes_str(f.result.output, "{\"echo\":2,\"idx\":2}");
  assert_true(read_started() == id);
}

static void test_output_capture_is_bounded(void **state) {
  fixture *fx = *state;
  write_function(fx, "chatty", 1, "main.py",
                 "import sys\n"
                 "def handler(args, ctx):\n"
                 "    for i in range(4000):\n"
                 "        print('line %05d ' % i + 'x' * 40)\n"
                 "    sys.stderr.write('err\\n')\n"
                 "    sys.stdout.buffer.write(b'raw')\n"
                 "    return len(args)\n");
  uint64_t id = queue_json_call(fx, "chatty", "[1,2,3]", 0);
  flush(fx);
  wk_frame f;
  recv_result(fx, id, &f);
  assert_int_equal(f.result.status, WK_FRAME_STATUS_OK);
  assert_bytes_str(f.result.output, "3");
  assert_true(f.result.stdout_bytes.len <= WK_FRAME_CAPTURE_MAX);
  assert_true(f.result.stdout_bytes.len > WK_FRAME_CAPTURE_MAX - 100);
  assert_memory_equal(f.result.stdout_bytes.ptr, "line 00000 ", 11);
  assert_true(bytes_contain(f.result.stdout_bytes, "output truncated"));
  assert_bytes_str(f.result.stderr_bytes, "err\n");
}

/* Two epochs of one function, each with a sibling module of the same name: each is
 * imported in its own namespace. */
static void test_epochs_are_isolated(void **state) {
  fixture *fx = *state;
  for (unsigned e = 1; e <= 2; e++) {
    char helper[64];
    snprintf(helper, sizeof helper, "VERSION = %u\n", e * 10);
    write_function(fx, "ver", e, "helper.py", helper);
    write_function(
        fx, "ver", e, "main.py",
        "import helper\n"
        "from . import helper as rel\n"
        "def handler(args, ctx):\n"
        "    return [helper.VERSION, rel.VERSION, ctx.epoch, __name__.startswith('_wk_code_')]\n");
  }
  uint64_t ids[4];
  for (unsigned i = 0; i < 4; i++) {
    call_spec cs = {"ver", 1 + i % 2, NULL, WK_FRAME_CONTENT_JSON, (const uint8_t *)"{}", 2, i, 0};
    ids[i] = queue_call(fx, &cs);
  }
  flush(fx);
  for (unsigned i = 0; i < 4; i++) {
    wk_frame f;
    recv_result(fx, ids[i], &f);
    assert_int_equal(f.result.status, WK_FRAME_STATUS_OK);
    assert_bytes_str(f.result.output, i % 2 ? "[20,20,2,true]" : "[10,10,1,true]");
  }
  /* no bytecode is written into the code store */
  char pycache[256];
  snprintf(pycache, sizeof pycache, "%s/ver/1/__pycache__", fx->fn_root);
  struct stat st;
  assert_int_equal(stat(pycache, &st), -1);
  assert_int_equal(errno, ENOENT);
}

static void test_load_and_encode_errors(void **state) {
  fixture *fx = *state;
  write_function(fx, "echo", 1, "main.py", ECHO_PY);
  write_function(fx, "odd", 1, "main.py",
                 "def handler(args, ctx):\n"
                 "    return {1, 2}\n");
  call_spec missing = {"echo", 1, "main:nope", WK_FRAME_CONTENT_JSON, (const uint8_t *)"1", 1,
                       0,      0};
  call_spec nodir = {"absent", 9, NULL, WK_FRAME_CONTENT_JSON, (const uint8_t *)"1", 1, 0, 0};
  call_spec badjson = {"echo", 1, NULL, WK_FRAME_CONTENT_JSON, (const uint8_t *)"{nope", 5, 0, 0};
  call_spec unjson = {"odd", 1, NULL, WK_FRAME_CONTENT_JSON, (const uint8_t *)"1", 1, 0, 0};
  uint64_t a = queue_call(fx, &missing);
  uint64_t b = queue_call(fx, &nodir);
  uint64_t c = queue_call(fx, &badjson);
  uint64_t d = queue_call(fx, &unjson);
  flush(fx);
  wk_frame f;
  recv_result(fx, a, &f);
  assert_int_equal(f.result.status, WK_FRAME_STATUS_ERROR);
  assert_bytes_str(f.result.error_type, "FunctionLoadError");
  assert_true(bytes_contain(f.result.error_message, "nope"));
  recv_result(fx, b, &f);
  assert_bytes_str(f.result.error_type, "FunctionLoadError");
  recv_result(fx, c, &f);
  assert_bytes_str(f.result.error_type, "ArgsDecodeError");
  recv_result(fx, d, &f);
  assert_bytes_str(f.result.error_type, "OutputEncodeError");
}

static void test_shutdown_exits_zero(void **state) {
  fixture *fx = *state;
  write_function(fx, "echo", 1, "main.py", ECHO_PY);
  uint64_t id = queue_json_call(fx, "echo", "\"last\"", 3);
  queue_frame(fx, &(wk_frame){.type = WK_FRAME_SHUTDOWN});
  flush(fx);
  wk_frame f;
  recv_result(fx, id, &f); /* calls sent before SHUTDOWN still run */
  assert_bytes_str(f.result.output, "{\"echo\":\"last\",\"idx\":3}");
  assert_true(expect_eof(fx, IO_TIMEOUT_MS));
  assert_true(wait_child(fx, IO_TIMEOUT_MS));
  assert_true(WIFEXITED(fx->exit_status));
  assert_int_equal(WEXITSTATUS(fx->exit_status), 0);
}

static void test_eof_exits_zero(void **state) {
  fixture *fx = *state;
  assert_int_equal(close(fx->fd), 0);
  fx->fd = -1;
  assert_true(wait_child(fx, IO_TIMEOUT_MS));
  assert_true(WIFEXITED(fx->exit_status));
  assert_int_equal(WEXITSTATUS(fx->exit_status), 0);
}

static void test_protocol_error_exits_nonzero(void **state) {
  fixture *fx = *state;
  static const uint8_t bogus[] = {1, 0, 0, 0, 0x42}; /* unknown frame type */
  write_all(fx, bogus, sizeof bogus);
  assert_true(expect_eof(fx, IO_TIMEOUT_MS));
  assert_true(wait_child(fx, IO_TIMEOUT_MS));
  assert_true(WIFEXITED(fx->exit_status));
  assert_int_equal(WEXITSTATUS(fx->exit_status), 2);
}

int main(void) {
  signal(SIGPIPE, SIG_IGN);
#define T(name) cmocka_unit_test_setup_teardown(name, setup, teardown)
  const struct CMUnitTest tests[] = {
      T(test_batch_of_100_calls_in_one_write),
      T(test_raising_handler),
      T(test_retryable),
      T(test_bytes_content),
      T(test_ping_pong),
      T(test_cancel_queued_and_running),
      cmocka_unit_test_setup_teardown(test_recall_and_started_file, setup_started,
                                      teardown_started),
      T(test_output_capture_is_bounded),
      T(test_epochs_are_isolated),
      T(test_load_and_encode_errors),
      T(test_shutdown_exits_zero),
      T(test_eof_exits_zero),
      T(test_protocol_error_exits_nonzero),
  };
#undef T
  return cmocka_run_group_tests(tests, NULL, NULL);
}

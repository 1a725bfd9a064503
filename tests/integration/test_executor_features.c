/* test_executor_features.c: the executor protocol's subcalls, stack capture, resource
 * limits and heartbeats, against the real Python executor (python/worker_executor.py)
 * over a Unix-domain socket.
 *
 * As in test_executor_roundtrip.c, each test gets its own temporary 0700 directory,
 * listening socket and executor process, and plays the Worker by hand with every read
 * and write bounded by poll(). For subcalls the test runs a small worker of its own
 * (mini_worker below): on SUBCALLS it sends the children as CALL frames to the same
 * executor, which is waiting, collects their RESULTs and answers SUBCALLS_RESULT.
 *
 * The interpreter is /usr/bin/python3 unless WK_TEST_PYTHON names another. */
#define _XOPEN_SOURCE 700

#include "executor_fixture.h"

static int setup(void **state) { return setup_with(state, NULL); }

/* Kills the executor now (a test that wedged it on purpose). */
static void kill_executor(fixture *fx) {
  if (fx->reaped) return;
  kill(fx->pid, SIGKILL);
  assert_true(wait_child(fx, IO_TIMEOUT_MS));
}

/* A heap copy of `b` that lives until teardown (views into rbuf do not). */
static wk_frame_bytes keep(fixture *fx, wk_frame_bytes b) {
  assert_true(fx->n_blocks < MAX_BLOCKS);
  uint8_t *p = malloc(b.len + 1u);
  assert_non_null(p);
  if (b.len) memcpy(p, b.ptr, b.len);
  p[b.len] = '\0'; /* handy for printing */
  fx->blocks[fx->n_blocks++] = p;
  wk_frame_bytes c = {p, b.len};
  return c;
}

/* ---- a mini worker: runs subcalls on the same executor ------------------------------ */

#define MW_CALLS 256
#define MW_REQS 64
#define MW_KIDS 64

typedef struct mw_call {
  uint64_t id;
  char function[64];
  char entrypoint[64];
  int req;      /* the request it answers (index into reqs); -1 for calls the test sent */
  uint32_t idx; /* its place in that request */
  bool done;
  unsigned order; /* RESULT arrival order, from 1 */
  wk_frame_status status;
  wk_frame_content content_type;
  wk_frame_bytes output, error_type, error_message, traceback, stdout_bytes, stderr_bytes;
  uint64_t cpu_us;
} mw_call;

typedef struct mw_req {
  uint64_t request_id;
  uint64_t parent;
  wk_frame_bytes function, entrypoint; /* as sent */
  wk_frame_content content_type;
  uint32_t count, done;
  wk_frame_child kids[MW_KIDS];
} mw_req;

typedef struct mini_worker {
  fixture *fx;
  mw_call calls[MW_CALLS];
  size_t n_calls;
  mw_req reqs[MW_REQS];
  size_t n_reqs;
  unsigned results;
  bool hold; /* record SUBCALLS without running them: the test answers */
} mini_worker;

static void copy_cstr(char *dst, size_t cap, wk_frame_bytes b) {
  assert_true(b.len < cap);
  if (b.len) memcpy(dst, b.ptr, b.len);
  dst[b.len] = '\0';
}

static mw_call *mw_find(mini_worker *mw, uint64_t id) {
  for (size_t i = 0; i < mw->n_calls; i++) {
    if (mw->calls[i].id == id) return &mw->calls[i];
  }
  return NULL;
}

static uint64_t mw_send(mini_worker *mw, const char *function, const char *entrypoint,
                        wk_frame_content ct, wk_frame_bytes args, int req, uint32_t idx) {
  assert_true(mw->n_calls < MW_CALLS);
  call_spec cs = {function, 1, entrypoint, ct, args.ptr, args.len, idx, 30000};
  uint64_t id = queue_call(mw->fx, &cs);
  mw_call *c = &mw->calls[mw->n_calls++];
  memset(c, 0, sizeof *c);
  c->id = id;
  snprintf(c->function, sizeof c->function, "%s", function);
  snprintf(c->entrypoint, sizeof c->entrypoint, "%s", entrypoint ? entrypoint : "");
  c->req = req;
  c->idx = idx;
  return id;
}

/* Sends a JSON call from the test (the root of a tree of subcalls). */
static uint64_t mw_start(mini_worker *mw, const char *function, const char *json) {
  uint64_t id =
      mw_send(mw, function, NULL, WK_FRAME_CONTENT_JSON, wk_frame_bytes_cstr(json), -1, 0);
  flush(mw->fx);
  return id;
}

static void mw_on_subcalls(mini_worker *mw, const wk_frame_subcalls *s) {
  mw_call *parent = mw_find(mw, s->parent_call_id);
  if (!parent) fail_msg("SUBCALLS from unknown call %llu", (unsigned long long)s->parent_call_id);
  assert_false(parent->done);
  assert_true(mw->n_reqs < MW_REQS);
  assert_true(s->count <= MW_KIDS);
  int ri = (int)mw->n_reqs++;
  mw_req *r = &mw->reqs[ri];
  memset(r, 0, sizeof *r);
  r->request_id = s->request_id;
  r->parent = s->parent_call_id;
  r->function = keep(mw->fx, s->function);
  r->entrypoint = keep(mw->fx, s->entrypoint);
  r->content_type = s->content_type;
  r->count = s->count;
  for (size_t i = 0; i + 1 < mw->n_reqs; i++) assert_true(mw->reqs[i].request_id != s->request_id);
  if (mw->hold) return;
  char function[64], entrypoint[64];
  if (s->function.len) {
    copy_cstr(function, sizeof function, s->function);
  } else {
    snprintf(function, sizeof function, "%s", parent->function);
  }
  if (s->entrypoint.len) {
    copy_cstr(entrypoint, sizeof entrypoint, s->entrypoint);
  } else {
    snprintf(entrypoint, sizeof entrypoint, "%s", parent->entrypoint);
  }
  wk_frame_iter it = wk_frame_subcalls_args(s);
  wk_frame_bytes a;
  uint32_t i = 0;
  while (wk_frame_iter_next_arg(&it, &a)) {
    mw_send(mw, function, entrypoint, s->content_type, keep(mw->fx, a), ri, i++);
  }
  assert_int_equal(i, s->count);
  flush(mw->fx); /* the children go to this same executor, which is waiting */
}

static void mw_answer(mini_worker *mw, mw_req *r) {
  wk_frame f;
  memset(&f, 0, sizeof f);
  f.type = WK_FRAME_SUBCALLS_RESULT;
  f.subcalls_result.request_id = r->request_id;
  f.subcalls_result.count = r->count;
  f.subcalls_result.children = r->kids;
  queue_frame(mw->fx, &f);
  flush(mw->fx);
}

static void mw_on_result(mini_worker *mw, const wk_frame_result *res) {
  mw_call *c = mw_find(mw, res->call_id);
  if (!c) fail_msg("RESULT for unknown call %llu", (unsigned long long)res->call_id);
  assert_false(c->done); /* exactly one RESULT per CALL */
  c->done = true;
  c->order = ++mw->results;
  c->status = res->status;
  c->content_type = res->content_type;
  c->output = keep(mw->fx, res->output);
  c->error_type = keep(mw->fx, res->error_type);
  c->error_message = keep(mw->fx, res->error_message);
  c->traceback = keep(mw->fx, res->traceback);
  c->stdout_bytes = keep(mw->fx, res->stdout_bytes);
  c->stderr_bytes = keep(mw->fx, res->stderr_bytes);
  c->cpu_us = res->cpu_us;
  if (c->req < 0) return;
  mw_req *r = &mw->reqs[c->req];
  wk_frame_child *k = &r->kids[c->idx];
  k->status = c->status;
  k->content_type = c->content_type;
  k->output = c->output;
  k->error_type = c->error_type;
  k->error_message = c->error_message;
  k->traceback = c->traceback;
  if (++r->done == r->count) mw_answer(mw, r);
}

/* Plays the worker until the RESULT of `root` arrives; returns that call. */
static mw_call *mw_run(mini_worker *mw, uint64_t root) {
  for (;;) {
    wk_frame f;
    recv_frame(mw->fx, &f);
    switch (f.type) {
      case WK_FRAME_SUBCALLS: mw_on_subcalls(mw, &f.subcalls); break;
      case WK_FRAME_RESULT:
        mw_on_result(mw, &f.result);
        if (f.result.call_id == root) return mw_find(mw, root);
        break;
      case WK_FRAME_PONG: break;
      case WK_FRAME_HELLO:
      case WK_FRAME_CALL:
      case WK_FRAME_CANCEL:
      case WK_FRAME_PING:
      case WK_FRAME_SHUTDOWN:
      case WK_FRAME_SUBCALLS_RESULT:
      case WK_FRAME_STACK_REQUEST:
      case WK_FRAME_RECALL:
      case WK_FRAME_SCRATCH:
      case WK_FRAME_SCRATCH_RESULT:
      case WK_FRAME_STACK: fail_msg("unexpected %s from the executor", wk_frame_type_name(f.type));
    }
  }
}

static void assert_call_ok(const mw_call *c, const char *output) {
  if (c->status != WK_FRAME_STATUS_OK) {
    fail_msg("call %llu failed: %s: %s\n%s", (unsigned long long)c->id,
             (const char *)c->error_type.ptr, (const char *)c->error_message.ptr,
             (const char *)c->traceback.ptr);
  }
  if (output) assert_bytes_str(c->output, output);
}

/* ---- subcalls ------------------------------------------------------------------------ */

static const char SQUARE_PY[] =
    "def handler(n, ctx):\n"
    "    return n * n\n";

static const char REV_PY[] =
    "def handler(b, ctx):\n"
    "    assert isinstance(b, bytes)\n"
    "    return b[::-1]\n";

static void test_subcall_call(void **state) {
  fixture *fx = *state;
  write_function(fx, "square", 1, "main.py", SQUARE_PY);
  write_function(
      fx, "parent", 1, "main.py",
      "def handler(args, ctx):\n"
      "    return {'sq': ctx.call('square', args['n']), 'then': ctx.call('square', 3)}\n");
  mini_worker mw = {.fx = fx};
  uint64_t root = mw_start(&mw, "parent", "{\"n\":7}");
  mw_call *c = mw_run(&mw, root);
  assert_call_ok(c, "{\"sq\":49,\"then\":9}");
  assert_int_equal(mw.n_reqs, 2);
  assert_true(mw.reqs[0].parent == root);
  assert_bytes_str(mw.reqs[0].function, "square");
  assert_bytes_str(mw.reqs[0].entrypoint, "main:handler"); /* another function: its default */
  assert_int_equal(mw.reqs[0].content_type, WK_FRAME_CONTENT_JSON);
  assert_int_equal(mw.reqs[0].count, 1);
  assert_true(mw.reqs[1].request_id != mw.reqs[0].request_id);
  assert_int_equal(mw.n_calls, 3);
  assert_call_ok(&mw.calls[1], "49");
  assert_call_ok(&mw.calls[2], "9");
  assert_int_equal(mw.calls[0].order, 3); /* the children's RESULTs came first */
}

static void test_subcall_map(void **state) {
  fixture *fx = *state;
  write_function(fx, "square", 1, "main.py", SQUARE_PY);
  write_function(fx, "rev", 1, "main.py", REV_PY);
  write_function(
      fx, "parent", 1, "main.py",
      "def handler(args, ctx):\n"
      "    sq = ctx.map('square', args)\n"
      "    rv = ctx.map('rev', [b'ab', bytearray(b'\\x00\\xff'), b''])\n"
      "    return {'sq': sq, 'rev': [r.hex() for r in rv], 'empty': ctx.map('square', [])}\n");
  mini_worker mw = {.fx = fx};
  uint64_t root = mw_start(&mw, "parent", "[1,2,3,4,5]");
  mw_call *c = mw_run(&mw, root);
  assert_call_ok(c, "{\"sq\":[1,4,9,16,25],\"rev\":[\"6261\",\"ff00\",\"\"],\"empty\":[]}");
  assert_int_equal(mw.n_reqs, 2); /* ctx.map of [] sends nothing */
  assert_int_equal(mw.reqs[0].count, 5);
  assert_int_equal(mw.reqs[0].content_type, WK_FRAME_CONTENT_JSON);
  assert_int_equal(mw.reqs[1].count, 3);
  assert_int_equal(mw.reqs[1].content_type, WK_FRAME_CONTENT_BYTES);
  assert_int_equal(mw.n_calls, 1 + 5 + 3);
  /* the children ran in this executor in order: square(1..5) */
  for (uint32_t i = 0; i < 5; i++) {
    char want[8];
    snprintf(want, sizeof want, "%u", (i + 1) * (i + 1));
    assert_call_ok(&mw.calls[1 + i], want);
    assert_int_equal(mw.calls[1 + i].order, 1 + i);
  }
}

/* fact(3) -> fact(2) -> fact(1): three calls running at once in one executor, each
 * waiting for the next on the same main thread. Same-function subcalls send an empty
 * function and entrypoint. Each call's stdout holds only its own prints. */
static void test_nested_depth_3(void **state) {
  fixture *fx = *state;
  write_function(fx, "fact", 1, "main.py",
                 "import sys, worker\n"
                 "def handler(n, ctx):\n"
                 "    print('enter', n)\n"
                 "    sys.stderr.write('err %d\\n' % n)\n"
                 "    r = 1 if n <= 1 else n * ctx.call(None, n - 1)\n"
                 "    print('exit', n)\n"
                 "    return r\n");
  mini_worker mw = {.fx = fx};
  uint64_t root = mw_start(&mw, "fact", "3");
  mw_call *c = mw_run(&mw, root);
  assert_call_ok(c, "6");
  assert_int_equal(mw.n_reqs, 2);
  for (size_t i = 0; i < 2; i++) {
    assert_bytes_str(mw.reqs[i].function, "");
    assert_bytes_str(mw.reqs[i].entrypoint, "");
  }
  assert_true(mw.reqs[0].parent == root);
  assert_true(mw.reqs[1].parent == mw.calls[1].id); /* fact(2) asked for fact(1) */
  assert_int_equal(mw.n_calls, 3);
  const char *outs[] = {"enter 3\nexit 3\n", "enter 2\nexit 2\n", "enter 1\nexit 1\n"};
  const char *errs[] = {"err 3\n", "err 2\n", "err 1\n"};
  for (size_t i = 0; i < 3; i++) {
    assert_call_ok(&mw.calls[i], NULL);
    assert_bytes_str(mw.calls[i].stdout_bytes, outs[i]);
    assert_bytes_str(mw.calls[i].stderr_bytes, errs[i]);
    assert_int_equal(mw.calls[i].order, 3 - i); /* innermost first */
  }
  assert_call_ok(&mw.calls[1], "2");
  assert_call_ok(&mw.calls[2], "1");
}

/* A nested call's CPU is its own: the waiting parent is not charged for it. */
static void test_nested_cpu_accounting(void **state) {
  fixture *fx = *state;
  write_function(fx, "burn", 1, "main.py",
                 "import time\n"
                 "def handler(ms, ctx):\n"
                 "    end = time.process_time() + ms / 1000.0\n"
                 "    while time.process_time() < end:\n"
                 "        pass\n"
                 "    return ms\n");
  write_function(fx, "parent", 1, "main.py",
                 "def handler(args, ctx):\n"
                 "    return ctx.map('burn', [150, 150])\n");
  mini_worker mw = {.fx = fx};
  uint64_t root = mw_start(&mw, "parent", "null");
  mw_call *c = mw_run(&mw, root);
  assert_call_ok(c, "[150,150]");
  assert_int_equal(mw.n_calls, 3);
  for (size_t i = 1; i < 3; i++) {
    assert_true(mw.calls[i].cpu_us >= 140000);
    assert_true(mw.calls[i].cpu_us < 2000000);
  }
  if (c->cpu_us >= 100000) fail_msg("parent charged %llu us", (unsigned long long)c->cpu_us);
}

/* A failed child: ctx.call raises worker.SubcallError(type, message, traceback);
 * ctx.map raises it for the first failed child, or returns it in place with
 * return_exceptions=True; an uncaught one fails the parent as SubcallError. */
static void test_failing_child(void **state) {
  fixture *fx = *state;
  write_function(fx, "boom", 1, "main.py",
                 "import worker\n"
                 "def handler(n, ctx):\n"
                 "    if n == 4:\n"
                 "        raise worker.Retryable('busy %d' % n)\n"
                 "    if n:\n"
                 "        raise ValueError('bad %d' % n)\n"
                 "    return 'ok'\n");
  write_function(
      fx, "parent", 1, "main.py",
      "import worker\n"
      "def handler(args, ctx):\n"
      "    out = {}\n"
      "    try:\n"
      "        ctx.call('boom', 1)\n"
      "    except worker.SubcallError as e:\n"
      "        out['call'] = [e.type, e.message, 'ValueError: bad 1' in e.traceback,\n"
      "                       'in handler' in e.traceback, e.retryable, str(e)]\n"
      "    res = ctx.map('boom', [0, 2, 0], return_exceptions=True)\n"
      "    out['inplace'] = [r if not isinstance(r, worker.SubcallError) else 'err:' + r.message\n"
      "                      for r in res]\n"
      "    try:\n"
      "        ctx.map('boom', [0, 3, 4])\n"
      "    except worker.SubcallError as e:\n"
      "        out['first'] = [e.message, e.retryable]\n"
      "    try:\n"
      "        ctx.call('boom', 4)\n"
      "    except worker.SubcallError as e:\n"
      "        out['retryable'] = [e.type, e.retryable]\n"
      "    try:\n"
      "        ctx.call('nosuch', 1)\n"
      "    except worker.SubcallError as e:\n"
      "        out['load'] = e.type\n"
      "    if args:\n"
      "        ctx.call('boom', 5)\n"
      "    return out\n");
  mini_worker mw = {.fx = fx};
  uint64_t root = mw_start(&mw, "parent", "0");
  mw_call *c = mw_run(&mw, root);
  assert_call_ok(c,
                 "{\"call\":[\"ValueError\",\"bad 1\",true,true,false,\"ValueError: bad 1\"],"
                 "\"inplace\":[\"ok\",\"err:bad 2\",\"ok\"],"
                 "\"first\":[\"bad 3\",false],"
                 "\"retryable\":[\"Retryable\",true],"
                 "\"load\":\"FunctionLoadError\"}");

  root = mw_start(&mw, "parent", "1");
  c = mw_run(&mw, root);
  assert_int_equal(c->status, WK_FRAME_STATUS_ERROR);
  assert_bytes_str(c->error_type, "SubcallError");
  assert_bytes_str(c->error_message, "ValueError: bad 5");
}

/* Beyond --max-nesting running calls, a CALL is answered NestingTooDeep at once; the
 * waiting parent sees it as a failed child. */
static int setup_nesting_3(void **state) {
  static const char *const extra[] = {"--max-nesting", "3", NULL};
  return setup_with(state, extra);
}

static void test_nesting_too_deep(void **state) {
  fixture *fx = *state;
  write_function(fx, "fact", 1, "main.py",
                 "import worker\n"
                 "def handler(n, ctx):\n"
                 "    try:\n"
                 "        return 1 if n <= 1 else n * ctx.call(None, n - 1)\n"
                 "    except worker.SubcallError as e:\n"
                 "        if e.type == 'NestingTooDeep':\n"
                 "            return -n\n"
                 "        raise\n");
  mini_worker mw = {.fx = fx};
  uint64_t root = mw_start(&mw, "fact", "3"); /* exactly 3 deep: fine */
  assert_call_ok(mw_run(&mw, root), "6");
  root = mw_start(&mw, "fact", "5"); /* fact(5) fact(4) fact(3) running; fact(2) refused */
  assert_call_ok(mw_run(&mw, root), "-60");
  mw_call *refused = &mw.calls[mw.n_calls - 1];
  assert_int_equal(refused->status, WK_FRAME_STATUS_ERROR);
  assert_bytes_str(refused->error_type, "NestingTooDeep");
}

/* Large maps are split into several SUBCALLS frames, each within the frame limit. */
static int setup_small_frames(void **state) {
  static const char *const extra[] = {"--max-frame", "1024", NULL};
  return setup_with(state, extra);
}

static void test_map_split_by_frame_limit(void **state) {
  fixture *fx = *state;
  write_function(fx, "len", 1, "main.py",
                 "def handler(s, ctx):\n"
                 "    return len(s)\n");
  write_function(fx, "parent", 1, "main.py",
                 "def handler(n, ctx):\n"
                 "    r = ctx.map('len', ['x' * (300 + i) for i in range(n)])\n"
                 "    try:\n"
                 "        ctx.call('len', 'y' * 2000)\n"
                 "    except ValueError as e:\n"
                 "        return [r, 'frame limit' in str(e)]\n");
  mini_worker mw = {.fx = fx};
  uint64_t root = mw_start(&mw, "parent", "7");
  mw_call *c = mw_run(&mw, root);
  assert_call_ok(c, "[[300,301,302,303,304,305,306],true]");
  assert_true(mw.n_reqs >= 3); /* two or three args of ~300 bytes per 1 KiB frame */
  uint32_t total = 0;
  for (size_t i = 0; i < mw.n_reqs; i++) total += mw.reqs[i].count;
  assert_int_equal(total, 7);
}

/* While a call waits for its subcalls, other queued calls run (nested); a CANCEL of
 * the waiting call ends the wait with worker.Cancelled; a late SUBCALLS_RESULT for
 * the abandoned request is ignored. */
static void test_waiting_call_runs_others_and_cancels(void **state) {
  fixture *fx = *state;
  write_function(fx, "echo", 1, "main.py",
                 "def handler(args, ctx):\n"
                 "    return {'echo': args}\n");
  write_function(fx, "parent", 1, "main.py",
                 "def handler(args, ctx):\n"
                 "    return ctx.call('echo', 'child')\n");
  mini_worker mw = {.fx = fx, .hold = true};
  uint64_t root = mw_start(&mw, "parent", "null");
  wk_frame f;
  recv_frame(fx, &f);
  assert_int_equal(f.type, WK_FRAME_SUBCALLS);
  mw_on_subcalls(&mw, &f.subcalls);
  uint64_t request_id = mw.reqs[0].request_id;

  /* an unrelated call runs while the parent waits */
  uint64_t other =
      mw_send(&mw, "echo", NULL, WK_FRAME_CONTENT_JSON, wk_frame_bytes_cstr("1"), -1, 0);
  flush(fx);
  recv_result(fx, other, &f);
  assert_bytes_str(f.result.output, "{\"echo\":1}");

  queue_u64_frame(fx, WK_FRAME_CANCEL, root);
  flush(fx);
  recv_result(fx, root, &f);
  assert_int_equal(f.result.status, WK_FRAME_STATUS_ERROR);
  assert_bytes_str(f.result.error_type, "Cancelled");

  /* the answer comes too late: ignored */
  wk_frame_child kid = {
      WK_FRAME_STATUS_OK, WK_FRAME_CONTENT_JSON, wk_frame_bytes_cstr("1"), {NULL, 0}, {NULL, 0},
      {NULL, 0}};
  wk_frame late = {.type = WK_FRAME_SUBCALLS_RESULT};
  late.subcalls_result.request_id = request_id;
  late.subcalls_result.count = 1;
  late.subcalls_result.children = &kid;
  queue_frame(fx, &late);
  uint64_t id = queue_json_call(fx, "echo", "2", 0);
  flush(fx);
  recv_result(fx, id, &f);
  assert_bytes_str(f.result.output, "{\"echo\":2}");
}

/* A SUBCALLS_RESULT whose count differs from the request's is a protocol error. */
static void test_subcalls_result_count_mismatch(void **state) {
  fixture *fx = *state;
  write_function(fx, "parent", 1, "main.py",
                 "def handler(args, ctx):\n"
                 "    return ctx.map('x', [1, 2])\n");
  mini_worker mw = {.fx = fx, .hold = true};
  (void)mw_start(&mw, "parent", "null");
  wk_frame f;
  recv_frame(fx, &f);
  assert_int_equal(f.type, WK_FRAME_SUBCALLS);
  assert_int_equal(f.subcalls.count, 2);
  wk_frame_child kid = {
      WK_FRAME_STATUS_OK, WK_FRAME_CONTENT_JSON, wk_frame_bytes_cstr("1"), {NULL, 0}, {NULL, 0},
      {NULL, 0}};
  wk_frame bad = {.type = WK_FRAME_SUBCALLS_RESULT};
  bad.subcalls_result.request_id = f.subcalls.request_id;
  bad.subcalls_result.count = 1;
  bad.subcalls_result.children = &kid;
  queue_frame(fx, &bad);
  flush(fx);
  assert_true(expect_eof(fx, IO_TIMEOUT_MS));
  assert_true(wait_child(fx, IO_TIMEOUT_MS));
  assert_true(WIFEXITED(fx->exit_status));
  assert_int_equal(WEXITSTATUS(fx->exit_status), 2);
}

/* ---- stack capture ------------------------------------------------------------------- */

static void test_stack_of_infinite_loop(void **state) {
  fixture *fx = *state;
  write_function(fx, "spin", 1, "main.py",
                 "def handler(args, ctx):\n"
                 "    x = 0\n"
                 "    while True: pass\n");
  uint64_t id = queue_json_call(fx, "spin", "null", 0);
  flush(fx);
  struct timespec ts = {0, 300 * 1000 * 1000};
  nanosleep(&ts, NULL);                             /* the call is looping by now */
  queue_u64_frame(fx, WK_FRAME_STACK_REQUEST, 999); /* not running: empty stack */
  flush(fx);
  wk_frame f;
  recv_frame(fx, &f);
  assert_int_equal(f.type, WK_FRAME_STACK);
  assert_true(f.stack.call_id == 999);
  assert_int_equal(f.stack.stack.len, 0);

  int64_t t0 = now_ms();
  queue_u64_frame(fx, WK_FRAME_STACK_REQUEST, id);
  flush(fx);
  recv_frame(fx, &f);
  int64_t took = now_ms() - t0;
  assert_int_equal(f.type, WK_FRAME_STACK);
  assert_true(f.stack.call_id == id);
  if (!bytes_contain(f.stack.stack, "main.py\", line 3, in handler") ||
      !bytes_contain(f.stack.stack, "while True: pass")) {
    fail_msg("stack without the loop:\n%.*s", (int)f.stack.stack.len,
             (const char *)f.stack.stack.ptr);
  }
  assert_false(bytes_contain(f.stack.stack, "in run")); /* the executor's outer frames are cut */
  printf("STACK answered in %lld ms:\n%.*s", (long long)took, (int)f.stack.stack.len,
         (const char *)f.stack.stack.ptr);
  assert_true(took < 1000);
  kill_executor(fx); /* wedged for good */
}

/* The stack of a call waiting for subcalls shows where it waits, and the nested call. */
static void test_stack_of_nested_calls(void **state) {
  fixture *fx = *state;
  write_function(fx, "spin", 1, "main.py",
                 "def handler(args, ctx):\n"
                 "    x = 0\n"
                 "    while True: pass\n");
  write_function(fx, "parent", 1, "main.py",
                 "def handler(args, ctx):\n"
                 "    return ctx.call('spin', None)\n");
  mini_worker mw = {.fx = fx};
  uint64_t root = mw_start(&mw, "parent", "null");
  wk_frame f;
  recv_frame(fx, &f);
  assert_int_equal(f.type, WK_FRAME_SUBCALLS);
  mw_on_subcalls(&mw, &f.subcalls); /* sends spin to the same executor */
  struct timespec ts = {0, 300 * 1000 * 1000};
  nanosleep(&ts, NULL);
  queue_u64_frame(fx, WK_FRAME_STACK_REQUEST, root);
  flush(fx);
  recv_frame(fx, &f);
  assert_int_equal(f.type, WK_FRAME_STACK);
  assert_true(f.stack.call_id == root);
  assert_true(bytes_contain(f.stack.stack, "main.py\", line 2, in handler")); /* the parent */
  assert_true(bytes_contain(f.stack.stack, "ctx.call('spin', None)"));
  assert_true(bytes_contain(f.stack.stack, "main.py\", line 3, in handler")); /* the child */
  kill_executor(fx);
}

/* ---- heartbeats while busy ------------------------------------------------------------ */

static void ping_within(fixture *fx, uint64_t nonce, int64_t limit_ms, const char *what) {
  int64_t t0 = now_ms();
  queue_u64_frame(fx, WK_FRAME_PING, nonce);
  flush(fx);
  wk_frame f;
  recv_frame(fx, &f);
  int64_t took = now_ms() - t0;
  assert_int_equal(f.type, WK_FRAME_PONG);
  assert_true(f.ping.nonce == nonce);
  printf("PONG while %s: %lld ms\n", what, (long long)took);
  if (took >= limit_ms) fail_msg("PONG took %lld ms while %s", (long long)took, what);
}

static void test_ping_while_busy(void **state) {
  fixture *fx = *state;
  write_function(fx, "sleepy", 1, "main.py",
                 "import time\n"
                 "def handler(s, ctx):\n"
                 "    time.sleep(s)\n"
                 "    return 'slept'\n");
  write_function(fx, "busy", 1, "main.py",
                 "import time\n"
                 "def handler(s, ctx):\n"
                 "    end = time.monotonic() + s\n"
                 "    n = 0\n"
                 "    while time.monotonic() < end:\n"
                 "        n += 1\n"
                 "    return 'busy'\n");
  /* The property: the PONG arrives while the call still runs (before its RESULT, which
   * recv_frame would otherwise return). The bound is loose: a loaded 2-core machine
   * (a parallel ASan build) has delayed the PONG by 600 ms; the calls run 3 s. */
  uint64_t a = queue_json_call(fx, "sleepy", "3", 0);
  flush(fx);
  struct timespec ts = {0, 200 * 1000 * 1000};
  nanosleep(&ts, NULL);
  ping_within(fx, 41, 1500, "a call sleeps");
  wk_frame f;
  recv_result(fx, a, &f);
  assert_bytes_str(f.result.output, "\"slept\"");

  uint64_t b = queue_json_call(fx, "busy", "3", 1);
  flush(fx);
  nanosleep(&ts, NULL);
  ping_within(fx, 42, 1500, "a call spins in Python"); /* the GIL's 5 ms switch interval */
  recv_result(fx, b, &f);
  assert_bytes_str(f.result.output, "\"busy\"");
}

/* The main thread reads the socket itself between calls; with a long queue of 4 ms calls
 * it has no reason to for a while, and the watchdog reads for it: a PING is answered, and
 * a queued call cancelled, long before the queue drains. RESULTs go out early too (more
 * than half of the queue run), not all at the end. */
static void test_input_while_queue_of_calls(void **state) {
  fixture *fx = *state;
  write_function(fx, "medium", 1, "main.py",
                 "import time\n"
                 "def handler(s, ctx):\n"
                 "    end = time.monotonic() + s\n"
                 "    while time.monotonic() < end:\n"
                 "        pass\n"
                 "    return 'ok'\n");
  enum { N = 200 };
  uint64_t ids[N];
  for (uint32_t i = 0; i < N; i++) ids[i] = queue_json_call(fx, "medium", "0.004", i);
  flush(fx);
  struct timespec ts = {0, 100 * 1000 * 1000};
  nanosleep(&ts, NULL); /* about 25 calls in */
  int64_t t0 = now_ms();
  queue_u64_frame(fx, WK_FRAME_PING, 77);
  queue_u64_frame(fx, WK_FRAME_CANCEL, ids[N - 1]);
  flush(fx);
  unsigned results = 0, results_at_pong = 0;
  bool pong = false, cancelled = false;
  int64_t pong_ms = -1;
  while (results < N) {
    wk_frame f;
    recv_frame(fx, &f);
    if (f.type == WK_FRAME_PONG) {
      assert_true(f.ping.nonce == 77);
      pong = true;
      pong_ms = now_ms() - t0;
      results_at_pong = results;
      continue;
    }
    assert_int_equal(f.type, WK_FRAME_RESULT);
    results++;
    if (f.result.call_id == ids[N - 1]) {
      assert_bytes_str(f.result.error_type, "Cancelled");
      cancelled = true;
      if (!pong) fail_msg("the cancelled call's RESULT came before the PONG");
    } else {
      assert_int_equal(f.result.status, WK_FRAME_STATUS_OK);
    }
  }
  printf("PONG while a queue of 4 ms calls runs: %lld ms, after %u of %d RESULTs\n",
         (long long)pong_ms, results_at_pong, N);
  assert_true(pong && cancelled);
  /* the order, not the clock: the PING was answered between calls while most of the
   * queue still waited (answered only at the end, it would follow ~199 RESULTs) */
  assert_true(results_at_pong < N / 2);
}

/* ---- resource limits ------------------------------------------------------------------ */

static const char LIMITS_PY[] =
    "import resource\n"
    "def handler(args, ctx):\n"
    "    g = resource.getrlimit\n"
    "    return [list(g(resource.RLIMIT_AS)), list(g(resource.RLIMIT_NOFILE)),\n"
    "            list(g(resource.RLIMIT_CPU))]\n";

static int setup_rlimits(void **state) {
  static const char *const extra[] = {
      "--rlimit-as-mb", "4096", "--rlimit-nofile", "48", "--rlimit-cpu-s", "600", NULL};
  return setup_with(state, extra);
}

static void test_rlimits_applied(void **state) {
  fixture *fx = *state;
  write_function(fx, "limits", 1, "main.py", LIMITS_PY);
  write_function(fx, "files", 1, "main.py",
                 "import os\n"
                 "def handler(args, ctx):\n"
                 "    fds = []\n"
                 "    try:\n"
                 "        while len(fds) < 1000:\n"
                 "            fds.append(os.open('/dev/null', os.O_RDONLY))\n"
                 "    except OSError as e:\n"
                 "        return [len(fds) < 48, e.errno]\n"
                 "    finally:\n"
                 "        for fd in fds:\n"
                 "            os.close(fd)\n"
                 "    return 'unlimited'\n");
  uint64_t a = queue_json_call(fx, "limits", "null", 0);
  uint64_t b = queue_json_call(fx, "files", "null", 1);
  flush(fx);
  wk_frame f;
  recv_result(fx, a, &f);
  assert_bytes_str(f.result.output, "[[4294967296,4294967296],[48,48],[600,600]]");
  recv_result(fx, b, &f);
  char want[32];
  snprintf(want, sizeof want, "[true,%d]", EMFILE);
  assert_bytes_str(f.result.output, want);
}

/* Without the flags (or with 0) the limits are the ones inherited. */
static int setup_rlimits_zero(void **state) {
  static const char *const extra[] = {
      "--rlimit-as-mb", "0", "--rlimit-nofile", "0", "--rlimit-cpu-s", "0", NULL};
  return setup_with(state, extra);
}

static void append_limit(char *buf, size_t cap, int which, bool last) {
  struct rlimit rl;
  assert_int_equal(getrlimit(which, &rl), 0);
  /* RLIM_INFINITY reads as -1 in Python on Linux */
  char s[64], h[64];
  if (rl.rlim_cur == RLIM_INFINITY) snprintf(s, sizeof s, "-1");
  else snprintf(s, sizeof s, "%llu", (unsigned long long)rl.rlim_cur);
  if (rl.rlim_max == RLIM_INFINITY) snprintf(h, sizeof h, "-1");
  else snprintf(h, sizeof h, "%llu", (unsigned long long)rl.rlim_max);
  size_t n = strlen(buf);
  snprintf(buf + n, cap - n, "[%s,%s]%s", s, h, last ? "" : ",");
}

static void test_rlimits_unchanged(void **state) {
  fixture *fx = *state;
  write_function(fx, "limits", 1, "main.py", LIMITS_PY);
  uint64_t a = queue_json_call(fx, "limits", "null", 0);
  flush(fx);
  wk_frame f;
  recv_result(fx, a, &f);
  char want[256] = "[";
  append_limit(want, sizeof want, RLIMIT_AS, false);
  append_limit(want, sizeof want, RLIMIT_NOFILE, false);
  append_limit(want, sizeof want, RLIMIT_CPU, true);
  strncat(want, "]", sizeof want - strlen(want) - 1);
  assert_bytes_str(f.result.output, want);
}

int main(void) {
  signal(SIGPIPE, SIG_IGN);
  setvbuf(stdout, NULL, _IOLBF, 0);
#define T(name) cmocka_unit_test_setup_teardown(name, setup, teardown)
#define TS(name, su) cmocka_unit_test_setup_teardown(name, su, teardown)
  const struct CMUnitTest tests[] = {
      T(test_subcall_call),
      T(test_subcall_map),
      T(test_nested_depth_3),
      T(test_nested_cpu_accounting),
      T(test_failing_child),
      TS(test_nesting_too_deep, setup_nesting_3),
      TS(test_map_split_by_frame_limit, setup_small_frames),
      T(test_waiting_call_runs_others_and_cancels),
      T(test_subcalls_result_count_mismatch),
      T(test_stack_of_infinite_loop),
      T(test_stack_of_nested_calls),
      T(test_ping_while_busy),
      T(test_input_while_queue_of_calls),
      TS(test_rlimits_applied, setup_rlimits),
      TS(test_rlimits_unchanged, setup_rlimits_zero),
  };
#undef T
#undef TS
  return cmocka_run_group_tests(tests, NULL, NULL);
}

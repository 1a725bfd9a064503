/* bench_dispatch.c: DispatcherCore scheduling cost and fairness (a benchmark, not a test).
 *
 * 1. One task of 100,000 calls: every call goes SEND → call_finished(OK) → the next
 *    SEND, with capacity 64 and the window ramping from 4 to 64. Figure: ns per call
 *    (send + finish, all emission included).
 * 2. 1,000 small tasks of 10 calls each, added together, run to completion with
 *    capacity 64, then removed. Figure: ns per call, add_task/remove included.
 * 3. The same 100,000-call task with 10% of the answers RETRYABLE (backoff 0, so the
 *    retry goes straight back to the queue): ns per attempt.
 * 4. Fairness: while the 100,000-call task keeps admission full, a 1-call task is
 *    submitted; figure: SENDs of other tasks until its SEND (at most one per other
 *    task with sendable work: the round robin), also with 100 busy tasks.
 * 5. Memory: bytes allocated per call record and per task at create time.
 *
 * Build a Release tree for meaningful numbers:
 *   cmake -S . -B build-bench -DCMAKE_BUILD_TYPE=Release && cmake --build build-bench --target bench_dispatch
 * Usage: bench_dispatch [--quick] */
#define _POSIX_C_SOURCE 200809L

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/wk_dispatcher.h"

#define BUF 1024u

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void die(const char *what) {
  fprintf(stderr, "bench_dispatch: %s\n", what);
  exit(1);
}

typedef struct counting {
  uint64_t bytes;
} counting;

static void *c_alloc(void *ud, size_t size) {
  ((counting *)ud)->bytes += size;
  return malloc(size);
}
static void c_free(void *ud, void *p, size_t size) {
  ((counting *)ud)->bytes -= size;
  free(p);
}

static wk_disp_config config(uint32_t capacity, uint32_t tasks, uint32_t calls) {
  wk_disp_config cfg;
  wk_disp_config_default(&cfg);
  cfg.max_inflight = capacity;
  cfg.window_initial = 4;
  cfg.window_max = 64;
  cfg.max_tasks = tasks;
  cfg.max_calls = calls;
  return cfg;
}

static wk_disp_task_params params(void) {
  wk_disp_task_params p;
  memset(&p, 0, sizeof p);
  p.failure_policy = WK_CALL_CONTINUE;
  p.max_failed_calls = UINT32_MAX;
  p.retry.max_attempts = 100;
  p.call_timeout_ms = 60000;
  return p;
}

/* A FIFO of attempts in flight, fed by SENDs. */
typedef struct fifo {
  uint64_t *ids;
  uint32_t cap, head, tail;
} fifo;

static void fifo_sends(fifo *f, const wk_disp_out *o, uint64_t *sends) {
  for (uint32_t i = 0; i < o->count; i++) {
    if (o->items[i].kind != WK_DISP_SEND) continue;
    f->ids[f->tail++ % f->cap] = o->items[i].call_id;
    (*sends)++;
  }
}

/* Runs everything to completion, answering the oldest attempt first; every
 * `retry_every`-th answer is RETRYABLE (0 = never). Returns attempts answered. */
static uint64_t run(wk_disp *d, wk_disp_out *o, fifo *f, uint32_t retry_every, uint64_t *sends) {
  uint64_t answered = 0;
  fifo_sends(f, o, sends);
  while (f->head != f->tail) {
    uint64_t id = f->ids[f->head++ % f->cap];
    wk_disp_result r =
        (retry_every && answered % retry_every == retry_every - 1) ? WK_DISP_RETRYABLE : WK_DISP_OK;
    o->count = 0;
    if (wk_disp_call_finished(d, id, r, 1, o) != WK_OK) die("call_finished refused");
    answered++;
    for (;;) {
      fifo_sends(f, o, sends);
      if (!o->more) break;
      o->count = 0;
      wk_disp_poll(d, 1, o);
    }
  }
  return answered;
}

static void bench_one_big(uint32_t calls, uint32_t retry_every, const char *label) {
  wk_disp_config cfg = config(64, 4, 4096);
  wk_disp *d = wk_disp_create(&cfg);
  if (!d) die("create");
  static wk_disp_action items[BUF];
  wk_disp_out o = {items, BUF, 0, false};
  fifo f = {calloc(8192, sizeof(uint64_t)), 8192, 0, 0};
  wk_disp_task_params p = params();
  uint32_t t;
  double t0 = now_s();
  if (wk_disp_add_task(d, 1, &p, &t) != WK_OK) die("add_task");
  if (wk_disp_add_calls(d, t, calls, true, 0, &o) != WK_OK) die("add_calls");
  uint64_t sends = 0;
  uint64_t answered = run(d, &o, &f, retry_every, &sends);
  double el = now_s() - t0;
  wk_disp_task_info info;
  if (wk_disp_task_info_get(d, t, &info) != WK_OK || !info.ended || info.finished != calls) {
    die("the big task did not finish");
  }
  printf("%-44s %8.1f ns per %s (%" PRIu64 " attempts, %" PRIu64 " retries, %.2f M/s)\n", label,
         el * 1e9 / (double)answered, retry_every ? "attempt" : "call", answered, info.retried,
         (double)answered / el / 1e6);
  const char *why = wk_disp_check_invariants(d);
  if (why) die(why);
  wk_disp_destroy(d);
  free(f.ids);
}

static void bench_small_tasks(uint32_t tasks, uint32_t per_task) {
  wk_disp_config cfg = config(64, tasks, 4096);
  wk_disp *d = wk_disp_create(&cfg);
  if (!d) die("create");
  static wk_disp_action items[BUF];
  wk_disp_out o = {items, BUF, 0, false};
  fifo f = {calloc(8192, sizeof(uint64_t)), 8192, 0, 0};
  uint32_t *h = calloc(tasks, sizeof *h);
  wk_disp_task_params p = params();
  uint64_t sends = 0;
  double t0 = now_s();
  for (uint32_t i = 0; i < tasks; i++) {
    if (wk_disp_add_task(d, i, &p, &h[i]) != WK_OK) die("add_task");
    o.count = 0;
    if (wk_disp_add_calls(d, h[i], per_task, true, 0, &o) != WK_OK) die("add_calls");
    fifo_sends(&f, &o, &sends);
  }
  o.count = 0;
  uint64_t answered = run(d, &o, &f, 0, &sends);
  for (uint32_t i = 0; i < tasks; i++) {
    if (wk_disp_remove_task(d, h[i]) != WK_OK) die("remove_task");
  }
  double el = now_s() - t0;
  printf("%-44s %8.1f ns per call (%" PRIu64 " calls, %.2f M/s)\n",
         "1,000 tasks x 10 calls, capacity 64:", el * 1e9 / (double)answered, answered,
         (double)answered / el / 1e6);
  wk_disp_destroy(d);
  free(f.ids);
  free(h);
}

/* `busy` tasks of 100,000 calls keep admission full; then a 1-call task arrives.
 * Counts the SENDs of other tasks before its SEND. */
static void bench_fairness(uint32_t busy) {
  wk_disp_config cfg = config(64, busy + 2, 8192);
  cfg.window_initial = 64; /* admission, not the windows, is what holds the busy tasks back */
  cfg.window_max = 1024;
  wk_disp *d = wk_disp_create(&cfg);
  if (!d) die("create");
  static wk_disp_action items[BUF];
  wk_disp_out o = {items, BUF, 0, false};
  fifo f = {calloc(16384, sizeof(uint64_t)), 16384, 0, 0};
  wk_disp_task_params p = params();
  uint64_t sends = 0;
  for (uint32_t i = 0; i < busy; i++) {
    uint32_t t;
    if (wk_disp_add_task(d, i, &p, &t) != WK_OK) die("add_task");
    o.count = 0;
    if (wk_disp_add_calls(d, t, 100000, true, 0, &o) != WK_OK) die("add_calls");
    fifo_sends(&f, &o, &sends);
  }
  /* let the windows ramp up: answer a few thousand calls */
  for (uint32_t k = 0; k < 5000; k++) {
    uint64_t id = f.ids[f.head++ % f.cap];
    o.count = 0;
    if (wk_disp_call_finished(d, id, WK_DISP_OK, 1, &o) != WK_OK) die("finish");
    fifo_sends(&f, &o, &sends);
  }
  uint32_t small;
  if (wk_disp_add_task(d, 999999, &p, &small) != WK_OK) die("add small");
  o.count = 0;
  if (wk_disp_add_calls(d, small, 1, true, 1, &o) != WK_OK) die("add small calls");
  uint64_t others = 0, steps = 0;
  bool seen = false;
  for (uint32_t i = 0; i < o.count; i++)
    seen |= o.items[i].kind == WK_DISP_SEND && o.items[i].task == small;
  while (!seen) {
    uint64_t id = f.ids[f.head++ % f.cap];
    o.count = 0;
    if (wk_disp_call_finished(d, id, WK_DISP_OK, 2, &o) != WK_OK) die("finish");
    steps++;
    for (uint32_t i = 0; i < o.count; i++) {
      if (o.items[i].kind != WK_DISP_SEND) continue;
      if (o.items[i].task == small) {
        seen = true;
        break;
      }
      others++;
      f.ids[f.tail++ % f.cap] = o.items[i].call_id;
    }
  }
  printf("fairness, %3u task(s) of 100,000 calls busy:       1-call task sent after %" PRIu64
         " other SEND(s), %" PRIu64 " answer(s)\n",
         busy, others, steps);
  wk_disp_destroy(d);
  free(f.ids);
}

static void bench_memory(void) {
  counting c = {0};
  wk_disp_config cfg = config(64, 1024, 65536);
  cfg.allocator = (wk_allocator){c_alloc, c_free, &c};
  wk_disp *d = wk_disp_create(&cfg);
  if (!d) die("create");
  uint64_t total = c.bytes;
  wk_disp_destroy(d);
  counting c2 = {0};
  cfg = config(64, 2048, 65536);
  cfg.allocator = (wk_allocator){c_alloc, c_free, &c2};
  d = wk_disp_create(&cfg);
  uint64_t per_task = (c2.bytes - total) / 1024;
  wk_disp_destroy(d);
  printf("memory: %.1f MiB for 65,536 call records and 1,024 tasks: %" PRIu64
         " B per call record, %" PRIu64 " B per task\n",
         (double)total / (1 << 20), (total - per_task * 1024) / 65536, per_task);
}

int main(int argc, char **argv) {
  bool quick = argc > 1 && strcmp(argv[1], "--quick") == 0;
  uint32_t big = quick ? 10000 : 100000;
  bench_one_big(
      big, 0,
      quick ? "one task of 10,000 calls, capacity 64:" : "one task of 100,000 calls, capacity 64:");
  bench_one_big(big, 10, "same, 10% RETRYABLE (immediate retry):");
  bench_small_tasks(1000, 10);
  bench_fairness(1);
  bench_fairness(100);
  bench_memory();
  return 0;
}

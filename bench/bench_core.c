/* bench_core.c: WorkerCore throughput and memory figures (a benchmark, not a test).
 *
 * 1. Events per second for whole task lifecycles with the slot table kept nearly
 *    full (15/16 of the slots hold live tasks), at task_slots 16, 1024 and 100000:
 *    request_slot, submit, activation_prepared, watch_attached, builder finished,
 *    calls finished (16 B outputs), writer finished, watch_detached, get_result, and
 *    every 256 lifecycles the adapter's timer scans and purge (one ms later).
 *    Every core call counts as one event.
 * 2. Bytes held per retained result: the core's own accounting
 *    (wk_core_retained_bytes) and the heap as seen by a counting wk_allocator.
 * 3. The incident journal (--journal, or all sections): the same lifecycles at 1024
 *    slots timed with the thread's CPU clock, without a tap, with a tap that does
 *    nothing (the input boundary's own cost), and with the journal writer recording
 *    every input into files in a temporary directory; rounds interleaved. The figure
 *    the default of core_journal_dir depends on: the journal's cost per event as a
 *    share of the core's cost per task (on by default only under 1 %).
 *
 * Targets: >= 5 million events/s on one core; ns/event at 100000 slots within 1.5x
 * of 16 slots. Usage: bench_core [--quick] [--cpu] [--slots N] */
#define _POSIX_C_SOURCE 200809L

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "adapters/wk_journal_writer.h"
#include "core/wk_core.h"
#include "core/wk_core_tap.h"

#define LIFECYCLE_EVENTS 9u
#define TICK_EVERY 256u
#define TARGET_EVENTS_PER_S 5e6
#define TARGET_RATIO 1.5

/* ---- counting allocator ------------------------------------------------------- */

typedef struct counting_alloc {
  uint64_t live_bytes, peak_bytes;
  uint64_t live_blocks, allocs;
} counting_alloc;

static void *count_alloc(void *ud, size_t size) {
  counting_alloc *a = ud;
  void *p = malloc(size);
  if (!p) return NULL;
  a->live_bytes += size;
  a->live_blocks++;
  a->allocs++;
  if (a->live_bytes > a->peak_bytes) a->peak_bytes = a->live_bytes;
  return p;
}

static void count_free(void *ud, void *ptr, size_t size) {
  counting_alloc *a = ud;
  a->live_bytes -= size;
  a->live_blocks--;
  free(ptr);
}

/* ---- helpers -------------------------------------------------------------------- */

/* Wall time by default; --cpu measures the thread's CPU time instead, which leaves
 * out the time a busy machine keeps the benchmark off the CPU (not what it does to
 * the caches). */
static clockid_t bench_clock = CLOCK_MONOTONIC;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(bench_clock, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

__attribute__((noreturn)) static void die(const char *what, wk_err err) {
  fprintf(stderr, "bench_core: %s failed: %s\n", what, wk_err_name(err));
  exit(1);
}

#define ID_LEN 17u

typedef struct bench_task {
  char id[ID_LEN + 1];
  uint64_t slot_id;
} bench_task;

/* "task-" + 12 hex digits: unique per lifecycle, cheap to make. */
static void make_id(bench_task *t, uint64_t n) {
  static const char hex[] = "0123456789abcdef";
  memcpy(t->id, "task-", 5);
  for (int k = 0; k < 12; k++) t->id[5 + k] = hex[(n >> (4 * (11 - k))) & 15u];
  t->id[ID_LEN] = '\0';
}

typedef struct bench {
  wk_core *core;
  counting_alloc alloc;
  int64_t now;
  uint64_t next_id;
  uint64_t events;
  uint8_t outputs[16];
  void *ctx;
} bench;

/* Starts a task: reserve, submit, activate, watch, finish the builder. Leaves it in
 * the calls phase, holding a RUNNING slot. */
static void start_task(bench *b, bench_task *t) {
  make_id(t, b->next_id++);
  wk_slot_result sr;
  wk_core_handle_request_slot(b->core, t->id, ID_LEN, 0, b->now, &sr);
  if (sr.err) die("request_slot", sr.err);
  t->slot_id = sr.slot_id;

  wk_submit_request req;
  memset(&req, 0, sizeof req);
  req.task_id = t->id;
  req.task_id_len = ID_LEN;
  req.slot_id = sr.slot_id;
  req.request_digest = b->next_id * UINT64_C(0x9E3779B97F4A7C15);
  req.retry.max_attempts = 1;
  wk_submit_result sub;
  wk_core_handle_submit(b->core, &req, b->ctx, b->now, &sub);
  if (sub.err) die("submit", sub.err);

  wk_transition_result tr;
  wk_core_handle_activation_prepared(b->core, t->id, ID_LEN, t->slot_id, 7, b->now, &tr);
  if (tr.err || tr.cmds.count != 1) die("activation_prepared", tr.err);

  wk_err err = wk_core_handle_watch_attached(b->core, t->id, ID_LEN, b->now);
  if (err) die("watch_attached", err);

  wk_phase_outcome o;
  memset(&o, 0, sizeof o);
  o.ok = true;
  o.call_list = b->ctx;
  wk_core_handle_phase_finished(b->core, t->id, ID_LEN, WK_PHASE_BUILDER, &o, b->now, &tr);
  if (tr.err || tr.cmds.count != 1) die("builder finished", tr.err);
  b->events += 5;
}

/* Finishes a task started by start_task: calls, writer, watch detach, get_result. */
static void finish_task(bench *b, const bench_task *t) {
  wk_phase_outcome o;
  memset(&o, 0, sizeof o);
  o.ok = true;
  o.data.data = b->outputs;
  o.data.len = sizeof b->outputs;
  o.stats.calls_total = 1;
  o.stats.calls_succeeded = 1;
  wk_transition_result tr;
  wk_core_handle_phase_finished(b->core, t->id, ID_LEN, WK_PHASE_CALLS, &o, b->now, &tr);
  if (tr.err || tr.cmds.count != 1) die("calls finished", tr.err);

  memset(&o, 0, sizeof o);
  o.ok = true;
  wk_core_handle_phase_finished(b->core, t->id, ID_LEN, WK_PHASE_WRITER, &o, b->now, &tr);
  if (tr.err || tr.cmds.count != 1 || tr.cmds.items[0].kind != WK_CMD_CONVERGE) {
    die("writer finished", tr.err);
  }

  wk_err err = wk_core_handle_watch_detached(b->core, t->id, ID_LEN, b->now);
  if (err) die("watch_detached", err);

  const wk_task_result *r = NULL;
  err = wk_core_get_result(b->core, t->id, ID_LEN, &r);
  if (err || r->state != WK_TASK_SUCCEEDED) die("get_result", err);
  b->events += 4;
}

/* One adapter tick: the three scans (fed back, though nothing is due) and the purge. */
static void tick(bench *b) {
  uint64_t slots[64];
  wk_task_id ids[16];
  b->now += 1;
  size_t n = wk_core_expired_slots(b->core, b->now, slots, 64);
  for (size_t k = 0; k < n; k++) {
    wk_transition_result tr;
    wk_core_handle_slot_lease_expired(b->core, slots[k], b->now, &tr);
  }
  size_t m = wk_core_timed_out_tasks(b->core, b->now, ids, 16);
  for (size_t k = 0; k < m; k++) {
    wk_transition_result tr;
    wk_core_handle_task_timed_out(b->core, ids[k].bytes, ids[k].len, b->now, &tr);
  }
  size_t w = wk_core_watch_disconnected_tasks(b->core, b->now, ids, 16);
  for (size_t k = 0; k < w; k++) {
    wk_transition_result tr;
    wk_core_handle_watch_grace_expired(b->core, ids[k].bytes, ids[k].len, b->now, &tr);
  }
  (void)wk_core_purge_expired_results(b->core, b->now);
  b->events += 4 + n + m + w;
}

static wk_core *make_core(bench *b, uint32_t slots, uint32_t retained) {
  wk_core_config cfg;
  wk_core_config_default(&cfg);
  cfg.task_slots = slots;
  cfg.max_retained_results = retained;
  cfg.allocator.alloc = count_alloc;
  cfg.allocator.free = count_free;
  cfg.allocator.ud = &b->alloc;
  wk_core *core = wk_core_create(&cfg);
  if (!core) {
    fprintf(stderr, "bench_core: wk_core_create(%u slots) failed\n", slots);
    exit(1);
  }
  wk_core_set_ready(core, true);
  return core;
}

/* ---- 1. lifecycle throughput ----------------------------------------------------- */

typedef struct lifecycle_figures {
  uint32_t slots, in_flight;
  uint64_t events;
  double seconds;
  double events_per_s, ns_per_event; /* median of the repetitions */
  double best_ns_per_event;          /* fastest repetition: less exposed to a busy machine */
} lifecycle_figures;

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* One lifecycle run: a core at `slots` with its ring of in-flight tasks, kept between
 * repetitions so the repetitions of several sizes can be interleaved. */
typedef struct lifecycle_run {
  bench *b;
  bench_task *ring;
  uint32_t slots, in_flight;
  uint64_t pos;
  int reps;
  double ns[16];
  uint64_t events_total;
  double seconds_total;
} lifecycle_run;

static void run_lifecycles(lifecycle_run *r, uint64_t n) {
  bench *b = r->b;
  for (uint64_t i = 0; i < n; i++, r->pos++) {
    bench_task *t = &r->ring[r->pos % r->in_flight];
    finish_task(b, t);
    start_task(b, t);
    if ((i % TICK_EVERY) == 0) tick(b);
  }
}

/* A core at `slots`, filled to 15/16, then once round the ring so retention reaches
 * steady state. */
static void lifecycle_begin(lifecycle_run *r, uint32_t slots) {
  memset(r, 0, sizeof *r);
  bench *b = calloc(1, sizeof *b);
  if (!b) exit(1);
  b->ctx = b;
  b->now = 1000;
  for (size_t k = 0; k < sizeof b->outputs; k++) b->outputs[k] = (uint8_t)k;
  b->core = make_core(b, slots, 10000);
  r->b = b;
  r->slots = slots;
  r->in_flight = slots - slots / 16;
  if (r->in_flight == 0) r->in_flight = 1;
  r->ring = calloc(r->in_flight, sizeof *r->ring);
  if (!r->ring) exit(1);
  for (uint32_t i = 0; i < r->in_flight; i++) start_task(b, &r->ring[i]);
  run_lifecycles(r, r->in_flight > 20000 ? r->in_flight : 20000);
}

/* One timed repetition of `n` lifecycles; returns its ns per event. */
static double lifecycle_rep(lifecycle_run *r, uint64_t n) {
  uint64_t e0 = r->b->events;
  double t0 = now_s();
  run_lifecycles(r, n);
  double dt = now_s() - t0;
  uint64_t de = r->b->events - e0;
  double ns = dt * 1e9 / (double)de;
  if (r->reps < 16) r->ns[r->reps++] = ns;
  r->events_total += de;
  r->seconds_total += dt;
  return ns;
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof v[0], cmp_double);
  return v[n / 2];
}

/* Checks the core, frees the run and returns its figures. */
static lifecycle_figures lifecycle_end(lifecycle_run *r) {
  bench *b = r->b;
  const char *why = wk_core_check_invariants(b->core);
  if (why) {
    fprintf(stderr, "bench_core: invariants broken after the run: %s\n", why);
    exit(1);
  }
  wk_heartbeat hb = wk_core_derive_heartbeat(b->core, b->now);
  if (hb.running != r->in_flight) {
    fprintf(stderr, "bench_core: expected %u running slots, heartbeat says %u\n", r->in_flight,
            hb.running);
    exit(1);
  }
  lifecycle_figures f = {
      .slots = r->slots,
      .in_flight = r->in_flight,
      .events = r->events_total,
      .seconds = r->seconds_total,
      .ns_per_event = median(r->ns, r->reps),
      .best_ns_per_event = r->ns[0], /* sorted by median() */
  };
  f.events_per_s = 1e9 / f.ns_per_event;
  wk_core_destroy(b->core);
  if (b->alloc.live_bytes != 0) {
    fprintf(stderr, "bench_core: %" PRIu64 " bytes not freed by wk_core_destroy\n",
            b->alloc.live_bytes);
    exit(1);
  }
  free(r->ring);
  free(b);
  return f;
}

/* ---- 2. memory per retained result ------------------------------------------------- */

typedef struct memory_figures {
  uint64_t core_bytes_per_result; /* wk_core_retained_bytes / count */
  uint64_t prealloc_per_record;   /* heap bytes per record the core preallocates */
  uint64_t blob_bytes_per_result; /* heap bytes allocated per retained result */
} memory_figures;

/* Heap after create, for a core able to retain `retained` results. */
static uint64_t create_bytes(uint32_t slots, uint32_t retained) {
  bench b;
  memset(&b, 0, sizeof b);
  b.core = make_core(&b, slots, retained);
  uint64_t bytes = b.alloc.live_bytes;
  wk_core_destroy(b.core);
  return bytes;
}

/* Retains `n` results of the given kind and measures. */
static memory_figures measure_retained(uint32_t n, bool failed, size_t outputs_len) {
  memory_figures m;
  memset(&m, 0, sizeof m);
  uint32_t slots = 16;
  m.prealloc_per_record = (create_bytes(slots, 2 * n) - create_bytes(slots, n)) / n;

  bench *b = calloc(1, sizeof *b);
  if (!b) exit(1);
  b->ctx = b;
  b->now = 1000;
  b->core = make_core(b, slots, n);
  uint64_t base = b->alloc.live_bytes;
  uint8_t outputs[256];
  memset(outputs, 0x5a, sizeof outputs);
  static const char message[] =
      "the writer plugin could not reach its backend (connection refused)";
  for (uint32_t i = 0; i < n; i++) {
    bench_task t;
    start_task(b, &t);
    wk_phase_outcome o;
    memset(&o, 0, sizeof o);
    o.ok = true;
    o.data.data = outputs;
    o.data.len = outputs_len;
    wk_transition_result tr;
    wk_core_handle_phase_finished(b->core, t.id, ID_LEN, WK_PHASE_CALLS, &o, b->now, &tr);
    memset(&o, 0, sizeof o);
    o.ok = !failed;
    o.message = failed ? message : NULL;
    wk_core_handle_phase_finished(b->core, t.id, ID_LEN, WK_PHASE_WRITER, &o, b->now, &tr);
    if (tr.err) die("writer finished", tr.err);
  }
  uint32_t count = wk_core_retained_count(b->core);
  if (count != n) {
    fprintf(stderr, "bench_core: %u results retained, expected %u\n", count, n);
    exit(1);
  }
  m.core_bytes_per_result = wk_core_retained_bytes(b->core) / count;
  m.blob_bytes_per_result = (b->alloc.live_bytes - base) / count;
  wk_core_destroy(b->core);
  free(b);
  return m;
}

/* ---- 3. the incident journal ------------------------------------------------------- */

static void noop_tap(void *ctx, const wk_core_input *in) {
  (void)ctx;
  (void)in;
}

static double cpu_s(clockid_t clock) {
  struct timespec ts;
  clock_gettime(clock, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void journal_section(uint64_t per_rep, int reps) {
  clockid_t saved = bench_clock;
  bench_clock = CLOCK_THREAD_CPUTIME_ID;
  char dir[] = "/tmp/bench_core_journal.XXXXXX";
  if (!mkdtemp(dir)) {
    perror("bench_core: mkdtemp");
    exit(1);
  }
  enum { OFF, NOOP, JOURNAL, RUNS };
  static const char *const names[RUNS] = {"no tap", "tap, does nothing", "journal writer"};
  lifecycle_run runs[RUNS];
  for (int k = 0; k < RUNS; k++) lifecycle_begin(&runs[k], 1024);
  wk_core_tap noop = {.input = noop_tap};
  wk_core_set_tap(runs[NOOP].b->core, &noop);
  char err[256];
  wk_journal_writer_config jc = {
      .dir = dir, .max_bytes = UINT64_C(64) << 20, .files = 4, .ring_bytes = 256u << 20};
  wk_journal_writer *w =
      wk_journal_writer_open(&jc, runs[JOURNAL].b->core, runs[JOURNAL].b->now, 1, err, sizeof err);
  if (!w) {
    fprintf(stderr, "bench_core: %s\n", err);
    exit(1);
  }
  double writer_cpu = 0, ns[RUNS][16], ratio[16];
  for (int rep = 0; rep < reps; rep++) {
    for (int k = 0; k < RUNS; k++) {
      double p0 = cpu_s(CLOCK_PROCESS_CPUTIME_ID), t0 = cpu_s(CLOCK_THREAD_CPUTIME_ID);
      ns[k][rep] = lifecycle_rep(&runs[k], per_rep);
      if (k == JOURNAL) wk_journal_writer_sync(w); /* outside the core's timing */
      double p1 = cpu_s(CLOCK_PROCESS_CPUTIME_ID), t1 = cpu_s(CLOCK_THREAD_CPUTIME_ID);
      if (k == JOURNAL) writer_cpu += (p1 - p0) - (t1 - t0);
    }
    ratio[rep] = (ns[JOURNAL][rep] - ns[OFF][rep]) / ns[OFF][rep];
  }
  wk_journal_stats st = wk_journal_writer_stats(w);
  uint64_t journal_events = runs[JOURNAL].events_total;
  wk_journal_writer_close(w);
  /* events per lifecycle: 9, plus a tick's 4 every TICK_EVERY */
  const double per_task = LIFECYCLE_EVENTS + 4.0 / TICK_EVERY;
  double med[RUNS];
  for (int k = 0; k < RUNS; k++) med[k] = median(ns[k], reps);
  printf("\nbench_core: the incident journal (1024 slots, thread CPU time, median of %d rounds)\n",
         reps);
  printf("  %-20s %12s %14s %16s\n", "core", "ns/event", "ns/task", "+ns/event");
  for (int k = 0; k < RUNS; k++) {
    printf("  %-20s %12.1f %14.1f %16.1f\n", names[k], med[k], med[k] * per_task,
           med[k] - med[OFF]);
  }
  double overhead = med[JOURNAL] - med[OFF];
  double ratio_med = median(ratio, reps); /* sorts ratio: [0] is the lowest */
  double share = overhead / (med[OFF] * per_task) * 100.0;
  printf(
      "  journal cost per event: %.1f ns = %.2f %% of the core's cost per task (%.0f ns);\n"
      "  the whole journal per task: %.1f %% (median of the rounds' ratios, rounds %.1f..%.1f %%)\n",
      overhead, share, med[OFF] * per_task, ratio_med * 100.0, ratio[0] * 100.0,
      ratio[reps - 1] * 100.0);
  printf("  writer thread: %.1f ns CPU per input; %.1f bytes per input on disk; %" PRIu64
         " inputs, %" PRIu64 " dropped, %" PRIu64 " files\n",
         writer_cpu * 1e9 / (double)(journal_events ? journal_events : 1),
         (double)st.bytes / (double)(st.inputs ? st.inputs : 1), st.inputs, st.dropped, st.files);
  printf("  default of core_journal_dir: %s (on only when the cost per event is under 1 %%)\n",
         share < 1.0 ? "on" : "off");
  for (int k = 0; k < RUNS; k++) {
    if (k != OFF) wk_core_set_tap(runs[k].b->core, NULL);
    lifecycle_end(&runs[k]);
  }
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (system(cmd) != 0) fprintf(stderr, "bench_core: could not remove %s\n", dir);
  bench_clock = saved;
}

/* ---- main ------------------------------------------------------------------------- */

int main(int argc, char **argv) {
  bool quick = false, only_journal = false;
  uint32_t only_slots = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--quick")) {
      quick = true;
    } else if (!strcmp(argv[i], "--journal")) {
      only_journal = true;
    } else if (!strcmp(argv[i], "--cpu")) {
      bench_clock = CLOCK_THREAD_CPUTIME_ID;
    } else if (!strcmp(argv[i], "--slots") && i + 1 < argc) {
      only_slots = (uint32_t)strtoul(argv[++i], NULL, 10);
    } else {
      fprintf(stderr,
              "usage: bench_core [--quick] [--cpu] [--slots N] [--journal]\n"
              "  --journal: only the incident journal's cost (section 3)\n"
              "  --cpu: time with the thread's CPU clock instead of the wall clock\n"
              "  --slots N: only the lifecycle run at N slots (for profiling)\n");
      return 2;
    }
  }
  static const uint32_t sizes[] = {16, 1024, 100000};
  const uint64_t per_rep = quick ? 50000 : 400000;
  const int reps = quick ? 3 : 7;
  if (only_journal) {
    journal_section(quick ? 50000 : 200000, reps);
    return 0;
  }
  if (only_slots) {
    lifecycle_run one_run;
    lifecycle_begin(&one_run, only_slots);
    for (int rep = 0; rep < reps; rep++) lifecycle_rep(&one_run, per_rep);
    lifecycle_figures one = lifecycle_end(&one_run);
    printf("bench_core: %u slots: %.2f M events/s, %.1f ns/event (best run %.1f)\n", one.slots,
           one.events_per_s / 1e6, one.ns_per_event, one.best_ns_per_event);
    return 0;
  }

  printf("bench_core: WorkerCore events, whole task lifecycles, slot table 15/16 full\n");
  printf(
      "  lifecycle = request_slot, submit, activation_prepared, watch_attached, builder,\n"
      "  calls (16 B outputs), writer, watch_detached, get_result (%u events); every %u\n"
      "  lifecycles a tick: expired_slots, timed_out_tasks, watch_disconnected_tasks, purge.\n"
      "  10000 results retained (oldest evicted per convergence). Median of %d interleaved runs of %" PRIu64
      " lifecycles,\n  timed with the %s clock.\n\n",
      LIFECYCLE_EVENTS, TICK_EVERY, reps, per_rep,
      bench_clock == CLOCK_MONOTONIC ? "wall" : "thread CPU");
  printf("  %11s %10s %12s %14s %10s %10s   %s\n", "task_slots", "in flight", "events", "events/s",
         "ns/event", "best ns", "target >= 5.0 M/s");
  /* The repetitions of the three sizes are interleaved (16, 1024, 100000, 16, ...), so
   * a busy spell of the machine slows all sizes alike, and the ratio is also taken per
   * round: the median of the rounds' ratios is the figure compared with the target. */
  lifecycle_run runs[3];
  for (int k = 0; k < 3; k++) lifecycle_begin(&runs[k], sizes[k]);
  double round_ratio[16];
  for (int rep = 0; rep < reps; rep++) {
    double ns[3];
    for (int k = 0; k < 3; k++) ns[k] = lifecycle_rep(&runs[k], per_rep);
    round_ratio[rep] = ns[2] / ns[0];
  }
  lifecycle_figures f[3];
  for (int k = 0; k < 3; k++) {
    f[k] = lifecycle_end(&runs[k]);
    bool pass = f[k].events_per_s >= TARGET_EVENTS_PER_S;
    printf("  %11u %10u %12" PRIu64 " %12.2f M %10.1f %10.1f   %s\n", f[k].slots, f[k].in_flight,
           f[k].events, f[k].events_per_s / 1e6, f[k].ns_per_event, f[k].best_ns_per_event,
           pass ? "PASS" : "MISS");
  }
  double lo = round_ratio[0], hi = round_ratio[0];
  for (int rep = 1; rep < reps; rep++) {
    if (round_ratio[rep] < lo) lo = round_ratio[rep];
    if (round_ratio[rep] > hi) hi = round_ratio[rep];
  }
  double ratio = median(round_ratio, reps);
  printf(
      "\n  ns/event at 100000 slots / at 16 slots: %.2f (median of %d interleaved rounds; "
      "rounds %.2f .. %.2f;\n  medians of the sizes: %.2f)   (target <= %.1f) %s\n",
      ratio, reps, lo, hi, f[2].ns_per_event / f[0].ns_per_event, TARGET_RATIO,
      ratio <= TARGET_RATIO ? "PASS" : "MISS");

  printf("\nbench_core: bytes held per retained result (task_slots 16, 10000 results)\n");
  printf("  %-38s %14s %16s %16s %14s\n", "result", "core account", "heap: record", "heap: blobs",
         "heap total");
  struct {
    const char *what;
    bool failed;
    size_t outputs;
  } kinds[] = {
      {"SUCCEEDED, 16 B outputs", false, 16},
      {"SUCCEEDED, 200 B outputs", false, 200},
      {"FAILED, 16 B outputs, 66 B message", true, 16},
  };
  for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
    memory_figures m = measure_retained(10000, kinds[k].failed, kinds[k].outputs);
    printf("  %-38s %12" PRIu64 " B %14" PRIu64 " B %14" PRIu64 " B %12" PRIu64 " B\n",
           kinds[k].what, m.core_bytes_per_result, m.prealloc_per_record, m.blob_bytes_per_result,
           m.prealloc_per_record + m.blob_bytes_per_result);
  }
  printf(
      "  (record: preallocated per task record, all records incl. index and heaps; blobs:\n"
      "   outputs, plugin results and message copies; malloc's own overhead not counted)\n");
  journal_section(quick ? 50000 : 200000, reps);
  return 0;
}

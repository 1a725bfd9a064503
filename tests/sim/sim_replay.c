/* sim_replay.c: deterministic simulation of WorkerCore that starts from a recorded
 * core journal (adapters/wk_journal.h) instead of an empty core.
 *
 *   sim_replay [--record FILE...] [--seed S] [--seeds N] [--steps M] [--verbose]
 *
 * With --record (the files of one run of a worker, in any order) the record is
 * replayed into a fresh core with the configuration its header holds; where the worker
 * also recorded its decisions (core_journal_decisions) every replayed decision must
 * print the same line. Without --record the simulation first makes one: a core with a
 * journal writer (the real one, its thread and files in a temporary directory) driven by
 * seeded random events, closed, read back.
 *
 * Then, for each seed, the loaded state goes on with seeded random events (slot
 * requests and submits of the record's task ids and new ones, activation, phase
 * outcomes in and out of order, progress, watch churn, aborts, readiness, the
 * adapter's timer loop) with checks after every step: the core's invariant walk, the
 * heartbeat against the slot table, every task converging exactly once after its
 * submit (tasks live at the end of the record included) and the live count. At the
 * end every live task is aborted, every lease runs out, and every slot must be FREE.
 * Each seed runs twice from two separate loads of the record: both runs must print
 * the same decisions, byte for byte. */
#define _GNU_SOURCE

#include <dirent.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "adapters/wk_journal.h"
#include "adapters/wk_journal_writer.h"
#include "core/wk_core_tap.h"
#include "lib/wk_alloc.h"
#include "sim_harness.h"

#define MAX_FILES 256

static char *g_record[MAX_FILES];
static uint64_t g_submitted, g_converged; /* over every run: the checks saw work */
static size_t g_nrecord;

static bool record_arg(int argc, char **argv, int *i) {
  if (strcmp(argv[*i], "--record") != 0) return false;
  while (*i + 1 < argc && strncmp(argv[*i + 1], "--", 2) != 0 && g_nrecord < MAX_FILES) {
    g_record[g_nrecord++] = argv[++*i];
  }
  return true;
}

/* ---- the driven core ------------------------------------------------------------------- */

typedef struct sim {
  wk_core *core;
  int64_t now;
  prng r;
  char (*ids)[WK_TASK_ID_MAX + 1]; /* every id known: the record's and ours */
  bool *live;                      /* submitted and not converged, by id index */
  size_t nids, cap;
  uint64_t next_new;
  wk_journal_printer printer;
  wk_buf lines; /* every decision printed, for the determinism check */
  wk_buf line;
  uint64_t seq;
  bool checking; /* the tap checks convergence (not while the record loads) */
  uint64_t converged, submitted;
} sim;

static size_t id_index(sim *s, const char *id, size_t len) {
  for (size_t i = 0; i < s->nids; i++) {
    if (strlen(s->ids[i]) == len && memcmp(s->ids[i], id, len) == 0) return i;
  }
  if (!wk_task_id_valid(id, len)) return SIZE_MAX;
  if (s->nids == s->cap) {
    s->cap = s->cap ? s->cap * 2 : 64;
    s->ids = wk_xrealloc(s->ids, s->cap * sizeof *s->ids);
    s->live = wk_xrealloc(s->live, s->cap * sizeof *s->live);
  }
  memcpy(s->ids[s->nids], id, len);
  s->ids[s->nids][len] = '\0';
  s->live[s->nids] = false;
  return s->nids++;
}

static void check_cmds(sim *s, const wk_cmds *cmds) {
  for (uint32_t k = 0; k < cmds->count; k++) {
    const wk_cmd *c = &cmds->items[k];
    if (c->kind != WK_CMD_CONVERGE) continue;
    size_t i = id_index(s, c->task_id, c->task_id_len);
    CHECK(i != SIZE_MAX && s->live[i], "CONVERGE of %.*s, which is not live (twice?)",
          (int)c->task_id_len, c->task_id);
    s->live[i] = false;
    s->converged++;
    const wk_task_result *r = c->u.converge.result;
    CHECK(r && wk_task_state_terminal(r->state), "CONVERGE of %s with a live state", s->ids[i]);
  }
}

static void on_output(void *ctx, const wk_core_input *in, const wk_core_output *out) {
  sim *s = ctx;
  wk_buf_clear(&s->line);
  wk_journal_print(&s->printer, s->seq++, in, out, &s->line);
  wk_buf_append(&s->lines, s->line.data, s->line.len);
  wk_buf_append(&s->lines, "\n", 1);
  if (g_run.verbose) vlog("%.*s\n", (int)s->line.len, (const char *)s->line.data);
  if (!s->checking) return;
  if (out->submit && out->err == WK_OK && !out->submit->duplicate) {
    size_t i = id_index(s, in->task_id, in->task_id_len);
    CHECK(i != SIZE_MAX && !s->live[i], "a new submit of %.*s, which is live", (int)in->task_id_len,
          in->task_id);
    s->live[i] = true;
    s->submitted++;
  }
  if (out->submit) check_cmds(s, &out->submit->cmds);
  if (out->transition) check_cmds(s, &out->transition->cmds);
}

static void check_state(sim *s) {
  const char *why = wk_core_check_invariants(s->core);
  CHECK(!why, "invariants: %s", why);
  wk_heartbeat hb = wk_core_derive_heartbeat(s->core, s->now);
  CHECK(hb.free + hb.reserved + hb.running == hb.task_slots, "heartbeat %u+%u+%u != %u", hb.free,
        hb.reserved, hb.running, hb.task_slots);
  uint32_t live = 0;
  for (size_t i = 0; i < s->nids; i++) live += s->live[i];
  CHECK(live == wk_core_live_tasks(s->core), "%u tasks live by the submits, the core says %u", live,
        wk_core_live_tasks(s->core));
}

/* ---- loading a record ---------------------------------------------------------------- */

typedef struct loaded_file {
  uint8_t *data;
  size_t len;
  uint32_t index;
  const char *path;
} loaded_file;

static int by_index(const void *a, const void *b) {
  uint32_t x = ((const loaded_file *)a)->index, y = ((const loaded_file *)b)->index;
  return (x > y) - (x < y);
}

/* Replays the record into a fresh core in `s`; returns the inputs replayed. */
static uint64_t load_record(sim *s, char **paths, size_t n) {
  loaded_file files[MAX_FILES];
  wk_journal_header h = {0};
  char why[512];
  for (size_t i = 0; i < n; i++) {
    loaded_file *f = &files[i];
    f->path = paths[i];
    CHECK(wk_journal_read_file(f->path, &f->data, &f->len, why, sizeof why), "%s", why);
    wk_journal_reader r;
    wk_journal_record rec;
    CHECK(wk_journal_reader_init(&r, f->data, f->len, why, sizeof why), "%s: %s", f->path, why);
    CHECK(wk_journal_next(&r, &rec, why, sizeof why) == 1 && rec.type == WK_JREC_HEADER,
          "%s: no header", f->path);
    CHECK(i == 0 || rec.header.run_id == h.run_id, "%s is another run's", f->path);
    if (i == 0 || rec.header.file_index < h.file_index) h = rec.header;
    f->index = rec.header.file_index;
    wk_journal_reader_free(&r);
  }
  qsort(files, n, sizeof *files, by_index);
  wk_core_config cfg = h.core;
  s->core = wk_core_create(&cfg);
  CHECK(s->core, "the record's configuration is refused");
  wk_journal_printer_init(&s->printer, &h);
  wk_core_tap tap = {.output = on_output, .ctx = s};
  wk_core_set_tap(s->core, &tap);
  s->now = h.mono_ms;
  s->seq = h.first_seq;
  wk_journal_order order;
  wk_journal_order_init(&order, &h);
  uint8_t *zeros = NULL;
  size_t zeros_len = 0;
  uint64_t inputs = 0, compared = 0;
  for (size_t i = 0; i < n; i++) {
    wk_journal_reader r;
    wk_journal_record rec;
    wk_journal_reader_init(&r, files[i].data, files[i].len, why, sizeof why);
    int rc;
    while ((rc = wk_journal_next(&r, &rec, why, sizeof why)) == 1) {
      if (rec.type == WK_JREC_INPUT) {
        CHECK(rec.seq == s->seq, "%s: input #%" PRIu64 " where #%" PRIu64 " was due", files[i].path,
              rec.seq, s->seq);
        wk_journal_prepare_replay(&rec, &zeros, &zeros_len);
        if (rec.input.task_id) (void)id_index(s, rec.input.task_id, rec.input.task_id_len);
        if (rec.input.now_ms > s->now) s->now = rec.input.now_ms;
        wk_core_applied res;
        wk_core_apply_input(s->core, &rec.input, NULL, &res);
        inputs++;
      } else if (rec.type == WK_JREC_DECISION) {
        CHECK(rec.seq + 1 == s->seq && rec.text_len == s->line.len &&
                  memcmp(rec.text, s->line.data, rec.text_len) == 0,
              "decision #%" PRIu64 " differs:\n  recorded: %.*s\n  replayed: %.*s", rec.seq,
              (int)rec.text_len, rec.text, (int)s->line.len, (const char *)s->line.data);
        compared++;
      } else if (rec.type == WK_JREC_LOST) {
        sim_fail("%s: the record lost inputs at #%" PRIu64, files[i].path, rec.seq);
      }
    }
    CHECK(rc == 0, "%s: %s", files[i].path, why);
    wk_journal_reader_free(&r);
    free(files[i].data);
  }
  free(zeros);
  /* the tasks live at the end of the record must converge once from here on */
  wk_task_id ids[WK_CORE_SCAN_MAX];
  size_t k = wk_core_list_live_tasks(s->core, ids, WK_CORE_SCAN_MAX);
  for (size_t j = 0; j < k; j++) s->live[id_index(s, ids[j].bytes, ids[j].len)] = true;
  vlog("loaded %" PRIu64 " inputs, %" PRIu64 " decisions compared, %zu live\n", inputs, compared,
       k);
  static bool said;
  if (!said) {
    said = true;
    printf("sim_replay: loaded %" PRIu64 " inputs from the record (%" PRIu64
           " recorded decisions reproduced), %zu tasks live, %zu ids known\n",
           inputs, compared, k, s->nids);
  }
  check_state(s);
  return inputs;
}

/* ---- random events --------------------------------------------------------------------- */

static const char *pick_id(sim *s, size_t *len) {
  if (s->nids == 0 || prng_pct(&s->r, 20)) {
    char id[32];
    int n = snprintf(id, sizeof id, "sim-%" PRIu64, s->next_new++);
    size_t i = id_index(s, id, (size_t)n);
    *len = (size_t)n;
    return s->ids[i];
  }
  const char *id = s->ids[prng_below(&s->r, (uint32_t)s->nids)];
  *len = strlen(id);
  return id;
}

/* The slot a task holds now (0 = none), from the slot table. */
static uint64_t slot_of(const sim *s, const char *id, size_t len) {
  uint32_t n = wk_core_get_config(s->core)->task_slots;
  for (uint32_t i = 0; i < n; i++) {
    wk_slot_view v = wk_core_slot(s->core, i);
    if (v.task_id && v.task_id_len == len && memcmp(v.task_id, id, len) == 0) {
      return wk_slot_id_make(i, v.generation);
    }
  }
  return 0;
}

static void timer_loop(sim *s) {
  uint64_t slots[WK_CORE_SCAN_MAX];
  wk_task_id ids[WK_CORE_SCAN_MAX];
  wk_transition_result tr;
  size_t n;
  while ((n = wk_core_expired_slots(s->core, s->now, slots, WK_CORE_SCAN_MAX)) > 0) {
    for (size_t i = 0; i < n; i++)
      wk_core_handle_slot_lease_expired(s->core, slots[i], s->now, &tr);
  }
  while ((n = wk_core_timed_out_tasks(s->core, s->now, ids, WK_CORE_SCAN_MAX)) > 0) {
    for (size_t i = 0; i < n; i++) {
      wk_core_handle_task_timed_out(s->core, ids[i].bytes, ids[i].len, s->now, &tr);
    }
  }
  while ((n = wk_core_watch_disconnected_tasks(s->core, s->now, ids, WK_CORE_SCAN_MAX)) > 0) {
    for (size_t i = 0; i < n; i++) {
      wk_core_handle_watch_grace_expired(s->core, ids[i].bytes, ids[i].len, s->now, &tr);
    }
  }
  (void)wk_core_purge_expired_results(s->core, s->now);
}

/* Moves a live task on by what its phase expects (now and then something else). */
static void advance_live(sim *s) {
  wk_task_id ids[WK_CORE_SCAN_MAX];
  size_t n = wk_core_list_live_tasks(s->core, ids, WK_CORE_SCAN_MAX);
  if (n == 0) return;
  const wk_task_id *t = &ids[prng_below(&s->r, (uint32_t)n)];
  const wk_task_result *res;
  CHECK(wk_core_get_result(s->core, t->bytes, t->len, &res) == WK_OK, "live task %s not found",
        t->bytes);
  wk_transition_result tr;
  uint8_t data[64] = {0};
  wk_phase_outcome o = {.ok = prng_pct(&s->r, 85)};
  wk_phase phase = prng_pct(&s->r, 5) ? (wk_phase)prng_below(&s->r, 5) : res->phase;
  switch (phase) {
    case WK_PHASE_PREPARING:
      if (prng_pct(&s->r, 88)) {
        uint64_t slot = prng_pct(&s->r, 95) ? res->slot_id : res->slot_id + (UINT64_C(1) << 32);
        wk_core_handle_activation_prepared(s->core, t->bytes, t->len, slot,
                                           1 + prng_below(&s->r, 4), s->now, &tr);
      } else {
        wk_core_handle_activation_failed(s->core, t->bytes, t->len, WK_FAIL_ACTIVATION_FAILED,
                                         "simulated activation failure", s->now, &tr);
      }
      return;
    case WK_PHASE_CALLS:
      if (prng_pct(&s->r, 30)) {
        wk_call_stats st = {.calls_total = prng_below(&s->r, 100), .calls_succeeded = 1};
        (void)wk_core_handle_call_progress(s->core, t->bytes, t->len, &st);
        return;
      }
      o.data = (wk_bytes){data, prng_below(&s->r, sizeof data)};
      o.stats.calls_total = 1 + prng_below(&s->r, 10);
      break;
    case WK_PHASE_WRITER: o.data = (wk_bytes){data, prng_below(&s->r, 16)}; break;
    case WK_PHASE_BUILDER: o.streaming = prng_pct(&s->r, 20); break;
    case WK_PHASE_DONE: break;
  }
  if (!o.ok && prng_pct(&s->r, 50)) o.message = "simulated phase failure";
  wk_core_handle_phase_finished(s->core, t->bytes, t->len, phase, &o, s->now, &tr);
}

static void random_step(sim *s) {
  uint32_t roll = prng_below(&s->r, 100);
  size_t len;
  const char *id;
  wk_transition_result tr;
  if (roll < 18) {
    s->now += prng_below(&s->r, 400);
    timer_loop(s);
  } else if (roll < 30) {
    id = pick_id(s, &len);
    wk_slot_result sr;
    wk_core_handle_request_slot(s->core, id, len, prng_below(&s->r, 1500), s->now, &sr);
  } else if (roll < 44) {
    id = pick_id(s, &len);
    wk_submit_request req = {
        .task_id = id,
        .task_id_len = len,
        .slot_id = prng_pct(&s->r, 70) ? slot_of(s, id, len) : 0,
        .request_digest = prng_pct(&s->r, 95) ? 7 : 8,
        .timeout_ms = prng_pct(&s->r, 50) ? 0 : 100 + prng_below(&s->r, 3000),
        .retry = {.max_attempts = 1},
    };
    wk_submit_result res;
    wk_core_handle_submit(s->core, &req, s, s->now, &res);
  } else if (roll < 74) {
    advance_live(s);
  } else if (roll < 86) {
    id = pick_id(s, &len);
    uint32_t w = prng_below(&s->r, 3);
    if (w == 0) (void)wk_core_handle_watch_attached(s->core, id, len, s->now);
    if (w == 1) (void)wk_core_handle_watch_detached(s->core, id, len, s->now);
    if (w == 2) (void)wk_core_handle_watch_disconnected(s->core, id, len, s->now);
  } else if (roll < 90) {
    id = pick_id(s, &len);
    wk_core_handle_abort(s->core, id, len, WK_FAIL_CANCELLED, "simulated cancel", s->now, &tr);
  } else if (roll < 93) {
    id = pick_id(s, &len);
    wk_core_handle_task_timed_out(s->core, id, len, s->now, &tr); /* mostly STALE */
  } else if (roll < 95) {
    wk_core_set_draining(s->core, prng_pct(&s->r, 30));
  } else if (roll < 97) {
    wk_core_set_admission_paused(s->core, prng_pct(&s->r, 30) ? "simulated memory pressure" : NULL);
  } else {
    wk_core_set_ready(s->core, prng_pct(&s->r, 90));
  }
}

/* Ends every task and lease; every slot must come back. */
static void drain(sim *s) {
  g_run.in_drain = true;
  wk_task_id ids[WK_CORE_SCAN_MAX];
  size_t n;
  while ((n = wk_core_list_live_tasks(s->core, ids, WK_CORE_SCAN_MAX)) > 0) {
    for (size_t i = 0; i < n; i++) {
      wk_transition_result tr;
      wk_core_handle_abort(s->core, ids[i].bytes, ids[i].len, WK_FAIL_WORKER_SHUTDOWN,
                           "simulation over", s->now, &tr);
      CHECK(tr.err == WK_OK, "abort of %s: %s", ids[i].bytes, wk_err_name(tr.err));
    }
  }
  s->now += wk_core_get_config(s->core)->max_slot_ttl_ms + 1;
  timer_loop(s);
  check_state(s);
  wk_heartbeat hb = wk_core_derive_heartbeat(s->core, s->now);
  CHECK(hb.free == hb.task_slots, "%u of %u slots free after the drain", hb.free, hb.task_slots);
  for (size_t i = 0; i < s->nids; i++) CHECK(!s->live[i], "%s never converged", s->ids[i]);
}

static void sim_free(sim *s) {
  wk_core_destroy(s->core);
  wk_journal_printer_free(&s->printer);
  wk_buf_free(&s->lines);
  wk_buf_free(&s->line);
  free(s->ids);
  free(s->live);
  memset(s, 0, sizeof *s);
}

/* One seed from the record: returns the decisions it printed (the caller frees). */
static wk_buf run_from_record(uint64_t seed, uint64_t steps) {
  sim s = {.r = {seed * UINT64_C(0x2545F4914F6CDD1D) + 1}};
  g_run.step = 0;
  load_record(&s, g_record, g_nrecord);
  wk_buf_clear(&s.lines); /* the record's own decisions were compared while loading */
  s.checking = true;
  for (g_run.step = 1; g_run.step <= steps; g_run.step++) {
    random_step(&s);
    check_state(&s);
  }
  drain(&s);
  wk_buf out = s.lines;
  s.lines = (wk_buf){0};
  g_submitted += s.submitted;
  g_converged += s.converged;
  sim_free(&s);
  return out;
}

/* ---- making a record ------------------------------------------------------------------- */

static char g_dir[64];

/* Records `steps` random events of a fresh core with the real journal writer. */
static void make_record(uint64_t seed, uint64_t steps) {
  snprintf(g_dir, sizeof g_dir, "/tmp/sim_replay.XXXXXX");
  CHECK(mkdtemp(g_dir), "mkdtemp failed");
  wk_core_config cfg;
  wk_core_config_default(&cfg);
  cfg.task_slots = 6;
  cfg.default_slot_ttl_ms = 800;
  cfg.max_slot_ttl_ms = 2000;
  cfg.default_task_timeout_ms = 2500;
  cfg.watch_disconnect_grace_ms = 300;
  cfg.result_retention_ms = 3000;
  cfg.max_retained_results = 40;
  sim s = {.r = {seed}};
  s.core = wk_core_create(&cfg);
  char err[256];
  wk_journal_writer_config jc = {
      .dir = g_dir, .max_bytes = UINT64_C(256) << 20, .files = 4, .decisions = true};
  wk_journal_writer *w = wk_journal_writer_open(&jc, s.core, 1000, 1764768000000, err, sizeof err);
  CHECK(w, "%s", err);
  wk_core_set_ready(s.core, true);
  s.now = 1000;
  for (uint64_t i = 0; i < steps; i++) random_step(&s);
  wk_journal_stats st = wk_journal_writer_stats(w);
  wk_journal_writer_close(w);
  CHECK(st.dropped == 0 && st.write_errors == 0, "the writer dropped %" PRIu64 " inputs",
        st.dropped);
  sim_free(&s);
  DIR *d = opendir(g_dir);
  CHECK(d, "cannot list %s", g_dir);
  struct dirent *e;
  while ((e = readdir(d)) != NULL && g_nrecord < MAX_FILES) {
    if (e->d_name[0] == '.') continue;
    char path[512];
    snprintf(path, sizeof path, "%s/%s", g_dir, e->d_name);
    g_record[g_nrecord++] = wk_xstrdup(path);
  }
  closedir(d);
  CHECK(g_nrecord > 0, "the writer made no file in %s", g_dir);
  printf("sim_replay: recorded %" PRIu64 " random events into %zu file(s) (%" PRIu64 " inputs)\n",
         steps, g_nrecord, st.inputs);
}

int main(int argc, char **argv) {
  g_run.name = "sim_replay";
  sim_plan plan;
  sim_parse_args(argc, argv, 100000, 2000,
                 "usage: sim_replay [--record FILE...] [--seed S] [--seeds N] [--steps M] "
                 "[--verbose]",
                 record_arg, &plan);
  bool made = g_nrecord == 0;
  if (made) make_record(plan.first_seed * 31 + 7, 3000);
  double t0 = sim_mono_s();
  for (uint64_t k = 0; k < plan.seeds; k++) {
    sim_begin_seed(plan.first_seed + k);
    wk_buf a = run_from_record(g_run.seed, plan.steps);
    wk_buf b = run_from_record(g_run.seed, plan.steps);
    CHECK(a.len == b.len && memcmp(a.data, b.data, a.len) == 0,
          "two runs of the seed from the record printed different decisions");
    wk_buf_free(&a);
    wk_buf_free(&b);
  }
  printf("sim_replay: OK seeds %" PRIu64 "..%" PRIu64 ", %" PRIu64
         " steps each from the record, twice each, in %.2f s: %" PRIu64 " submits, %" PRIu64
         " convergences checked\n",
         plan.first_seed, plan.first_seed + plan.seeds - 1, plan.steps, sim_mono_s() - t0,
         g_submitted, g_converged);
  CHECK(g_converged > 0, "no task converged: the simulation exercised nothing");
  if (made) {
    for (size_t i = 0; i < g_nrecord; i++) {
      unlink(g_record[i]);
      free(g_record[i]);
    }
    rmdir(g_dir);
  }
  return 0;
}

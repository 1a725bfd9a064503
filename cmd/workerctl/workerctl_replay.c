/* workerctl_replay.c: `workerctl replay FILE...`: feeds the inputs a worker's core
 * journal recorded (core_journal_dir, adapters/wk_journal.h) to a fresh WorkerCore and
 * prints each input with the core's decision, one line each (or JSON with --json),
 * optionally only those of one task. No worker is contacted.
 *
 * Files may come in any order and from several runs of a worker: they are grouped by
 * run (oldest first) and ordered by their index; each run is replayed from a fresh core
 * with the configuration its header records. The replay stops cleanly, saying why, at a
 * missing file or input, a truncated tail or a corrupt record. */
#define _GNU_SOURCE

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "adapters/wk_journal.h"
#include "core/wk_core_tap.h"
#include "workerctl.h"

typedef struct replay_file {
  const char *path;
  uint8_t *data;
  size_t len;
  wk_journal_header header;
} replay_file;

typedef struct replay {
  ctl_args *a;
  const char *task; /* --task: only lines concerning it */
  bool all;         /* --all: also the purges that purged nothing */
  bool check;       /* --check: compare with the recorded decisions */
  bool recorded;    /* --recorded: print the recorded decisions */
  uint8_t *zeros;
  size_t zeros_len;
  /* the pending comparison: the replayed line of the last input */
  wk_buf line;
  uint64_t line_seq;
  bool line_pending, line_shown;
  uint64_t inputs, compared, differ, missing;
} replay;

static int file_cmp(const void *pa, const void *pb) {
  const wk_journal_header *a = &((const replay_file *)pa)->header;
  const wk_journal_header *b = &((const replay_file *)pb)->header;
  if (a->run_id != b->run_id) {
    if (a->wall_ms != b->wall_ms) return a->wall_ms < b->wall_ms ? -1 : 1;
    return a->run_id < b->run_id ? -1 : 1;
  }
  return (a->file_index > b->file_index) - (a->file_index < b->file_index);
}

/* Reads every file and its header; false (reported) when one is not a journal. */
static bool load_files(ctl_args *a, replay_file *files) {
  for (size_t i = 0; i < a->npos; i++) {
    replay_file *f = &files[i];
    f->path = a->pos[i];
    char why[512];
    if (!wk_journal_read_file(f->path, &f->data, &f->len, why, sizeof why)) {
      fprintf(stderr, "workerctl: replay: %s\n", why);
      return false;
    }
    wk_journal_reader r;
    wk_journal_record rec;
    if (!wk_journal_reader_init(&r, f->data, f->len, why, sizeof why) ||
        wk_journal_next(&r, &rec, why, sizeof why) != 1 || rec.type != WK_JREC_HEADER) {
      if (r.data && rec.type != WK_JREC_HEADER) snprintf(why, sizeof why, "no header record");
      fprintf(stderr, "workerctl: replay: %s: %s\n", f->path, why);
      wk_journal_reader_free(&r);
      return false;
    }
    f->header = rec.header;
    wk_journal_reader_free(&r);
  }
  qsort(files, a->npos, sizeof *files, file_cmp);
  return true;
}

/* ---- JSON ------------------------------------------------------------------------------- */

static json_t *id_json(const char *id, size_t len) { return json_stringn(id ? id : "", len); }

static json_t *input_json(const wk_core_input *in) {
  json_t *j = json_object();
  json_object_set_new(j, "kind", json_string(wk_core_input_kind_name(in->kind)));
  if (in->task_id) json_object_set_new(j, "task_id", id_json(in->task_id, in->task_id_len));
  switch (in->kind) {
    case WK_INPUT_SET_READY:
    case WK_INPUT_SET_DRAINING: json_object_set_new(j, "value", json_boolean(in->flag)); break;
    case WK_INPUT_SET_PAUSED:
      json_object_set_new(j, "reason", json_string(in->message ? in->message : ""));
      break;
    case WK_INPUT_REQUEST_SLOT:
      json_object_set_new(j, "ttl_ms", json_integer((json_int_t)in->ttl_ms));
      break;
    case WK_INPUT_SUBMIT:
      if (in->submit) {
        json_object_set_new(j, "slot_id", ctl_json_u64(in->submit->slot_id));
        json_object_set_new(j, "timeout_ms", json_integer((json_int_t)in->submit->timeout_ms));
        json_object_set_new(j, "epoch", ctl_json_u64(in->submit->requested_epoch));
      }
      break;
    case WK_INPUT_ACTIVATION_PREPARED:
      json_object_set_new(j, "slot_id", ctl_json_u64(in->slot_id));
      json_object_set_new(j, "epoch", ctl_json_u64(in->code_epoch));
      break;
    case WK_INPUT_ACTIVATION_FAILED:
    case WK_INPUT_ABORT:
      json_object_set_new(j, "code", json_string(wk_failure_code_name(in->code)));
      json_object_set_new(j, "message", json_string(in->message ? in->message : ""));
      break;
    case WK_INPUT_PHASE_FINISHED:
      json_object_set_new(j, "phase", json_string(wk_phase_name(in->phase)));
      if (in->outcome) {
        json_object_set_new(j, "ok", json_boolean(in->outcome->ok));
        json_object_set_new(j, "code",
                            json_string(wk_failure_code_name(in->outcome->failure_code)));
        json_object_set_new(j, "data_bytes", ctl_json_u64(in->outcome->data.len));
        json_object_set_new(j, "calls_total", ctl_json_u64(in->outcome->stats.calls_total));
        if (in->outcome->message) {
          json_object_set_new(j, "message", json_string(in->outcome->message));
        }
      }
      break;
    case WK_INPUT_CALL_PROGRESS:
      if (in->stats) json_object_set_new(j, "calls_total", ctl_json_u64(in->stats->calls_total));
      break;
    case WK_INPUT_SLOT_LEASE_EXPIRED:
      json_object_set_new(j, "slot_id", ctl_json_u64(in->slot_id));
      break;
    case WK_INPUT_TASK_TIMED_OUT:
    case WK_INPUT_WATCH_ATTACHED:
    case WK_INPUT_WATCH_DETACHED:
    case WK_INPUT_WATCH_DISCONNECTED:
    case WK_INPUT_WATCH_GRACE_EXPIRED:
    case WK_INPUT_PURGE: break;
  }
  return j;
}

static json_t *cmds_json(const wk_cmds *cmds) {
  json_t *arr = json_array();
  for (uint32_t i = 0; i < cmds->count; i++) {
    const wk_cmd *c = &cmds->items[i];
    json_t *j = json_object();
    json_object_set_new(j, "kind", json_string(wk_cmd_kind_name(c->kind)));
    json_object_set_new(j, "task_id", id_json(c->task_id, c->task_id_len));
    json_object_set_new(j, "slot_id", ctl_json_u64(c->slot_id));
    if (c->kind == WK_CMD_PREPARE_ACTIVATION) {
      json_object_set_new(j, "epoch", ctl_json_u64(c->u.prepare.requested_epoch));
    } else if (c->kind == WK_CMD_START_CALLS) {
      json_object_set_new(j, "streaming", json_boolean(c->u.calls.streaming));
    } else if (c->kind == WK_CMD_START_WRITER) {
      json_object_set_new(j, "outputs_bytes", ctl_json_u64(c->u.writer.outputs.len));
    } else if (c->kind == WK_CMD_CONVERGE && c->u.converge.result) {
      const wk_task_result *r = c->u.converge.result;
      json_object_set_new(j, "state", json_string(wk_task_state_name(r->state)));
      json_object_set_new(j, "failure_code", json_string(wk_failure_code_name(r->failure_code)));
      json_object_set_new(j, "failure_message", json_string(r->failure_message));
      json_object_set_new(j, "epoch", ctl_json_u64(r->code_epoch));
    }
    json_array_append_new(arr, j);
  }
  return arr;
}

static json_t *step_json(const wk_journal_printer *p, uint64_t seq, const wk_core_input *in,
                         const wk_core_output *out) {
  json_t *j = json_object();
  json_object_set_new(j, "seq", ctl_json_u64(seq));
  if (in->now_ms || in->kind == WK_INPUT_PURGE) {
    wk_buf t = {0};
    wk_journal_print_time(p, in->now_ms, &t);
    json_object_set_new(j, "time", json_stringn((const char *)t.data, t.len));
    wk_buf_free(&t);
    json_object_set_new(j, "now_ms", json_integer((json_int_t)in->now_ms));
  }
  json_object_set_new(j, "input", input_json(in));
  if (in->kind == WK_INPUT_SLOT_LEASE_EXPIRED) {
    const char *holder = wk_journal_slot_task(p, in->slot_id);
    if (holder[0]) json_object_set_new(j, "slot_task_id", json_string(holder));
  }
  json_object_set_new(j, "err", json_string(wk_err_name(out->err)));
  if (out->slot && out->err == WK_OK) {
    json_object_set_new(j, "slot_id", ctl_json_u64(out->slot->slot_id));
    json_object_set_new(j, "lease_expires_ms",
                        json_integer((json_int_t)out->slot->lease_expires_ms));
    json_object_set_new(j, "duplicate", json_boolean(out->slot->duplicate));
  }
  if (out->submit) {
    if (out->err == WK_OK) {
      json_object_set_new(j, "slot_id", ctl_json_u64(out->submit->slot_id));
      json_object_set_new(j, "duplicate", json_boolean(out->submit->duplicate));
    }
    json_object_set_new(j, "cmds", cmds_json(&out->submit->cmds));
  }
  if (out->transition) json_object_set_new(j, "cmds", cmds_json(&out->transition->cmds));
  if (in->kind == WK_INPUT_PURGE) json_object_set_new(j, "purged", ctl_json_u64(out->purged));
  return j;
}

/* ---- the replay ------------------------------------------------------------------------- */

/* The last input's replayed line got no recorded decision. */
static void settle_pending(replay *rp) {
  if (rp->line_pending && rp->check) {
    rp->missing++;
    fprintf(stderr, "replay: #%" PRIu64 ": no recorded decision to compare with\n", rp->line_seq);
  }
  rp->line_pending = false;
}

static void on_decision(replay *rp, const wk_journal_record *rec) {
  if (!rp->line_pending || rec->seq != rp->line_seq) {
    if (rp->check) {
      rp->differ++;
      fprintf(stderr, "replay: a recorded decision for #%" PRIu64 " follows no such input\n",
              rec->seq);
    }
    return;
  }
  rp->line_pending = false;
  if (rp->recorded && rp->line_shown) {
    fwrite(rec->text, 1, rec->text_len, stdout);
    fputc('\n', stdout);
  }
  if (!rp->check) return;
  rp->compared++;
  if (rec->text_len != rp->line.len || memcmp(rec->text, rp->line.data, rp->line.len) != 0) {
    rp->differ++;
    fprintf(stderr, "replay: decision #%" PRIu64 " differs\n  recorded: %.*s\n  replayed: %.*s\n",
            rec->seq, (int)rec->text_len, rec->text, (int)rp->line.len,
            (const char *)rp->line.data);
  }
}

static void on_input(replay *rp, wk_core *core, wk_journal_printer *pr, wk_journal_record *rec) {
  settle_pending(rp);
  wk_journal_prepare_replay(rec, &rp->zeros, &rp->zeros_len);
  wk_core_applied res;
  wk_core_apply_input(core, &rec->input, NULL, &res);
  rp->inputs++;
  bool shown = rp->task ? wk_journal_concerns(pr, &rec->input, &res.out, rp->task)
                        : (rp->all || rec->input.kind != WK_INPUT_PURGE || res.out.purged > 0);
  if (shown && rp->a->json) ctl_json_print(stdout, step_json(pr, rec->seq, &rec->input, &res.out));
  wk_buf_clear(&rp->line);
  wk_journal_print(pr, rec->seq, &rec->input, &res.out, &rp->line);
  if (shown && !rp->a->json && !rp->recorded) {
    fwrite(rp->line.data, 1, rp->line.len, stdout);
    fputc('\n', stdout);
  }
  rp->line_seq = rec->seq;
  rp->line_pending = true;
  rp->line_shown = shown;
}

static void print_end_state(const wk_core *core, const wk_journal_printer *pr, int64_t last_now) {
  wk_heartbeat hb = wk_core_derive_heartbeat(core, last_now);
  wk_buf t = {0};
  wk_journal_print_time(pr, last_now, &t);
  fprintf(stderr,
          "replay: at the end (%.*s): %u slots: %u free, %u reserved, %u running; %u live "
          "tasks, %u results retained%s%s\n",
          (int)t.len, (const char *)t.data, hb.task_slots, hb.free, hb.reserved, hb.running,
          wk_core_live_tasks(core), wk_core_retained_count(core), hb.draining ? "; draining" : "",
          hb.ready ? "" : "; not ready");
  wk_buf_free(&t);
}

/* Replays files[0..n) of one run. Returns false when it had to stop early. */
static bool replay_run(replay *rp, const replay_file *files, size_t n) {
  const wk_journal_header *h0 = &files[0].header;
  wk_buf t = {0};
  wk_journal_printer pr;
  wk_journal_printer_init(&pr, h0);
  wk_journal_print_time(&pr, h0->mono_ms, &t);
  fprintf(stderr, "replay: run of pid %u (version %s) started %.*s: %zu file(s), %u slots\n",
          h0->pid, h0->version[0] ? h0->version : "?", (int)t.len, (const char *)t.data, n,
          h0->core.task_slots);
  wk_buf_free(&t);
  if (rp->recorded && !h0->decisions) {
    fprintf(stderr,
            "replay: --recorded: this run recorded no decisions (core_journal_decisions off)\n");
    wk_journal_printer_free(&pr);
    return false;
  }
  if (h0->first_seq != 0) {
    fprintf(
        stderr,
        "replay: the record starts at input #%" PRIu64
        ", not at the worker's start (older files were rotated away): the core is\n"
        "  replayed from empty, so tasks and slots from before the record are unknown to it\n"
        "  (their inputs answer NOT_FOUND or STALE) and slot ids can differ from the worker's\n",
        h0->first_seq);
  }
  wk_core_config cfg = h0->core;
  wk_core *core = wk_core_create(&cfg);
  wk_journal_order order;
  wk_journal_order_init(&order, h0);
  int64_t last_now = h0->mono_ms;
  bool clean = true;
  for (size_t i = 0; i < n && clean; i++) {
    const replay_file *f = &files[i];
    if (i > 0 && f->header.file_index != files[i - 1].header.file_index + 1) {
      fprintf(stderr, "replay: file %u of the run is missing before %s: stopping\n",
              files[i - 1].header.file_index + 1, f->path);
      clean = false;
      break;
    }
    wk_journal_reader r;
    wk_journal_record rec;
    char why[512];
    wk_journal_reader_init(&r, f->data, f->len, why, sizeof why);
    int rc;
    while ((rc = wk_journal_next(&r, &rec, why, sizeof why)) == 1) {
      if (rec.type == WK_JREC_HEADER) continue;
      if (rec.type == WK_JREC_DECISION) {
        on_decision(rp, &rec);
        continue;
      }
      if (rec.type == WK_JREC_LOST) {
        fprintf(stderr,
                "replay: %s: %" PRIu64 " input(s) from #%" PRIu64
                " were dropped (the journal's buffer was full): stopping there\n",
                f->path, rec.lost, rec.seq);
        clean = false;
        break;
      }
      if (!wk_journal_order_next(&order, &rec, why, sizeof why)) {
        fprintf(stderr, "replay: %s: %s: stopping\n", f->path, why);
        clean = false;
        break;
      }
      if (rec.input.now_ms) last_now = rec.input.now_ms;
      on_input(rp, core, &pr, &rec);
    }
    if (rc < 0) {
      fprintf(stderr, "replay: %s: %s: stopping there\n", f->path, why);
      clean = false;
    }
    wk_journal_reader_free(&r);
  }
  /* the run's last input: its decision may not have reached the file before the end */
  rp->line_pending = false;
  print_end_state(core, &pr, last_now);
  const char *bad = wk_core_check_invariants(core);
  if (bad) fprintf(stderr, "replay: the replayed core is inconsistent: %s\n", bad);
  wk_core_destroy(core);
  wk_journal_printer_free(&pr);
  return clean;
}

int ctl_cmd_replay(ctl_args *a) {
  replay rp = {.a = a,
               .task = a->val[F_TASK],
               .all = a->set[F_ALL],
               .check = a->set[F_CHECK],
               .recorded = a->set[F_RECORDED]};
  if (rp.recorded && a->json) return ctl_usage_error(a, "--recorded prints lines, not --json");
  replay_file *files = calloc(a->npos, sizeof *files);
  if (!files) return CTL_EXIT_TASK_FAILED;
  int rc = CTL_EXIT_OK;
  if (!load_files(a, files)) {
    rc = CTL_EXIT_TASK_FAILED;
  } else {
    for (size_t i = 0; i < a->npos;) {
      size_t j = i + 1;
      while (j < a->npos && files[j].header.run_id == files[i].header.run_id) j++;
      if (!replay_run(&rp, files + i, j - i) && rp.recorded) rc = CTL_EXIT_TASK_FAILED;
      i = j;
    }
    fprintf(stderr, "replay: %" PRIu64 " inputs replayed", rp.inputs);
    if (rp.check) {
      fprintf(stderr, "; %" PRIu64 " decisions compared, %" PRIu64 " differ, %" PRIu64 " missing",
              rp.compared, rp.differ, rp.missing);
      if (rp.differ || rp.missing || rp.compared == 0) rc = CTL_EXIT_TASK_FAILED;
    }
    fputc('\n', stderr);
  }
  for (size_t i = 0; i < a->npos; i++) free(files[i].data);
  free(files);
  free(rp.zeros);
  wk_buf_free(&rp.line);
  return rc;
}

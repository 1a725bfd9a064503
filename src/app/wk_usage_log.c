/* wk_usage_log.c: the task_finished log line and its usage record (the cost of a task,
 * per phase), also appended to the usage log file when one is configured. */
#include "app/wk_orch_int.h"

#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lib/wk_alloc.h"
#include "lib/wk_log.h"

/* Usage records go to the usage sink file on the threadpool (a disk write never
 * blocks the actor); appends of one line each with O_APPEND do not interleave. */
typedef struct usage_job {
  uv_work_t work;
  const char *path;
  char *line;
  size_t len;
} usage_job;

static void usage_write(uv_work_t *w) {
  usage_job *j = w->data;
  int fd = open(j->path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0640);
  if (fd < 0) return;
  ssize_t n = write(fd, j->line, j->len);
  (void)n;
  close(fd);
}

static void usage_done(uv_work_t *w, int status) {
  (void)status;
  usage_job *j = w->data;
  free(j->line);
  free(j);
}

static void append_usage(wk_orch *o, const json_t *usage) {
  char *text = json_dumps(usage, JSON_COMPACT);
  if (!text) return;
  usage_job *j = wk_xcalloc(1, sizeof *j);
  j->len = strlen(text);
  j->line = wk_xrealloc(text, j->len + 2);
  j->line[j->len++] = '\n';
  j->path = o->cfg.usage_log;
  j->work.data = j;
  uv_queue_work(o->loop, &j->work, usage_write, usage_done);
}

/* How each phase ended and how long it took: {"builder":{"outcome":"OK","ms":0},...};
 * outcome is OK, NOT_RUN, or the failure code that ended the phase (its own failure or
 * what ended the task while it ran: TASK_TIMEOUT, CANCELLED, WORKER_SHUTDOWN, ...). */
static json_t *phases_json(const wk_task_result *r) {
  static const char *const names[WK_PHASE_RECORDS] = {"builder", "calls", "writer"};
  json_t *phases = json_object();
  for (uint32_t i = 0; i < WK_PHASE_RECORDS; i++) {
    const wk_phase_record *p = &r->phases[i];
    int64_t ms;
    (void)wk_task_phase_ms(&r->statistic, (wk_phase)(WK_PHASE_BUILDER + i),
                           r->statistic.finished_ms, &ms);
    const char *outcome = p->end == WK_PHASE_END_FAILED
                              ? wk_failure_code_name((wk_failure_code)p->failure_code)
                              : wk_phase_end_name((wk_phase_end)p->end);
    json_object_set_new(phases, names[i],
                        json_pack("{s:s,s:I}", "outcome", outcome, "ms", (json_int_t)ms));
  }
  return phases;
}

void wk_orch__log_task_finished(wk_orch *o, const wk_task_rt *rt, const wk_task_result *r) {
  bool to_file = o->cfg.usage_log && o->cfg.usage_log[0];
  if (!to_file && !wk_log_enabled(WK_LOG_INFO)) return; /* nobody reads the record: not built */
  const wk_task_statistic *s = &r->statistic;
  const wk_call_stats *c = &s->calls;
  int64_t builder_ms, calls_ms, writer_ms;
  (void)wk_task_phase_ms(s, WK_PHASE_BUILDER, s->finished_ms, &builder_ms);
  (void)wk_task_phase_ms(s, WK_PHASE_CALLS, s->finished_ms, &calls_ms);
  (void)wk_task_phase_ms(s, WK_PHASE_WRITER, s->finished_ms, &writer_ms);
  json_t *f =
      json_pack("{s:s,s:s,s:s,s:s,s:I,s:s,s:I,s:I,s:I,s:I,s:I,s:I,s:I}", "task_id", rt->req.task_id,
                "function", rt->req.function, "state", wk_task_state_name(r->state), "failure_code",
                wk_failure_code_name(r->failure_code), "code_epoch", (json_int_t)r->code_epoch,
                "failure_message", r->failure_message ? r->failure_message : "", "duration_ms",
                (json_int_t)(s->finished_ms - s->accepted_ms), "calls_total",
                (json_int_t)c->calls_total, "calls_failed", (json_int_t)c->calls_failed,
                "executor_cpu_us", (json_int_t)c->executor_cpu_us, "bytes_in",
                (json_int_t)c->bytes_in, "bytes_out", (json_int_t)c->bytes_out, "accepted_unix_ms",
                (json_int_t)(s->accepted_ms + o->wall_offset_ms));
  if (rt->req.traceparent[0])
    json_object_set_new(f, "traceparent", json_string(rt->req.traceparent));
  /* the usage record: what the task cost, per phase; "calls" are the calls that ran to
   * an end (on every path: a task ended while its calls ran counts those done) */
  json_t *usage = json_pack(
      "{s:s,s:s,s:s,s:s,s:I,s:s,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I}", "task_id",
      rt->req.task_id, "function", rt->req.function, "deployment",
      o->cfg.deployment ? o->cfg.deployment : "", "service", o->cfg.service ? o->cfg.service : "",
      "code_epoch", (json_int_t)r->code_epoch, "state", wk_task_state_name(r->state), "cpu_us",
      (json_int_t)c->executor_cpu_us, "wall_ms", (json_int_t)(s->finished_ms - s->accepted_ms),
      "builder_ms", (json_int_t)builder_ms, "calls_ms", (json_int_t)calls_ms, "writer_ms",
      (json_int_t)writer_ms, "bytes_in", (json_int_t)c->bytes_in, "bytes_out",
      (json_int_t)c->bytes_out, "calls", (json_int_t)(c->calls_succeeded + c->calls_failed),
      "calls_total", (json_int_t)c->calls_total, "retries", (json_int_t)c->calls_retried,
      "finished_unix_ms", (json_int_t)(s->finished_ms + o->wall_offset_ms));
  json_object_set_new(usage, "usage_service",
                      json_string(o->cfg.usage_service ? o->cfg.usage_service : ""));
  json_object_set_new(usage, "failure_code", json_string(wk_failure_code_name(r->failure_code)));
  json_object_set_new(usage, "phases", phases_json(r));
  if (to_file) append_usage(o, usage);
  json_object_set_new(f, "usage", usage);
  wk_log_json(WK_LOG_INFO, "task_finished", f);
}

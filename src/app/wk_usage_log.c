/* wk_usage_log.c: the task_finished log line and its usage record (the cost of a task,
 * per phase), also appended to the usage log file when one is configured. */
#include "app/wk_orch_int.h"

#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lib/wk_alloc.h"
#include "lib/wk_json_out.h"
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

static void append_usage(wk_orch *o, const uint8_t *text, size_t len) {
  usage_job *j = wk_xcalloc(1, sizeof *j);
  j->line = wk_xmalloc(len + 1);
  memcpy(j->line, text, len);
  j->line[len] = '\n';
  j->len = len + 1;
  j->path = o->cfg.usage_log;
  j->work.data = j;
  uv_queue_work(o->loop, &j->work, usage_write, usage_done);
}

/* How each phase ended and how long it took: {"builder":{"outcome":"OK","ms":0},...};
 * outcome is OK, NOT_RUN, or the failure code that ended the phase (its own failure or
 * what ended the task while it ran: TASK_TIMEOUT, CANCELLED, WORKER_SHUTDOWN, ...). */
static void put_phases(wk_json_obj *j, const wk_task_result *r) {
  static const char *const names[WK_PHASE_RECORDS] = {"builder", "calls", "writer"};
  wk_json_obj_open(j, "phases");
  for (uint32_t i = 0; i < WK_PHASE_RECORDS; i++) {
    const wk_phase_record *p = &r->phases[i];
    int64_t ms;
    (void)wk_task_phase_ms(&r->statistic, (wk_phase)(WK_PHASE_BUILDER + i),
                           r->statistic.finished_ms, &ms);
    const char *outcome = p->end == WK_PHASE_END_FAILED
                              ? wk_failure_code_name((wk_failure_code)p->failure_code)
                              : wk_phase_end_name((wk_phase_end)p->end);
    wk_json_obj_open(j, names[i]);
    wk_json_obj_str(j, "outcome", outcome);
    wk_json_obj_int(j, "ms", ms);
    wk_json_obj_end(j);
  }
  wk_json_obj_end(j);
}

/* The usage record: what the task cost, per phase; "calls" are the calls that ran to
 * an end (on every path: a task ended while its calls ran counts those done). */
static void put_usage(wk_orch *o, wk_json_obj *j, const wk_task_rt *rt, const wk_task_result *r) {
  const wk_task_statistic *s = &r->statistic;
  const wk_call_stats *c = &s->calls;
  int64_t builder_ms, calls_ms, writer_ms;
  (void)wk_task_phase_ms(s, WK_PHASE_BUILDER, s->finished_ms, &builder_ms);
  (void)wk_task_phase_ms(s, WK_PHASE_CALLS, s->finished_ms, &calls_ms);
  (void)wk_task_phase_ms(s, WK_PHASE_WRITER, s->finished_ms, &writer_ms);
  wk_json_obj_str(j, "task_id", rt->req.task_id);
  wk_json_obj_str(j, "function", rt->req.function);
  wk_json_obj_str(j, "deployment", o->cfg.deployment);
  wk_json_obj_str(j, "service", o->cfg.service);
  wk_json_obj_int(j, "code_epoch", (int64_t)r->code_epoch);
  wk_json_obj_str(j, "state", wk_task_state_name(r->state));
  wk_json_obj_int(j, "cpu_us", (int64_t)c->executor_cpu_us);
  wk_json_obj_int(j, "wall_ms", s->finished_ms - s->accepted_ms);
  wk_json_obj_int(j, "builder_ms", builder_ms);
  wk_json_obj_int(j, "calls_ms", calls_ms);
  wk_json_obj_int(j, "writer_ms", writer_ms);
  wk_json_obj_int(j, "bytes_in", (int64_t)c->bytes_in);
  wk_json_obj_int(j, "bytes_out", (int64_t)c->bytes_out);
  wk_json_obj_int(j, "calls", (int64_t)(c->calls_succeeded + c->calls_failed));
  wk_json_obj_int(j, "calls_total", (int64_t)c->calls_total);
  wk_json_obj_int(j, "retries", (int64_t)c->calls_retried);
  wk_json_obj_int(j, "finished_unix_ms", s->finished_ms + o->wall_offset_ms);
  wk_json_obj_str(j, "usage_service", o->cfg.usage_service);
  wk_json_obj_str(j, "failure_code", wk_failure_code_name(r->failure_code));
  put_phases(j, r);
}

void wk_orch__log_task_finished(wk_orch *o, const wk_task_rt *rt, const wk_task_result *r) {
  bool to_file = o->cfg.usage_log && o->cfg.usage_log[0];
  bool to_log = wk_log_enabled(WK_LOG_INFO);
  if (!to_file && !to_log) return; /* nobody reads the record: not built */
  const wk_task_statistic *s = &r->statistic;
  const wk_call_stats *c = &s->calls;
  /* written straight into the orchestrator's record buffer (no tree of values); the
   * usage object is one member of the log line and, as it is, the usage file's line */
  wk_buf *b = &o->record;
  wk_buf_clear(b);
  wk_json_obj j;
  wk_json_obj_begin(&j, b);
  wk_json_obj_str(&j, "task_id", rt->req.task_id);
  wk_json_obj_str(&j, "function", rt->req.function);
  wk_json_obj_str(&j, "state", wk_task_state_name(r->state));
  wk_json_obj_str(&j, "failure_code", wk_failure_code_name(r->failure_code));
  wk_json_obj_int(&j, "code_epoch", (int64_t)r->code_epoch);
  wk_json_obj_str(&j, "failure_message", r->failure_message);
  wk_json_obj_int(&j, "duration_ms", s->finished_ms - s->accepted_ms);
  wk_json_obj_int(&j, "calls_total", (int64_t)c->calls_total);
  wk_json_obj_int(&j, "calls_failed", (int64_t)c->calls_failed);
  wk_json_obj_int(&j, "executor_cpu_us", (int64_t)c->executor_cpu_us);
  wk_json_obj_int(&j, "bytes_in", (int64_t)c->bytes_in);
  wk_json_obj_int(&j, "bytes_out", (int64_t)c->bytes_out);
  wk_json_obj_int(&j, "accepted_unix_ms", s->accepted_ms + o->wall_offset_ms);
  if (rt->req.traceparent[0]) wk_json_obj_str(&j, "traceparent", rt->req.traceparent);
  wk_json_obj_open(&j, "usage");
  size_t usage_at = b->len - 1; /* its "{" */
  put_usage(o, &j, rt, r);
  wk_json_obj_end(&j);
  size_t usage_end = b->len;
  wk_json_obj_end(&j);
  if (to_file) append_usage(o, b->data + usage_at, usage_end - usage_at);
  if (to_log) wk_log_object_write(WK_LOG_INFO, "task_finished", (const char *)b->data, b->len);
}

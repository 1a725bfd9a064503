/* workerctl_format.c: readable and JSON renderings of the Worker's responses.
 *
 * Readable output is for people: one headline per task, then indented details
 * (failure, outputs, errors with tracebacks, captured output), bounded previews.
 * JSON output is for scripts: one object per line, proto field names, enum values by
 * name without their prefix, JSON outputs embedded as JSON, bytes as base64. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "workerctl.h"
#include "lib/wk_base64.h"

#define TEXT_PREVIEW_MAX 2000u /* bytes of a JSON output / captured text shown */
#define BYTES_PREVIEW_MAX 64u  /* bytes of a binary output shown */
#define BLOCK_LINES_MAX 40u    /* lines of a traceback / stdout shown */

/* ---- enums ------------------------------------------------------------------------- */

const char *ctl_enum_name(const ProtobufCEnumDescriptor *d, int value, char *buf, size_t len) {
  const ProtobufCEnumValue *v = protobuf_c_enum_descriptor_get_value(d, value);
  if (!v) {
    snprintf(buf, len, "%d", value);
    return buf;
  }
  /* The enum's prefix: the longest common prefix of its value names, up to a '_'. */
  size_t lcp = strlen(d->values[0].name);
  for (unsigned i = 1; i < d->n_values; i++) {
    const char *n = d->values[i].name;
    size_t k = 0;
    while (k < lcp && n[k] && n[k] == d->values[0].name[k]) k++;
    lcp = k;
  }
  while (lcp > 0 && d->values[0].name[lcp - 1] != '_') lcp--;
  if (d->n_values < 2) lcp = 0;
  return v->name + lcp;
}

static const char *state_name(Worker__V1__TaskState s, char *buf, size_t len) {
  return ctl_enum_name(&worker__v1__task_state__descriptor, (int)s, buf, len);
}
static const char *phase_name(Worker__V1__Phase p, char *buf, size_t len) {
  return ctl_enum_name(&worker__v1__phase__descriptor, (int)p, buf, len);
}
static const char *failure_name(Worker__V1__FailureCode c, char *buf, size_t len) {
  return ctl_enum_name(&worker__v1__failure_code__descriptor, (int)c, buf, len);
}
static const char *content_name(Worker__V1__ContentType c, char *buf, size_t len) {
  return ctl_enum_name(&worker__v1__content_type__descriptor, (int)c, buf, len);
}
static const char *kind_name(Worker__V1__TaskEvent__Kind k, char *buf, size_t len) {
  return ctl_enum_name(&worker__v1__task_event__kind__descriptor, (int)k, buf, len);
}

bool ctl_state_terminal(Worker__V1__TaskState s) {
  return s == WORKER__V1__TASK_STATE__TASK_STATE_SUCCEEDED ||
         s == WORKER__V1__TASK_STATE__TASK_STATE_FAILED ||
         s == WORKER__V1__TASK_STATE__TASK_STATE_CANCELLED;
}

int ctl_state_exit(Worker__V1__TaskState s) {
  return (s == WORKER__V1__TASK_STATE__TASK_STATE_FAILED ||
          s == WORKER__V1__TASK_STATE__TASK_STATE_CANCELLED)
             ? CTL_EXIT_TASK_FAILED
             : CTL_EXIT_OK;
}

/* ---- JSON helpers -------------------------------------------------------------------- */

json_t *ctl_json_u64(uint64_t v) {
  if (v <= (uint64_t)INT64_MAX) return json_integer((json_int_t)v);
  char buf[24];
  snprintf(buf, sizeof buf, "%" PRIu64, v);
  return json_string(buf);
}

static json_t *json_i64(int64_t v) { return json_integer((json_int_t)v); }

void ctl_json_print(FILE *f, json_t *v) {
  if (!v) return;
  json_dumpf(v, f, JSON_COMPACT | JSON_ENCODE_ANY);
  fputc('\n', f);
  fflush(f);
  json_decref(v);
}

static json_t *json_str(const char *s) {
  json_t *j = json_string(s ? s : "");
  return j ? j : json_string("");
}

/* Bytes as a JSON string when valid UTF-8 (key), else base64 (key_base64). */
static void set_text_or_base64(json_t *obj, const char *key, const uint8_t *p, size_t n) {
  json_t *s = json_stringn((const char *)p, n);
  if (s) {
    json_object_set_new(obj, key, s);
    return;
  }
  char k[64];
  snprintf(k, sizeof k, "%s_base64", key);
  char *b = wk_base64_encode(p, n);
  json_object_set_new(obj, k, json_string(b));
  free(b);
}

/* ---- text helpers ------------------------------------------------------------------ */

void ctl_print_escaped(FILE *f, const uint8_t *p, size_t len, size_t max) {
  size_t n = len < max ? len : max;
  for (size_t i = 0; i < n; i++) {
    uint8_t c = p[i];
    if (c == '\n') {
      fputs("\\n", f);
    } else if (c == '\t') {
      fputs("\\t", f);
    } else if (c == '"' || c == '\\') {
      fputc('\\', f);
      fputc(c, f);
    } else if (c >= 0x20 && c < 0x7f) {
      fputc(c, f);
    } else {
      fprintf(f, "\\x%02x", c);
    }
  }
  if (len > max) fputs("...", f);
}

/* Text (UTF-8 passes through) on one line: control characters escaped. */
static void print_text_line(FILE *f, const uint8_t *p, size_t len, size_t max) {
  size_t n = len < max ? len : max;
  for (size_t i = 0; i < n; i++) {
    uint8_t c = p[i];
    if (c == '\n') {
      fputs("\\n", f);
    } else if (c < 0x20 || c == 0x7f) {
      fprintf(f, "\\x%02x", c);
    } else {
      fputc(c, f);
    }
  }
  if (len > max) fprintf(f, " ... (%zu bytes in all)", len);
}

/* Multi-line text, each line as "<indent>| line", bounded. */
static void print_block(FILE *f, const char *indent, const char *label, const uint8_t *p,
                        size_t len) {
  size_t shown = 0, lines = 0, i = 0;
  while (i < len && lines < BLOCK_LINES_MAX && shown < TEXT_PREVIEW_MAX) {
    size_t j = i;
    while (j < len && p[j] != '\n') j++;
    fprintf(f, "%s%s| ", indent, label);
    for (size_t k = i; k < j && shown < TEXT_PREVIEW_MAX; k++, shown++) {
      uint8_t c = p[k];
      if ((c < 0x20 && c != '\t') || c == 0x7f) {
        fprintf(f, "\\x%02x", c);
      } else {
        fputc(c, f);
      }
    }
    fputc('\n', f);
    lines++;
    i = j + 1;
  }
  if (i < len) fprintf(f, "%s%s| ... (%zu bytes in all)\n", indent, label, len);
}

/* ---- TaskResult ---------------------------------------------------------------------- */

static void print_output(FILE *f, const Worker__V1__CallOutput *o) {
  fprintf(f, "  output[%" PRIu32 "]: ", o->index);
  if (o->outcome_case == WORKER__V1__CALL_OUTPUT__OUTCOME_VALUE) {
    if (o->content_type == WORKER__V1__CONTENT_TYPE__CONTENT_TYPE_BYTES) {
      fprintf(f, "%zu bytes \"", o->value.len);
      ctl_print_escaped(f, o->value.data, o->value.len, BYTES_PREVIEW_MAX);
      fputs("\"\n", f);
    } else {
      print_text_line(f, o->value.data, o->value.len, TEXT_PREVIEW_MAX);
      fputc('\n', f);
    }
  } else if (o->outcome_case == WORKER__V1__CALL_OUTPUT__OUTCOME_ERROR && o->error) {
    const Worker__V1__CallError *e = o->error;
    fprintf(f, "error %s: ", e->type && *e->type ? e->type : "Error");
    print_text_line(f, (const uint8_t *)e->message, strlen(e->message), TEXT_PREVIEW_MAX);
    fputs(e->retryable ? " (retryable)\n" : "\n", f);
    if (e->traceback && *e->traceback) {
      print_block(f, "    ", "", (const uint8_t *)e->traceback, strlen(e->traceback));
    }
  } else {
    fputs("(no outcome)\n", f);
  }
  if (o->stdout.len) print_block(f, "    ", "stdout ", o->stdout.data, o->stdout.len);
  if (o->stderr.len) print_block(f, "    ", "stderr ", o->stderr.data, o->stderr.len);
}

static size_t output_limit = SIZE_MAX;

void ctl_set_output_limit(size_t n) { output_limit = n; }

/* The outputs up to the limit; past it, a count of what is not shown and how to see it. */
static void print_outputs(FILE *f, const Worker__V1__TaskResult *r) {
  size_t shown = r->n_outputs < output_limit ? r->n_outputs : output_limit;
  for (size_t i = 0; i < shown; i++) print_output(f, r->outputs[i]);
  if (shown == r->n_outputs) return;
  size_t errors = 0;
  for (size_t i = 0; i < r->n_outputs; i++) {
    errors += r->outputs[i]->outcome_case == WORKER__V1__CALL_OUTPUT__OUTCOME_ERROR;
  }
  fprintf(f,
          "  ... %zu more outputs not shown (%zu outputs in all: %zu values, %zu errors); "
          "--outputs N or --all shows more, --json all of it\n",
          r->n_outputs - shown, r->n_outputs, r->n_outputs - errors, errors);
}

void ctl_print_result(FILE *f, const Worker__V1__TaskResult *r) {
  char b1[32], b2[32];
  bool terminal = ctl_state_terminal(r->state);
  fprintf(f, "task %s %s", r->task_id, state_name(r->state, b1, sizeof b1));
  bool plain_cancel = r->state == WORKER__V1__TASK_STATE__TASK_STATE_CANCELLED &&
                      r->failure_code == WORKER__V1__FAILURE_CODE__FAILURE_CODE_CANCELLED;
  if (r->failure_code != WORKER__V1__FAILURE_CODE__FAILURE_CODE_UNSPECIFIED && !plain_cancel) {
    fprintf(f, " %s", failure_name(r->failure_code, b2, sizeof b2));
  }
  if (!terminal) fprintf(f, " phase %s", phase_name(r->phase, b2, sizeof b2));
  if (r->code_epoch) fprintf(f, " epoch %" PRIu64, r->code_epoch);
  const Worker__V1__TaskStatistic *s = r->statistic;
  if (terminal && s && s->accepted_unix_ms > 0 && s->finished_unix_ms >= s->accepted_unix_ms) {
    fprintf(f, " in %" PRId64 " ms", s->finished_unix_ms - s->accepted_unix_ms);
  }
  fputc('\n', f);
  if (r->failure_message && *r->failure_message) {
    fputs("  failure: ", f);
    print_text_line(f, (const uint8_t *)r->failure_message, strlen(r->failure_message),
                    TEXT_PREVIEW_MAX);
    fputc('\n', f);
  }
  if (s && (s->calls_total > 1 || s->calls_failed || s->calls_retried || s->subcalls)) {
    fprintf(f,
            "  calls: %" PRIu64 " total, %" PRIu64 " succeeded, %" PRIu64 " failed, %" PRIu64
            " retried",
            s->calls_total, s->calls_succeeded, s->calls_failed, s->calls_retried);
    uint64_t done = s->calls_succeeded + s->calls_failed;
    if (terminal && s->calls_total > done) {
      fprintf(f, ", %" PRIu64 " not run", s->calls_total - done);
    } else if (!terminal && s->calls_total > done) {
      fprintf(f, ", %" PRIu64 " to go", s->calls_total - done);
    }
    if (s->subcalls) fprintf(f, ", %" PRIu64 " subcalls", s->subcalls);
    fputc('\n', f);
  }
  for (size_t i = 0; i < r->n_retries; i++) { /* which calls were retried, and why */
    const Worker__V1__CallRetry *x = r->retries[i];
    fprintf(f, "  retried: call %" PRIu32 " after attempt %" PRIu32 ": %s: ", x->index, x->attempt,
            x->error_type);
    print_text_line(f, (const uint8_t *)x->error_message, strlen(x->error_message),
                    TEXT_PREVIEW_MAX);
    fputc('\n', f);
  }
  if (s && s->calls_retried > r->n_retries && r->n_retries > 0) {
    fprintf(f, "  retried: ... %" PRIu64 " retries in all\n", s->calls_retried);
  }
  for (size_t i = 0; i < r->n_plugin_results; i++) {
    const Worker__V1__PluginResult *p = r->plugin_results[i];
    fprintf(f, "  plugin %s: %" PRIu64 " records, %" PRIu64 " bytes -> %s\n", p->plugin, p->records,
            p->bytes, p->location);
  }
  print_outputs(f, r);
  fflush(f);
}

static json_t *output_json(const Worker__V1__CallOutput *o) {
  char b[32];
  json_t *j = json_object();
  json_object_set_new(j, "index", json_integer(o->index));
  json_object_set_new(j, "content_type", json_str(content_name(o->content_type, b, sizeof b)));
  if (o->outcome_case == WORKER__V1__CALL_OUTPUT__OUTCOME_VALUE) {
    if (o->content_type == WORKER__V1__CONTENT_TYPE__CONTENT_TYPE_BYTES) {
      char *b64 = wk_base64_encode(o->value.data, o->value.len);
      json_object_set_new(j, "value", json_string(b64));
      free(b64);
    } else {
      json_error_t err;
      json_t *v = json_loadb((const char *)o->value.data, o->value.len,
                             JSON_DECODE_ANY | JSON_ALLOW_NUL, &err);
      if (v) {
        json_object_set_new(j, "value", v);
      } else {
        /* Not JSON jansson can read (NaN, huge integers): keep the text. */
        set_text_or_base64(j, "value_text", o->value.data, o->value.len);
      }
    }
  } else if (o->outcome_case == WORKER__V1__CALL_OUTPUT__OUTCOME_ERROR && o->error) {
    json_t *e = json_object();
    json_object_set_new(e, "type", json_str(o->error->type));
    json_object_set_new(e, "message", json_str(o->error->message));
    json_object_set_new(e, "traceback", json_str(o->error->traceback));
    json_object_set_new(e, "retryable", json_boolean(o->error->retryable));
    json_object_set_new(j, "error", e);
  }
  if (o->stdout.len) set_text_or_base64(j, "stdout", o->stdout.data, o->stdout.len);
  if (o->stderr.len) set_text_or_base64(j, "stderr", o->stderr.data, o->stderr.len);
  return j;
}

static json_t *statistic_json(const Worker__V1__TaskStatistic *s) {
  Worker__V1__TaskStatistic zero = WORKER__V1__TASK_STATISTIC__INIT;
  if (!s) s = &zero;
  json_t *j = json_object();
  json_object_set_new(j, "accepted_unix_ms", json_i64(s->accepted_unix_ms));
  json_object_set_new(j, "started_unix_ms", json_i64(s->started_unix_ms));
  json_object_set_new(j, "finished_unix_ms", json_i64(s->finished_unix_ms));
  json_object_set_new(j, "builder_ms", ctl_json_u64(s->builder_ms));
  json_object_set_new(j, "calls_ms", ctl_json_u64(s->calls_ms));
  json_object_set_new(j, "writer_ms", ctl_json_u64(s->writer_ms));
  json_object_set_new(j, "calls_total", ctl_json_u64(s->calls_total));
  json_object_set_new(j, "calls_succeeded", ctl_json_u64(s->calls_succeeded));
  json_object_set_new(j, "calls_failed", ctl_json_u64(s->calls_failed));
  json_object_set_new(j, "calls_retried", ctl_json_u64(s->calls_retried));
  json_object_set_new(j, "calls_done", ctl_json_u64(s->calls_done));
  json_object_set_new(j, "subcalls", ctl_json_u64(s->subcalls));
  json_object_set_new(j, "executor_cpu_ms", ctl_json_u64(s->executor_cpu_ms));
  json_object_set_new(j, "bytes_in", ctl_json_u64(s->bytes_in));
  json_object_set_new(j, "bytes_out", ctl_json_u64(s->bytes_out));
  return j;
}

json_t *ctl_result_json(const Worker__V1__TaskResult *r) {
  char b[32];
  json_t *j = json_object();
  json_object_set_new(j, "task_id", json_str(r->task_id));
  json_object_set_new(j, "state", json_str(state_name(r->state, b, sizeof b)));
  json_object_set_new(j, "phase", json_str(phase_name(r->phase, b, sizeof b)));
  json_object_set_new(j, "failure_code", json_str(failure_name(r->failure_code, b, sizeof b)));
  json_object_set_new(j, "failure_message", json_str(r->failure_message));
  json_object_set_new(j, "code_epoch", ctl_json_u64(r->code_epoch));
  json_t *outs = json_array();
  for (size_t i = 0; i < r->n_outputs; i++) json_array_append_new(outs, output_json(r->outputs[i]));
  json_object_set_new(j, "outputs", outs);
  json_t *pls = json_array();
  for (size_t i = 0; i < r->n_plugin_results; i++) {
    const Worker__V1__PluginResult *p = r->plugin_results[i];
    json_t *pj = json_object();
    json_object_set_new(pj, "plugin", json_str(p->plugin));
    json_object_set_new(pj, "location", json_str(p->location));
    json_object_set_new(pj, "records", ctl_json_u64(p->records));
    json_object_set_new(pj, "bytes", ctl_json_u64(p->bytes));
    json_array_append_new(pls, pj);
  }
  json_object_set_new(j, "plugin_results", pls);
  json_object_set_new(j, "statistic", statistic_json(r->statistic));
  json_t *retries = json_array();
  for (size_t i = 0; i < r->n_retries; i++) {
    json_t *x = json_object();
    json_object_set_new(x, "call", json_integer(r->retries[i]->index));
    json_object_set_new(x, "attempt", json_integer(r->retries[i]->attempt));
    json_object_set_new(x, "error_type", json_str(r->retries[i]->error_type));
    json_object_set_new(x, "error_message", json_str(r->retries[i]->error_message));
    json_array_append_new(retries, x);
  }
  json_object_set_new(j, "retries", retries);
  return j;
}

/* ---- events, submit, slot ------------------------------------------------------------- */

void ctl_print_event(FILE *f, const Worker__V1__TaskEvent *e) {
  char b[32];
  fprintf(f, "%s ", kind_name(e->kind, b, sizeof b));
  if (e->result) {
    ctl_print_result(f, e->result);
  } else {
    fprintf(f, "task %s (no result)\n", e->task_id);
    fflush(f);
  }
}

json_t *ctl_event_json(const Worker__V1__TaskEvent *e) {
  char b[32];
  json_t *j = json_object();
  json_object_set_new(j, "task_id", json_str(e->task_id));
  json_object_set_new(j, "kind", json_str(kind_name(e->kind, b, sizeof b)));
  json_object_set_new(j, "result", e->result ? ctl_result_json(e->result) : json_null());
  return j;
}

void ctl_print_submit(FILE *f, const Worker__V1__SubmitTaskResponse *r, const char *worker) {
  char b[32];
  fprintf(f, "submitted task %s slot %" PRIu64 " %s%s%s%s\n", r->task_id, r->slot_id,
          state_name(r->state, b, sizeof b), worker ? " on worker " : "", worker ? worker : "",
          r->duplicate ? " (duplicate: the task was already known)" : "");
  fflush(f);
}

json_t *ctl_submit_json(const Worker__V1__SubmitTaskResponse *r, const char *worker) {
  char b[32];
  json_t *j = json_object();
  if (worker) json_object_set_new(j, "worker", json_str(worker));
  json_object_set_new(j, "task_id", json_str(r->task_id));
  json_object_set_new(j, "slot_id", ctl_json_u64(r->slot_id));
  json_object_set_new(j, "state", json_str(state_name(r->state, b, sizeof b)));
  json_object_set_new(j, "duplicate", json_boolean(r->duplicate));
  json_object_set_new(j, "accepted_unix_ms", json_i64(r->accepted_unix_ms));
  return j;
}

void ctl_print_slot(FILE *f, const char *task_id, const Worker__V1__RequestTaskSlotResponse *r,
                    int64_t now_unix_ms) {
  char b[32];
  if (r->slot_id) {
    fprintf(f, "slot %" PRIu64 " for task %s", r->slot_id, task_id);
    if (r->state != WORKER__V1__TASK_STATE__TASK_STATE_UNSPECIFIED) {
      fprintf(f, " (task %s)", state_name(r->state, b, sizeof b));
    }
    if (r->lease_expires_unix_ms > 0) {
      int64_t left = r->lease_expires_unix_ms - now_unix_ms;
      fprintf(f, ", lease expires in %" PRId64 " ms (unix ms %" PRId64 ")", left > 0 ? left : 0,
              r->lease_expires_unix_ms);
    }
    fputc('\n', f);
  } else {
    fprintf(f, "no slot for task %s: the task is %s\n", task_id, state_name(r->state, b, sizeof b));
  }
  if (r->result) ctl_print_result(f, r->result);
  fflush(f);
}

json_t *ctl_slot_json(const Worker__V1__RequestTaskSlotResponse *r) {
  char b[32];
  json_t *j = json_object();
  json_object_set_new(j, "slot_id", ctl_json_u64(r->slot_id));
  json_object_set_new(j, "lease_expires_unix_ms", json_i64(r->lease_expires_unix_ms));
  json_object_set_new(j, "state", json_str(state_name(r->state, b, sizeof b)));
  if (r->result) json_object_set_new(j, "result", ctl_result_json(r->result));
  return j;
}

void ctl_json_set_text_or_base64(json_t *obj, const char *key, const uint8_t *p, size_t n) {
  set_text_or_base64(obj, key, p, n);
}

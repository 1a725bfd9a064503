/* workerctl_tasks.c: `workerctl tasks`, the worker's live and retained tasks
 * (ListTasks), newest first, page after page up to --limit. */
#include <ctype.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "adapters/wk_grpc_client.h"
#include "workerctl.h"

#define M_LIST "/worker.v1.WorkerService/ListTasks"
#define LIMIT_DEFAULT 50u
#define PAGE_MAX 1000u

/* "running" -> TASK_STATE_RUNNING; 0 when no such state. */
static int state_value(const char *name, size_t len) {
  char full[64] = "TASK_STATE_";
  size_t at = strlen(full);
  if (len == 0 || len >= sizeof full - at) return 0;
  for (size_t i = 0; i < len; i++) full[at + i] = (char)toupper((unsigned char)name[i]);
  full[at + len] = '\0';
  const ProtobufCEnumValue *v =
      protobuf_c_enum_descriptor_get_value_by_name(&worker__v1__task_state__descriptor, full);
  return v && v->value > 0 ? v->value : 0;
}

/* --state S,S,...: the states into out (at most max); returns how many, or -1. */
static int parse_states(const char *text, Worker__V1__TaskState *out, size_t max) {
  size_t n = 0;
  const char *p = text;
  while (*p) {
    const char *end = strchr(p, ',');
    size_t len = end ? (size_t)(end - p) : strlen(p);
    int v = state_value(p, len);
    if (v == 0 || n == max) return -1;
    out[n++] = (Worker__V1__TaskState)v;
    p += len + (end ? 1 : 0);
  }
  return (int)n;
}

static void format_age(char *buf, size_t len, uint64_t ms) {
  uint64_t s = ms / 1000;
  if (s < 120) {
    snprintf(buf, len, "%" PRIu64 "s", s);
  } else if (s < 7200) {
    snprintf(buf, len, "%" PRIu64 "m", s / 60);
  } else if (s < 172800) {
    snprintf(buf, len, "%" PRIu64 "h", s / 3600);
  } else {
    snprintf(buf, len, "%" PRIu64 "d", s / 86400);
  }
}

static json_t *task_json(const Worker__V1__TaskSummary *t) {
  char b[32];
  json_t *j = json_object();
  json_object_set_new(j, "task_id", json_string(t->task_id));
  json_object_set_new(
      j, "state",
      json_string(ctl_enum_name(&worker__v1__task_state__descriptor, t->state, b, sizeof b)));
  json_object_set_new(
      j, "phase",
      json_string(ctl_enum_name(&worker__v1__phase__descriptor, t->phase, b, sizeof b)));
  json_object_set_new(j, "function", json_string(t->function));
  json_object_set_new(j, "builder", json_string(t->builder));
  json_object_set_new(j, "code_epoch", ctl_json_u64(t->code_epoch));
  json_object_set_new(j, "accepted_unix_ms", json_integer(t->accepted_unix_ms));
  json_object_set_new(j, "finished_unix_ms", json_integer(t->finished_unix_ms));
  json_object_set_new(j, "age_ms", ctl_json_u64(t->age_ms));
  json_object_set_new(j, "calls_total", ctl_json_u64(t->calls_total));
  json_object_set_new(j, "calls_done", ctl_json_u64(t->calls_done));
  json_object_set_new(j, "calls_failed", ctl_json_u64(t->calls_failed));
  if (t->failure_code) {
    json_object_set_new(j, "failure_code",
                        json_string(ctl_enum_name(&worker__v1__failure_code__descriptor,
                                                  t->failure_code, b, sizeof b)));
  }
  json_t *labels = json_object();
  for (size_t i = 0; i < t->n_labels; i++) {
    json_object_set_new(labels, t->labels[i]->key, json_string(t->labels[i]->value));
  }
  json_object_set_new(j, "labels", labels);
  return j;
}

static void print_task(const Worker__V1__TaskSummary *t) {
  char sb[32], fb[32], age[16], calls[48];
  const char *state = ctl_enum_name(&worker__v1__task_state__descriptor, t->state, sb, sizeof sb);
  const char *fail = "";
  format_age(age, sizeof age, t->age_ms);
  if (t->calls_total) {
    snprintf(calls, sizeof calls, "%" PRIu64 "/%" PRIu64, t->calls_done, t->calls_total);
  } else {
    snprintf(calls, sizeof calls, "-");
  }
  if (t->failure_code && t->failure_code != WORKER__V1__FAILURE_CODE__FAILURE_CODE_CANCELLED) {
    fail = ctl_enum_name(&worker__v1__failure_code__descriptor, t->failure_code, fb, sizeof fb);
  }
  printf("%-36s %-10s %-20s %5" PRIu64 " %6s %13s%s%s\n", t->task_id, state, t->function,
         t->code_epoch, age, calls, fail[0] ? "  " : "", fail);
}

int ctl_cmd_tasks(ctl_args *a) {
  uint64_t limit = LIMIT_DEFAULT;
  if (a->set[F_LIMIT] && !ctl_parse_u64(a->val[F_LIMIT], 1, 1000000, &limit)) {
    return ctl_usage_error(a, "--limit takes a number from 1 to 1000000, got '%s'",
                           a->val[F_LIMIT]);
  }
  Worker__V1__TaskState states[8];
  int n_states = 0;
  if (a->set[F_STATE]) {
    n_states = parse_states(a->val[F_STATE], states, 8);
    if (n_states <= 0) {
      return ctl_usage_error(a,
                             "--state takes states separated by commas (preparing, running, "
                             "succeeded, failed, cancelled), got '%s'",
                             a->val[F_STATE]);
    }
  }
  Worker__V1__ListTasksRequest__LabelsEntry entries[CTL_MAX_KV];
  Worker__V1__ListTasksRequest__LabelsEntry *entry_ptrs[CTL_MAX_KV];
  for (size_t i = 0; i < a->labels.n; i++) {
    worker__v1__list_tasks_request__labels_entry__init(&entries[i]);
    entries[i].key = a->labels.items[i].key;
    entries[i].value = (char *)(uintptr_t)a->labels.items[i].value;
    entry_ptrs[i] = &entries[i];
  }
  char token[64] = "";
  uint64_t shown = 0;
  bool header = false;
  for (;;) {
    Worker__V1__ListTasksRequest req;
    worker__v1__list_tasks_request__init(&req);
    uint64_t want = limit - shown;
    req.page_size = (uint32_t)(want < PAGE_MAX ? want : PAGE_MAX);
    req.page_token = token;
    req.n_states = (size_t)n_states;
    req.states = states;
    req.n_labels = a->labels.n;
    req.labels = entry_ptrs;
    wk_grpc_buf resp;
    int rc = ctl_call_once(a, M_LIST, &req.base, &resp);
    if (rc != 0) return rc;
    Worker__V1__ListTasksResponse *r =
        worker__v1__list_tasks_response__unpack(NULL, resp.len, resp.data);
    wk_grpc_buf_free(&resp);
    if (!r) return ctl_report_decode_error(a, "ListTasksResponse");
    if (!header && !a->json) {
      printf("%-36s %-10s %-20s %5s %6s %13s\n", "TASK", "STATE", "FUNCTION", "EPOCH", "AGE",
             "CALLS");
      header = true;
    }
    for (size_t i = 0; i < r->n_tasks && shown < limit; i++, shown++) {
      if (a->json) {
        ctl_json_print(stdout, task_json(r->tasks[i]));
      } else {
        print_task(r->tasks[i]);
      }
    }
    bool more = r->next_page_token && r->next_page_token[0] && shown < limit;
    if (more) snprintf(token, sizeof token, "%s", r->next_page_token);
    if (!more && !a->json && shown == 0) {
      printf("(no tasks%s; %" PRIu32 " live, %" PRIu32 " retained on this worker)\n",
             (n_states || a->labels.n) ? " match" : "", r->live, r->retained);
    }
    worker__v1__list_tasks_response__free_unpacked(r, NULL);
    if (!more) break;
  }
  return CTL_EXIT_OK;
}

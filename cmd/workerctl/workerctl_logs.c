/* workerctl_logs.c: `workerctl logs TASK [--call N]`, the captured stdout and stderr
 * of a task's calls as the worker keeps them (GetTaskLogs). */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "adapters/wk_grpc_client.h"
#include "workerctl.h"

#define M_LOGS "/worker.v1.WorkerService/GetTaskLogs"

/* The bytes as text: newlines and tabs kept, other control bytes escaped (a terminal
 * never sees an escape sequence from a function); a last line gets its newline. */
static void print_text(FILE *f, const uint8_t *p, size_t n) {
  for (size_t i = 0; i < n; i++) {
    uint8_t c = p[i];
    if (c == '\n' || c == '\t' || (c >= 0x20 && c != 0x7f)) {
      fputc(c, f);
    } else {
      fprintf(f, "\\x%02x", c);
    }
  }
  if (n && p[n - 1] != '\n') fputc('\n', f);
}

static void print_stream(const Worker__V1__CallLog *c, const char *name,
                         const ProtobufCBinaryData *b) {
  if (!b->len) return;
  printf("== call %" PRIu32 " (attempt %" PRIu32 ") %s ==\n", c->index, c->attempt, name);
  print_text(stdout, b->data, b->len);
}

int ctl_cmd_logs(ctl_args *a) {
  Worker__V1__GetTaskLogsRequest req;
  worker__v1__get_task_logs_request__init(&req);
  req.task_id = a->pos[0];
  if (a->set[F_CALL]) {
    uint64_t call;
    if (!ctl_parse_u64(a->val[F_CALL], 0, UINT32_MAX, &call)) {
      return ctl_usage_error(a, "--call takes a call index, got '%s'", a->val[F_CALL]);
    }
    req.one_call = true;
    req.call = (uint32_t)call;
  }
  wk_grpc_buf resp;
  int rc = ctl_call_once(a, M_LOGS, &req.base, &resp);
  if (rc != 0) return rc;
  Worker__V1__GetTaskLogsResponse *r =
      worker__v1__get_task_logs_response__unpack(NULL, resp.len, resp.data);
  wk_grpc_buf_free(&resp);
  if (!r) return ctl_report_decode_error(a, "GetTaskLogsResponse");
  size_t shown = 0;
  for (size_t i = 0; i < r->n_calls; i++) {
    const Worker__V1__CallLog *c = r->calls[i];
    if (a->json) {
      json_t *j = json_object();
      json_object_set_new(j, "task_id", json_string(r->task_id));
      json_object_set_new(j, "call", json_integer(c->index));
      json_object_set_new(j, "attempt", json_integer(c->attempt));
      ctl_json_set_text_or_base64(j, "stdout", c->stdout.data, c->stdout.len);
      ctl_json_set_text_or_base64(j, "stderr", c->stderr.data, c->stderr.len);
      ctl_json_print(stdout, j);
    } else {
      print_stream(c, "stdout", &c->stdout);
      print_stream(c, "stderr", &c->stderr);
    }
    shown += c->stdout.len + c->stderr.len > 0;
  }
  if (!a->json && shown == 0) {
    fprintf(stderr, "workerctl: task %s: no captured output%s\n", r->task_id,
            req.one_call ? " for this call" : "");
  }
  if (r->dropped_bytes) {
    fprintf(stderr,
            "workerctl: %" PRIu64
            " bytes of this task's output were not kept (the worker's "
            "task_log_max_bytes / task_logs_total_max_bytes)\n",
            r->dropped_bytes);
  }
  worker__v1__get_task_logs_response__free_unpacked(r, NULL);
  fflush(stdout);
  return CTL_EXIT_OK;
}

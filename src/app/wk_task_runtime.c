#include "app/wk_task_runtime.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "adapters/wk_code_store.h"
#include "app/wk_audit.h"
#include "app/wk_fs.h"
#include "app/wk_orchestrator.h"
#include "app/wk_wire.h"

static void copy_str(char *dst, size_t cap, const char *src) {
  snprintf(dst, cap, "%s", src ? src : "");
}

wk_task_rt *wk_task_rt_create(wk_orch *orch, const Worker__V1__SubmitTaskRequest *req,
                              const char *traceparent, int64_t now_ms,
                              int64_t default_timeout_ms) {
  wk_task_rt *rt = calloc(1, sizeof *rt);
  if (!rt) abort();
  rt->orch = orch;
  rt->refs = 1;
  copy_str(rt->task_id, sizeof rt->task_id, req->task_id);
  const Worker__V1__FunctionCallConfig *fn = req->function;
  copy_str(rt->function, sizeof rt->function, fn->name);
  copy_str(rt->entrypoint, sizeof rt->entrypoint,
           (fn->entrypoint && fn->entrypoint[0]) ? fn->entrypoint : "main:handler");
  copy_str(rt->builder, sizeof rt->builder, (fn->type && fn->type[0]) ? fn->type : "single");
  copy_str(rt->result_handler, sizeof rt->result_handler,
           req->result_handler ? req->result_handler->type : "");
  copy_str(rt->traceparent, sizeof rt->traceparent, traceparent);
  if (req->result_handler && req->result_handler->n_options) {
    size_t n = req->result_handler->n_options; /* bounded by request validation */
    rt->handler_options = calloc(n, sizeof *rt->handler_options);
    if (!rt->handler_options) abort();
    for (size_t i = 0; i < n; i++) {
      rt->handler_options[i].key = strdup(req->result_handler->options[i]->key);
      rt->handler_options[i].value = strdup(req->result_handler->options[i]->value);
      if (!rt->handler_options[i].key || !rt->handler_options[i].value) abort();
    }
    rt->n_handler_options = n;
  }
  rt->args_len = fn->args.len;
  if (rt->args_len) {
    rt->args = malloc(rt->args_len);
    if (!rt->args) abort();
    memcpy(rt->args, fn->args.data, rt->args_len);
  }
  rt->args_json = fn->content_type == WORKER__V1__CONTENT_TYPE__CONTENT_TYPE_JSON;
  rt->slot_id = req->slot_id;
  rt->requested_epoch = fn->epoch;
  if (req->call_failure_policy) {
    rt->failure_policy = (wk_call_failure_policy)req->call_failure_policy->mode;
    rt->max_failed_calls = req->call_failure_policy->max_failed_calls;
  }
  if (req->call_retry_policy) {
    const Worker__V1__CallRetryPolicy *p = req->call_retry_policy;
    rt->retry = (wk_retry_policy){
        .max_attempts = p->max_attempts,
        .initial_backoff_ms = (int64_t)p->initial_backoff_ms,
        .max_backoff_ms = (int64_t)p->max_backoff_ms,
        .backoff_multiplier_milli = (uint32_t)(p->backoff_multiplier * 1000.0),
        .retry_on_timeout = p->retry_on_timeout,
    };
    rt->retry_on_executor_lost = p->retry_on_executor_lost;
  }
  rt->call_timeout_ms = (int64_t)req->call_timeout_ms;
  int64_t timeout = req->timeout_ms ? (int64_t)req->timeout_ms : default_timeout_ms;
  rt->deadline_ms = now_ms + timeout;
  return rt;
}

void wk_task_rt_ref(wk_task_rt *rt) { rt->refs++; }

/* Removing a scratch directory can wait on the disk (ext4 with discard: ~0.1 ms per
 * rmdir, far more at times): it runs on the threadpool, never on the actor. */
typedef struct scratch_removal {
  uv_work_t work;
  char path[PATH_MAX];
} scratch_removal;

static void remove_scratch(uv_work_t *w) { wk_fs_remove_tree(((scratch_removal *)w->data)->path); }
static void removed_scratch(uv_work_t *w, int status) {
  (void)status;
  free(w->data);
}

void wk_task_rt_unref(wk_task_rt *rt) {
  if (--rt->refs > 0) return;
  if (rt->scratch_created) {
    scratch_removal *r = malloc(sizeof *r);
    if (!r) abort();
    memcpy(r->path, rt->scratch_dir, sizeof r->path);
    r->work.data = r;
    if (uv_queue_work(wk_orch_loop(rt->orch), &r->work, remove_scratch, removed_scratch) != 0) {
      wk_fs_remove_tree(r->path);
      free(r);
    }
  }
  for (uint64_t i = 0; rt->rt_calls && i < rt->calls_total; i++) wk_buf_free(&rt->rt_calls[i].encoded);
  free(rt->rt_calls);
  for (size_t i = 0; i < rt->n_handler_options; i++) {
    free((void *)(uintptr_t)rt->handler_options[i].key);
    free((void *)(uintptr_t)rt->handler_options[i].value);
  }
  free(rt->handler_options);
  wk_buf_free(&rt->writer_outputs);
  wk_buf_free(&rt->writer_results);
  wk_call_list_free(&rt->calls);
  free(rt->args);
  free(rt);
}

void wk_task_rt_activate(wk_task_rt *rt, const char *code_root, const char *scratch_root,
                         const char *audit_allow, const char *audit_deny) {
  rt->activation_rc = -1;
  if (!wk_audit_permits(audit_allow, audit_deny, rt->function, rt->activation_error,
                        sizeof rt->activation_error)) {
    rt->activation_code = WK_FAIL_ACTIVATION_FAILED;
    return;
  }
  if (wk_code_store_resolve(code_root, rt->function, rt->requested_epoch, &rt->epoch, rt->code_dir,
                            sizeof rt->code_dir, rt->activation_error,
                            sizeof rt->activation_error) != 0) {
    rt->activation_code = WK_FAIL_ACTIVATION_FAILED;
    return;
  }
  /* the task id is printable ASCII but may hold '/': keep the directory name safe */
  char safe[WK_TASK_ID_MAX + 1];
  size_t n = strlen(rt->task_id);
  for (size_t i = 0; i <= n; i++) safe[i] = rt->task_id[i] == '/' ? '_' : rt->task_id[i];
  int len = snprintf(rt->scratch_dir, sizeof rt->scratch_dir, "%s/%s.%llx", scratch_root, safe,
                     (unsigned long long)rt->slot_id);
  if (len < 0 || (size_t)len >= sizeof rt->scratch_dir || mkdir(rt->scratch_dir, 0700) != 0) {
    rt->activation_code = WK_FAIL_IO_SCOPE_FAILED;
    snprintf(rt->activation_error, sizeof rt->activation_error,
             "cannot create the task's scratch directory under %s: %s", scratch_root,
             strerror(errno));
    return;
  }
  rt->scratch_created = true;
  rt->activation_rc = 0;
}

/* A NUL-terminated copy of a byte view; an empty view (ptr may be NULL) gives "". */
static char *dup_view(wk_frame_bytes b) {
  char *s = malloc((size_t)b.len + 1);
  if (!s) abort();
  if (b.len) memcpy(s, b.ptr, b.len);
  s[b.len] = '\0';
  return s;
}

void wk_task_rt_encode_output(uint32_t index, const wk_call_outcome *o, wk_buf *out, char *failure,
                              size_t failure_len) {
  Worker__V1__CallOutput m = WORKER__V1__CALL_OUTPUT__INIT;
  Worker__V1__CallError error = WORKER__V1__CALL_ERROR__INIT;
  m.index = index;
  m.content_type = (Worker__V1__ContentType)o->content_type;
  m.stdout = (ProtobufCBinaryData){o->stdout_bytes.len, (uint8_t *)(uintptr_t)o->stdout_bytes.ptr};
  m.stderr = (ProtobufCBinaryData){o->stderr_bytes.len, (uint8_t *)(uintptr_t)o->stderr_bytes.ptr};
  char *type = NULL, *message = NULL, *traceback = NULL;
  if (o->status == WK_CALL_OK) {
    m.outcome_case = WORKER__V1__CALL_OUTPUT__OUTCOME_VALUE;
    m.value = (ProtobufCBinaryData){o->output.len, (uint8_t *)(uintptr_t)o->output.ptr};
  } else {
    type = dup_view(o->error_type);
    message = dup_view(o->error_message);
    traceback = dup_view(o->traceback);
    if (!type || !message || !traceback) abort();
    error.type = type;
    error.message = message;
    error.traceback = traceback;
    error.retryable = o->status == WK_CALL_RETRYABLE || o->status == WK_CALL_EXECUTOR_LOST;
    m.outcome_case = WORKER__V1__CALL_OUTPUT__OUTCOME_ERROR;
    m.error = &error;
    if (failure) snprintf(failure, failure_len, "call %u failed: %s: %s", index, type, message);
  }
  size_t n = worker__v1__call_output__get_packed_size(&m);
  uint8_t *tmp = malloc(n ? n : 1);
  if (!tmp) abort();
  worker__v1__call_output__pack(&m, tmp);
  wk_wire_append_bytes_field(out, 7, tmp, n);
  free(tmp);
  free(type);
  free(message);
  free(traceback);
}

void wk_task_rt_collect_outputs(const wk_task_rt *rt, wk_buf *out) {
  for (uint64_t i = 0; rt->rt_calls && i < rt->calls_total; i++) {
    wk_buf_append(out, rt->rt_calls[i].encoded.data, rt->rt_calls[i].encoded.len);
  }
}

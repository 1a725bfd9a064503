/* wk_task_runtime.c: see wk_task_runtime.h. */
#include "app/wk_task_runtime.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app/wk_fs.h"
#include "app/wk_task_code.h"
#include "app/wk_output_spool.h"
#include "app/wk_wire.h"
#include "lib/wk_alloc.h"
#include "lib/wk_assert.h"
#include "lib/wk_freelist.h"

/* snprintf(dst, cap, "%s", src) without the formatter (six per task): cut to cap - 1
 * bytes, always NUL-terminated; NULL copies "". */
static void copy_str(char *dst, size_t cap, const char *src) {
  size_t n = src ? strnlen(src, cap - 1) : 0;
  if (n) memcpy(dst, src, n);
  dst[n] = '\0';
}

/* The record's buffers that are written before they are read: strings (read up to
 * their NUL, so a cleared first byte reads as "") and the retried attempts (read up to
 * n_retries). A blank record clears only their first byte: they are 12.7 KiB of its
 * 13.4, and zeroing the 4.6 KiB of them outside the two paths cost as much per task
 * as the rest of the record (perf: wk_task_rt_create ~4% of the worker's cycles on
 * no-op tasks). In the record's order and disjoint (a debug assertion checks it at
 * every blank record of the ASan and fuzz builds). */
typedef struct rt_span {
  size_t at, len;
} rt_span;
#define RT_SPAN(field) \
  { offsetof(wk_task_rt, field), sizeof(((wk_task_rt *)0)->field) }
static const rt_span k_written_first[] = {
    RT_SPAN(req.task_id),     RT_SPAN(req.function),       RT_SPAN(req.entrypoint),
    RT_SPAN(req.builder),     RT_SPAN(req.result_handler), RT_SPAN(req.traceparent),
    RT_SPAN(act.code_dir),    RT_SPAN(act.scratch_dir),    RT_SPAN(act.error),
    RT_SPAN(build.job.error), RT_SPAN(calls.spool_error),  RT_SPAN(calls.first_failure),
    RT_SPAN(calls.retries),   RT_SPAN(writer.error),
};
#define N_WRITTEN_FIRST (sizeof k_written_first / sizeof k_written_first[0])

/* Are the spans in order, disjoint and inside the record? */
static bool spans_ordered(void) {
  size_t end = 0;
  for (size_t i = 0; i < N_WRITTEN_FIRST; i++) {
    if (k_written_first[i].at < end || k_written_first[i].len == 0) return false;
    end = k_written_first[i].at + k_written_first[i].len;
  }
  return end <= sizeof(wk_task_rt);
}

/* A zeroed record, but for the buffers above: only their first byte is cleared. */
static wk_task_rt *blank_rt(wk_freelist *pool) {
  if (!pool) return wk_xcalloc(1, sizeof(wk_task_rt));
  WK_ASSERT(pool->size == sizeof(wk_task_rt));
  WK_DEBUG_ASSERT(spans_ordered());
  wk_task_rt *rt = wk_freelist_take(pool);
  char *const base = (char *)rt;
  size_t from = 0;
  for (size_t i = 0; i < N_WRITTEN_FIRST; i++) {
    const rt_span *sp = &k_written_first[i];
    memset(base + from, 0, sp->at - from);
    base[sp->at] = 0;
    from = sp->at + sp->len;
  }
  memset(base + from, 0, sizeof *rt - from);
  return rt;
}

wk_task_rt *wk_task_rt_create(uv_loop_t *loop, wk_freelist *pool,
                              const Worker__V1__SubmitTaskRequest *req, const char *traceparent,
                              bool shadow) {
  wk_task_rt *rt = blank_rt(pool);
  rt->loop = loop;
  rt->pool = pool;
  rt->refs = 1;
  wk_rt_request *q = &rt->req;
  copy_str(q->task_id, sizeof q->task_id, req->task_id);
  const Worker__V1__FunctionCallConfig *fn = req->function;
  copy_str(q->function, sizeof q->function, fn->name);
  copy_str(q->entrypoint, sizeof q->entrypoint,
           (fn->entrypoint && fn->entrypoint[0]) ? fn->entrypoint : "main:handler");
  copy_str(q->builder, sizeof q->builder, (fn->type && fn->type[0]) ? fn->type : "single");
  copy_str(q->result_handler, sizeof q->result_handler,
           req->result_handler && !shadow ? req->result_handler->type : "");
  copy_str(q->traceparent, sizeof q->traceparent, traceparent);
  if (req->result_handler && req->result_handler->n_options) {
    size_t n = req->result_handler->n_options; /* bounded by request validation */
    q->handler_options = wk_xcalloc(n, sizeof *q->handler_options);
    for (size_t i = 0; i < n; i++) {
      q->handler_options[i].key = wk_xstrdup(req->result_handler->options[i]->key);
      q->handler_options[i].value = wk_xstrdup(req->result_handler->options[i]->value);
    }
    q->n_handler_options = n;
  }
  if (fn->n_options) {
    wk_option view[WK_OPTIONS_MAX]; /* bounded by request validation */
    q->n_builder_options = wk_task_rt_builder_options(fn, view);
    q->builder_options = wk_xcalloc(q->n_builder_options, sizeof *q->builder_options);
    for (size_t i = 0; i < q->n_builder_options; i++) {
      q->builder_options[i].key = wk_xstrdup(view[i].key);
      q->builder_options[i].value = wk_xstrdup(view[i].value);
    }
  }
  q->args_len = fn->args.len;
  if (q->args_len) {
    q->args = q->args_len <= sizeof q->args_inline ? q->args_inline : wk_xmalloc(q->args_len);
    memcpy(q->args, fn->args.data, q->args_len);
  }
  q->args_json = fn->content_type == WORKER__V1__CONTENT_TYPE__CONTENT_TYPE_JSON;
  q->requested_epoch = fn->epoch;
  /* the rest of the retry policy is the core's; this flag only the dispatcher reads */
  q->max_attempts = 1;
  if (req->call_retry_policy) {
    q->retry_on_executor_lost = req->call_retry_policy->retry_on_executor_lost;
    if (req->call_retry_policy->max_attempts > 1)
      q->max_attempts = req->call_retry_policy->max_attempts;
  }
  q->call_timeout_ms = (int64_t)req->call_timeout_ms;
  return rt;
}

size_t wk_task_rt_builder_options(const Worker__V1__FunctionCallConfig *fn,
                                  wk_option view[WK_OPTIONS_MAX]) {
  size_t n = fn->n_options < WK_OPTIONS_MAX ? fn->n_options : WK_OPTIONS_MAX;
  for (size_t i = 0; i < n; i++) view[i] = (wk_option){fn->options[i]->key, fn->options[i]->value};
  return n;
}

void wk_task_rt_ref(wk_task_rt *rt) {
  WK_ASSERT(rt->refs > 0); /* no resurrection of a freed runtime */
  WK_ASSERT(rt->refs < UINT32_MAX);
  rt->refs++;
}

/* Removing a scratch directory can wait on the disk (ext4 with discard: ~0.1 ms per
 * rmdir, far more at times): it runs on the threadpool, never on the actor. Only a task
 * whose functions used their scratch directory (or that has an outputs spool) has one. */
typedef struct scratch_removal {
  uv_work_t work;
  char path[PATH_MAX];    /* "" when only the spool goes */
  wk_output_spool *spool; /* removed with it (a large file's unlink waits on the disk too) */
} scratch_removal;

static void remove_scratch(uv_work_t *w) {
  scratch_removal *r = w->data;
  wk_output_spool_destroy(r->spool);
  if (r->path[0]) wk_fs_remove_tree(r->path);
}
static void removed_scratch(uv_work_t *w, int status) {
  (void)status;
  free(w->data);
}

void wk_task_rt_unref(wk_task_rt *rt) {
  WK_ASSERT(rt->refs > 0);
  if (--rt->refs > 0) return;
  /* the last reference: nothing of the actor may still name the runtime */
  WK_ASSERT(rt->sem.waiting == 0);     /* a wait queue holds a reference */
  WK_ASSERT(!rt->scope.in_list);       /* the IO scope list is left at convergence */
  WK_ASSERT(rt->calls.disp_task == 0); /* the dispatcher forgot the task */
  WK_ASSERT(rt->calls.attempts == NULL);
  WK_ASSERT(rt->calls.groups == NULL);
  if (rt->act.scratch_created || rt->act.spool) {
    scratch_removal *r = wk_xmalloc(sizeof *r);
    if (rt->act.scratch_created) {
      memcpy(r->path, rt->act.scratch_dir, sizeof r->path);
    } else {
      r->path[0] = '\0';
    }
    r->spool = rt->act.spool;
    r->work.data = r;
    if (!rt->loop || uv_queue_work(rt->loop, &r->work, remove_scratch, removed_scratch) != 0) {
      remove_scratch(&r->work);
      free(r);
    }
  }
  for (uint64_t i = 0; rt->calls.outputs && i < rt->build.calls_total; i++)
    wk_buf_free(&rt->calls.outputs[i].encoded);
  if (rt->calls.outputs != &rt->calls.output_one) free(rt->calls.outputs);
  for (size_t i = 0; i < rt->req.n_handler_options; i++) {
    free((void *)(uintptr_t)rt->req.handler_options[i].key);
    free((void *)(uintptr_t)rt->req.handler_options[i].value);
  }
  free(rt->req.handler_options);
  for (size_t i = 0; i < rt->req.n_builder_options; i++) {
    free((void *)(uintptr_t)rt->req.builder_options[i].key);
    free((void *)(uintptr_t)rt->req.builder_options[i].value);
  }
  free(rt->req.builder_options);
  wk_buf_free(&rt->writer.results);
  wk_call_list_free(&rt->build.list);
  wk_call_list_free(&rt->build.job.list); /* a build whose task converged meanwhile */
  wk_task_code_free(rt);
  if (rt->req.args != rt->req.args_inline) free(rt->req.args);
  if (rt->pool) {
    wk_freelist_put(rt->pool, rt);
  } else {
    free(rt);
  }
}

/* A NUL-terminated copy of a byte view; an empty view (ptr may be NULL) gives "". */
static char *dup_view(wk_frame_bytes b) {
  char *s = wk_xmalloc((size_t)b.len + 1);
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
    error.type = type;
    error.message = message;
    error.traceback = traceback;
    error.retryable = o->status == WK_CALL_RETRYABLE || o->status == WK_CALL_EXECUTOR_LOST;
    m.outcome_case = WORKER__V1__CALL_OUTPUT__OUTCOME_ERROR;
    m.error = &error;
    if (failure) snprintf(failure, failure_len, "call %u failed: %s: %s", index, type, message);
  }
  /* packed in place after its field header (no intermediate copy of the output); an
   * empty `out` gets exactly the room it needs, as it is kept until the task ends */
  size_t n = worker__v1__call_output__get_packed_size(&m);
  if (out->len == 0) wk_buf_reserve_exact(out, WK_WIRE_FIELD_HEAD_MAX + n);
  wk_buf_append_varint(out, (7u << 3) | 2u);
  wk_buf_append_varint(out, n);
  out->len += worker__v1__call_output__pack(&m, wk_buf_reserve(out, n));
  free(type);
  free(message);
  free(traceback);
}

wk_bytes wk_task_rt_outputs_view(const wk_task_rt *rt, wk_buf *scratch) {
  if (rt->calls.outputs && rt->build.calls_total == 1)
    return (wk_bytes){rt->calls.outputs[0].encoded.data, rt->calls.outputs[0].encoded.len};
  wk_task_rt_collect_outputs(rt, scratch);
  return (wk_bytes){scratch->data, scratch->len};
}

void wk_task_rt_collect_outputs(const wk_task_rt *rt, wk_buf *out) {
  for (uint64_t i = 0; rt->calls.outputs && i < rt->build.calls_total; i++) {
    wk_buf_append(out, rt->calls.outputs[i].encoded.data, rt->calls.outputs[i].encoded.len);
  }
}

void wk_task_rt_encode_retries(const wk_task_rt *rt, wk_buf *out) {
  for (uint32_t i = 0; i < rt->calls.n_retries; i++) {
    const wk_rt_retry *r = &rt->calls.retries[i];
    Worker__V1__CallRetry m = WORKER__V1__CALL_RETRY__INIT;
    m.index = r->index;
    m.attempt = r->attempt;
    m.error_type = (char *)(uintptr_t)r->type;
    m.error_message = (char *)(uintptr_t)r->message;
    size_t n = worker__v1__call_retry__get_packed_size(&m);
    wk_buf_append_varint(out, (10u << 3) | 2u);
    wk_buf_append_varint(out, n);
    worker__v1__call_retry__pack(&m, wk_buf_reserve(out, n));
    out->len += n;
  }
}

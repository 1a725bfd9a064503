/* wk_phase_jobs.c: the phase steps the core starts (activation, builder, calls, writer)
 * and their threadpool jobs. See wk_orch_int.h. */
#include "app/wk_orch_int.h"

#include <stdio.h>
#include <string.h>

void wk_orch__start_calls(wk_orch *o, wk_task_rt *rt) {
  if (!wk_orch__sem_acquire(o, WK_ORCH__SEM_EXECUTOR, rt)) return;
  if (rt->streaming && !wk_orch__sem_acquire(o, WK_ORCH__SEM_SCAN, rt)) return;
  if (rt->calls_total == 0) {
    rt->calls_ok = true;
    wk_orch__defer_step(o, WK_ORCH__STEP_CALLS_DONE, rt);
    return;
  }
  wk_orch__scope_track(o, rt);
  wk_calls_start(o->calls, rt, o->now_ms);
}

void wk_orch__calls_done(void *ud, wk_task_rt *rt) { wk_orch__defer_step(ud, WK_ORCH__STEP_CALLS_DONE, rt); }

static void phase_finished(wk_orch *o, wk_task_rt *rt, wk_phase phase, const wk_phase_outcome *out) {
  wk_transition_result tr;
  wk_core_handle_phase_finished(o->core, rt->task_id, strlen(rt->task_id), phase, out, o->now_ms, &tr);
  wk_orch__exec_cmds(o, &tr.cmds);
}

void wk_orch__run_builder(wk_orch *o, wk_task_rt *rt) {
  if (!wk_orch__sem_acquire(o, WK_ORCH__SEM_BUILDER, rt)) return;
  wk_phase_outcome out = {.ok = true};
  char err[512];
  const wk_builder *b = wk_builder_registry_find(o->cfg.builders, rt->builder);
  if (!b) {
    char names[256];
    snprintf(err, sizeof err, "no call builder named '%s' in this worker (enabled: %s)", rt->builder,
             wk_builder_registry_names(o->cfg.builders, names, sizeof names));
    out = (wk_phase_outcome){.ok = false, .failure_code = WK_FAIL_BUILDER_NOT_FOUND, .message = err};
  } else {
    wk_builder_input in = {.args = rt->args,
                           .args_len = rt->args_len,
                           .json = rt->args_json,
                           .max_calls = o->cfg.max_calls_per_task};
    rt->builder_impl = b;
    int rc;
    if (b->stream_open) {
      rc = b->stream_open(&in, &rt->stream, err, sizeof err);
      rt->streaming = true;
      rt->calls_total = rt->stream.total;
      out.streaming = true;
    } else {
      rc = b->build(&in, &rt->calls, err, sizeof err);
      rt->calls_total = rt->calls.count;
    }
    if (rc != 0) {
      out = (wk_phase_outcome){.ok = false, .failure_code = WK_FAIL_BUILDER_FAILED, .message = err};
    }
  }
  wk_orch__sem_release(o, WK_ORCH__SEM_BUILDER, rt);
  phase_finished(o, rt, WK_PHASE_BUILDER, &out);
}

void wk_orch__report_calls(wk_orch *o, wk_task_rt *rt) {
  if (rt->calls_reported) return;
  rt->calls_reported = true;
  wk_orch__scope_untrack(o, rt);
  wk_calls_stop(o->calls, rt, o->now_ms);
  wk_orch__sem_release(o, WK_ORCH__SEM_SCAN, rt);
  wk_orch__sem_release(o, WK_ORCH__SEM_EXECUTOR, rt);
  wk_buf outputs = {0};
  wk_task_rt_collect_outputs(rt, &outputs);
  bool ok = rt->calls_ok;
  char msg[700];
  const char *message = NULL;
  wk_failure_code code = WK_FAIL_NONE;
  if (!ok && rt->scope_exceeded) {
    message = rt->first_failure;
  } else if (!ok) {
    snprintf(msg, sizeof msg, "%u of %llu calls failed; first: %s", rt->calls_failed,
             (unsigned long long)rt->calls_total, rt->first_failure);
    message = msg;
  } else if (outputs.len > o->cfg.max_inline_output_bytes && !rt->result_handler[0]) {
    snprintf(msg, sizeof msg,
             "the outputs (%zu bytes) exceed the inline limit of %zu bytes; configure a result handler",
             outputs.len, o->cfg.max_inline_output_bytes);
    message = msg;
    ok = false;
    code = WK_FAIL_CALL_FAILED;
    wk_buf_clear(&outputs);
  }
  wk_phase_outcome out = {
      .ok = ok,
      .failure_code = code,
      .message = message,
      .data = {outputs.data, outputs.len},
      .stats = rt->stats,
  };
  phase_finished(o, rt, WK_PHASE_CALLS, &out);
  wk_buf_free(&outputs);
}

static const wk_writer *enabled_writer(const wk_orch *o, const char *name) {
  for (size_t i = 0; i < sizeof o->cfg.writers / sizeof o->cfg.writers[0] && o->cfg.writers[i]; i++) {
    if (strcmp(o->cfg.writers[i], name) == 0) return wk_writer_find(name);
  }
  return NULL;
}

/* The writer runs on the threadpool (it blocks on fsync and the network). */
static void on_writer_work(uv_work_t *w) {
  wk_task_rt *rt = w->data;
  wk_writer_task t = {
      .settings = rt->orch->cfg.writer_settings,
      .task_id = rt->task_id,
      .function = rt->function,
      .epoch = rt->epoch,
      .options = rt->handler_options,
      .n_options = rt->n_handler_options,
      .outputs = rt->writer_outputs.data,
      .outputs_len = rt->writer_outputs.len,
  };
  rt->writer_rc = rt->writer->write(rt->writer, &t, &rt->writer_results, rt->writer_error,
                                    sizeof rt->writer_error);
}

static void on_writer_done(uv_work_t *w, int status) {
  wk_task_rt *rt = w->data;
  wk_orch *o = rt->orch;
  o->jobs--;
  if (o->closing) {
    wk_task_rt_unref(rt);
    wk_orch__maybe_free(o);
    return;
  }
  wk_orch__loop_now(o);
  wk_orch__sem_release(o, WK_ORCH__SEM_PLUGIN, rt);
  if (!rt->converged) {
    wk_phase_outcome out = {.ok = true, .data = {rt->writer_results.data, rt->writer_results.len}};
    if (status != 0 || rt->writer_rc != 0) {
      out = (wk_phase_outcome){.ok = false,
                               .failure_code = WK_FAIL_PLUGIN_FAILED,
                               .message = status ? "the writer was cancelled" : rt->writer_error};
    }
    phase_finished(o, rt, WK_PHASE_WRITER, &out);
  }
  wk_task_rt_unref(rt);
  wk_orch__run_steps(o);
}

void wk_orch__run_writer(wk_orch *o, wk_task_rt *rt) {
  if (!rt->result_handler[0]) { /* outputs stay inline in the TaskResult */
    wk_phase_outcome out = {.ok = true};
    phase_finished(o, rt, WK_PHASE_WRITER, &out);
    return;
  }
  const wk_writer *w = enabled_writer(o, rt->result_handler);
  if (!w) {
    char err[300];
    snprintf(err, sizeof err,
             "no writer plugin named '%s' is enabled and configured on this worker (known: %s)",
             rt->result_handler, wk_writer_names());
    wk_phase_outcome out = {.ok = false, .failure_code = WK_FAIL_PLUGIN_NOT_FOUND, .message = err};
    phase_finished(o, rt, WK_PHASE_WRITER, &out);
    return;
  }
  if (!wk_orch__sem_acquire(o, WK_ORCH__SEM_PLUGIN, rt)) return;
  rt->writer = w;
  wk_buf_clear(&rt->writer_outputs);
  wk_task_rt_collect_outputs(rt, &rt->writer_outputs);
  wk_task_rt_ref(rt);
  rt->writer_job.data = rt;
  o->jobs++;
  uv_queue_work(o->loop, &rt->writer_job, on_writer_work, on_writer_done);
}

/* ---- activation (threadpool) ------------------------------------------------------ */

static void on_activation_work(uv_work_t *w) {
  wk_task_rt *rt = w->data;
  const wk_orch_config *cfg = &rt->orch->cfg;
  wk_task_rt_activate(rt, cfg->code_root, cfg->scratch_root, cfg->audit_allow, cfg->audit_deny);
}

static void on_activation_done(uv_work_t *w, int status) {
  wk_task_rt *rt = w->data;
  wk_orch *o = rt->orch;
  o->jobs--;
  if (o->closing) { /* the task was converged at close: only let go */
    wk_task_rt_unref(rt);
    wk_orch__maybe_free(o);
    return;
  }
  wk_orch__loop_now(o);
  if (!rt->converged) {
    wk_transition_result tr;
    if (status == 0 && rt->activation_rc == 0) {
      wk_core_handle_activation_prepared(o->core, rt->task_id, strlen(rt->task_id), rt->slot_id,
                                         rt->epoch, o->now_ms, &tr);
    } else {
      const char *why = status ? "activation was cancelled" : rt->activation_error;
      wk_core_handle_activation_failed(o->core, rt->task_id, strlen(rt->task_id),
                                       status ? WK_FAIL_ACTIVATION_FAILED : rt->activation_code, why,
                                       o->now_ms, &tr);
    }
    wk_orch__exec_cmds(o, &tr.cmds);
  }
  wk_task_rt_unref(rt);
  wk_orch__run_steps(o);
}

void wk_orch__start_activation(wk_orch *o, wk_task_rt *rt) {
  wk_task_rt_ref(rt);
  rt->activation.data = rt;
  o->jobs++;
  uv_queue_work(o->loop, &rt->activation, on_activation_work, on_activation_done);
}

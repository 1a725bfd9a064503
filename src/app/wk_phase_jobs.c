/* wk_phase_jobs.c: the phase steps the core starts (activation, builder, calls, writer)
 * and their threadpool jobs. See wk_orch_int.h. */
#include "app/wk_orch_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "adapters/wk_code_store.h"
#include "app/wk_audit.h"
#include "app/wk_task_code.h"
#include "app/wk_output_spool.h"
#include "lib/wk_assert.h"

void wk_orch__start_calls(wk_orch *o, wk_task_rt *rt) {
  WK_ASSERT(!rt->build.running);        /* the builder is over */
  WK_ASSERT(!rt->build.calls_reported); /* and the calls phase is not */
  if (!wk_orch__sem_acquire(o, WK_ORCH__SEM_EXECUTOR, rt)) return;
  if (rt->build.streaming && !wk_orch__sem_acquire(o, WK_ORCH__SEM_SCAN, rt)) return;
  if (rt->build.calls_total == 0) { /* nothing to run: the phase is over, and ok */
    wk_orch__defer_step(o, WK_ORCH__STEP_CALLS_DONE, rt);
    return;
  }
  wk_task_view task; /* the deadline and call policies, as the core holds them */
  if (wk_core_live_task(o->core, rt->req.task_id, strlen(rt->req.task_id), &task) != WK_OK) return;
  wk_orch__scope_track(o, rt);
  wk_calls_start(o->calls, rt, &task, o->now_ms);
  wk_orch__progress(o, rt); /* calls_total is known from now on: snapshots show it */
}

void wk_orch__calls_done(void *ud, wk_task_rt *rt) {
  wk_orch__defer_step(ud, WK_ORCH__STEP_CALLS_DONE, rt);
}

static void phase_finished(wk_orch *o, wk_task_rt *rt, wk_phase phase,
                           const wk_phase_outcome *out) {
  wk_transition_result tr;
  wk_core_handle_phase_finished(o->core, rt->req.task_id, strlen(rt->req.task_id), phase, out,
                                o->now_ms, &tr);
  wk_orch__exec_cmds(o, &tr.cmds);
}

/* ---- builder (threadpool) ---------------------------------------------------------- */

/* Monotonic ms on the loop's clock (uv_now is uv_hrtime, coarser), from any thread. */
static int64_t clock_ms(void) { return (int64_t)(uv_hrtime() / 1000000u); }

/* Runs rt's builder (rt->build.impl) into rt->build.job. On a threadpool thread (or on
 * the loop for a cheap builder): reads rt->req (read-only after create) and the builder
 * (static); writes rt->build.job only. Nothing else of the task or the orchestrator. */
static void build(const wk_orch *o, wk_task_rt *rt) {
  wk_rt_build_job *job = &rt->build.job;
  const wk_builder *b = rt->build.impl;
  wk_builder_input in = {.args = rt->req.args,
                         .args_len = rt->req.args_len,
                         .json = rt->req.args_json,
                         .max_calls = o->cfg.max_calls_per_task,
                         .options = rt->req.builder_options,
                         .n_options = rt->req.n_builder_options};
  job->started_ms = clock_ms();
  job->rc = b->stream_open ? b->stream_open(&in, &job->stream, job->error, sizeof job->error)
                           : b->build(&in, &job->list, job->error, sizeof job->error);
  job->finished_ms = clock_ms();
}

static void on_builder_work(uv_work_t *w) {
  const wk_orch__job *j = w->data;
  build(j->o, j->rt);
}

/* On the loop, the build over (status: the job's, 0 inline): gives the builder
 * semaphore back (even when the task converged meanwhile; `lent`: its job held it),
 * takes the built calls into the task and reports the phase. */
static void builder_finished(wk_orch *o, wk_task_rt *rt, int status, bool lent) {
  wk_rt_build *bd = &rt->build;
  WK_ASSERT(bd->running);
  bd->running = false;
  if (lent) {
    wk_orch__sem_release_from_job(o, WK_ORCH__SEM_BUILDER, rt);
  } else {
    wk_orch__sem_release(o, WK_ORCH__SEM_BUILDER, rt);
  }
  if (!wk_orch__converged(o, rt)) {
    wk_phase_outcome out = {
        .ok = true, .ran_from_ms = bd->job.started_ms, .ran_to_ms = bd->job.finished_ms};
    if (status != 0 || bd->job.rc != 0) {
      out.ok = false;
      out.failure_code = WK_FAIL_BUILDER_FAILED;
      out.message = status ? "the builder was cancelled" : bd->job.error;
    } else if (bd->impl->stream_open) {
      bd->streaming = true;
      bd->stream = bd->job.stream;
      bd->calls_total = bd->stream.total;
      out.streaming = true;
    } else {
      wk_call_list_move(&bd->list, &bd->job.list);
      bd->calls_total = bd->list.count;
    }
    phase_finished(o, rt, WK_PHASE_BUILDER, &out);
  }
}

static void on_builder_done(uv_work_t *w, int status) {
  wk_task_rt *rt;
  wk_orch *o = wk_orch__job_end(w, &rt);
  if (!o) return;
  wk_orch__loop_now(o);
  builder_finished(o, rt, status, true);
  wk_task_rt_unref(rt);
  wk_orch__run_steps(o);
}

void wk_orch__run_builder(wk_orch *o, wk_task_rt *rt) {
  if (rt->build.running) return;
  const wk_builder *b = wk_builder_registry_find(o->cfg.builders, rt->req.builder);
  if (!b) { /* nothing to run: no semaphore needed */
    char err[WK_TASK_RT_MESSAGE_MAX + 1], names[256];
    snprintf(err, sizeof err, "no call builder named '%s' in this worker (enabled: %s)",
             rt->req.builder, wk_builder_registry_names(o->cfg.builders, names, sizeof names));
    wk_phase_outcome out = {.ok = false, .failure_code = WK_FAIL_BUILDER_NOT_FOUND, .message = err};
    phase_finished(o, rt, WK_PHASE_BUILDER, &out);
    return;
  }
  if (!wk_orch__sem_acquire(o, WK_ORCH__SEM_BUILDER, rt)) return;
  rt->build.impl = b;
  rt->build.running = true;
  if (b->cheap) { /* no threadpool round trip: built here, in this loop turn */
    build(o, rt);
    builder_finished(o, rt, 0, false);
    return;
  }
  wk_orch__sem_lend_to_job(rt, WK_ORCH__SEM_BUILDER);
  wk_orch__queue_job(o, rt, 0, on_builder_work, on_builder_done);
}

void wk_orch__report_calls(wk_orch *o, wk_task_rt *rt) {
  if (rt->build.calls_reported) return;
  WK_ASSERT(!rt->build.running);
  rt->build.calls_reported = true;
  wk_orch__scope_untrack(o, rt);
  wk_calls_stop(o->calls, rt, o->now_ms);
  wk_orch__sem_release(o, WK_ORCH__SEM_SCAN, rt);
  wk_orch__sem_release(o, WK_ORCH__SEM_EXECUTOR, rt);
  wk_buf outputs = {0};
  wk_bytes data;
  if (rt->calls.n_retries == 0) {
    data = wk_task_rt_outputs_view(rt, &outputs); /* one call: not copied */
  } else { /* the outputs, then which calls were retried and why */
    wk_task_rt_collect_outputs(rt, &outputs);
    wk_task_rt_encode_retries(rt, &outputs);
    data = (wk_bytes){outputs.data, outputs.len};
  }
  /* the verdict: the IO scope bound overrules the calls; no calls is a success */
  bool ok = !rt->scope.exceeded && (rt->build.calls_total == 0 || rt->calls.ok);
  char msg[700];
  const char *message = NULL;
  wk_failure_code code = WK_FAIL_NONE; /* CALL_FAILED */
  if (rt->scope.exceeded) {
    snprintf(msg, sizeof msg,
             "the task's scratch directory holds %llu bytes, over io_scope_max_mb (%llu bytes)",
             (unsigned long long)rt->scope.bytes, (unsigned long long)o->cfg.io_scope_max_bytes);
    message = msg;
  } else if (rt->act.scratch_failed) {
    snprintf(msg, sizeof msg, "%s", rt->act.error);
    message = msg;
    code = WK_FAIL_IO_SCOPE_FAILED;
  } else if (rt->calls.spool_error[0]) {
    snprintf(msg, sizeof msg, "the outputs could not be spooled for the writer: %s",
             rt->calls.spool_error);
    message = msg;
    code = WK_FAIL_IO_SCOPE_FAILED;
  } else if (rt->calls.over_limit) {
    snprintf(msg, sizeof msg,
             "the outputs reached %llu bytes after %u of %llu calls, over "
             "max_inline_output_bytes (%zu bytes), so the task stopped there; send the outputs "
             "to a writer instead (result_handler file with output_dir set, redis with "
             "redis_addr, or postgres with postgres_dsn), or raise max_inline_output_bytes (the "
             "limit is at most max_message_bytes less 8 KiB, so that a result always fits)",
             (unsigned long long)rt->calls.output_bytes, rt->calls.done,
             (unsigned long long)rt->build.calls_total, o->cfg.max_inline_output_bytes);
    message = msg;
  } else if (!ok) {
    /* the counts add up: a call the failure policy stopped is "not run", never "ok" */
    unsigned long long total = rt->build.calls_total, done = rt->calls.done;
    unsigned long long not_run = total > done ? total - done : 0;
    int n = snprintf(msg, sizeof msg, "%u of %llu calls failed, %llu succeeded", rt->calls.failed,
                     total, done - rt->calls.failed);
    if (not_run && n > 0 && (size_t)n < sizeof msg) {
      n += snprintf(msg + n, sizeof msg - (size_t)n,
                    ", %llu not run (stopped by the failure policy)", not_run);
    }
    if (n > 0 && (size_t)n < sizeof msg)
      snprintf(msg + n, sizeof msg - (size_t)n, "; first: %s", rt->calls.first_failure);
    message = msg;
  }
  wk_phase_outcome out = {
      .ok = ok,
      .failure_code = code,
      .message = message,
      .data = data,
      .stats = rt->calls.stats,
  };
  phase_finished(o, rt, WK_PHASE_CALLS, &out);
  wk_buf_free(&outputs);
}

const wk_writer *wk_orch__enabled_writer(const wk_orch *o, const char *name) {
  for (size_t i = 0; i < sizeof o->cfg.writers / sizeof o->cfg.writers[0] && o->cfg.writers[i];
       i++) {
    if (strcmp(o->cfg.writers[i], name) == 0) return wk_writer_find(name);
  }
  return NULL;
}

/* The writer runs on the threadpool (it blocks on fsync and the network). */
static void on_writer_work(uv_work_t *w) {
  const wk_orch__job *j = w->data;
  wk_task_rt *rt = j->rt;
  wk_rt_writer *wr = &rt->writer;
  /* the outputs come from the spool, read in call order: never all in memory */
  wk_output_source source = {0};
  if (rt->act.spool) {
    if (wk_output_spool_finish(rt->act.spool, wr->error, sizeof wr->error) != 0) {
      wr->rc = -1;
      return;
    }
    source = wk_output_spool_source(rt->act.spool);
  }
  wk_writer_task t = {
      .settings = j->o->cfg.writer_settings,
      .task_id = rt->req.task_id,
      .function = rt->req.function,
      .epoch = rt->act.epoch,
      .options = rt->req.handler_options,
      .n_options = rt->req.n_handler_options,
      .source = rt->act.spool ? &source : NULL,
  };
  wr->rc = wr->impl->write(wr->impl, &t, &wr->results, wr->error, sizeof wr->error);
  if (wr->rc != 0) wk_writers_mask_secrets(t.settings, wr->error);
}

static void on_writer_done(uv_work_t *w, int status) {
  wk_task_rt *rt;
  wk_orch *o = wk_orch__job_end(w, &rt);
  if (!o) return;
  wk_orch__loop_now(o);
  /* the job held the plugin semaphore to its end, even past its task's convergence */
  wk_orch__sem_release_from_job(o, WK_ORCH__SEM_PLUGIN, rt);
  if (!wk_orch__converged(o, rt)) {
    wk_phase_outcome out = {.ok = true, .data = {rt->writer.results.data, rt->writer.results.len}};
    if (status != 0 || rt->writer.rc != 0) {
      out = (wk_phase_outcome){.ok = false,
                               .failure_code = WK_FAIL_PLUGIN_FAILED,
                               .message = status ? "the writer was cancelled" : rt->writer.error};
    }
    phase_finished(o, rt, WK_PHASE_WRITER, &out);
  }
  wk_task_rt_unref(rt);
  wk_orch__run_steps(o);
}

void wk_orch__run_writer(wk_orch *o, wk_task_rt *rt) {
  if (!rt->req.result_handler[0]) { /* outputs stay inline in the TaskResult */
    wk_phase_outcome out = {.ok = true};
    phase_finished(o, rt, WK_PHASE_WRITER, &out);
    return;
  }
  const wk_writer *w = wk_orch__enabled_writer(o, rt->req.result_handler);
  if (!w) {
    char err[300];
    snprintf(err, sizeof err,
             "no writer plugin named '%s' is enabled and configured on this worker (known: %s)",
             rt->req.result_handler, wk_writer_names());
    wk_phase_outcome out = {.ok = false, .failure_code = WK_FAIL_PLUGIN_NOT_FOUND, .message = err};
    phase_finished(o, rt, WK_PHASE_WRITER, &out);
    return;
  }
  if (!wk_orch__sem_acquire(o, WK_ORCH__SEM_PLUGIN, rt)) return;
  rt->writer.impl = w;
  /* the job holds the semaphore until its done callback: a task that converges while
   * its writer blocks (timeout, cancel) must not let another writer start beside it */
  wk_orch__sem_lend_to_job(rt, WK_ORCH__SEM_PLUGIN);
  wk_orch__queue_job(o, rt, 0, on_writer_work, on_writer_done);
}

/* ---- activation (threadpool) ------------------------------------------------------ */

/* Fills out[0..n) (n <= 64) with bytes of the kernel's random generator, drawn 4 KiB
 * at a time per thread: one getrandom per ~340 activations, not one each. -1 (errno
 * set) when the kernel gives none. */
static int scratch_random(unsigned char *out, size_t n) {
  static _Thread_local unsigned char pool[4096];
  static _Thread_local size_t left;
  WK_ASSERT(n <= 64);
  if (left < n) {
    ssize_t got = getrandom(pool, sizeof pool, 0);
    if (got < (ssize_t)n) {
      if (got >= 0) errno = EAGAIN;
      return -1;
    }
    left = (size_t)got;
  }
  left -= n;
  memcpy(out, pool + left, n);
  memset(pool + left, 0, n); /* a name is used once */
  return 0;
}

/* A task's scratch directory name: "<root>/<tag>.<task id>.<slot id>.<24 random hex>".
 * Only the name: the directory is made on the first use of ctx.scratch_dir (the
 * executor's SCRATCH, wk_orch_on_scratch), so a task that never uses it touches no
 * directory. The name is unique beside a leftover of the same task and slot id (slot ids
 * start afresh in each process) or of another worker sharing scratch_root, and cannot
 * be guessed by another task: with a root it cannot list, a function finds no other
 * task's directory. Writes the path into a->scratch_dir; 0, or -1 with a->code and
 * a->error. */
static int name_scratch_dir(wk_rt_activation *a, const char *task_id, uint64_t slot_id,
                            const wk_orch_config *cfg) {
  static const char digits[] = "0123456789abcdef";
  /* the task id is printable ASCII but may hold '/': keep the directory name safe */
  char safe[WK_TASK_ID_MAX + 1];
  size_t n = strlen(task_id);
  for (size_t i = 0; i <= n; i++) safe[i] = task_id[i] == '/' ? '_' : task_id[i];
  unsigned char rnd[12];
  char hex[2 * sizeof rnd + 1];
  if (scratch_random(rnd, sizeof rnd) != 0) {
    a->code = WK_FAIL_IO_SCOPE_FAILED;
    snprintf(a->error, sizeof a->error, "cannot name the task's scratch directory: %s",
             strerror(errno));
    return -1;
  }
  for (size_t i = 0; i < sizeof rnd; i++) {
    hex[2 * i] = digits[rnd[i] >> 4];
    hex[2 * i + 1] = digits[rnd[i] & 15];
  }
  hex[2 * sizeof rnd] = '\0';
  char slot_hex[17]; /* "%llx", without the formatter: once per task */
  size_t k = sizeof slot_hex - 1;
  slot_hex[k] = '\0';
  do {
    slot_hex[--k] = digits[slot_id & 15];
    slot_id >>= 4;
  } while (slot_id);
  /* "<root>/<tag>.<safe id>.<slot hex>.<hex>" */
  const char *parts[] = {cfg->scratch_root,
                         "/",
                         cfg->scratch_tag ? cfg->scratch_tag : "wk",
                         ".",
                         safe,
                         ".",
                         slot_hex + k,
                         ".",
                         hex};
  size_t len = 0;
  bool fits = true;
  for (size_t i = 0; i < sizeof parts / sizeof parts[0] && fits; i++) {
    size_t pl = strlen(parts[i]);
    fits = pl < sizeof a->scratch_dir - len;
    if (fits) memcpy(a->scratch_dir + len, parts[i], pl);
    len += pl;
  }
  a->scratch_dir[fits ? len : 0] = '\0';
  if (!fits) {
    a->code = WK_FAIL_IO_SCOPE_FAILED;
    snprintf(a->error, sizeof a->error,
             "cannot create the task's scratch directory under %s: the path is too long",
             cfg->scratch_root);
    return -1;
  }
  return 0;
}

/* The AuditGate (allow/deny lists); false with a->rc -1, its code and error. */
static bool audit_permits(wk_task_rt *rt, const wk_orch_config *cfg) {
  wk_rt_activation *a = &rt->act;
  a->rc = -1;
  if (wk_audit_permits(cfg->audit_allow, cfg->audit_deny, rt->req.function, rt->req.entrypoint,
                       a->error, sizeof a->error)) {
    return true;
  }
  a->code = WK_FAIL_ACTIVATION_FAILED;
  return false;
}

/* Activation without the threadpool, when nothing in it needs the disk: the AuditGate,
 * CURRENT from the code cache's memory, the scratch directory's name. True when
 * rt->act holds the outcome (rc 0, or -1 with code and error); false when only the
 * threadpool job can finish it (a code-cache miss or no cache, a pinned epoch, a
 * writer's spool file to create), and then it is run from the start there. */
static bool activate_from_memory(wk_task_rt *rt, uint64_t slot_id, const wk_orch_config *cfg) {
  if (rt->req.result_handler[0]) return false;
  wk_rt_activation *a = &rt->act;
  if (!audit_permits(rt, cfg)) return true;
  if (!wk_task_code_lookup(&cfg->calls.code, rt->req.function, rt->req.requested_epoch, &a->epoch,
                           a->code_dir, sizeof a->code_dir)) {
    return false;
  }
  if (name_scratch_dir(a, rt->req.task_id, slot_id, cfg) != 0) return true;
  a->rc = 0;
  return true;
}

/* Activation, on a threadpool thread: checks the AuditGate (allow/deny lists), resolves
 * and pins the epoch in code_root, names the scratch directory under scratch_root (made
 * on first use) and, for a task with a writer, creates its outputs spool.
 * Sets rt->act.rc 0, or -1 with its code and error. */
static void activate(wk_task_rt *rt, uint64_t slot_id, const wk_orch_config *cfg) {
  wk_rt_activation *a = &rt->act;
  if (!audit_permits(rt, cfg)) return;
  if (wk_task_code_resolve(&cfg->calls.code, rt->req.function, rt->req.requested_epoch, &a->epoch,
                           a->code_dir, sizeof a->code_dir, a->error, sizeof a->error) != 0) {
    a->code = WK_FAIL_ACTIVATION_FAILED;
    return;
  }
  if (name_scratch_dir(a, rt->req.task_id, slot_id, cfg) != 0) return;
  if (rt->req.result_handler[0]) { /* its outputs go to a file beside the scratch directory */
    char path[PATH_MAX + 16];
    snprintf(path, sizeof path, "%s.outputs", a->scratch_dir);
    a->spool = wk_output_spool_create(path, a->error, sizeof a->error);
    if (!a->spool) {
      a->code = WK_FAIL_IO_SCOPE_FAILED;
      return;
    }
  }
  a->rc = 0;
}

static void on_activation_work(uv_work_t *w) {
  const wk_orch__job *j = w->data;
  const wk_orch_config *cfg = &j->o->cfg;
  activate(j->rt, j->slot_id, cfg);
}

void wk_orch__activation_finished(wk_orch *o, wk_task_rt *rt, uint64_t slot_id, int status) {
  WK_ASSERT(slot_id != 0); /* PREPARE_ACTIVATION names the task's slot */
  bool converged = wk_orch__converged(o, rt);
  if (!converged && status == 0 && rt->act.rc == 0) wk_task_code_adopt(rt, &o->cfg.calls.code);
  wk_code_pins_release(o->pins, rt->req.function); /* pinned now, or not needed */
  if (!converged) {
    wk_transition_result tr;
    if (status == 0 && rt->act.rc == 0) {
      wk_core_handle_activation_prepared(o->core, rt->req.task_id, strlen(rt->req.task_id), slot_id,
                                         rt->act.epoch, o->now_ms, &tr);
    } else {
      const char *why = status ? "activation was cancelled" : rt->act.error;
      wk_core_handle_activation_failed(o->core, rt->req.task_id, strlen(rt->req.task_id),
                                       status ? WK_FAIL_ACTIVATION_FAILED : rt->act.code, why,
                                       o->now_ms, &tr);
    }
    wk_orch__exec_cmds(o, &tr.cmds);
  }
}

static void on_activation_done(uv_work_t *w, int status) {
  uint64_t slot_id = ((const wk_orch__job *)w->data)->slot_id;
  wk_task_rt *rt;
  wk_orch *o = wk_orch__job_end(w, &rt); /* NULL: the task was converged at close */
  if (!o) return;
  wk_orch__loop_now(o);
  wk_orch__activation_finished(o, rt, slot_id, status);
  wk_task_rt_unref(rt);
  wk_orch__run_steps(o);
}

void wk_orch__start_activation(wk_orch *o, wk_task_rt *rt, uint64_t slot_id) {
  /* held before anything is resolved: no epoch of the function is removed until
   * activation has pinned the one it resolved (wk_orch__activation_finished) */
  wk_code_pins_hold(o->pins, rt->req.function);
  if (activate_from_memory(rt, slot_id, &o->cfg)) { /* no threadpool round trip */
    wk_orch__defer_step(o, WK_ORCH__STEP_ACTIVATED, rt)->slot_id = slot_id;
    return;
  }
  wk_orch__queue_job(o, rt, slot_id, on_activation_work, on_activation_done);
}

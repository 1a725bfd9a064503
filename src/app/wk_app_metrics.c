/* wk_app_metrics.c: the worker's series (see wk_app_metrics.h). */
#include "app/wk_app_metrics.h"

#include <stdlib.h>

#include "adapters/wk_grpc_client.h"
#include "core/wk_types.h"

/* Counters fed from cumulative snapshots: the value at the previous sample. */
typedef struct sampled_counters {
  wk_pool_stats pool;
  wk_etcd_publisher_stats etcd;
  wk_shadow_stats shadow;
  wk_grpc_conn_stats conns;
} sampled_counters;

struct wk_app_metrics {
  wk_metrics *reg;
  /* gauges */
  wk_metric *info;  /* {deployment,service,usage_service}: always 1 */
  wk_metric *slots; /* {state} */
  wk_metric *task_slots;
  wk_metric *ready;
  wk_metric *draining;
  wk_metric *live_tasks;
  wk_metric *open_streams;
  wk_metric *executors_ready;
  wk_metric *etcd_registered;
  wk_metric *shadow_queued;
  wk_metric *connections_open;
  wk_metric *accept_blocked;
  /* counters */
  wk_metric *rpcs;           /* {method,code} */
  wk_metric *tasks_finished; /* {state,failure_code} */
  wk_metric *calls;          /* {outcome} */
  wk_metric *call_retries;
  wk_metric *call_cpu;
  wk_metric *executor_starts;
  wk_metric *executor_kills; /* {reason} */
  wk_metric *executor_exits;
  wk_metric *executor_recycles; /* {reason} */
  wk_metric *executor_idle_stops;
  wk_metric *executor_output_lines;   /* logged lines of executors' stdout/stderr */
  wk_metric *executor_output_dropped; /* {reason}: bytes not logged */
  wk_metric *etcd_puts;               /* {outcome} */
  wk_metric *etcd_keepalives;         /* {outcome} */
  wk_metric *etcd_leases_lost;
  wk_metric *shadow_requests; /* {outcome} */
  wk_metric *connections_accepted;
  wk_metric *sends_corked;
  wk_metric *connections_refused; /* {reason} */
  /* histograms */
  wk_metric *phase_duration; /* {phase} */
  sampled_counters last;
};

/* Phase and task durations (ms): sub-millisecond no-op tasks to hour-long ones. */
static const double k_duration_bounds_ms[] = {1,     2.5,   5,     10,     25,      50,
                                              100,   250,   500,   1000,   2500,    5000,
                                              10000, 30000, 60000, 300000, 1800000, 3600000};

const char *wk_app_usage_service(const char *service, const char *usage_service) {
  return usage_service && usage_service[0] ? usage_service : service ? service : "";
}

wk_app_metrics *wk_app_metrics_new(const wk_app_metrics_info *info) {
  wk_app_metrics *m = calloc(1, sizeof *m);
  if (!m) return NULL;
  m->reg = wk_metrics_new(0);
  if (!m->reg) {
    free(m);
    return NULL;
  }
  wk_metrics *r = m->reg;
  static const char *const state[] = {"state"};
  static const char *const outcome[] = {"outcome"};
  static const char *const reason[] = {"reason"};
  static const char *const method_code[] = {"method", "code"};
  static const char *const state_code[] = {"state", "failure_code"};
  static const char *const phase[] = {"phase"};

  static const char *const who[] = {"deployment", "service", "usage_service"};
  m->info = wk_metrics_gauge(
      r, "worker_info",
      "1, labelled with the worker's Profile: deployment, service and the service usage is "
      "accounted to.",
      3, who);
  if (m->info) {
    const char *service = info && info->service ? info->service : "";
    wk_metric_set(
        m->info,
        (const char *const[]){info && info->deployment ? info->deployment : "", service,
                              wk_app_usage_service(service, info ? info->usage_service : NULL)},
        1);
  }
  m->slots = wk_metrics_gauge(r, "worker_slots", "Task slots by state (free, reserved, running).",
                              1, state);
  m->task_slots = wk_metrics_gauge(r, "worker_task_slots", "Task slots configured.", 0, NULL);
  m->ready = wk_metrics_gauge(r, "worker_ready", "1 when the worker admits new tasks.", 0, NULL);
  m->draining = wk_metrics_gauge(r, "worker_draining", "1 while the worker drains.", 0, NULL);
  m->live_tasks =
      wk_metrics_gauge(r, "worker_live_tasks", "Tasks submitted and not yet terminal.", 0, NULL);
  m->open_streams =
      wk_metrics_gauge(r, "worker_watch_streams", "WatchTasks streams open.", 0, NULL);
  m->executors_ready = wk_metrics_gauge(r, "worker_executors_ready",
                                        "Executor processes able to take calls.", 0, NULL);
  m->rpcs = wk_metrics_counter(r, "worker_rpcs_total", "RPCs answered, by method and status code.",
                               2, method_code);
  m->tasks_finished =
      wk_metrics_counter(r, "worker_tasks_finished_total",
                         "Tasks converged, by terminal state and failure code.", 2, state_code);
  m->phase_duration = wk_metrics_histogram(
      r, "worker_phase_duration_ms",
      "Wall time of the phases of finished tasks (builder, calls, writer) and of the whole task (task).",
      1, phase, sizeof k_duration_bounds_ms / sizeof k_duration_bounds_ms[0], k_duration_bounds_ms);
  m->calls = wk_metrics_counter(r, "worker_calls_total", "Calls of finished tasks, by outcome.", 1,
                                outcome);
  m->call_retries =
      wk_metrics_counter(r, "worker_call_retries_total", "Call attempts retried.", 0, NULL);
  m->call_cpu =
      wk_metrics_counter(r, "worker_call_cpu_seconds_total",
                         "CPU time the executors spent in calls of finished tasks.", 0, NULL);
  m->executor_starts =
      wk_metrics_counter(r, "worker_executor_starts_total", "Executor processes started.", 0, NULL);
  m->executor_exits = wk_metrics_counter(r, "worker_executor_exits_total",
                                         "Executor processes that exited.", 0, NULL);
  m->executor_kills = wk_metrics_counter(
      r, "worker_executor_kills_total",
      "Executors killed, by reason (heartbeat: missed heartbeats; wedged: a call past its deadline or "
      "cancel grace; protocol: a bad frame).",
      1, reason);
  m->executor_recycles = wk_metrics_counter(
      r, "worker_executor_recycles_total",
      "Executors retired and replaced, by reason (calls: max_calls_per_executor; rss: max_executor_rss_mb; "
      "isolation: executor_isolation=function made room for another function).",
      1, reason);
  m->executor_idle_stops =
      wk_metrics_counter(r, "worker_executor_idle_stops_total",
                         "Executors above the minimum stopped when idle.", 0, NULL);
  m->executor_output_lines =
      wk_metrics_counter(r, "worker_executor_output_lines_total",
                         "Lines of the executors' stdout and stderr logged.", 0, NULL);
  m->executor_output_dropped = wk_metrics_counter(
      r, "worker_executor_output_dropped_bytes_total",
      "Bytes of the executors' stdout and stderr not logged, by reason (rate: over "
      "executor_output_bytes_per_s or executor_output_lines_per_s; truncated: cut off lines "
      "longer than executor_output_line_max).",
      1, reason);
  m->etcd_registered = wk_metrics_gauge(r, "worker_etcd_registered",
                                        "1 when the last registration put succeeded.", 0, NULL);
  m->etcd_puts = wk_metrics_counter(r, "worker_etcd_puts_total",
                                    "Registration puts to etcd, by outcome.", 1, outcome);
  m->etcd_keepalives = wk_metrics_counter(
      r, "worker_etcd_keepalives_total", "Lease keep-alives sent to etcd, by outcome.", 1, outcome);
  m->etcd_leases_lost = wk_metrics_counter(r, "worker_etcd_leases_lost_total",
                                           "Registration leases found gone.", 0, NULL);
  m->shadow_requests = wk_metrics_counter(
      r, "worker_shadow_requests_total",
      "Submissions offered to the shadow target, by outcome (mirrored, failed, dropped, sampled_out).",
      1, outcome);
  m->shadow_queued = wk_metrics_gauge(r, "worker_shadow_queued",
                                      "Mirrored submissions waiting to be sent.", 0, NULL);
  m->connections_open =
      wk_metrics_gauge(r, "worker_connections_open",
                       "gRPC TCP connections open (handed to gRPC, not yet closed).", 0, NULL);
  m->accept_blocked = wk_metrics_gauge(
      r, "worker_accept_blocked",
      "1 while the worker is out of file descriptors and cannot accept connections.", 0, NULL);
  m->connections_accepted = wk_metrics_counter(r, "worker_connections_accepted_total",
                                               "gRPC TCP connections accepted.", 0, NULL);
  m->connections_refused = wk_metrics_counter(
      r, "worker_connections_refused_total",
      "gRPC TCP connections closed at once, by reason (max_connections: the cap was reached; "
      "fd_limit: the worker was out of file descriptors).",
      1, reason);
  m->sends_corked = wk_metrics_counter(
      r, "worker_grpc_sends_corked_total",
      "gRPC answers started while their connection was corked: answers to one connection "
      "started together leave in one send.",
      0, NULL);
  if (!m->connections_open || !m->accept_blocked || !m->connections_accepted ||
      !m->connections_refused || !m->sends_corked) {
    wk_app_metrics_free(m);
    return NULL;
  }
  if (!m->info || !m->slots || !m->task_slots || !m->ready || !m->draining || !m->live_tasks ||
      !m->open_streams || !m->executors_ready || !m->rpcs || !m->tasks_finished ||
      !m->phase_duration || !m->calls || !m->call_retries || !m->call_cpu || !m->executor_starts ||
      !m->executor_exits || !m->executor_kills || !m->executor_recycles ||
      !m->executor_idle_stops || !m->executor_output_lines || !m->executor_output_dropped ||
      !m->etcd_registered || !m->etcd_puts || !m->etcd_keepalives || !m->etcd_leases_lost ||
      !m->shadow_requests || !m->shadow_queued) {
    wk_app_metrics_free(m);
    return NULL;
  }
  return m;
}

void wk_app_metrics_free(wk_app_metrics *m) {
  if (!m) return;
  wk_metrics_free(m->reg);
  free(m);
}

wk_metrics *wk_app_metrics_registry(wk_app_metrics *m) { return m->reg; }

void wk_app_metrics_on_rpc_status(void *ud, const char *method, int code) {
  wk_app_metrics *m = ud;
  wk_metric_inc(m->rpcs,
                (const char *const[]){method, wk_grpc_status_name((grpc_status_code)code)});
}

static void observe_phase(wk_metric *h, const char *name, const wk_task_statistic *s, wk_phase p) {
  int64_t ms;
  if (!wk_task_phase_ms(s, p, s->finished_ms, &ms)) return; /* the phase never ran */
  wk_metric_observe(h, (const char *const[]){name}, (double)ms);
}

void wk_app_metrics_on_task_finished(void *ud, const wk_task_result *r) {
  wk_app_metrics *m = ud;
  const wk_task_statistic *s = &r->statistic;
  wk_metric_inc(m->tasks_finished, (const char *const[]){wk_task_state_name(r->state),
                                                         wk_failure_code_name(r->failure_code)});
  observe_phase(m->phase_duration, "builder", s, WK_PHASE_BUILDER);
  observe_phase(m->phase_duration, "calls", s, WK_PHASE_CALLS);
  observe_phase(m->phase_duration, "writer", s, WK_PHASE_WRITER);
  if (s->finished_ms >= s->accepted_ms)
    wk_metric_observe(m->phase_duration, (const char *const[]){"task"},
                      (double)(s->finished_ms - s->accepted_ms));
  const wk_call_stats *c = &s->calls;
  wk_metric_add(m->calls, (const char *const[]){"succeeded"}, (double)c->calls_succeeded);
  wk_metric_add(m->calls, (const char *const[]){"failed"}, (double)c->calls_failed);
  wk_metric_add(m->call_retries, NULL, (double)c->calls_retried);
  wk_metric_add(m->call_cpu, NULL, (double)c->executor_cpu_us / 1e6);
}

/* Adds what a cumulative count grew by since the previous sample. */
static void add_delta(wk_metric *c, const char *label, uint64_t now, uint64_t *last) {
  if (now > *last) {
    const char *const values[] = {label};
    wk_metric_add(c, label ? values : NULL, (double)(now - *last));
  }
  *last = now;
}

static void sample_pool(wk_app_metrics *m, const wk_pool_stats *p) {
  wk_pool_stats *l = &m->last.pool;
  add_delta(m->executor_starts, NULL, p->spawned, &l->spawned);
  add_delta(m->executor_exits, NULL, p->exited, &l->exited);
  add_delta(m->executor_kills, "heartbeat", p->killed_heartbeat, &l->killed_heartbeat);
  add_delta(m->executor_kills, "wedged", p->killed_wedged, &l->killed_wedged);
  add_delta(m->executor_kills, "protocol", p->killed_protocol, &l->killed_protocol);
  add_delta(m->executor_recycles, "calls", p->recycled_calls, &l->recycled_calls);
  add_delta(m->executor_recycles, "rss", p->recycled_rss, &l->recycled_rss);
  add_delta(m->executor_recycles, "isolation", p->recycled_isolation, &l->recycled_isolation);
  add_delta(m->executor_idle_stops, NULL, p->stopped_idle, &l->stopped_idle);
  add_delta(m->executor_output_lines, NULL, p->output.lines, &l->output.lines);
  add_delta(m->executor_output_dropped, "rate", p->output.dropped_bytes, &l->output.dropped_bytes);
  add_delta(m->executor_output_dropped, "truncated", p->output.truncated_bytes,
            &l->output.truncated_bytes);
}

static void sample_etcd(wk_app_metrics *m, const wk_etcd_publisher_stats *e) {
  wk_etcd_publisher_stats *l = &m->last.etcd;
  add_delta(m->etcd_puts, "ok", e->puts_ok, &l->puts_ok);
  add_delta(m->etcd_puts, "failed", e->puts_failed, &l->puts_failed);
  add_delta(m->etcd_keepalives, "ok", e->keepalives_ok, &l->keepalives_ok);
  add_delta(m->etcd_keepalives, "failed", e->keepalives_failed, &l->keepalives_failed);
  add_delta(m->etcd_leases_lost, NULL, e->leases_lost, &l->leases_lost);
  wk_metric_set(m->etcd_registered, NULL, e->registered ? 1 : 0);
}

static void sample_shadow(wk_app_metrics *m, const wk_shadow_stats *s) {
  wk_shadow_stats *l = &m->last.shadow;
  add_delta(m->shadow_requests, "mirrored", s->mirrored, &l->mirrored);
  add_delta(m->shadow_requests, "failed", s->failed, &l->failed);
  add_delta(m->shadow_requests, "dropped", s->dropped, &l->dropped);
  add_delta(m->shadow_requests, "sampled_out", s->sampled_out, &l->sampled_out);
  wk_metric_set(m->shadow_queued, NULL, s->queued);
}

static void sample_conns(wk_app_metrics *m, const wk_grpc_conn_stats *c) {
  wk_grpc_conn_stats *l = &m->last.conns;
  add_delta(m->connections_accepted, NULL, c->accepted, &l->accepted);
  add_delta(m->sends_corked, NULL, c->sends_corked, &l->sends_corked);
  add_delta(m->connections_refused, "max_connections", c->refused_max_connections,
            &l->refused_max_connections);
  add_delta(m->connections_refused, "fd_limit", c->refused_fd_limit, &l->refused_fd_limit);
  wk_metric_set(m->connections_open, NULL, c->open);
  wk_metric_set(m->accept_blocked, NULL, c->accept_blocked ? 1 : 0);
}

void wk_app_metrics_sample_now(wk_app_metrics *m, const wk_app_metrics_sample *s) {
  const wk_heartbeat *hb = &s->heartbeat;
  wk_metric_set(m->slots, (const char *const[]){"free"}, hb->free);
  wk_metric_set(m->slots, (const char *const[]){"reserved"}, hb->reserved);
  wk_metric_set(m->slots, (const char *const[]){"running"}, hb->running);
  wk_metric_set(m->task_slots, NULL, hb->task_slots);
  wk_metric_set(m->ready, NULL, hb->ready ? 1 : 0);
  wk_metric_set(m->draining, NULL, hb->draining ? 1 : 0);
  wk_metric_set(m->live_tasks, NULL, s->live_tasks);
  wk_metric_set(m->open_streams, NULL, s->open_streams);
  wk_metric_set(m->executors_ready, NULL, s->executors_ready);
  if (s->pool) sample_pool(m, s->pool);
  if (s->etcd) sample_etcd(m, s->etcd);
  if (s->shadow) sample_shadow(m, s->shadow);
  if (s->conns) sample_conns(m, s->conns);
}

/* wk_app_metrics.h: the Worker's Prometheus metrics, on top of the registry of
 * adapters/wk_metrics.h. This file names every series the worker exposes; the
 * components that own the facts feed them:
 *
 *   - the gRPC server's status hook: worker_rpcs_total{method,code} (any thread);
 *   - the orchestrator's task-finished hook: worker_tasks_finished_total{state,
 *     failure_code}, worker_phase_duration_ms{phase}, calls, retries, CPU (loop thread);
 *   - wk_app_metrics_sample() from the app's timer (loop thread): slot gauges from the
 *     core's heartbeat, and the cumulative counters of the executor pool, the etcd
 *     publisher, the shadow forwarder and the gRPC port's connections, added as deltas
 *     since the previous sample.
 *
 * Every metric name and label value is bounded (methods, codes, states, reasons are
 * closed sets), so no series can grow without limit. */
#ifndef WK_APP_METRICS_H
#define WK_APP_METRICS_H

#include <stdbool.h>
#include <stdint.h>

#include "adapters/wk_etcd_publisher.h"
#include "adapters/wk_executor_pool.h"
#include "adapters/wk_grpc_listener.h"
#include "adapters/wk_metrics.h"
#include "adapters/wk_shadow.h"
#include "core/wk_core.h"

typedef struct wk_app_metrics wk_app_metrics;

/* One sample of the state other components own (NULL pointers: not running). */
typedef struct wk_app_metrics_sample {
  wk_heartbeat heartbeat;              /* the slot table */
  uint32_t live_tasks;                 /* submitted, not yet terminal */
  uint32_t open_streams;               /* WatchTasks streams */
  const wk_pool_stats *pool;           /* executor pool counters */
  uint32_t executors_ready;            /* executors able to take calls */
  const wk_etcd_publisher_stats *etcd; /* NULL when stand-alone */
  const wk_shadow_stats *shadow;       /* NULL without a shadow target */
  const wk_grpc_conn_stats *conns;     /* the gRPC port's connections; NULL: not serving */
} wk_app_metrics_sample;

/* Who the worker is (the Profile's names, as the design says: Deployment an
 * observability label, Service the Prometheus service name, UsageService the service
 * usage is accounted to). Borrowed for the call. */
typedef struct wk_app_metrics_info {
  const char *deployment;    /* "block" or "bundle" */
  const char *service;       /* e.g. "worker" */
  const char *usage_service; /* "" = the service */
} wk_app_metrics_info;

/** Creates the registry and registers every worker metric, with worker_info{deployment,
 * service, usage_service} 1 from `info` (NULL names count as ""). NULL when out of
 * memory. */
wk_app_metrics *wk_app_metrics_new(const wk_app_metrics_info *info);

/** The service usage is accounted to: usage_service, or service when that is unset. */
const char *wk_app_usage_service(const char *service, const char *usage_service);

/** Frees the metrics; stop the server serving its registry first. NULL is a no-op. */
void wk_app_metrics_free(wk_app_metrics *m);

/** The registry (owned by m), to serve with wk_metrics_server_start(). */
wk_metrics *wk_app_metrics_registry(wk_app_metrics *m);

/** Counts one RPC answered with `code` (a grpc_status_code). Any thread; `ud` is the
 * wk_app_metrics (the signature of the gRPC server's status hook). */
void wk_app_metrics_on_rpc_status(void *ud, const char *method, int code);

/** Counts one converged task: its terminal state and failure code, its phase
 * durations, calls, retries and executor CPU. Loop thread; `ud` is the wk_app_metrics
 * (the signature of the orchestrator's task-finished hook). */
void wk_app_metrics_on_task_finished(void *ud, const wk_task_result *r);

/** Sets the gauges and advances the counters from a sample (loop thread only). */
void wk_app_metrics_sample_now(wk_app_metrics *m, const wk_app_metrics_sample *s);

#endif

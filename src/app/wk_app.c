/* wk_app.c: wiring and the start-up / shutdown sequence (DESIGN.md §7):
 * validate → code store → executor pool → gRPC server bound → ready → serve (READY=1
 * to systemd); SIGTERM/SIGINT (STOPPING=1) → health NOT_SERVING and `draining` put to
 * etcd → once etcd acknowledged it, or after drain_publish_timeout_ms, new slots and
 * submits are refused → wait for running tasks up to drain_timeout_ms (counted from
 * the signal) → converge the rest WORKER_SHUTDOWN → deliver terminal events → stop
 * gRPC → stop executors → exit 0. A second signal skips the wait. Everything after the
 * drain fits in shutdown_grace_ms: the signal thread exits the process (status 1) at
 * that deadline if the steps have not finished, so a supervisor's stop timeout of
 * drain_timeout_ms + shutdown_grace_ms (and a margin) is never hit. */
#include "app/wk_app.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <grpc/grpc.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include "adapters/wk_absl_locks.h"
#include "adapters/wk_cgroup.h"
#include "adapters/wk_executor_pool.h"
#include "adapters/wk_meminfo.h"
#include "adapters/wk_reaper.h"
#include "adapters/wk_sdnotify.h"
#include "app/wk_admission.h"
#include "adapters/wk_grpc_server.h"
#include "adapters/wk_netaddr.h"
#include "app/wk_config.h"
#include "app/wk_executor_env.h"
#include "app/wk_executor_user.h"
#include "app/wk_fs.h"
#include "app/wk_rundir.h"
#include "lib/wk_log.h"
#include "app/wk_app_metrics.h"
#include "app/wk_status.h"
#include "adapters/wk_pem.h"
#include "app/wk_wire.h"
#include "adapters/wk_etcd_publisher.h"
#include "adapters/wk_shadow.h"
#include "app/wk_code_registry.h"
#include "app/wk_deploy.h"
#include "app/wk_orchestrator.h"
#include "app/wk_profile.h"
#include "plugins/wk_writers.h"

/* ---- the running app ------------------------------------------------------------ */

typedef enum app_phase {
  APP_STARTING,
  APP_SERVING,
  APP_ANNOUNCING, /* draining said (health, etcd), tasks still admitted: see begin_drain */
  APP_DRAINING,
  APP_FLUSHING,
  APP_STOPPING
} app_phase;

typedef struct wk_app {
  const wk_app_config *cfg;
  uv_loop_t loop;
  wk_orch *orch;
  wk_pool *pool;
  wk_cgroup *cgroup;         /* per-executor control groups; NULL = none */
  wk_mem_floor memory_floor; /* admission_memory_floor */
  bool admission_paused;     /* under it (with hysteresis) at the last sample */
  int64_t memory_sampled_ms;
  wk_grpc_server *server;
  /* the loop's answers leave the gRPC server's outbox once per loop turn (after the
   * turn's callbacks, and before the loop waits): wk_grpc_server_defer_on_this_thread */
  uv_check_t grpc_flush_after;
  uv_prepare_t grpc_flush_before;
  uv_async_t signal_async; /* a stop signal, or the publisher's acknowledged put */
  uv_timer_t phase_timer;
  uv_timer_t watchdog_timer; /* WATCHDOG=1 to systemd; started only with WATCHDOG_USEC */
  uint64_t watchdog_usec;    /* the service manager's watchdog timeout; 0 = none */
  bool drain_announced;      /* health NOT_SERVING and `draining` handed to the publisher */
  uint64_t drain_gen;        /* the publisher's generation of the first draining heartbeat */
  int signals_seen;
  int signals_handled;
  pthread_mutex_t mu;
  app_phase phase;
  int64_t phase_started_ms;
  char scratch_root[WK_CONFIG_PATH_MAX];
  bool own_scratch_root;
  char run_tag[WK_RUNDIR_TAG_MAX]; /* prefix of what this worker makes on disk */
  const char *tmp_dir;             /* $TMPDIR, or /tmp */
  uint32_t exec_uid, exec_gid;     /* executor_user's ids; 0 = the worker's own */
  uint32_t capacity;               /* last executor capacity handed to the dispatcher */
  bool executors_unavailable;      /* the pool says executors cannot start (last seen) */
  bool accept_blocked;             /* the gRPC port is out of descriptors (last seen) */
  uint64_t nofile;                 /* the soft RLIMIT_NOFILE, after raising it to the hard one */
  const wk_profile *profile;
  wk_etcd_publisher *publisher; /* NULL when stand-alone */
  wk_shadow *shadow;            /* NULL without shadow_target_addr */
  int64_t shadow_logged_ms;
  char advertise_addr[WK_CONFIG_ADDR_MAX];
  wk_app_metrics *metrics; /* NULL without metrics_addr */
  wk_metrics_server *metrics_server;
  int64_t metrics_sampled_ms;
  wk_deploy *deploy;   /* DeployCode / SetCurrentEpoch (answers even when off) */
  uv_work_t code_scan; /* the registry's "code" field, read on the threadpool */
  bool code_scan_running, code_scan_due;
  bool registration_waits_code; /* nothing is published until the first scan is in */
  int64_t code_scanned_ms;
  char *code_text; /* the scan's result, handed to the publisher */
  bool code_truncated;
  char *code_last; /* the last scan's result, for the status page (loop thread) */
  bool code_last_truncated;
  wk_status *status;                    /* the status page's document; NULL = off */
  char status_addr[WK_CONFIG_ADDR_MAX]; /* host:port of the page (the bound port) */
  /* what start-up made, for the one cleanup path */
  char code_root[PATH_MAX];                  /* absolute: executors load code by path */
  wk_builder_registry builders;              /* the Profile's call builders */
  wk_writer_settings writer_settings;        /* shared by every writer */
  const char *writers[WK_PROFILE_NAMES_MAX]; /* writers enabled and configured, NULL-terminated */
  bool loop_open;                            /* loop, mutex and the two handles initialised */
  bool grpc_started;                         /* grpc_init called */
  pthread_t sig_thread;
  int64_t exit_deadline_ms; /* CLOCK_MONOTONIC; 0 = none yet; under mu */
  bool sig_thread_quit;     /* under mu: the next SIGUSR2 ends the signal thread */
  bool sig_thread_started;
} wk_app;

/* Not settings: how the app paces itself and sizes what it hands to its pieces. The
 * tunables are settings (app/wk_config_table.c). */
enum {
  PHASE_TICK_MS = 20,             /* the phase timer: capacity sync, start-up, drain */
  METRICS_SAMPLE_MS = 250,        /* gauges and snapshot counters lag at most this */
  MEMORY_SAMPLE_MS = 250,         /* available memory against admission_memory_floor */
  SHADOW_STATS_LOG_MS = 30000,    /* a shadow_stats log line this often */
  READY_WAIT_MS = 15000,          /* serve once `executors` are ready, or after this anyway */
  FLUSH_WAIT_MS = 2000,           /* after the drain, watchers get their terminal events (at
                                  most a quarter of shutdown_grace_ms) */
  DISPATCH_TASK_HEADROOM = 16,    /* dispatcher tasks beyond task_slots: ended, not yet removed */
  STACK_WAIT_MS = 1000,           /* a cancelled call's stack is awaited this long, then killed */
  ESCALATION_MARGIN_MS = 500,     /* the pool's deadline comes this much before the dispatcher's */
  STREAM_LOW_WATER = 512,         /* refill a streaming builder's calls below this many queued */
  STREAM_BATCH = 1024,            /* calls added per refill */
  FRAME_OVERHEAD_BYTES = 1 << 20, /* an executor frame: the largest message and its envelope */
  MAX_WATCH_TASKS = 1024,         /* task_ids per WatchTasks request */
  MAX_STREAM_QUEUE = 4096,        /* queued messages per stream before a send fails */
};

static sigset_t stop_signals;

static int64_t monotonic_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Waits for the stop signals; once the drain has ended (exit_deadline_ms set), also
 * for the end of shutdown_grace_ms, at which it exits the process whatever still runs
 * (the loop stuck, an executor not yet reaped). */
static void *signal_thread(void *arg) {
  wk_app *app = arg;
  for (;;) {
    int sig = 0;
    pthread_mutex_lock(&app->mu);
    int64_t deadline = app->exit_deadline_ms;
    pthread_mutex_unlock(&app->mu);
    if (deadline == 0) {
      if (sigwait(&stop_signals, &sig) != 0) continue;
    } else {
      int64_t left = deadline - monotonic_ms();
      if (left <= 0) {
        wk_log(WK_LOG_ERROR, "shutdown_grace_exceeded",
               "not stopped %" PRId64 " ms after the drain (shutdown_grace_ms): exiting now",
               app->cfg->shutdown_grace_ms);
        wk_reaper_sweep(false); /* what executors left: not outliving the worker */
        _exit(1);
      }
      struct timespec ts = {.tv_sec = left / 1000, .tv_nsec = (long)(left % 1000) * 1000000};
      sig = sigtimedwait(&stop_signals, NULL, &ts);
      if (sig < 0) continue; /* timed out (or EINTR): look at the deadline again */
    }
    if (sig == SIGUSR2) {
      pthread_mutex_lock(&app->mu);
      bool quit = app->sig_thread_quit;
      pthread_mutex_unlock(&app->mu);
      if (quit) return NULL; /* our own wake-up at exit */
      continue;              /* the exit deadline was set */
    }
    pthread_mutex_lock(&app->mu);
    app->signals_seen++;
    pthread_mutex_unlock(&app->mu);
    uv_async_send(&app->signal_async);
  }
}

static int64_t app_now(wk_app *app) {
  uv_update_time(&app->loop);
  return (int64_t)uv_now(&app->loop);
}

static void enter(wk_app *app, app_phase phase) {
  app->phase = phase;
  app->phase_started_ms = app_now(app);
}

static void on_pool_stopped(void *arg) {
  wk_app *app = arg;
  app->pool = NULL;
  wk_status_close(app->status); /* its last document says "stopping" */
  uv_close((uv_handle_t *)&app->phase_timer, NULL);
  uv_close((uv_handle_t *)&app->watchdog_timer, NULL);
  uv_close((uv_handle_t *)&app->signal_async, NULL);
  uv_close((uv_handle_t *)&app->grpc_flush_after, NULL);
  uv_close((uv_handle_t *)&app->grpc_flush_before, NULL);
  wk_grpc_server_defer_on_this_thread(false);
}

/* The registration value follows the slot table (the publisher coalesces). Returns the
 * publisher's generation of the value handed over (0: nothing is published). */
static uint64_t publish(wk_app *app) {
  if (!app->publisher || !app->orch || app->registration_waits_code) return 0;
  wk_heartbeat hb = wk_orch_heartbeat(app->orch);
  wk_etcd_heartbeat eh = {
      .task_slots = hb.task_slots,
      .reserved = hb.reserved,
      .running = hb.running,
      .free = hb.free,
      .ready = hb.ready && !app->executors_unavailable && !app->accept_blocked,
      .draining = hb.draining || app->drain_announced, /* announced before the core drains */
  };
  return wk_etcd_publisher_update(app->publisher, &eh);
}

/* The publisher's thread, after each put etcd acknowledged: the loop looks whether the
 * drain may go on (on_signal runs the phase timer's step). */
static void on_published(void *ud) {
  wk_app *app = ud;
  uv_async_send(&app->signal_async);
}

/* The status page's address as others reach it: metrics_addr's host with the bound
 * port, or, when it listens on every interface, the advertised address's host. */
static void registry_status_addr(const wk_app *app, char *out, size_t len) {
  const char *colon = strrchr(app->status_addr, ':');
  size_t host_len = colon ? (size_t)(colon - app->status_addr) : 0;
  const char *host = app->status_addr;
  bool any = host_len == 0 || (host_len == 7 && strncmp(host, "0.0.0.0", 7) == 0) ||
             (host_len == 4 && strncmp(host, "[::]", 4) == 0);
  if (!any || !colon) {
    snprintf(out, len, "%s", app->status_addr);
    return;
  }
  const char *acolon = strrchr(app->advertise_addr, ':');
  int ahost = acolon ? (int)(acolon - app->advertise_addr) : (int)strlen(app->advertise_addr);
  snprintf(out, len, "%.*s%s", ahost, app->advertise_addr, colon);
}

/* ---- the registry's "code" field -------------------------------------------------- */

static void code_scan_work(uv_work_t *w) {
  wk_app *app = w->data;
  app->code_text = wk_code_registry_build(app->code_root, (size_t)app->cfg->registry_code_max_bytes,
                                          &app->code_truncated);
}

static void follow_code(wk_app *app, int64_t now);

static void code_scan_done(uv_work_t *w, int status) {
  wk_app *app = w->data;
  app->code_scan_running = false;
  if (status == 0 && app->publisher && app->code_text)
    wk_etcd_publisher_set_code(app->publisher, app->code_text, app->code_truncated);
  if (status == 0 && app->code_text) {
    free(app->code_last);
    app->code_last = app->code_text;
    app->code_last_truncated = app->code_truncated;
  } else {
    free(app->code_text);
  }
  app->code_text = NULL;
  if (app->registration_waits_code) {
    /* the first value goes out now: with the code, or without it when the scan failed */
    app->registration_waits_code = false;
    publish(app);
  }
  if (app->code_scan_due) follow_code(app, app_now(app));
}

/* Reads which code the store holds (for the etcd record and the status page) again
 * every heartbeat_interval_ms (so a local
 * `workerctl deploy`, rollback or prune shows within one), and at once after a deploy
 * RPC changed it; one scan at a time, on the threadpool. */
static void follow_code(wk_app *app, int64_t now) {
  bool wanted = app->publisher || app->status; /* the record, the status page */
  if (!wanted || app->code_scan_running || app->phase == APP_STOPPING) return;
  if (!app->code_scan_due && now - app->code_scanned_ms < app->cfg->heartbeat_interval_ms) return;
  app->code_scan_due = false;
  app->code_scanned_ms = now;
  app->code_scan.data = app;
  if (uv_queue_work(&app->loop, &app->code_scan, code_scan_work, code_scan_done) == 0)
    app->code_scan_running = true;
}

/* The deploy handler changed the code store: the registry hears of it now. */
static void on_code_changed(void *ud, const char *function) {
  wk_app *app = ud;
  (void)function;
  app->code_scan_due = true;
  follow_code(app, app_now(app));
}

static void start_registration(wk_app *app) {
  const wk_app_config *cfg = app->cfg;
  if (!cfg->etcd_endpoints[0]) {
    wk_log(WK_LOG_INFO, "registration_off",
           "no etcd_endpoints: running stand-alone (not registered)");
    return;
  }
  char err[512];
  wk_etcd_publisher_config pc = {
      .endpoints = cfg->etcd_endpoints,
      .key_prefix = cfg->registry_prefix[0] ? cfg->registry_prefix : app->profile->registry_prefix,
      .advertise_addr = app->advertise_addr,
      .lease_ttl_s = (int64_t)cfg->etcd_lease_ttl_s,
      .refresh_interval_ms = cfg->heartbeat_interval_ms,
      .deployment = wk_deployment_name(app->profile->deployment),
      .service = app->profile->service,
      .version = WK_VERSION,
      .on_published = on_published,
      .on_published_ud = app,
  };
  char status_addr[WK_CONFIG_ADDR_MAX + 8];
  if (app->status) {
    registry_status_addr(app, status_addr, sizeof status_addr);
    pc.status_addr = status_addr;
  }
  app->publisher = wk_etcd_publisher_start(&pc, err, sizeof err);
  if (!app->publisher) {
    wk_log(WK_LOG_ERROR, "registration_failed", "cannot start the etcd publisher: %s", err);
    return;
  }
  /* the first value lists the code: it waits for the first scan (a coordinator picking
   * by epoch never sees this worker without its code) */
  app->code_scan_due = true;
  follow_code(app, app_now(app));
  app->registration_waits_code = app->code_scan_running;
  publish(app);
}

/* Copies what the pool, the core, the publisher and the shadow own into the metrics. */
static void sample_metrics(wk_app *app) {
  if (!app->metrics || !app->orch || !app->pool) return;
  wk_pool_stats pool = wk_pool_get_stats(app->pool);
  wk_etcd_publisher_stats etcd;
  wk_shadow_stats shadow;
  if (app->publisher) wk_etcd_publisher_stats_get(app->publisher, &etcd);
  if (app->shadow) wk_shadow_stats_get(app->shadow, &shadow);
  wk_grpc_conn_stats conns;
  wk_grpc_server_conn_stats(app->server, &conns);
  wk_heartbeat hb = wk_orch_heartbeat(app->orch);
  hb.draining = hb.draining || app->drain_announced; /* as the registration says it */
  wk_app_metrics_sample s = {
      .heartbeat = hb,
      .live_tasks = wk_orch_live_tasks(app->orch),
      .open_streams = wk_orch_open_streams(app->orch),
      .pool = &pool,
      .executors_ready = wk_pool_ready_executors(app->pool),
      .etcd = app->publisher ? &etcd : NULL,
      .shadow = app->shadow ? &shadow : NULL,
      .conns = app->server ? &conns : NULL,
  };
  wk_app_metrics_sample_now(app->metrics, &s);
}

static void stop_everything(wk_app *app) {
  sample_metrics(app); /* the last word of the publisher and the shadow */
  enter(app, APP_STOPPING);
  if (app->publisher) {
    /* deregister: delete the key and revoke the lease before the port closes */
    wk_etcd_publisher_stop(app->publisher, true);
    app->publisher = NULL;
  }
  wk_orch_set_deploy_handler(app->orch, NULL, NULL);
  wk_deploy_close(app->deploy); /* a deploy running ends first; waiting ones are refused */
  app->deploy = NULL;
  wk_log(WK_LOG_INFO, "worker_stopping", "stopping the gRPC server and the executors");
  wk_grpc_server_stop(app->server);
  app->server = NULL;
  if (app->shadow) {
    wk_orch_set_shadow(app->orch, NULL);
    wk_shadow_stop(app->shadow); /* logs its final counts */
    app->shadow = NULL;
  }
  wk_orch_close(app->orch);
  app->orch = NULL;
  wk_pool_stop(app->pool, on_pool_stopped, app);
}

/* Executors that cannot start (the pool counts failed starts in a row): health
 * NOT_SERVING, the registration not ready, one log line each way. Tasks still come in
 * and fail fast, their calls failed by the pool with its reason. */
static void follow_executors(wk_app *app) {
  char why[WK_POOL_UNAVAILABLE_MAX];
  bool unavailable = wk_pool_unavailable(app->pool, why, sizeof why);
  if (unavailable == app->executors_unavailable) return;
  app->executors_unavailable = unavailable;
  wk_orch_set_executors_unavailable(app->orch, unavailable);
  if (unavailable) {
    wk_log(WK_LOG_ERROR, "executors_unavailable", "%s", why);
  } else {
    wk_log_json(WK_LOG_INFO, "executors_available",
                json_pack("{s:i}", "executors_ready", (int)wk_pool_ready_executors(app->pool)));
  }
  publish(app);
}

/* The gRPC port out of file descriptors (it accepts nothing): health NOT_SERVING on
 * the connections still open and the registration not ready, until it accepts again.
 * The listener logs each change. */
static void follow_listener(wk_app *app) {
  wk_grpc_conn_stats st;
  wk_grpc_server_conn_stats(app->server, &st);
  if (st.accept_blocked == app->accept_blocked) return;
  app->accept_blocked = st.accept_blocked;
  wk_orch_set_accept_blocked(app->orch, st.accept_blocked);
  publish(app);
}

/* Admission under memory pressure: the memory available to the worker against
 * admission_memory_floor, with hysteresis (wk_admission.h); the core refuses new slots
 * while paused. One log line each way. */
static void follow_memory(wk_app *app) {
  wk_mem_sample s;
  if (!app->orch || wk_meminfo_sample(&s) != 0) return;
  uint64_t floor = wk_mem_floor_bytes(&app->memory_floor, s.total);
  bool paused = wk_mem_pressure_paused(app->admission_paused, s.available, floor);
  if (paused == app->admission_paused) return;
  app->admission_paused = paused;
  json_t *fields = json_pack("{s:I,s:I,s:s}", "available_bytes", (json_int_t)s.available,
                             "floor_bytes", (json_int_t)floor, "source", s.source);
  if (!paused) {
    wk_orch_set_admission_paused(app->orch, NULL);
    wk_log_json(WK_LOG_INFO, "admission_resumed", fields);
    return;
  }
  char reason[200];
  snprintf(reason, sizeof reason,
           "memory pressure: %llu MiB available (%s), under admission_memory_floor %llu MiB",
           (unsigned long long)(s.available >> 20), s.source, (unsigned long long)(floor >> 20));
  wk_orch_set_admission_paused(app->orch, reason);
  wk_log_json(WK_LOG_WARN, "admission_paused", fields);
}

/* The longest wait for watchers after the drain: a quarter of the shutdown grace at
 * most (executors get the next quarter, the rest is for deregistering, closing the
 * port and ending what executors left behind). */
static int64_t flush_wait_ms(const wk_app_config *cfg) {
  int64_t quarter = cfg->shutdown_grace_ms / 4;
  return quarter < FLUSH_WAIT_MS ? quarter : FLUSH_WAIT_MS;
}

/* READY=1 to systemd: the port serves (health SERVING, or NOT_SERVING with the reason
 * logged when executors cannot start) and the etcd registration has been started. */
static void notify_ready(wk_app *app) {
  char state[WK_CONFIG_ADDR_MAX + 64];
  snprintf(state, sizeof state, "READY=1\nSTATUS=serving on %s%s", app->advertise_addr,
           app->executors_unavailable ? " (executors unavailable)" : "");
  wk_sdnotify(state);
}

/* Whether the announced drain may start refusing: etcd acknowledged the draining
 * value, or drain_publish_timeout_ms passed, or a second signal came. Logs which. */
static bool drain_may_refuse(wk_app *app, int64_t waited_ms) {
  wk_etcd_publisher_stats st;
  wk_etcd_publisher_stats_get(app->publisher, &st);
  if (st.put_gen >= app->drain_gen) {
    wk_log_json(WK_LOG_INFO, "drain_published",
                json_pack("{s:I,s:I,s:s}", "revision", (json_int_t)st.put_revision, "waited_ms",
                          (json_int_t)waited_ms, "msg",
                          "etcd says draining: refusing new slots and submits from now on"));
    return true;
  }
  int64_t bound = app->cfg->drain_publish_timeout_ms; /* and never past the drain's end */
  if (bound > app->cfg->drain_timeout_ms) bound = app->cfg->drain_timeout_ms;
  if (waited_ms >= bound) {
    wk_log_json(WK_LOG_WARN, "drain_publish_timeout",
                json_pack("{s:I,s:s,s:s}", "waited_ms", (json_int_t)waited_ms, "last_error",
                          st.last_error, "msg",
                          "etcd has not acknowledged `draining` within drain_publish_timeout_ms: "
                          "refusing new slots and submits anyway"));
    return true;
  }
  if (app->signals_handled > 1) {
    wk_log(WK_LOG_INFO, "drain_publish_skipped",
           "second signal: refusing without waiting for etcd (%" PRId64 " ms waited)", waited_ms);
    return true;
  }
  return false;
}

/* The core starts refusing new slots and submits (WorkerCore is the one truth for that;
 * the app only chose when). phase_started_ms stays the signal's: drain_timeout_ms counts
 * from the signal, so the time spent announcing is part of it. */
static void refuse_new_work(wk_app *app) {
  wk_orch_set_draining(app->orch);
  app->phase = APP_DRAINING;
}

static void on_phase_timer(uv_timer_t *t) {
  wk_app *app = t->data;
  int64_t now = app_now(app);
  int64_t in_phase = now - app->phase_started_ms;
  publish(app);
  if (now - app->metrics_sampled_ms >= METRICS_SAMPLE_MS) {
    app->metrics_sampled_ms = now;
    sample_metrics(app);
    if (app->status && app->orch && app->pool)
      wk_status_tick(app->status, now, wk_orch_wall_offset_ms(app->orch), app->pool);
  }
  if (app->shadow && now - app->shadow_logged_ms >= SHADOW_STATS_LOG_MS) {
    app->shadow_logged_ms = now;
    wk_shadow_stats st;
    wk_shadow_stats_get(app->shadow, &st);
    wk_log_json(WK_LOG_INFO, "shadow_stats",
                json_pack("{s:s,s:I,s:I,s:I,s:I,s:I}", "target", wk_shadow_target(app->shadow),
                          "offered", (json_int_t)st.offered, "mirrored", (json_int_t)st.mirrored,
                          "failed", (json_int_t)st.failed, "dropped", (json_int_t)st.dropped,
                          "sampled_out", (json_int_t)st.sampled_out));
  }
  if (app->orch && app->pool && app->phase != APP_STARTING) {
    /* SyncExecutorSnapshots: the dispatcher admits what the ready executors can hold */
    uint32_t capacity = wk_pool_capacity(app->pool);
    if (capacity != app->capacity) {
      app->capacity = capacity;
      wk_orch_set_capacity(app->orch, capacity);
    }
  }
  follow_code(app, now);
  if (app->orch && app->pool) follow_executors(app);
  if (app->orch && app->server) follow_listener(app);
  if (now - app->memory_sampled_ms >= MEMORY_SAMPLE_MS &&
      (app->memory_floor.bytes || app->memory_floor.percent)) {
    app->memory_sampled_ms = now;
    follow_memory(app);
  }
  switch (app->phase) {
    case APP_STARTING:
      if (wk_pool_ready_executors(app->pool) >= app->cfg->executors || app->executors_unavailable ||
          in_phase > READY_WAIT_MS) {
        wk_orch_set_ready(app->orch, true);
        enter(app, APP_SERVING);
        start_registration(app);
        if (!app->executors_unavailable) {
          wk_log_json(
              WK_LOG_INFO, "worker_ready",
              json_pack("{s:i,s:i}", "executors_ready", (int)wk_pool_ready_executors(app->pool),
                        "task_slots", (int)app->cfg->task_slots));
        }
        notify_ready(app);
      }
      break;
    case APP_SERVING: break;
    case APP_ANNOUNCING:
      if (drain_may_refuse(app, in_phase)) refuse_new_work(app);
      break;
    case APP_DRAINING:
      if (wk_orch_live_tasks(app->orch) == 0 || in_phase >= app->cfg->drain_timeout_ms ||
          app->signals_handled > 1) {
        uint32_t left = wk_orch_live_tasks(app->orch);
        if (left)
          wk_log(WK_LOG_WARN, "drain_incomplete", "%u tasks still running: WORKER_SHUTDOWN", left);
        wk_orch_abort_all(app->orch, "the worker shut down before the task finished");
        enter(app, APP_FLUSHING);
        pthread_mutex_lock(&app->mu);
        app->exit_deadline_ms = monotonic_ms() + app->cfg->shutdown_grace_ms;
        pthread_mutex_unlock(&app->mu);
        if (app->sig_thread_started) pthread_kill(app->sig_thread, SIGUSR2); /* and its deadline */
      }
      break;
    case APP_FLUSHING:
      /* let watchers receive their terminal events before the server goes */
      if (wk_orch_open_streams(app->orch) == 0 || in_phase > flush_wait_ms(app->cfg) ||
          app->signals_handled > 1) {
        stop_everything(app);
      }
      break;
    case APP_STOPPING: break;
  }
}

/* The first stop signal: clients are told before anything is refused. Health turns
 * NOT_SERVING and the registration's value says draining (put at once, not coalesced);
 * WorkerCore goes on admitting until etcd acknowledged that put, or for at most
 * drain_publish_timeout_ms when etcd is slow or unreachable (the worker never hangs
 * on etcd). Without a registration (stand-alone, or a signal during start-up), or with
 * drain_publish_timeout_ms 0, it refuses at once, health having gone first. Tasks
 * accepted meanwhile are drained like any other. */
static void begin_drain(wk_app *app) {
  wk_log(WK_LOG_INFO, "worker_draining", "signal received: draining (%u tasks running)",
         wk_orch_live_tasks(app->orch));
  wk_sdnotify("STOPPING=1\nSTATUS=draining");
  wk_orch_announce_drain(app->orch);
  app->drain_announced = true;
  app->drain_gen = publish(app);
  enter(app, APP_ANNOUNCING);
  if (app->drain_gen == 0 || app->cfg->drain_publish_timeout_ms == 0) refuse_new_work(app);
}

static void on_signal(uv_async_t *a) {
  wk_app *app = a->data;
  pthread_mutex_lock(&app->mu);
  int seen = app->signals_seen;
  pthread_mutex_unlock(&app->mu);
  while (app->signals_handled < seen) {
    app->signals_handled++;
    if (app->phase == APP_STOPPING) continue;
    if (app->signals_handled == 1) {
      begin_drain(app);
    } else {
      wk_log(WK_LOG_INFO, "worker_draining", "second signal: not waiting for running tasks");
    }
  }
  on_phase_timer(&app->phase_timer);
}

/* ---- start-up: each piece's configuration, built from the settings ------------------ */

/* The writers the Profile enables and the configuration gives a backend, each checked
 * now, before anything binds (an unreachable Redis is a bad configuration). */
static int choose_writers(wk_app *app, char *err, size_t len) {
  const wk_app_config *cfg = app->cfg;
  app->writer_settings = (wk_writer_settings){
      .output_dir = cfg->output_dir,
      .redis_addr = cfg->redis_addr,
      .redis_tls_ca_file = cfg->redis_tls_ca_file,
      .redis_tls_cert_file = cfg->redis_tls_cert_file,
      .redis_tls_key_file = cfg->redis_tls_key_file,
      .postgres_dsn = cfg->postgres_dsn,
  };
  size_t n_writers = 0;
  const size_t cap = sizeof app->writers / sizeof app->writers[0] - 1; /* NULL-terminated */
  const wk_profile *profile = app->profile;
  for (size_t i = 0; i < WK_PROFILE_NAMES_MAX && profile->plugins[i] && n_writers < cap; i++) {
    const char *name = profile->plugins[i];
    const char *backend = wk_profile_writer_setting(cfg, name, NULL);
    if (!backend || !backend[0]) continue;
    const wk_writer *w = wk_writer_find(name);
    if (w->validate(&app->writer_settings, err, len) != 0) {
      wk_writers_mask_secrets(&app->writer_settings, err);
      fprintf(stderr, "%s: writer plugin %s: %s\n", program_invocation_short_name, name, err);
      return 2;
    }
    app->writers[n_writers++] = name;
  }
  return 0;
}

/* gRPC's threads inherit this mask: only the signal thread sees the stop signals. */
static void block_stop_signals(void) {
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGUSR2);
  pthread_sigmask(SIG_BLOCK, &stop_signals, NULL);
  signal(SIGPIPE, SIG_IGN);
}

static const char *phase_name(app_phase p) {
  switch (p) {
    case APP_STARTING: return "starting";
    case APP_SERVING: return "serving";
    case APP_ANNOUNCING: /* the drain's first step: shown as draining */
    case APP_DRAINING: return "draining";
    case APP_FLUSHING: return "flushing";
    case APP_STOPPING: return "stopping";
  }
  return "unknown";
}

/* What the status page reads at each build (wk_status_sources_fn; loop thread). */
static void status_sources(void *ud, wk_status_sources *out) {
  wk_app *app = ud;
  const wk_app_config *cfg = app->cfg;
  *out = (wk_status_sources){
      .state = phase_name(app->phase),
      .deployment = wk_deployment_name(app->profile->deployment),
      .service = app->profile->service,
      .version = WK_VERSION,
      .listen_addr = cfg->listen_addr,
      .advertise_addr = app->advertise_addr,
      .status_addr = app->status_addr,
      .isolation = cfg->executor_isolation,
      .admission_paused = app->orch && app->admission_paused ? "memory pressure" : NULL,
      .executors_unavailable = app->executors_unavailable,
      .executors_min = cfg->executors,
      .executors_max = cfg->executors_max > cfg->executors ? cfg->executors_max : cfg->executors,
      .orch = app->orch,
      .pool = app->pool,
      .publisher = app->publisher,
      .etcd_endpoints = cfg->etcd_endpoints,
      .code = app->code_last,
      .code_truncated = app->code_last_truncated,
  };
}

/* The metrics endpoint, bound before anything else listens: a bad metrics_addr stops
 * the start. With status_page, the status page beside it. */
static int start_metrics(wk_app *app, char *err, size_t len) {
  const wk_app_config *cfg = app->cfg;
  if (!cfg->metrics_addr[0]) return 0;
  wk_app_metrics_info info = {.deployment = wk_deployment_name(app->profile->deployment),
                              .service = app->profile->service,
                              .usage_service = app->profile->usage_service};
  app->metrics = wk_app_metrics_new(&info);
  if (!app->metrics) {
    fprintf(stderr, "%s: out of memory for the metrics\n", program_invocation_short_name);
    return 1;
  }
  uint16_t metrics_port = 0;
  wk_metrics_status status = {0};
  char *cert = NULL, *key = NULL;
  if (cfg->status_page) {
    app->status = wk_status_new(&app->loop, status_sources, app);
    status = (wk_metrics_status){.json = wk_status_json,
                                 .ud = app->status,
                                 .page_html = (const char *)wk_status_page_html,
                                 .auth_token = cfg->auth_token};
  }
  if (cfg->tls_cert_file[0] && cfg->tls_key_file[0]) {
    /* TLS on the metrics listener too (validated already; read again here) */
    cert = wk_pem_read(cfg->tls_cert_file, WK_PEM_CERTIFICATES, "tls_cert_file", err, len);
    key =
        cert ? wk_pem_read(cfg->tls_key_file, WK_PEM_PRIVATE_KEY, "tls_key_file", err, len) : NULL;
    if (!cert || !key) {
      fprintf(stderr, "%s: metrics_addr %s: %s\n", program_invocation_short_name, cfg->metrics_addr,
              err);
      wk_pem_free(cert);
      return 2;
    }
    status.tls_cert_pem = cert;
    status.tls_key_pem = key;
  }
  app->metrics_server = wk_metrics_server_start_with(
      wk_app_metrics_registry(app->metrics), cfg->metrics_addr, &status, &metrics_port, err, len);
  wk_pem_free(cert);
  wk_pem_free(key);
  if (!app->metrics_server) {
    fprintf(stderr, "%s: metrics_addr %s: %s\n", program_invocation_short_name, cfg->metrics_addr,
            err);
    return 2;
  }
  const char *colon = strrchr(cfg->metrics_addr, ':');
  int host_len = colon ? (int)(colon - cfg->metrics_addr) : 0;
  snprintf(app->status_addr, sizeof app->status_addr, "%.*s:%u", host_len, cfg->metrics_addr,
           (unsigned)metrics_port);
  wk_log_json(
      WK_LOG_INFO, "metrics_listening",
      json_pack("{s:s,s:i,s:b,s:b}", "metrics_addr", cfg->metrics_addr, "port", (int)metrics_port,
                "status_page", (int)cfg->status_page, "tls", (int)(cert != NULL)));
  return 0;
}

/* The loop with the app's own handles (the signal wake-up and the phase timer). */
static void flush_grpc_after(uv_check_t *h) {
  wk_app *app = h->data;
  wk_grpc_server_flush(app->server);
}

static void flush_grpc_before(uv_prepare_t *h) {
  wk_app *app = h->data;
  wk_grpc_server_flush(app->server);
}

static void init_loop(wk_app *app) {
  pthread_mutex_init(&app->mu, NULL);
  uv_loop_init(&app->loop);
  uv_check_init(&app->loop, &app->grpc_flush_after);
  app->grpc_flush_after.data = app;
  uv_check_start(&app->grpc_flush_after, flush_grpc_after);
  uv_unref((uv_handle_t *)&app->grpc_flush_after); /* keeps no loop alive */
  uv_prepare_init(&app->loop, &app->grpc_flush_before);
  app->grpc_flush_before.data = app;
  uv_prepare_start(&app->grpc_flush_before, flush_grpc_before);
  uv_unref((uv_handle_t *)&app->grpc_flush_before);
  wk_grpc_server_defer_on_this_thread(true); /* this thread runs the loop */
  uv_async_init(&app->loop, &app->signal_async, on_signal);
  app->signal_async.data = app;
  uv_timer_init(&app->loop, &app->phase_timer);
  app->phase_timer.data = app;
  uv_timer_init(&app->loop, &app->watchdog_timer);
  app->watchdog_timer.data = app;
  app->loop_open = true;
}

/* WATCHDOG=1 from the loop: it fires only while the loop turns, so a wedged loop stops
 * the pings and systemd (WatchdogSec) restarts the worker. */
static void on_watchdog_timer(uv_timer_t *t) {
  (void)t;
  wk_sdnotify("WATCHDOG=1");
}

/* What the service manager asked for (wk_sdnotify_start logs it): the watchdog pings
 * every half of its timeout, from the loop, from start-up to exit. */
static void start_sdnotify(wk_app *app) {
  app->watchdog_usec = wk_sdnotify_start();
  if (!app->watchdog_usec) return;
  uint64_t every_ms = app->watchdog_usec / 2000;
  if (every_ms == 0) every_ms = 1;
  wk_sdnotify("WATCHDOG=1");
  uv_timer_start(&app->watchdog_timer, on_watchdog_timer, every_ms, every_ms);
}

/* Removes what dead workers left in `dir` (wk_rundir.h), and says so. */
static void sweep_leftovers(const wk_app *app, const char *dir) {
  size_t n = wk_rundir_sweep(dir, app->exec_uid ? (uid_t)app->exec_uid : geteuid());
  if (n)
    wk_log_json(WK_LOG_INFO, "stale_dirs_removed",
                json_pack("{s:s,s:I}", "dir", dir, "count", (json_int_t)n));
}

/* The scratch root must not let a task list other tasks' directories (it may enter its
 * own, whose name it is given): a configured root the worker owns loses its group and
 * other read and write bits; one it cannot change is reported. */
static void guard_scratch_root(const char *root) {
  struct stat st;
  if (stat(root, &st) != 0 || !(st.st_mode & 066)) return;
  if (st.st_uid == geteuid() && !(st.st_mode & S_ISVTX) &&
      chmod(root, (st.st_mode & 07777) & ~(mode_t)066) == 0) {
    wk_log_json(
        WK_LOG_INFO, "scratch_root_mode_tightened",
        json_pack("{s:s,s:i}", "scratch_root", root, "mode", (int)(st.st_mode & 07777 & ~066u)));
    return;
  }
  wk_log_json(WK_LOG_WARN, "scratch_root_listable",
              json_pack("{s:s,s:i}", "scratch_root", root, "mode", (int)(st.st_mode & 07777)));
}

/* scratch_root, or a fresh directory under $TMPDIR the app owns (and removes); both
 * first cleared of what dead workers left there, like $TMPDIR (executor directories). */
static int make_scratch_root(wk_app *app) {
  const wk_app_config *cfg = app->cfg;
  wk_rundir_tag(app->run_tag, sizeof app->run_tag);
  const char *tmp = getenv("TMPDIR");
  if (!tmp || !*tmp) tmp = "/tmp";
  app->tmp_dir = tmp;
  /* executor_user (validated already): task directories are given to it */
  char err[256];
  if (wk_executor_user_resolve(cfg->executor_user, geteuid(), &app->exec_uid, &app->exec_gid, err,
                               sizeof err) != 0) {
    fprintf(stderr, "%s: %s\n", program_invocation_short_name, err);
    return 2;
  }
  sweep_leftovers(app, tmp);
  if (cfg->scratch_root[0]) {
    snprintf(app->scratch_root, sizeof app->scratch_root, "%s", cfg->scratch_root);
    sweep_leftovers(app, app->scratch_root);
    guard_scratch_root(app->scratch_root);
  } else {
    snprintf(app->scratch_root, sizeof app->scratch_root, "%s/%s.scratch.XXXXXX", tmp,
             app->run_tag);
    if (!mkdtemp(app->scratch_root)) {
      fprintf(stderr, "%s: cannot create a scratch directory: %s\n", program_invocation_short_name,
              strerror(errno));
      return 1;
    }
    app->own_scratch_root = true;
    /* executors under another user enter their own task's directory, never list it */
    chmod(app->scratch_root, 0711);
  }
  return 0;
}

/* Executors load code by absolute path: code_root and scratch_root made absolute. */
static int resolve_paths(wk_app *app) {
  const wk_app_config *cfg = app->cfg;
  if (!realpath(cfg->code_root, app->code_root)) {
    fprintf(stderr, "%s: code_root %s: %s\n", program_invocation_short_name, cfg->code_root,
            strerror(errno));
    return 2;
  }
  char scratch_abs[PATH_MAX];
  if (realpath(app->scratch_root, scratch_abs) && strlen(scratch_abs) < sizeof app->scratch_root) {
    memcpy(app->scratch_root, scratch_abs, strlen(scratch_abs) + 1);
  }
  return 0;
}

/* Every field from the settings (the core checks them); none from the core's test
 * preset wk_core_config_default. */
static void build_core_config(const wk_app_config *cfg, wk_core_config *core) {
  *core = (wk_core_config){
      .task_slots = cfg->task_slots,
      .default_slot_ttl_ms = cfg->default_slot_ttl_ms,
      .max_slot_ttl_ms = cfg->max_slot_ttl_ms,
      .default_task_timeout_ms = cfg->default_task_timeout_ms,
      .max_task_timeout_ms = cfg->max_task_timeout_ms,
      .watch_disconnect_grace_ms = cfg->watch_disconnect_grace_ms,
      .result_retention_ms = cfg->result_retention_ms,
      .max_retained_results = cfg->max_retained_results,
      .max_retained_bytes = cfg->max_retained_bytes,
      .max_failure_message_bytes = WK_CORE_FAILURE_MESSAGE_BYTES,
      .allocator = {0}, /* malloc/free */
  };
}

/* Every dispatcher field from the settings (the dispatcher checks them); none from its
 * test preset wk_disp_config_default. */
static void build_calls_config(const wk_app_config *cfg, wk_calls_config *calls) {
  *calls = (wk_calls_config){
      .disp =
          {
              .max_inflight = 0, /* set from the pool's capacity once executors are up */
              .window_initial = cfg->task_window_initial,
              .window_max = cfg->task_window_max,
              .max_depth = cfg->subcall_max_depth,
              .max_tasks = cfg->task_slots + DISPATCH_TASK_HEADROOM,
              .max_calls = cfg->max_calls_in_flight,
              .rng_seed = (uint64_t)getpid() ^ (uint64_t)time(NULL),
              .jitter = WK_DISP_JITTER_EQUAL,
              .allocator = {0}, /* malloc/free */
          },
      .escalation_budget_ms = cfg->cancel_grace_ms + STACK_WAIT_MS + ESCALATION_MARGIN_MS,
      .stream_low_water = STREAM_LOW_WATER,
      .stream_batch = STREAM_BATCH,
  };
}

static void build_orch_config(const wk_app *app, wk_orch_config *ocfg) {
  const wk_app_config *cfg = app->cfg;
  *ocfg = (wk_orch_config){
      .code_root = app->code_root,
      .code_epochs_kept = cfg->code_epochs_kept,
      .scratch_root = app->scratch_root,
      .scratch_tag = app->run_tag,
      .scratch_chown = app->exec_uid != 0,
      .scratch_uid = (uid_t)app->exec_uid,
      .scratch_gid = (gid_t)app->exec_gid,
      .tick_ms = cfg->tick_ms,
      /* every result the worker sends fits in max_message_bytes, framing included */
      .max_inline_output_bytes =
          wk_wire_inline_output_limit(cfg->max_inline_output_bytes, cfg->max_message_bytes),
      .max_calls_per_task = cfg->max_calls_per_task,
      .builders = &app->builders,
      .writer_settings = &app->writer_settings,
      .io_scope_max_bytes = cfg->io_scope_max_mb << 20, /* MiB */
      .audit_allow = cfg->audit_allow,
      .audit_deny = cfg->audit_deny,
      .usage_log = cfg->usage_log,
      .core_journal_dir = cfg->core_journal_dir,
      .core_journal_max_bytes = cfg->core_journal_max_bytes,
      .core_journal_files = cfg->core_journal_files,
      .core_journal_decisions = cfg->core_journal_decisions,
      .version = WK_VERSION,
      .deployment = wk_deployment_name(app->profile->deployment),
      .service = app->profile->service,
      .usage_service = wk_app_usage_service(app->profile->service, app->profile->usage_service),
      .builder_concurrency = cfg->builder_concurrency,
      .scan_concurrency = cfg->scan_concurrency,
      .executor_concurrency = cfg->executor_concurrency,
      .plugin_concurrency = cfg->plugin_concurrency,
      .progress_events_per_s = cfg->progress_events_per_s,
      /* a GetTaskLogs answer fits in max_message_bytes, as a result does */
      .task_logs = {.task_log_max_bytes = wk_wire_inline_output_limit(
                        (size_t)cfg->task_log_max_bytes, cfg->max_message_bytes),
                    .total_log_max_bytes = cfg->task_logs_total_max_bytes},
      .on_task_finished = app->metrics ? wk_app_metrics_on_task_finished : NULL,
      .on_task_finished_ud = app->metrics,
      .on_task_ended = app->status ? wk_status_on_task_ended : NULL,
      .on_task_ended_ud = app->status,
  };
  _Static_assert(sizeof ocfg->writers == sizeof app->writers, "one writer list");
  memcpy(ocfg->writers, app->writers, sizeof app->writers);
  build_calls_config(cfg, &ocfg->calls);
  build_core_config(cfg, &ocfg->core);
}

/* The orchestrator, with the builders the Profile lists (an unlisted one is
 * BUILDER_NOT_FOUND). */
static int start_orchestrator(wk_app *app, char *err, size_t len) {
  for (size_t i = 0; i < WK_PROFILE_NAMES_MAX && app->profile->builders[i]; i++) {
    wk_builder_registry_add(&app->builders, app->profile->builders[i]);
  }
  wk_orch_config ocfg;
  build_orch_config(app, &ocfg);
  app->orch = wk_orch_create(&app->loop, &ocfg, err, len);
  if (!app->orch) {
    fprintf(stderr, "%s: %s\n", program_invocation_short_name, err);
    return 2;
  }
  return 0;
}

static void build_pool_config(const wk_app_config *cfg, wk_pool_config *pcfg) {
  *pcfg = (wk_pool_config){
      .python = cfg->python,
      .executor_script = cfg->executor_script,
      .python_path = cfg->python_path,
      .executors_min = cfg->executors,
      .executors_max = cfg->executors_max > cfg->executors ? cfg->executors_max : cfg->executors,
      .pipeline_depth = cfg->pipeline_depth,
      .idle_timeout_ms = cfg->executor_idle_timeout_ms,
      .max_calls_per_executor = cfg->max_calls_per_executor,
      .max_executor_rss_mb = cfg->max_executor_rss_mb,
      .heartbeat_interval_ms = cfg->executor_heartbeat_interval_ms,
      .heartbeat_timeout_ms = cfg->executor_heartbeat_timeout_ms,
      .max_frame = (uint32_t)(cfg->max_message_bytes + FRAME_OVERHEAD_BYTES),
      .cancel_grace_ms = cfg->cancel_grace_ms,
      .stack_wait_ms = STACK_WAIT_MS,
      .shutdown_grace_ms = cfg->shutdown_grace_ms / 4, /* the second quarter (flush_wait_ms) */
      .rlimit_as_mb = cfg->executor_rlimit_as_mb,
      .rlimit_nofile = cfg->executor_rlimit_nofile,
      .rlimit_cpu_s = cfg->executor_rlimit_cpu_s,
      .output = {.line_max = cfg->executor_output_line_max,
                 .bytes_per_s = cfg->executor_output_bytes_per_s,
                 .lines_per_s = cfg->executor_output_lines_per_s},
      .rlimit_nproc = cfg->executor_rlimit_nproc,
      .env = NULL, /* start_pool adds executor_env */
      .isolate_functions = strcmp(cfg->executor_isolation, "function") == 0,
      .sched_batch = cfg->executor_sched_batch,
      .timer_slack_ns = cfg->executor_timer_slack_ns,
  };
}

/* Per-executor control groups when a limit is set; one log line says what is in use.
 * A limit the host cannot enforce is a start-up error, not a silent no-limit. */
static int start_cgroups(wk_app *app, char *err, size_t len) {
  const wk_app_config *cfg = app->cfg;
  wk_cgroup_limits limits = {.memory_max = cfg->executor_memory_max,
                             .pids_max = cfg->executor_pids_max};
  char mechanism[1024];
  app->cgroup = wk_cgroup_open(&limits, mechanism, sizeof mechanism, err, len);
  if (!app->cgroup && err[0]) {
    fprintf(stderr, "%s: %s\n", program_invocation_short_name, err);
    return 2;
  }
  wk_log_json(WK_LOG_INFO, "executor_cgroups",
              json_pack("{s:s,s:I,s:I}", "mechanism", mechanism, "executor_memory_max",
                        (json_int_t)cfg->executor_memory_max, "executor_pids_max",
                        (json_int_t)cfg->executor_pids_max));
  /* validated already */
  (void)wk_mem_floor_parse(cfg->admission_memory_floor, &app->memory_floor, NULL, 0);
  return 0;
}

/* The executor pool, feeding the orchestrator. */
static int start_pool(wk_app *app, char *err, size_t len) {
  wk_pool_config pcfg;
  build_pool_config(app->cfg, &pcfg);
  char pool_prefix[PATH_MAX];
  snprintf(pool_prefix, sizeof pool_prefix, "%s/%s.exec", app->tmp_dir, app->run_tag);
  pcfg.dir_prefix = pool_prefix; /* a dead worker's is removed by the next one's sweep */
  pcfg.cgroup = app->cgroup;
  /* pass-through names are read now, after the secrets left the environment */
  char **env = wk_executor_env_build(app->cfg->executor_env, err, len);
  if (!env) { /* validated already: only a change since could get here */
    fprintf(stderr, "%s: %s\n", program_invocation_short_name, err);
    return 2;
  }
  pcfg.env = (const char *const *)env;
  /* executor_user: validated already; resolved again now, for the ids */
  if (wk_executor_user_resolve(app->cfg->executor_user, geteuid(), &pcfg.uid, &pcfg.gid, err,
                               len) != 0) {
    fprintf(stderr, "%s: %s\n", program_invocation_short_name, err);
    wk_executor_env_free(env);
    return 2;
  }
  wk_exec_callbacks ecb = {.on_result = wk_orch_on_call_result,
                           .on_subcalls = wk_orch_on_subcalls,
                           .on_scratch = wk_orch_on_scratch,
                           .ud = app->orch};
  app->pool = wk_pool_start(&app->loop, &pcfg, ecb, err, len);
  if (app->pool) {
    const wk_app_config *cfg = app->cfg;
    wk_deploy_config dcfg = {
        .enabled = cfg->deploy_enabled,
        .allowed_clients = cfg->deploy_allowed_clients,
        .code_root = app->code_root,
        .max_bytes = cfg->deploy_max_bytes,
        .max_files = cfg->deploy_max_files,
        .python = cfg->python,
        .script = cfg->executor_script,
        .python_path = cfg->python_path,
        .executor_env = (const char *const *)env,
        .check_timeout_ms = cfg->deploy_check_timeout_ms,
        .uid = pcfg.uid,
        .gid = pcfg.gid,
        .on_changed = on_code_changed,
        .on_changed_ud = app,
    };
    app->deploy = wk_deploy_create(&app->loop, &dcfg, err, len);
    if (!app->deploy) { /* validated already */
      fprintf(stderr, "%s: %s\n", program_invocation_short_name, err);
      wk_executor_env_free(env);
      return 2;
    }
    wk_orch_set_deploy_handler(app->orch, wk_deploy_handle, app->deploy);
  }
  wk_executor_env_free(env); /* the pool and the deploy handler keep their own copies */
  if (!app->pool) {
    fprintf(stderr, "%s: %s\n", program_invocation_short_name, err);
    return 1;
  }
  wk_orch_set_executor(app->orch, wk_pool_adapter(app->pool));
  return 0;
}

/* Shadow forwarding, when shadow_target_addr is set. */
static int start_shadow(wk_app *app, char *err, size_t len) {
  const wk_app_config *cfg = app->cfg;
  if (!cfg->shadow_target_addr[0]) return 0;
  wk_shadow_config shc = {
      .target = cfg->shadow_target_addr,
      .sample_rate = (double)cfg->shadow_sample_percent / 100.0,
      .seed = (uint64_t)getpid(),
  };
  app->shadow = wk_shadow_start(&shc, err, len);
  if (!app->shadow) {
    fprintf(stderr, "%s: shadow forwarding to %s: %s\n", program_invocation_short_name,
            cfg->shadow_target_addr, err);
    return 2;
  }
  wk_orch_set_shadow(app->orch, app->shadow);
  return 0;
}

/* max_connections, or when 0 the open-files limit less a quarter (at least 64 kept for
 * the worker's own files, executor channels and pipes, and outgoing connections). */
static uint32_t max_connections(const wk_app *app) {
  if (app->cfg->max_connections > 0) return app->cfg->max_connections;
  uint64_t keep = app->nofile / 4 > 64 ? app->nofile / 4 : 64;
  uint64_t n = app->nofile > keep + 1 ? app->nofile - keep : 1;
  return n > 1048576 ? 1048576 : (uint32_t)n;
}

static void build_server_config(const wk_app *app, wk_grpc_server_config *scfg) {
  const wk_app_config *cfg = app->cfg;
  *scfg = (wk_grpc_server_config){
      .listen_addr = cfg->listen_addr,
      .max_message_bytes = cfg->max_message_bytes,
      /* a DeployCode carries up to deploy_max_bytes of files plus paths and framing */
      .deploy_max_message_bytes =
          cfg->deploy_enabled ? (size_t)cfg->deploy_max_bytes + cfg->max_message_bytes : 0,
      .max_connections = max_connections(app),
      .max_ttl_ms = (uint64_t)cfg->max_slot_ttl_ms,
      .max_timeout_ms = (uint64_t)cfg->max_task_timeout_ms,
      .max_watch_tasks = MAX_WATCH_TASKS,
      .max_stream_queue = MAX_STREAM_QUEUE,
      .max_stream_bytes = (size_t)cfg->watch_stream_max_bytes,
      .max_total_stream_bytes = (size_t)cfg->watch_total_max_bytes,
      .tls_cert_file = cfg->tls_cert_file,
      .tls_key_file = cfg->tls_key_file,
      .tls_client_ca_file = cfg->tls_client_ca_file,
      .auth_token = cfg->auth_token,
      .reflection = strcmp(cfg->reflection, "true") == 0,
      .on_status = app->metrics ? wk_app_metrics_on_rpc_status : NULL,
      .on_status_ud = app->metrics,
  };
}

/* The gRPC server on listen_addr, and the address the registration advertises. */
static int start_server(wk_app *app, char *err, size_t len) {
  const wk_app_config *cfg = app->cfg;
  wk_grpc_server_config scfg;
  build_server_config(app, &scfg);
  int port = 0;
  if (wk_grpc_server_start(&scfg, wk_orch_sink(app->orch), &app->server, &port, err, len) != 0) {
    fprintf(stderr, "%s: cannot serve on %s: %s\n", program_invocation_short_name, cfg->listen_addr,
            err);
    return 1;
  }
  if (cfg->advertise_addr[0]) {
    snprintf(app->advertise_addr, sizeof app->advertise_addr, "%s", cfg->advertise_addr);
  } else {
    /* the listen host with the port actually bound; a wildcard host (0.0.0.0, [::])
     * cannot be dialled: this host's primary address instead, said in the log */
    const char *colon = strrchr(cfg->listen_addr, ':');
    int host_len = colon ? (int)(colon - cfg->listen_addr) : (int)strlen(cfg->listen_addr);
    bool unix_socket = strncmp(cfg->listen_addr, "unix:", 5) == 0;
    if (!unix_socket && wk_netaddr_is_wildcard(cfg->listen_addr, (size_t)host_len)) {
      char host[64];
      const char *how = "";
      wk_netaddr_primary(host, sizeof host, &how);
      snprintf(app->advertise_addr, sizeof app->advertise_addr, "%s:%d", host, port);
      wk_log_json(WK_LOG_INFO, "advertise_addr_chosen",
                  json_pack("{s:s,s:s,s:s,s:s}", "listen_addr", cfg->listen_addr, "advertise_addr",
                            app->advertise_addr, "found_by", how, "msg",
                            "listening on every address: registering this host's primary "
                            "address instead (set advertise_addr to choose)"));
    } else {
      snprintf(app->advertise_addr, sizeof app->advertise_addr, "%.*s:%d", host_len,
               cfg->listen_addr, port);
    }
  }
  wk_log_json(WK_LOG_INFO, "worker_listening",
              json_pack("{s:s,s:i,s:s,s:i,s:I}", "listen_addr", cfg->listen_addr, "port", port,
                        "code_root", app->code_root, "executors", (int)cfg->executors,
                        "max_connections", (json_int_t)scfg.max_connections));
  return 0;
}

static int start_signal_thread(wk_app *app) {
  int rc = pthread_create(&app->sig_thread, NULL, signal_thread, app);
  if (rc != 0) {
    fprintf(stderr, "%s: cannot start the signal thread: %s\n", program_invocation_short_name,
            strerror(rc));
    return 1;
  }
  app->sig_thread_started = true;
  return 0;
}

/* libuv's threadpool (4 threads unless UV_THREADPOOL_SIZE says otherwise) runs the
 * builders and writers, each holding a thread as long as it runs, and the short jobs
 * (activation, scratch removal, IO scope measurement, usage records). Sized so that
 * builder_concurrency builders and plugin_concurrency writers at once still leave
 * threads for the short jobs: a 4 MB map never delays another task's activation. Set
 * before anything starts a thread; an operator's UV_THREADPOOL_SIZE is kept. */
#define THREADPOOL_SHORT_JOBS 4u
#define THREADPOOL_MAX 1024u /* libuv's own cap */

static void size_threadpool(const wk_app_config *cfg) {
  if (getenv("UV_THREADPOOL_SIZE")) return;
  uint64_t n = (uint64_t)cfg->builder_concurrency + cfg->plugin_concurrency +
               THREADPOOL_SHORT_JOBS +
               (cfg->deploy_enabled ? 1u : 0u); /* a deploy's code check may take seconds */
  char v[16];
  snprintf(v, sizeof v, "%u", (unsigned)(n < THREADPOOL_MAX ? n : THREADPOOL_MAX));
  setenv("UV_THREADPOOL_SIZE", v, 1);
}

/* Everything up to serving, in order; on failure returns the exit code with the
 * reason on stderr, leaving what was started for app_cleanup. */
static int app_start(wk_app *app) {
  char err[2048];
  size_threadpool(app->cfg);
  int rc = choose_writers(app, err, sizeof err);
  if (rc != 0) return rc;
  block_stop_signals();
  init_loop(app); /* before the metrics server: the status page wakes the loop */
  start_sdnotify(app);
  if ((rc = start_metrics(app, err, sizeof err)) != 0) return rc;
  if ((rc = make_scratch_root(app)) != 0) return rc;
  if ((rc = resolve_paths(app)) != 0) return rc;
  if ((rc = start_orchestrator(app, err, sizeof err)) != 0) return rc;
  if ((rc = start_cgroups(app, err, sizeof err)) != 0) return rc;
  if ((rc = start_pool(app, err, sizeof err)) != 0) return rc;
  wk_absl_locks_release_mode(); /* before gRPC takes its first lock */
  grpc_init();
  app->grpc_started = true;
  if ((rc = start_shadow(app, err, sizeof err)) != 0) return rc;
  if ((rc = start_server(app, err, sizeof err)) != 0) return rc;
  return start_signal_thread(app);
}

/* What a failed start leaves on the loop, stopped as stop_everything would (without
 * the registration, which starts only once serving). */
static void stop_partial_start(wk_app *app) {
  if (app->orch) wk_orch_set_deploy_handler(app->orch, NULL, NULL);
  wk_deploy_close(app->deploy);
  app->deploy = NULL;
  wk_grpc_server_stop(app->server);
  app->server = NULL;
  if (app->shadow) {
    wk_orch_set_shadow(app->orch, NULL);
    wk_shadow_stop(app->shadow);
    app->shadow = NULL;
  }
  if (app->orch) wk_orch_close(app->orch);
  app->orch = NULL;
  if (app->pool) {
    wk_pool_stop(app->pool, on_pool_stopped, app); /* closes the app's handles when done */
  } else {
    on_pool_stopped(app);
  }
  uv_run(&app->loop, UV_RUN_DEFAULT);
}

/* The one cleanup path, after serving or after a start that failed anywhere: releases
 * whatever app holds, in the reverse order of app_start. */
static void app_cleanup(wk_app *app) {
  /* a start that failed before serving left the app's handles open on the loop */
  if (app->loop_open && !uv_is_closing((uv_handle_t *)&app->signal_async)) stop_partial_start(app);
  if (app->sig_thread_started) {
    pthread_mutex_lock(&app->mu);
    app->sig_thread_quit = true;
    pthread_mutex_unlock(&app->mu);
    pthread_kill(app->sig_thread, SIGUSR2);
    pthread_join(app->sig_thread, NULL);
  }
  if (app->loop_open) {
    uv_loop_close(&app->loop);
    pthread_mutex_destroy(&app->mu);
  }
  if (app->grpc_started) grpc_shutdown();
  wk_cgroup_close(app->cgroup); /* after the pool: its executors have ended */
  if (app->own_scratch_root) wk_fs_remove_tree(app->scratch_root);
  wk_metrics_server_stop(app->metrics_server); /* served until the very end */
  wk_app_metrics_free(app->metrics);
  wk_status_free(app->status); /* closed with the loop's handles */
  free(app->code_last);
}

/* The soft open-files limit raised to the hard one (the usual soft default of 1024 is
 * met by about a thousand idle clients), logged; app->nofile is the limit in force. */
static void raise_nofile(wk_app *app) {
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0) {
    app->nofile = 1024;
    return;
  }
  rlim_t before = rl.rlim_cur;
  if (rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &rl) != 0) rl.rlim_cur = before;
  }
  app->nofile = rl.rlim_cur == RLIM_INFINITY ? UINT64_C(1048576) : (uint64_t)rl.rlim_cur;
  wk_log_json(
      WK_LOG_INFO, "nofile_limit",
      json_pack("{s:I,s:I,s:I}", "soft_before", (json_int_t)before, "soft", (json_int_t)app->nofile,
                "hard", (json_int_t)(rl.rlim_max == RLIM_INFINITY ? -1 : (json_int_t)rl.rlim_max)));
}

int wk_app_run(const wk_app_config *cfg, const wk_profile *profile) {
  char err[2048];
  if (wk_config_validate(cfg, err, sizeof err) != 0) {
    fprintf(stderr, "%s: invalid configuration:\n%s", program_invocation_short_name, err);
    return 2;
  }
  wk_log_set_level((wk_log_level)wk_log_parse_level(cfg->log_level));
  wk_app app = {.cfg = cfg, .profile = profile};
  raise_nofile(&app);
  int rc = app_start(&app);
  if (rc == 0) {
    enter(&app, APP_STARTING);
    uv_timer_start(&app.phase_timer, on_phase_timer, 0, PHASE_TICK_MS);
    uv_run(&app.loop, UV_RUN_DEFAULT);
  }
  app_cleanup(&app);
  if (rc == 0) wk_log(WK_LOG_INFO, "worker_stopped", "clean shutdown");
  return rc;
}

/* wk_app.h: the Worker's configuration and its single wiring and start-up /
 * shutdown sequence. Entry points (cmd/worker) only parse flags into a config and
 * call wk_app_run. */
#ifndef WK_APP_H
#define WK_APP_H

#include <stddef.h>
#include <stdint.h>

typedef struct wk_app_config {
  char listen_addr[256];
  uint32_t task_slots;
  char code_root[1024];
  char scratch_root[1024]; /* "" = a fresh directory under $TMPDIR */
  uint32_t executors;       /* executors_min: prestarted and kept */
  uint32_t executors_max;   /* grown to on demand */
  uint32_t pipeline_depth;  /* calls in flight per executor */
  int64_t executor_idle_timeout_ms;
  uint64_t max_calls_per_executor; /* recycle after this many calls (0 = never) */
  uint64_t max_executor_rss_mb;    /* recycle above this peak RSS (0 = never) */
  int64_t executor_heartbeat_interval_ms;
  int64_t executor_heartbeat_timeout_ms;
  uint64_t executor_rlimit_as_mb;  /* 0 = unlimited */
  uint64_t executor_rlimit_nofile;
  uint64_t executor_rlimit_cpu_s;  /* 0 = unlimited */
  char python[1024];
  char executor_script[1024];
  char python_path[1024];
  int64_t result_retention_ms;
  uint32_t max_retained_results;
  uint64_t max_retained_bytes;
  int64_t watch_disconnect_grace_ms;
  int64_t default_slot_ttl_ms;
  int64_t max_slot_ttl_ms;
  int64_t default_task_timeout_ms;
  int64_t max_task_timeout_ms;
  int64_t drain_timeout_ms;
  int64_t cancel_grace_ms;
  int64_t tick_ms;
  size_t max_message_bytes;
  size_t max_inline_output_bytes;
  uint32_t max_calls_per_task;
  uint32_t task_window_max;     /* a task's calls in flight at most (ramp-up ceiling) */
  uint32_t subcall_max_depth;   /* ctx.call nesting allowed */
  uint32_t max_calls_in_flight; /* dispatcher call records (all tasks) */
  char etcd_endpoints[1024];    /* comma-separated http://host:port; "" = stand-alone */
  char registry_prefix[256];    /* "" = the Profile's */
  char advertise_addr[256];     /* "" = listen_addr with its bound port */
  uint64_t etcd_lease_ttl_s;
  int64_t heartbeat_interval_ms; /* registration value refreshed at least this often */
  char tls_cert_file[1024];      /* "" = plaintext gRPC */
  char tls_key_file[1024];
  char tls_client_ca_file[1024]; /* set = mutual TLS required */
  char auth_token[512];          /* set = every RPC needs "authorization: Bearer <token>" */
  uint64_t io_scope_max_mb;     /* a task's scratch directory at most (0 = unbounded) */
  char audit_allow[1024];       /* functions allowed (comma-separated, '*' suffix); "" = all */
  char audit_deny[1024];        /* functions refused, checked first */
  char usage_log[1024];         /* usage records appended here as JSON lines ("" = log only) */
  char output_dir[1024];        /* file writer: where <task_id>.jsonl files go ("" = off) */
  char redis_addr[256];         /* redis writer: host:port ("" = off) */
  char postgres_dsn[1024];      /* postgres writer: libpq connection string ("" = off) */
  char shadow_target_addr[256]; /* "" = no shadow forwarding */
  char metrics_addr[256];       /* "" = no Prometheus endpoint */
  uint32_t shadow_sample_percent;
  uint32_t builder_concurrency;  /* phase semaphores: tasks in each phase at once */
  uint32_t scan_concurrency;
  uint32_t executor_concurrency;
  uint32_t plugin_concurrency;
  char log_level[16];
} wk_app_config;

/** Fills every setting with its default (the one place defaults live). */
void wk_app_config_default(wk_app_config *cfg);

/** Checks every value; writes one line per problem into err (newline separated) and
 * returns the number of problems (0 = valid). */
int wk_app_config_validate(const wk_app_config *cfg, char *err, size_t err_len);

struct wk_profile;

/** Runs the worker until SIGINT/SIGTERM: start-up, serve, drain, shutdown, wired as
 * the Profile says. Returns the process exit code (0 after a clean stop). */
int wk_app_run(const wk_app_config *cfg, const struct wk_profile *profile);

#endif

/* wk_config_table.c: the settings table (WorkerFullConfig): one row per field of
 * wk_app_config, and finding a row by name. See wk_config.h. */
#include "app/wk_config.h"

#include <stddef.h>
#include <string.h>

#include "app/wk_config_int.h"

/* The source tree's python/ (cmake/Worker.cmake defines it for this file): the default
 * of a program run from its build tree. An installed program finds its own instead
 * (wk_config_installed_python_dir, applied by wk_config_load). */
#ifndef WK_PYTHON_DIR
#define WK_PYTHON_DIR "python"
#endif

#define FIELD(f) \
  .name = #f, .offset = offsetof(wk_app_config, f), .size = sizeof(((wk_app_config *)0)->f)
#define STRMAX(f) ((int64_t)sizeof(((wk_app_config *)0)->f) - 1)

static const wk_config_item table[] = {
    /* serving */
    {FIELD(listen_addr), .type = WK_CONFIG_STRING, .def = "127.0.0.1:7070", .min = 1,
     .max = STRMAX(listen_addr), .alias = "listen", .meta = "HOST:PORT",
     .help = "gRPC address: host:port, [v6addr]:port or unix:PATH (port 0 = any free)"},
    {FIELD(task_slots), .type = WK_CONFIG_UINT, .def = "16", .min = 1, .max = 1048576,
     .help = "concurrent tasks (slots)"},
    {FIELD(code_root), .type = WK_CONFIG_STRING, .def = "./code", .min = 1,
     .max = STRMAX(code_root), .meta = "DIR",
     .help = "function code store (an existing directory)"},
    {FIELD(code_epochs_kept), .type = WK_CONFIG_UINT, .def = "5", .min = 0, .max = 1000000,
     .help = "code epochs kept per function: the newest N, CURRENT and every epoch a task pins; "
             "older ones are removed once no task pins them (0 = keep all)"},
    {FIELD(deploy_enabled), .type = WK_CONFIG_BOOL, .def = "false",
     .help = "serve DeployCode and SetCurrentEpoch (workerctl deploy --fleet): whoever may call "
             "them runs code as the executor user; off = both answer UNIMPLEMENTED"},
    {FIELD(deploy_allowed_clients), .type = WK_CONFIG_STRING, .def = "", .min = 0,
     .max = STRMAX(deploy_allowed_clients), .meta = "LIST",
     .help = "who may deploy, by commas: peer IP addresses or CIDR networks (10.0.0.0/8, ::1), "
             "and names of mutual-TLS client certificates (subject CN or a SAN); empty = any "
             "client that passed auth_token (others get PERMISSION_DENIED)"},
    {FIELD(deploy_max_bytes), .type = WK_CONFIG_BYTES, .def = "32MiB", .min = 1, .max = 1073741824,
     .help = "a DeployCode's file contents together at most; its request may be this plus "
             "max_message_bytes (paths, framing), whatever max_message_bytes says for other RPCs"},
    {FIELD(deploy_max_files), .type = WK_CONFIG_UINT, .def = "10000", .min = 1, .max = 100000,
     .help = "files in one DeployCode at most"},
    {FIELD(deploy_check_timeout_ms), .type = WK_CONFIG_MS, .def = "30000", .min = 100,
     .max = 3600000,
     .help = "a DeployCode's code check (compile every file, import the entry point, as "
             "workerctl deploy does) is killed after this long and the deploy refused"},
    {FIELD(registry_code_max_bytes), .type = WK_CONFIG_BYTES, .def = "8KiB", .min = 256,
     .max = 1048576,
     .help = "the etcd record's \"code\" field (functions, epochs, digests) at most: the lowest "
             "epochs, then functions, are left out and code_truncated set"},
    {FIELD(scratch_root), .type = WK_CONFIG_STRING, .def = "", .min = 0,
     .max = STRMAX(scratch_root), .meta = "DIR",
     .help = "parent of per-task scratch dirs (empty = a fresh directory under $TMPDIR)"},
    /* executors */
    {FIELD(executors), .type = WK_CONFIG_UINT, .def = "2", .min = 1, .max = 1024,
     .help = "Python executors prestarted and kept (the minimum)"},
    {FIELD(executors_max), .type = WK_CONFIG_UINT, .def = "4", .min = 0, .max = 1024,
     .help = "grow to this many executors while work waits (0 = executors; "
             "left at its default, at least executors)"},
    {FIELD(pipeline_depth), .type = WK_CONFIG_UINT, .def = "64", .min = 1, .max = 1024,
     .help =
         "calls in flight per executor at most (fewer when calls are slow: ~2 ms of work ahead)"},
    {FIELD(executor_idle_timeout_ms), .type = WK_CONFIG_MS, .def = "60000", .min = 100,
     .max = 86400000, .help = "stop idle executors above the minimum after this long"},
    {FIELD(max_calls_per_executor), .type = WK_CONFIG_UINT, .def = "0", .min = 0,
     .max = 1000000000000, .help = "recycle an executor after this many calls (0 = never)"},
    {FIELD(executor_isolation), .type = WK_CONFIG_ENUM, .def = "function", .min = 1,
     .max = STRMAX(executor_isolation), .choices = "function|shared", .meta = "MODE",
     .help = "function: an executor serves one function and is recycled before it serves "
             "another (a function's globals and hooks never see another function's calls); "
             "shared: any executor serves any function"},
    {FIELD(executor_sched_batch), .type = WK_CONFIG_BOOL, .def = "true",
     .help = "run executors under the SCHED_BATCH policy: their wake-ups do not preempt "
             "the worker's threads, they take queued calls in runs (less CPU per call "
             "when the machine is busy; no effect on an idle core); false = SCHED_OTHER"},
    {FIELD(executor_timer_slack_ns), .type = WK_CONFIG_UINT, .def = "1000", .min = 0,
     .max = 1000000000,
     .help = "how late the kernel may end an executor's sleeps and timeouts to batch "
             "wake-ups (PR_SET_TIMERSLACK, ns; Linux's default is 50000: a 10 ms "
             "time.sleep ran ~0.5% long); 0 = the worker's own"},
    {FIELD(max_executor_rss_mb), .type = WK_CONFIG_UINT, .def = "0", .min = 0, .max = 1048576,
     .help = "recycle an executor above this peak RSS in MiB (0 = never)"},
    {FIELD(executor_heartbeat_interval_ms), .type = WK_CONFIG_MS, .def = "2000", .min = 100,
     .max = 600000, .help = "ping each executor this often"},
    {FIELD(executor_heartbeat_timeout_ms), .type = WK_CONFIG_MS, .def = "10000", .min = 200,
     .max = 3600000, .help = "kill and replace an executor silent this long"},
    {FIELD(executor_rlimit_as_mb), .type = WK_CONFIG_UINT, .def = "0", .min = 0, .max = 16777216,
     .help = "executor address-space limit in MiB (0 = unchanged)"},
    {FIELD(executor_rlimit_nofile), .type = WK_CONFIG_UINT, .def = "1024", .min = 0, .max = 1048576,
     .help = "executor open-files limit (0 = unchanged)"},
    {FIELD(executor_rlimit_cpu_s), .type = WK_CONFIG_UINT, .def = "0", .min = 0, .max = 31536000,
     .help = "executor CPU-seconds limit (0 = unchanged)"},
    {FIELD(executor_rlimit_nproc), .type = WK_CONFIG_UINT, .def = "4096", .min = 0, .max = 4194304,
     .help = "executors' RLIMIT_NPROC: processes and threads their user may have, all of them "
             "together, fork bombs stop there (root is exempt; 0 = unchanged)"},
    {FIELD(executor_output_line_max), .type = WK_CONFIG_UINT, .def = "16384", .min = 80,
     .max = 1048576,
     .help = "bytes of one line of an executor's stdout or stderr logged; the rest of a longer "
             "line is cut, with a marker"},
    {FIELD(executor_output_bytes_per_s), .type = WK_CONFIG_UINT, .def = "65536", .min = 1024,
     .max = 1073741824,
     .help = "bytes of stdout and stderr logged per second per executor; the excess is dropped "
             "and counted"},
    {FIELD(executor_output_lines_per_s), .type = WK_CONFIG_UINT, .def = "200", .min = 1,
     .max = 1000000,
     .help = "lines of stdout and stderr logged per second per executor; the excess is dropped "
             "and counted"},
    {FIELD(executor_env), .type = WK_CONFIG_STRING, .def = "", .min = 0,
     .max = STRMAX(executor_env), .meta = "LIST",
     .help = "what functions get of the environment beyond PATH and LANG: comma-separated NAME "
             "(passed through from the worker's) or NAME=VALUE (set); nothing else of the "
             "worker's"},
    {FIELD(executor_user), .type = WK_CONFIG_STRING, .def = "", .min = 0,
     .max = STRMAX(executor_user), .meta = "USER",
     .help = "account executors run as when the worker runs as root: a name or uid (empty = "
             "nobody; root keeps them root); a worker not run as root must leave it empty or "
             "name its own user"},
    {FIELD(executor_memory_max), .type = WK_CONFIG_BYTES, .def = "0", .min = 0,
     .max = 1099511627776,
     .help = "memory limit of each executor's control group, its children included; an OOM "
             "kill fails the running call with MemoryLimit (0 = no limit; needs cgroups)"},
    {FIELD(executor_pids_max), .type = WK_CONFIG_UINT, .def = "0", .min = 0, .max = 4194304,
     .help = "processes and threads in each executor's control group: a fork beyond it fails "
             "with EAGAIN (0 = no limit; needs cgroups)"},
    {FIELD(admission_memory_floor), .type = WK_CONFIG_STRING, .def = "0", .min = 0,
     .max = STRMAX(admission_memory_floor), .meta = "BYTES|N%",
     .help = "refuse new slots (RESOURCE_EXHAUSTED) while the memory available to the worker "
             "(host MemAvailable, or its cgroup's room) is under this, resuming 1/8 above it "
             "(0 = off)"},
    {FIELD(python), .type = WK_CONFIG_STRING, .def = "/usr/bin/python3", .min = 1,
     .max = STRMAX(python), .meta = "PATH", .help = "interpreter for executors (an executable)"},
    {FIELD(executor_script), .type = WK_CONFIG_STRING, .def = WK_PYTHON_DIR "/worker_executor.py",
     .min = 1, .max = STRMAX(executor_script), .meta = "PATH",
     .doc_default = "PREFIX/share/worker/python/worker_executor.py when installed, "
                    "else python/worker_executor.py of the source tree",
     .help = "the executor program run by python"},
    {FIELD(python_path), .type = WK_CONFIG_STRING, .def = WK_PYTHON_DIR, .min = 0,
     .max = STRMAX(python_path), .meta = "DIRS",
     .doc_default = "PREFIX/share/worker/python when installed, else python/ of the source tree",
     .help = "PYTHONPATH for executors"},
    /* results and watchers */
    {FIELD(result_retention_ms), .type = WK_CONFIG_MS, .def = "600000", .min = 0, .max = 86400000,
     .alias = "retention-ms", .help = "keep terminal results this long"},
    {FIELD(max_retained_results), .type = WK_CONFIG_UINT, .def = "10000", .min = 1, .max = 4194304,
     .help = "keep at most this many terminal results"},
    {FIELD(max_retained_bytes), .type = WK_CONFIG_BYTES, .def = "256MiB", .min = 1024,
     .max = 1099511627776, .help = "keep terminal results holding at most this many bytes"},
    {FIELD(watch_disconnect_grace_ms), .type = WK_CONFIG_MS, .def = "10000", .min = 0,
     .max = 3600000, .alias = "watch-grace-ms",
     .help = "fail a task OWNER_LOST this long after its last watcher broke"},
    {FIELD(watch_stream_max_bytes), .type = WK_CONFIG_BYTES, .def = "8MiB", .min = 65536,
     .max = 68719476736,
     .help = "unsent event bytes one WatchTasks stream may hold (an event always goes to a "
             "stream with nothing unsent); over it the stream ends RESOURCE_EXHAUSTED and "
             "counts as a disconnected watcher"},
    {FIELD(watch_total_max_bytes), .type = WK_CONFIG_BYTES, .def = "256MiB", .min = 65536,
     .max = 1099511627776,
     .help = "unsent event bytes all WatchTasks streams together may hold, a result shared "
             "by many streams counted once; a stream whose event would pass it ends "
             "RESOURCE_EXHAUSTED"},
    {FIELD(progress_events_per_s), .type = WK_CONFIG_UINT, .def = "10", .min = 1, .max = 1000,
     .help = "PROGRESS events per second per task at most on WatchTasks while its calls run "
             "(plus one at every phase change)"},
    {FIELD(task_log_max_bytes), .type = WK_CONFIG_BYTES, .def = "1MiB", .min = 0, .max = 1073741824,
     .help = "captured stdout/stderr of a task's calls kept for GetTaskLogs (workerctl logs); "
             "what is over it is dropped and counted (0 = keep none; at most max_message_bytes "
             "less 8 KiB, so an answer fits a message)"},
    {FIELD(task_logs_total_max_bytes), .type = WK_CONFIG_BYTES, .def = "64MiB", .min = 0,
     .max = 68719476736,
     .help = "captured call output kept for GetTaskLogs over all tasks: the oldest tasks' logs "
             "are evicted first"},
    /* slots and tasks */
    {FIELD(default_slot_ttl_ms), .type = WK_CONFIG_MS, .def = "30000", .min = 1, .max = 3600000,
     .alias = "slot-ttl-ms", .help = "slot lease when a request gives none"},
    {FIELD(max_slot_ttl_ms), .type = WK_CONFIG_MS, .def = "600000", .min = 1, .max = 86400000,
     .help = "longest slot lease accepted"},
    {FIELD(default_task_timeout_ms), .type = WK_CONFIG_MS, .def = "600000", .min = 1,
     .max = 86400000, .alias = "default-timeout-ms",
     .help = "task timeout when a submit gives none"},
    {FIELD(max_task_timeout_ms), .type = WK_CONFIG_MS, .def = "3600000", .min = 1, .max = 604800000,
     .alias = "max-timeout-ms", .help = "longest task timeout accepted"},
    {FIELD(drain_timeout_ms), .type = WK_CONFIG_MS, .def = "30000", .min = 0, .max = 3600000,
     .help = "on SIGTERM, wait this long for running tasks"},
    {FIELD(drain_publish_timeout_ms), .type = WK_CONFIG_MS, .def = "1000", .min = 0, .max = 60000,
     .help = "on SIGTERM, health turns NOT_SERVING and etcd is told `draining` first; new slots "
             "and submits are refused once etcd acknowledged that, or after this long when it "
             "does not answer (still accepting meanwhile; counted in drain_timeout_ms; 0 = "
             "refuse at once)"},
    {FIELD(shutdown_grace_ms), .type = WK_CONFIG_MS, .def = "5000", .min = 100, .max = 600000,
     .help = "after the drain, the worker exits within this: watchers get their terminal events "
             "(up to a quarter of it), executors are asked to stop and killed after another "
             "quarter; the process exits by drain_timeout_ms + shutdown_grace_ms after SIGTERM, "
             "whatever still runs (a supervisor's stop timeout: both plus a margin)"},
    {FIELD(cancel_grace_ms), .type = WK_CONFIG_MS, .def = "2000", .min = 1, .max = 600000,
     .help = "kill an executor whose cancelled call still runs after this long"},
    {FIELD(tick_ms), .type = WK_CONFIG_MS, .def = "500", .min = 10, .max = 60000,
     .help = "timer tick: lease expiry, task timeouts, watch grace, result cleanup"},
    {FIELD(max_message_bytes), .type = WK_CONFIG_BYTES, .def = "4MiB", .min = 1024,
     .max = 1073741824,
     .help = "largest gRPC request: larger ones are refused INVALID_ARGUMENT naming this setting"},
    {FIELD(max_connections), .type = WK_CONFIG_UINT, .def = "0", .min = 0, .max = 1048576,
     .help = "gRPC TCP connections open at once; more are closed at once and counted "
             "(worker_connections_refused_total) (0 = the open-files limit less a quarter, "
             "at least 64 kept for the worker)"},
    {FIELD(reflection), .type = WK_CONFIG_ENUM, .def = "true", .min = 1, .max = STRMAX(reflection),
     .choices = "true|false", .meta = "BOOL",
     .help = "serve gRPC server reflection (grpc.reflection.v1alpha and v1) so grpcurl, grpcui "
             "and the like work without the .proto files; behind auth_token like every RPC"},
    {FIELD(max_inline_output_bytes), .type = WK_CONFIG_BYTES, .def = "4MiB", .min = 0,
     .max = 1073741824,
     .help = "largest outputs kept in a task result without a writer, counted as they arrive; at "
             "most max_message_bytes less 8 KiB, so a result always fits a message"},
    {FIELD(max_calls_per_task), .type = WK_CONFIG_UINT, .def = "1000000", .min = 1,
     .max = 100000000, .help = "most calls one task may make, subcalls included"},
    {FIELD(task_window_initial), .type = WK_CONFIG_UINT, .def = "8", .min = 1, .max = 1048576,
     .help = "a task's calls in flight at first; +1 per success up to task_window_max, "
             "halved on retryable failures"},
    {FIELD(task_window_max), .type = WK_CONFIG_UINT, .def = "256", .min = 8, .max = 1048576,
     .help = "a task's calls in flight at most (its ramp-up ceiling)"},
    {FIELD(subcall_max_depth), .type = WK_CONFIG_UINT, .def = "4", .min = 0, .max = 32,
     .help = "how deep ctx.call may nest"},
    {FIELD(max_calls_in_flight), .type = WK_CONFIG_UINT, .def = "65536", .min = 1024,
     .max = 67108864, .help = "call records held at once, all tasks together"},
    {FIELD(io_scope_max_mb), .type = WK_CONFIG_UINT, .def = "1024", .min = 0, .max = 1048576,
     .help = "a task's scratch directory at most, in MiB, checked every tick while its calls run "
             "(over it the calls phase fails; 0 = unbounded)"},
    /* audit and usage */
    {FIELD(audit_allow), .type = WK_CONFIG_STRING, .def = "", .min = 0, .max = STRMAX(audit_allow),
     .meta = "LIST",
     .help =
         "functions this worker runs: comma-separated names, '*' suffix for a prefix (empty = all)"},
    {FIELD(audit_deny), .type = WK_CONFIG_STRING, .def = "", .min = 0, .max = STRMAX(audit_deny),
     .meta = "LIST",
     .help = "functions refused at activation (ACTIVATION_FAILED), checked before audit_allow"},
    {FIELD(usage_log), .type = WK_CONFIG_STRING, .def = "", .min = 0, .max = STRMAX(usage_log),
     .meta = "FILE",
     .help = "usage sink: one JSON usage record per task appended here (empty = the log only)"},
    /* incident journal (README "Incident replay") */
    {FIELD(core_journal_dir), .type = WK_CONFIG_STRING, .def = "", .min = 0,
     .max = STRMAX(core_journal_dir), .meta = "DIR",
     .help = "record WorkerCore's inputs here, for `workerctl replay` after an incident "
             "(empty = off; off by default: it costs more than 1% of the core's time per task, "
             "see bench_core --journal)"},
    {FIELD(core_journal_max_bytes), .type = WK_CONFIG_BYTES, .def = "64MiB", .min = 65536,
     .max = 1099511627776,
     .help = "the journal's files together at most, about (the oldest file is removed)"},
    {FIELD(core_journal_files), .type = WK_CONFIG_UINT, .def = "4", .min = 2, .max = 1000,
     .help = "the journal rotates across this many files"},
    {FIELD(core_journal_decisions), .type = WK_CONFIG_BOOL, .def = "false",
     .help = "also record the line of every decision the core took, so `workerctl replay "
             "--check` can compare a replay with it (tests, debugging)"},
    /* writer plugins (a plugin the profile enables runs when its setting is set) */
    {FIELD(output_dir), .type = WK_CONFIG_STRING, .def = "", .min = 0, .max = STRMAX(output_dir),
     .meta = "DIR", .help = "file writer: directory for <task_id>.jsonl outputs (empty = off)"},
    {FIELD(redis_addr), .type = WK_CONFIG_STRING, .def = "", .min = 0, .max = STRMAX(redis_addr),
     .meta = "URL",
     .help = "redis writer: server outputs are XADDed to: host:port or "
             "redis://[[user]:password@]host[:port][/db] (rediss:// = TLS) (empty = off)",
     .secret = WK_CONFIG_SECRET_CREDS},
    {FIELD(redis_tls_ca_file), .type = WK_CONFIG_STRING, .def = "", .min = 0,
     .max = STRMAX(redis_tls_ca_file), .meta = "PEM",
     .help = "rediss://: CA certificates the Redis server's certificate is verified against "
             "(empty = the system's)"},
    {FIELD(redis_tls_cert_file), .type = WK_CONFIG_STRING, .def = "", .min = 0,
     .max = STRMAX(redis_tls_cert_file), .meta = "PEM",
     .help = "rediss://: client certificate chain for a server that asks for one (with "
             "redis_tls_key_file)"},
    {FIELD(redis_tls_key_file), .type = WK_CONFIG_STRING, .def = "", .min = 0,
     .max = STRMAX(redis_tls_key_file), .meta = "PEM",
     .help = "rediss://: the client certificate's private key (PEM, unencrypted)"},
    {FIELD(postgres_dsn), .type = WK_CONFIG_STRING, .def = "", .min = 0,
     .max = STRMAX(postgres_dsn), .meta = "DSN",
     .help = "postgres writer: libpq connection string outputs are COPYed through (empty = off; "
             "a password belongs in passfile=FILE)",
     .secret = WK_CONFIG_SECRET_CREDS},
    /* transport security */
    {FIELD(tls_cert_file), .type = WK_CONFIG_STRING, .def = "", .min = 0,
     .max = STRMAX(tls_cert_file), .meta = "PEM",
     .help = "server certificate chain (PEM); with tls_key_file turns TLS on"},
    {FIELD(tls_key_file), .type = WK_CONFIG_STRING, .def = "", .min = 0,
     .max = STRMAX(tls_key_file), .meta = "PEM", .help = "server private key (PEM, unencrypted)"},
    {FIELD(tls_client_ca_file), .type = WK_CONFIG_STRING, .def = "", .min = 0,
     .max = STRMAX(tls_client_ca_file), .meta = "PEM",
     .help = "CA for client certificates: set = mutual TLS required"},
    {FIELD(auth_token), .type = WK_CONFIG_STRING, .def = "", .min = 0, .max = STRMAX(auth_token),
     .meta = "TOKEN",
     .help = "set = every RPC (health included) needs 'authorization: Bearer TOKEN'",
     .secret = WK_CONFIG_SECRET},
    {FIELD(auth_token_file), .type = WK_CONFIG_STRING, .def = "", .min = 0,
     .max = STRMAX(auth_token_file), .meta = "FILE",
     .help = "auth_token read from this file (one trailing newline stripped; not with auth_token)"},
    /* registration and shadow traffic */
    {FIELD(etcd_endpoints), .type = WK_CONFIG_STRING, .def = "", .min = 0,
     .max = STRMAX(etcd_endpoints), .meta = "URLS",
     .help = "etcd endpoints, comma-separated http://host:port (empty = stand-alone)"},
    {FIELD(registry_prefix), .type = WK_CONFIG_STRING, .def = "", .min = 0,
     .max = STRMAX(registry_prefix), .meta = "PREFIX",
     .help = "etcd key prefix the worker registers under (empty = the profile's)"},
    {FIELD(advertise_addr), .type = WK_CONFIG_STRING, .def = "", .min = 0,
     .max = STRMAX(advertise_addr), .meta = "HOST:PORT",
     .help = "address coordinators dial, registered in etcd (empty = listen_addr's bound address; "
             "for 0.0.0.0 or [::], this host's primary address, logged as advertise_addr_chosen)"},
    {FIELD(etcd_lease_ttl_s), .type = WK_CONFIG_UINT, .def = "10", .min = 1, .max = 3600,
     .help = "etcd lease TTL in seconds: a dead worker's key is gone this long after"},
    {FIELD(heartbeat_interval_ms), .type = WK_CONFIG_MS, .def = "3000", .min = 10, .max = 3600000,
     .help = "the registration value is re-put at least this often"},
    {FIELD(shadow_target_addr), .type = WK_CONFIG_STRING, .def = "", .min = 0,
     .max = STRMAX(shadow_target_addr), .meta = "HOST:PORT",
     .help = "mirror sampled successful submissions to this worker (empty = off)"},
    {FIELD(metrics_addr), .type = WK_CONFIG_STRING, .def = "", .min = 0,
     .max = STRMAX(metrics_addr), .meta = "HOST:PORT",
     .help =
         "serve Prometheus metrics on http://HOST:PORT/metrics (port 0 picks one; empty = off)"},
    {FIELD(status_page), .type = WK_CONFIG_BOOL, .def = "true",
     .help = "with metrics_addr: serve the live status page on http://HOST:PORT/ and its JSON on "
             "/status (auth_token and TLS apply; false = /metrics only)"},
    {FIELD(shadow_sample_percent), .type = WK_CONFIG_UINT, .def = "100", .min = 0, .max = 100,
     .help = "percent of successful submissions mirrored to shadow_target_addr"},
    {FIELD(builder_concurrency), .type = WK_CONFIG_UINT, .def = "4", .min = 1, .max = 65536,
     .help = "tasks in their builder phase at once (the builder semaphore)"},
    {FIELD(scan_concurrency), .type = WK_CONFIG_UINT, .def = "4", .min = 1, .max = 65536,
     .help = "streaming builders producing calls at once (the scan semaphore)"},
    {FIELD(executor_concurrency), .type = WK_CONFIG_UINT, .def = "1048576", .min = 1,
     .max = 1048576, .help = "tasks in their calls phase at once (the executor semaphore)"},
    {FIELD(plugin_concurrency), .type = WK_CONFIG_UINT, .def = "4", .min = 1, .max = 65536,
     .help = "tasks in their writer phase at once (the plugin semaphore)"},
    {FIELD(log_level), .type = WK_CONFIG_ENUM, .def = "info", .min = 1, .max = STRMAX(log_level),
     .choices = "debug|info|warn|error", .meta = "LEVEL",
     .help = "lowest level logged (JSON lines on stderr)"},
};

#define N_ITEMS (sizeof table / sizeof table[0])
_Static_assert(N_ITEMS <= WK_CONFIG_MAX_ITEMS, "raise WK_CONFIG_MAX_ITEMS");

size_t wk_config_count(void) { return N_ITEMS; }

const wk_config_item *wk_config_item_at(size_t i) {
  if (i >= N_ITEMS) return NULL;
  return &table[i];
}

const wk_config_item *wk_config_find(const char *name, size_t *index) {
  for (size_t i = 0; i < N_ITEMS; i++) {
    if (strcmp(table[i].name, name) == 0) {
      if (index) *index = i;
      return &table[i];
    }
  }
  return NULL;
}

size_t wk_config__index_of(const char *name) {
  size_t i = 0;
  const wk_config_item *it = wk_config_find(name, &i);
  return it ? i : wk_config_count();
}

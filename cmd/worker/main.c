/* worker: the Worker daemon (Profile "block"). Parses flags into the configuration
 * and hands over to wk_app_run, the single wiring and start-up/shutdown sequence. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app/wk_app.h"

static const char usage[] =
    "usage: worker [flags]\n"
    "\n"
    "Runs Python functions for a coordinator over gRPC (worker.v1.WorkerService).\n"
    "\n"
    "  --listen HOST:PORT            gRPC address (default 127.0.0.1:7070; port 0 = any free)\n"
    "  --task-slots N                concurrent tasks (default 16)\n"
    "  --code-root DIR               function code store (default ./code)\n"
    "  --executors N                 Python executors prestarted and kept (default 2)\n"
    "  --executors-max N             grow to this many while work waits (default 4)\n"
    "  --pipeline-depth N            calls in flight per executor (default 16)\n"
    "  --max-calls-per-executor N    recycle an executor after N calls (default 0 = never)\n"
    "  --max-executor-rss-mb N       recycle an executor above N MiB peak RSS (default 0 = never)\n"
    "  --executor-idle-timeout-ms N  stop idle executors above the minimum after N ms (default 60000)\n"
    "  --executor-rlimit-as-mb N     executor address-space limit (default 0 = none)\n"
    "  --executor-rlimit-nofile N    executor open-files limit (default 1024)\n"
    "  --executor-rlimit-cpu-s N     executor CPU-seconds limit (default 0 = none)\n"
    "  --python PATH                 interpreter for executors (default /usr/bin/python3)\n"
    "  --executor-script PATH        worker_executor.py (default: the source tree's python/)\n"
    "  --scratch-root DIR            parent of per-task scratch dirs (default: fresh under $TMPDIR)\n"
    "  --retention-ms N              keep terminal results this long (default 600000)\n"
    "  --max-retained-results N      ... at most this many (default 10000)\n"
    "  --watch-grace-ms N            OWNER_LOST this long after the last watcher broke (default 10000)\n"
    "  --slot-ttl-ms N               default slot lease (default 30000)\n"
    "  --max-slot-ttl-ms N           longest slot lease (default 600000)\n"
    "  --default-timeout-ms N        task timeout when a submit gives none (default 600000)\n"
    "  --max-timeout-ms N            longest task timeout accepted (default 3600000)\n"
    "  --drain-timeout-ms N          on SIGTERM, wait this long for running tasks (default 30000)\n"
    "  --cancel-grace-ms N           kill an executor whose cancelled call runs this long (default 2000)\n"
    "  --max-message-bytes N         largest gRPC request (default 4194304)\n"
    "  --log-level LEVEL             debug, info, warn or error (default info)\n"
    "  -h, --help                    this text\n"
    "\n"
    "Logs are JSON lines on stderr; SIGINT/SIGTERM drain and stop (a second one skips the wait).\n";

enum {
  OPT_LISTEN = 256, OPT_SLOTS, OPT_CODE_ROOT, OPT_EXECUTORS, OPT_PYTHON, OPT_SCRIPT, OPT_SCRATCH,
  OPT_RETENTION, OPT_MAX_RETAINED, OPT_GRACE, OPT_TTL, OPT_MAX_TTL, OPT_TIMEOUT, OPT_MAX_TIMEOUT,
  OPT_DRAIN, OPT_CANCEL_GRACE, OPT_MAX_MSG, OPT_LOG_LEVEL, OPT_EXEC_MAX, OPT_DEPTH, OPT_MAX_CALLS,
  OPT_MAX_RSS, OPT_IDLE, OPT_RL_AS, OPT_RL_NOFILE, OPT_RL_CPU,
};

static int parse_i64(const char *flag, const char *s, long long *out) {
  char *end = NULL;
  long long v = strtoll(s, &end, 10);
  if (!*s || *end) {
    fprintf(stderr, "worker: %s needs an integer, got '%s'\n", flag, s);
    return -1;
  }
  *out = v;
  return 0;
}

static int copy_flag(char *dst, size_t cap, const char *flag, const char *v) {
  if (strlen(v) >= cap) {
    fprintf(stderr, "worker: %s is longer than %zu bytes\n", flag, cap - 1);
    return -1;
  }
  snprintf(dst, cap, "%s", v);
  return 0;
}

int main(int argc, char **argv) {
  static const struct option opts[] = {
      {"listen", required_argument, 0, OPT_LISTEN},
      {"task-slots", required_argument, 0, OPT_SLOTS},
      {"code-root", required_argument, 0, OPT_CODE_ROOT},
      {"executors", required_argument, 0, OPT_EXECUTORS},
      {"python", required_argument, 0, OPT_PYTHON},
      {"executor-script", required_argument, 0, OPT_SCRIPT},
      {"scratch-root", required_argument, 0, OPT_SCRATCH},
      {"retention-ms", required_argument, 0, OPT_RETENTION},
      {"max-retained-results", required_argument, 0, OPT_MAX_RETAINED},
      {"watch-grace-ms", required_argument, 0, OPT_GRACE},
      {"slot-ttl-ms", required_argument, 0, OPT_TTL},
      {"max-slot-ttl-ms", required_argument, 0, OPT_MAX_TTL},
      {"default-timeout-ms", required_argument, 0, OPT_TIMEOUT},
      {"max-timeout-ms", required_argument, 0, OPT_MAX_TIMEOUT},
      {"drain-timeout-ms", required_argument, 0, OPT_DRAIN},
      {"cancel-grace-ms", required_argument, 0, OPT_CANCEL_GRACE},
      {"max-message-bytes", required_argument, 0, OPT_MAX_MSG},
      {"log-level", required_argument, 0, OPT_LOG_LEVEL},
      {"executors-max", required_argument, 0, OPT_EXEC_MAX},
      {"pipeline-depth", required_argument, 0, OPT_DEPTH},
      {"max-calls-per-executor", required_argument, 0, OPT_MAX_CALLS},
      {"max-executor-rss-mb", required_argument, 0, OPT_MAX_RSS},
      {"executor-idle-timeout-ms", required_argument, 0, OPT_IDLE},
      {"executor-rlimit-as-mb", required_argument, 0, OPT_RL_AS},
      {"executor-rlimit-nofile", required_argument, 0, OPT_RL_NOFILE},
      {"executor-rlimit-cpu-s", required_argument, 0, OPT_RL_CPU},
      {"help", no_argument, 0, 'h'},
      {0, 0, 0, 0},
  };
  wk_app_config cfg;
  wk_app_config_default(&cfg);
  int c;
  while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
    long long v = 0;
    const char *flag = NULL;
    for (const struct option *o = opts; o->name; o++) {
      if (o->val == c) flag = o->name;
    }
    int rc = 0;
    switch (c) {
      case 'h': fputs(usage, stdout); return 0;
      case OPT_LISTEN: rc = copy_flag(cfg.listen_addr, sizeof cfg.listen_addr, flag, optarg); break;
      case OPT_CODE_ROOT: rc = copy_flag(cfg.code_root, sizeof cfg.code_root, flag, optarg); break;
      case OPT_PYTHON: rc = copy_flag(cfg.python, sizeof cfg.python, flag, optarg); break;
      case OPT_SCRIPT: rc = copy_flag(cfg.executor_script, sizeof cfg.executor_script, flag, optarg); break;
      case OPT_SCRATCH: rc = copy_flag(cfg.scratch_root, sizeof cfg.scratch_root, flag, optarg); break;
      case OPT_LOG_LEVEL: rc = copy_flag(cfg.log_level, sizeof cfg.log_level, flag, optarg); break;
      case '?': fputs(usage, stderr); return 2;
      default:
        rc = parse_i64(flag, optarg, &v);
        if (rc == 0 && v < 0) {
          fprintf(stderr, "worker: --%s must not be negative\n", flag);
          rc = -1;
        }
        switch (c) {
          case OPT_SLOTS: cfg.task_slots = (uint32_t)(v > 0xffffffffLL ? 0 : v); break;
          case OPT_EXECUTORS: cfg.executors = (uint32_t)(v > 0xffffffffLL ? 0 : v); break;
          case OPT_RETENTION: cfg.result_retention_ms = v; break;
          case OPT_MAX_RETAINED: cfg.max_retained_results = (uint32_t)(v > 0xffffffffLL ? 0 : v); break;
          case OPT_GRACE: cfg.watch_disconnect_grace_ms = v; break;
          case OPT_TTL: cfg.default_slot_ttl_ms = v; break;
          case OPT_MAX_TTL: cfg.max_slot_ttl_ms = v; break;
          case OPT_TIMEOUT: cfg.default_task_timeout_ms = v; break;
          case OPT_MAX_TIMEOUT: cfg.max_task_timeout_ms = v; break;
          case OPT_DRAIN: cfg.drain_timeout_ms = v; break;
          case OPT_CANCEL_GRACE: cfg.cancel_grace_ms = v; break;
          case OPT_MAX_MSG: cfg.max_message_bytes = (size_t)v; break;
          case OPT_EXEC_MAX: cfg.executors_max = (uint32_t)(v > 0xffffffffLL ? 0 : v); break;
          case OPT_DEPTH: cfg.pipeline_depth = (uint32_t)(v > 0xffffffffLL ? 0 : v); break;
          case OPT_MAX_CALLS: cfg.max_calls_per_executor = (uint64_t)v; break;
          case OPT_MAX_RSS: cfg.max_executor_rss_mb = (uint64_t)v; break;
          case OPT_IDLE: cfg.executor_idle_timeout_ms = v; break;
          case OPT_RL_AS: cfg.executor_rlimit_as_mb = (uint64_t)v; break;
          case OPT_RL_NOFILE: cfg.executor_rlimit_nofile = (uint64_t)v; break;
          case OPT_RL_CPU: cfg.executor_rlimit_cpu_s = (uint64_t)v; break;
          default: break;
        }
    }
    if (rc != 0) return 2;
  }
  if (optind < argc) {
    fprintf(stderr, "worker: unexpected argument '%s'\n%s", argv[optind], usage);
    return 2;
  }
  return wk_app_run(&cfg);
}

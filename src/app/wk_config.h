/* wk_config.h: the Worker's settings as one table (WorkerFullConfig, DESIGN.md §7).
 *
 * One row per field of wk_app_config: its snake_case name, type, default, range, a
 * one-line description and its offset into the struct. The table is the single place
 * defaults live; --help, --print-config and docs/specs/configuration.md are generated from it.
 *
 * Four sources fill the struct, each overriding the one before:
 *   defaults < config file (YAML, `--config PATH` or WORKER_CONFIG)
 *            < environment WORKER_<NAME> < flags --name-with-dashes VALUE
 * and a wk_config_sources records, per setting, which one set the value.
 *
 * Errors are lines of text (each ending in '\n') written to a caller's buffer (each
 * function starts it afresh); every function that can fail returns how many problems
 * it found (0 = fine) and keeps going after a bad value, so one run reports every
 * problem. A full buffer truncates the text, never the count. Nothing here allocates
 * memory that outlives a call; nothing is global but the static table.
 *
 * Adding a setting: append the field to wk_app_config, a row to the table in
 * wk_config_table.c (test_config checks that every field has a row), a cross-field rule in
 * wk_config_validate if it needs one, and regenerate docs/specs/configuration.md with
 * `worker --print-config --markdown`. */
#ifndef WK_CONFIG_H
#define WK_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/** Longest path a setting holds, its terminating NUL included. */
#define WK_CONFIG_PATH_MAX 1024
/** Longest address (host:port, [v6]:port, unix:PATH) a setting holds, NUL included. */
#define WK_CONFIG_ADDR_MAX 256

/** The Worker's settings, one field per row of the table (the table says each one's
 * default, range and meaning). */
typedef struct wk_app_config {
  char listen_addr[WK_CONFIG_ADDR_MAX];
  uint32_t task_slots;
  char code_root[WK_CONFIG_PATH_MAX];
  char scratch_root[WK_CONFIG_PATH_MAX]; /* "" = a fresh directory under $TMPDIR */
  uint32_t executors;                    /* executors_min: prestarted and kept */
  uint32_t executors_max;                /* grown to on demand */
  uint32_t pipeline_depth;               /* calls in flight per executor */
  int64_t executor_idle_timeout_ms;
  uint64_t max_calls_per_executor; /* recycle after this many calls (0 = never) */
  uint64_t max_executor_rss_mb;    /* recycle above this peak RSS (0 = never) */
  int64_t executor_heartbeat_interval_ms;
  int64_t executor_heartbeat_timeout_ms;
  uint64_t executor_rlimit_as_mb; /* 0 = unlimited */
  uint64_t executor_rlimit_nofile;
  uint64_t executor_rlimit_cpu_s;       /* 0 = unlimited */
  uint64_t executor_rlimit_nproc;       /* RLIMIT_NPROC of executors (0 = unchanged) */
  uint32_t executor_output_line_max;    /* bytes of an executor's output line logged */
  uint32_t executor_output_bytes_per_s; /* executor output logged per second, bytes */
  uint32_t executor_output_lines_per_s; /* and lines */
  char executor_env[1024];              /* NAME (passed through) or NAME=VALUE, by commas */
  char executor_user[64];           /* account executors run as under a root worker ("" = nobody) */
  char executor_isolation[16];      /* "function" or "shared" */
  bool executor_sched_batch;        /* executors run under SCHED_BATCH */
  uint64_t executor_timer_slack_ns; /* executors' timer slack (0 = the worker's) */
  uint64_t executor_memory_max;     /* bytes per executor's control group (0 = no limit) */
  uint64_t executor_pids_max;       /* processes per executor's control group (0 = no limit) */
  char admission_memory_floor[32];  /* "0" off, bytes or N%: refuse new slots under it */
  char python[WK_CONFIG_PATH_MAX];
  char executor_script[WK_CONFIG_PATH_MAX];
  char python_path[WK_CONFIG_PATH_MAX];
  int64_t result_retention_ms;
  uint32_t max_retained_results;
  uint64_t max_retained_bytes;
  int64_t watch_disconnect_grace_ms;
  uint64_t watch_stream_max_bytes;    /* unsent event bytes per WatchTasks stream */
  uint64_t watch_total_max_bytes;     /* ... over all streams, shared results once */
  uint32_t progress_events_per_s;     /* PROGRESS events per task and second at most */
  uint64_t task_log_max_bytes;        /* captured call output kept per task (GetTaskLogs) */
  uint64_t task_logs_total_max_bytes; /* ... over all tasks */
  int64_t default_slot_ttl_ms;
  int64_t max_slot_ttl_ms;
  int64_t default_task_timeout_ms;
  int64_t max_task_timeout_ms;
  int64_t drain_timeout_ms;
  int64_t shutdown_grace_ms;        /* after the drain: flush, stop, exit within this */
  int64_t drain_publish_timeout_ms; /* refuse once etcd says draining, or after this */
  int64_t cancel_grace_ms;
  int64_t tick_ms;
  size_t max_message_bytes;
  uint32_t max_connections; /* gRPC TCP connections open at once; 0 = from the NOFILE limit */
  char reflection[8];       /* "true": serve gRPC server reflection; "false": not */
  size_t max_inline_output_bytes;
  uint32_t max_calls_per_task;
  uint32_t task_window_initial; /* a task's calls in flight at first (the ramp-up's start) */
  uint32_t task_window_max;     /* a task's calls in flight at most (ramp-up ceiling) */
  uint32_t subcall_max_depth;   /* ctx.call nesting allowed */
  uint32_t max_calls_in_flight; /* dispatcher call records (all tasks) */
  char etcd_endpoints[1024];    /* comma-separated http://host:port; "" = stand-alone */
  char registry_prefix[256];    /* "" = the Profile's */
  char advertise_addr[WK_CONFIG_ADDR_MAX]; /* "" = listen_addr with its bound port */
  uint64_t etcd_lease_ttl_s;
  int64_t heartbeat_interval_ms;          /* registration value refreshed at least this often */
  char tls_cert_file[WK_CONFIG_PATH_MAX]; /* "" = plaintext gRPC */
  char tls_key_file[WK_CONFIG_PATH_MAX];
  char tls_client_ca_file[WK_CONFIG_PATH_MAX]; /* set = mutual TLS required */
  char auth_token[512]; /* set = every RPC needs "authorization: Bearer <token>" */
  char auth_token_file[WK_CONFIG_PATH_MAX]; /* auth_token read from this file ("" = none) */
  uint64_t io_scope_max_mb;                 /* a task's scratch directory at most (0 = unbounded) */
  uint32_t
      code_epochs_kept; /* newest epochs kept per function besides CURRENT and pins (0 = all) */
  bool deploy_enabled;  /* the DeployCode / SetCurrentEpoch RPCs are served */
  char deploy_allowed_clients[1024]; /* who may call them: addresses, networks, certificate
                                        names (comma-separated); "" = any client with the token */
  uint64_t deploy_max_bytes;         /* a DeployCode's file contents together at most */
  uint32_t deploy_max_files;         /* files in one DeployCode at most */
  int64_t deploy_check_timeout_ms;   /* the code check (compile + import) is killed after this */
  uint64_t registry_code_max_bytes;  /* the registry value's "code" field at most */
  char audit_allow[1024];            /* functions allowed (comma-separated, '*' suffix); "" = all */
  char audit_deny[1024];             /* functions refused, checked first */
  char
      usage_log[WK_CONFIG_PATH_MAX]; /* usage records appended here as JSON lines ("" = log only) */
  char core_journal_dir[WK_CONFIG_PATH_MAX]; /* incident journal of the core's inputs ("" = off) */
  uint64_t core_journal_max_bytes;           /* its files together at most, about */
  uint32_t core_journal_files;               /* rotated across this many files */
  bool core_journal_decisions;               /* also record each decision's line (tests) */
  char output_dir[WK_CONFIG_PATH_MAX]; /* file writer: where <task_id>.jsonl files go ("" = off) */
  char redis_addr[1024];               /* redis writer: host:port or a redis(s):// URL ("" = off) */
  char redis_tls_ca_file[WK_CONFIG_PATH_MAX];   /* rediss: CA of the server ("" = system's) */
  char redis_tls_cert_file[WK_CONFIG_PATH_MAX]; /* rediss: client certificate ("" = none) */
  char redis_tls_key_file[WK_CONFIG_PATH_MAX];  /* and its key */
  char postgres_dsn[1024]; /* postgres writer: libpq connection string ("" = off) */
  char shadow_target_addr[WK_CONFIG_ADDR_MAX]; /* "" = no shadow forwarding */
  char metrics_addr[WK_CONFIG_ADDR_MAX];       /* "" = no Prometheus endpoint */
  bool status_page; /* the status page and /status beside /metrics (wk_status.h) */
  uint32_t shadow_sample_percent;
  uint32_t builder_concurrency; /* phase semaphores: tasks in each phase at once */
  uint32_t scan_concurrency;
  uint32_t executor_concurrency;
  uint32_t plugin_concurrency;
  char log_level[16];
} wk_app_config;

/** Upper bound on table rows (wk_config_count() <= this; checked at compile time). */
#define WK_CONFIG_MAX_ITEMS 112
/** Upper bound on setting flags in one command line. */
#define WK_CONFIG_MAX_FLAGS 256

typedef enum wk_config_type {
  WK_CONFIG_STRING, /* char[N]; min/max bound its length (max <= N - 1) */
  WK_CONFIG_UINT,   /* uint32_t or uint64_t (by the field's size): 0, 16, 1000000 */
  WK_CONFIG_MS,     /* int64_t milliseconds: 250, 250ms, 30s, 5m, 1h */
  WK_CONFIG_BYTES,  /* bytes, size_t or uint64_t/uint32_t: 4096, 64KiB, 4MiB, 1GiB, 1TiB */
  WK_CONFIG_BOOL,   /* bool: true/false, yes/no, on/off, 1/0 (any case) */
  WK_CONFIG_ENUM,   /* char[N] holding one of `choices` */
} wk_config_type;

/** Whether a setting's value is a secret, and how much of it may be shown. */
typedef enum wk_config_secret {
  WK_CONFIG_PUBLIC = 0,   /* shown as it is */
  WK_CONFIG_SECRET,       /* never shown (printed as "***") */
  WK_CONFIG_SECRET_CREDS, /* a connection string or URL: shown with its password masked */
} wk_config_secret;

/** One setting. */
typedef struct wk_config_item {
  const char *name; /* snake_case: the struct field, the YAML key, WORKER_<NAME> */
  wk_config_type type;
  size_t offset;           /* offsetof(wk_app_config, <name>) */
  size_t size;             /* sizeof the field */
  const char *def;         /* the default, in the syntax the sources accept */
  int64_t min, max;        /* numbers: the range; strings: bounds on the length */
  const char *choices;     /* WK_CONFIG_ENUM: "debug|info|warn|error"; else NULL */
  const char *alias;       /* an older flag name ("listen" for --listen), or NULL */
  const char *meta;        /* placeholder in --help ("HOST:PORT"), or NULL for the type's */
  const char *doc_default; /* the default as documented when `def` is machine-specific */
  const char *help;        /* one line */
  wk_config_secret secret; /* secret: masked when shown, WORKER_<NAME> scrubbed after reading */
} wk_config_item;

typedef enum wk_config_origin {
  WK_CONFIG_FROM_DEFAULT = 0,
  WK_CONFIG_FROM_FILE,
  WK_CONFIG_FROM_ENV,
  WK_CONFIG_FROM_FLAG,
} wk_config_origin;

/** Where one value came from. `where` is "default", "worker.yaml:12",
 * "WORKER_TASK_SLOTS" or "--task-slots" (the flag as typed, alias included). */
typedef struct wk_config_source {
  wk_config_origin origin;
  char where[256];
} wk_config_source;

/** Per setting (indexed like the table), where its value came from. */
typedef struct wk_config_sources {
  wk_config_source item[WK_CONFIG_MAX_ITEMS];
} wk_config_sources;

/** The command line, split into the special flags and the settings it sets. Values
 * point into the argv given to wk_config_parse_cli, which must outlive this. */
typedef struct wk_config_cli {
  const char *config_path; /* --config PATH, or NULL */
  bool help;               /* -h, --help */
  bool version;            /* --version */
  bool print_config;       /* --print-config */
  bool json;               /* --json (with --print-config) */
  bool markdown;           /* --markdown (with --print-config): the settings reference */
  size_t n_flags;
  struct {
    size_t index;     /* row in the table */
    const char *flag; /* as typed, without "=VALUE": "--retention-ms" */
    size_t flag_len;
    const char *value;
  } flags[WK_CONFIG_MAX_FLAGS];
} wk_config_cli;

typedef enum wk_config_format {
  WK_CONFIG_TEXT, /* aligned columns: name, value, source */
  WK_CONFIG_JSON, /* {"name": {"value": ..., "source": "..."}, ...} */
} wk_config_format;

/* ---- the table ------------------------------------------------------------------ */

/** Number of settings (rows). */
size_t wk_config_count(void);

/** Row i (i < wk_config_count()); the table is static, never freed. */
const wk_config_item *wk_config_item_at(size_t i);

/** The row named `name` (snake_case), or NULL. Sets *index when found and index is
 * not NULL. */
const wk_config_item *wk_config_find(const char *name, size_t *index);

/** Checks the table itself: names unique and snake_case, aliases unique, each field's
 * size fits its type, every default parses and lies in its range, and the rows cover
 * every field of wk_app_config (a field without a row is reported). Returns the number
 * of problems, one line each in err. For tests. */
int wk_config_check_table(char *err, size_t len);

/* ---- the sources, lowest precedence first ---------------------------------------- */

/** Fills every setting of cfg with its default from the table and, when sources is not
 * NULL, marks each as "default". Cannot fail (a default that does not parse is a bug
 * caught by wk_config_check_table; it aborts here). */
void wk_config_defaults(wk_app_config *cfg, wk_config_sources *sources);

/** Parses `text` as a value of `item` into `field` (the item's storage, `item->size`
 * bytes). Checks the syntax and what the field can hold (string length, integer
 * width), not the table's range: that is wk_config_validate's. Returns 0, or -1 with
 * one message (no location, no newline) in err: "expected a whole number, got 'x'". */
int wk_config_parse_value(const wk_config_item *item, const char *text, void *field, char *err,
                          size_t len);

/** Reads the YAML file at `path`: a mapping of setting names to scalar values
 * (`task_slots: 32`, `listen_addr: "0.0.0.0:7070"`, `max_message_bytes: 8MiB`; quoted
 * values are strings, so a number must not be quoted). Each line added to err starts
 * with "PATH:LINE: ":
 *   - unknown setting 'task_slot' (did you mean task_slots?)
 *   - task_slots: expected a whole number, got 'many' (also: a quoted number, a list,
 *     a mapping, no value)
 *   - duplicate setting 'task_slots' (first set on line 2)
 *   - the file must be a mapping of setting: value (also: a second document)
 *   - YAML syntax error: ... (then the only line, and nothing of the file is applied)
 * and "PATH: cannot read: <strerror>" when the file cannot be opened. Otherwise the
 * values that parse are applied even when others fail; sources (may be NULL) get
 * "PATH:LINE". Returns the number of problems. */
int wk_config_load_file(wk_app_config *cfg, const char *path, wk_config_sources *sources, char *err,
                        size_t len);

/** Applies WORKER_<NAME>=VALUE overrides from envp (a NULL-terminated "NAME=VALUE"
 * array such as environ; NULL = none). WORKER_CONFIG names the file and is skipped
 * here. Problems: "WORKER_TASK_SLOTS: expected a whole number, got 'x'". A WORKER_*
 * name that is no setting is only a warning line, not counted (other tools use such
 * names: scripts/run.sh reads WORKER_PORT): "warning: WORKER_TASK_SLOT is not a
 * setting; ignored (did you mean WORKER_TASK_SLOTS?)" — so print err even when this
 * returns 0. Returns the number of problems. */
int wk_config_apply_env(wk_app_config *cfg, char *const envp[], wk_config_sources *sources,
                        char *err, size_t len);

/** Splits argv (argv[0] is the program) into cli: --config PATH, --print-config,
 * --json, --markdown, -h/--help, and `--name-with-dashes VALUE` or `--name=VALUE` for
 * every setting (and its alias). Does not parse the values (wk_config_apply_flags
 * does). Lines: "unknown flag '--task-slot' (did you mean --task-slots?)",
 * "--task-slots needs a value", "unexpected argument 'x'", "too many flags". Returns
 * the number of problems. */
int wk_config_parse_cli(int argc, char *const argv[], wk_config_cli *cli, char *err, size_t len);

/** Applies the setting flags recorded in cli, in order (the last one wins). Lines:
 * "--task-slots: expected a whole number, got 'x'". Returns the number of problems. */
int wk_config_apply_flags(wk_app_config *cfg, const wk_config_cli *cli, wk_config_sources *sources,
                          char *err, size_t len);

/** The whole sequence: defaults, then the file (cli->config_path, else WORKER_CONFIG
 * from envp, else none), then the environment, then the flags (cli may be NULL). Every
 * source is applied and every problem reported; returns their number. Does not
 * validate. Two derived defaults: executors_max left at its default is raised to a
 * larger executors (source "default, raised to executors"); and when the running
 * program is installed (wk_config_installed_python_dir of /proc/self/exe finds its
 * Python files), executor_script and python_path default to that directory instead of
 * the source tree's python/ (source "default, installed"). sources may be NULL. */
int wk_config_load(wk_app_config *cfg, wk_config_sources *sources, const wk_config_cli *cli,
                   char *const envp[], char *err, size_t len);

/** Where an installed program finds its Python files: for the program at `exe_path`
 * (absolute, e.g. the target of /proc/self/exe, "PREFIX/bin/worker"), writes
 * "PREFIX/share/worker/python" into out and returns 0 when that directory holds a
 * readable worker_executor.py; returns -1 (out emptied) when it does not, when
 * exe_path has no directory, or when the path does not fit in len. Reads the
 * filesystem, allocates nothing. */
int wk_config_installed_python_dir(const char *exe_path, char *out, size_t len);

/** wk_config_load with the Profile's defaults: `tune(tune_ud, cfg)` (tune may be NULL)
 * changes the built-in defaults before the file, the environment and the flags apply;
 * settings it changed show the source "default, profile". */
int wk_config_load_tuned(wk_app_config *cfg, wk_config_sources *sources, const wk_config_cli *cli,
                         char *const envp[], void (*tune)(const void *tune_ud, wk_app_config *cfg),
                         const void *tune_ud, char *err, size_t len);

/** Removes the WORKER_<NAME> variable of every secret setting from this process's
 * environment, overwriting "NAME=VALUE" in place first, so neither children nor
 * /proc/<pid>/environ see it. Call after wk_config_load and before any thread starts
 * (the environment is not thread-safe). Returns how many variables it removed. */
int wk_config_scrub_secret_env(void);

/** Overwrites with '*' the value of every secret setting's flag in the command line
 * `cli` was parsed from (its values point into main's argv), so /proc/<pid>/cmdline,
 * which every local user may read, no longer shows it. Call after wk_config_load (the
 * values are copied by then); cli's values of secret flags are '*'s afterwards.
 * Returns how many values it overwrote. */
int wk_config_scrub_secret_args(const wk_config_cli *cli);

/* ---- checking and showing ------------------------------------------------------- */

/** Checks every value against the table's ranges, lengths and choices, then the
 * cross-field rules: default_slot_ttl_ms <= max_slot_ttl_ms, default_task_timeout_ms
 * <= max_task_timeout_ms, task_window_initial <= task_window_max, executors_max 0 or
 * >= executors, heartbeat timeout above the interval, listen_addr host:port (or
 * unix:PATH), code_root and scratch_root (when set) existing directories, python executable, executor_script readable. Writes one
 * line per problem ("task_slots must be between 1 and 1048576, got 0") and returns
 * their number (0 = valid). Touches nothing but err. */
int wk_config_validate(const wk_app_config *cfg, char *err, size_t len);

/** wk_config_validate, with each line naming the source of the value it is about:
 * "task_slots must be between 1 and 1048576, got 0 (from WORKER_TASK_SLOTS)". */
int wk_config_validate_sources(const wk_app_config *cfg, const wk_config_sources *sources,
                               char *err, size_t len);

/** Writes the value of `item` in cfg as text ("16", "127.0.0.1:7070", "true") into
 * buf; returns buf. */
const char *wk_config_format_value(const wk_app_config *cfg, const wk_config_item *item, char *buf,
                                   size_t len);

/** wk_config_format_value as shown to people: a secret setting (item->secret) shows
 * "***", a connection string its password masked (wk_mask_credentials), an unset one
 * "". Every place that prints a setting's value uses this. Returns buf. */
const char *wk_config_format_shown(const wk_app_config *cfg, const wk_config_item *item, char *buf,
                                   size_t len);

/** Prints the effective configuration with each value's source (sources may be NULL:
 * all "default"); secret values masked (wk_config_format_shown). */
void wk_config_print(FILE *out, const wk_app_config *cfg, const wk_config_sources *sources,
                     wk_config_format format);

/** Prints the settings reference as a Markdown table (name, env var, flag, type,
 * default, range, description): the body of docs/specs/configuration.md. */
void wk_config_print_markdown(FILE *out);

/** Prints --help for the program named `program` ("usage: PROGRAM ..."): the special
 * flags, then every setting's flag, placeholder, default and description, generated
 * from the table. The defaults shown are those in `defaults` (the program's own, e.g.
 * after its Profile's tuning), or the table's when it is NULL. */
void wk_config_print_help(FILE *out, const char *program, const wk_app_config *defaults);

#endif

/* workerctl.h: shared declarations of the workerctl client CLI.
 *
 * main.c parses the command line (workerctl_args.c holds the flag table and the
 * parser), workerctl_cmds.c runs the commands over wk_grpc_client, and
 * workerctl_format.c prints responses readably or as JSON lines. */
#ifndef WORKERCTL_H
#define WORKERCTL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <jansson.h>

#include "adapters/wk_code_check.h"
#include "adapters/wk_etcd_registry.h"
#include "worker/v1/worker.pb-c.h"

/* ---- exit codes (documented in `workerctl --help`) ------------------------------ */

enum {
  CTL_EXIT_OK = 0,          /* success; the task SUCCEEDED or is still running */
  CTL_EXIT_TASK_FAILED = 1, /* the task ended FAILED or CANCELLED; health not SERVING;
                               a local operation (deploy) failed */
  CTL_EXIT_USAGE = 2,       /* bad command line, bad ARGS JSON */
  CTL_EXIT_STATUS = 3,      /* the worker answered an error status */
  CTL_EXIT_UNREACHABLE = 4, /* the worker could not be reached, or the deadline passed;
                               submit found no worker in etcd, or etcd was unreachable */
};

#define CTL_DEFAULT_ADDR "127.0.0.1:7070"
#define CTL_DEFAULT_DEADLINE_MS 10000
#define CTL_STR2(x) #x
#define CTL_STR(x) CTL_STR2(x)  /* a macro's value as a string literal */
#define CTL_MAX_POSITIONAL 256u /* positional arguments (task ids of a watch) */
#define CTL_MAX_KV 128u         /* --label / --option / --result-option pairs each */
#define CTL_TASK_ID_MAX 128u
#define CTL_SUBMIT_MAX_TRIES \
  8 /* workers a submit picked from etcd tries at most (a plain
                                 number: it is also printed in the help text) */

/* ---- command line ------------------------------------------------------------------ */

typedef enum ctl_flag_id {
  F_ADDR,
  F_JSON,
  F_DEADLINE_MS,
  F_HELP,
  F_TTL_MS,
  F_TASK_ID,
  F_SLOT_ID,
  F_BUILDER,
  F_EPOCH,
  F_ENTRYPOINT,
  F_BYTES,
  F_ARGS_FILE,
  F_TIMEOUT_MS,
  F_CONTINUE,
  F_RETRIES,
  F_LABEL,
  F_OPTION,
  F_RESULT_HANDLER,
  F_RESULT_OPTION,
  F_WATCH,
  F_REASON,
  F_SERVICE,
  F_CODE_ROOT,
  F_ETCD,
  F_PREFIX,
  F_TLS_CA,
  F_TLS_CERT,
  F_TLS_KEY,
  F_TLS_SERVER_NAME,
  F_TOKEN,
  F_PYTHON,
  F_EXECUTOR_SCRIPT,
  F_CHECK_TIMEOUT_MS,
  F_NO_CHECK,
  F_VERSION,
  F_CALL_TIMEOUT_MS,
  F_WAIT_MS,
  F_OUTPUTS,
  F_ALL,
  F_QUIET,
  F_TASK,     /* replay */
  F_CHECK,    /* replay */
  F_RECORDED, /* replay */
  F_OWN,      /* watch: attach as the task's owner (default: observe) */
  F_CALL,     /* logs: one call's output */
  F_STATE,    /* tasks: only these states (comma-separated) */
  F_LIMIT,    /* tasks: list at most this many */
  F_DEPLOYMENT,
  F_FLEET,        /* deploy: to the workers, under a fleet-wide epoch */
  F_ROLLING,      /* deploy --fleet: worker by worker */
  F_PARALLEL,     /* deploy --fleet: workers at once */
  F_EPOCH_PREFIX, /* deploy --fleet: the etcd prefix of the epoch keys */
  F_COUNT
} ctl_flag_id;

typedef struct ctl_kv {
  char *key; /* owned */
  const char *value;
} ctl_kv;

typedef struct ctl_kvs {
  ctl_kv items[CTL_MAX_KV];
  size_t n;
} ctl_kvs;

typedef struct ctl_command ctl_command;

typedef struct ctl_args {
  const ctl_command *cmd;
  char *pos[CTL_MAX_POSITIONAL]; /* positional arguments after the command (argv) */
  size_t npos;
  bool set[F_COUNT];
  const char *val[F_COUNT]; /* last value of each flag that takes one */
  ctl_kvs labels, options, result_options;
  /* resolved globals: the target (ctl_resolve_target, workerctl_target.c) */
  const char *addr;        /* the worker: --addr, $WORKERCTL_ADDR or the default; with
                              etcd, the registered worker being tried (in addr_buf) */
  const char *addr_source; /* where addr came from, for messages ("--addr", ...) */
  bool use_etcd;           /* the target is the workers registered in etcd */
  const char *etcd_endpoints, *etcd_prefix; /* with use_etcd */
  bool discovered;                          /* addr was picked from etcd: outputs name the worker */
  char addr_buf[256];
  bool json;
  bool quiet; /* --quiet: a result is its state alone (submit without --watch: the task id) */
  int64_t deadline_ms;
  /* transport security (NULL: not set); any tls_* set means TLS */
  const char *tls_ca;          /* --tls-ca, else $WORKERCTL_TLS_CA */
  const char *tls_cert;        /* --tls-cert */
  const char *tls_key;         /* --tls-key */
  const char *tls_server_name; /* --tls-server-name */
  const char *token;           /* --token, else $WORKERCTL_TOKEN */
} ctl_args;

struct ctl_command {
  const char *name;
  const char *synopsis; /* after "workerctl [GLOBAL] " */
  const char *help;     /* the command's own options, one per line */
  uint64_t flags;       /* bit set of ctl_flag_id the command accepts, besides globals */
  size_t min_pos, max_pos;
  int (*run)(ctl_args *a);
};

/* workerctl_args.c */
extern const ctl_command ctl_commands[];
extern const size_t ctl_command_count;
/** Parses argv into a; returns -1 after printing a usage error, 1 when help was
 * printed, 0 to run a->cmd. */
int ctl_parse(int argc, char **argv, ctl_args *a);
void ctl_args_free(ctl_args *a);
void ctl_print_help(FILE *f);
void ctl_print_command_help(FILE *f, const ctl_command *c);
/** Prints "workerctl: <cmd>: <msg>" and a hint, returns CTL_EXIT_USAGE. */
__attribute__((format(printf, 2, 3))) int ctl_usage_error(const ctl_args *a, const char *fmt, ...);
/** Strict decimal uint64 in [min, max]; false otherwise. */
bool ctl_parse_u64(const char *s, uint64_t min, uint64_t max, uint64_t *out);

/* workerctl_cmds.c */
int ctl_cmd_slot(ctl_args *a);
int ctl_cmd_submit(ctl_args *a);
int ctl_cmd_get(ctl_args *a);
int ctl_cmd_watch(ctl_args *a);
int ctl_cmd_cancel(ctl_args *a);
int ctl_cmd_health(ctl_args *a);
int ctl_cmd_deploy(ctl_args *a);
int ctl_cmd_epochs(ctl_args *a);
int ctl_cmd_rollback(ctl_args *a);
/* workerctl_fleet_deploy.c: deploy --fleet (ctl_cmd_deploy hands over) */
int ctl_cmd_fleet_deploy(ctl_args *a);

/* Shared by the command files (workerctl_cmds.c): connect to a->addr (0 or an exit
 * code, reported), report a failed call's status (returns 3 or 4), one unary call on a
 * new connection (0 with *resp, which the caller frees, or an exit code), print a
 * TaskResult (returns the exit code its state implies). */
struct wk_grpc_client;
struct wk_grpc_status;
struct wk_grpc_buf;
int ctl_open_client(ctl_args *a, struct wk_grpc_client **c);
/** The client options of every connection: user agent, TLS files and token. */
struct wk_grpc_client_options ctl_client_options(const ctl_args *a);
int ctl_report_status(const ctl_args *a, const struct wk_grpc_status *st);
int ctl_call_once(ctl_args *a, const char *method, const ProtobufCMessage *req,
                  struct wk_grpc_buf *resp);
int ctl_show_result(const ctl_args *a, const Worker__V1__TaskResult *r);
/** Reports an answer that does not decode as `what` (INTERNAL); returns 3. */
int ctl_report_decode_error(const ctl_args *a, const char *what);

/* ---- workerctl_progress.c: watching tasks ------------------------------------------ */

typedef struct ctl_watch_opts {
  bool terminal_only;     /* print only each task's first terminal result (submit --watch) */
  bool own;               /* attach as owner; false = observer */
  int64_t owner_grace_ms; /* the worker's grace as SubmitTask said (-1: from the SNAPSHOT) */
} ctl_watch_opts;

/** Watches `ids` (n distinct ids) on `c`: every event printed (or only each task's
 * first terminal result), PROGRESS as a bar redrawn in place when stderr is a terminal,
 * else as a plain line at most every few seconds per task. An owner that gets SIGINT
 * says the task will be cancelled (OWNER_LOST) unless an owner re-attaches within the
 * grace, with the command that re-attaches, and exits 130. Returns the worst task exit
 * code, or 3/4 when the stream failed before every task ended. */
int ctl_watch(const ctl_args *a, struct wk_grpc_client *c, char **ids, size_t n,
              const ctl_watch_opts *o);

/** One line of a task's progress into buf: "[#####.....] 1200/20000 calls 6% 400/s
 * ETA 47s (3 failed, 1 retried)"; rate and ETA from `rate` (calls/s, <= 0: unknown). */
void ctl_format_progress(char *buf, size_t len, const Worker__V1__TaskProgress *p, double rate,
                         int bar_width);

/* workerctl_tasks.c, workerctl_logs.c */
int ctl_cmd_tasks(ctl_args *a);
int ctl_cmd_logs(ctl_args *a);

/* ---- workerctl_check.c: the deploy check --------------------------------------- */

#define CTL_CHECK_TIMEOUT_MS WK_CODE_CHECK_TIMEOUT_MS /* default bound of the deploy check */

/* How `workerctl deploy` checks code before publishing it (adapters/wk_code_check.h). */
typedef wk_code_check ctl_check;

/** Fills `c` from --python ($WORKER_PYTHON, else /usr/bin/python3), --executor-script
 * ($WORKER_EXECUTOR_SCRIPT, else the installed or the source tree's worker_executor.py),
 * --entrypoint (main:handler) and --check-timeout-ms. Returns 0, or a usage error's
 * exit code (printed). */
int ctl_check_from_args(ctl_args *a, ctl_check *c);

/** wk_code_check_run (ud: a ctl_check): runs `python -B script --check-code DIR
 * --entrypoint EP` in its own process group with stdout and stderr captured, killed
 * after timeout_ms. 0 when it exits 0; otherwise -1 with why in err (the tail of its
 * output, the timeout, or why it could not run). */
int ctl_check_code(void *ud, const char *dir, char *err, size_t err_len);

/* ---- workerctl_target.c: which worker a command talks to ----------------------- */

/** Resolves the target of a command into a: --addr; else --etcd/--prefix on the
 * command line (discovery); else $WORKERCTL_ADDR; else $WORKERCTL_ETCD (discovery); else
 * CTL_DEFAULT_ADDR. 0, or a usage error's exit code (printed): --addr with --etcd or
 * --prefix, --prefix without endpoints, an empty value. */
int ctl_resolve_target(ctl_args *a);

/** With use_etcd: the workers registered under the prefix, ordered for a lookup (the
 * candidates for a new task first, best first; then the other valid heartbeats,
 * draining and not ready ones included, which still hold their tasks). 0 with *out
 * filled (free it with wk_etcd_workers_free; n may be 0), or an exit code after
 * reporting etcd's error. */
int ctl_etcd_lookup_order(ctl_args *a, wk_etcd_workers *out);

/** Sets a->addr to `addr` (copied into a->addr_buf) and marks it discovered. */
void ctl_set_discovered(ctl_args *a, const char *addr);

/* ---- workerctl_backoff.c: the per-worker back-off of the picking rule ---------- */

typedef struct ctl_backoff ctl_backoff;
/** Loads the table shared by this user's invocations (never NULL; an unreadable or
 * missing file is an empty table). Free with ctl_backoff_save. */
ctl_backoff *ctl_backoff_load(void);
/** True while `addr` is backed off: within its back-off (2 s doubling to 30 s), or its
 * record (updated_unix_ms record_updated_ms) not re-put since it failed (at most 30 s). */
bool ctl_backoff_active(const ctl_backoff *b, const char *addr, int64_t record_updated_ms);
/** A refusal (UNAVAILABLE, RESOURCE_EXHAUSTED for a slot) or no answer from `addr`,
 * whose record said updated_unix_ms record_updated_ms. */
void ctl_backoff_fail(ctl_backoff *b, const char *addr, int64_t record_updated_ms);
/** `addr` took the request: its back-off is forgotten. */
void ctl_backoff_ok(ctl_backoff *b, const char *addr);
/** Merges this process's changes into the shared file (best effort) and frees b. */
void ctl_backoff_save(ctl_backoff *b);

/* workerctl_workers.c */
#define CTL_DEFAULT_ETCD "http://127.0.0.1:2379"
#define CTL_DEFAULT_PREFIX "/workers/"
int ctl_cmd_workers(ctl_args *a);
/** The registrations `workers` lists, from etcd client c: under --prefix, else every
 * deployment's prefix; filtered: only --prefix (when given) and --deployment (when
 * given); unfiltered: every deployment's prefix plus --prefix. 0 with *out (free with
 * wk_etcd_workers_free), or an exit code after reporting etcd's error. */
int ctl_registered_workers(ctl_args *a, wk_etcd *c, bool filtered, wk_etcd_workers *out);
/* workerctl_top.c */
int ctl_cmd_top(ctl_args *a);
/** The etcd endpoints: --etcd, else $WORKERCTL_ETCD, else CTL_DEFAULT_ETCD. */
const char *ctl_etcd_endpoints(const ctl_args *a);
/** The registry prefix: --prefix, else CTL_DEFAULT_PREFIX. */
const char *ctl_etcd_prefix(const ctl_args *a);
/** Reports a failed etcd request (rc a negative wk_etcd_rc, msg its message) on stderr,
 * and as {"error":{...}} with --json; returns 4 (unreachable) or 3 (any other error). */
int ctl_report_etcd_error(const ctl_args *a, const char *endpoints, int rc, const char *msg);

/* workerctl_replay.c */
int ctl_cmd_replay(ctl_args *a);

/* ---- output (workerctl_format.c) ---------------------------------------------------- */

/** Enum value name without its prefix ("SUCCEEDED" for TASK_STATE_SUCCEEDED); the
 * number as text when the value is unknown (buf holds it). */
const char *ctl_enum_name(const ProtobufCEnumDescriptor *d, int value, char *buf, size_t len);
bool ctl_state_terminal(Worker__V1__TaskState s);
/** Exit code a task state implies: 1 for FAILED or CANCELLED, else 0. */
int ctl_state_exit(Worker__V1__TaskState s);

json_t *ctl_json_u64(uint64_t v);
/** Prints one JSON value on one line and releases it. */
void ctl_json_print(FILE *f, json_t *v);

/** Prints a TaskResult readably: a summary, then its outputs up to the limit that
 * ctl_set_output_limit set (all by default), then how many more there are. */
void ctl_print_result(FILE *f, const Worker__V1__TaskResult *r);
/** How many outputs a printed result shows (SIZE_MAX: all); for the whole process. */
void ctl_set_output_limit(size_t n);
#define CTL_TERMINAL_OUTPUTS 10 /* outputs shown on a terminal without --outputs/--all */
json_t *ctl_result_json(const Worker__V1__TaskResult *r);
void ctl_print_event(FILE *f, const Worker__V1__TaskEvent *e);
json_t *ctl_event_json(const Worker__V1__TaskEvent *e);
/** worker: the address the task went to, printed when it was picked from etcd (NULL:
 * not printed, the output of a submit to --addr). */
void ctl_print_submit(FILE *f, const Worker__V1__SubmitTaskResponse *r, const char *worker);
json_t *ctl_submit_json(const Worker__V1__SubmitTaskResponse *r, const char *worker);
void ctl_print_slot(FILE *f, const char *task_id, const Worker__V1__RequestTaskSlotResponse *r,
                    int64_t now_unix_ms);
json_t *ctl_slot_json(const Worker__V1__RequestTaskSlotResponse *r);
/** Sets obj[key] to the bytes as a JSON string when they are valid UTF-8, else
 * obj[key + "_base64"] to their base64. */
void ctl_json_set_text_or_base64(json_t *obj, const char *key, const uint8_t *p, size_t n);
/** Escaped preview of bytes: printable ASCII as is, the rest as \xNN; at most `max`
 * input bytes, then "..." */
void ctl_print_escaped(FILE *f, const uint8_t *p, size_t len, size_t max);

#endif

/* workerctl_args.c: the command table, the flag parser and the help text. */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "workerctl.h"
#include "lib/wk_alloc.h"
#include "lib/wk_version.h"

/* ---- flags ------------------------------------------------------------------------ */

typedef struct ctl_flag {
  const char *name; /* without the leading "--" */
  bool takes_value;
  bool repeatable; /* K=V pairs collected in a ctl_kvs */
} ctl_flag;

static const ctl_flag flags[F_COUNT] = {
    [F_ADDR] = {"addr", true, false},
    [F_JSON] = {"json", false, false},
    [F_DEADLINE_MS] = {"deadline-ms", true, false},
    [F_HELP] = {"help", false, false},
    [F_TTL_MS] = {"ttl-ms", true, false},
    [F_TASK_ID] = {"task-id", true, false},
    [F_SLOT_ID] = {"slot-id", true, false},
    [F_BUILDER] = {"builder", true, false},
    [F_EPOCH] = {"epoch", true, false},
    [F_ENTRYPOINT] = {"entrypoint", true, false},
    [F_BYTES] = {"bytes", false, false},
    [F_ARGS_FILE] = {"args-file", true, false},
    [F_TIMEOUT_MS] = {"timeout-ms", true, false},
    [F_CONTINUE] = {"continue", true, false},
    [F_RETRIES] = {"retries", true, false},
    [F_LABEL] = {"label", true, true},
    [F_OPTION] = {"option", true, true},
    [F_RESULT_HANDLER] = {"result-handler", true, false},
    [F_RESULT_OPTION] = {"result-option", true, true},
    [F_WATCH] = {"watch", false, false},
    [F_REASON] = {"reason", true, false},
    [F_SERVICE] = {"service", true, false},
    [F_CODE_ROOT] = {"code-root", true, false},
    [F_ETCD] = {"etcd", true, false},
    [F_PREFIX] = {"prefix", true, false},
    [F_TLS_CA] = {"tls-ca", true, false},
    [F_TLS_CERT] = {"tls-cert", true, false},
    [F_TLS_KEY] = {"tls-key", true, false},
    [F_TLS_SERVER_NAME] = {"tls-server-name", true, false},
    [F_TOKEN] = {"token", true, false},
    [F_PYTHON] = {"python", true, false},
    [F_EXECUTOR_SCRIPT] = {"executor-script", true, false},
    [F_CHECK_TIMEOUT_MS] = {"check-timeout-ms", true, false},
    [F_NO_CHECK] = {"no-check", false, false},
    [F_VERSION] = {"version", false, false},
    [F_CALL_TIMEOUT_MS] = {"call-timeout-ms", true, false},
    [F_WAIT_MS] = {"wait-ms", true, false},
    [F_OUTPUTS] = {"outputs", true, false},
    [F_ALL] = {"all", false, false},
    [F_QUIET] = {"quiet", false, false},
    [F_TASK] = {"task", true, false},
    [F_CHECK] = {"check", false, false},
    [F_RECORDED] = {"recorded", false, false},
    [F_OWN] = {"own", false, false},
    [F_CALL] = {"call", true, false},
    [F_STATE] = {"state", true, false},
    [F_LIMIT] = {"limit", true, false},
    [F_DEPLOYMENT] = {"deployment", true, false},
    [F_FLEET] = {"fleet", false, false},
    [F_ROLLING] = {"rolling", false, false},
    [F_PARALLEL] = {"parallel", true, false},
    [F_EPOCH_PREFIX] = {"epoch-prefix", true, false},
};

#define BIT(f) ((uint64_t)1 << (f))
#define GLOBAL_FLAGS                                                                       \
  (BIT(F_ADDR) | BIT(F_ETCD) | BIT(F_PREFIX) | BIT(F_JSON) | BIT(F_OUTPUTS) | BIT(F_ALL) | \
   BIT(F_QUIET) | BIT(F_DEADLINE_MS) | BIT(F_HELP) | BIT(F_VERSION) | BIT(F_TLS_CA) |      \
   BIT(F_TLS_CERT) | BIT(F_TLS_KEY) | BIT(F_TLS_SERVER_NAME) | BIT(F_TOKEN))

/* ---- commands ----------------------------------------------------------------------- */

const ctl_command ctl_commands[] = {
    {"slot", "slot TASK_ID [--ttl-ms N]",
     "Reserves a slot for TASK_ID (RequestTaskSlot) and prints its id and lease.\n"
     "  --ttl-ms N          lease in ms (0 or absent: the worker's default)\n",
     BIT(F_TTL_MS), 1, 1, ctl_cmd_slot},
    {"submit",
     "submit FUNCTION [ARGS] [--task-id ID] [--slot-id N] [--builder NAME] [--epoch N]\n"
     "       [--entrypoint MOD:ATTR] [--bytes] [--args-file PATH] [--timeout-ms N]\n"
     "       [--call-timeout-ms N] [--continue MAX_FAILED] [--retries N]\n"
     "       [--label K=V]... [--option K=V]...\n"
     "       [--result-handler TYPE] [--result-option K=V]... [--watch]\n"
     "       [--etcd ENDPOINTS] [--prefix P]",
     "Submits a task running FUNCTION (SubmitTask). ARGS is JSON text (default: null),\n"
     "checked locally; it goes to the builder as is.\n"
     "  --task-id ID        task id (default: generated, t-<unix ms hex>-<random hex>)\n"
     "  --slot-id N         slot from `workerctl slot` (default: allocate inline)\n"
     "  --builder NAME      call builder: single (default), map, range\n"
     "  --epoch N           pin code epoch N (default: the function's CURRENT)\n"
     "  --entrypoint M:A    module:attribute to call (default: main:handler)\n"
     "  --bytes             ARGS (or the file) are raw bytes, not JSON\n"
     "  --args-file PATH    read ARGS from PATH ('-' for standard input)\n"
     "  --timeout-ms N      task timeout (default: the worker's)\n"
     "  --call-timeout-ms N bound of each call attempt: a call still running then is\n"
     "                      cancelled and fails DeadlineExceeded, not retried (default:\n"
     "                      none; the task's timeout still applies)\n"
     "  --continue N        tolerate up to N failed calls (default: fail fast)\n"
     "  --retries N         retry a failed call up to N times (retryable errors, lost\n"
     "                      executors), backoff 100 ms doubling up to 10 s\n"
     "  --label K=V         task label (repeatable)\n"
     "  --option K=V        builder option (repeatable)\n"
     "  --result-handler T  writer plugin (file, redis, postgres; default: outputs inline)\n"
     "  --result-option K=V writer plugin option (repeatable)\n"
     "  --watch             wait for the task and print its result (exit 1 if it failed)\n"
     "\n"
     "The worker: the target rule (workerctl --help). With etcd, one picked from the\n"
     "registry (see `workerctl workers`): a ready, not draining worker with free slots,\n"
     "the most free slots first (ties spread at random). A worker that answers\n"
     "RESOURCE_EXHAUSTED (no slot; a request too large for it is not skipped but\n"
     "reported) or UNAVAILABLE, or cannot be reached, is skipped for the next (a line on\n"
     "stderr each); at most " CTL_STR(
         CTL_SUBMIT_MAX_TRIES) " are tried. One that does not answer within\n"
                               "--deadline-ms is not skipped: it may have taken the task. The chosen worker is\n"
                               "printed with the result (\"worker\" with --json) and --watch watches on it. Exit 4\n"
                               "when no worker qualifies or etcd cannot be reached, 3 when etcd answers an error.\n",
     BIT(F_TASK_ID) | BIT(F_SLOT_ID) | BIT(F_BUILDER) | BIT(F_EPOCH) | BIT(F_ENTRYPOINT) |
         BIT(F_BYTES) | BIT(F_ARGS_FILE) | BIT(F_TIMEOUT_MS) | BIT(F_CALL_TIMEOUT_MS) |
         BIT(F_CONTINUE) | BIT(F_RETRIES) | BIT(F_LABEL) | BIT(F_OPTION) | BIT(F_RESULT_HANDLER) |
         BIT(F_RESULT_OPTION) | BIT(F_WATCH),
     1, 2, ctl_cmd_submit},
    {"get", "get TASK_ID",
     "Prints the task's current snapshot or its retained result (GetTaskResult).\n", 0, 1, 1,
     ctl_cmd_get},
    {"watch", "watch TASK_ID... [--own]",
     "Prints each event of the tasks as it arrives (WatchTasks) until all have ended;\n"
     "progress as a bar on a terminal (calls done/total, rate, ETA), else a line every\n"
     "few seconds. Watches as an observer: Ctrl-C leaves the tasks running.\n"
     "  --own               watch as the tasks' owner: if this watch breaks (Ctrl-C), a\n"
     "                      task nobody else owns fails OWNER_LOST after the worker's\n"
     "                      watch_disconnect_grace_ms (what `submit --watch` does)\n",
     BIT(F_OWN), 1, CTL_MAX_POSITIONAL, ctl_cmd_watch},
    {"tasks", "tasks [--state S[,S...]] [--label K=V]... [--limit N]",
     "Lists the worker's live and retained tasks, newest first (ListTasks): id, state,\n"
     "function, epoch, age, calls done/total. With --json, one object per task.\n"
     "  --state S,...       only tasks in these states (preparing, running, succeeded,\n"
     "                      failed, cancelled)\n"
     "  --label K=V         only tasks with this label (repeatable: all must match)\n"
     "  --limit N           list at most N tasks (default 50; pages of at most 1000)\n",
     BIT(F_STATE) | BIT(F_LABEL) | BIT(F_LIMIT), 0, 0, ctl_cmd_tasks},
    {"logs", "logs TASK_ID [--call N]",
     "Prints the captured stdout and stderr of the task's calls (GetTaskLogs), as the\n"
     "worker keeps them (task_log_max_bytes per task; what it dropped is counted).\n"
     "  --call N            only call N's output (each of its attempts)\n",
     BIT(F_CALL), 1, 1, ctl_cmd_logs},
    {"cancel", "cancel TASK_ID [--reason TEXT]",
     "Requests cancellation (CancelTask) and prints the task's snapshot.\n"
     "  --reason TEXT       recorded in the task's failure_message\n",
     BIT(F_REASON), 1, 1, ctl_cmd_cancel},
    {"health", "health [--service NAME] [--wait-ms N]",
     "Asks grpc.health.v1.Health/Check; exit 0 when SERVING, 1 otherwise.\n"
     "  --service NAME      service to ask about (default: the whole server)\n"
     "  --wait-ms N         ask again every 100 ms until SERVING, for at most N ms (a\n"
     "                      worker just started); then the last answer counts\n",
     BIT(F_SERVICE) | BIT(F_WAIT_MS), 0, 0, ctl_cmd_health},
    {"deploy",
     "deploy [--code-root DIR] [--entrypoint M:A] [--python PATH] [--executor-script PATH]\n"
     "       [--check-timeout-ms N] [--no-check] FUNCTION SRC_DIR",
     "Publishes SRC_DIR as the next code epoch of FUNCTION in the local code store and\n"
     "makes it CURRENT; prints the epoch alone on stdout (its sha256 digest on stderr).\n"
     "No worker is contacted. Copies regular files and directories (not __pycache__);\n"
     "follows symlinks that stay inside SRC_DIR and refuses others. Published epochs are\n"
     "never modified. Before CURRENT moves, the copy is checked in a subprocess: every\n"
     "*.py file must compile and the entry point must import and be a callable defined\n"
     "in the function's own code; otherwise nothing changes and the reason is printed\n"
     "(exit 1). Content identical to a published epoch makes that epoch CURRENT again\n"
     "instead of adding one.\n"
     "  --code-root DIR     the worker's code root (default: $WORKER_CODE_ROOT)\n"
     "  --entrypoint M:A    the entry point to check (default: main:handler)\n"
     "  --python PATH       interpreter of the check (default: $WORKER_PYTHON, else\n"
     "                      /usr/bin/python3): use the worker's\n"
     "  --executor-script P the worker's executor program (default:\n"
     "                      $WORKER_EXECUTOR_SCRIPT, else the installed one)\n"
     "  --check-timeout-ms N  kill the check after N ms (default " CTL_STR(
         CTL_CHECK_TIMEOUT_MS) ")\n"
                               "  --no-check          publish without the check\n"
                               "deploy --fleet [--etcd E] [--prefix P | --deployment NAME | --addr "
                               "A,B,...]\n"
                               "       [--parallel N] [--rolling] [--epoch-prefix P] FUNCTION "
                               "SRC_DIR\n"
                               "  Deploys SRC_DIR to every registered worker (DeployCode; the "
                               "workers check it)\n"
                               "  under one fleet-wide epoch taken in etcd (identical content "
                               "keeps its epoch),\n"
                               "  then moves CURRENT on all of them once every one holds it; "
                               "any failure: CURRENT\n"
                               "  moves nowhere, exit 1. Prints the epoch on stdout, a line per "
                               "worker on stderr.\n"
                               "  --prefix P          only the workers registered under P\n"
                               "  --deployment NAME   only the workers of that deployment\n"
                               "  --addr A,B,...      these workers (not the registry)\n"
                               "  --entrypoint M:A    the entry point the workers check (default "
                               "main:handler)\n"
                               "  --parallel N        workers deployed at once (default 4)\n"
                               "  --rolling           worker by worker: deploy and make CURRENT, "
                               "stop at a failure\n"
                               "  --epoch-prefix P    etcd prefix of the epoch keys (default "
                               "/worker-epochs/)\n",
     BIT(F_CODE_ROOT) | BIT(F_ENTRYPOINT) | BIT(F_PYTHON) | BIT(F_EXECUTOR_SCRIPT) |
         BIT(F_CHECK_TIMEOUT_MS) | BIT(F_NO_CHECK) | BIT(F_FLEET) | BIT(F_ROLLING) |
         BIT(F_PARALLEL) | BIT(F_EPOCH_PREFIX) | BIT(F_DEPLOYMENT),
     2, 2, ctl_cmd_deploy},
    {"epochs", "epochs [--code-root DIR] FUNCTION",
     "Lists the published epochs of FUNCTION in the local code store with their sha256\n"
     "digests, marking CURRENT.\n"
     "  --code-root DIR     the worker's code root (default: $WORKER_CODE_ROOT)\n",
     BIT(F_CODE_ROOT), 1, 1, ctl_cmd_epochs},
    {"rollback", "rollback [--code-root DIR] FUNCTION [EPOCH]",
     "Makes EPOCH (default: the highest published epoch below CURRENT) the CURRENT epoch\n"
     "of FUNCTION; prints it alone on stdout. Tasks that already pinned an epoch keep\n"
     "it; new tasks run EPOCH. No worker is contacted.\n"
     "  --code-root DIR     the worker's code root (default: $WORKER_CODE_ROOT)\n",
     BIT(F_CODE_ROOT), 1, 2, ctl_cmd_rollback},
    {"workers", "workers [--etcd ENDPOINTS] [--prefix P] [--deployment NAME]",
     "Lists the workers registered in etcd: address, state (ready, draining, not-ready),\n"
     "free/total slots, running tasks, reserved slots, deployment, version and the age of\n"
     "the last heartbeat. With --json, one object per worker. No worker is contacted.\n"
     "  --etcd ENDPOINTS    comma-separated http://host:port (default: $WORKERCTL_ETCD,\n"
     "                      else " CTL_DEFAULT_ETCD ")\n"
     "  --prefix P          one registry prefix (default: every deployment's,\n"
     "                      " CTL_DEFAULT_PREFIX " and /bundle-workers/)\n"
     "  --deployment NAME   only workers of that deployment (block, bundle)\n"
     "--deadline-ms bounds each etcd request. Exit 4 when etcd cannot be reached, 3 when\n"
     "it answers an error.\n",
     BIT(F_ETCD) | BIT(F_PREFIX) | BIT(F_DEPLOYMENT), 0, 0, ctl_cmd_workers},
    {"top", "top [--addr STATUS_HOST:PORT | --etcd ENDPOINTS [--prefix P]] [--token T]",
     "A live view of one worker (--addr: its metrics_addr, where /status is served) or of\n"
     "every worker registered in etcd: slots, executors, tasks/s, calls/s, failures,\n"
     "draining; one line per worker and a detail pane (executors, tasks in flight, recent\n"
     "failures) for the selected one. j/k or the arrow keys select, q quits. Not on a\n"
     "terminal: one plain line per worker each refresh. --token when the worker has an\n"
     "auth_token; --tls-ca when its listener has TLS. Refreshes every second\n"
     "($WORKERCTL_TOP_INTERVAL_MS).\n",
     BIT(F_ETCD) | BIT(F_PREFIX), 0, 0, ctl_cmd_top},
    {"replay", "replay [--task ID] [--all] [--check] [--recorded] FILE...",
     "Replays a worker's core journal (the files under its core_journal_dir) through a\n"
     "fresh WorkerCore and prints every input with the core's decision, one line each:\n"
     "  #SEQ TIME t=NOW INPUT [task=ID] ARGS -> ERR [RESULT] [| COMMAND ...]...\n"
     "Files of several runs are replayed run by run. Stops, saying why, at a missing\n"
     "file or input, a truncated tail or a corrupt record. No worker is contacted.\n"
     "  --task ID           only the lines concerning task ID\n"
     "  --all               also the periodic purges that purged nothing\n"
     "  --check             compare every replayed decision with the one the worker\n"
     "                      recorded (core_journal_decisions); exit 1 when one differs\n"
     "  --recorded          print the decisions the worker recorded instead\n",
     BIT(F_TASK) | BIT(F_ALL) | BIT(F_CHECK) | BIT(F_RECORDED), 1, CTL_MAX_POSITIONAL,
     ctl_cmd_replay},
};
const size_t ctl_command_count = sizeof ctl_commands / sizeof ctl_commands[0];

/* ---- help ----------------------------------------------------------------------- */

void ctl_print_help(FILE *f) {
  fprintf(f,
          "usage: workerctl [--addr HOST:PORT] [--json] [--deadline-ms N]\n"
          "                 [--tls-ca FILE [--tls-cert FILE --tls-key FILE]\n"
          "                 [--tls-server-name NAME]] [--token TOKEN] COMMAND ...\n"
          "\n"
          "A client of the Worker's gRPC API, the tool that deploys function code, and a\n"
          "reader of the Workers' etcd registry (workers).\n"
          "\n"
          "Commands:\n");
  for (size_t i = 0; i < ctl_command_count; i++) {
    fprintf(f, "  %s\n", ctl_commands[i].synopsis);
  }
  fprintf(f,
          "\n"
          "Global options (also accepted after the command):\n"
          "  --addr HOST:PORT    the worker (see \"The target\" below)\n"
          "  --etcd ENDPOINTS    the workers registered in etcd: comma-separated\n"
          "                      http://host:port (default: $WORKERCTL_ETCD)\n"
          "  --prefix P          their registry prefix (default: " CTL_DEFAULT_PREFIX
          ")\n"
          "  --json              print one JSON object per line per result or event:\n"
          "                      proto field names, enums by name (\"SUCCEEDED\"), 64-bit\n"
          "                      numbers as JSON numbers, JSON outputs embedded as JSON,\n"
          "                      bytes as base64; an error as {\"error\":{\"code\",\"message\"}}\n"
          "  --outputs N         a result shows its first N outputs (default: 10 on a\n"
          "                      terminal, all otherwise), then a count of the rest\n"
          "  --all               a result shows every output, also on a terminal\n"
          "  --quiet             a result is its state alone (SUCCEEDED ...); submit without\n"
          "                      --watch prints the task id alone\n"
          "  --deadline-ms N     deadline of each unary call (default: %d); a watch has\n"
          "                      none unless given\n"
          "  --help              this text; `workerctl COMMAND --help` for a command\n"
          "  --version           print the version and the git commit it was built from\n"
          "\n"
          "The target of every command that talks to a worker, the first that is given:\n"
          "  1. --addr HOST:PORT\n"
          "  2. --etcd ENDPOINTS (or --prefix P) on the command line: the registered workers\n"
          "  3. $WORKERCTL_ADDR\n"
          "  4. $WORKERCTL_ETCD: the registered workers\n"
          "  5. %s\n"
          "With the registered workers: submit and slot pick a ready, not draining worker\n"
          "with free slots (most free first) and move on when it answers RESOURCE_EXHAUSTED\n"
          "or UNAVAILABLE or cannot be reached; get, cancel and watch ask each registered\n"
          "worker (ready ones first) until one knows the task (NOT_FOUND, UNAVAILABLE and\n"
          "unreachable move on); health asks every one. --addr with --etcd is an error.\n"
          "An error says which worker or workers were tried and why each was the target.\n"
          "\n"
          "Transport security (gRPC commands; the worker's grpc TLS and token settings):\n"
          "  --tls-ca FILE       speak TLS and trust the worker's certificate only if a CA\n"
          "                      in FILE (PEM) signed it (default: $WORKERCTL_TLS_CA).\n"
          "                      Without any --tls-* option (or the variable): plaintext\n"
          "  --tls-cert FILE     client certificate (PEM) for a worker that requires mutual\n"
          "                      TLS; with --tls-key\n"
          "  --tls-key FILE      the client certificate's private key (PEM, unencrypted)\n"
          "  --tls-server-name N the name the worker's certificate must carry when it is not\n"
          "                      the host in --addr (implies TLS)\n"
          "  --token TOKEN       send \"authorization: Bearer TOKEN\" with every call, for a\n"
          "                      worker with an auth token (default: $WORKERCTL_TOKEN; the\n"
          "                      variable keeps it out of `ps`; without TLS it travels in\n"
          "                      clear text)\n"
          "A TLS handshake that fails (untrusted certificate, missing client certificate, a\n"
          "plaintext worker) is exit 4; a missing or wrong token is UNAUTHENTICATED, exit 3.\n"
          "\n"
          "Exit codes:\n"
          "  0  success; for submit --watch, get and watch: the task SUCCEEDED or is still\n"
          "     running\n"
          "  1  the task ended FAILED or CANCELLED (any of them, for watch); health is not\n"
          "     SERVING; deploy failed\n"
          "  2  usage error: bad command, option, number or ARGS JSON; a --tls-* file that\n"
          "     cannot be read or is not PEM\n"
          "  3  the worker answered an error status (NOT_FOUND, INVALID_ARGUMENT,\n"
          "     RESOURCE_EXHAUSTED, UNAUTHENTICATED, ...), printed as\n"
          "     \"workerctl: CODE: message\"\n"
          "  4  the worker could not be reached (connection failed, or the deadline passed);\n"
          "     etcd could not be reached, or (submit) no ready worker with free slots is\n"
          "     registered there\n",
          CTL_DEFAULT_DEADLINE_MS, CTL_DEFAULT_ADDR);
}

void ctl_print_command_help(FILE *f, const ctl_command *c) {
  fprintf(f, "usage: workerctl [GLOBAL OPTIONS] %s ...\n  %s\n\n%s", c->name, c->synopsis, c->help);
  fprintf(f, "\nGlobal options and exit codes: workerctl --help\n");
}

int ctl_usage_error(const ctl_args *a, const char *fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (a && a->cmd) {
    fprintf(stderr, "workerctl %s: %s\n(see workerctl %s --help)\n", a->cmd->name, msg,
            a->cmd->name);
  } else {
    fprintf(stderr, "workerctl: %s\n(see workerctl --help)\n", msg);
  }
  return CTL_EXIT_USAGE;
}

/* ---- parsing ------------------------------------------------------------------------ */

bool ctl_parse_u64(const char *s, uint64_t min, uint64_t max, uint64_t *out) {
  if (!s || !*s) return false;
  uint64_t v = 0;
  for (const char *p = s; *p; p++) {
    if (*p < '0' || *p > '9') return false;
    uint64_t d = (uint64_t)(*p - '0');
    if (v > (UINT64_MAX - d) / 10u) return false;
    v = v * 10u + d;
  }
  if (v < min || v > max) return false;
  *out = v;
  return true;
}

static const ctl_command *find_command(const char *name) {
  for (size_t i = 0; i < ctl_command_count; i++) {
    if (strcmp(ctl_commands[i].name, name) == 0) return &ctl_commands[i];
  }
  return NULL;
}

static int find_flag(const char *name, size_t len) {
  for (int i = 0; i < F_COUNT; i++) {
    if (strlen(flags[i].name) == len && strncmp(flags[i].name, name, len) == 0) return i;
  }
  return -1;
}

static int add_kv(ctl_args *a, ctl_kvs *kvs, const char *flag, const char *text) {
  const char *eq = strchr(text, '=');
  if (!eq || eq == text) {
    return ctl_usage_error(a, "--%s takes KEY=VALUE with a non-empty key, got '%s'", flag, text);
  }
  if (kvs->n == CTL_MAX_KV) return ctl_usage_error(a, "more than %u --%s", CTL_MAX_KV, flag);
  size_t klen = (size_t)(eq - text);
  char *key = wk_xmalloc(klen + 1);
  memcpy(key, text, klen);
  key[klen] = '\0';
  for (size_t i = 0; i < kvs->n; i++) {
    if (strcmp(kvs->items[i].key, key) == 0) {
      free(key);
      return ctl_usage_error(a, "--%s key '%.*s' given twice", flag, (int)klen, text);
    }
  }
  kvs->items[kvs->n].key = key;
  kvs->items[kvs->n].value = eq + 1;
  kvs->n++;
  return 0;
}

void ctl_args_free(ctl_args *a) {
  ctl_kvs *all[] = {&a->labels, &a->options, &a->result_options};
  for (size_t k = 0; k < sizeof all / sizeof all[0]; k++) {
    for (size_t i = 0; i < all[k]->n; i++) free(all[k]->items[i].key);
    all[k]->n = 0;
  }
}

/* --outputs N, --all, --quiet: how much of a result is printed. On a terminal a result
 * shows its first CTL_TERMINAL_OUTPUTS outputs unless told otherwise; elsewhere all. */
static int ctl_parse_display(ctl_args *a) {
  uint64_t n = SIZE_MAX;
  if (a->set[F_OUTPUTS] && !ctl_parse_u64(a->val[F_OUTPUTS], 0, SIZE_MAX, &n)) {
    ctl_usage_error(a, "--outputs takes a number of outputs to show, got '%s'", a->val[F_OUTPUTS]);
    return -1;
  }
  if (a->set[F_OUTPUTS] + a->set[F_ALL] + a->set[F_QUIET] + a->json > 1) {
    ctl_usage_error(a, "--outputs, --all, --quiet and --json exclude each other");
    return -1;
  }
  if (!a->set[F_OUTPUTS] && !a->set[F_ALL] && isatty(STDOUT_FILENO)) n = CTL_TERMINAL_OUTPUTS;
  ctl_set_output_limit((size_t)n);
  a->quiet = a->set[F_QUIET];
  return 0;
}

int ctl_parse(int argc, char **argv, ctl_args *a) {
  memset(a, 0, sizeof *a);
  bool only_positional = false;
  for (int i = 1; i < argc; i++) {
    const char *arg = argv[i];
    bool is_flag = !only_positional && arg[0] == '-' && arg[1] != '\0';
    if (is_flag && strcmp(arg, "--") == 0) {
      only_positional = true;
      continue;
    }
    if (is_flag && strcmp(arg, "-h") == 0) arg = "--help";
    if (is_flag && arg[1] != '-') is_flag = false; /* "-5" is a value, e.g. JSON ARGS */
    if (!is_flag) {
      if (!a->cmd) {
        a->cmd = find_command(arg);
        if (!a->cmd) {
          ctl_usage_error(a, "unknown command '%s'", arg);
          return -1;
        }
        continue;
      }
      if (a->npos == CTL_MAX_POSITIONAL) {
        ctl_usage_error(a, "more than %u arguments", CTL_MAX_POSITIONAL);
        return -1;
      }
      a->pos[a->npos++] = argv[i];
      continue;
    }
    const char *name = arg + 2;
    const char *eq = strchr(name, '=');
    size_t nlen = eq ? (size_t)(eq - name) : strlen(name);
    int f = find_flag(name, nlen);
    uint64_t allowed = GLOBAL_FLAGS | (a->cmd ? a->cmd->flags : 0);
    if (f < 0 || !(allowed & BIT(f))) {
      ctl_usage_error(a, "unknown option --%.*s", (int)nlen, name);
      return -1;
    }
    const char *value = NULL;
    if (flags[f].takes_value) {
      if (eq) {
        value = eq + 1;
      } else if (i + 1 < argc) {
        value = argv[++i];
      } else {
        ctl_usage_error(a, "option --%s needs a value", flags[f].name);
        return -1;
      }
    } else if (eq) {
      ctl_usage_error(a, "option --%s takes no value", flags[f].name);
      return -1;
    }
    a->set[f] = true;
    a->val[f] = value;
    int rc = 0;
    if (f == F_LABEL) rc = add_kv(a, &a->labels, "label", value);
    if (f == F_OPTION) rc = add_kv(a, &a->options, "option", value);
    if (f == F_RESULT_OPTION) rc = add_kv(a, &a->result_options, "result-option", value);
    if (rc != 0) return -1;
  }

  if (a->set[F_VERSION]) {
    printf("workerctl %s (commit %s)\n", wk_version, wk_git_commit);
    return 1;
  }
  if (a->set[F_HELP]) {
    if (a->cmd) {
      ctl_print_command_help(stdout, a->cmd);
    } else {
      ctl_print_help(stdout);
    }
    return 1;
  }
  if (!a->cmd) {
    ctl_print_help(stderr);
    return -1;
  }
  if (a->npos < a->cmd->min_pos || a->npos > a->cmd->max_pos) {
    size_t first_line = strcspn(a->cmd->synopsis, "\n");
    ctl_usage_error(a, "wrong number of arguments; usage: workerctl %.*s%s", (int)first_line,
                    a->cmd->synopsis, a->cmd->synopsis[first_line] ? " ..." : "");
    return -1;
  }

  if (ctl_resolve_target(a) != 0) return -1;
  static const struct {
    ctl_flag_id flag;
    const char *env;
  } secs[] = {{F_TLS_CA, "WORKERCTL_TLS_CA"},
              {F_TLS_CERT, NULL},
              {F_TLS_KEY, NULL},
              {F_TLS_SERVER_NAME, NULL},
              {F_TOKEN, "WORKERCTL_TOKEN"}};
  const char *sec[sizeof secs / sizeof secs[0]];
  for (size_t i = 0; i < sizeof secs / sizeof secs[0]; i++) {
    ctl_flag_id f = secs[i].flag;
    const char *v = NULL;
    if (a->set[f]) {
      v = a->val[f];
      if (!*v) {
        ctl_usage_error(a, "--%s is empty", flags[f].name);
        return -1;
      }
    } else if (secs[i].env) {
      const char *e = getenv(secs[i].env);
      if (e && *e) v = e;
    }
    sec[i] = v;
  }
  a->tls_ca = sec[0];
  a->tls_cert = sec[1];
  a->tls_key = sec[2];
  a->tls_server_name = sec[3];
  a->token = sec[4];
  if ((a->tls_cert != NULL) != (a->tls_key != NULL)) {
    ctl_usage_error(a, "--tls-cert and --tls-key go together (a client certificate and its key)");
    return -1;
  }
  a->json = a->set[F_JSON];
  if (ctl_parse_display(a) != 0) return -1;
  a->deadline_ms = CTL_DEFAULT_DEADLINE_MS;
  if (a->set[F_DEADLINE_MS]) {
    uint64_t d;
    if (!ctl_parse_u64(a->val[F_DEADLINE_MS], 1, 86400000u, &d)) {
      ctl_usage_error(a, "--deadline-ms takes a number of ms in 1..86400000, got '%s'",
                      a->val[F_DEADLINE_MS]);
      return -1;
    }
    a->deadline_ms = (int64_t)d;
  }
  return 0;
}

/* wk_config.c: the settings table (WorkerFullConfig) and its four sources: defaults,
 * a YAML file (libyaml), WORKER_<NAME> environment variables and --flags; validation
 * and the generated --help, --print-config and Markdown reference. See wk_config.h. */
#include "app/wk_config.h"

#include <assert.h>
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml.h>

#ifndef WK_PYTHON_DIR
#define WK_PYTHON_DIR "python"
#endif

/* ---- the table ------------------------------------------------------------------- */

#define FIELD(f)                                                                          \
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
     .help = "calls in flight per executor at most (fewer when calls are slow: ~2 ms of work ahead)"},
    {FIELD(executor_idle_timeout_ms), .type = WK_CONFIG_MS, .def = "60000", .min = 100,
     .max = 86400000, .help = "stop idle executors above the minimum after this long"},
    {FIELD(max_calls_per_executor), .type = WK_CONFIG_UINT, .def = "0", .min = 0,
     .max = 1000000000000, .help = "recycle an executor after this many calls (0 = never)"},
    {FIELD(max_executor_rss_mb), .type = WK_CONFIG_UINT, .def = "0", .min = 0, .max = 1048576,
     .help = "recycle an executor above this peak RSS in MiB (0 = never)"},
    {FIELD(executor_heartbeat_interval_ms), .type = WK_CONFIG_MS, .def = "2000", .min = 100,
     .max = 600000, .help = "ping each executor this often"},
    {FIELD(executor_heartbeat_timeout_ms), .type = WK_CONFIG_MS, .def = "10000", .min = 200,
     .max = 3600000, .help = "kill and replace an executor silent this long"},
    {FIELD(executor_rlimit_as_mb), .type = WK_CONFIG_UINT, .def = "0", .min = 0,
     .max = 16777216, .help = "executor address-space limit in MiB (0 = unchanged)"},
    {FIELD(executor_rlimit_nofile), .type = WK_CONFIG_UINT, .def = "1024", .min = 0,
     .max = 1048576, .help = "executor open-files limit (0 = unchanged)"},
    {FIELD(executor_rlimit_cpu_s), .type = WK_CONFIG_UINT, .def = "0", .min = 0,
     .max = 31536000, .help = "executor CPU-seconds limit (0 = unchanged)"},
    {FIELD(python), .type = WK_CONFIG_STRING, .def = "/usr/bin/python3", .min = 1,
     .max = STRMAX(python), .meta = "PATH", .help = "interpreter for executors (an executable)"},
    {FIELD(executor_script), .type = WK_CONFIG_STRING, .def = WK_PYTHON_DIR "/worker_executor.py",
     .min = 1, .max = STRMAX(executor_script), .meta = "PATH",
     .doc_default = "python/worker_executor.py of the source tree",
     .help = "the executor program run by python"},
    {FIELD(python_path), .type = WK_CONFIG_STRING, .def = WK_PYTHON_DIR, .min = 0,
     .max = STRMAX(python_path), .meta = "DIRS", .doc_default = "python/ of the source tree",
     .help = "PYTHONPATH for executors"},
    /* results and watchers */
    {FIELD(result_retention_ms), .type = WK_CONFIG_MS, .def = "600000", .min = 0,
     .max = 86400000, .alias = "retention-ms", .help = "keep terminal results this long"},
    {FIELD(max_retained_results), .type = WK_CONFIG_UINT, .def = "10000", .min = 1,
     .max = 4194304, .help = "keep at most this many terminal results"},
    {FIELD(max_retained_bytes), .type = WK_CONFIG_BYTES, .def = "256MiB", .min = 1024,
     .max = 1099511627776, .help = "keep terminal results holding at most this many bytes"},
    {FIELD(watch_disconnect_grace_ms), .type = WK_CONFIG_MS, .def = "10000", .min = 0,
     .max = 3600000, .alias = "watch-grace-ms",
     .help = "fail a task OWNER_LOST this long after its last watcher broke"},
    /* slots and tasks */
    {FIELD(default_slot_ttl_ms), .type = WK_CONFIG_MS, .def = "30000", .min = 1,
     .max = 3600000, .alias = "slot-ttl-ms", .help = "slot lease when a request gives none"},
    {FIELD(max_slot_ttl_ms), .type = WK_CONFIG_MS, .def = "600000", .min = 1, .max = 86400000,
     .help = "longest slot lease accepted"},
    {FIELD(default_task_timeout_ms), .type = WK_CONFIG_MS, .def = "600000", .min = 1,
     .max = 86400000, .alias = "default-timeout-ms",
     .help = "task timeout when a submit gives none"},
    {FIELD(max_task_timeout_ms), .type = WK_CONFIG_MS, .def = "3600000", .min = 1,
     .max = 604800000, .alias = "max-timeout-ms", .help = "longest task timeout accepted"},
    {FIELD(drain_timeout_ms), .type = WK_CONFIG_MS, .def = "30000", .min = 0, .max = 3600000,
     .help = "on SIGTERM, wait this long for running tasks"},
    {FIELD(cancel_grace_ms), .type = WK_CONFIG_MS, .def = "2000", .min = 1, .max = 600000,
     .help = "kill an executor whose cancelled call still runs after this long"},
    {FIELD(tick_ms), .type = WK_CONFIG_MS, .def = "500", .min = 10, .max = 60000,
     .help = "timer tick: lease expiry, task timeouts, watch grace, result cleanup"},
    {FIELD(max_message_bytes), .type = WK_CONFIG_BYTES, .def = "4MiB", .min = 1024,
     .max = 1073741824, .help = "largest gRPC message"},
    {FIELD(max_inline_output_bytes), .type = WK_CONFIG_BYTES, .def = "4MiB", .min = 0,
     .max = 1073741824, .help = "largest outputs kept in a task result without a writer"},
    {FIELD(max_calls_per_task), .type = WK_CONFIG_UINT, .def = "1000000", .min = 1,
     .max = 100000000, .help = "most calls one task may make, subcalls included"},
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
     .meta = "LIST", .help = "functions this worker runs: comma-separated names, '*' suffix for a prefix (empty = all)"},
    {FIELD(audit_deny), .type = WK_CONFIG_STRING, .def = "", .min = 0, .max = STRMAX(audit_deny),
     .meta = "LIST", .help = "functions refused at activation (ACTIVATION_FAILED), checked before audit_allow"},
    {FIELD(usage_log), .type = WK_CONFIG_STRING, .def = "", .min = 0, .max = STRMAX(usage_log),
     .meta = "FILE", .help = "usage sink: one JSON usage record per task appended here (empty = the log only)"},
    /* writer plugins (a plugin the profile enables runs when its setting is set) */
    {FIELD(output_dir), .type = WK_CONFIG_STRING, .def = "", .min = 0, .max = STRMAX(output_dir),
     .meta = "DIR", .help = "file writer: directory for <task_id>.jsonl outputs (empty = off)"},
    {FIELD(redis_addr), .type = WK_CONFIG_STRING, .def = "", .min = 0, .max = STRMAX(redis_addr),
     .meta = "HOST:PORT", .help = "redis writer: server outputs are XADDed to (empty = off)"},
    {FIELD(postgres_dsn), .type = WK_CONFIG_STRING, .def = "", .min = 0,
     .max = STRMAX(postgres_dsn), .meta = "DSN",
     .help = "postgres writer: libpq connection string outputs are COPYed through (empty = off)"},
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
     .help = "set = every RPC (health included) needs 'authorization: Bearer TOKEN'"},
    /* registration and shadow traffic */
    {FIELD(etcd_endpoints), .type = WK_CONFIG_STRING, .def = "", .min = 0,
     .max = STRMAX(etcd_endpoints), .meta = "URLS",
     .help = "etcd endpoints, comma-separated http://host:port (empty = stand-alone)"},
    {FIELD(registry_prefix), .type = WK_CONFIG_STRING, .def = "", .min = 0,
     .max = STRMAX(registry_prefix), .meta = "PREFIX",
     .help = "etcd key prefix the worker registers under (empty = the profile's)"},
    {FIELD(advertise_addr), .type = WK_CONFIG_STRING, .def = "", .min = 0,
     .max = STRMAX(advertise_addr), .meta = "HOST:PORT",
     .help = "address coordinators dial, registered in etcd (empty = listen_addr's bound address)"},
    {FIELD(etcd_lease_ttl_s), .type = WK_CONFIG_UINT, .def = "10", .min = 1, .max = 3600,
     .help = "etcd lease TTL in seconds: a dead worker's key is gone this long after"},
    {FIELD(heartbeat_interval_ms), .type = WK_CONFIG_MS, .def = "3000", .min = 10,
     .max = 3600000, .help = "the registration value is re-put at least this often"},
    {FIELD(shadow_target_addr), .type = WK_CONFIG_STRING, .def = "", .min = 0,
     .max = STRMAX(shadow_target_addr), .meta = "HOST:PORT",
     .help = "mirror sampled successful submissions to this worker (empty = off)"},
    {FIELD(metrics_addr), .type = WK_CONFIG_STRING, .def = "", .min = 0, .max = STRMAX(metrics_addr),
     .meta = "HOST:PORT",
     .help = "serve Prometheus metrics on http://HOST:PORT/metrics (port 0 picks one; empty = off)"},
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

/* ---- errors: lines appended to the caller's buffer ---------------------------------- */

typedef struct errs {
  char *buf;
  size_t len;
  int n;
} errs;

static errs errs_init(char *buf, size_t len) {
  if (buf && len) buf[0] = '\0';
  return (errs){.buf = buf, .len = len, .n = 0};
}

static void vappend(errs *e, const char *fmt, va_list ap) __attribute__((format(printf, 2, 0)));
static void vappend(errs *e, const char *fmt, va_list ap) {
  if (!e->buf || e->len == 0) return;
  size_t used = strlen(e->buf);
  if (used + 1 >= e->len) return;
  size_t start = used;
  vsnprintf(e->buf + used, e->len - used, fmt, ap);
  used = strlen(e->buf);
  /* values echoed from files, the environment or flags may hold control bytes: keep
   * one problem on one line, and no terminal escapes */
  for (size_t i = start; i < used; i++) {
    unsigned char ch = (unsigned char)e->buf[i];
    if (ch < 0x20 || ch == 0x7f) e->buf[i] = '?';
  }
  if (used + 1 < e->len) {
    e->buf[used] = '\n';
    e->buf[used + 1] = '\0';
  } else {
    e->buf[e->len - 2] = '\n'; /* truncated: still one line per problem */
  }
}

/** One problem: a line, counted. */
__attribute__((format(printf, 2, 3))) static void fail(errs *e, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vappend(e, fmt, ap);
  va_end(ap);
  e->n++;
}

/** A warning: a line, not counted. */
__attribute__((format(printf, 2, 3))) static void warn(errs *e, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vappend(e, fmt, ap);
  va_end(ap);
}

/* ---- names: flags, environment variables, suggestions -------------------------------- */

/* "task_slots" -> "task-slots" */
static void dashed(const char *name, char *out, size_t len) {
  size_t i = 0;
  for (; name[i] && i + 1 < len; i++) out[i] = name[i] == '_' ? '-' : name[i];
  out[i] = '\0';
}

/* "task_slots" -> "WORKER_TASK_SLOTS" */
static void env_name(const char *name, char *out, size_t len) {
  int w = snprintf(out, len, "WORKER_");
  size_t i = w > 0 ? (size_t)w : 0;
  for (size_t j = 0; name[j] && i + 1 < len; j++, i++) {
    out[i] = (char)toupper((unsigned char)name[j]);
  }
  if (i < len) out[i] = '\0';
}

/* lower case, '-' as '_' */
static void normalize(const char *s, size_t n, char *out, size_t len) {
  size_t i = 0;
  for (; i < n && s[i] && i + 1 < len; i++) {
    char c = (char)tolower((unsigned char)s[i]);
    out[i] = c == '-' ? '_' : c;
  }
  out[i] = '\0';
}

static size_t edit_distance(const char *a, const char *b) {
  size_t la = strlen(a), lb = strlen(b);
  if (la > 63 || lb > 63) return 64;
  size_t prev[64], cur[64];
  for (size_t j = 0; j <= lb; j++) prev[j] = j;
  for (size_t i = 1; i <= la; i++) {
    cur[0] = i;
    for (size_t j = 1; j <= lb; j++) {
      size_t sub = prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      size_t del = prev[j] + 1, ins = cur[j - 1] + 1;
      cur[j] = sub < del ? (sub < ins ? sub : ins) : (del < ins ? del : ins);
    }
    memcpy(prev, cur, (lb + 1) * sizeof prev[0]);
  }
  return prev[lb];
}

/** The setting an unknown word most likely meant (a close name, an alias, a name the
 * word is part of), or NULL. */
static const wk_config_item *suggest(const char *word, size_t n) {
  char w[128];
  normalize(word, n, w, sizeof w);
  const wk_config_item *best = NULL;
  size_t best_d = 64;
  for (size_t i = 0; i < N_ITEMS; i++) {
    const wk_config_item *it = &table[i];
    char alias[128] = "";
    if (it->alias) normalize(it->alias, strlen(it->alias), alias, sizeof alias);
    if (strcmp(w, it->name) == 0 || (alias[0] && strcmp(w, alias) == 0)) return it;
    size_t d = edit_distance(w, it->name);
    if (alias[0]) {
      size_t da = edit_distance(w, alias);
      if (da < d) d = da;
    }
    size_t wl = strlen(w);
    bool close = d <= 2 || d * 4 <= wl;
    if (!close && wl >= 5 && strstr(it->name, w)) {
      close = true;
      d = 3;
    }
    if (close && d < best_d) {
      best = it;
      best_d = d;
    }
  }
  return best;
}

/* ---- values ------------------------------------------------------------------------ */

static void *field_of(wk_app_config *cfg, const wk_config_item *it) {
  assert(it->offset < sizeof *cfg);
  assert(it->offset + it->size <= sizeof *cfg);
  return (char *)cfg + it->offset;
}

static const void *cfield_of(const wk_app_config *cfg, const wk_config_item *it) {
  assert(it->offset < sizeof *cfg);
  assert(it->offset + it->size <= sizeof *cfg);
  return (const char *)cfg + it->offset;
}

static uint64_t get_uint(const void *field, size_t size) {
  if (size == sizeof(uint32_t)) {
    uint32_t v;
    memcpy(&v, field, sizeof v);
    return v;
  }
  uint64_t v;
  memcpy(&v, field, sizeof v);
  return v;
}

static int64_t get_i64(const void *field) {
  int64_t v;
  memcpy(&v, field, sizeof v);
  return v;
}

static void set_uint(void *field, size_t size, uint64_t v) {
  if (size == sizeof(uint32_t)) {
    uint32_t v32 = (uint32_t)v;
    memcpy(field, &v32, sizeof v32);
  } else {
    memcpy(field, &v, sizeof v);
  }
}

static bool get_bool(const void *field) {
  bool v;
  memcpy(&v, field, sizeof v);
  return v;
}

/* Parses leading decimal digits (at least one) into *v; returns the rest, or NULL on no
 * digit or overflow past `limit` (*overflow set). */
static const char *digits(const char *s, uint64_t limit, uint64_t *v, bool *overflow) {
  *v = 0;
  *overflow = false;
  if (!isdigit((unsigned char)*s)) return NULL;
  for (; isdigit((unsigned char)*s); s++) {
    uint64_t d = (uint64_t)(*s - '0');
    if (*v > (limit - d) / 10) {
      *overflow = true;
      return NULL;
    }
    *v = *v * 10 + d;
  }
  return s;
}

typedef struct unit {
  const char *suffix;
  uint64_t mult;
} unit;

static const unit no_units[] = {{"", 1}, {NULL, 0}};
static const unit ms_units[] = {{"", 1}, {"ms", 1}, {"s", 1000}, {"m", 60000}, {"h", 3600000}, {NULL, 0}};
static const unit byte_units[] = {{"", 1},           {"B", 1},           {"KiB", 1024},
                                  {"MiB", 1048576},  {"GiB", 1073741824}, {"TiB", 1099511627776},
                                  {NULL, 0}};

/* A whole number with an optional unit; *neg when it starts with '-' (if allowed).
 * Returns 0, -1 (syntax) or -2 (too large for limit). */
static int number_with_unit(const char *s, const unit *units, bool allow_neg, uint64_t limit,
                            uint64_t *out, bool *neg) {
  *neg = false;
  if (allow_neg && *s == '-') {
    *neg = true;
    s++;
  }
  uint64_t v;
  bool overflow;
  const char *rest = digits(s, UINT64_MAX, &v, &overflow);
  if (!rest) return overflow ? -2 : -1;
  for (const unit *u = units; u->suffix; u++) {
    if (strcmp(rest, u->suffix) == 0) {
      if (v > limit / u->mult) return -2;
      *out = v * u->mult;
      return 0;
    }
  }
  return -1;
}

static bool enum_has(const char *choices, const char *s) {
  size_t n = strlen(s);
  for (const char *p = choices; *p;) {
    const char *bar = strchr(p, '|');
    size_t len = bar ? (size_t)(bar - p) : strlen(p);
    if (len == n && n > 0 && strncmp(p, s, n) == 0) return true;
    if (!bar) break;
    p = bar + 1;
  }
  return false;
}

/* "debug|info" -> "debug, info" */
static void enum_list(const char *choices, char *out, size_t len) {
  size_t i = 0;
  for (const char *p = choices; *p && i + 3 < len; p++) {
    if (*p == '|') {
      out[i++] = ',';
      out[i++] = ' ';
    } else {
      out[i++] = *p;
    }
  }
  out[i < len ? i : len - 1] = '\0';
}

static const char *type_name(wk_config_type t) {
  switch (t) {
    case WK_CONFIG_STRING: return "string";
    case WK_CONFIG_UINT: return "uint";
    case WK_CONFIG_MS: return "ms";
    case WK_CONFIG_BYTES: return "bytes";
    case WK_CONFIG_BOOL: return "bool";
    case WK_CONFIG_ENUM: return "enum";
  }
  return "?";
}

static const char *type_meta(const wk_config_item *it) {
  if (it->meta) return it->meta;
  switch (it->type) {
    case WK_CONFIG_STRING: return "TEXT";
    case WK_CONFIG_UINT: return "N";
    case WK_CONFIG_MS: return "MS";
    case WK_CONFIG_BYTES: return "BYTES";
    case WK_CONFIG_BOOL: return "BOOL";
    case WK_CONFIG_ENUM: return "NAME";
  }
  return "VALUE";
}

/* What a value of this type looks like, for error messages. */
static void expected(const wk_config_item *it, char *out, size_t len) {
  switch (it->type) {
    case WK_CONFIG_UINT: snprintf(out, len, "a whole number"); return;
    case WK_CONFIG_MS:
      snprintf(out, len, "milliseconds (30000, or with a unit: 500ms, 30s, 5m, 1h)");
      return;
    case WK_CONFIG_BYTES:
      snprintf(out, len, "a byte count (4194304, or with a unit: 64KiB, 4MiB, 1GiB)");
      return;
    case WK_CONFIG_BOOL: snprintf(out, len, "true or false"); return;
    case WK_CONFIG_ENUM: {
      char list[128];
      enum_list(it->choices ? it->choices : "", list, sizeof list);
      snprintf(out, len, "one of %.100s", list);
      return;
    }
    case WK_CONFIG_STRING: snprintf(out, len, "text"); return;
  }
  snprintf(out, len, "a value");
}

int wk_config_parse_value(const wk_config_item *it, const char *text, void *field, char *err,
                          size_t len) {
  assert(it != NULL && text != NULL && field != NULL);
  assert(it->size > 0);
  char exp[128];
  expected(it, exp, sizeof exp);
  if (err && len) err[0] = '\0';
  switch (it->type) {
    case WK_CONFIG_STRING:
    case WK_CONFIG_ENUM: {
      size_t n = strlen(text);
      if (it->size == 0 || n > it->size - 1) {
        if (err) snprintf(err, len, "longer than %zu bytes", it->size ? it->size - 1 : 0);
        return -1;
      }
      if (it->type == WK_CONFIG_ENUM && !enum_has(it->choices ? it->choices : "", text)) {
        if (err) snprintf(err, len, "expected %s, got '%.80s'", exp, text);
        return -1;
      }
      memcpy(field, text, n + 1);
      return 0;
    }
    case WK_CONFIG_UINT: {
      uint64_t limit = it->size == sizeof(uint32_t) ? UINT32_MAX : UINT64_MAX;
      uint64_t v;
      bool neg;
      int rc = number_with_unit(text, no_units, true, limit, &v, &neg);
      if (rc == 0 && neg) rc = -1;
      if (rc == -2) {
        if (err) snprintf(err, len, "'%.80s' is too large (at most %" PRIu64 ")", text, limit);
        return -1;
      }
      if (rc != 0) {
        if (err) {
          snprintf(err, len, "expected %s%s, got '%.80s'", exp, text[0] == '-' ? " (not negative)" : "",
                   text);
        }
        return -1;
      }
      set_uint(field, it->size, v);
      return 0;
    }
    case WK_CONFIG_MS: {
      uint64_t v;
      bool neg;
      int rc = number_with_unit(text, ms_units, true, (uint64_t)INT64_MAX, &v, &neg);
      if (rc == -2) {
        if (err) snprintf(err, len, "'%.80s' is too large", text);
        return -1;
      }
      if (rc != 0) {
        if (err) snprintf(err, len, "expected %s, got '%.80s'", exp, text);
        return -1;
      }
      int64_t s = neg ? -(int64_t)v : (int64_t)v;
      memcpy(field, &s, sizeof s);
      return 0;
    }
    case WK_CONFIG_BYTES: {
      uint64_t v;
      bool neg;
      uint64_t limit = it->size == sizeof(uint32_t) ? UINT32_MAX : UINT64_MAX;
      int rc = number_with_unit(text, byte_units, false, limit, &v, &neg);
      if (rc == -2) {
        if (err) snprintf(err, len, "'%.80s' is too large", text);
        return -1;
      }
      if (rc != 0) {
        if (err) snprintf(err, len, "expected %s, got '%.80s'", exp, text);
        return -1;
      }
      set_uint(field, it->size, v);
      return 0;
    }
    case WK_CONFIG_BOOL: {
      static const char *const yes[] = {"true", "yes", "on", "1"};
      static const char *const no[] = {"false", "no", "off", "0"};
      for (size_t i = 0; i < 4; i++) {
        if (strcasecmp(text, yes[i]) == 0 || strcasecmp(text, no[i]) == 0) {
          bool b = strcasecmp(text, yes[i]) == 0;
          memcpy(field, &b, sizeof b);
          return 0;
        }
      }
      if (err) snprintf(err, len, "expected %s, got '%.80s'", exp, text);
      return -1;
    }
  }
  if (err) snprintf(err, len, "unknown type");
  return -1;
}

const char *wk_config_format_value(const wk_app_config *cfg, const wk_config_item *it, char *buf,
                                   size_t len) {
  const void *f = cfield_of(cfg, it);
  switch (it->type) {
    case WK_CONFIG_STRING:
    case WK_CONFIG_ENUM: snprintf(buf, len, "%.*s", (int)it->size, (const char *)f); break;
    case WK_CONFIG_UINT: snprintf(buf, len, "%" PRIu64, get_uint(f, it->size)); break;
    case WK_CONFIG_MS: snprintf(buf, len, "%" PRId64, get_i64(f)); break;
    case WK_CONFIG_BYTES: snprintf(buf, len, "%" PRIu64, get_uint(f, it->size)); break;
    case WK_CONFIG_BOOL: snprintf(buf, len, "%s", get_bool(f) ? "true" : "false"); break;
  }
  return buf;
}

/* ---- sources ------------------------------------------------------------------------- */

__attribute__((format(printf, 4, 5))) static void set_source(wk_config_sources *sources, size_t i,
                                                             wk_config_origin origin,
                                                             const char *fmt, ...) {
  if (!sources || i >= WK_CONFIG_MAX_ITEMS) return;
  sources->item[i].origin = origin;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(sources->item[i].where, sizeof sources->item[i].where, fmt, ap);
  va_end(ap);
}

/* The tail of a long path, so that "PATH:LINE" keeps the line. */
static const char *path_tail(const char *path) {
  size_t n = strlen(path);
  return n > 200 ? path + n - 200 : path;
}

static void source_text(const wk_config_source *s, char *out, size_t len) {
  switch (s->origin) {
    case WK_CONFIG_FROM_DEFAULT:
      if (strcmp(s->where, "default") == 0 || !s->where[0]) {
        snprintf(out, len, "default");
      } else {
        snprintf(out, len, "default, %s", s->where);
      }
      return;
    case WK_CONFIG_FROM_FILE: snprintf(out, len, "file %s", s->where); return;
    case WK_CONFIG_FROM_ENV: snprintf(out, len, "env %s", s->where); return;
    case WK_CONFIG_FROM_FLAG: snprintf(out, len, "flag %s", s->where); return;
  }
  snprintf(out, len, "?");
}

void wk_config_defaults(wk_app_config *cfg, wk_config_sources *sources) {
  memset(cfg, 0, sizeof *cfg);
  if (sources) memset(sources, 0, sizeof *sources);
  for (size_t i = 0; i < N_ITEMS; i++) {
    char err[256];
    if (wk_config_parse_value(&table[i], table[i].def, field_of(cfg, &table[i]), err,
                              sizeof err) != 0) {
      fprintf(stderr, "wk_config: the default of %s does not parse: %s\n", table[i].name, err);
      abort();
    }
    set_source(sources, i, WK_CONFIG_FROM_DEFAULT, "default");
  }
}

/* ---- the YAML file ------------------------------------------------------------------- */

typedef struct yaml_ctx {
  yaml_parser_t parser;
  const char *path;
  errs *e;
  bool broken; /* a syntax error: the parser cannot go on */
} yaml_ctx;

static bool next_event(yaml_ctx *y, yaml_event_t *ev) {
  if (y->broken) return false;
  if (yaml_parser_parse(&y->parser, ev)) return true;
  y->broken = true;
  size_t line = y->parser.problem_mark.line + 1;
  if (y->parser.error == YAML_READER_ERROR) {
    fail(y->e, "%s: YAML error: %s (byte %zu)", y->path,
         y->parser.problem ? y->parser.problem : "cannot read", y->parser.problem_offset);
  } else if (y->parser.context) {
    size_t from = y->parser.context_mark.line + 1;
    if (from != line) {
      fail(y->e, "%s:%zu: YAML syntax error: %s %s (started on line %zu)", y->path, line,
           y->parser.problem ? y->parser.problem : "?", y->parser.context, from);
    } else {
      fail(y->e, "%s:%zu: YAML syntax error: %s %s", y->path, line,
           y->parser.problem ? y->parser.problem : "?", y->parser.context);
    }
  } else {
    fail(y->e, "%s:%zu: YAML syntax error: %s", y->path, line,
         y->parser.problem ? y->parser.problem : "?");
  }
  return false;
}

/* Skips the rest of a node whose start event was `ev` (a scalar or alias is whole). */
static void skip_node(yaml_ctx *y, const yaml_event_t *ev) {
  if (ev->type != YAML_SEQUENCE_START_EVENT && ev->type != YAML_MAPPING_START_EVENT) return;
  int depth = 1;
  while (depth > 0) {
    yaml_event_t e;
    if (!next_event(y, &e)) return;
    if (e.type == YAML_SEQUENCE_START_EVENT || e.type == YAML_MAPPING_START_EVENT) depth++;
    if (e.type == YAML_SEQUENCE_END_EVENT || e.type == YAML_MAPPING_END_EVENT) depth--;
    yaml_event_delete(&e);
  }
}

static bool is_null_scalar(const yaml_event_t *ev) {
  if (ev->data.scalar.style != YAML_PLAIN_SCALAR_STYLE) return false;
  const char *v = (const char *)ev->data.scalar.value;
  return v[0] == '\0' || strcmp(v, "~") == 0 || strcmp(v, "null") == 0 ||
         strcmp(v, "Null") == 0 || strcmp(v, "NULL") == 0;
}

static const char *node_kind(yaml_event_type_t t) {
  switch (t) {
    case YAML_SEQUENCE_START_EVENT: return "a list";
    case YAML_MAPPING_START_EVENT: return "a mapping";
    case YAML_ALIAS_EVENT: return "an alias";
    case YAML_NO_EVENT:
    case YAML_STREAM_START_EVENT:
    case YAML_STREAM_END_EVENT:
    case YAML_DOCUMENT_START_EVENT:
    case YAML_DOCUMENT_END_EVENT:
    case YAML_SCALAR_EVENT:
    case YAML_SEQUENCE_END_EVENT:
    case YAML_MAPPING_END_EVENT: break;
  }
  return "something else";
}

/* One value event for setting i. */
static void file_value(yaml_ctx *y, wk_app_config *cfg, wk_config_sources *sources, size_t i,
                       const yaml_event_t *ev) {
  const wk_config_item *it = &table[i];
  size_t line = ev->start_mark.line + 1;
  char exp[128];
  expected(it, exp, sizeof exp);
  if (ev->type != YAML_SCALAR_EVENT) {
    skip_node(y, ev);
    if (!y->broken) { /* a syntax error inside says enough */
      fail(y->e, "%s:%zu: %s: expected %s, got %s", y->path, line, it->name, exp,
           node_kind(ev->type));
    }
    return;
  }
  const char *text = (const char *)ev->data.scalar.value;
  if (strlen(text) != ev->data.scalar.length) {
    fail(y->e, "%s:%zu: %s: the value contains a NUL byte", y->path, line, it->name);
    return;
  }
  bool stringy = it->type == WK_CONFIG_STRING || it->type == WK_CONFIG_ENUM;
  if (is_null_scalar(ev)) {
    if (!stringy) {
      fail(y->e, "%s:%zu: %s: expected %s, got no value", y->path, line, it->name, exp);
      return;
    }
    text = "";
  } else if (!stringy && ev->data.scalar.style != YAML_PLAIN_SCALAR_STYLE) {
    fail(y->e, "%s:%zu: %s: expected %s, got the quoted string \"%.80s\" (write it unquoted)",
         y->path, line, it->name, exp, text);
    return;
  }
  char msg[256];
  if (wk_config_parse_value(it, text, field_of(cfg, it), msg, sizeof msg) != 0) {
    fail(y->e, "%s:%zu: %s: %s", y->path, line, it->name, msg);
    return;
  }
  set_source(sources, i, WK_CONFIG_FROM_FILE, "%s:%zu", path_tail(y->path), line);
}

/* The root mapping, after its MAPPING_START. */
static void file_mapping(yaml_ctx *y, wk_app_config *cfg, wk_config_sources *sources) {
  size_t first_line[WK_CONFIG_MAX_ITEMS] = {0};
  for (;;) {
    yaml_event_t key;
    if (!next_event(y, &key)) return;
    if (key.type == YAML_MAPPING_END_EVENT) {
      yaml_event_delete(&key);
      return;
    }
    size_t line = key.start_mark.line + 1;
    size_t idx = 0;
    const wk_config_item *it = NULL;
    if (key.type != YAML_SCALAR_EVENT) {
      fail(y->e, "%s:%zu: a setting name must be a word, got %s", y->path, line,
           node_kind(key.type));
      skip_node(y, &key);
    } else {
      const char *name = (const char *)key.data.scalar.value;
      it = wk_config_find(name, &idx);
      if (!it) {
        const wk_config_item *s = suggest(name, strlen(name));
        if (s) {
          fail(y->e, "%s:%zu: unknown setting '%.80s' (did you mean %s?)", y->path, line, name,
               s->name);
        } else {
          fail(y->e, "%s:%zu: unknown setting '%.80s'", y->path, line, name);
        }
      } else if (first_line[idx]) {
        fail(y->e, "%s:%zu: duplicate setting '%s' (first set on line %zu)", y->path, line,
             it->name, first_line[idx]);
        it = NULL;
      } else {
        first_line[idx] = line;
      }
    }
    yaml_event_delete(&key);
    yaml_event_t val;
    if (!next_event(y, &val)) return;
    if (it) {
      file_value(y, cfg, sources, idx, &val); /* skips a collection */
    } else {
      skip_node(y, &val);
    }
    yaml_event_delete(&val);
  }
}

static void file_stream(yaml_ctx *y, wk_app_config *cfg, wk_config_sources *sources) {
  yaml_event_t ev;
  if (!next_event(y, &ev)) return; /* STREAM_START */
  yaml_event_delete(&ev);
  int docs = 0;
  for (;;) {
    if (!next_event(y, &ev)) return;
    yaml_event_type_t t = ev.type;
    size_t line = ev.start_mark.line + 1;
    yaml_event_delete(&ev);
    if (t == YAML_STREAM_END_EVENT) return;
    if (t != YAML_DOCUMENT_START_EVENT) continue;
    if (++docs > 1) {
      fail(y->e, "%s:%zu: only one YAML document is allowed", y->path, line);
      return;
    }
    yaml_event_t root;
    if (!next_event(y, &root)) return;
    if (root.type == YAML_MAPPING_START_EVENT) {
      file_mapping(y, cfg, sources);
    } else if (!(root.type == YAML_SCALAR_EVENT && is_null_scalar(&root))) {
      fail(y->e, "%s:%zu: the file must be a mapping of setting: value, got %s", y->path,
           root.start_mark.line + 1,
           root.type == YAML_SCALAR_EVENT ? "a single value" : node_kind(root.type));
      skip_node(y, &root);
    }
    yaml_event_delete(&root);
    if (!next_event(y, &ev)) return; /* DOCUMENT_END */
    yaml_event_delete(&ev);
  }
}

static int load_file(wk_app_config *cfg, const char *path, wk_config_sources *sources, errs *e) {
  int before = e->n;
  FILE *f = fopen(path, "rb");
  if (!f) {
    fail(e, "%s: cannot read: %s", path, strerror(errno));
    return e->n - before;
  }
  struct stat st;
  if (fstat(fileno(f), &st) == 0 && S_ISDIR(st.st_mode)) {
    fail(e, "%s: cannot read: %s", path, strerror(EISDIR));
    fclose(f);
    return e->n - before;
  }
  /* two passes: the syntax of the whole file first, so that a syntax error is the only
   * line reported for a broken file (and nothing of it applied); then the settings */
  for (int pass = 0; pass < 2 && e->n == before; pass++) {
    yaml_ctx y = {.path = path, .e = e};
    if (!yaml_parser_initialize(&y.parser)) {
      fail(e, "%s: out of memory", path);
      break;
    }
    rewind(f);
    yaml_parser_set_input_file(&y.parser, f);
    if (pass == 0) {
      yaml_event_t ev;
      bool end = false;
      while (!end && next_event(&y, &ev)) {
        end = ev.type == YAML_STREAM_END_EVENT;
        yaml_event_delete(&ev);
      }
    } else {
      file_stream(&y, cfg, sources);
    }
    yaml_parser_delete(&y.parser);
  }
  fclose(f);
  return e->n - before;
}

int wk_config_load_file(wk_app_config *cfg, const char *path, wk_config_sources *sources,
                        char *err, size_t len) {
  errs e = errs_init(err, len);
  return load_file(cfg, path, sources, &e);
}

static size_t index_of(const char *name);

/* ---- environment --------------------------------------------------------------------- */

static const char *env_lookup(char *const envp[], const char *name) {
  size_t n = strlen(name);
  for (size_t i = 0; envp && envp[i]; i++) {
    if (strncmp(envp[i], name, n) == 0 && envp[i][n] == '=') return envp[i] + n + 1;
  }
  return NULL;
}

static int apply_env(wk_app_config *cfg, char *const envp[], wk_config_sources *sources,
                     errs *e) {
  int before = e->n;
  static const char prefix[] = "WORKER_";
  for (size_t k = 0; envp && envp[k]; k++) {
    const char *var = envp[k];
    if (strncmp(var, prefix, sizeof prefix - 1) != 0) continue;
    const char *eq = strchr(var, '=');
    if (!eq) continue;
    const char *rest = var + sizeof prefix - 1;
    size_t rest_len = (size_t)(eq - rest);
    size_t var_len = (size_t)(eq - var);
    if (rest_len == strlen("CONFIG") && strncmp(rest, "CONFIG", rest_len) == 0) continue;
    /* the name must be exactly the upper-case form of a setting */
    size_t idx = 0;
    const wk_config_item *it = NULL;
    for (size_t i = 0; i < N_ITEMS && !it; i++) {
      char want[160];
      env_name(table[i].name, want, sizeof want);
      if (strlen(want) == var_len && strncmp(want, var, var_len) == 0) {
        it = &table[i];
        idx = i;
      }
    }
    if (!it) {
      /* not fatal: other programs use WORKER_* names too (scripts/run.sh: WORKER_PORT) */
      const wk_config_item *s = suggest(rest, rest_len);
      char want[160] = "";
      if (s) env_name(s->name, want, sizeof want);
      warn(e, "warning: %.*s is not a setting; ignored%s%s%s", (int)(var_len > 120 ? 120 : var_len),
           var, s ? " (did you mean " : "", want, s ? "?)" : "");
      continue;
    }
    char msg[256];
    if (wk_config_parse_value(it, eq + 1, field_of(cfg, it), msg, sizeof msg) != 0) {
      fail(e, "%.*s: %s", (int)var_len, var, msg);
      continue;
    }
    set_source(sources, idx, WK_CONFIG_FROM_ENV, "%.*s", (int)var_len, var);
  }
  return e->n - before;
}

int wk_config_apply_env(wk_app_config *cfg, char *const envp[], wk_config_sources *sources,
                        char *err, size_t len) {
  errs e = errs_init(err, len);
  return apply_env(cfg, envp, sources, &e);
}

/* ---- the command line ------------------------------------------------------------------ */

/* Whether flag (n bytes, without "--") names the setting, dashes for underscores. */
static bool flag_is(const char *flag, size_t n, const char *name) {
  size_t i = 0;
  for (; i < n && name[i]; i++) {
    char want = name[i] == '_' ? '-' : name[i];
    if (flag[i] != want) return false;
  }
  return i == n && name[i] == '\0';
}

int wk_config_parse_cli(int argc, char *const argv[], wk_config_cli *cli, char *err,
                        size_t len) {
  errs e = errs_init(err, len);
  memset(cli, 0, sizeof *cli);
  for (int a = 1; a < argc; a++) {
    const char *arg = argv[a];
    if (strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0) {
      cli->help = true;
      continue;
    }
    if (strncmp(arg, "--", 2) != 0 || arg[2] == '\0') {
      if (arg[0] == '-' && arg[1] != '\0') {
        fail(&e, "unknown flag '%.80s'", arg);
      } else {
        fail(&e, "unexpected argument '%.80s'", arg);
      }
      continue;
    }
    const char *name = arg + 2;
    const char *eq = strchr(name, '=');
    size_t n = eq ? (size_t)(eq - name) : strlen(name);
    size_t flag_len = n + 2;
    bool is_bool_flag = false;
    bool *bool_target = NULL;
    if (flag_is(name, n, "print-config")) bool_target = &cli->print_config;
    if (flag_is(name, n, "json")) bool_target = &cli->json;
    if (flag_is(name, n, "markdown")) bool_target = &cli->markdown;
    if (bool_target) {
      is_bool_flag = true;
      if (eq) {
        fail(&e, "--%.*s takes no value", (int)n, name);
      } else {
        *bool_target = true;
      }
    }
    if (is_bool_flag) continue;
    /* a flag with a value: --config or a setting */
    const char *value = NULL;
    if (eq) {
      value = eq + 1;
    } else if (a + 1 < argc) {
      value = argv[++a];
    }
    if (flag_is(name, n, "config")) {
      if (!value) {
        fail(&e, "--config needs a value");
      } else {
        cli->config_path = value;
      }
      continue;
    }
    size_t idx = N_ITEMS;
    for (size_t i = 0; i < N_ITEMS && idx == N_ITEMS; i++) {
      if (flag_is(name, n, table[i].name) ||
          (table[i].alias && flag_is(name, n, table[i].alias))) {
        idx = i;
      }
    }
    if (idx == N_ITEMS) {
      const wk_config_item *s = suggest(name, n);
      char d[160] = "";
      if (s) dashed(s->name, d, sizeof d);
      fail(&e, "unknown flag '--%.*s'%s%s%s", (int)(n > 80 ? 80 : n), name,
           s ? " (did you mean --" : "", d, s ? "?)" : "");
      if (!eq && value && strncmp(value, "--", 2) == 0) a--; /* that is the next flag */
      continue;
    }
    if (!value) {
      fail(&e, "--%.*s needs a value", (int)n, name);
      continue;
    }
    if (cli->n_flags >= WK_CONFIG_MAX_FLAGS) {
      fail(&e, "too many flags (at most %d)", WK_CONFIG_MAX_FLAGS);
      break;
    }
    cli->flags[cli->n_flags].index = idx;
    cli->flags[cli->n_flags].flag = arg;
    cli->flags[cli->n_flags].flag_len = flag_len;
    cli->flags[cli->n_flags].value = value;
    cli->n_flags++;
  }
  if ((cli->json || cli->markdown) && !cli->print_config) {
    fail(&e, "--json and --markdown go with --print-config");
  }
  if (cli->json && cli->markdown) fail(&e, "--json and --markdown exclude each other");
  return e.n;
}

static int apply_flags(wk_app_config *cfg, const wk_config_cli *cli, wk_config_sources *sources,
                       errs *e) {
  int before = e->n;
  assert(cli->n_flags <= WK_CONFIG_MAX_FLAGS);
  for (size_t k = 0; k < cli->n_flags; k++) {
    size_t idx = cli->flags[k].index;
    assert(idx < N_ITEMS);
    if (idx >= N_ITEMS) continue;
    const wk_config_item *it = &table[idx];
    int fl = (int)(cli->flags[k].flag_len > 120 ? 120 : cli->flags[k].flag_len);
    char msg[256];
    if (wk_config_parse_value(it, cli->flags[k].value, field_of(cfg, it), msg, sizeof msg) != 0) {
      fail(e, "%.*s: %s", fl, cli->flags[k].flag, msg);
      continue;
    }
    set_source(sources, idx, WK_CONFIG_FROM_FLAG, "%.*s", fl, cli->flags[k].flag);
  }
  return e->n - before;
}

int wk_config_apply_flags(wk_app_config *cfg, const wk_config_cli *cli,
                          wk_config_sources *sources, char *err, size_t len) {
  errs e = errs_init(err, len);
  return apply_flags(cfg, cli, sources, &e);
}

int wk_config_load(wk_app_config *cfg, wk_config_sources *sources, const wk_config_cli *cli,
                   char *const envp[], char *err, size_t len) {
  return wk_config_load_tuned(cfg, sources, cli, envp, NULL, err, len);
}

int wk_config_load_tuned(wk_app_config *cfg, wk_config_sources *sources, const wk_config_cli *cli,
                         char *const envp[], void (*tune)(wk_app_config *cfg), char *err,
                         size_t len) {
  errs e = errs_init(err, len);
  wk_config_sources local;
  if (!sources) sources = &local;
  wk_config_defaults(cfg, sources);
  if (tune) {
    /* the Profile's tune-defaults: only built-in defaults change, and say so */
    wk_app_config before = *cfg;
    tune(cfg);
    for (size_t i = 0; i < N_ITEMS; i++) {
      const wk_config_item *it = &table[i];
      if (memcmp((const char *)&before + it->offset, (const char *)cfg + it->offset, it->size) != 0) {
        set_source(sources, i, WK_CONFIG_FROM_DEFAULT, "profile");
      }
    }
  }
  const char *path = cli && cli->config_path ? cli->config_path : env_lookup(envp, "WORKER_CONFIG");
  if (path && path[0]) load_file(cfg, path, sources, &e);
  apply_env(cfg, envp, sources, &e);
  if (cli) apply_flags(cfg, cli, sources, &e);
  /* a derived default: executors_max left at its default follows a larger executors
   * (`--executors 8` alone must not be an error); set explicitly, the rule holds */
  size_t xi = index_of("executors_max");
  if (sources && xi < N_ITEMS && sources->item[xi].origin == WK_CONFIG_FROM_DEFAULT &&
      cfg->executors_max != 0 && cfg->executors_max < cfg->executors) {
    cfg->executors_max = cfg->executors;
    set_source(sources, xi, WK_CONFIG_FROM_DEFAULT, "raised to executors");
  }
  return e.n;
}

/* ---- validation ------------------------------------------------------------------------ */

typedef struct vctx {
  const wk_app_config *cfg;
  const wk_config_sources *sources;
  errs *e;
} vctx;

static size_t index_of(const char *name) {
  size_t i = 0;
  const wk_config_item *it = wk_config_find(name, &i);
  return it ? i : N_ITEMS;
}

/* One problem about settings a (and b, when b < N_ITEMS), naming their sources. */
__attribute__((format(printf, 4, 5))) static void vfail(vctx *v, size_t a, size_t b,
                                                        const char *fmt, ...) {
  char msg[1400];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (!v->sources || a >= N_ITEMS) {
    fail(v->e, "%s", msg);
    return;
  }
  char sa[300] = "default", sb[300] = "default";
  const wk_config_source *src_a = &v->sources->item[a];
  if (src_a->origin != WK_CONFIG_FROM_DEFAULT) {
    snprintf(sa, sizeof sa, "from ");
    source_text(src_a, sa + 5, sizeof sa - 5);
  }
  if (b >= N_ITEMS) {
    fail(v->e, "%s (%s)", msg, sa);
    return;
  }
  const wk_config_source *src_b = &v->sources->item[b];
  if (src_b->origin != WK_CONFIG_FROM_DEFAULT) {
    snprintf(sb, sizeof sb, "from ");
    source_text(src_b, sb + 5, sizeof sb - 5);
  }
  fail(v->e, "%s (%s %s, %s %s)", msg, table[a].name, sa, table[b].name, sb);
}

static void check_range(vctx *v, size_t i) {
  const wk_config_item *it = &table[i];
  const void *f = cfield_of(v->cfg, it);
  switch (it->type) {
    case WK_CONFIG_UINT: {
      uint64_t x = get_uint(f, it->size);
      if (x < (uint64_t)it->min || x > (uint64_t)it->max) {
        vfail(v, i, N_ITEMS, "%s must be between %" PRId64 " and %" PRId64 ", got %" PRIu64,
              it->name, it->min, it->max, x);
      }
      return;
    }
    case WK_CONFIG_MS: {
      int64_t x = get_i64(f);
      if (x < it->min || x > it->max) {
        vfail(v, i, N_ITEMS, "%s must be between %" PRId64 " and %" PRId64 " ms, got %" PRId64,
              it->name, it->min, it->max, x);
      }
      return;
    }
    case WK_CONFIG_BYTES: {
      uint64_t x = get_uint(f, it->size);
      if (x < (uint64_t)it->min || x > (uint64_t)it->max) {
        vfail(v, i, N_ITEMS, "%s must be between %" PRId64 " and %" PRId64 " bytes, got %" PRIu64,
              it->name, it->min, it->max, x);
      }
      return;
    }
    case WK_CONFIG_BOOL: return;
    case WK_CONFIG_STRING:
    case WK_CONFIG_ENUM: {
      const char *s = f;
      size_t n = strnlen(s, it->size);
      if (n == it->size) {
        vfail(v, i, N_ITEMS, "%s is not terminated", it->name);
      } else if (it->type == WK_CONFIG_ENUM) {
        if (!enum_has(it->choices ? it->choices : "", s)) {
          char list[128];
          enum_list(it->choices ? it->choices : "", list, sizeof list);
          vfail(v, i, N_ITEMS, "%s must be one of %s, got '%.80s'", it->name, list, s);
        }
      } else if (n == 0 && it->min > 0) {
        vfail(v, i, N_ITEMS, "%s must not be empty", it->name);
      } else if ((int64_t)n < it->min || (int64_t)n > it->max) {
        vfail(v, i, N_ITEMS, "%s must be %" PRId64 " to %" PRId64 " bytes long, got %zu",
              it->name, it->min, it->max, n);
      }
      return;
    }
  }
}

/* NULL if addr is host:port, [v6]:port or unix:PATH; else why not. */
static const char *listen_problem(const char *addr) {
  if (strncmp(addr, "unix:", 5) == 0) return addr[5] ? NULL : "unix: needs a path";
  if (strncmp(addr, "unix-abstract:", 14) == 0) return addr[14] ? NULL : "unix-abstract: needs a name";
  const char *colon = strrchr(addr, ':');
  if (!colon) return "no ':port'";
  size_t host_len = (size_t)(colon - addr);
  if (host_len == 0) return "no host (0.0.0.0 or [::] listens on every address)";
  if (addr[0] == '[') {
    if (host_len < 3 || addr[host_len - 1] != ']') return "an IPv6 host is written [::1]";
  } else if (memchr(addr, ':', host_len)) {
    return "an IPv6 host needs brackets: [::1]:7070";
  }
  const char *port = colon + 1;
  size_t pn = strlen(port);
  if (pn == 0 || pn > 5 || strspn(port, "0123456789") != pn) return "the port must be a number";
  if (atol(port) > 65535) return "the port must be at most 65535";
  return NULL;
}

static void check_dir(vctx *v, const char *name) {
  size_t i = index_of(name);
  if (i >= N_ITEMS) return;
  const char *path = cfield_of(v->cfg, &table[i]);
  if (!path[0]) return; /* empty: reported by the range check, or allowed */
  struct stat st;
  if (stat(path, &st) != 0) {
    vfail(v, i, N_ITEMS, "%s must be an existing directory, got '%.200s' (%s)", name, path,
          strerror(errno));
  } else if (!S_ISDIR(st.st_mode)) {
    vfail(v, i, N_ITEMS, "%s must be an existing directory, got '%.200s' (not a directory)",
          name, path);
  }
}

static void check_file(vctx *v, const char *name, int mode, const char *what) {
  size_t i = index_of(name);
  if (i >= N_ITEMS) return;
  const char *path = cfield_of(v->cfg, &table[i]);
  if (!path[0]) return;
  struct stat st;
  if (stat(path, &st) != 0) {
    vfail(v, i, N_ITEMS, "%s must be %s, got '%.200s' (%s)", name, what, path, strerror(errno));
  } else if (S_ISDIR(st.st_mode)) {
    vfail(v, i, N_ITEMS, "%s must be %s, got '%.200s' (a directory)", name, what, path);
  } else if (access(path, mode) != 0) {
    vfail(v, i, N_ITEMS, "%s must be %s, got '%.200s' (%s)", name, what, path, strerror(errno));
  }
}

static int validate(const wk_app_config *c, const wk_config_sources *sources, errs *e) {
  vctx v = {.cfg = c, .sources = sources, .e = e};
  int before = e->n;
  for (size_t i = 0; i < N_ITEMS; i++) check_range(&v, i);

  if (c->default_slot_ttl_ms > c->max_slot_ttl_ms) {
    vfail(&v, index_of("default_slot_ttl_ms"), index_of("max_slot_ttl_ms"),
          "default_slot_ttl_ms (%" PRId64 ") must not exceed max_slot_ttl_ms (%" PRId64 ")",
          c->default_slot_ttl_ms, c->max_slot_ttl_ms);
  }
  if (c->default_task_timeout_ms > c->max_task_timeout_ms) {
    vfail(&v, index_of("default_task_timeout_ms"), index_of("max_task_timeout_ms"),
          "default_task_timeout_ms (%" PRId64 ") must not exceed max_task_timeout_ms (%" PRId64
          ")",
          c->default_task_timeout_ms, c->max_task_timeout_ms);
  }
  if (c->executors_max != 0 && c->executors_max < c->executors) {
    vfail(&v, index_of("executors_max"), index_of("executors"),
          "executors_max (%" PRIu32 ") must be 0 or at least executors (%" PRIu32 ")",
          c->executors_max, c->executors);
  }
  if (c->executor_heartbeat_timeout_ms <= c->executor_heartbeat_interval_ms) {
    vfail(&v, index_of("executor_heartbeat_timeout_ms"), index_of("executor_heartbeat_interval_ms"),
          "executor_heartbeat_timeout_ms (%" PRId64
          ") must exceed executor_heartbeat_interval_ms (%" PRId64 ")",
          c->executor_heartbeat_timeout_ms, c->executor_heartbeat_interval_ms);
  }
  if (c->listen_addr[0] && strnlen(c->listen_addr, sizeof c->listen_addr) < sizeof c->listen_addr) {
    const char *why = listen_problem(c->listen_addr);
    if (why) {
      vfail(&v, index_of("listen_addr"), N_ITEMS,
            "listen_addr must be host:port or unix:PATH, got '%.200s' (%s)", c->listen_addr, why);
    }
  }
  check_dir(&v, "code_root");
  check_dir(&v, "scratch_root");
  check_file(&v, "python", X_OK, "an executable file");
  check_file(&v, "executor_script", R_OK, "a readable file");
  return e->n - before;
}

int wk_config_validate(const wk_app_config *cfg, char *err, size_t len) {
  errs e = errs_init(err, len);
  return validate(cfg, NULL, &e);
}

int wk_config_validate_sources(const wk_app_config *cfg, const wk_config_sources *sources,
                               char *err, size_t len) {
  errs e = errs_init(err, len);
  return validate(cfg, sources, &e);
}

/* ---- the table checks itself --------------------------------------------------------- */

static size_t type_align(const wk_config_item *it) {
  switch (it->type) {
    case WK_CONFIG_STRING:
    case WK_CONFIG_ENUM: return 1;
    case WK_CONFIG_UINT:
    case WK_CONFIG_BYTES: return it->size == sizeof(uint32_t) ? _Alignof(uint32_t) : _Alignof(uint64_t);
    case WK_CONFIG_MS: return _Alignof(int64_t);
    case WK_CONFIG_BOOL: return _Alignof(bool);
  }
  return 1;
}

static bool size_fits(const wk_config_item *it) {
  switch (it->type) {
    case WK_CONFIG_STRING:
    case WK_CONFIG_ENUM: return it->size >= 2 && it->max <= (int64_t)it->size - 1;
    case WK_CONFIG_UINT:
    case WK_CONFIG_BYTES:
      if (it->size == sizeof(uint32_t)) return it->max <= (int64_t)UINT32_MAX;
      return it->size == sizeof(uint64_t);
    case WK_CONFIG_MS: return it->size == sizeof(int64_t);
    case WK_CONFIG_BOOL: return it->size == sizeof(bool);
  }
  return false;
}

int wk_config_check_table(char *err, size_t len) {
  errs e = errs_init(err, len);
  size_t order[WK_CONFIG_MAX_ITEMS];
  for (size_t i = 0; i < N_ITEMS; i++) {
    const wk_config_item *it = &table[i];
    order[i] = i;
    if (strspn(it->name, "abcdefghijklmnopqrstuvwxyz0123456789_") != strlen(it->name)) {
      fail(&e, "%s: not snake_case", it->name);
    }
    if (!it->help || !it->help[0]) fail(&e, "%s: no description", it->name);
    if (!size_fits(it)) fail(&e, "%s: a %s does not fit the field's %zu bytes", it->name,
                             type_name(it->type), it->size);
    if (it->min > it->max) fail(&e, "%s: min above max", it->name);
    if ((it->type == WK_CONFIG_ENUM) != (it->choices != NULL)) {
      fail(&e, "%s: choices go with enum only", it->name);
    }
    for (size_t j = 0; j < i; j++) {
      const wk_config_item *o = &table[j];
      char d[160];
      if (strcmp(o->name, it->name) == 0) fail(&e, "%s: two rows", it->name);
      if (it->alias) {
        dashed(o->name, d, sizeof d);
        if (strcmp(d, it->alias) == 0 || (o->alias && strcmp(o->alias, it->alias) == 0)) {
          fail(&e, "%s: alias --%s taken", it->name, it->alias);
        }
      }
      if (o->alias) {
        dashed(it->name, d, sizeof d);
        if (strcmp(d, o->alias) == 0) fail(&e, "%s: its flag is %s's alias", it->name, o->name);
      }
    }
    if (size_fits(it)) {
      wk_app_config c;
      char msg[256];
      memset(&c, 0, sizeof c);
      if (wk_config_parse_value(it, it->def, field_of(&c, it), msg, sizeof msg) != 0) {
        fail(&e, "%s: default '%s' does not parse: %s", it->name, it->def, msg);
      } else {
        errs quiet = errs_init(NULL, 0);
        vctx v = {.cfg = &c, .e = &quiet};
        check_range(&v, i);
        if (quiet.n) fail(&e, "%s: default '%s' out of range", it->name, it->def);
      }
    }
  }
  /* coverage: sorted by offset, each row starts where the one before ends (plus the
   * padding its alignment needs), and the struct ends after the last */
  for (size_t i = 1; i < N_ITEMS; i++) {
    for (size_t j = i; j > 0 && table[order[j - 1]].offset > table[order[j]].offset; j--) {
      size_t t = order[j];
      order[j] = order[j - 1];
      order[j - 1] = t;
    }
  }
  size_t end = 0;
  const char *prev = "the start";
  for (size_t k = 0; k < N_ITEMS; k++) {
    const wk_config_item *it = &table[order[k]];
    size_t a = type_align(it);
    size_t want = (end + a - 1) / a * a;
    if (it->offset < end) fail(&e, "%s overlaps %s", it->name, prev);
    if (it->offset > want) {
      fail(&e, "a field of wk_app_config between %s and %s has no row", prev, it->name);
    }
    end = it->offset + it->size;
    prev = it->name;
  }
  size_t tail = (end + _Alignof(wk_app_config) - 1) / _Alignof(wk_app_config) * _Alignof(wk_app_config);
  if (tail != sizeof(wk_app_config)) {
    fail(&e, "a field of wk_app_config after %s has no row", prev);
  }
  return e.n;
}

/* ---- showing ---------------------------------------------------------------------------- */

void wk_config_print(FILE *out, const wk_app_config *cfg, const wk_config_sources *sources,
                     wk_config_format format) {
  if (format == WK_CONFIG_JSON) {
    json_t *root = json_object();
    for (size_t i = 0; i < N_ITEMS; i++) {
      const wk_config_item *it = &table[i];
      const void *f = cfield_of(cfg, it);
      json_t *val = NULL;
      switch (it->type) {
        case WK_CONFIG_STRING:
        case WK_CONFIG_ENUM: val = json_stringn(f, strnlen(f, it->size)); break;
        case WK_CONFIG_UINT:
        case WK_CONFIG_BYTES: {
          uint64_t x = get_uint(f, it->size);
          val = x <= (uint64_t)INT64_MAX ? json_integer((json_int_t)x) : NULL;
          break;
        }
        case WK_CONFIG_MS: val = json_integer((json_int_t)get_i64(f)); break;
        case WK_CONFIG_BOOL: val = json_boolean(get_bool(f)); break;
      }
      if (!val) {
        char buf[64];
        val = json_string(wk_config_format_value(cfg, it, buf, sizeof buf));
      }
      static const char *const origins[] = {"default", "file", "env", "flag"};
      const wk_config_source *s = sources ? &sources->item[i] : NULL;
      json_t *o = json_object();
      json_object_set_new(o, "value", val);
      json_object_set_new(o, "source", json_string(s ? origins[s->origin] : "default"));
      if (s && s->origin != WK_CONFIG_FROM_DEFAULT) {
        json_object_set_new(o, "where", json_string(s->where));
      }
      json_object_set_new(root, it->name, o);
    }
    json_dumpf(root, out, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    fputc('\n', out);
    json_decref(root);
    return;
  }
  int name_w = 0, val_w = 0;
  char buf[1100];
  for (size_t i = 0; i < N_ITEMS; i++) {
    int n = (int)strlen(table[i].name);
    if (n > name_w) name_w = n;
    wk_config_format_value(cfg, &table[i], buf, sizeof buf);
    n = buf[0] ? (int)strlen(buf) : 2;
    if (n > val_w) val_w = n;
  }
  if (val_w > 40) val_w = 40;
  fprintf(out, "%-*s  %-*s  %s\n", name_w, "# setting", val_w, "value", "source");
  for (size_t i = 0; i < N_ITEMS; i++) {
    char src[300] = "default";
    if (sources) source_text(&sources->item[i], src, sizeof src);
    wk_config_format_value(cfg, &table[i], buf, sizeof buf);
    fprintf(out, "%-*s  %-*s  %s\n", name_w, table[i].name, val_w, buf[0] ? buf : "\"\"", src);
  }
}

static void range_text(const wk_config_item *it, char *out, size_t len) {
  switch (it->type) {
    case WK_CONFIG_UINT:
    case WK_CONFIG_MS:
    case WK_CONFIG_BYTES:
      snprintf(out, len, "%" PRId64 " .. %" PRId64, it->min, it->max);
      return;
    case WK_CONFIG_ENUM: enum_list(it->choices ? it->choices : "", out, len); return;
    case WK_CONFIG_STRING:
      if (it->min > 0) {
        snprintf(out, len, "1 .. %" PRId64 " bytes", it->max);
      } else {
        snprintf(out, len, "0 .. %" PRId64 " bytes", it->max);
      }
      return;
    case WK_CONFIG_BOOL: snprintf(out, len, "true, false"); return;
  }
  out[0] = '\0';
}

void wk_config_print_markdown(FILE *out) {
  fprintf(out, "| Setting | Environment | Flag | Type | Default | Range | Description |\n");
  fprintf(out, "|---|---|---|---|---|---|---|\n");
  for (size_t i = 0; i < N_ITEMS; i++) {
    const wk_config_item *it = &table[i];
    char env[160], flag[160], range[160];
    env_name(it->name, env, sizeof env);
    dashed(it->name, flag, sizeof flag);
    range_text(it, range, sizeof range);
    fprintf(out, "| `%s` | `%s` | `--%s`", it->name, env, flag);
    if (it->alias) fprintf(out, " (or `--%s`)", it->alias);
    if (it->doc_default) {
      fprintf(out, " | %s | %s | %s | %s |\n", type_name(it->type), it->doc_default, range,
              it->help);
    } else {
      fprintf(out, " | %s | `%s` | %s | %s |\n", type_name(it->type), it->def[0] ? it->def : "\"\"",
              range, it->help);
    }
  }
}

void wk_config_print_help(FILE *out) {
  fputs("usage: worker [--config FILE] [--print-config [--json | --markdown]] [--SETTING VALUE]...\n"
        "\n"
        "Runs Python functions for a coordinator over gRPC (worker.v1.WorkerService).\n"
        "\n"
        "  --config FILE                  read settings from this YAML file (or WORKER_CONFIG)\n"
        "  --print-config                 print the effective configuration with each value's\n"
        "                                 source, check it, and exit (0 valid, 2 invalid)\n"
        "  --json                         with --print-config: as JSON\n"
        "  --markdown                     with --print-config: the settings reference (Markdown)\n"
        "  -h, --help                     this text\n"
        "\n"
        "Settings: each one is a flag --name-with-dashes VALUE, an environment variable\n"
        "WORKER_NAME and a key name in the file; flags beat the environment, which beats\n"
        "the file, which beats the defaults. Units: ms accepts 30000, 30s, 5m, 1h; bytes\n"
        "accepts 4194304, 64KiB, 4MiB, 1GiB.\n"
        "\n",
        out);
  for (size_t i = 0; i < N_ITEMS; i++) {
    const wk_config_item *it = &table[i];
    char flag[160], left[256];
    dashed(it->name, flag, sizeof flag);
    snprintf(left, sizeof left, "--%s %s", flag, type_meta(it));
    const char *def = it->doc_default ? it->doc_default : it->def;
    if (strlen(left) > 29) {
      fprintf(out, "  %s\n  %-29s", left, "");
    } else {
      fprintf(out, "  %-29s", left);
    }
    fprintf(out, "  %s (default %s%s%s)\n", it->help, def[0] ? def : "\"\"",
            it->alias ? "; also --" : "", it->alias ? it->alias : "");
  }
  fputs("\nLogs are JSON lines on stderr; SIGINT/SIGTERM drain and stop (a second one skips the "
        "wait).\n",
        out);
}

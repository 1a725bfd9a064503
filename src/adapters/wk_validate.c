/* wk_validate.c: decoding and validation of the gRPC requests. See wk_validate.h. */
#include "adapters/wk_validate.h"

#include <math.h>
#include <stdarg.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/wk_alloc.h"
#include "lib/wk_assert.h"
#include "lib/wk_json_out.h"
#include "lib/wk_err.h"

#define TASK_ID_RULE "must be 1 to 128 printable ASCII characters (0x21-0x7e)"
#define NAME_RULE "must be 1 to 128 characters of [A-Za-z0-9_.-] not starting with '.'"
#define TYPE_RULE "must be empty or 1 to 32 characters of [a-z0-9_]"
#define ENTRYPOINT_RULE \
  "must be empty or \"module:attr\" (dotted Python identifiers, at most 256 bytes)"

_Static_assert(WK_TASK_ID_MAX == 128u, "TASK_ID_RULE spells out the limit");
_Static_assert(WK_FUNCTION_NAME_MAX == 128u, "NAME_RULE spells out the limit");
_Static_assert(WK_PLUGIN_TYPE_MAX == 32u, "TYPE_RULE spells out the limit");
_Static_assert(WK_ENTRYPOINT_MAX == 256u, "ENTRYPOINT_RULE spells out the limit");

/* ---- helpers ------------------------------------------------------------------ */

/* wk_errf that returns false, for `return failf(err, err_len, ...)`. */
__attribute__((format(printf, 3, 4))) static bool failf(char *err, size_t err_len, const char *fmt,
                                                        ...) {
  va_list ap;
  va_start(ap, fmt);
  wk_verrf(err, err_len, fmt, ap);
  va_end(ap);
  return false;
}

static size_t str_len(const char *s) { return s == NULL ? 0 : strlen(s); }

/* A short, printable excerpt of s for messages: at most 40 bytes, anything outside
 * 0x20-0x7e (and the quote) as '?', "..." when cut. out holds 48 bytes. */
enum { EXCERPT_LEN = 48, EXCERPT_KEEP = 40 };
static const char *excerpt(const char *s, char out[EXCERPT_LEN]) {
  size_t n = str_len(s);
  size_t keep = n > EXCERPT_KEEP ? EXCERPT_KEEP : n;
  for (size_t i = 0; i < keep; i++) {
    unsigned char c = (unsigned char)s[i];
    out[i] = (c >= 0x20 && c <= 0x7e && c != '"') ? (char)c : '?';
  }
  size_t end = keep;
  if (n > keep) {
    memcpy(out + end, "...", 3);
    end += 3;
  }
  WK_ASSERT(end < EXCERPT_LEN);
  out[end] = '\0';
  return out;
}

static bool is_lower_digit_us(unsigned char c) {
  return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
}

static bool is_ident_start(unsigned char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

static bool is_ident_char(unsigned char c) { return is_ident_start(c) || (c >= '0' && c <= '9'); }

/* ident(.ident)* over s[0..n). */
static bool dotted_identifiers(const char *s, size_t n) {
  bool at_start = true; /* expecting the first character of an identifier */
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)s[i];
    if (at_start) {
      if (!is_ident_start(c)) return false;
      at_start = false;
    } else if (c == '.') {
      at_start = true;
    } else if (!is_ident_char(c)) {
      return false;
    }
  }
  return n > 0 && !at_start;
}

/* Plugin and builder type names: empty, or [a-z0-9_]{1,32}. */
static bool type_name_ok(const char *s) {
  size_t n = str_len(s);
  if (n > WK_PLUGIN_TYPE_MAX) return false;
  for (size_t i = 0; i < n; i++) {
    if (!is_lower_digit_us((unsigned char)s[i])) return false;
  }
  return true;
}

/* ---- fields ------------------------------------------------------------------- */

bool wk_validate_task_id(const char *field, const char *id, char *err, size_t err_len) {
  WK_ASSERT(field != NULL);
  size_t n = str_len(id);
  if (n == 0 || n > WK_TASK_ID_MAX) {
    return failf(err, err_len, "%s " TASK_ID_RULE ", got %zu bytes", field, n);
  }
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)id[i];
    if (c < 0x21 || c > 0x7e) {
      return failf(err, err_len, "%s " TASK_ID_RULE ", got byte 0x%02x at offset %zu", field,
                   (unsigned)c, i);
    }
  }
  return true;
}

static bool validate_name_field(const char *field, const char *name, char *err, size_t err_len) {
  size_t n = str_len(name);
  char ex[EXCERPT_LEN];
  if (n == 0 || n > WK_FUNCTION_NAME_MAX) {
    return failf(err, err_len, "%s " NAME_RULE ", got %zu bytes", field, n);
  }
  if (name[0] == '.') {
    return failf(err, err_len, "%s " NAME_RULE ", got \"%s\"", field, excerpt(name, ex));
  }
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)name[i];
    if (!(is_ident_char(c) || c == '.' || c == '-')) {
      return failf(err, err_len, "%s " NAME_RULE ", got byte 0x%02x at offset %zu", field,
                   (unsigned)c, i);
    }
  }
  return true;
}

static bool validate_function_name(const char *name, char *err, size_t err_len) {
  return validate_name_field("function.name", name, err, err_len);
}

static bool validate_entrypoint_field(const char *field, const char *ep, char *err,
                                      size_t err_len) {
  size_t n = str_len(ep);
  if (n == 0) return true;
  char ex[EXCERPT_LEN];
  const char *colon = memchr(ep, ':', n);
  bool ok = n <= WK_ENTRYPOINT_MAX && colon != NULL;
  if (ok) {
    size_t mod_len = (size_t)(colon - ep);
    ok = dotted_identifiers(ep, mod_len) && dotted_identifiers(colon + 1, n - mod_len - 1);
  }
  if (!ok) {
    return failf(err, err_len, "%s " ENTRYPOINT_RULE ", got \"%s\"", field, excerpt(ep, ex));
  }
  return true;
}

static bool validate_entrypoint(const char *ep, char *err, size_t err_len) {
  return validate_entrypoint_field("function.entrypoint", ep, err, err_len);
}

/* protobuf-c map fields are repeated entry messages with char *key, char *value. */
static bool validate_map_count(const char *field, size_t n, size_t max, char *err, size_t err_len) {
  if (n > max) {
    return failf(err, err_len, "%s may hold at most %zu entries, got %zu", field, max, n);
  }
  return true;
}

/* One label (a SubmitTask label, or a ListTasks label filter). */
static bool validate_label(const char *key, const char *value, char *err, size_t err_len) {
  char ex[EXCERPT_LEN];
  size_t kn = str_len(key);
  size_t vn = str_len(value);
  if (kn > WK_LABEL_BYTES_MAX) {
    return failf(err, err_len, "labels key \"%s\" must be at most %u bytes, got %zu",
                 excerpt(key, ex), WK_LABEL_BYTES_MAX, kn);
  }
  if (vn > WK_LABEL_BYTES_MAX) {
    return failf(err, err_len, "labels value for key \"%s\" must be at most %u bytes, got %zu",
                 excerpt(key, ex), WK_LABEL_BYTES_MAX, vn);
  }
  return true;
}

static bool validate_labels(const Worker__V1__SubmitTaskRequest *req, char *err, size_t err_len) {
  if (!validate_map_count("labels", req->n_labels, WK_LABELS_MAX, err, err_len)) {
    return false;
  }
  for (size_t i = 0; i < req->n_labels; i++) {
    const Worker__V1__SubmitTaskRequest__LabelsEntry *e = req->labels[i];
    if (e != NULL && !validate_label(e->key, e->value, err, err_len)) return false;
  }
  return true;
}

static bool validate_function(const Worker__V1__FunctionCallConfig *fn, char *err, size_t err_len) {
  char ex[EXCERPT_LEN];
  if (fn == NULL) {
    return failf(err, err_len, "function is required (a FunctionCallConfig with a name)");
  }
  if (!validate_function_name(fn->name, err, err_len)) return false;
  if (!type_name_ok(fn->type)) {
    return failf(err, err_len, "function.type " TYPE_RULE ", got \"%s\"", excerpt(fn->type, ex));
  }
  if (!validate_entrypoint(fn->entrypoint, err, err_len)) return false;
  int ct = (int)fn->content_type;
  if (ct != (int)WORKER__V1__CONTENT_TYPE__CONTENT_TYPE_JSON &&
      ct != (int)WORKER__V1__CONTENT_TYPE__CONTENT_TYPE_BYTES) {
    return failf(err, err_len,
                 "function.content_type %d is not a known ContentType "
                 "(0 CONTENT_TYPE_JSON, 1 CONTENT_TYPE_BYTES)",
                 ct);
  }
  return validate_map_count("function.options", fn->n_options, WK_OPTIONS_MAX, err, err_len);
}

static bool validate_retry(const Worker__V1__CallRetryPolicy *rp, char *err, size_t err_len) {
  if (rp == NULL) return true;
  if (rp->max_attempts > WK_RETRY_ATTEMPTS_MAX) {
    return failf(err, err_len, "call_retry_policy.max_attempts must be at most %u, got %u",
                 WK_RETRY_ATTEMPTS_MAX, (unsigned)rp->max_attempts);
  }
  double m = rp->backoff_multiplier;
  if (isnan(m) || (m != 0.0 && (m < 1.0 || m > WK_BACKOFF_MULTIPLIER_MAX))) {
    return failf(err, err_len,
                 "call_retry_policy.backoff_multiplier must be 0 (the default) or "
                 "between 1 and 100, got %g",
                 m);
  }
  if (rp->initial_backoff_ms > WK_BACKOFF_MS_MAX) {
    return failf(err, err_len,
                 "call_retry_policy.initial_backoff_ms must be at most %llu (one hour), "
                 "got %llu",
                 (unsigned long long)WK_BACKOFF_MS_MAX, (unsigned long long)rp->initial_backoff_ms);
  }
  if (rp->max_backoff_ms > WK_BACKOFF_MS_MAX) {
    return failf(err, err_len,
                 "call_retry_policy.max_backoff_ms must be at most %llu (one hour), "
                 "got %llu",
                 (unsigned long long)WK_BACKOFF_MS_MAX, (unsigned long long)rp->max_backoff_ms);
  }
  if (rp->initial_backoff_ms != 0 && rp->max_backoff_ms != 0 &&
      rp->max_backoff_ms < rp->initial_backoff_ms) {
    return failf(err, err_len,
                 "call_retry_policy.max_backoff_ms (%llu) must not be below "
                 "initial_backoff_ms (%llu)",
                 (unsigned long long)rp->max_backoff_ms,
                 (unsigned long long)rp->initial_backoff_ms);
  }
  return true;
}

/* ---- decoded requests --------------------------------------------------------- */

bool wk_validate_request_task_slot(const Worker__V1__RequestTaskSlotRequest *req, char *err,
                                   size_t err_len) {
  WK_ASSERT(req != NULL);
  if (!wk_validate_task_id("task_id", req->task_id, err, err_len)) return false;
  if (req->ttl_ms > WK_TTL_MS_MAX) {
    return failf(err, err_len, "ttl_ms must be at most %llu (2^40), got %llu",
                 (unsigned long long)WK_TTL_MS_MAX, (unsigned long long)req->ttl_ms);
  }
  return true;
}

bool wk_validate_submit_task(const Worker__V1__SubmitTaskRequest *req,
                             const wk_validate_limits *lim, char *err, size_t err_len) {
  WK_ASSERT(req != NULL);
  WK_ASSERT(lim != NULL);
  char ex[EXCERPT_LEN];
  if (!wk_validate_task_id("task_id", req->task_id, err, err_len)) return false;
  if (!validate_function(req->function, err, err_len)) return false;
  if (req->timeout_ms > lim->max_timeout_ms) {
    return failf(err, err_len, "timeout_ms must be at most %llu, got %llu",
                 (unsigned long long)lim->max_timeout_ms, (unsigned long long)req->timeout_ms);
  }
  const Worker__V1__CallFailurePolicy *fp = req->call_failure_policy;
  if (fp != NULL) {
    int mode = (int)fp->mode;
    if (mode != (int)WORKER__V1__CALL_FAILURE_MODE__CALL_FAILURE_MODE_FAIL_FAST &&
        mode != (int)WORKER__V1__CALL_FAILURE_MODE__CALL_FAILURE_MODE_CONTINUE) {
      return failf(err, err_len,
                   "call_failure_policy.mode %d is not a known CallFailureMode "
                   "(0 CALL_FAILURE_MODE_FAIL_FAST, 1 CALL_FAILURE_MODE_CONTINUE)",
                   mode);
    }
  }
  if (!validate_retry(req->call_retry_policy, err, err_len)) return false;
  if (!validate_labels(req, err, err_len)) return false;
  const Worker__V1__ResultHandler *rh = req->result_handler;
  if (rh != NULL) {
    if (!type_name_ok(rh->type)) {
      return failf(err, err_len, "result_handler.type " TYPE_RULE ", got \"%s\"",
                   excerpt(rh->type, ex));
    }
    if (!validate_map_count("result_handler.options", rh->n_options, WK_OPTIONS_MAX, err,
                            err_len)) {
      return false;
    }
  }
  return true;
}

bool wk_validate_get_task_result(const Worker__V1__GetTaskResultRequest *req, char *err,
                                 size_t err_len) {
  WK_ASSERT(req != NULL);
  return wk_validate_task_id("task_id", req->task_id, err, err_len);
}

typedef struct id_ref {
  const char *id;
  size_t index;
} id_ref;

static int id_ref_cmp(const void *a, const void *b) {
  const id_ref *x = a;
  const id_ref *y = b;
  int c = strcmp(x->id, y->id);
  if (c != 0) return c;
  return x->index < y->index ? -1 : (x->index > y->index ? 1 : 0);
}

bool wk_validate_watch_tasks(const Worker__V1__WatchTasksRequest *req,
                             const wk_validate_limits *lim, char *err, size_t err_len) {
  WK_ASSERT(req != NULL);
  WK_ASSERT(lim != NULL);
  size_t n = req->n_task_ids;
  if (n == 0 || n > lim->max_watch_tasks) {
    return failf(err, err_len, "task_ids must hold 1 to %u task ids, got %zu",
                 (unsigned)lim->max_watch_tasks, n);
  }
  for (size_t i = 0; i < n; i++) {
    if (wk_validate_task_id("task_ids[]", req->task_ids[i], NULL, 0)) continue;
    char field[32]; /* named only for the message: a snprintf per id showed per task */
    (void)snprintf(field, sizeof field, "task_ids[%zu]", i);
    return wk_validate_task_id(field, req->task_ids[i], err, err_len);
  }
  if (n == 1) return true;
  id_ref *refs = wk_xcalloc(n, sizeof *refs);
  for (size_t i = 0; i < n; i++) {
    refs[i].id = req->task_ids[i];
    refs[i].index = i;
  }
  qsort(refs, n, sizeof *refs, id_ref_cmp);
  /* Report the earliest second occurrence, and the first occurrence it repeats. */
  size_t dup = SIZE_MAX;
  size_t first = 0;
  size_t run_first = refs[0].index;
  for (size_t i = 1; i < n; i++) {
    if (strcmp(refs[i].id, refs[i - 1].id) != 0) {
      run_first = refs[i].index;
    } else if (refs[i].index < dup) {
      dup = refs[i].index;
      first = run_first;
    }
  }
  free(refs);
  if (dup != SIZE_MAX) {
    return failf(err, err_len, "task_ids[%zu] duplicates task_ids[%zu]; list each task once", dup,
                 first);
  }
  return true;
}

bool wk_validate_cancel_task(const Worker__V1__CancelTaskRequest *req, char *err, size_t err_len) {
  WK_ASSERT(req != NULL);
  if (!wk_validate_task_id("task_id", req->task_id, err, err_len)) return false;
  size_t n = str_len(req->reason);
  if (n > WK_CANCEL_REASON_MAX) {
    return failf(err, err_len, "reason must be at most %u bytes, got %zu", WK_CANCEL_REASON_MAX, n);
  }
  return true;
}

bool wk_validate_list_tasks(const Worker__V1__ListTasksRequest *req, char *err, size_t err_len) {
  WK_ASSERT(req != NULL);
  char ex[EXCERPT_LEN];
  if (req->page_size > WK_LIST_PAGE_MAX) {
    return failf(err, err_len, "page_size must be at most %u (0 = %u), got %u", WK_LIST_PAGE_MAX,
                 WK_LIST_PAGE_DEFAULT, (unsigned)req->page_size);
  }
  uint64_t seq;
  if (!wk_validate_page_token(req->page_token, &seq)) {
    return failf(err, err_len,
                 "page_token must be empty or a next_page_token this worker sent, got \"%s\"",
                 excerpt(req->page_token, ex));
  }
  if (req->n_states > WK_LIST_STATES_MAX) {
    return failf(err, err_len, "states may hold at most %u entries, got %zu", WK_LIST_STATES_MAX,
                 req->n_states);
  }
  for (size_t i = 0; i < req->n_states; i++) {
    int v = (int)req->states[i];
    if (v < WORKER__V1__TASK_STATE__TASK_STATE_PREPARING ||
        v > WORKER__V1__TASK_STATE__TASK_STATE_CANCELLED) {
      return failf(err, err_len,
                   "states[%zu] must be a TaskState from PREPARING to CANCELLED, got %d", i, v);
    }
  }
  if (!validate_map_count("labels", req->n_labels, WK_LABELS_MAX, err, err_len)) return false;
  for (size_t i = 0; i < req->n_labels; i++) {
    const Worker__V1__ListTasksRequest__LabelsEntry *e = req->labels[i];
    if (e != NULL && !validate_label(e->key, e->value, err, err_len)) return false;
  }
  return true;
}

bool wk_validate_page_token(const char *token, uint64_t *seq) {
  *seq = 0;
  if (token == NULL || token[0] == '\0') return true;
  /* "s" and a decimal sequence number, at most 19 digits, no leading zero */
  if (token[0] != 's' || token[1] < '1' || token[1] > '9') return false;
  uint64_t v = 0;
  size_t i = 1;
  for (; token[i]; i++) {
    if (token[i] < '0' || token[i] > '9' || i > 19) return false;
    v = v * 10u + (uint64_t)(token[i] - '0');
  }
  *seq = v;
  return true;
}

bool wk_validate_get_task_logs(const Worker__V1__GetTaskLogsRequest *req, char *err,
                               size_t err_len) {
  WK_ASSERT(req != NULL);
  if (!wk_validate_task_id("task_id", req->task_id, err, err_len)) return false;
  if (!req->one_call && req->call != 0) {
    return failf(err, err_len, "call is %u but one_call is false: set one_call to pick a call",
                 (unsigned)req->call);
  }
  return true;
}

bool wk_validate_deploy_code(const Worker__V1__DeployCodeRequest *req, char *err, size_t err_len) {
  WK_ASSERT(req != NULL);
  if (!validate_name_field("function", req->function, err, err_len)) return false;
  if (req->epoch > WK_DEPLOY_EPOCH_MAX) {
    return failf(err, err_len,
                 "epoch must be at most %" PRIu64 " (0 = the next local epoch), got %" PRIu64,
                 WK_DEPLOY_EPOCH_MAX, req->epoch);
  }
  if (!wk_validate_digest_hex("digest", req->digest, false, err, err_len)) return false;
  if (!validate_entrypoint_field("entrypoint", req->entrypoint, err, err_len)) return false;
  for (size_t i = 0; i < req->n_files; i++) {
    if (req->files[i] == NULL) return failf(err, err_len, "files[%zu] is missing", i);
  }
  return true;
}

bool wk_validate_set_current_epoch(const Worker__V1__SetCurrentEpochRequest *req, char *err,
                                   size_t err_len) {
  WK_ASSERT(req != NULL);
  if (!validate_name_field("function", req->function, err, err_len)) return false;
  if (req->epoch == 0 || req->epoch > WK_DEPLOY_EPOCH_MAX) {
    return failf(err, err_len,
                 "epoch must be 1..%" PRIu64 " (an epoch this worker holds), got %" PRIu64,
                 WK_DEPLOY_EPOCH_MAX, req->epoch);
  }
  return wk_validate_digest_hex("digest", req->digest, true, err, err_len);
}

bool wk_validate_digest_hex(const char *field, const char *hex, bool empty_ok, char *err,
                            size_t err_len) {
  size_t n = str_len(hex);
  if (n == 0 && empty_ok) return true;
  bool ok = n == 64;
  for (size_t i = 0; ok && i < n; i++) {
    char c = hex[i];
    ok = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
  }
  if (!ok) {
    char ex[EXCERPT_LEN];
    return failf(err, err_len,
                 "%s must be%s the 64 lowercase hex characters of the code's sha256 (the code "
                 "store's digest rule), got \"%s\" (%zu bytes)",
                 field, empty_ok ? " empty or" : "", excerpt(hex, ex), n);
  }
  return true;
}

bool wk_validate_health(const Grpc__Health__V1__HealthCheckRequest *req, char *err,
                        size_t err_len) {
  WK_ASSERT(req != NULL);
  size_t n = str_len(req->service);
  if (n > WK_HEALTH_SERVICE_MAX) {
    return failf(err, err_len, "service must be at most %u bytes, got %zu", WK_HEALTH_SERVICE_MAX,
                 n);
  }
  return true;
}

/* ---- wire scan of string fields ----------------------------------------------- */

enum { SCAN_DEPTH_MAX = 8, SCAN_PATH_LEN = 96, SCAN_FIELDS_MAX = 32 };

static bool read_varint(const uint8_t *buf, size_t len, size_t *pos, uint64_t *out) {
  uint64_t v = 0;
  for (unsigned shift = 0; shift < 64; shift += 7) {
    if (*pos >= len) return false;
    uint8_t b = buf[(*pos)++];
    v |= (uint64_t)(b & 0x7fu) << shift;
    if ((b & 0x80u) == 0) {
      *out = v;
      return true;
    }
  }
  return false;
}

/* Returns the offset of the first byte that breaks UTF-8 (or is NUL), or len. */
static size_t utf8_bad_offset(const uint8_t *s, size_t len, bool *is_nul) {
  *is_nul = false;
  for (size_t i = 0; i < len;) {
    if (s[i] == 0) {
      *is_nul = true;
      return i;
    }
    size_t l = wk_utf8_len(s + i, len - i);
    if (l == 0) return i;
    i += l;
  }
  return len;
}

/* Where a field sits in the request ("function.args", "task_ids[3]"): a chain up to the
 * top, spelled out only when an error names it (never on the path of a good request). */
typedef struct scan_path {
  const struct scan_path *up; /* NULL: a top-level field */
  const char *name;
  int index; /* of a repeated field; -1 otherwise */
} scan_path;

/* Appends the text of p to out (at *at, within len). */
static void path_text(const scan_path *p, char *out, size_t len, size_t *at) {
  if (p == NULL) return;
  path_text(p->up, out, len, at);
  int n = p->index >= 0
              ? snprintf(out + *at, len - *at, "%s%s[%d]", p->up ? "." : "", p->name, p->index)
              : snprintf(out + *at, len - *at, "%s%s", p->up ? "." : "", p->name);
  if (n > 0) *at = *at + (size_t)n < len ? *at + (size_t)n : len - 1;
}

static bool scan_message(const ProtobufCMessageDescriptor *d, const uint8_t *buf, size_t len,
                         const scan_path *up, unsigned depth, char *err, size_t err_len) {
  if (depth > SCAN_DEPTH_MAX) {
    return failf(err, err_len, "request nests messages deeper than %d levels", SCAN_DEPTH_MAX);
  }
  unsigned seen[SCAN_FIELDS_MAX] = {0};
  size_t pos = 0;
  while (pos < len) {
    uint64_t key;
    if (!read_varint(buf, len, &pos, &key)) goto malformed;
    unsigned wire = (unsigned)(key & 7u);
    uint64_t number = key >> 3;
    if (number == 0) goto malformed; /* no field 0; protobuf-c accepts an overlong tag 0 */
    uint64_t skip;
    switch (wire) {
      case 0:
        if (!read_varint(buf, len, &pos, &skip)) goto malformed;
        continue;
      case 1: skip = 8; break;
      case 5: skip = 4; break;
      case 2:
        if (!read_varint(buf, len, &pos, &skip)) goto malformed;
        break;
      default: goto malformed; /* groups: no Worker message has them */
    }
    if (skip > len - pos) goto malformed;
    size_t n = (size_t)skip;
    const ProtobufCFieldDescriptor *f =
        number <= UINT32_MAX ? protobuf_c_message_descriptor_get_field(d, (unsigned)number) : NULL;
    if (wire == 2 && f != NULL &&
        (f->type == PROTOBUF_C_TYPE_STRING || f->type == PROTOBUF_C_TYPE_MESSAGE)) {
      scan_path here = {up, f->name, -1};
      size_t fi = (size_t)(f - d->fields);
      if (f->label == PROTOBUF_C_LABEL_REPEATED && fi < SCAN_FIELDS_MAX) {
        here.index = (int)seen[fi];
        seen[fi]++;
      }
      if (f->type == PROTOBUF_C_TYPE_STRING) {
        bool is_nul;
        size_t bad = utf8_bad_offset(buf + pos, n, &is_nul);
        if (bad < n) {
          char path[SCAN_PATH_LEN];
          size_t at = 0;
          path[0] = '\0';
          path_text(&here, path, sizeof path, &at);
          if (is_nul) {
            return failf(err, err_len, "%s must not contain NUL bytes (one at offset %zu)", path,
                         bad);
          }
          return failf(err, err_len, "%s must be valid UTF-8 (bad byte 0x%02x at offset %zu)", path,
                       (unsigned)buf[pos + bad], bad);
        }
      } else if (f->descriptor != NULL &&
                 !scan_message(f->descriptor, buf + pos, n, &here, depth + 1, err, err_len)) {
        return false;
      }
    }
    pos += n;
  }
  return true;
malformed:
  return failf(err, err_len, "request is not a valid %s", d->name);
}

bool wk_validate_wire_strings(const ProtobufCMessageDescriptor *d, const uint8_t *buf, size_t len,
                              char *err, size_t err_len) {
  WK_ASSERT(d != NULL);
  if (len == 0) return true;
  WK_ASSERT(buf != NULL);
  return scan_message(d, buf, len, NULL, 0, err, err_len);
}

/* ---- whole requests ----------------------------------------------------------- */

const ProtobufCMessageDescriptor *wk_validate_descriptor(wk_rpc_method m) {
  switch (m) {
    case WK_RPC_REQUEST_TASK_SLOT: return &worker__v1__request_task_slot_request__descriptor;
    case WK_RPC_SUBMIT_TASK: return &worker__v1__submit_task_request__descriptor;
    case WK_RPC_GET_TASK_RESULT: return &worker__v1__get_task_result_request__descriptor;
    case WK_RPC_WATCH_TASKS: return &worker__v1__watch_tasks_request__descriptor;
    case WK_RPC_CANCEL_TASK: return &worker__v1__cancel_task_request__descriptor;
    case WK_RPC_HEALTH_CHECK:
    case WK_RPC_HEALTH_WATCH: return &grpc__health__v1__health_check_request__descriptor;
    case WK_RPC_LIST_TASKS: return &worker__v1__list_tasks_request__descriptor;
    case WK_RPC_GET_TASK_LOGS: return &worker__v1__get_task_logs_request__descriptor;
    case WK_RPC_DEPLOY_CODE: return &worker__v1__deploy_code_request__descriptor;
    case WK_RPC_SET_CURRENT_EPOCH: return &worker__v1__set_current_epoch_request__descriptor;
    case WK_RPC_METHOD_COUNT: break;
  }
  return NULL;
}

static bool validate_message(wk_rpc_method m, const ProtobufCMessage *msg,
                             const wk_validate_limits *lim, char *err, size_t err_len) {
  switch (m) {
    case WK_RPC_REQUEST_TASK_SLOT:
      return wk_validate_request_task_slot((const Worker__V1__RequestTaskSlotRequest *)msg, err,
                                           err_len);
    case WK_RPC_SUBMIT_TASK:
      return wk_validate_submit_task((const Worker__V1__SubmitTaskRequest *)msg, lim, err, err_len);
    case WK_RPC_GET_TASK_RESULT:
      return wk_validate_get_task_result((const Worker__V1__GetTaskResultRequest *)msg, err,
                                         err_len);
    case WK_RPC_WATCH_TASKS:
      return wk_validate_watch_tasks((const Worker__V1__WatchTasksRequest *)msg, lim, err, err_len);
    case WK_RPC_CANCEL_TASK:
      return wk_validate_cancel_task((const Worker__V1__CancelTaskRequest *)msg, err, err_len);
    case WK_RPC_HEALTH_CHECK:
    case WK_RPC_HEALTH_WATCH:
      return wk_validate_health((const Grpc__Health__V1__HealthCheckRequest *)msg, err, err_len);
    case WK_RPC_LIST_TASKS:
      return wk_validate_list_tasks((const Worker__V1__ListTasksRequest *)msg, err, err_len);
    case WK_RPC_GET_TASK_LOGS:
      return wk_validate_get_task_logs((const Worker__V1__GetTaskLogsRequest *)msg, err, err_len);
    case WK_RPC_DEPLOY_CODE:
      return wk_validate_deploy_code((const Worker__V1__DeployCodeRequest *)msg, err, err_len);
    case WK_RPC_SET_CURRENT_EPOCH:
      return wk_validate_set_current_epoch((const Worker__V1__SetCurrentEpochRequest *)msg, err,
                                           err_len);
    case WK_RPC_METHOD_COUNT: break;
  }
  return failf(err, err_len, "unknown method %d", (int)m);
}

ProtobufCMessage *wk_validate_decode(wk_rpc_method m, const uint8_t *buf, size_t len,
                                     const wk_validate_limits *lim, char *err, size_t err_len) {
  return wk_validate_decode_in(m, buf, len, lim, NULL, err, err_len);
}

static void *arena_alloc(void *arena, size_t n) { return wk_arena_alloc(arena, n); }

static void arena_free(void *arena, void *p) { /* freed with the arena */
  (void)arena;
  (void)p;
}

ProtobufCAllocator wk_validate_arena_allocator(wk_arena *arena) {
  return (ProtobufCAllocator){arena_alloc, arena_free, arena};
}

ProtobufCMessage *wk_validate_decode_in(wk_rpc_method m, const uint8_t *buf, size_t len,
                                        const wk_validate_limits *lim, ProtobufCAllocator *alloc,
                                        char *err, size_t err_len) {
  WK_ASSERT(lim != NULL);
  static const uint8_t empty[1] = {0};
  const ProtobufCMessageDescriptor *d = wk_validate_descriptor(m);
  if (d == NULL) {
    (void)failf(err, err_len, "unknown method %d", (int)m);
    return NULL;
  }
  if (buf == NULL) {
    if (len != 0) {
      (void)failf(err, err_len, "request is not a valid %s", d->name);
      return NULL;
    }
    buf = empty;
  }
  ProtobufCMessage *msg = protobuf_c_message_unpack(d, alloc, len, buf);
  if (msg == NULL) {
    (void)failf(err, err_len, "request is not a valid %s", d->name);
    return NULL;
  }
  if (!wk_validate_wire_strings(d, buf, len, err, err_len) ||
      !validate_message(m, msg, lim, err, err_len)) {
    protobuf_c_message_free_unpacked(msg, alloc);
    return NULL;
  }
  return msg;
}

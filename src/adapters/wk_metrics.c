/* wk_metrics.c: see wk_metrics.h. */
#define _GNU_SOURCE

#include "lib/wk_ct.h"
#include "lib/wk_err.h"
#include "adapters/wk_metrics.h"
#include "adapters/wk_netaddr.h"

#include <arpa/inet.h>
#include <math.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/types.h>

#include <microhttpd.h>

#include "lib/wk_dl.h"

/* libmicrohttpd is opened when a server starts (lib/wk_dl.h), not at start-up: a
 * worker without metrics_addr never maps it and GnuTLS under it. */
/* clang-format off */
#define MHD_FNS(X) \
  X(MHD_start_daemon) X(MHD_stop_daemon) X(MHD_get_daemon_info) \
  X(MHD_is_feature_supported) X(MHD_create_response_from_buffer) X(MHD_add_response_header) \
  X(MHD_queue_response) X(MHD_destroy_response) X(MHD_lookup_connection_value)
/* clang-format on */
static struct { MHD_FNS(WK_DL_FIELD) } mhd_fns;
static const char *const mhd_names[] = {MHD_FNS(WK_DL_NAME)};
static wk_dl_lib mhd_lib = WK_DL_LIB("libmicrohttpd.so.12", mhd_names, mhd_fns);
#define MHD_start_daemon (mhd_fns.MHD_start_daemon)
#define MHD_stop_daemon (mhd_fns.MHD_stop_daemon)
#define MHD_get_daemon_info (mhd_fns.MHD_get_daemon_info)
#define MHD_is_feature_supported (mhd_fns.MHD_is_feature_supported)
#define MHD_create_response_from_buffer (mhd_fns.MHD_create_response_from_buffer)
#define MHD_add_response_header (mhd_fns.MHD_add_response_header)
#define MHD_queue_response (mhd_fns.MHD_queue_response)
#define MHD_destroy_response (mhd_fns.MHD_destroy_response)
#define MHD_lookup_connection_value (mhd_fns.MHD_lookup_connection_value)

/* ---- series and metrics ------------------------------------------------------ */

typedef struct {
  char **values; /* n_labels strings (NULL when the metric has no labels) */
  uint64_t hash;
  double value;     /* counter, gauge */
  uint64_t *counts; /* histogram: per bucket, not cumulative; [n_bounds] is +Inf */
  double sum;
  uint64_t count;
} series;

struct wk_metric {
  wk_metric_kind kind;
  char *name;
  char *help;
  size_t n_labels;
  char **label_names;
  size_t n_bounds;
  double *bounds;
  pthread_mutex_t mu;
  size_t max_series;
  series *series; /* [max_series], the first n_series used, in creation order */
  size_t n_series;
  size_t *slots;  /* open addressing: index + 1 into series, 0 = empty */
  size_t n_slots; /* power of two, >= 2 * max_series */
  uint64_t dropped;
  wk_metric *next;
};

struct wk_metrics {
  pthread_mutex_t mu;
  size_t max_series;
  wk_metric *head;
  wk_metric *tail;
};

static const double default_bounds[] = {1,   2.5, 5,    10,   25,   50,   100,
                                        250, 500, 1000, 2500, 5000, 10000};

static char *dup_str(const char *s) {
  size_t n = strlen(s) + 1;
  char *d = malloc(n);
  if (d) memcpy(d, s, n);
  return d;
}

static bool valid_metric_name(const char *s) {
  if (!s || !*s) return false;
  for (size_t i = 0; s[i]; i++) {
    char c = s[i];
    bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':';
    bool digit = c >= '0' && c <= '9';
    if (!alpha && !(digit && i > 0)) return false;
  }
  return true;
}

static bool valid_label_name(const char *s) {
  if (!s || !*s || (s[0] == '_' && s[1] == '_')) return false;
  for (size_t i = 0; s[i]; i++) {
    char c = s[i];
    bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
    bool digit = c >= '0' && c <= '9';
    if (!alpha && !(digit && i > 0)) return false;
  }
  return true;
}

static void free_series(wk_metric *m, series *s) {
  if (s->values) {
    for (size_t i = 0; i < m->n_labels; i++) free(s->values[i]);
    free(s->values);
  }
  free(s->counts);
}

static void free_metric(wk_metric *m) {
  if (!m) return;
  for (size_t i = 0; i < m->n_series; i++) free_series(m, &m->series[i]);
  free(m->series);
  free(m->slots);
  if (m->label_names) {
    for (size_t i = 0; i < m->n_labels; i++) free(m->label_names[i]);
    free(m->label_names);
  }
  free(m->bounds);
  free(m->name);
  free(m->help);
  pthread_mutex_destroy(&m->mu);
  free(m);
}

wk_metrics *wk_metrics_new(size_t max_series_per_metric) {
  wk_metrics *reg = calloc(1, sizeof *reg);
  if (!reg) return NULL;
  if (pthread_mutex_init(&reg->mu, NULL) != 0) {
    free(reg);
    return NULL;
  }
  reg->max_series = max_series_per_metric ? max_series_per_metric : WK_METRICS_DEFAULT_MAX_SERIES;
  return reg;
}

void wk_metrics_free(wk_metrics *reg) {
  if (!reg) return;
  wk_metric *m = reg->head;
  while (m) {
    wk_metric *next = m->next;
    free_metric(m);
    m = next;
  }
  pthread_mutex_destroy(&reg->mu);
  free(reg);
}

static uint64_t hash_values(size_t n, const char *const *values) {
  uint64_t h = 1469598103934665603ULL; /* FNV-1a */
  for (size_t i = 0; i < n; i++) {
    const char *v = values[i] ? values[i] : "";
    for (const unsigned char *p = (const unsigned char *)v; *p; p++) {
      h ^= *p;
      h *= 1099511628211ULL;
    }
    h ^= 0xffu; /* separator: ("a","b") differs from ("ab","") */
    h *= 1099511628211ULL;
  }
  return h;
}

/* Creates the series of a metric without labels, or the first for a new metric. */
static series *new_series(wk_metric *m, const char *const *values, uint64_t h) {
  series *s = &m->series[m->n_series];
  memset(s, 0, sizeof *s);
  s->hash = h;
  if (m->n_labels > 0) {
    s->values = calloc(m->n_labels, sizeof *s->values);
    if (!s->values) return NULL;
    for (size_t i = 0; i < m->n_labels; i++) {
      s->values[i] = dup_str(values[i] ? values[i] : "");
      if (!s->values[i]) {
        free_series(m, s);
        return NULL;
      }
    }
  }
  if (m->kind == WK_METRIC_HISTOGRAM) {
    s->counts = calloc(m->n_bounds + 1, sizeof *s->counts);
    if (!s->counts) {
      free_series(m, s);
      return NULL;
    }
  }
  m->n_series++;
  return s;
}

/* The series for these label values, created if needed; NULL (with m->dropped counted
 * when the bound is the reason) when it cannot be. Called with m->mu held. */
static series *find_series(wk_metric *m, const char *const *values) {
  if (m->n_labels == 0) return &m->series[0];
  if (!values) return NULL;
  uint64_t h = hash_values(m->n_labels, values);
  size_t mask = m->n_slots - 1;
  size_t i = (size_t)h & mask;
  for (;; i = (i + 1) & mask) {
    size_t slot = m->slots[i];
    if (slot == 0) break;
    series *s = &m->series[slot - 1];
    if (s->hash != h) continue;
    bool same = true;
    for (size_t k = 0; k < m->n_labels && same; k++)
      same = strcmp(s->values[k], values[k] ? values[k] : "") == 0;
    if (same) return s;
  }
  if (m->n_series >= m->max_series) {
    m->dropped++;
    return NULL;
  }
  series *s = new_series(m, values, h);
  if (s) m->slots[i] = m->n_series; /* index + 1 */
  return s;
}

static bool same_shape(const wk_metric *m, wk_metric_kind kind, size_t n_labels,
                       const char *const *label_names) {
  if (m->kind != kind || m->n_labels != n_labels) return false;
  for (size_t i = 0; i < n_labels; i++)
    if (strcmp(m->label_names[i], label_names[i]) != 0) return false;
  return true;
}

static wk_metric *register_metric(wk_metrics *reg, wk_metric_kind kind, const char *name,
                                  const char *help, size_t n_labels, const char *const *label_names,
                                  size_t n_bounds, const double *bounds) {
  if (!reg || !valid_metric_name(name) || n_labels > WK_METRICS_MAX_LABELS) return NULL;
  if (n_labels > 0 && !label_names) return NULL;
  for (size_t i = 0; i < n_labels; i++) {
    if (!valid_label_name(label_names[i])) return NULL;
    if (kind == WK_METRIC_HISTOGRAM && strcmp(label_names[i], "le") == 0) return NULL;
    for (size_t j = 0; j < i; j++)
      if (strcmp(label_names[i], label_names[j]) == 0) return NULL;
  }
  if (kind == WK_METRIC_HISTOGRAM) {
    if (n_bounds == 0) {
      if (bounds) return NULL;
      bounds = default_bounds;
      n_bounds = sizeof default_bounds / sizeof default_bounds[0];
    }
    if (!bounds || n_bounds > WK_METRICS_MAX_BUCKETS) return NULL;
    for (size_t i = 0; i < n_bounds; i++) {
      if (!isfinite(bounds[i])) return NULL;
      if (i > 0 && !(bounds[i] > bounds[i - 1])) return NULL;
    }
  }

  pthread_mutex_lock(&reg->mu);
  for (wk_metric *m = reg->head; m; m = m->next) {
    if (strcmp(m->name, name) == 0) {
      wk_metric *found = same_shape(m, kind, n_labels, label_names) ? m : NULL;
      pthread_mutex_unlock(&reg->mu);
      return found;
    }
  }

  wk_metric *m = calloc(1, sizeof *m);
  if (!m) goto fail_unlocked;
  if (pthread_mutex_init(&m->mu, NULL) != 0) {
    free(m);
    m = NULL;
    goto fail_unlocked;
  }
  m->kind = kind;
  m->n_labels = n_labels;
  m->name = dup_str(name);
  m->help = dup_str(help ? help : "");
  if (!m->name || !m->help) goto fail;
  if (n_labels > 0) {
    m->label_names = calloc(n_labels, sizeof *m->label_names);
    if (!m->label_names) goto fail;
    for (size_t i = 0; i < n_labels; i++)
      if (!(m->label_names[i] = dup_str(label_names[i]))) goto fail;
  }
  if (kind == WK_METRIC_HISTOGRAM) {
    m->bounds = malloc(n_bounds * sizeof *m->bounds);
    if (!m->bounds) goto fail;
    memcpy(m->bounds, bounds, n_bounds * sizeof *m->bounds);
    m->n_bounds = n_bounds;
  }
  m->max_series = n_labels > 0 ? reg->max_series : 1;
  m->series = calloc(m->max_series, sizeof *m->series);
  if (!m->series) goto fail;
  if (n_labels > 0) {
    m->n_slots = 4;
    while (m->n_slots < 2 * m->max_series) m->n_slots *= 2;
    m->slots = calloc(m->n_slots, sizeof *m->slots);
    if (!m->slots) goto fail;
  } else if (!new_series(m, NULL, 0)) {
    goto fail;
  }
  if (reg->tail) reg->tail->next = m;
  else reg->head = m;
  reg->tail = m;
  pthread_mutex_unlock(&reg->mu);
  return m;

fail:
  free_metric(m);
fail_unlocked:
  pthread_mutex_unlock(&reg->mu);
  return NULL;
}

wk_metric *wk_metrics_counter(wk_metrics *reg, const char *name, const char *help, size_t n_labels,
                              const char *const *label_names) {
  return register_metric(reg, WK_METRIC_COUNTER, name, help, n_labels, label_names, 0, NULL);
}

wk_metric *wk_metrics_gauge(wk_metrics *reg, const char *name, const char *help, size_t n_labels,
                            const char *const *label_names) {
  return register_metric(reg, WK_METRIC_GAUGE, name, help, n_labels, label_names, 0, NULL);
}

wk_metric *wk_metrics_histogram(wk_metrics *reg, const char *name, const char *help,
                                size_t n_labels, const char *const *label_names, size_t n_buckets,
                                const double *bounds_ms) {
  return register_metric(reg, WK_METRIC_HISTOGRAM, name, help, n_labels, label_names, n_buckets,
                         bounds_ms);
}

/* ---- updates ----------------------------------------------------------------- */

int wk_metric_add(wk_metric *m, const char *const *label_values, double v) {
  if (!m || m->kind == WK_METRIC_HISTOGRAM || isnan(v)) return -1;
  if (m->kind == WK_METRIC_COUNTER && v < 0) return -1;
  pthread_mutex_lock(&m->mu);
  series *s = find_series(m, label_values);
  if (s) s->value += v;
  pthread_mutex_unlock(&m->mu);
  return s ? 0 : -1;
}

int wk_metric_inc(wk_metric *m, const char *const *label_values) {
  return wk_metric_add(m, label_values, 1.0);
}

int wk_metric_set(wk_metric *m, const char *const *label_values, double v) {
  if (!m || m->kind != WK_METRIC_GAUGE) return -1;
  pthread_mutex_lock(&m->mu);
  series *s = find_series(m, label_values);
  if (s) s->value = v;
  pthread_mutex_unlock(&m->mu);
  return s ? 0 : -1;
}

int wk_metric_observe(wk_metric *m, const char *const *label_values, double ms) {
  if (!m || m->kind != WK_METRIC_HISTOGRAM || isnan(ms)) return -1;
  size_t b = 0;
  while (b < m->n_bounds && !(ms <= m->bounds[b])) b++;
  pthread_mutex_lock(&m->mu);
  series *s = find_series(m, label_values);
  if (s) {
    s->counts[b]++;
    s->count++;
    s->sum += ms;
  }
  pthread_mutex_unlock(&m->mu);
  return s ? 0 : -1;
}

wk_metric_kind wk_metric_type(const wk_metric *m) { return m->kind; }

uint64_t wk_metric_dropped(wk_metric *m) {
  if (!m) return 0;
  pthread_mutex_lock(&m->mu);
  uint64_t d = m->dropped;
  pthread_mutex_unlock(&m->mu);
  return d;
}

size_t wk_metric_series(wk_metric *m) {
  if (!m) return 0;
  pthread_mutex_lock(&m->mu);
  size_t n = m->n_series;
  pthread_mutex_unlock(&m->mu);
  return n;
}

/* ---- exposition -------------------------------------------------------------- */

typedef struct {
  char *p;
  size_t len, cap;
  bool oom;
} buf;

static void buf_put(buf *b, const char *s, size_t n) {
  if (b->oom) return;
  if (b->len + n + 1 > b->cap) {
    size_t cap = b->cap ? b->cap : 4096;
    while (b->len + n + 1 > cap) cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) {
      b->oom = true;
      return;
    }
    b->p = p;
    b->cap = cap;
  }
  memcpy(b->p + b->len, s, n);
  b->len += n;
  b->p[b->len] = '\0';
}

static void buf_str(buf *b, const char *s) { buf_put(b, s, strlen(s)); }

static void buf_escaped(buf *b, const char *s, bool quote) {
  const char *run = s;
  for (; *s; s++) {
    const char *rep = NULL;
    if (*s == '\\') rep = "\\\\";
    else if (*s == '\n') rep = "\\n";
    else if (quote && *s == '"') rep = "\\\"";
    if (rep) {
      buf_put(b, run, (size_t)(s - run));
      buf_str(b, rep);
      run = s + 1;
    }
  }
  buf_put(b, run, (size_t)(s - run));
}

/* Shortest of %.15g .. %.17g that reads back exactly. */
static void fmt_double(char out[32], double v) {
  if (isnan(v)) {
    strcpy(out, "NaN");
    return;
  }
  if (isinf(v)) {
    strcpy(out, v > 0 ? "+Inf" : "-Inf");
    return;
  }
  for (int prec = 15; prec <= 17; prec++) {
    snprintf(out, 32, "%.*g", prec, v);
    if (strtod(out, NULL) == v) return;
  }
}

static void buf_double(buf *b, double v) {
  char tmp[32];
  fmt_double(tmp, v);
  buf_str(b, tmp);
}

static void buf_u64(buf *b, uint64_t v) {
  char tmp[32];
  snprintf(tmp, sizeof tmp, "%llu", (unsigned long long)v);
  buf_str(b, tmp);
}

/* {a="x",b="y"[,le="bound"]} or nothing. */
static void buf_labels(buf *b, const wk_metric *m, const series *s, const char *le) {
  if (m->n_labels == 0 && !le) return;
  buf_str(b, "{");
  for (size_t i = 0; i < m->n_labels; i++) {
    if (i > 0) buf_str(b, ",");
    buf_str(b, m->label_names[i]);
    buf_str(b, "=\"");
    buf_escaped(b, s->values[i], true);
    buf_str(b, "\"");
  }
  if (le) {
    if (m->n_labels > 0) buf_str(b, ",");
    buf_str(b, "le=\"");
    buf_str(b, le);
    buf_str(b, "\"");
  }
  buf_str(b, "}");
}

static void render_metric(buf *b, wk_metric *m) {
  static const char *const type_names[] = {"counter", "gauge", "histogram"};
  buf_str(b, "# HELP ");
  buf_str(b, m->name);
  buf_str(b, " ");
  buf_escaped(b, m->help, false);
  buf_str(b, "\n# TYPE ");
  buf_str(b, m->name);
  buf_str(b, " ");
  buf_str(b, type_names[m->kind]);
  buf_str(b, "\n");
  pthread_mutex_lock(&m->mu);
  for (size_t i = 0; i < m->n_series; i++) {
    const series *s = &m->series[i];
    if (m->kind != WK_METRIC_HISTOGRAM) {
      buf_str(b, m->name);
      buf_labels(b, m, s, NULL);
      buf_str(b, " ");
      buf_double(b, s->value);
      buf_str(b, "\n");
      continue;
    }
    uint64_t cumulative = 0;
    for (size_t k = 0; k <= m->n_bounds; k++) {
      char le[32];
      if (k < m->n_bounds) fmt_double(le, m->bounds[k]);
      else strcpy(le, "+Inf");
      cumulative += s->counts[k];
      buf_str(b, m->name);
      buf_str(b, "_bucket");
      buf_labels(b, m, s, le);
      buf_str(b, " ");
      buf_u64(b, cumulative);
      buf_str(b, "\n");
    }
    buf_str(b, m->name);
    buf_str(b, "_sum");
    buf_labels(b, m, s, NULL);
    buf_str(b, " ");
    buf_double(b, s->sum);
    buf_str(b, "\n");
    buf_str(b, m->name);
    buf_str(b, "_count");
    buf_labels(b, m, s, NULL);
    buf_str(b, " ");
    buf_u64(b, s->count);
    buf_str(b, "\n");
  }
  pthread_mutex_unlock(&m->mu);
}

char *wk_metrics_render(wk_metrics *reg, size_t *len) {
  buf b = {0};
  buf_put(&b, "", 0); /* an empty registry still yields "" */
  pthread_mutex_lock(&reg->mu);
  bool any_dropped = false;
  for (wk_metric *m = reg->head; m; m = m->next) {
    render_metric(&b, m);
    if (wk_metric_dropped(m) > 0) any_dropped = true;
  }
  if (any_dropped) {
    buf_str(&b,
            "# HELP wk_metrics_series_dropped_total Updates dropped because the metric "
            "reached its bound on label-value sets.\n"
            "# TYPE wk_metrics_series_dropped_total counter\n");
    for (wk_metric *m = reg->head; m; m = m->next) {
      uint64_t d = wk_metric_dropped(m);
      if (d == 0) continue;
      buf_str(&b, "wk_metrics_series_dropped_total{metric=\"");
      buf_str(&b, m->name);
      buf_str(&b, "\"} ");
      buf_u64(&b, d);
      buf_str(&b, "\n");
    }
  }
  pthread_mutex_unlock(&reg->mu);
  if (b.oom) {
    free(b.p);
    return NULL;
  }
  if (len) *len = b.len;
  return b.p;
}

/* ---- HTTP server ------------------------------------------------------------- */

#define SESSION_COOKIE "wk_session"
#define SESSION_BYTES 32u
#define LOGIN_BODY_MAX 4096u /* a POST /login body at most */

struct wk_metrics_server {
  struct MHD_Daemon *daemon;
  wk_metrics *reg;
  bool status_on; /* the status routes */
  wk_metrics_status status;
  char *token; /* NULL = none */
  size_t token_len;
  char session[2 * SESSION_BYTES + 1]; /* hex: the session cookie's value */
  bool tls;
  char *tls_cert, *tls_key;
};

/* A request's state between MHD's calls: the body of a POST /login. */
typedef struct request {
  char body[LOGIN_BODY_MAX + 1];
  size_t len;
  bool too_big;
} request;

static char body_not_found[] = "not found\n";
static char body_not_allowed[] = "method not allowed\n";
static char body_oom[] = "out of memory\n";
static char body_no_status[] = "{\"error\":\"the status is not available yet\"}\n";
static char body_unauthorized[] =
    "{\"error\":\"unauthorized: send Authorization: Bearer TOKEN, or log in at /login\"}\n";

/* Nothing from another origin, no framing, no referrer: the page is self-contained. */
static const char k_csp[] =
    "default-src 'none'; script-src 'unsafe-inline'; "
    "style-src 'unsafe-inline'; img-src data:; connect-src 'self'; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

static const char k_login_head[] =
    "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">"
    "<meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">"
    "<link rel=\"icon\" href=\"data:,\"><title>Worker status: log in</title><style>"
    "body{font:15px system-ui,sans-serif;background:#0f172a;color:#e2e8f0;display:flex;"
    "justify-content:center;padding-top:12vh}form{background:#1e293b;padding:24px 28px;"
    "border-radius:8px;min-width:320px}input{width:100%;box-sizing:border-box;padding:8px;"
    "margin:10px 0;background:#0f172a;color:#e2e8f0;border:1px solid #475569;border-radius:4px}"
    "button{padding:8px 16px;background:#2563eb;color:#fff;border:0;border-radius:4px}"
    ".err{color:#f87171}</style></head><body><form method=\"post\" action=\"/login\">"
    "<h2>Worker status</h2><label for=\"token\">Auth token (the worker's auth_token)</label>"
    "<input id=\"token\" name=\"token\" type=\"password\" autocomplete=\"current-password\" "
    "autofocus>";
static const char k_login_wrong[] = "<p class=\"err\" id=\"login-error\">Wrong token.</p>";
static const char k_login_tail[] = "<button type=\"submit\">Log in</button></form></body></html>";

static void add_common_headers(struct MHD_Response *r, const char *type) {
  MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
  MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
  MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
  MHD_add_response_header(r, "Referrer-Policy", "no-referrer");
}

static enum MHD_Result reply_static(struct MHD_Connection *conn, unsigned int status, char *body,
                                    const char *allow) {
  struct MHD_Response *r =
      MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_PERSISTENT);
  if (!r) return MHD_NO;
  MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/plain; charset=utf-8");
  if (allow) MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, allow);
  enum MHD_Result ret = MHD_queue_response(conn, status, r);
  MHD_destroy_response(r);
  return ret;
}

/* A response with `len` bytes of `body` (copied), the common headers, and optionally
 * a Location and a Set-Cookie. */
static enum MHD_Result reply(struct MHD_Connection *conn, unsigned int status, const char *type,
                             const char *body, size_t len, const char *location,
                             const char *cookie) {
  char *copy = malloc(len ? len : 1);
  if (!copy) return MHD_NO;
  memcpy(copy, body, len);
  struct MHD_Response *r = MHD_create_response_from_buffer(len, copy, MHD_RESPMEM_MUST_FREE);
  if (!r) {
    free(copy);
    return MHD_NO;
  }
  add_common_headers(r, type);
  if (strncmp(type, "text/html", 9) == 0) {
    MHD_add_response_header(r, "Content-Security-Policy", k_csp);
    MHD_add_response_header(r, "X-Frame-Options", "DENY");
  }
  if (location) MHD_add_response_header(r, MHD_HTTP_HEADER_LOCATION, location);
  if (cookie) MHD_add_response_header(r, MHD_HTTP_HEADER_SET_COOKIE, cookie);
  if (status == MHD_HTTP_UNAUTHORIZED && strncmp(type, "application/json", 16) == 0)
    MHD_add_response_header(r, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer realm=\"worker\"");
  enum MHD_Result ret = MHD_queue_response(conn, status, r);
  MHD_destroy_response(r);
  return ret;
}

static enum MHD_Result reply_login(struct MHD_Connection *conn, unsigned int status, bool wrong) {
  char page[sizeof k_login_head + sizeof k_login_wrong + sizeof k_login_tail];
  snprintf(page, sizeof page, "%s%s%s", k_login_head, wrong ? k_login_wrong : "", k_login_tail);
  return reply(conn, status, "text/html; charset=utf-8", page, strlen(page), NULL, NULL);
}

static bool token_ok(const wk_metrics_server *srv, const char *got) {
  return got && wk_ct_equal(srv->token, srv->token_len, (const uint8_t *)got, strlen(got));
}

/* With a token: a Bearer header with it, or the session cookie. */
static bool authorized(const wk_metrics_server *srv, struct MHD_Connection *conn) {
  if (!srv->token) return true;
  const char *auth = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Authorization");
  if (auth && strncasecmp(auth, "Bearer ", 7) == 0 && token_ok(srv, auth + 7)) return true;
  const char *cookie = MHD_lookup_connection_value(conn, MHD_COOKIE_KIND, SESSION_COOKIE);
  return cookie &&
         wk_ct_equal(srv->session, strlen(srv->session), (const uint8_t *)cookie, strlen(cookie));
}

/* Logged in: the session cookie, then on to the page (the token leaves the address bar). */
static enum MHD_Result reply_logged_in(const wk_metrics_server *srv, struct MHD_Connection *conn) {
  char cookie[200];
  snprintf(cookie, sizeof cookie, SESSION_COOKIE "=%s; Path=/; HttpOnly; SameSite=Strict%s",
           srv->session, srv->tls ? "; Secure" : "");
  return reply(conn, MHD_HTTP_SEE_OTHER, "text/plain; charset=utf-8", "", 0, "/", cookie);
}

static int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

/* The value of `name` in an application/x-www-form-urlencoded body, decoded in place
 * into out (at most out_len - 1 bytes); false when absent or too long. */
static bool form_value(const char *body, const char *name, char *out, size_t out_len) {
  size_t name_len = strlen(name);
  for (const char *p = body; p && *p; p = strchr(p, '&') ? strchr(p, '&') + 1 : NULL) {
    if (strncmp(p, name, name_len) != 0 || p[name_len] != '=') continue;
    size_t n = 0;
    for (const char *q = p + name_len + 1; *q && *q != '&'; q++) {
      char c = *q;
      if (c == '+') c = ' ';
      else if (c == '%' && hex_value(q[1]) >= 0 && hex_value(q[2]) >= 0) {
        c = (char)(hex_value(q[1]) * 16 + hex_value(q[2]));
        q += 2;
      }
      if (n + 1 >= out_len) return false;
      out[n++] = c;
    }
    out[n] = '\0';
    return true;
  }
  return false;
}

static enum MHD_Result serve_metrics(wk_metrics_server *srv, struct MHD_Connection *conn) {
  size_t len = 0;
  char *text = wk_metrics_render(srv->reg, &len);
  if (!text) return reply_static(conn, MHD_HTTP_INTERNAL_SERVER_ERROR, body_oom, NULL);
  struct MHD_Response *r = MHD_create_response_from_buffer(len, text, MHD_RESPMEM_MUST_FREE);
  if (!r) {
    free(text);
    return MHD_NO;
  }
  MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE,
                          "text/plain; version=0.0.4; charset=utf-8");
  enum MHD_Result ret = MHD_queue_response(conn, MHD_HTTP_OK, r);
  MHD_destroy_response(r);
  return ret;
}

static enum MHD_Result serve_status_json(wk_metrics_server *srv, struct MHD_Connection *conn) {
  if (!authorized(srv, conn))
    return reply(conn, MHD_HTTP_UNAUTHORIZED, "application/json", body_unauthorized,
                 strlen(body_unauthorized), NULL, NULL);
  size_t len = 0;
  char *json = srv->status.json(srv->status.ud, &len);
  if (!json)
    return reply(conn, MHD_HTTP_SERVICE_UNAVAILABLE, "application/json", body_no_status,
                 strlen(body_no_status), NULL, NULL);
  struct MHD_Response *r = MHD_create_response_from_buffer(len, json, MHD_RESPMEM_MUST_FREE);
  if (!r) {
    free(json);
    return MHD_NO;
  }
  add_common_headers(r, "application/json");
  enum MHD_Result ret = MHD_queue_response(conn, MHD_HTTP_OK, r);
  MHD_destroy_response(r);
  return ret;
}

static enum MHD_Result serve_page(wk_metrics_server *srv, struct MHD_Connection *conn) {
  const char *given = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "token");
  if (srv->token && given) {
    /* ?token= once: a cookie, and the token gone from the address bar */
    if (token_ok(srv, given)) return reply_logged_in(srv, conn);
    return reply_login(conn, MHD_HTTP_UNAUTHORIZED, true);
  }
  if (!authorized(srv, conn))
    return reply(conn, MHD_HTTP_SEE_OTHER, "text/plain; charset=utf-8", "", 0, "/login", NULL);
  return reply(conn, MHD_HTTP_OK, "text/html; charset=utf-8", srv->status.page_html,
               strlen(srv->status.page_html), NULL, NULL);
}

static enum MHD_Result serve_login_post(wk_metrics_server *srv, struct MHD_Connection *conn,
                                        request *rq) {
  if (!srv->token) return reply_logged_in(srv, conn); /* nothing to check */
  char got[1024];
  if (rq && !rq->too_big && form_value(rq->body, "token", got, sizeof got) && token_ok(srv, got)) {
    memset(got, 0, sizeof got);
    return reply_logged_in(srv, conn);
  }
  memset(got, 0, sizeof got);
  return reply_login(conn, MHD_HTTP_UNAUTHORIZED, true);
}

/* The status routes; NULL path match → 404. */
static enum MHD_Result serve_status_routes(wk_metrics_server *srv, struct MHD_Connection *conn,
                                           const char *url, const char *method, request *rq) {
  bool get = strcmp(method, MHD_HTTP_METHOD_GET) == 0 || strcmp(method, MHD_HTTP_METHOD_HEAD) == 0;
  bool post = strcmp(method, MHD_HTTP_METHOD_POST) == 0;
  if (strcmp(url, "/status") == 0) {
    if (!get) return reply_static(conn, MHD_HTTP_METHOD_NOT_ALLOWED, body_not_allowed, "GET, HEAD");
    return serve_status_json(srv, conn);
  }
  if (strcmp(url, "/") == 0 || strcmp(url, "/index.html") == 0) {
    if (!get) return reply_static(conn, MHD_HTTP_METHOD_NOT_ALLOWED, body_not_allowed, "GET, HEAD");
    return serve_page(srv, conn);
  }
  if (strcmp(url, "/login") == 0) {
    if (post) return serve_login_post(srv, conn, rq);
    if (!get)
      return reply_static(conn, MHD_HTTP_METHOD_NOT_ALLOWED, body_not_allowed, "GET, HEAD, POST");
    if (authorized(srv, conn))
      return reply(conn, MHD_HTTP_SEE_OTHER, "text/plain; charset=utf-8", "", 0, "/", NULL);
    return reply_login(conn, MHD_HTTP_OK, false);
  }
  if (strcmp(url, "/logout") == 0) {
    if (!get) return reply_static(conn, MHD_HTTP_METHOD_NOT_ALLOWED, body_not_allowed, "GET, HEAD");
    return reply(conn, MHD_HTTP_SEE_OTHER, "text/plain; charset=utf-8", "", 0, "/login",
                 SESSION_COOKIE "=; Path=/; Max-Age=0; HttpOnly; SameSite=Strict");
  }
  return reply_static(conn, MHD_HTTP_NOT_FOUND, body_not_found, NULL);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_data_size, void **con_cls) {
  (void)version;
  wk_metrics_server *srv = cls;
  /* First call for a request: headers only. Answer on the second call so that any
   * request body has been read first (kept for POST /login, else discarded). */
  if (*con_cls == NULL) {
    bool login =
        srv->status_on && strcmp(method, MHD_HTTP_METHOD_POST) == 0 && strcmp(url, "/login") == 0;
    *con_cls = login ? (void *)calloc(1, sizeof(request)) : (void *)srv;
    return *con_cls ? MHD_YES : MHD_NO;
  }
  request *rq = *con_cls != srv ? *con_cls : NULL;
  if (*upload_data_size != 0) {
    if (rq) {
      if (rq->len + *upload_data_size > LOGIN_BODY_MAX) rq->too_big = true;
      else {
        memcpy(rq->body + rq->len, upload_data, *upload_data_size);
        rq->len += *upload_data_size;
        rq->body[rq->len] = '\0';
      }
    }
    *upload_data_size = 0;
    return MHD_YES;
  }
  if (strcmp(url, "/metrics") == 0) {
    if (strcmp(method, MHD_HTTP_METHOD_GET) != 0 && strcmp(method, MHD_HTTP_METHOD_HEAD) != 0)
      return reply_static(conn, MHD_HTTP_METHOD_NOT_ALLOWED, body_not_allowed, "GET, HEAD");
    return serve_metrics(srv, conn);
  }
  if (!srv->status_on) return reply_static(conn, MHD_HTTP_NOT_FOUND, body_not_found, NULL);
  return serve_status_routes(srv, conn, url, method, rq);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe) {
  (void)conn;
  (void)toe;
  if (*con_cls && *con_cls != cls) {
    request *rq = *con_cls;
    memset(rq, 0, sizeof *rq); /* it held a token */
    free(rq);
  }
  *con_cls = NULL;
}

static char *dup_or_null(const char *s) { return s && *s ? dup_str(s) : NULL; }

static void free_secret(char *s) {
  if (!s) return;
  memset(s, 0, strlen(s));
  free(s);
}

static void server_free(wk_metrics_server *srv) {
  free_secret(srv->token);
  free_secret(srv->tls_key);
  free(srv->tls_cert);
  memset(srv->session, 0, sizeof srv->session);
  free(srv);
}

/* The status routes' settings into srv (copies); -1 when out of memory or no
 * randomness for the session. */
static int setup_status(wk_metrics_server *srv, const wk_metrics_status *st, char *err,
                        size_t err_len) {
  srv->status_on = st->json && st->page_html;
  srv->status = *st;
  srv->status.auth_token = srv->status.tls_cert_pem = srv->status.tls_key_pem = NULL;
  if (st->auth_token && *st->auth_token) {
    if (!(srv->token = dup_str(st->auth_token))) goto oom;
    srv->token_len = strlen(srv->token);
  }
  if (st->tls_cert_pem && *st->tls_cert_pem && st->tls_key_pem && *st->tls_key_pem) {
    if (!(srv->tls_cert = dup_or_null(st->tls_cert_pem)) ||
        !(srv->tls_key = dup_or_null(st->tls_key_pem)))
      goto oom;
    srv->tls = true;
  }
  uint8_t raw[SESSION_BYTES];
  if (getrandom(raw, sizeof raw, 0) != (ssize_t)sizeof raw) {
    wk_errf(err, err_len, "metrics server: no randomness for the session cookie");
    return -1;
  }
  for (size_t i = 0; i < sizeof raw; i++)
    snprintf(srv->session + 2 * i, 3, "%02x", (unsigned)raw[i]);
  memset(raw, 0, sizeof raw);
  return 0;
oom:
  wk_errf(err, err_len, "metrics server: out of memory");
  return -1;
}

wk_metrics_server *wk_metrics_server_start(wk_metrics *reg, const char *host_port,
                                           uint16_t *bound_port, char *err, size_t err_len) {
  return wk_metrics_server_start_with(reg, host_port, NULL, bound_port, err, err_len);
}

wk_metrics_server *wk_metrics_server_start_with(wk_metrics *reg, const char *host_port,
                                                const wk_metrics_status *status,
                                                uint16_t *bound_port, char *err, size_t err_len) {
  if (!reg || !host_port) {
    wk_errf(err, err_len, "metrics server: no registry or address");
    return NULL;
  }
  char why[256];
  if (!wk_dl_load(&mhd_lib, why, sizeof why)) {
    wk_errf(err, err_len, "metrics server: %s", why);
    return NULL;
  }
  char host[256], port[8];
  if (!wk_netaddr_split(host_port, host, sizeof host, port, sizeof port)) {
    wk_errf(err, err_len, "metrics server: bad address \"%s\" (want host:port)", host_port);
    return NULL;
  }
  struct addrinfo hints = {0};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  struct addrinfo *ai = NULL;
  int gai = getaddrinfo(host[0] ? host : NULL, port, &hints, &ai);
  if (gai != 0 || !ai) {
    wk_errf(err, err_len, "metrics server: cannot resolve \"%s\": %s", host_port,
            gai_strerror(gai));
    return NULL;
  }
  struct sockaddr_storage addr;
  memset(&addr, 0, sizeof addr);
  memcpy(&addr, ai->ai_addr, ai->ai_addrlen);
  int family = ai->ai_family;
  freeaddrinfo(ai);

  wk_metrics_server *srv = calloc(1, sizeof *srv);
  if (!srv) {
    wk_errf(err, err_len, "metrics server: out of memory");
    return NULL;
  }
  srv->reg = reg;
  if (status && setup_status(srv, status, err, err_len) != 0) {
    server_free(srv);
    return NULL;
  }
  unsigned int flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_AUTO;
  if (family == AF_INET6) flags |= MHD_USE_IPv6;
  if (srv->tls) {
    if (MHD_is_feature_supported(MHD_FEATURE_TLS) != MHD_YES) {
      wk_errf(err, err_len, "metrics server: this libmicrohttpd has no TLS");
      server_free(srv);
      return NULL;
    }
    flags |= MHD_USE_TLS;
  }
  /* the TLS options are ignored without MHD_USE_TLS: NULL PEMs end the list early */
  srv->daemon = MHD_start_daemon(
      flags, 0, NULL, NULL, on_request, srv, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr,
      MHD_OPTION_CONNECTION_TIMEOUT, (unsigned int)10, MHD_OPTION_CONNECTION_LIMIT,
      (unsigned int)64, MHD_OPTION_NOTIFY_COMPLETED, on_completed, srv,
      /* a /status waiting for a busy loop does not hold up a /metrics scrape */
      MHD_OPTION_THREAD_POOL_SIZE, (unsigned int)(srv->status_on ? 2 : 1),
      srv->tls ? MHD_OPTION_HTTPS_MEM_CERT : MHD_OPTION_END, srv->tls_cert,
      MHD_OPTION_HTTPS_MEM_KEY, srv->tls_key, MHD_OPTION_END);
  if (!srv->daemon) {
    wk_errf(err, err_len, "metrics server: cannot listen on %s%s", host_port,
            srv->tls ? " (or the TLS certificate and key were refused)" : "");
    server_free(srv);
    return NULL;
  }
  if (bound_port) {
    *bound_port = 0;
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(srv->daemon, MHD_DAEMON_INFO_LISTEN_FD);
    struct sockaddr_storage got;
    socklen_t got_len = sizeof got;
    if (info && getsockname(info->listen_fd, (struct sockaddr *)&got, &got_len) == 0) {
      if (got.ss_family == AF_INET) *bound_port = ntohs(((struct sockaddr_in *)&got)->sin_port);
      else if (got.ss_family == AF_INET6)
        *bound_port = ntohs(((struct sockaddr_in6 *)&got)->sin6_port);
    }
    if (*bound_port == 0) {
      wk_errf(err, err_len, "metrics server: cannot read the bound port");
      wk_metrics_server_stop(srv);
      return NULL;
    }
  }
  return srv;
}

void wk_metrics_server_stop(wk_metrics_server *srv) {
  if (!srv) return;
  MHD_stop_daemon(srv->daemon);
  server_free(srv);
}

/* wk_metrics.h: Prometheus metrics (counters, gauges, histograms) and their HTTP
 * endpoint (text exposition format 0.0.4, served by libmicrohttpd).
 *
 *   wk_metrics *reg = wk_metrics_new(0);                 // 0: 1024 series per metric
 *   const char *const lbl[] = {"method", "code"};
 *   wk_metric *calls = wk_metrics_counter(reg, "wk_calls_total", "Calls served.", 2, lbl);
 *   wk_metric *queued = wk_metrics_gauge(reg, "wk_queue_depth", "Queued tasks.", 0, NULL);
 *   wk_metric *dur = wk_metrics_histogram(reg, "wk_call_duration_ms", "Call duration.",
 *                                         0, NULL, 0, NULL);  // default buckets (ms)
 *   ...from any thread:
 *   wk_metric_inc(calls, (const char *const[]){"SubmitTask", "OK"});
 *   wk_metric_set(queued, NULL, 17);
 *   wk_metric_observe(dur, NULL, 12.5);
 *   ...
 *   uint16_t port;
 *   char err[256];
 *   wk_metrics_server *srv = wk_metrics_server_start(reg, "127.0.0.1:9100", &port,
 *                                                    err, sizeof err);
 *   ...
 *   wk_metrics_server_stop(srv);    // before wk_metrics_free(reg)
 *   wk_metrics_free(reg);
 *
 * Rules:
 *  - Metric names match [a-zA-Z_:][a-zA-Z0-9_:]*, label names [a-zA-Z_][a-zA-Z0-9_]*
 *    (not starting with "__", unique within the metric, "le" not allowed on a
 *    histogram); at most WK_METRICS_MAX_LABELS labels. A histogram named N exposes
 *    N_bucket{le=...}, N_sum and N_count.
 *  - Registering a name again with the same type and label names returns the metric
 *    already registered (histograms: the buckets of the first registration); any other
 *    clash, or an invalid name, returns NULL.
 *  - Label values are given at update time, in the order of the label names (pass NULL
 *    for a metric without labels; a NULL value counts as ""). Each metric keeps at most
 *    max_series distinct label-value sets; an update that would create one more is
 *    dropped (returns -1) and counted: wk_metric_dropped(), and in the exposition as
 *    wk_metrics_series_dropped_total{metric="NAME"} for each metric that dropped some.
 *  - A metric without labels exposes its single series from the start (value 0); a
 *    labelled one exposes a series from its first update.
 *  - Thread safety: every function may be called from any thread. Each metric has its
 *    own mutex (held for a hash lookup and an addition, never across I/O); the registry
 *    mutex guards the list of metrics. Metric pointers stay valid until
 *    wk_metrics_free().
 *  - Exposition order: metrics in registration order, series in creation order.
 *    Numbers are printed in the shortest form that reads back exactly ("+Inf", "-Inf",
 *    "NaN" for the special values). Label values escape \ " and newline; HELP escapes
 *    \ and newline. */
#ifndef WK_METRICS_H
#define WK_METRICS_H

#include <stddef.h>
#include <stdint.h>

#define WK_METRICS_MAX_LABELS 8
#define WK_METRICS_DEFAULT_MAX_SERIES 1024
#define WK_METRICS_MAX_BUCKETS 64

typedef struct wk_metrics wk_metrics;
typedef struct wk_metric wk_metric;
typedef struct wk_metrics_server wk_metrics_server;

typedef enum { WK_METRIC_COUNTER, WK_METRIC_GAUGE, WK_METRIC_HISTOGRAM } wk_metric_kind;

/* A registry. max_series_per_metric 0 means WK_METRICS_DEFAULT_MAX_SERIES.
 * NULL when out of memory. */
wk_metrics *wk_metrics_new(size_t max_series_per_metric);
/* Frees the registry and all its metrics. Stop any server serving it first. */
void wk_metrics_free(wk_metrics *reg);

/* Registration (see the rules above). label_names may be NULL when n_labels is 0. */
wk_metric *wk_metrics_counter(wk_metrics *reg, const char *name, const char *help, size_t n_labels,
                              const char *const *label_names);
wk_metric *wk_metrics_gauge(wk_metrics *reg, const char *name, const char *help, size_t n_labels,
                            const char *const *label_names);
/* bounds_ms: n_buckets finite upper bounds, strictly increasing (the +Inf bucket is
 * implicit). n_buckets 0 (bounds_ms NULL) uses the default buckets:
 * 1 2.5 5 10 25 50 100 250 500 1000 2500 5000 10000 ms. */
wk_metric *wk_metrics_histogram(wk_metrics *reg, const char *name, const char *help,
                                size_t n_labels, const char *const *label_names, size_t n_buckets,
                                const double *bounds_ms);

/* Updates: 0 when applied, -1 when refused (wrong metric type, a negative or NaN
 * counter increment, a NULL metric, or the series bound reached: see the rules). */
int wk_metric_add(wk_metric *m, const char *const *label_values, double v); /* counter, gauge */
int wk_metric_inc(wk_metric *m, const char *const *label_values);           /* add 1 */
int wk_metric_set(wk_metric *m, const char *const *label_values, double v); /* gauge */
int wk_metric_observe(wk_metric *m, const char *const *label_values, double ms); /* histogram */

wk_metric_kind wk_metric_type(const wk_metric *m);
/* Updates refused because the series bound was reached. */
uint64_t wk_metric_dropped(wk_metric *m);
/* Series currently held. */
size_t wk_metric_series(wk_metric *m);

/* The whole registry in text exposition format 0.0.4: a malloc'd NUL-terminated
 * string (free() it) of *len bytes, or NULL when out of memory. */
char *wk_metrics_render(wk_metrics *reg, size_t *len);

/* Serves GET (and HEAD) /metrics on host:port ("127.0.0.1:9100", "0.0.0.0:0",
 * "[::1]:9100", "localhost:9100"; port 0 picks a free port) from a libmicrohttpd
 * thread: 200 with Content-Type "text/plain; version=0.0.4; charset=utf-8"; 405 for
 * other methods on /metrics; 404 for any other path. *bound_port (if not NULL)
 * receives the port actually bound. NULL on failure, with a message in err. */
wk_metrics_server *wk_metrics_server_start(wk_metrics *reg, const char *host_port,
                                           uint16_t *bound_port, char *err, size_t err_len);
/* The status page and its JSON, served beside /metrics by wk_metrics_server_start_with:
 *   GET /        the page (page_html), which reads GET /status every second;
 *   GET /status  the JSON document json() returns (503 when it returns NULL);
 *   GET /login   a form asking for the token; POST /login (token=...) checks it;
 *   GET /logout  forgets the browser's session cookie.
 * With an auth token, / and /status need either "Authorization: Bearer TOKEN" (tools)
 * or the session cookie (browsers) that POST /login or one GET /?token=TOKEN sets
 * (HttpOnly, SameSite=Strict, Secure under TLS; its value is random per server start,
 * never the token). Tokens and cookies are compared in constant time. /metrics stays
 * open, as before. Pages carry a Content-Security-Policy that allows nothing from
 * another origin. */
typedef struct wk_metrics_status {
  /* The body of GET /status: a malloc'd JSON text of *len bytes (free()d by the
   * server), or NULL when there is none yet. Called on the server's thread. */
  char *(*json)(void *ud, size_t *len);
  void *ud;
  const char *page_html;  /* static, NUL-terminated: the page of GET / */
  const char *auth_token; /* NULL or "" = no token required; copied */
  /* PEM text of a certificate chain and its key: both set = HTTPS on the whole
   * listener (/metrics included); copied. */
  const char *tls_cert_pem, *tls_key_pem;
} wk_metrics_status;

/* As wk_metrics_server_start, with the status page and its routes when `status` is not
 * NULL (NULL: /metrics only). */
wk_metrics_server *wk_metrics_server_start_with(wk_metrics *reg, const char *host_port,
                                                const wk_metrics_status *status,
                                                uint16_t *bound_port, char *err, size_t err_len);

/* Stops listening, waits for the serving thread and frees the server. NULL is a no-op. */
void wk_metrics_server_stop(wk_metrics_server *srv);

#endif /* WK_METRICS_H */

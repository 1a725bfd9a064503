/* Integration: the Prometheus metrics registry (src/adapters/wk_metrics.h) served by
 * wk_metrics_server_start on 127.0.0.1:0 and scraped over real HTTP with libcurl. The
 * scraped text is parsed (names, labels with their escapes undone, values) and
 * checked exactly: counters incremented from 4 threads, gauges, label escaping, HELP
 * escaping, histogram buckets (cumulative, le inclusive) with _sum and _count, the
 * series bound and its dropped counter, 404 and 405 answers. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <curl/curl.h>
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "adapters/wk_metrics.h"

/* ---- HTTP client --------------------------------------------------------------- */

typedef struct {
  char *body;
  size_t len;
  long status;
  char content_type[128];
} http_reply;

static size_t on_body(char *data, size_t size, size_t n, void *userdata) {
  http_reply *r = userdata;
  size_t add = size * n;
  char *p = realloc(r->body, r->len + add + 1);
  if (!p) return 0;
  memcpy(p + r->len, data, add);
  r->body = p;
  r->len += add;
  r->body[r->len] = '\0';
  return add;
}

static void http(const char *method, uint16_t port, const char *path, http_reply *r) {
  memset(r, 0, sizeof *r);
  char url[256];
  snprintf(url, sizeof url, "http://127.0.0.1:%u%s", (unsigned)port, path);
  CURL *c = curl_easy_init();
  assert_non_null(c);
  curl_easy_setopt(c, CURLOPT_URL, url);
  curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, r);
  curl_easy_setopt(c, CURLOPT_TIMEOUT, 10L);
  CURLcode rc = curl_easy_perform(c);
  if (rc != CURLE_OK) fail_msg("curl %s %s: %s", method, url, curl_easy_strerror(rc));
  curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r->status);
  char *ct = NULL;
  curl_easy_getinfo(c, CURLINFO_CONTENT_TYPE, &ct);
  if (ct) snprintf(r->content_type, sizeof r->content_type, "%s", ct);
  curl_easy_cleanup(c);
  if (!r->body) r->body = calloc(1, 1);
}

/* ---- exposition parser ---------------------------------------------------------- */

#define MAX_SAMPLES 4096
#define MAX_LABELS 9

typedef struct {
  char name[128];
  size_t n_labels;
  char label_names[MAX_LABELS][64];
  char label_values[MAX_LABELS][256]; /* escapes undone */
  char value[64];
} sample;

typedef struct {
  sample *samples;
  size_t n;
  char **comments; /* "# HELP ..." / "# TYPE ..." lines as sent */
  size_t n_comments;
} scrape;

static bool name_char(char c, bool first, bool colon) {
  bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (colon && c == ':');
  return alpha || (!first && c >= '0' && c <= '9');
}

/* Parses one sample line strictly; fails the test on any deviation. */
static void parse_sample(const char *line, sample *s) {
  memset(s, 0, sizeof *s);
  const char *p = line;
  size_t n = 0;
  while (name_char(*p, n == 0, true)) {
    assert_true(n + 1 < sizeof s->name);
    s->name[n++] = *p++;
  }
  if (n == 0) fail_msg("bad metric name in line: %s", line);
  if (*p == '{') {
    p++;
    while (*p != '}') {
      assert_true(s->n_labels < MAX_LABELS);
      char *ln = s->label_names[s->n_labels];
      char *lv = s->label_values[s->n_labels];
      size_t k = 0;
      while (name_char(*p, k == 0, false)) ln[k++] = *p++;
      if (k == 0 || p[0] != '=' || p[1] != '"') fail_msg("bad label in line: %s", line);
      p += 2;
      k = 0;
      while (*p != '"') {
        if (*p == '\0' || *p == '\n') fail_msg("unterminated label value: %s", line);
        char c = *p++;
        if (c == '\\') {
          char e = *p++;
          if (e == 'n') c = '\n';
          else if (e == '\\' || e == '"') c = e;
          else fail_msg("bad escape \\%c in line: %s", e, line);
        }
        assert_true(k + 1 < sizeof s->label_values[0]);
        lv[k++] = c;
      }
      p++;
      s->n_labels++;
      if (*p == ',') p++;
      else if (*p != '}') fail_msg("expected , or } in line: %s", line);
    }
    p++;
  }
  if (*p != ' ') fail_msg("expected a space before the value: %s", line);
  p++;
  snprintf(s->value, sizeof s->value, "%s", p);
  if (strcmp(p, "+Inf") != 0 && strcmp(p, "-Inf") != 0 && strcmp(p, "NaN") != 0) {
    char *end = NULL;
    (void)strtod(p, &end);
    if (end == p || *end != '\0') fail_msg("bad value in line: %s", line);
  }
}

static void parse_scrape(const char *body, scrape *out) {
  memset(out, 0, sizeof *out);
  out->samples = calloc(MAX_SAMPLES, sizeof *out->samples);
  out->comments = calloc(MAX_SAMPLES, sizeof *out->comments);
  assert_non_null(out->samples);
  assert_non_null(out->comments);
  size_t body_len = strlen(body);
  assert_true(body_len == 0 || body[body_len - 1] == '\n');
  const char *p = body;
  while (*p) {
    const char *nl = strchr(p, '\n');
    assert_non_null(nl);
    size_t len = (size_t)(nl - p);
    char *line = malloc(len + 1);
    assert_non_null(line);
    memcpy(line, p, len);
    line[len] = '\0';
    if (line[0] == '#') {
      if (strncmp(line, "# HELP ", 7) != 0 && strncmp(line, "# TYPE ", 7) != 0)
        fail_msg("unexpected comment: %s", line);
      assert_true(out->n_comments < MAX_SAMPLES);
      out->comments[out->n_comments++] = line;
    } else {
      assert_true(out->n < MAX_SAMPLES);
      parse_sample(line, &out->samples[out->n++]);
      free(line);
    }
    p = nl + 1;
  }
}

static void free_scrape(scrape *s) {
  for (size_t i = 0; i < s->n_comments; i++) free(s->comments[i]);
  free(s->comments);
  free(s->samples);
}

/* The value of the sample `name` whose labels are exactly the NULL-terminated
 * name, value, name, value... list (in order); NULL when absent. */
static const char *find(const scrape *s, const char *name, ...) {
  const char *want[2 * MAX_LABELS];
  size_t n_want = 0;
  va_list ap;
  va_start(ap, name);
  for (const char *a; (a = va_arg(ap, const char *)) != NULL;) want[n_want++] = a;
  va_end(ap);
  const char *found = NULL;
  for (size_t i = 0; i < s->n; i++) {
    const sample *x = &s->samples[i];
    if (strcmp(x->name, name) != 0 || 2 * x->n_labels != n_want) continue;
    bool same = true;
    for (size_t k = 0; k < x->n_labels && same; k++)
      same = strcmp(x->label_names[k], want[2 * k]) == 0 &&
             strcmp(x->label_values[k], want[2 * k + 1]) == 0;
    if (!same) continue;
    if (found) fail_msg("duplicate series for %s", name);
    found = x->value;
  }
  return found;
}

static void expect(const scrape *s, const char *value, const char *name, ...) {
  const char *want[2 * MAX_LABELS + 1];
  size_t n = 0;
  va_list ap;
  va_start(ap, name);
  for (const char *a; (a = va_arg(ap, const char *)) != NULL;) want[n++] = a;
  va_end(ap);
  for (size_t i = n; i < 2 * MAX_LABELS + 1; i++) want[i] = NULL;
  const char *got = find(s, name, want[0], want[1], want[2], want[3], want[4], want[5], want[6],
                         want[7], (const char *)NULL);
  if (!got)
    fail_msg("missing sample %s (%s=%s ...)", name, want[0] ? want[0] : "", want[1] ? want[1] : "");
  if (strcmp(got, value) != 0) fail_msg("%s: got %s, want %s", name, got, value);
}

static bool has_comment(const scrape *s, const char *line) {
  for (size_t i = 0; i < s->n_comments; i++)
    if (strcmp(s->comments[i], line) == 0) return true;
  return false;
}

static size_t count_samples(const scrape *s, const char *name) {
  size_t n = 0;
  for (size_t i = 0; i < s->n; i++)
    if (strcmp(s->samples[i].name, name) == 0) n++;
  return n;
}

/* ---- the tests ----------------------------------------------------------------- */

#define THREADS 4
#define ROUNDS 5000

typedef struct {
  wk_metric *calls;
  wk_metric *duration;
  wk_metric *inflight;
  int id;
} worker_args;

static void *worker(void *arg) {
  worker_args *a = arg;
  static const double obs[] = {0.5, 1.0, 3.0, 7.0, 100.0};
  char id[8];
  snprintf(id, sizeof id, "t%d", a->id);
  for (int i = 0; i < ROUNDS; i++) {
    if (wk_metric_inc(a->calls, (const char *const[]){"SubmitTask", "OK"}) != 0) abort();
    if (wk_metric_add(a->calls, (const char *const[]){"GetTask", id}, 2.0) != 0) abort();
    if (wk_metric_add(a->inflight, NULL, 1.0) != 0) abort();
    if (wk_metric_add(a->inflight, NULL, -1.0) != 0) abort();
    if (wk_metric_observe(a->duration, (const char *const[]){"python"}, obs[i % 5]) != 0) abort();
  }
  return NULL;
}

static void test_scrape_exact(void **state) {
  (void)state;
  wk_metrics *reg = wk_metrics_new(0);
  assert_non_null(reg);
  const char *const call_labels[] = {"method", "code"};
  wk_metric *calls =
      wk_metrics_counter(reg, "wk_test_calls_total", "Calls served.", 2, call_labels);
  wk_metric *inflight = wk_metrics_gauge(reg, "wk_test_inflight", "In flight.", 0, NULL);
  wk_metric *temp = wk_metrics_gauge(reg, "wk_test_temp", "Back\\slash and\nnewline.", 0, NULL);
  wk_metric *esc =
      wk_metrics_counter(reg, "wk_test_escaped_total", "Escapes.", 1, (const char *const[]){"v"});
  const char *const kind_label[] = {"kind"};
  const double bounds[] = {1, 5, 10};
  wk_metric *duration =
      wk_metrics_histogram(reg, "wk_test_duration_ms", "Durations.", 1, kind_label, 3, bounds);
  wk_metric *unused = wk_metrics_counter(reg, "wk_test_unused_total", "Never touched.", 0, NULL);
  wk_metric *plain_hist =
      wk_metrics_histogram(reg, "wk_test_plain_ms", "Default buckets.", 0, NULL, 0, NULL);
  assert_non_null(calls);
  assert_non_null(inflight);
  assert_non_null(temp);
  assert_non_null(esc);
  assert_non_null(duration);
  assert_non_null(unused);
  assert_non_null(plain_hist);

  char err[256] = "";
  uint16_t port = 0;
  wk_metrics_server *srv = wk_metrics_server_start(reg, "127.0.0.1:0", &port, err, sizeof err);
  if (!srv) fail_msg("server: %s", err);
  assert_true(port > 0);

  pthread_t th[THREADS];
  worker_args args[THREADS];
  for (int i = 0; i < THREADS; i++) {
    args[i] = (worker_args){calls, duration, inflight, i};
    assert_int_equal(pthread_create(&th[i], NULL, worker, &args[i]), 0);
  }
  /* Scrape while the threads run: must always parse. */
  http_reply mid;
  http("GET", port, "/metrics", &mid);
  assert_int_equal(mid.status, 200);
  scrape ms;
  parse_scrape(mid.body, &ms);
  free_scrape(&ms);
  free(mid.body);
  for (int i = 0; i < THREADS; i++) assert_int_equal(pthread_join(th[i], NULL), 0);

  assert_int_equal(wk_metric_set(temp, NULL, -2.5), 0);
  assert_int_equal(wk_metric_inc(esc, (const char *const[]){"a\"b\\c\nd"}), 0);
  assert_int_equal(wk_metric_add(esc, (const char *const[]){""}, 0.1), 0);
  assert_int_equal(wk_metric_observe(plain_hist, NULL, 2.5), 0);
  assert_int_equal(wk_metric_observe(plain_hist, NULL, 20000), 0);

  http_reply r;
  http("GET", port, "/metrics", &r);
  assert_int_equal(r.status, 200);
  assert_string_equal(r.content_type, "text/plain; version=0.0.4; charset=utf-8");
  scrape s;
  parse_scrape(r.body, &s);

  /* HELP and TYPE, HELP escaped. */
  assert_true(has_comment(&s, "# HELP wk_test_calls_total Calls served."));
  assert_true(has_comment(&s, "# TYPE wk_test_calls_total counter"));
  assert_true(has_comment(&s, "# TYPE wk_test_inflight gauge"));
  assert_true(has_comment(&s, "# HELP wk_test_temp Back\\\\slash and\\nnewline."));
  assert_true(has_comment(&s, "# TYPE wk_test_duration_ms histogram"));
  /* HELP precedes TYPE precedes the samples. */
  const char *help = strstr(r.body, "# HELP wk_test_calls_total");
  const char *type = strstr(r.body, "# TYPE wk_test_calls_total");
  const char *first = strstr(r.body, "\nwk_test_calls_total{");
  assert_true(help && type && first && help < type && type < first);

  /* Counters from 4 threads, exact. */
  char want[32];
  snprintf(want, sizeof want, "%d", THREADS * ROUNDS);
  expect(&s, want, "wk_test_calls_total", "method", "SubmitTask", "code", "OK", NULL);
  snprintf(want, sizeof want, "%d", 2 * ROUNDS);
  for (int i = 0; i < THREADS; i++) {
    char id[8];
    snprintf(id, sizeof id, "t%d", i);
    expect(&s, want, "wk_test_calls_total", "method", "GetTask", "code", id, NULL);
  }
  assert_int_equal(count_samples(&s, "wk_test_calls_total"), 1 + THREADS);
  expect(&s, "0", "wk_test_inflight", NULL);
  expect(&s, "-2.5", "wk_test_temp", NULL);
  expect(&s, "0", "wk_test_unused_total", NULL);

  /* Escaping: the parser undid the escapes, and the raw text has them. */
  expect(&s, "1", "wk_test_escaped_total", "v", "a\"b\\c\nd", NULL);
  expect(&s, "0.1", "wk_test_escaped_total", "v", "", NULL);
  assert_non_null(strstr(r.body, "wk_test_escaped_total{v=\"a\\\"b\\\\c\\nd\"} 1\n"));

  /* Histogram: per thread per 5 rounds 0.5 1 3 7 100 -> le=1: 2, le=5: 3, le=10: 4. */
  int per = THREADS * ROUNDS / 5;
  snprintf(want, sizeof want, "%d", 2 * per);
  expect(&s, want, "wk_test_duration_ms_bucket", "kind", "python", "le", "1", NULL);
  snprintf(want, sizeof want, "%d", 3 * per);
  expect(&s, want, "wk_test_duration_ms_bucket", "kind", "python", "le", "5", NULL);
  snprintf(want, sizeof want, "%d", 4 * per);
  expect(&s, want, "wk_test_duration_ms_bucket", "kind", "python", "le", "10", NULL);
  snprintf(want, sizeof want, "%d", 5 * per);
  expect(&s, want, "wk_test_duration_ms_bucket", "kind", "python", "le", "+Inf", NULL);
  expect(&s, want, "wk_test_duration_ms_count", "kind", "python", NULL);
  char sum_want[32];
  snprintf(sum_want, sizeof sum_want, "%d", (int)(111.5 * per));
  expect(&s, sum_want, "wk_test_duration_ms_sum", "kind", "python", NULL);
  assert_int_equal(count_samples(&s, "wk_test_duration_ms_bucket"), 4);
  /* Buckets appear in increasing le order, cumulative. */
  const char *b1 = strstr(r.body, "wk_test_duration_ms_bucket{kind=\"python\",le=\"1\"}");
  const char *b5 = strstr(r.body, "wk_test_duration_ms_bucket{kind=\"python\",le=\"5\"}");
  const char *binf = strstr(r.body, "wk_test_duration_ms_bucket{kind=\"python\",le=\"+Inf\"}");
  assert_true(b1 && b5 && binf && b1 < b5 && b5 < binf);

  /* Default buckets, no labels: 14 buckets; 2.5 in le=2.5, 20000 only in +Inf. */
  assert_int_equal(count_samples(&s, "wk_test_plain_ms_bucket"), 14);
  expect(&s, "0", "wk_test_plain_ms_bucket", "le", "1", NULL);
  expect(&s, "1", "wk_test_plain_ms_bucket", "le", "2.5", NULL);
  expect(&s, "1", "wk_test_plain_ms_bucket", "le", "10000", NULL);
  expect(&s, "2", "wk_test_plain_ms_bucket", "le", "+Inf", NULL);
  expect(&s, "20002.5", "wk_test_plain_ms_sum", NULL);
  expect(&s, "2", "wk_test_plain_ms_count", NULL);

  /* Nothing dropped: no dropped-series family. */
  assert_int_equal(count_samples(&s, "wk_metrics_series_dropped_total"), 0);
  free_scrape(&s);
  free(r.body);

  /* Other paths and methods. */
  http("GET", port, "/", &r);
  assert_int_equal(r.status, 404);
  free(r.body);
  http("GET", port, "/metricsx", &r);
  assert_int_equal(r.status, 404);
  free(r.body);
  http("POST", port, "/metrics", &r);
  assert_int_equal(r.status, 405);
  free(r.body);
  http("GET", port, "/metrics?name=x", &r);
  assert_int_equal(r.status, 200);
  free(r.body);

  wk_metrics_server_stop(srv);
  wk_metrics_free(reg);
}

static void test_series_bound(void **state) {
  (void)state;
  wk_metrics *reg = wk_metrics_new(0); /* the default bound, 1024 */
  assert_non_null(reg);
  wk_metric *m = wk_metrics_counter(reg, "wk_test_bounded_total", "Bounded.", 1,
                                    (const char *const[]){"task"});
  assert_non_null(m);
  for (int i = 0; i < WK_METRICS_DEFAULT_MAX_SERIES + 6; i++) {
    char v[16];
    snprintf(v, sizeof v, "task-%d", i);
    int rc = wk_metric_inc(m, (const char *const[]){v});
    assert_int_equal(rc, i < WK_METRICS_DEFAULT_MAX_SERIES ? 0 : -1);
  }
  /* An existing series still takes updates at the bound. */
  assert_int_equal(wk_metric_add(m, (const char *const[]){"task-0"}, 4), 0);
  assert_int_equal(wk_metric_series(m), WK_METRICS_DEFAULT_MAX_SERIES);
  assert_int_equal(wk_metric_dropped(m), 6);

  char err[256] = "";
  uint16_t port = 0;
  wk_metrics_server *srv = wk_metrics_server_start(reg, "127.0.0.1:0", &port, err, sizeof err);
  if (!srv) fail_msg("server: %s", err);
  http_reply r;
  http("GET", port, "/metrics", &r);
  assert_int_equal(r.status, 200);
  scrape s;
  parse_scrape(r.body, &s);
  assert_int_equal(count_samples(&s, "wk_test_bounded_total"), WK_METRICS_DEFAULT_MAX_SERIES);
  expect(&s, "5", "wk_test_bounded_total", "task", "task-0", NULL);
  expect(&s, "1", "wk_test_bounded_total", "task", "task-1023", NULL);
  assert_null(find(&s, "wk_test_bounded_total", "task", "task-1024", NULL));
  expect(&s, "6", "wk_metrics_series_dropped_total", "metric", "wk_test_bounded_total", NULL);
  assert_true(has_comment(&s, "# TYPE wk_metrics_series_dropped_total counter"));
  free_scrape(&s);
  free(r.body);
  wk_metrics_server_stop(srv);

  /* A small explicit bound. */
  wk_metrics *small = wk_metrics_new(2);
  wk_metric *g = wk_metrics_gauge(small, "g", "", 1, (const char *const[]){"k"});
  assert_int_equal(wk_metric_set(g, (const char *const[]){"a"}, 1), 0);
  assert_int_equal(wk_metric_set(g, (const char *const[]){"b"}, 2), 0);
  assert_int_equal(wk_metric_set(g, (const char *const[]){"c"}, 3), -1);
  assert_int_equal(wk_metric_dropped(g), 1);
  wk_metrics_free(small);
  wk_metrics_free(reg);
}

static void test_registration_rules(void **state) {
  (void)state;
  wk_metrics *reg = wk_metrics_new(0);
  const char *const ab[] = {"a", "b"};
  const char *const ba[] = {"b", "a"};
  wk_metric *c = wk_metrics_counter(reg, "wk_c_total", "C.", 2, ab);
  assert_non_null(c);
  assert_ptr_equal(wk_metrics_counter(reg, "wk_c_total", "again", 2, ab), c);
  assert_null(wk_metrics_counter(reg, "wk_c_total", "C.", 2, ba));
  assert_null(wk_metrics_gauge(reg, "wk_c_total", "C.", 2, ab));
  assert_null(wk_metrics_counter(reg, "9bad", "", 0, NULL));
  assert_null(wk_metrics_counter(reg, "bad-name", "", 0, NULL));
  assert_null(wk_metrics_counter(reg, "", "", 0, NULL));
  assert_null(wk_metrics_counter(reg, "x", "", 1, (const char *const[]){"__reserved"}));
  assert_null(wk_metrics_counter(reg, "x", "", 1, (const char *const[]){"has:colon"}));
  assert_null(wk_metrics_counter(reg, "x", "", 2, (const char *const[]){"a", "a"}));
  assert_null(wk_metrics_counter(reg, "x", "", 1, NULL));
  assert_null(wk_metrics_histogram(reg, "h", "", 1, (const char *const[]){"le"}, 0, NULL));
  assert_null(wk_metrics_histogram(reg, "h", "", 0, NULL, 2, (const double[]){5, 5}));
  assert_null(
      wk_metrics_histogram(reg, "h", "", 0, NULL, 2, (const double[]){5, (double)INFINITY}));
  wk_metric *h = wk_metrics_histogram(reg, "h", "", 0, NULL, 1, (const double[]){5});
  assert_non_null(h);
  assert_int_equal(wk_metric_type(h), WK_METRIC_HISTOGRAM);

  /* Type rules for updates. */
  assert_int_equal(wk_metric_add(c, (const char *const[]){"x", "y"}, -1), -1);
  assert_int_equal(wk_metric_add(c, (const char *const[]){"x", "y"}, (double)NAN), -1);
  assert_int_equal(wk_metric_set(c, (const char *const[]){"x", "y"}, 1), -1);
  assert_int_equal(wk_metric_observe(c, (const char *const[]){"x", "y"}, 1), -1);
  assert_int_equal(wk_metric_add(c, NULL, 1), -1);
  assert_int_equal(wk_metric_add(h, NULL, 1), -1);
  assert_int_equal(wk_metric_inc(NULL, NULL), -1);
  /* A NULL label value is "". */
  assert_int_equal(wk_metric_add(c, (const char *const[]){NULL, "y"}, 1.5), 0);
  size_t len = 0;
  char *text = wk_metrics_render(reg, &len);
  assert_non_null(text);
  assert_int_equal(len, strlen(text));
  assert_non_null(strstr(text, "wk_c_total{a=\"\",b=\"y\"} 1.5\n"));
  assert_non_null(strstr(text, "# HELP h \n# TYPE h histogram\nh_bucket{le=\"5\"} 0\n"));
  free(text);

  /* Bad addresses. */
  char err[256] = "";
  assert_null(wk_metrics_server_start(reg, "127.0.0.1", NULL, err, sizeof err));
  assert_non_null(strstr(err, "bad address"));
  assert_null(wk_metrics_server_start(reg, "127.0.0.1:99999", NULL, err, sizeof err));
  /* The same port twice fails the second time. */
  uint16_t port = 0;
  wk_metrics_server *a = wk_metrics_server_start(reg, "127.0.0.1:0", &port, err, sizeof err);
  assert_non_null(a);
  char addr[32];
  snprintf(addr, sizeof addr, "127.0.0.1:%u", (unsigned)port);
  assert_null(wk_metrics_server_start(reg, addr, NULL, err, sizeof err));
  assert_non_null(strstr(err, "cannot listen"));
  wk_metrics_server_stop(a);
  wk_metrics_server_stop(NULL);
  wk_metrics_free(reg);
}

static int group_setup(void **state) {
  (void)state;
  return curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK ? 0 : -1;
}

static int group_teardown(void **state) {
  (void)state;
  curl_global_cleanup();
  return 0;
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_scrape_exact),
      cmocka_unit_test(test_series_bound),
      cmocka_unit_test(test_registration_rules),
  };
  return cmocka_run_group_tests(tests, group_setup, group_teardown);
}

/* workerctl_top.c: `workerctl top`, a live terminal view of one worker (--addr: its
 * status address, the metrics_addr listener) or of every worker registered in etcd
 * (each registration names its status_addr). It reads GET /status (the document of
 * src/app/wk_status.h) once a second.
 *
 * On a terminal: the screen is redrawn in place with ANSI escapes (alternate screen, no
 * curses), one line per worker and a detail pane for the selected one; j/k or the arrow
 * keys select, q quits. Otherwise: one plain line per worker per refresh (a log, or a
 * pipe into grep), until stdin says "q" or the process is stopped. */
#define _GNU_SOURCE

#include <curl/curl.h>
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "adapters/wk_etcd_registry.h"
#include "workerctl.h"

#define TOP_MAX_WORKERS 256
#define TOP_INTERVAL_MS 1000
#define TOP_BODY_MAX (8u << 20) /* a /status document at most */

typedef struct top_worker {
  char addr[256];  /* where its /status is read ("" = it has no status page) */
  char name[256];  /* its gRPC address (etcd) or the status address (--addr) */
  json_t *doc;     /* the last /status, NULL when none */
  char error[256]; /* why the last read failed ("" = it did not) */
  bool registry;   /* listed from etcd: the figures below are its registration's */
  uint32_t reg_slots, reg_free, reg_running;
  bool reg_draining, reg_ready;
} top_worker;

typedef struct top {
  ctl_args *a;
  CURL *curl;
  top_worker workers[TOP_MAX_WORKERS];
  size_t n;
  size_t selected;
  bool tty;
  int interval_ms;
  char note[256]; /* a line about the source (etcd errors) */
} top;

static volatile sig_atomic_t stop_signal, resized;
static struct termios saved_termios;
static bool termios_saved;

static void on_signal(int sig) {
  if (sig == SIGWINCH) resized = 1;
  else stop_signal = sig;
}

static int64_t mono_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- reading /status ---------------------------------------------------------------- */

typedef struct body {
  char *p;
  size_t len;
  bool too_big;
} body;

static size_t on_body(char *data, size_t size, size_t n, void *ud) {
  body *b = ud;
  size_t add = size * n;
  if (b->len + add > TOP_BODY_MAX) {
    b->too_big = true;
    return 0;
  }
  char *p = realloc(b->p, b->len + add + 1);
  if (!p) return 0;
  memcpy(p + b->len, data, add);
  b->p = p;
  b->len += add;
  b->p[b->len] = '\0';
  return add;
}

/* GET http(s)://addr/status into w->doc, or a reason into w->error. */
static void fetch(top *t, top_worker *w) {
  json_decref(w->doc);
  w->doc = NULL;
  w->error[0] = '\0';
  if (!w->addr[0]) {
    snprintf(w->error, sizeof w->error, "no status page (metrics_addr unset or status_page off)");
    return;
  }
  char url[300];
  snprintf(url, sizeof url, "%s://%s/status", t->a->tls_ca ? "https" : "http", w->addr);
  body b = {0};
  struct curl_slist *hdrs = NULL;
  char auth[1100];
  if (t->a->token) {
    snprintf(auth, sizeof auth, "Authorization: Bearer %s", t->a->token);
    hdrs = curl_slist_append(hdrs, auth);
  }
  CURL *c = t->curl;
  curl_easy_reset(c);
  curl_easy_setopt(c, CURLOPT_URL, url);
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &b);
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdrs);
  curl_easy_setopt(c, CURLOPT_TIMEOUT_MS,
                   (long)(t->a->deadline_ms < 5000 ? t->a->deadline_ms : 5000));
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
  if (t->a->tls_ca) curl_easy_setopt(c, CURLOPT_CAINFO, t->a->tls_ca);
  CURLcode rc = curl_easy_perform(c);
  long status = 0;
  curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
  curl_slist_free_all(hdrs);
  if (rc != CURLE_OK) {
    snprintf(w->error, sizeof w->error, "%s",
             b.too_big ? "answer too large" : curl_easy_strerror(rc));
  } else if (status == 401) {
    snprintf(w->error, sizeof w->error, "401: the worker wants its auth token (--token)");
  } else if (status != 200) {
    snprintf(w->error, sizeof w->error, "/status answered HTTP %ld", status);
  } else {
    json_error_t je;
    w->doc = json_loadb(b.p ? b.p : "", b.len, 0, &je);
    if (!w->doc || !json_is_object(w->doc)) {
      json_decref(w->doc);
      w->doc = NULL;
      snprintf(w->error, sizeof w->error, "/status is not a JSON object: %.150s", je.text);
    }
  }
  free(b.p);
}

/* The workers to show: --addr, or the registry's. */
static void list_workers(top *t) {
  if (t->a->set[F_ADDR]) {
    if (t->n == 0) {
      t->n = 1;
      snprintf(t->workers[0].addr, sizeof t->workers[0].addr, "%s", t->a->val[F_ADDR]);
      snprintf(t->workers[0].name, sizeof t->workers[0].name, "%s", t->a->val[F_ADDR]);
    }
    return;
  }
  const char *endpoints = ctl_etcd_endpoints(t->a);
  char err[256];
  wk_etcd *c = wk_etcd_new(endpoints, t->a->deadline_ms, err, sizeof err);
  if (!c) {
    snprintf(t->note, sizeof t->note, "etcd: %.240s", err);
    return;
  }
  wk_etcd_workers ws;
  int rc = wk_etcd_list_workers(c, ctl_etcd_prefix(t->a), &ws);
  if (rc != WK_ETCD_OK) {
    snprintf(t->note, sizeof t->note, "etcd %s: %.200s", endpoints, wk_etcd_errmsg(c));
    wk_etcd_free(c);
    return; /* keep the last list */
  }
  snprintf(t->note, sizeof t->note, "%zu worker%s registered under %s at %s", ws.n,
           ws.n == 1 ? "" : "s", ctl_etcd_prefix(t->a), wk_etcd_endpoint(c));
  for (size_t i = 0; i < t->n; i++) json_decref(t->workers[i].doc);
  t->n = 0;
  for (size_t i = 0; i < ws.n && t->n < TOP_MAX_WORKERS; i++) {
    const wk_etcd_worker *e = &ws.items[i];
    top_worker *w = &t->workers[t->n++];
    memset(w, 0, sizeof *w);
    snprintf(w->name, sizeof w->name, "%s", e->address);
    snprintf(w->addr, sizeof w->addr, "%s", e->status_addr ? e->status_addr : "");
    w->registry = true;
    w->reg_slots = e->task_slots;
    w->reg_free = e->free_slots;
    w->reg_running = e->running_tasks;
    w->reg_draining = e->draining;
    w->reg_ready = e->ready;
  }
  wk_etcd_workers_free(&ws);
  wk_etcd_free(c);
  if (t->selected >= t->n) t->selected = t->n ? t->n - 1 : 0;
}

static void refresh(top *t) {
  list_workers(t);
  for (size_t i = 0; i < t->n; i++) fetch(t, &t->workers[i]);
}

/* ---- reading the document ---------------------------------------------------------- */

static json_t *path(json_t *doc, const char *a, const char *b) {
  json_t *o = json_object_get(doc, a);
  return b ? json_object_get(o, b) : o;
}
static json_int_t num(json_t *doc, const char *a, const char *b) {
  return json_integer_value(path(doc, a, b));
}
static const char *str(json_t *doc, const char *a, const char *b) {
  const char *s = json_string_value(path(doc, a, b));
  return s ? s : "";
}
/* The newest figure of a history series (NaN when none was measured). */
static double last_figure(json_t *doc, const char *series) {
  json_t *arr = path(doc, "history", series);
  for (size_t i = json_array_size(arr); i > 0; i--) {
    json_t *v = json_array_get(arr, i - 1);
    if (json_is_number(v)) return json_number_value(v);
  }
  return -1;
}

/* "850ms", "12s", "4m05s", "2h10m". */
static void age(char *buf, size_t len, json_int_t ms) {
  if (ms < 1000) snprintf(buf, len, "%" PRId64 "ms", (int64_t)ms);
  else if (ms < 60000) snprintf(buf, len, "%" PRId64 "s", (int64_t)ms / 1000);
  else if (ms < 3600000)
    snprintf(buf, len, "%" PRId64 "m%02" PRId64 "s", (int64_t)ms / 60000,
             (int64_t)ms % 60000 / 1000);
  else
    snprintf(buf, len, "%" PRId64 "h%02" PRId64 "m", (int64_t)ms / 3600000,
             (int64_t)ms % 3600000 / 60000);
}

/* The worker's one line: address, state, slots, executors, rates, failures. */
static void summary(const top_worker *w, char *out, size_t len) {
  json_t *d = w->doc;
  if (!d) {
    if (w->registry)
      snprintf(out, len, "%-24s %-9s slots %u/%u free, %u running (registry)  %s", w->name,
               w->reg_draining ? "draining"
               : w->reg_ready  ? "ready"
                               : "not-ready",
               w->reg_free, w->reg_slots, w->reg_running, w->error);
    else snprintf(out, len, "%-24s %-9s %s", w->name, "?", w->error);
    return;
  }
  double tps = last_figure(d, "tasks_per_s"), cps = last_figure(d, "calls_per_s");
  snprintf(out, len,
           "%-24s %-9s slots run %3" PRId64 " alloc %3" PRId64 " free %3" PRId64 " of %-4" PRId64
           "  exec busy %2" PRId64 " of %-2" PRId64
           "  tasks/s %6.1f  calls/s %7.1f  failed %4" PRId64 "  live %3" PRId64 "%s",
           w->name, str(d, "worker", "state"), (int64_t)num(d, "slots", "running"),
           (int64_t)num(d, "slots", "allocated"), (int64_t)num(d, "slots", "free"),
           (int64_t)num(d, "slots", "total"), (int64_t)num(d, "executors", "busy"),
           (int64_t)num(d, "executors", "running"), tps < 0 ? 0 : tps, cps < 0 ? 0 : cps,
           (int64_t)num(d, "totals", "tasks_failed"), (int64_t)num(d, "tasks", "live"),
           json_is_true(path(d, "slots", "draining")) ? "  DRAINING" : "");
}

/* ---- the screen --------------------------------------------------------------------- */

typedef struct screen {
  char **lines;
  size_t n, cap;
} screen;

__attribute__((format(printf, 2, 3))) static void put(screen *s, const char *fmt, ...) {
  if (s->n == s->cap) {
    s->cap = s->cap ? 2 * s->cap : 64;
    s->lines = realloc(s->lines, s->cap * sizeof *s->lines);
    if (!s->lines) abort();
  }
  va_list ap;
  va_start(ap, fmt);
  if (vasprintf(&s->lines[s->n], fmt, ap) < 0) abort();
  va_end(ap);
  s->n++;
}

static void bar(char *out, size_t width, double done, double total) {
  size_t fill = total > 0 ? (size_t)((double)width * done / total + 0.5) : 0;
  if (fill > width) fill = width;
  for (size_t i = 0; i < width; i++) out[i] = i < fill ? '#' : '.';
  out[width] = '\0';
}

static void detail(screen *s, const top_worker *w) {
  json_t *d = w->doc;
  put(s, "%s", "");
  if (!d) {
    put(s, "%s: %s", w->name, w->error);
    return;
  }
  char up[32];
  age(up, sizeof up, num(d, "worker", "uptime_ms"));
  put(s, "%s %s  %s/%s  address %s  status %s  up %s  isolation %s", str(d, "worker", "service"),
      str(d, "worker", "version"), str(d, "worker", "deployment"), str(d, "worker", "state"),
      str(d, "worker", "advertise_addr"), w->addr, up, str(d, "worker", "executor_isolation"));
  put(s, "etcd: %s%s%s", str(d, "etcd", "state"),
      json_is_true(path(d, "etcd", "enabled")) ? "  lease " : "",
      json_is_true(path(d, "etcd", "enabled")) ? str(d, "etcd", "lease_id") : "");
  json_int_t total = num(d, "slots", "total");
  char b[41];
  bar(b, 40, (double)(num(d, "slots", "running") + num(d, "slots", "allocated")), (double)total);
  put(s, "slots [%s] %" PRId64 " running, %" PRId64 " allocated, %" PRId64 " free of %" PRId64, b,
      (int64_t)num(d, "slots", "running"), (int64_t)num(d, "slots", "allocated"),
      (int64_t)num(d, "slots", "free"), (int64_t)total);
  double p50 = last_figure(d, "p50_ms"), p99 = last_figure(d, "p99_ms"),
         util = last_figure(d, "utilisation");
  put(s, "latency p50 %s%.0f ms, p99 %.0f ms   executor utilisation %.0f%%", p50 < 0 ? "- " : "",
      p50 < 0 ? 0 : p50, p99 < 0 ? 0 : p99, util < 0 ? 0 : 100 * util);
  put(s, "%s", "");
  put(s, "EXECUTOR  PID      STATE     FUNCTION                  CALLS       RSS  AGE");
  json_t *execs = path(d, "executors", "list");
  for (size_t i = 0; i < json_array_size(execs); i++) {
    json_t *e = json_array_get(execs, i);
    char a[32];
    age(a, sizeof a, json_integer_value(json_object_get(e, "age_ms")));
    const char *fn = json_string_value(json_object_get(e, "function"));
    put(s, "%-8" PRId64 "  %-7" PRId64 "  %-8s  %-24s  %5" PRId64 "  %6.1fM  %s",
        (int64_t)json_integer_value(json_object_get(e, "id")),
        (int64_t)json_integer_value(json_object_get(e, "pid")),
        json_string_value(json_object_get(e, "state")), fn && *fn ? fn : "-",
        (int64_t)json_integer_value(json_object_get(e, "calls_done")),
        (double)json_integer_value(json_object_get(e, "rss_kb")) / 1024.0, a);
  }
  put(s, "%s", "");
  put(s,
      "TASK                      FUNCTION              EPOCH  PHASE      CALLS                    AGE");
  json_t *tasks = path(d, "tasks", "list");
  if (json_array_size(tasks) == 0) put(s, "(no task in flight)");
  for (size_t i = 0; i < json_array_size(tasks); i++) {
    json_t *k = json_array_get(tasks, i);
    json_int_t done = json_integer_value(json_object_get(k, "calls_done"));
    json_int_t all = json_integer_value(json_object_get(k, "calls_total"));
    char pb[13], a[32], calls[48];
    bar(pb, 12, (double)done, (double)all);
    snprintf(calls, sizeof calls, "[%s] %" PRId64 "/%" PRId64, pb, (int64_t)done, (int64_t)all);
    age(a, sizeof a, json_integer_value(json_object_get(k, "age_ms")));
    put(s, "%-24s  %-20s  %5" PRId64 "  %-9s  %-23s  %s",
        json_string_value(json_object_get(k, "id")),
        json_string_value(json_object_get(k, "function")),
        (int64_t)json_integer_value(json_object_get(k, "epoch")),
        json_string_value(json_object_get(k, "phase")), calls, a);
  }
  put(s, "%s", "");
  put(s, "RECENT (failures first)   FUNCTION              STATE      FAILURE");
  json_t *recent = json_object_get(d, "recent");
  for (size_t i = 0; i < json_array_size(recent) && i < 10; i++) {
    json_t *r = json_array_get(recent, i);
    const char *code = json_string_value(json_object_get(r, "failure_code"));
    put(s, "%-24s  %-20s  %-9s  %s", json_string_value(json_object_get(r, "id")),
        json_string_value(json_object_get(r, "function")),
        json_string_value(json_object_get(r, "state")),
        code && strcmp(code, "NONE") != 0 ? code : "");
  }
}

static void term_size(int *rows, int *cols) {
  struct winsize ws;
  if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_row > 0 && ws.ws_col > 0) {
    *rows = ws.ws_row;
    *cols = ws.ws_col;
  } else {
    *rows = 24;
    *cols = 80;
  }
}

/* Redraws the whole screen in place: each line cut to the width, cleared to its end. */
static void draw(top *t) {
  screen s = {0};
  time_t now = time(NULL);
  struct tm tm;
  localtime_r(&now, &tm);
  char clock[16];
  strftime(clock, sizeof clock, "%H:%M:%S", &tm);
  put(&s, "workerctl top  %s  %s  (j/k or arrows: select, q: quit)", clock,
      t->a->set[F_ADDR] ? t->a->val[F_ADDR] : t->note);
  put(&s, "%s", "");
  if (t->n == 0) put(&s, "(no worker)");
  for (size_t i = 0; i < t->n; i++) {
    char line[1024];
    summary(&t->workers[i], line, sizeof line);
    put(&s, "%s%s %s%s", i == t->selected ? "\x1b[7m" : "", i == t->selected ? ">" : " ", line,
        i == t->selected ? "\x1b[0m" : "");
  }
  if (t->n) detail(&s, &t->workers[t->selected]);
  int rows, cols;
  term_size(&rows, &cols);
  fputs("\x1b[H", stdout);
  for (size_t i = 0; i < s.n; i++) {
    if ((int)i < rows - 1 || (int)i == rows - 1) {
      /* cut to the width, escapes excluded: only the selected line has them */
      const char *l = s.lines[i];
      bool sel = strncmp(l, "\x1b[7m", 4) == 0;
      int visible = (int)strlen(l) - (sel ? 8 : 0);
      if (visible > cols) visible = cols;
      if (sel) fprintf(stdout, "\x1b[7m%.*s\x1b[0m", visible, l + 4);
      else fprintf(stdout, "%.*s", visible, l);
      fputs("\x1b[K", stdout);
      if ((int)i < rows - 1) fputs("\r\n", stdout);
    }
    free(s.lines[i]);
  }
  free(s.lines);
  fputs("\x1b[J", stdout);
  fflush(stdout);
}

/* Plain mode: one line per worker, prefixed with the UTC time. */
static void print_lines(top *t) {
  char ts[32];
  time_t now = time(NULL);
  struct tm tm;
  gmtime_r(&now, &tm);
  strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%SZ", &tm);
  if (t->n == 0) printf("%s (no worker) %s\n", ts, t->note);
  for (size_t i = 0; i < t->n; i++) {
    char line[1024];
    summary(&t->workers[i], line, sizeof line);
    printf("%s %s\n", ts, line);
  }
  fflush(stdout);
}

static void restore_terminal(void) {
  if (termios_saved) tcsetattr(STDIN_FILENO, TCSANOW, &saved_termios);
  termios_saved = false;
  fputs("\x1b[?25h\x1b[?1049l", stdout);
  fflush(stdout);
}

/* Reads what is waiting on stdin; returns false when the user asked to quit. */
static bool handle_input(top *t, bool *stdin_open) {
  char buf[64];
  ssize_t n = read(STDIN_FILENO, buf, sizeof buf);
  if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN)) {
    *stdin_open = false; /* EOF: keep refreshing until stopped */
    return true;
  }
  for (ssize_t i = 0; i < n; i++) {
    char c = buf[i];
    if (c == 'q' || c == 'Q' || c == 3 /* ^C in raw mode */) return false;
    bool down = c == 'j', up = c == 'k';
    if (c == '\x1b' && i + 2 < n && buf[i + 1] == '[') {
      down = buf[i + 2] == 'B';
      up = buf[i + 2] == 'A';
      i += 2;
    }
    if (down && t->selected + 1 < t->n) t->selected++;
    if (up && t->selected > 0) t->selected--;
  }
  return true;
}

int ctl_cmd_top(ctl_args *a) {
  if (!a->set[F_ADDR] && !*ctl_etcd_prefix(a))
    return ctl_usage_error(a, "--prefix is empty (it would list every etcd key)");
  top *t = calloc(1, sizeof *t);
  if (!t) return CTL_EXIT_TASK_FAILED;
  t->a = a;
  t->tty = isatty(STDOUT_FILENO);
  const char *iv = getenv("WORKERCTL_TOP_INTERVAL_MS");
  t->interval_ms = iv && atoi(iv) >= 100 ? atoi(iv) : TOP_INTERVAL_MS;
  curl_global_init(CURL_GLOBAL_DEFAULT);
  t->curl = curl_easy_init();
  struct sigaction sa = {0};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGWINCH, &sa, NULL);
  bool stdin_open = true;
  if (t->tty && isatty(STDIN_FILENO) && tcgetattr(STDIN_FILENO, &saved_termios) == 0) {
    struct termios raw = saved_termios;
    raw.c_lflag &= (tcflag_t) ~(ICANON | ECHO | ISIG);
    raw.c_cc[VMIN] = 1;
    raw.c_cc[VTIME] = 0;
    tcsetattr(STDIN_FILENO, TCSANOW, &raw);
    termios_saved = true;
  }
  if (t->tty) fputs("\x1b[?1049h\x1b[?25l\x1b[2J", stdout);
  bool quit = false;
  while (!quit && !stop_signal) {
    refresh(t);
    if (t->tty) draw(t);
    else print_lines(t);
    int64_t next = mono_ms() + t->interval_ms;
    while (!quit && !stop_signal) {
      int64_t left = next - mono_ms();
      if (left <= 0) break;
      struct pollfd p = {.fd = STDIN_FILENO, .events = POLLIN};
      int r = poll(&p, stdin_open ? 1 : 0, (int)left);
      if (r > 0 && (p.revents & (POLLIN | POLLHUP))) {
        quit = !handle_input(t, &stdin_open);
        if (!quit && t->tty) draw(t); /* a new selection shows at once */
      }
      if (resized && t->tty) {
        resized = 0;
        fputs("\x1b[2J", stdout);
        draw(t);
      }
    }
  }
  if (t->tty) restore_terminal();
  for (size_t i = 0; i < t->n; i++) json_decref(t->workers[i].doc);
  curl_easy_cleanup(t->curl);
  curl_global_cleanup();
  free(t);
  return CTL_EXIT_OK;
}

/* workerctl_progress.c: watching tasks (`watch`, `submit --watch`): the events, the
 * progress bar, and what Ctrl-C means for a task this watch owns.
 *
 * PROGRESS events come at most ~10 a second per task (the worker's
 * progress_events_per_s). On a terminal (stderr) they redraw one line in place:
 * done/total, percent, rate and ETA. Otherwise `watch` prints a plain PROGRESS line
 * at most every PLAIN_EVERY_MS per task, and `submit --watch` one on stderr only once
 * the task has run PLAIN_FIRST_MS, then every PLAIN_EVERY_MS: a 20,000-call task
 * prints a handful of lines, not one per call.
 *
 * Owners and observers: `submit --watch` and `watch --own` own their tasks. SIGINT
 * then prints that the task is not cancelled yet but will be (OWNER_LOST) unless an
 * owner re-attaches within the worker's grace, and the exact command that does; an
 * observer's SIGINT says the task keeps running. Both exit 130. */
#define _GNU_SOURCE /* clock_gettime */

#include <inttypes.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "adapters/wk_grpc_client.h"
#include "workerctl.h"

#define M_WATCH "/worker.v1.WorkerService/WatchTasks"
#define PLAIN_EVERY_MS 5000 /* plain progress lines per task at most this often */
#define PLAIN_FIRST_MS 2000 /* submit --watch: none before the task ran this long */
#define BAR_WIDTH 24

static int64_t mono_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int64_t unix_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- formatting ------------------------------------------------------------------- */

static void format_duration(char *buf, size_t len, double s) {
  uint64_t t = s < 0 ? 0 : (uint64_t)(s + 0.5);
  if (t < 60) {
    snprintf(buf, len, "%" PRIu64 "s", t);
  } else if (t < 3600) {
    snprintf(buf, len, "%" PRIu64 "m%02" PRIu64 "s", t / 60, t % 60);
  } else {
    snprintf(buf, len, "%" PRIu64 "h%02" PRIu64 "m", t / 3600, (t / 60) % 60);
  }
}

void ctl_format_progress(char *buf, size_t len, const Worker__V1__TaskProgress *p, double rate,
                         int bar_width) {
  size_t at = 0;
#define PUT(...)                                                       \
  do {                                                                 \
    int k_ = snprintf(buf + at, at < len ? len - at : 0, __VA_ARGS__); \
    if (k_ > 0) at += (size_t)k_;                                      \
  } while (0)
  if (len) buf[0] = '\0';
  if (p->total_known && p->calls_total > 0) {
    uint64_t done = p->calls_done < p->calls_total ? p->calls_done : p->calls_total;
    int fill = (int)((double)done * bar_width / (double)p->calls_total);
    PUT("[");
    for (int i = 0; i < bar_width; i++) PUT("%c", i < fill ? '#' : '.');
    PUT("] %" PRIu64 "/%" PRIu64 " calls %3d%%", p->calls_done, p->calls_total,
        (int)(100.0 * (double)done / (double)p->calls_total));
  } else {
    PUT("%" PRIu64 " calls done", p->calls_done);
  }
  if (rate > 0) {
    PUT("  %.0f/s", rate);
    if (p->total_known && p->calls_total > p->calls_done) {
      char eta[32];
      format_duration(eta, sizeof eta, (double)(p->calls_total - p->calls_done) / rate);
      PUT("  ETA %s", eta);
    }
  }
  if (p->calls_failed) PUT("  %" PRIu64 " failed", p->calls_failed);
  if (p->calls_retried) PUT("  %" PRIu64 " retried", p->calls_retried);
#undef PUT
}

/* ---- Ctrl-C -------------------------------------------------------------------------- */

/* Two message buffers: the handler writes the one `g_msg` names (-1: none), so a new
 * message is written into the other buffer before it is switched to. */
static char g_msgs[2][4096];
static size_t g_lens[2];
static volatile sig_atomic_t g_msg = -1;
static volatile sig_atomic_t g_bar_shown; /* a progress bar is on stderr's last line */

static void on_sigint(int sig) {
  (void)sig;
  if (g_bar_shown) (void)!write(STDERR_FILENO, "\r\033[K", 4);
  int m = g_msg;
  if (m >= 0) (void)!write(STDERR_FILENO, g_msgs[m], g_lens[m]);
  _exit(130);
}

/* Writes what Ctrl-C will say for these tasks: for an owner, the grace (ms; < 0 =
 * unknown) and the command that re-attaches; for an observer, that nothing changes. */
static void set_sigint_message(const ctl_args *a, char **ids, size_t n, bool own,
                               int64_t grace_ms) {
  int next = g_msg == 0 ? 1 : 0;
  char *b = g_msgs[next];
  size_t len = sizeof g_msgs[next], at = 0;
#define PUT(...)                                                     \
  do {                                                               \
    int k_ = snprintf(b + at, at < len ? len - at : 0, __VA_ARGS__); \
    if (k_ > 0) at += (size_t)k_;                                    \
  } while (0)
  const char *them = n == 1 ? "the task" : "the tasks";
  if (!own) {
    PUT("\nworkerctl: stopped watching (as an observer); %s keep%s running.\n", them,
        n == 1 ? "s" : "");
  } else {
    char grace[64];
    if (grace_ms >= 0) {
      snprintf(grace, sizeof grace, "%.3g s", (double)grace_ms / 1000.0);
    } else {
      snprintf(grace, sizeof grace, "the worker's watch_disconnect_grace_ms");
    }
    PUT("\nworkerctl: interrupted: %s %s not cancelled yet, but this watch owned %s: the "
        "worker cancels %s (OWNER_LOST) unless an owner re-attaches within the grace of %s.\n"
        "To re-attach:\n  workerctl --addr %s",
        them, n == 1 ? "is" : "are", n == 1 ? "it" : "them", n == 1 ? "it" : "them", grace,
        a->addr);
    if (a->tls_ca) PUT(" --tls-ca %s", a->tls_ca);
    if (a->tls_cert) PUT(" --tls-cert %s --tls-key %s", a->tls_cert, a->tls_key ? a->tls_key : "");
    if (a->tls_server_name) PUT(" --tls-server-name %s", a->tls_server_name);
    PUT(" watch --own");
    for (size_t i = 0; i < n; i++) PUT(" %s", ids[i]);
    PUT("\nTo let %s go now:  workerctl --addr %s cancel %s\n", n == 1 ? "it" : "one", a->addr,
        ids[0]);
  }
#undef PUT
  g_lens[next] = at < len ? at : len - 1;
  g_msg = next;
}

/* ---- the watch ------------------------------------------------------------------------ */

typedef struct task_view {
  int64_t first_ms;    /* when its first PROGRESS came (monotonic), 0 = none yet */
  uint64_t first_done; /* calls_done then */
  int64_t plain_ms;    /* when its last plain line was printed, 0 = none */
  uint64_t plain_done; /* calls_done then */
} task_view;

typedef struct watch {
  const ctl_args *a;
  const ctl_watch_opts *o;
  bool bar;         /* stderr is a terminal: progress redrawn in place there */
  bool bar_shown;   /* the bar is on stderr's last line now */
  int64_t start_ms; /* when the watch began */
  task_view views[CTL_MAX_POSITIONAL];
} watch;

static void clear_bar(watch *w) {
  if (!w->bar_shown) return;
  fputs("\r\033[K", stderr);
  fflush(stderr);
  w->bar_shown = false;
  g_bar_shown = 0;
}

/* calls/s: over what this watch saw, else since the calls started (the worker's clock). */
static double rate_of(const task_view *v, const Worker__V1__TaskProgress *p, int64_t now) {
  if (v->first_ms && now - v->first_ms >= 500 && p->calls_done > v->first_done) {
    return (double)(p->calls_done - v->first_done) * 1000.0 / (double)(now - v->first_ms);
  }
  int64_t ran = unix_ms() - p->calls_started_unix_ms;
  if (p->calls_started_unix_ms > 0 && ran >= 500 && p->calls_done > 0) {
    return (double)p->calls_done * 1000.0 / (double)ran;
  }
  return 0;
}

static json_t *progress_json(const Worker__V1__TaskEvent *e) {
  const Worker__V1__TaskProgress *p = e->progress;
  json_t *j = json_object();
  json_object_set_new(j, "task_id", json_string(e->task_id));
  json_object_set_new(j, "kind", json_string("PROGRESS"));
  json_t *q = json_object();
  if (p) {
    json_object_set_new(q, "calls_total", ctl_json_u64(p->calls_total));
    json_object_set_new(q, "total_known", json_boolean(p->total_known));
    json_object_set_new(q, "calls_done", ctl_json_u64(p->calls_done));
    json_object_set_new(q, "calls_succeeded", ctl_json_u64(p->calls_succeeded));
    json_object_set_new(q, "calls_failed", ctl_json_u64(p->calls_failed));
    json_object_set_new(q, "calls_retried", ctl_json_u64(p->calls_retried));
    json_object_set_new(q, "calls_started_unix_ms", json_integer(p->calls_started_unix_ms));
  }
  json_object_set_new(j, "progress", q);
  return j;
}

static void show_progress(watch *w, size_t idx, const Worker__V1__TaskEvent *e) {
  const Worker__V1__TaskProgress *p = e->progress;
  if (!p || idx >= CTL_MAX_POSITIONAL) return;
  if (w->a->json) {
    if (!w->o->terminal_only) ctl_json_print(stdout, progress_json(e));
    return;
  }
  task_view *v = &w->views[idx];
  int64_t now = mono_ms();
  if (!v->first_ms) {
    v->first_ms = now;
    v->first_done = p->calls_done;
  }
  char line[256];
  ctl_format_progress(line, sizeof line, p, rate_of(v, p, now), BAR_WIDTH);
  if (w->bar) {
    fprintf(stderr, "\r\033[K%s %s", e->task_id, line);
    fflush(stderr);
    w->bar_shown = true;
    g_bar_shown = 1;
    return;
  }
  /* plain lines, summarised: never more than one per PLAIN_EVERY_MS per task */
  if (v->plain_ms && (now - v->plain_ms < PLAIN_EVERY_MS || p->calls_done == v->plain_done)) return;
  if (w->o->terminal_only && now - w->start_ms < PLAIN_FIRST_MS) return;
  v->plain_ms = now;
  v->plain_done = p->calls_done;
  FILE *f = w->o->terminal_only ? stderr : stdout; /* submit --watch: stdout is the result */
  fprintf(f, "PROGRESS task %s %s\n", e->task_id, line);
  fflush(f);
}

/* The SNAPSHOT told the grace: the Ctrl-C message says it. */
static void learn_grace(watch *w, char **ids, size_t n, const Worker__V1__TaskEvent *e) {
  if (!w->o->own || w->o->owner_grace_ms >= 0 ||
      e->kind != WORKER__V1__TASK_EVENT__KIND__KIND_SNAPSHOT)
    return;
  set_sigint_message(w->a, ids, n, true, (int64_t)e->owner_grace_ms);
}

int ctl_watch(const ctl_args *a, wk_grpc_client *c, char **ids, size_t n, const ctl_watch_opts *o) {
  Worker__V1__WatchTasksRequest req;
  worker__v1__watch_tasks_request__init(&req);
  req.n_task_ids = n;
  req.task_ids = ids;
  req.observe = !o->own;
  req.progress = !(a->json && o->terminal_only); /* shown, as a bar or summarised lines */
  size_t len = worker__v1__watch_tasks_request__get_packed_size(&req);
  uint8_t *buf = malloc(len ? len : 1);
  if (!buf) abort();
  worker__v1__watch_tasks_request__pack(&req, buf);
  int64_t deadline = a->set[F_DEADLINE_MS] ? a->deadline_ms : 0;
  wk_grpc_stream *s;
  wk_grpc_status st;
  int rc = wk_grpc_stream_open(c, M_WATCH, buf, len, NULL, 0, deadline, &s, &st);
  free(buf);
  if (rc != 0) return ctl_report_status(a, &st);

  static watch w; /* large (a view per task); one watch per process */
  memset(&w, 0, sizeof w);
  w.a = a;
  w.o = o;
  const char *term = getenv("TERM");
  w.bar = !a->json && isatty(STDERR_FILENO) && !(term && strcmp(term, "dumb") == 0);
  w.start_ms = mono_ms();
  set_sigint_message(a, ids, n, o->own, o->owner_grace_ms);
  struct sigaction sa, old;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_sigint;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, &old);

  bool terminal_seen[CTL_MAX_POSITIONAL] = {false}; /* a result in a terminal state */
  bool done[CTL_MAX_POSITIONAL] = {false};          /* its TERMINAL event */
  size_t n_terminal = 0, n_done = 0;
  int worst = CTL_EXIT_OK;
  bool decode_failed = false;
  wk_grpc_buf msg;
  while (n_done < n && wk_grpc_stream_next(s, &msg) == 1) {
    Worker__V1__TaskEvent *ev = worker__v1__task_event__unpack(NULL, msg.len, msg.data);
    wk_grpc_buf_free(&msg);
    if (!ev) {
      decode_failed = true;
      break;
    }
    size_t idx = n;
    for (size_t i = 0; i < n && idx == n; i++) {
      if (strcmp(ids[i], ev->task_id) == 0) idx = i;
    }
    learn_grace(&w, ids, n, ev);
    if (ev->kind == WORKER__V1__TASK_EVENT__KIND__KIND_PROGRESS) {
      show_progress(&w, idx, ev);
      worker__v1__task_event__free_unpacked(ev, NULL);
      continue;
    }
    bool is_terminal_event = ev->kind == WORKER__V1__TASK_EVENT__KIND__KIND_TERMINAL;
    bool terminal = ev->result && (is_terminal_event || ctl_state_terminal(ev->result->state));
    bool first_terminal = terminal && idx < n && !terminal_seen[idx];
    if (!o->terminal_only && !a->quiet) {
      clear_bar(&w);
      if (a->json) {
        ctl_json_print(stdout, ctl_event_json(ev));
      } else {
        ctl_print_event(stdout, ev);
      }
    } else if (first_terminal) {
      clear_bar(&w);
      if (a->quiet && n > 1) printf("%s ", ev->task_id); /* which task each state is */
      (void)ctl_show_result(a, ev->result);
    }
    if (first_terminal) {
      terminal_seen[idx] = true;
      n_terminal++;
      int e = ctl_state_exit(ev->result->state);
      if (e > worst) worst = e;
    }
    if (is_terminal_event && idx < n && !done[idx]) {
      done[idx] = true;
      n_done++;
    }
    worker__v1__task_event__free_unpacked(ev, NULL);
  }
  clear_bar(&w);
  sigaction(SIGINT, &old, NULL);
  g_msg = -1;
  grpc_status_code code = wk_grpc_stream_finish(s, &st);
  if (decode_failed) return ctl_report_decode_error(a, "TaskEvent");
  if (n_terminal == n) return worst; /* every task ended: how the stream ended is moot */
  if (code != GRPC_STATUS_OK) return ctl_report_status(a, &st);
  if (o->terminal_only) {
    fprintf(stderr, "workerctl: the watch of %s ended before the task finished\n", ids[0]);
  }
  return worst;
}

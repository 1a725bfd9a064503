/* bench_grpc.c: figures of the Worker's gRPC path, measured against one real `worker`
 * process with real Python executors (DESIGN.md §10).
 *
 *   bench_grpc [--worker PATH] [--seconds-per-point S] [--executors N]
 *              [--tasks N] [--python PATH] [--scratch-root DIR] [--keep]
 *
 * Starts the worker on 127.0.0.1:0 with a fresh code root in a temporary directory
 * (its stdout and stderr go to worker.log there), deploys a no-op function
 * (`def handler(args, ctx): return None`), waits for Health SERVING, and measures:
 *
 *  1. Health.Check and RequestTaskSlot latency p50/p99 at 1, 8 and 64 calls in flight:
 *     a closed loop of K threads, each calling back to back. The methods run in
 *     interleaved slices of about 0.25 s (H R C C R H ..., S seconds per series) so
 *     drift and bursts of other load on the machine hit both alike; C is a second
 *     Health.Check series whose ratio to H is the noise floor of the comparison.
 *     RequestTaskSlot uses a fresh task id per call and ttl_ms 200, so the leases lapse
 *     and slots recycle. Target: RequestTaskSlot within 1.3x of Health.Check, p50 and
 *     p99, at every concurrency.
 *  2. SubmitTask-to-terminal latency of the no-op function over N sequential tasks:
 *     from before SubmitTask to the TERMINAL event of a WatchTasks opened after it.
 *  3. No-op tasks/s with 64 in flight: 64 threads each submit, watch to terminal and
 *     repeat for S seconds; tasks that SUCCEEDED inside the window, per second.
 *
 * One client (one channel, one HTTP/2 connection) is shared by every thread, as a
 * coordinator would. Times are CLOCK_MONOTONIC. The CPU time used by the worker, its
 * executors and this process during each phase is read from /proc and printed, since
 * all three share the machine's cores. */
#define _GNU_SOURCE

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "adapters/wk_code_store.h"
#include "adapters/wk_grpc_client.h"
#include "bench_proc.h"
#include "grpc/health/v1/health.pb-c.h"
#include "worker/v1/worker.pb-c.h"

#ifndef WK_WORKER_BIN
#define WK_WORKER_BIN "worker"
#endif

#define M_HEALTH "/grpc.health.v1.Health/Check"
#define M_SLOT "/worker.v1.WorkerService/RequestTaskSlot"
#define M_SUBMIT "/worker.v1.WorkerService/SubmitTask"
#define M_WATCH "/worker.v1.WorkerService/WatchTasks"

#define SLOT_TTL_MS 200u /* lease asked for by RequestTaskSlot: lapses quickly */
#define UNARY_DEADLINE_MS 10000
#define WATCH_DEADLINE_MS 60000
#define TARGET_RATIO 1.3
#define TASK_THREADS 64u
#define ID_MAX 96

static const unsigned k_concurrency[] = {1, 8, 64};
#define N_CONCURRENCY (sizeof k_concurrency / sizeof k_concurrency[0])

/* ---- time and samples ------------------------------------------------------------ */

typedef struct samples {
  uint64_t *v; /* nanoseconds */
  size_t n, cap;
} samples;

static void samples_push(samples *s, uint64_t x) {
  if (s->n == s->cap) {
    size_t cap = s->cap ? s->cap * 2 : 4096;
    uint64_t *v = realloc(s->v, cap * sizeof *v);
    if (!v) abort();
    s->v = v;
    s->cap = cap;
  }
  s->v[s->n++] = x;
}

static void samples_append(samples *dst, const samples *src) {
  for (size_t i = 0; i < src->n; i++) samples_push(dst, src->v[i]);
}

static void samples_free(samples *s) {
  free(s->v);
  s->v = NULL;
  s->n = s->cap = 0;
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return (x > y) - (x < y);
}

static void samples_sort(samples *s) {
  if (s->n > 1) qsort(s->v, s->n, sizeof *s->v, cmp_u64);
}

/* Nearest-rank percentile of sorted samples, in microseconds (0 when empty). */
static double pct_us(const samples *s, double q) {
  if (s->n == 0) return 0.0;
  double rank = q * (double)s->n;
  size_t i = (size_t)rank;
  if ((double)i < rank) i++; /* ceil */
  if (i == 0) i = 1;
  if (i > s->n) i = s->n;
  return (double)s->v[i - 1] / 1000.0;
}

/* ---- CPU accounting from /proc ------------------------------------------------------ */

typedef struct cpu_snap {
  uint64_t worker_ticks;
  uint64_t exec_ticks; /* every child of the worker (the executors) */
  uint64_t self_ns;    /* this process */
  uint64_t wall_ns;
  uint64_t busy_ticks; /* the whole machine, from /proc/stat: not idle, not iowait */
} cpu_snap;

static void cpu_snapshot(pid_t worker, cpu_snap *out) {
  memset(out, 0, sizeof *out);
  pid_t pp;
  (void)bench_proc_stat(worker, &out->worker_ticks, &pp);
  DIR *d = opendir("/proc");
  if (d) {
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
      char *end;
      long pid = strtol(e->d_name, &end, 10);
      if (*end || pid <= 0) continue;
      uint64_t t;
      if (bench_proc_stat((pid_t)pid, &t, &pp) && pp == worker) out->exec_ticks += t;
    }
    closedir(d);
  }
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  out->self_ns = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
  out->wall_ns = bench_now_ns();
  out->busy_ticks = bench_proc_machine_busy_ticks();
}

/* Prints CPU use between two snapshots, in % of one core. */
static void cpu_print(const char *label, const cpu_snap *a, const cpu_snap *b) {
  double wall = (double)(b->wall_ns - a->wall_ns) / 1e9;
  if (wall <= 0) return;
  double hz = (double)sysconf(_SC_CLK_TCK);
  double w = (double)(b->worker_ticks - a->worker_ticks) / hz / wall * 100.0;
  double x = (double)(b->exec_ticks - a->exec_ticks) / hz / wall * 100.0;
  double s = (double)(b->self_ns - a->self_ns) / 1e9 / wall * 100.0;
  double m = (double)(b->busy_ticks - a->busy_ticks) / hz / wall * 100.0;
  double others = m - (w + x + s);
  if (others < 0) others = 0;
  printf(
      "   cpu during %s, %% of one core (%ld online): worker %.0f, executors %.0f, "
      "bench client %.0f; whole machine busy %.0f (other processes ~%.0f)\n",
      label, sysconf(_SC_NPROCESSORS_ONLN), w, x, s, m, others);
}

/* CPU time of every thread of pid, in ns (the first field of each thread's schedstat):
 * finer than the 10 ms ticks of /proc/PID/stat, for CPU per call. 0 when unreadable. */
static uint64_t proc_cpu_ns(pid_t pid) {
  char dir[64];
  snprintf(dir, sizeof dir, "/proc/%d/task", (int)pid);
  DIR *d = opendir(dir);
  if (!d) return 0;
  uint64_t sum = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.') continue;
    char path[sizeof dir + sizeof e->d_name + 16];
    snprintf(path, sizeof path, "%s/%s/schedstat", dir, e->d_name);
    FILE *f = fopen(path, "r");
    if (!f) continue;
    unsigned long long run = 0;
    if (fscanf(f, "%llu", &run) == 1) sum += (uint64_t)run;
    fclose(f);
  }
  closedir(d);
  return sum;
}

static void print_loadavg(const char *when) {
  char buf[128] = "";
  FILE *f = fopen("/proc/loadavg", "r");
  if (f) {
    if (!fgets(buf, sizeof buf, f)) buf[0] = '\0';
    fclose(f);
  }
  buf[strcspn(buf, "\n")] = '\0';
  printf("  load average %s: %s\n", when, buf);
}

/* ---- the worker process -------------------------------------------------------------- */

typedef struct bench {
  const char *worker_bin;
  const char *python;
  double seconds;
  unsigned executors;
  unsigned seq_tasks;
  bool keep;
  char tmp[256];
  char code_root[300];
  char log_path[300];
  const char *scratch_parent; /* --scratch-root; NULL = inside tmp */
  char scratch[300];          /* the worker's --scratch-root */
  pid_t pid;
  int port;
  wk_grpc_client *client;
  unsigned run_no; /* makes task ids unique across runs */
} bench;

static pid_t spawn_worker(bench *b) {
  char slots[32], execs[32], ttl[32];
  snprintf(slots, sizeof slots, "%u", 100000u);
  snprintf(execs, sizeof execs, "%u", b->executors);
  snprintf(ttl, sizeof ttl, "%u", 1000u);
  char a_listen[] = "--listen", v_listen[] = "127.0.0.1:0", a_code[] = "--code-root",
       a_exec[] = "--executors", a_py[] = "--python", a_slots[] = "--task-slots",
       a_ttl[] = "--slot-ttl-ms", a_maxttl[] = "--max-slot-ttl-ms", a_scratch[] = "--scratch-root";
  char *bin = strdup(b->worker_bin), *py = strdup(b->python);
  if (!bin || !py) abort();
  char *argv[] = {bin,   a_listen, v_listen, a_code,    b->code_root, a_exec,
                  execs, a_py,     py,       a_slots,   slots,        a_ttl,
                  ttl,   a_maxttl, ttl,      a_scratch, b->scratch,   NULL};
  int log = open(b->log_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (log < 0) {
    fprintf(stderr, "bench_grpc: cannot create %s: %s\n", b->log_path, strerror(errno));
    exit(1);
  }
  fflush(NULL);
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) {
    fprintf(stderr, "bench_grpc: fork: %s\n", strerror(errno));
    exit(1);
  }
  if (pid == 0) {
    /* single-threaded here (no gRPC yet): plain fork+exec is safe */
    (void)prctl(PR_SET_PDEATHSIG, SIGTERM); /* do not outlive a crashed bench */
    if (getppid() != parent) _exit(127);
    int nul = open("/dev/null", O_RDONLY);
    if (nul >= 0) dup2(nul, 0);
    dup2(log, 1);
    dup2(log, 2);
    execv(bin, argv);
    fprintf(stderr, "bench_grpc: cannot run %s: %s\n", bin, strerror(errno));
    _exit(127);
  }
  close(log);
  free(bin);
  free(py);
  return pid;
}

/* Reads the port from the worker_listening line of the log; 0 when not there yet. */
static int read_port(const char *log_path) {
  FILE *f = fopen(log_path, "r");
  if (!f) return 0;
  char line[4096];
  int port = 0;
  while (port == 0 && fgets(line, sizeof line, f)) {
    if (!strstr(line, "\"event\":\"worker_listening\"")) continue;
    const char *p = strstr(line, "\"port\":");
    if (p) port = atoi(p + 7);
  }
  fclose(f);
  return port;
}

static bool worker_alive(bench *b) {
  if (b->pid <= 0) return false;
  int status;
  pid_t r = waitpid(b->pid, &status, WNOHANG);
  if (r == b->pid) {
    b->pid = 0;
    return false;
  }
  return true;
}

/* SIGTERM, then wait up to 30 s (SIGKILL after that). Returns the exit status text. */
static void stop_worker(bench *b, char *what, size_t what_len) {
  snprintf(what, what_len, "not running");
  if (b->pid <= 0) return;
  kill(b->pid, SIGTERM);
  int status = 0;
  uint64_t until = bench_now_ns() + 30ull * 1000000000u;
  pid_t r = 0;
  while ((r = waitpid(b->pid, &status, WNOHANG)) == 0 && bench_now_ns() < until) bench_sleep_ms(10);
  if (r == 0) {
    kill(b->pid, SIGKILL);
    (void)waitpid(b->pid, &status, 0);
    snprintf(what, what_len, "did not stop within 30 s of SIGTERM: killed");
  } else if (r == b->pid && WIFEXITED(status)) {
    snprintf(what, what_len, "exited %d after SIGTERM", WEXITSTATUS(status));
  } else if (r == b->pid && WIFSIGNALED(status)) {
    snprintf(what, what_len, "died of signal %d", WTERMSIG(status));
  }
  b->pid = 0;
}

static int chmod_dirs(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)ftw;
  if (flag == FTW_D) (void)chmod(path, (sb->st_mode & 07777) | S_IRWXU);
  return 0;
}

static int remove_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb;
  (void)flag;
  (void)ftw;
  (void)remove(path);
  return 0;
}

static void remove_tree(const char *dir) {
  (void)nftw(dir, chmod_dirs, 32, FTW_PHYS);
  (void)nftw(dir, remove_one, 32, FTW_PHYS | FTW_DEPTH);
}

/* ---- the calls ---------------------------------------------------------------------- */

typedef enum outcome {
  OUT_OK = 0,
  OUT_EXHAUSTED = 1, /* RESOURCE_EXHAUSTED: no free slot */
  OUT_ERROR = 2,     /* anything else; the first one is kept for the report */
} outcome;

typedef struct err_note {
  pthread_mutex_t mu;
  char first[WK_GRPC_STATUS_MESSAGE_MAX + 64];
} err_note;

static err_note g_err = {.mu = PTHREAD_MUTEX_INITIALIZER, .first = ""};

static void note_error(const char *method, const char *fmt_status, const char *msg) {
  pthread_mutex_lock(&g_err.mu);
  if (!g_err.first[0]) {
    snprintf(g_err.first, sizeof g_err.first, "%s: %s %s", method, fmt_status, msg);
  }
  pthread_mutex_unlock(&g_err.mu);
}

static outcome call_health(wk_grpc_client *c) {
  Grpc__Health__V1__HealthCheckRequest req;
  grpc__health__v1__health_check_request__init(&req);
  uint8_t buf[64];
  size_t len = grpc__health__v1__health_check_request__pack(&req, buf);
  wk_grpc_buf resp;
  wk_grpc_status st;
  grpc_status_code code =
      wk_grpc_client_unary(c, M_HEALTH, buf, len, NULL, 0, UNARY_DEADLINE_MS, &resp, &st);
  if (code != GRPC_STATUS_OK) {
    note_error("Health.Check", wk_grpc_status_name(code), st.message);
    return code == GRPC_STATUS_RESOURCE_EXHAUSTED ? OUT_EXHAUSTED : OUT_ERROR;
  }
  Grpc__Health__V1__HealthCheckResponse *r =
      grpc__health__v1__health_check_response__unpack(NULL, resp.len, resp.data);
  wk_grpc_buf_free(&resp);
  bool serving = r && r->status == GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING;
  if (r) grpc__health__v1__health_check_response__free_unpacked(r, NULL);
  if (!serving) note_error("Health.Check", "OK", "but not SERVING (or undecodable)");
  return serving ? OUT_OK : OUT_ERROR;
}

static outcome call_slot(wk_grpc_client *c, char *task_id) {
  Worker__V1__RequestTaskSlotRequest req;
  worker__v1__request_task_slot_request__init(&req);
  req.task_id = task_id;
  req.ttl_ms = SLOT_TTL_MS;
  uint8_t buf[256];
  if (worker__v1__request_task_slot_request__get_packed_size(&req) > sizeof buf) abort();
  size_t len = worker__v1__request_task_slot_request__pack(&req, buf);
  wk_grpc_buf resp;
  wk_grpc_status st;
  grpc_status_code code =
      wk_grpc_client_unary(c, M_SLOT, buf, len, NULL, 0, UNARY_DEADLINE_MS, &resp, &st);
  if (code == GRPC_STATUS_RESOURCE_EXHAUSTED) return OUT_EXHAUSTED;
  if (code != GRPC_STATUS_OK) {
    note_error("RequestTaskSlot", wk_grpc_status_name(code), st.message);
    return OUT_ERROR;
  }
  Worker__V1__RequestTaskSlotResponse *r =
      worker__v1__request_task_slot_response__unpack(NULL, resp.len, resp.data);
  wk_grpc_buf_free(&resp);
  bool ok = r && r->slot_id != 0;
  if (r) worker__v1__request_task_slot_response__free_unpacked(r, NULL);
  if (!ok) note_error("RequestTaskSlot", "OK", "but no slot_id (or undecodable)");
  return ok ? OUT_OK : OUT_ERROR;
}

static bool state_terminal(Worker__V1__TaskState s) {
  return s == WORKER__V1__TASK_STATE__TASK_STATE_SUCCEEDED ||
         s == WORKER__V1__TASK_STATE__TASK_STATE_FAILED ||
         s == WORKER__V1__TASK_STATE__TASK_STATE_CANCELLED;
}

/* Submits a no-op task and watches it to its end. *t_terminal is the time the first
 * terminal event (or terminal snapshot) arrived. OUT_OK means SUCCEEDED. */
static outcome run_task(wk_grpc_client *c, char *task_id, uint64_t *t_terminal,
                        uint64_t *t_submitted) {
  static char fn_name[] = "noop";
  static uint8_t args_json[] = "{}";
  *t_terminal = 0;

  Worker__V1__FunctionCallConfig fn;
  worker__v1__function_call_config__init(&fn);
  fn.name = fn_name;
  fn.args.data = args_json;
  fn.args.len = 2;
  Worker__V1__SubmitTaskRequest req;
  worker__v1__submit_task_request__init(&req);
  req.task_id = task_id;
  req.function = &fn;
  uint8_t buf[512];
  if (worker__v1__submit_task_request__get_packed_size(&req) > sizeof buf) abort();
  size_t len = worker__v1__submit_task_request__pack(&req, buf);
  wk_grpc_buf resp;
  wk_grpc_status st;
  grpc_status_code code =
      wk_grpc_client_unary(c, M_SUBMIT, buf, len, NULL, 0, UNARY_DEADLINE_MS, &resp, &st);
  wk_grpc_buf_free(&resp);
  if (t_submitted) *t_submitted = bench_now_ns();
  if (code != GRPC_STATUS_OK) {
    note_error("SubmitTask", wk_grpc_status_name(code), st.message);
    return code == GRPC_STATUS_RESOURCE_EXHAUSTED ? OUT_EXHAUSTED : OUT_ERROR;
  }

  Worker__V1__WatchTasksRequest wreq;
  worker__v1__watch_tasks_request__init(&wreq);
  char *ids[1] = {task_id};
  wreq.n_task_ids = 1;
  wreq.task_ids = ids;
  if (worker__v1__watch_tasks_request__get_packed_size(&wreq) > sizeof buf) abort();
  len = worker__v1__watch_tasks_request__pack(&wreq, buf);
  wk_grpc_stream *s;
  if (wk_grpc_stream_open(c, M_WATCH, buf, len, NULL, 0, WATCH_DEADLINE_MS, &s, &st) != 0) {
    note_error("WatchTasks", wk_grpc_status_name(st.code), st.message);
    return OUT_ERROR;
  }
  Worker__V1__TaskState final = WORKER__V1__TASK_STATE__TASK_STATE_UNSPECIFIED;
  char why[WK_GRPC_STATUS_MESSAGE_MAX] = "";
  wk_grpc_buf msg;
  /* read to the end of the stream (it ends OK after the TERMINAL event), so the server
   * finishes it normally instead of seeing a cancel */
  while (wk_grpc_stream_next(s, &msg) == 1) {
    Worker__V1__TaskEvent *ev = worker__v1__task_event__unpack(NULL, msg.len, msg.data);
    wk_grpc_buf_free(&msg);
    if (!ev) continue;
    if (*t_terminal == 0 && ev->result &&
        (ev->kind == WORKER__V1__TASK_EVENT__KIND__KIND_TERMINAL ||
         state_terminal(ev->result->state))) {
      *t_terminal = bench_now_ns();
      final = ev->result->state;
      if (final != WORKER__V1__TASK_STATE__TASK_STATE_SUCCEEDED) {
        snprintf(why, sizeof why, "%s (failure_code %d): %s",
                 final == WORKER__V1__TASK_STATE__TASK_STATE_FAILED ? "FAILED" : "CANCELLED",
                 (int)ev->result->failure_code,
                 ev->result->failure_message ? ev->result->failure_message : "");
      }
    }
    worker__v1__task_event__free_unpacked(ev, NULL);
  }
  code = wk_grpc_stream_finish(s, &st);
  if (*t_terminal == 0) {
    note_error("WatchTasks", wk_grpc_status_name(code),
               code == GRPC_STATUS_OK ? "the stream ended without a terminal event" : st.message);
    return OUT_ERROR;
  }
  if (final != WORKER__V1__TASK_STATE__TASK_STATE_SUCCEEDED) {
    note_error("task", "ended", why);
    return OUT_ERROR;
  }
  return OUT_OK;
}

/* ---- closed-loop load --------------------------------------------------------------- */

typedef enum op_kind { OP_HEALTH = 0, OP_SLOT = 1, OP_TASK = 2 } op_kind;

typedef struct load_run {
  wk_grpc_client *client;
  op_kind op;
  unsigned run_no;
  pthread_barrier_t start;
  uint64_t deadline_ns; /* set by the main thread before the barrier */
} load_run;

typedef struct loader {
  pthread_t th;
  load_run *run;
  unsigned index;
  samples lat;        /* OK calls (tasks: SUCCEEDED inside the window) */
  uint64_t ok;        /* OK calls; tasks: SUCCEEDED inside the window */
  uint64_t exhausted; /* RESOURCE_EXHAUSTED */
  uint64_t errors;
} loader;

static void *loader_main(void *arg) {
  loader *l = arg;
  load_run *r = l->run;
  char id[ID_MAX];
  uint64_t seq = 0;
  pthread_barrier_wait(&r->start);
  uint64_t deadline = r->deadline_ns;
  for (;;) {
    uint64_t t0 = bench_now_ns();
    if (t0 >= deadline) break;
    outcome o;
    uint64_t t1;
    switch (r->op) {
      case OP_HEALTH:
        o = call_health(r->client);
        t1 = bench_now_ns();
        break;
      case OP_SLOT:
        snprintf(id, sizeof id, "bench-slot-%u-%u-%llu", r->run_no, l->index,
                 (unsigned long long)seq++);
        o = call_slot(r->client, id);
        t1 = bench_now_ns();
        break;
      case OP_TASK:
      default:
        snprintf(id, sizeof id, "bench-task-%u-%u-%llu", r->run_no, l->index,
                 (unsigned long long)seq++);
        o = run_task(r->client, id, &t1, NULL);
        if (t1 == 0) t1 = bench_now_ns();
        if (o == OUT_OK && t1 > deadline) continue; /* finished past the window */
        break;
    }
    if (o == OUT_OK) {
      l->ok++;
      samples_push(&l->lat, t1 - t0);
    } else if (o == OUT_EXHAUSTED) {
      l->exhausted++;
    } else {
      l->errors++;
    }
  }
  return NULL;
}

typedef struct load_result {
  samples lat;
  uint64_t ok, exhausted, errors;
  double seconds;         /* window length, summed over slices */
  uint64_t worker_cpu_ns; /* the worker's CPU time during the slices */
} load_result;

/* Runs `threads` closed-loop threads of `op` for `seconds`, adding to *res. */
static void run_load(bench *b, op_kind op, unsigned threads, double seconds, load_result *res) {
  load_run r = {.client = b->client, .op = op, .run_no = ++b->run_no};
  pthread_barrier_init(&r.start, NULL, threads + 1);
  loader *ls = calloc(threads, sizeof *ls);
  if (!ls) abort();
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, 256 * 1024);
  for (unsigned i = 0; i < threads; i++) {
    ls[i].run = &r;
    ls[i].index = i;
    if (pthread_create(&ls[i].th, &attr, loader_main, &ls[i]) != 0) abort();
  }
  pthread_attr_destroy(&attr);
  r.deadline_ns = bench_now_ns() + (uint64_t)(seconds * 1e9);
  pthread_barrier_wait(&r.start);
  for (unsigned i = 0; i < threads; i++) {
    pthread_join(ls[i].th, NULL);
    samples_append(&res->lat, &ls[i].lat);
    res->ok += ls[i].ok;
    res->exhausted += ls[i].exhausted;
    res->errors += ls[i].errors;
    samples_free(&ls[i].lat);
  }
  res->seconds += seconds;
  free(ls);
  pthread_barrier_destroy(&r.start);
}

/* ---- main --------------------------------------------------------------------------- */

static void usage(FILE *f) {
  fprintf(f,
          "usage: bench_grpc [--worker PATH] [--seconds-per-point S] [--executors N]\n"
          "                  [--tasks N] [--python PATH] [--scratch-root DIR] [--keep]\n"
          "  --worker PATH            the worker binary (default: the one built alongside)\n"
          "  --seconds-per-point S    measuring time per method and concurrency, and for\n"
          "                           the tasks/s run (default 2)\n"
          "  --executors N            Python executor processes (default 2)\n"
          "  --tasks N                sequential tasks for the latency figure (default 500)\n"
          "  --python PATH            interpreter for the executors (default /usr/bin/python3)\n"
          "  --scratch-root DIR       parent of the worker's scratch root (default: the\n"
          "                           temporary directory, under $TMPDIR or /tmp)\n"
          "  --keep                   keep the temporary directory (worker.log) afterwards\n");
}

static bool parse_uint(const char *s, unsigned lo, unsigned hi, unsigned *out) {
  char *end;
  errno = 0;
  unsigned long v = strtoul(s, &end, 10);
  if (!*s || *end || errno || v < lo || v > hi) return false;
  *out = (unsigned)v;
  return true;
}

/* The file system type under path, for the report (per-task scratch directories are
 * created and removed on it, which costs far more on a disk file system than on tmpfs). */
static const char *fs_type(const char *path) {
  struct statfs sf;
  if (statfs(path, &sf) != 0) return "unknown";
  switch ((unsigned long)sf.f_type) {
    case 0x01021994ul: return "tmpfs";
    case 0xEF53ul: return "ext2/3/4";
    case 0x58465342ul: return "xfs";
    case 0x9123683Eul: return "btrfs";
    case 0x794c7630ul: return "overlayfs";
    default: return "other";
  }
}

static int setup(bench *b) {
  snprintf(b->tmp, sizeof b->tmp, "%s/wk-bench-grpc-XXXXXX",
           getenv("TMPDIR") && getenv("TMPDIR")[0] ? getenv("TMPDIR") : "/tmp");
  if (!mkdtemp(b->tmp)) {
    fprintf(stderr, "bench_grpc: mkdtemp %s: %s\n", b->tmp, strerror(errno));
    return -1;
  }
  /* mkdtemp makes it 0700: run as root, the worker starts executors as its
   * executor_user (nobody by default), which must reach the code root below it */
  if (chmod(b->tmp, 0755) != 0) {
    fprintf(stderr, "bench_grpc: chmod %s: %s\n", b->tmp, strerror(errno));
    return -1;
  }
  snprintf(b->code_root, sizeof b->code_root, "%s/code", b->tmp);
  snprintf(b->log_path, sizeof b->log_path, "%s/worker.log", b->tmp);
  char src[300], main_py[320], err[512];
  if (b->scratch_parent) {
    snprintf(b->scratch, sizeof b->scratch, "%s/wk-bench-scratch-XXXXXX", b->scratch_parent);
    if (!mkdtemp(b->scratch)) {
      fprintf(stderr, "bench_grpc: mkdtemp %s: %s\n", b->scratch, strerror(errno));
      b->scratch[0] = '\0';
      return -1;
    }
  } else {
    snprintf(b->scratch, sizeof b->scratch, "%s/scratch", b->tmp);
    if (mkdir(b->scratch, 0755) != 0) {
      fprintf(stderr, "bench_grpc: mkdir %s: %s\n", b->scratch, strerror(errno));
      return -1;
    }
  }
  snprintf(src, sizeof src, "%s/src-noop", b->tmp);
  if (mkdir(src, 0755) != 0) {
    fprintf(stderr, "bench_grpc: mkdir %s: %s\n", src, strerror(errno));
    return -1;
  }
  snprintf(main_py, sizeof main_py, "%s/main.py", src);
  FILE *f = fopen(main_py, "w");
  if (!f) {
    fprintf(stderr, "bench_grpc: cannot write %s: %s\n", main_py, strerror(errno));
    return -1;
  }
  fputs("def handler(args, ctx):\n    return None\n", f);
  fclose(f);
  uint64_t epoch = 0;
  if (wk_code_store_deploy(b->code_root, "noop", src, &epoch, err, sizeof err) != 0) {
    fprintf(stderr, "bench_grpc: deploy: %s\n", err);
    return -1;
  }
  return 0;
}

/* Waits for the port, opens the client, waits for SERVING. */
static int connect_worker(bench *b) {
  uint64_t until = bench_now_ns() + 20ull * 1000000000u;
  while ((b->port = read_port(b->log_path)) == 0) {
    if (!worker_alive(b)) {
      fprintf(stderr, "bench_grpc: the worker exited before listening; see %s\n", b->log_path);
      return -1;
    }
    if (bench_now_ns() > until) {
      fprintf(stderr, "bench_grpc: the worker did not log worker_listening in 20 s; see %s\n",
              b->log_path);
      return -1;
    }
    bench_sleep_ms(10);
  }
  char target[64], err[256];
  snprintf(target, sizeof target, "127.0.0.1:%d", b->port);
  if (wk_grpc_client_open(target, NULL, &b->client, err, sizeof err) != 0) {
    fprintf(stderr, "bench_grpc: %s\n", err);
    return -1;
  }
  until = bench_now_ns() + 30ull * 1000000000u;
  while (call_health(b->client) != OUT_OK) {
    if (!worker_alive(b) || bench_now_ns() > until) {
      fprintf(stderr, "bench_grpc: the worker never became SERVING; see %s\n", b->log_path);
      return -1;
    }
    bench_sleep_ms(20);
  }
  pthread_mutex_lock(&g_err.mu);
  g_err.first[0] = '\0'; /* failures while starting up are expected */
  pthread_mutex_unlock(&g_err.mu);
  return 0;
}

/* PASS or MISS against the target; a MISS is marked "(noise)" when the control series
 * C differs from H at least as much as R does (max(C/H, H/C) >= R/H), so the gap cannot
 * be told from the machine's noise at that moment. */
static const char *verdict(double ratio, double noise) {
  if (ratio <= TARGET_RATIO) return "PASS";
  double spread = noise >= 1.0 ? noise : (noise > 0 ? 1.0 / noise : 0);
  return spread >= ratio ? "MISS (noise)" : "MISS";
}

int main(int argc, char **argv) {
  bench b;
  memset(&b, 0, sizeof b);
  b.worker_bin = WK_WORKER_BIN;
  b.python = "/usr/bin/python3";
  b.seconds = 2.0;
  b.executors = 2;
  b.seq_tasks = 500;
  enum { O_WORKER = 1, O_SECONDS, O_EXECUTORS, O_TASKS, O_PYTHON, O_KEEP, O_SCRATCH };
  static const struct option opts[] = {
      {"worker", required_argument, 0, O_WORKER},
      {"seconds-per-point", required_argument, 0, O_SECONDS},
      {"executors", required_argument, 0, O_EXECUTORS},
      {"tasks", required_argument, 0, O_TASKS},
      {"python", required_argument, 0, O_PYTHON},
      {"keep", no_argument, 0, O_KEEP},
      {"scratch-root", required_argument, 0, O_SCRATCH},
      {"help", no_argument, 0, 'h'},
      {0, 0, 0, 0},
  };
  int c;
  while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
    switch (c) {
      case O_WORKER: b.worker_bin = optarg; break;
      case O_SECONDS: {
        char *end;
        b.seconds = strtod(optarg, &end);
        if (!*optarg || *end || !(b.seconds >= 0.1 && b.seconds <= 3600)) {
          fprintf(stderr, "bench_grpc: --seconds-per-point takes 0.1..3600, got '%s'\n", optarg);
          return 2;
        }
        break;
      }
      case O_EXECUTORS:
        if (!parse_uint(optarg, 1, 1024, &b.executors)) {
          fprintf(stderr, "bench_grpc: --executors takes 1..1024, got '%s'\n", optarg);
          return 2;
        }
        break;
      case O_TASKS:
        if (!parse_uint(optarg, 1, 10000000, &b.seq_tasks)) {
          fprintf(stderr, "bench_grpc: --tasks takes 1..10000000, got '%s'\n", optarg);
          return 2;
        }
        break;
      case O_PYTHON: b.python = optarg; break;
      case O_KEEP: b.keep = true; break;
      case O_SCRATCH: b.scratch_parent = optarg; break;
      case 'h': usage(stdout); return 0;
      default: usage(stderr); return 2;
    }
  }
  if (optind < argc) {
    usage(stderr);
    return 2;
  }
  if (access(b.worker_bin, X_OK) != 0) {
    fprintf(stderr, "bench_grpc: cannot run the worker %s: %s (use --worker PATH)\n", b.worker_bin,
            strerror(errno));
    return 2;
  }
  signal(SIGPIPE, SIG_IGN);
  setvbuf(stdout, NULL, _IOLBF, 0); /* progress shows through a pipe too */
  if (setup(&b) != 0) {
    remove_tree(b.tmp);
    if (b.scratch_parent && b.scratch[0]) remove_tree(b.scratch);
    return 1;
  }
  /* fork before gRPC starts any thread */
  b.pid = spawn_worker(&b);
  int rc = 0;
  if (connect_worker(&b) != 0) {
    rc = 1;
    b.keep = true;
    goto out;
  }

  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  printf("bench_grpc: worker %s\n", b.worker_bin);
  printf(
      "  pid %d on 127.0.0.1:%d, %u executors (%s), --task-slots 100000, slot ttl %u ms,\n"
      "  %.1f s per point, one shared client channel (one HTTP/2 connection)\n",
      (int)b.pid, b.port, b.executors, b.python, SLOT_TTL_MS, b.seconds);
  printf(
      "  NOTE: %ld CPU cores online, shared by the worker, its %u Python executors and this\n"
      "  benchmark's client threads: the figures include client-side cost and contention.\n",
      cores, b.executors);
  printf("  task scratch directories under %s (%s)\n", b.scratch, fs_type(b.scratch));
  print_loadavg("at start");

  /* warm-up: connection, executors, the function's first import */
  {
    load_result w;
    memset(&w, 0, sizeof w);
    run_load(&b, OP_HEALTH, 8, 0.2, &w);
    run_load(&b, OP_SLOT, 8, 0.2, &w);
    run_load(&b, OP_TASK, b.executors * 2, 0.5, &w);
    samples_free(&w.lat);
    bench_sleep_ms(2 * SLOT_TTL_MS); /* let the warm-up leases lapse */
    pthread_mutex_lock(&g_err.mu);
    if (g_err.first[0]) printf("  warm-up error (first): %s\n", g_err.first);
    g_err.first[0] = '\0';
    pthread_mutex_unlock(&g_err.mu);
  }

  /* ---- 1. unary latency ---- */
  printf("\n1. Unary latency, closed loop, K threads calling back to back (microseconds)\n");
  /* Rounds of one slice (about 0.25 s) per series, in the order H R C, then C R H, ...:
   * C is a second, identical Health.Check series, a control whose ratio to H shows how
   * far two runs of the same method differ on this machine right now (the noise floor). */
  unsigned slices = (unsigned)(b.seconds / 0.25 + 0.5);
  if (slices < 2) slices = 2;
  slices += slices % 2;
  double slice_s = b.seconds / slices;
  printf(
      "   Health.Check (H), RequestTaskSlot (R) and a control series of Health.Check (C)\n"
      "   interleaved H R C C R H ...: %u slices of %.3f s each. RequestTaskSlot: fresh task id\n"
      "   per call, ttl_ms %u (leases lapse, slots recycle). C/H is the noise floor: two runs\n"
      "   of the same call.\n",
      slices, slice_s, SLOT_TTL_MS);
  printf(
      "   target: RequestTaskSlot within %.1fx of Health.Check (p50 and p99) at every "
      "concurrency\n",
      TARGET_RATIO);
  printf("   srv-cpu: the worker's CPU time per call (all its threads, microseconds)\n\n");
  printf("   %-9s %-19s %9s %9s %9s %9s %9s %9s %6s\n", "in-flight", "method", "calls", "calls/s",
         "p50", "p99", "srv-cpu", "exhausted", "errors");
  bool all_pass = true;
  bool misses_all_noise = true; /* every MISS is marked (noise) */
  char verdicts[N_CONCURRENCY][128];
  for (size_t ci = 0; ci < N_CONCURRENCY; ci++) {
    unsigned k = k_concurrency[ci];
    load_result series[3]; /* H, R, C */
    memset(series, 0, sizeof series);
    static const op_kind series_op[3] = {OP_HEALTH, OP_SLOT, OP_HEALTH};
    static const char *const series_name[3] = {"Health.Check", "RequestTaskSlot",
                                               "Health.Check (C)"};
    cpu_snap c0, c1;
    cpu_snapshot(b.pid, &c0);
    for (unsigned round = 0; round < slices; round++) {
      for (unsigned j = 0; j < 3; j++) {
        unsigned which = round % 2 == 0 ? j : 2 - j;
        load_result *res = &series[which];
        uint64_t w0 = proc_cpu_ns(b.pid);
        run_load(&b, series_op[which], k, slice_s, res);
        res->worker_cpu_ns += proc_cpu_ns(b.pid) - w0;
      }
    }
    cpu_snapshot(b.pid, &c1);
    double p50[3], p99[3], cpu[3];
    for (unsigned j = 0; j < 3; j++) {
      load_result *r = &series[j];
      samples_sort(&r->lat);
      p50[j] = pct_us(&r->lat, 0.50);
      p99[j] = pct_us(&r->lat, 0.99);
      uint64_t n = r->ok + r->exhausted + r->errors;
      cpu[j] = n ? (double)r->worker_cpu_ns / 1e3 / (double)n : 0;
      char exhausted[24];
      if (series_op[j] == OP_SLOT) {
        snprintf(exhausted, sizeof exhausted, "%llu", (unsigned long long)r->exhausted);
      } else {
        snprintf(exhausted, sizeof exhausted, "-");
      }
      printf("   %-9u %-19s %9llu %9.0f %9.0f %9.0f %9.1f %9s %6llu\n", k, series_name[j],
             (unsigned long long)r->ok, (double)r->ok / r->seconds, p50[j], p99[j], cpu[j],
             exhausted, (unsigned long long)r->errors);
    }
    double r50 = p50[0] > 0 ? p50[1] / p50[0] : 0, r99 = p99[0] > 0 ? p99[1] / p99[0] : 0;
    double n50 = p50[0] > 0 ? p50[2] / p50[0] : 0, n99 = p99[0] > 0 ? p99[2] / p99[0] : 0;
    bool pass = r50 <= TARGET_RATIO && r99 <= TARGET_RATIO && series[0].ok > 0 && series[1].ok > 0;
    all_pass = all_pass && pass;
    if (strcmp(verdict(r50, n50), "MISS") == 0 || strcmp(verdict(r99, n99), "MISS") == 0) {
      misses_all_noise = false;
    }
    printf("   %-9u %-19s %9s %9s %8.2fx %8.2fx %8.2fx   p50 %s, p99 %s\n", k, "ratio R/H", "", "",
           r50, r99, cpu[0] > 0 ? cpu[1] / cpu[0] : 0, verdict(r50, n50), verdict(r99, n99));
    printf("   %-9u %-19s %9s %9s %8.2fx %8.2fx %8.2fx\n", k, "noise floor C/H", "", "", n50, n99,
           cpu[0] > 0 ? cpu[2] / cpu[0] : 0);
    snprintf(verdicts[ci], sizeof verdicts[ci],
             "K=%-2u p50 %.2fx %s, p99 %.2fx %s   (noise floor C/H: p50 %.2fx, p99 %.2fx)", k, r50,
             verdict(r50, n50), r99, verdict(r99, n99), n50, n99);
    char label[32];
    snprintf(label, sizeof label, "K=%u", k);
    cpu_print(label, &c0, &c1);
    for (unsigned j = 0; j < 3; j++) samples_free(&series[j].lat);
  }

  /* ---- 2. sequential submit-to-terminal ---- */
  bench_sleep_ms(2 * SLOT_TTL_MS);
  printf("\n2. SubmitTask -> TERMINAL event latency, no-op function, %u sequential tasks\n",
         b.seq_tasks);
  printf("   (from before SubmitTask to the TERMINAL event of a WatchTasks opened after it)\n\n");
  {
    samples lat = {0}, sub = {0};
    uint64_t failed = 0;
    char id[ID_MAX];
    unsigned run = ++b.run_no;
    cpu_snap c0, c1;
    cpu_snapshot(b.pid, &c0);
    uint64_t start = bench_now_ns();
    for (unsigned i = 0; i < b.seq_tasks; i++) {
      snprintf(id, sizeof id, "bench-seq-%u-%u", run, i);
      uint64_t t0 = bench_now_ns(), t1, ts = 0;
      if (run_task(b.client, id, &t1, &ts) == OUT_OK) {
        samples_push(&lat, t1 - t0);
        samples_push(&sub, ts - t0);
      } else {
        failed++;
      }
    }
    double wall = (double)(bench_now_ns() - start) / 1e9;
    cpu_snapshot(b.pid, &c1);
    samples_sort(&lat);
    samples_sort(&sub);
    printf("   %9s %9s %9s %9s %9s %9s   %s\n", "tasks", "ok", "failed", "p50", "p99", "tasks/s",
           "of which the SubmitTask RPC p50/p99");
    printf("   %9u %9zu %9llu %9.0f %9.0f %9.1f   %.0f / %.0f\n", b.seq_tasks, lat.n,
           (unsigned long long)failed, pct_us(&lat, 0.50), pct_us(&lat, 0.99), (double)lat.n / wall,
           pct_us(&sub, 0.50), pct_us(&sub, 0.99));
    cpu_print("sequential tasks", &c0, &c1);
    samples_free(&lat);
    samples_free(&sub);
  }

  /* ---- 3. throughput ---- */
  printf(
      "\n3. No-op tasks/s end to end, %u in flight (%u threads: submit, watch to terminal,\n"
      "   repeat, for %.1f s; SUCCEEDED inside the window)\n\n",
      TASK_THREADS, TASK_THREADS, b.seconds);
  {
    load_result t;
    memset(&t, 0, sizeof t);
    cpu_snap c0, c1;
    cpu_snapshot(b.pid, &c0);
    run_load(&b, OP_TASK, TASK_THREADS, b.seconds, &t);
    cpu_snapshot(b.pid, &c1);
    samples_sort(&t.lat);
    printf("   %9s %11s %9s %9s %11s %9s\n", "succeeded", "tasks/s", "p50", "p99", "exhausted",
           "errors");
    printf("   %9llu %11.1f %9.0f %9.0f %11llu %9llu\n", (unsigned long long)t.ok,
           (double)t.ok / t.seconds, pct_us(&t.lat, 0.50), pct_us(&t.lat, 0.99),
           (unsigned long long)t.exhausted, (unsigned long long)t.errors);
    cpu_print("tasks/s run", &c0, &c1);
    samples_free(&t.lat);
  }

  printf("\nsummary: RequestTaskSlot within %.1fx of Health.Check at every concurrency: %s\n",
         TARGET_RATIO,
         all_pass           ? "PASS"
         : misses_all_noise ? "MISS, every miss within the noise floor (rerun on a quiet machine, "
                              "or with a longer --seconds-per-point)"
                            : "MISS");
  for (size_t ci = 0; ci < N_CONCURRENCY; ci++) printf("   %s\n", verdicts[ci]);
  print_loadavg("at end");
  pthread_mutex_lock(&g_err.mu);
  if (g_err.first[0]) printf("first error seen: %s\n", g_err.first);
  pthread_mutex_unlock(&g_err.mu);

out:
  wk_grpc_client_close(b.client);
  {
    char what[128];
    stop_worker(&b, what, sizeof what);
    printf("worker: %s\n", what);
  }
  if (b.keep) {
    printf("kept %s (worker log: %s)\n", b.tmp, b.log_path);
  } else {
    remove_tree(b.tmp);
    if (b.scratch_parent && b.scratch[0]) remove_tree(b.scratch);
  }
  return rc;
}

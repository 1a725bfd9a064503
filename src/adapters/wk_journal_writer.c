/* wk_journal_writer.c: the core's thread encodes inputs into a single-producer,
 * single-consumer ring; the writer's thread frames them (length, CRC) into files and
 * rotates the files (wk_journal_writer.h). */
#define _GNU_SOURCE

#include "adapters/wk_journal_writer.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "adapters/wk_journal.h"
#include "core/wk_core_tap.h"
#include "lib/wk_alloc.h"
#include "lib/wk_buf.h"
#include "lib/wk_err.h"

#define RING_DEFAULT (4u << 20)
#define FLUSH_DEFAULT_MS 20u
#define STAGE_FLUSH (256u << 10) /* write() the staging buffer past this */
#define PAD_MARK UINT32_MAX      /* ring: the rest up to the end is unused */
#define PREFIX "core-journal-"
#define SUFFIX ".wkj"

struct wk_journal_writer {
  wk_journal_writer_config cfg;
  char *dir;
  wk_core *core;
  uint32_t msg_cap;
  wk_journal_header header;

  /* the ring: byte counters that only grow; position = counter % cap. head and tail
   * sit on lines of their own, and the core's thread reads tail only when its cached
   * copy says the ring is full: an input touches no line the writer's thread writes. */
  uint8_t *ring;
  size_t cap;
  _Alignas(64) _Atomic uint64_t head; /* the core's thread publishes */
  _Alignas(64) _Atomic uint64_t tail; /* the writer's thread frees */

  /* the core's thread only */
  _Alignas(64) uint64_t tail_seen;
  uint64_t seq, last_seq;
  uint64_t lost_from, lost_count;   /* inputs dropped and not yet reported */
  _Atomic uint64_t inputs, dropped; /* written by the core's thread alone (no RMW) */
  wk_journal_printer printer;       /* decisions */
  wk_buf line, payload;

  _Alignas(64) _Atomic uint64_t bytes, files, write_errors;

  /* the writer's thread */
  pthread_t thread;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  bool stop;
  int fd;
  uint64_t file_bytes, per_file;
  char stamp[32];
  wk_buf stage;
  char path[PATH_MAX]; /* under mu */
};

/* ---- the ring (core's thread) ------------------------------------------------------- */

static size_t align8(size_t n) { return (n + 7u) & ~(size_t)7u; }

/* Room for a payload of `n` bytes, contiguous; NULL when the ring is full. */
static uint8_t *ring_reserve(wk_journal_writer *w, size_t n, size_t *span) {
  size_t need = align8(WK_JOURNAL_RECORD_HEADER + n);
  uint64_t head = atomic_load_explicit(&w->head, memory_order_relaxed);
  size_t pos = (size_t)(head % w->cap);
  size_t pad = pos + need > w->cap ? w->cap - pos : 0;
  if (need > w->cap / 2) return NULL;
  if (head + pad + need - w->tail_seen > w->cap) {
    w->tail_seen = atomic_load_explicit(&w->tail, memory_order_acquire);
    if (head + pad + need - w->tail_seen > w->cap) return NULL;
  }
  if (pad) {
    uint32_t mark = PAD_MARK;
    memcpy(w->ring + pos, &mark, 4);
    pos = 0;
  }
  uint32_t len = (uint32_t)n;
  memcpy(w->ring + pos, &len, 4);
  *span = pad + need;
  return w->ring + pos + WK_JOURNAL_RECORD_HEADER;
}

static void ring_publish(wk_journal_writer *w, size_t span) {
  uint64_t head = atomic_load_explicit(&w->head, memory_order_relaxed);
  atomic_store_explicit(&w->head, head + span, memory_order_release);
}

/* Puts a ready payload (LOST, DECISION) into the ring; false when full. */
static bool ring_put(wk_journal_writer *w, const uint8_t *payload, size_t n) {
  size_t span;
  uint8_t *dst = ring_reserve(w, n, &span);
  if (!dst) return false;
  memcpy(dst, payload, n);
  ring_publish(w, span);
  return true;
}

/* Reports inputs dropped so far, once there is room for that. */
static bool flush_lost(wk_journal_writer *w) {
  if (!w->lost_count) return true;
  wk_buf_clear(&w->payload);
  wk_journal_encode_lost(&w->payload, w->lost_from, w->lost_count);
  if (!ring_put(w, w->payload.data, w->payload.len)) return false;
  w->lost_count = 0;
  return true;
}

/* A counter only the core's thread writes: no locked read-modify-write needed. */
static inline void bump(_Atomic uint64_t *c) {
  atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + 1, memory_order_relaxed);
}

static void tap_input(void *ctx, const wk_core_input *in) {
  wk_journal_writer *w = ctx;
  uint64_t seq = w->seq++;
  w->last_seq = seq;
  size_t n = wk_journal_input_size(in, w->msg_cap), span;
  uint8_t *dst = flush_lost(w) ? ring_reserve(w, n, &span) : NULL;
  if (!dst) {
    if (!w->lost_count) w->lost_from = seq;
    w->lost_count++;
    bump(&w->dropped);
    return;
  }
  wk_journal_encode_input(dst, in, seq, w->msg_cap);
  ring_publish(w, span);
  bump(&w->inputs);
}

static void tap_output(void *ctx, const wk_core_input *in, const wk_core_output *out) {
  wk_journal_writer *w = ctx;
  wk_buf_clear(&w->line);
  wk_journal_print(&w->printer, w->last_seq, in, out, &w->line);
  if (w->lost_count) return; /* the input was dropped: its decision goes too */
  wk_buf_clear(&w->payload);
  wk_journal_encode_decision(&w->payload, w->last_seq, (const char *)w->line.data, w->line.len);
  (void)ring_put(w, w->payload.data, w->payload.len); /* the replay reports a missing one */
}

/* ---- files (writer's thread, and open) ---------------------------------------------- */

static int name_cmp(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Removes the oldest journal files of the directory until at most `keep` remain. */
static void prune(wk_journal_writer *w, uint32_t keep) {
  DIR *d = opendir(w->dir);
  if (!d) return;
  char **names = NULL;
  size_t n = 0, cap = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    size_t len = strlen(e->d_name);
    if (strncmp(e->d_name, PREFIX, strlen(PREFIX)) != 0 || len < strlen(SUFFIX) ||
        strcmp(e->d_name + len - strlen(SUFFIX), SUFFIX) != 0) {
      continue;
    }
    if (n == cap) {
      cap = cap ? cap * 2 : 16;
      names = wk_xrealloc(names, cap * sizeof *names);
    }
    names[n++] = wk_xstrdup(e->d_name);
  }
  closedir(d);
  if (n) qsort(names, n, sizeof *names, name_cmp);
  for (size_t i = 0; i < n; i++) {
    if (n - i > keep) {
      char path[PATH_MAX];
      snprintf(path, sizeof path, "%s/%s", w->dir, names[i]);
      (void)unlink(path);
    }
    free(names[i]);
  }
  free(names);
}

static bool write_all(wk_journal_writer *w, const uint8_t *p, size_t n) {
  while (n > 0) {
    ssize_t k = write(w->fd, p, n);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) {
      atomic_fetch_add_explicit(&w->write_errors, 1, memory_order_relaxed);
      return false;
    }
    p += k;
    n -= (size_t)k;
    w->file_bytes += (uint64_t)k;
    atomic_fetch_add_explicit(&w->bytes, (uint64_t)k, memory_order_relaxed);
  }
  return true;
}

static void flush_stage(wk_journal_writer *w) {
  if (w->stage.len && w->fd >= 0) write_all(w, w->stage.data, w->stage.len);
  wk_buf_clear(&w->stage);
}

/* Closes the current file and starts the next, whose records begin at input `first_seq`. */
static bool open_next(wk_journal_writer *w, uint64_t first_seq, char *err, size_t err_len) {
  flush_stage(w);
  if (w->fd >= 0) close(w->fd);
  w->fd = -1;
  prune(w, w->cfg.files - 1);
  char path[PATH_MAX];
  uint32_t index = (uint32_t)atomic_load(&w->files);
  snprintf(path, sizeof path, "%s/" PREFIX "%s-p%u-%06u" SUFFIX, w->dir, w->stamp, w->header.pid,
           index);
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0640);
  if (fd < 0) {
    wk_errf(err, err_len, "cannot create %s: %s", path, strerror(errno));
    atomic_fetch_add_explicit(&w->write_errors, 1, memory_order_relaxed);
    return false;
  }
  w->fd = fd;
  w->file_bytes = 0;
  atomic_fetch_add(&w->files, 1);
  pthread_mutex_lock(&w->mu);
  snprintf(w->path, sizeof w->path, "%s", path);
  pthread_mutex_unlock(&w->mu);
  w->header.file_index = index;
  w->header.first_seq = first_seq;
  wk_journal_file_header(&w->stage);
  wk_buf payload = {0};
  wk_journal_encode_header(&payload, &w->header);
  wk_journal_frame(&w->stage, payload.data, payload.len);
  wk_buf_free(&payload);
  return true;
}

/* Moves everything the ring holds into files. */
static void drain(wk_journal_writer *w) {
  uint64_t head = atomic_load_explicit(&w->head, memory_order_acquire);
  uint64_t tail = atomic_load_explicit(&w->tail, memory_order_relaxed);
  while (tail < head) {
    size_t pos = (size_t)(tail % w->cap);
    uint32_t len;
    memcpy(&len, w->ring + pos, 4);
    if (len == PAD_MARK) {
      tail += w->cap - pos;
      continue;
    }
    const uint8_t *payload = w->ring + pos + WK_JOURNAL_RECORD_HEADER;
    if (payload[0] != WK_JREC_DECISION && w->file_bytes + w->stage.len >= w->per_file) {
      uint64_t seq;
      memcpy(&seq, payload + (payload[0] == WK_JREC_INPUT ? 16 : 8), 8);
      char err[256];
      (void)open_next(w, seq, err, sizeof err); /* counted; records go nowhere until one opens */
    }
    if (w->fd >= 0) wk_journal_frame(&w->stage, payload, len);
    tail += align8(WK_JOURNAL_RECORD_HEADER + len);
    if (w->stage.len >= STAGE_FLUSH) {
      flush_stage(w);
      atomic_store_explicit(&w->tail, tail, memory_order_release);
    }
  }
  flush_stage(w); /* in the file before the tail says so (wk_journal_writer_sync) */
  atomic_store_explicit(&w->tail, tail, memory_order_release);
}

static void *writer_main(void *arg) {
  wk_journal_writer *w = arg;
  pthread_mutex_lock(&w->mu);
  while (!w->stop) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += (long)w->cfg.flush_ms * 1000000L;
    ts.tv_sec += ts.tv_nsec / 1000000000L;
    ts.tv_nsec %= 1000000000L;
    pthread_cond_timedwait(&w->cv, &w->mu, &ts);
    pthread_mutex_unlock(&w->mu);
    drain(w);
    pthread_mutex_lock(&w->mu);
  }
  pthread_mutex_unlock(&w->mu);
  drain(w);
  return NULL;
}

/* ---- lifecycle ----------------------------------------------------------------------- */

static void free_writer(wk_journal_writer *w) {
  if (w->fd >= 0) close(w->fd);
  wk_journal_printer_free(&w->printer);
  wk_buf_free(&w->line);
  wk_buf_free(&w->payload);
  wk_buf_free(&w->stage);
  pthread_mutex_destroy(&w->mu);
  pthread_cond_destroy(&w->cv);
  free(w->ring);
  free(w->dir);
  free(w);
}

wk_journal_writer *wk_journal_writer_open(const wk_journal_writer_config *cfg, wk_core *core,
                                          int64_t mono_ms, int64_t wall_ms, char *err,
                                          size_t err_len) {
  if (!cfg->dir || !cfg->dir[0]) {
    wk_errf(err, err_len, "core journal: no directory");
    return NULL;
  }
  if (mkdir(cfg->dir, 0750) != 0 && errno != EEXIST) {
    wk_errf(err, err_len, "core journal: cannot create %s: %s", cfg->dir, strerror(errno));
    return NULL;
  }
  wk_journal_writer *w = wk_xcalloc(1, sizeof *w);
  w->cfg = *cfg;
  if (w->cfg.files < 2) w->cfg.files = 2;
  if (!w->cfg.flush_ms) w->cfg.flush_ms = FLUSH_DEFAULT_MS;
  w->cap = align8(cfg->ring_bytes ? cfg->ring_bytes : RING_DEFAULT);
  if (w->cap < 4096) w->cap = 4096;
  w->ring = wk_xmalloc(w->cap);
  memset(w->ring, 0, w->cap); /* touched now: no page fault on the core's thread later */
  w->dir = wk_xstrdup(cfg->dir);
  w->cfg.dir = w->dir;
  w->cfg.version = NULL;
  w->fd = -1;
  w->per_file = cfg->max_bytes / w->cfg.files;
  if (w->per_file < 4096) w->per_file = 4096;
  w->core = core;
  pthread_mutex_init(&w->mu, NULL);
  pthread_cond_init(&w->cv, NULL);

  wk_journal_header *h = &w->header;
  h->core = *wk_core_get_config(core);
  h->core.allocator = (wk_allocator){0};
  h->wall_ms = wall_ms;
  h->mono_ms = mono_ms;
  h->pid = (uint32_t)getpid();
  h->run_id = ((uint64_t)wall_ms << 22) ^ ((uint64_t)h->pid * UINT64_C(0x9E3779B97F4A7C15));
  h->decisions = cfg->decisions;
  snprintf(h->version, sizeof h->version, "%s", cfg->version ? cfg->version : "");
  w->msg_cap = h->core.max_failure_message_bytes + 1;
  time_t secs = (time_t)(wall_ms / 1000);
  struct tm tm;
  gmtime_r(&secs, &tm);
  strftime(w->stamp, sizeof w->stamp, "%Y%m%dT%H%M%SZ", &tm);
  if (cfg->decisions) wk_journal_printer_init(&w->printer, h);

  char why[512];
  if (!open_next(w, 0, why, sizeof why)) {
    wk_errf(err, err_len, "core journal: %s", why);
    free_writer(w);
    return NULL;
  }
  flush_stage(w); /* the header is on disk before the first input */
  if (pthread_create(&w->thread, NULL, writer_main, w) != 0) {
    wk_errf(err, err_len, "core journal: cannot start its thread");
    free_writer(w);
    return NULL;
  }
  wk_core_tap tap = {.input = tap_input, .output = cfg->decisions ? tap_output : NULL, .ctx = w};
  wk_core_set_tap(core, &tap);
  return w;
}

void wk_journal_writer_close(wk_journal_writer *w) {
  if (!w) return;
  wk_core_set_tap(w->core, NULL);
  pthread_mutex_lock(&w->mu);
  w->stop = true;
  pthread_cond_signal(&w->cv);
  pthread_mutex_unlock(&w->mu);
  pthread_join(w->thread, NULL);
  free_writer(w);
}

void wk_journal_writer_sync(wk_journal_writer *w) {
  uint64_t target = atomic_load_explicit(&w->head, memory_order_acquire);
  while (atomic_load_explicit(&w->tail, memory_order_acquire) < target) {
    pthread_mutex_lock(&w->mu);
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
    struct timespec ts = {0, 1000000L};
    nanosleep(&ts, NULL);
  }
}

wk_journal_stats wk_journal_writer_stats(const wk_journal_writer *w) {
  wk_journal_writer *m = (wk_journal_writer *)(uintptr_t)w;
  return (wk_journal_stats){
      .inputs = atomic_load(&m->inputs),
      .dropped = atomic_load(&m->dropped),
      .bytes = atomic_load(&m->bytes),
      .files = atomic_load(&m->files),
      .write_errors = atomic_load(&m->write_errors),
  };
}

void wk_journal_writer_current_file(wk_journal_writer *w, char *out, size_t out_len) {
  pthread_mutex_lock(&w->mu);
  snprintf(out, out_len, "%s", w->path);
  pthread_mutex_unlock(&w->mu);
}

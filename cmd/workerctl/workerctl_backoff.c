/* workerctl_backoff.c: the per-worker back-off of the picking rule (README "Picking a
 * worker"). A worker that refused a new task (UNAVAILABLE: draining or shutting down;
 * RESOURCE_EXHAUSTED: no free slot) or could not be reached goes to the end of the
 * order for 2 s, doubling with each further failure up to 30 s, and for as long as its
 * etcd record has not been re-put since the failure (at most 30 s): a live worker
 * re-puts its record every heartbeat_interval_ms, a killed one never does, so a dead
 * worker's stale record costs one attempt. A success forgets the worker.
 *
 * workerctl runs once per command, so the table lives in a small file shared by the
 * invocations of one user: $WORKERCTL_STATE_DIR/backoff ("" turns it off), else
 * $XDG_RUNTIME_DIR/workerctl/backoff, else ~/.cache/workerctl/backoff. It holds at most
 * CTL_BACKOFF_MAX entries (the one due soonest is dropped for a new one). Updates are
 * merged under an exclusive flock, so concurrent invocations do not lose each other's
 * entries. Any problem with the file (unwritable, garbled) only disables the table. */
#define _GNU_SOURCE /* clock_gettime, flock */

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "lib/wk_alloc.h"
#include "workerctl.h"

#define CTL_BACKOFF_MAX 64u
#define CTL_BACKOFF_FIRST_MS 2000
#define CTL_BACKOFF_CAP_MS 30000
#define CTL_BACKOFF_ADDR_MAX 255u

typedef struct backoff_entry {
  char addr[CTL_BACKOFF_ADDR_MAX + 1];
  uint32_t fails;          /* consecutive failures */
  int64_t until_ms;        /* skipped before this (unix ms) */
  int64_t failed_at_ms;    /* the last failure */
  int64_t seen_updated_ms; /* the record's updated_unix_ms at the last failure */
} backoff_entry;

typedef struct backoff_op {
  char addr[CTL_BACKOFF_ADDR_MAX + 1];
  bool ok;
  int64_t seen_updated_ms;
} backoff_op;

struct ctl_backoff {
  char path[4096]; /* "" = no file: the table lives for this process only */
  backoff_entry entries[CTL_BACKOFF_MAX];
  size_t n;
  backoff_op *ops; /* changes made by this process, applied again when saving */
  size_t n_ops;
};

static int64_t wall_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The state file's path into out ("" when there is none), its directory created. */
static void state_path(char *out, size_t len) {
  const char *dir = getenv("WORKERCTL_STATE_DIR");
  const char *runtime = getenv("XDG_RUNTIME_DIR");
  const char *home = getenv("HOME");
  out[0] = '\0';
  char d[3072];
  int n;
  if (dir) {
    if (!*dir) return;
    n = snprintf(d, sizeof d, "%s", dir);
  } else if (runtime && *runtime) {
    n = snprintf(d, sizeof d, "%.2000s/workerctl", runtime);
  } else if (home && *home) {
    char cache[2100];
    snprintf(cache, sizeof cache, "%.2000s/.cache", home);
    (void)mkdir(cache, 0700);
    n = snprintf(d, sizeof d, "%.2000s/.cache/workerctl", home);
  } else {
    return;
  }
  if (n < 0 || (size_t)n >= sizeof d) return;
  if (mkdir(d, 0700) != 0 && errno != EEXIST) return;
  snprintf(out, len, "%.3072s/backoff", d);
}

static backoff_entry *find(ctl_backoff *b, const char *addr) {
  for (size_t i = 0; i < b->n; i++) {
    if (strcmp(b->entries[i].addr, addr) == 0) return &b->entries[i];
  }
  return NULL;
}

/* An entry from the future (the clock went back) or past every bound is dropped. */
static bool entry_sane(const backoff_entry *e, int64_t now) {
  return e->failed_at_ms <= now + 1000 && e->until_ms <= now + CTL_BACKOFF_CAP_MS + 1000 &&
         (e->until_ms > now || e->failed_at_ms + CTL_BACKOFF_CAP_MS > now);
}

/* Reads the table from an open file (from its start). */
static void read_entries(ctl_backoff *b, FILE *f) {
  int64_t now = wall_ms();
  char line[512];
  b->n = 0;
  while (b->n < CTL_BACKOFF_MAX && fgets(line, sizeof line, f)) {
    backoff_entry e = {0};
    char addr[CTL_BACKOFF_ADDR_MAX + 1];
    if (sscanf(line, "%255s %" SCNu32 " %" SCNd64 " %" SCNd64 " %" SCNd64, addr, &e.fails,
               &e.until_ms, &e.failed_at_ms, &e.seen_updated_ms) != 5)
      continue;
    snprintf(e.addr, sizeof e.addr, "%s", addr);
    if (entry_sane(&e, now) && !find(b, e.addr)) b->entries[b->n++] = e;
  }
}

ctl_backoff *ctl_backoff_load(void) {
  ctl_backoff *b = wk_xcalloc(1, sizeof *b);
  state_path(b->path, sizeof b->path);
  if (!b->path[0]) return b;
  int fd = open(b->path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return b;
  FILE *f = fdopen(fd, "r");
  if (!f) {
    close(fd);
    return b;
  }
  if (flock(fd, LOCK_SH) == 0) read_entries(b, f);
  fclose(f); /* releases the lock */
  return b;
}

bool ctl_backoff_active(const ctl_backoff *b, const char *addr, int64_t record_updated_ms) {
  int64_t now = wall_ms();
  for (size_t i = 0; b && i < b->n; i++) {
    const backoff_entry *e = &b->entries[i];
    if (strcmp(e->addr, addr) != 0) continue;
    if (now < e->until_ms) return true;
    /* not re-put since it failed: it is likely gone (its lease has not expired yet) */
    return record_updated_ms <= e->seen_updated_ms && now < e->failed_at_ms + CTL_BACKOFF_CAP_MS;
  }
  return false;
}

/* Applies one change to the table. */
static void apply(ctl_backoff *b, const backoff_op *op) {
  backoff_entry *e = find(b, op->addr);
  if (op->ok) {
    if (e) *e = b->entries[--b->n];
    return;
  }
  int64_t now = wall_ms();
  if (!e && b->n == CTL_BACKOFF_MAX) { /* full: the entry due soonest makes room */
    size_t k = 0;
    for (size_t i = 1; i < b->n; i++) {
      if (b->entries[i].until_ms < b->entries[k].until_ms) k = i;
    }
    b->entries[k] = b->entries[--b->n];
  }
  if (!e) {
    e = &b->entries[b->n++];
    *e = (backoff_entry){0};
    snprintf(e->addr, sizeof e->addr, "%s", op->addr);
  }
  e->fails = e->fails < 16 ? e->fails + 1 : e->fails;
  int64_t wait = CTL_BACKOFF_FIRST_MS << (e->fails - 1);
  e->until_ms = now + (wait < CTL_BACKOFF_CAP_MS ? wait : CTL_BACKOFF_CAP_MS);
  e->failed_at_ms = now;
  e->seen_updated_ms = op->seen_updated_ms;
}

static void record(ctl_backoff *b, const char *addr, bool ok, int64_t seen_updated_ms) {
  if (strlen(addr) > CTL_BACKOFF_ADDR_MAX || strpbrk(addr, " \t\n")) return;
  b->ops = wk_xrealloc(b->ops, (b->n_ops + 1) * sizeof *b->ops);
  backoff_op *op = &b->ops[b->n_ops++];
  *op = (backoff_op){.ok = ok, .seen_updated_ms = seen_updated_ms};
  snprintf(op->addr, sizeof op->addr, "%s", addr);
  apply(b, op);
}

void ctl_backoff_fail(ctl_backoff *b, const char *addr, int64_t record_updated_ms) {
  record(b, addr, false, record_updated_ms);
}

void ctl_backoff_ok(ctl_backoff *b, const char *addr) { record(b, addr, true, 0); }

void ctl_backoff_save(ctl_backoff *b) {
  if (!b) return;
  if (b->path[0] && b->n_ops > 0) {
    int fd = open(b->path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    FILE *f = fd >= 0 ? fdopen(fd, "r+") : NULL;
    if (fd >= 0 && !f) close(fd);
    if (f && flock(fd, LOCK_EX) == 0) {
      /* the file as other invocations left it, with this process's changes on top */
      read_entries(b, f);
      size_t n_before = b->n;
      backoff_entry *before = wk_xcalloc(n_before + 1, sizeof *before);
      memcpy(before, b->entries, n_before * sizeof *before);
      for (size_t i = 0; i < b->n_ops; i++) apply(b, &b->ops[i]);
      bool same = n_before == b->n && memcmp(before, b->entries, b->n * sizeof *before) == 0;
      free(before);
      rewind(f);
      for (size_t i = 0; !same && i < b->n; i++) {
        const backoff_entry *e = &b->entries[i];
        fprintf(f, "%s %" PRIu32 " %" PRId64 " %" PRId64 " %" PRId64 "\n", e->addr, e->fails,
                e->until_ms, e->failed_at_ms, e->seen_updated_ms);
      }
      fflush(f);
      if (!same && ftruncate(fd, ftell(f)) != 0) { /* a longer old table: best effort */
      }
    }
    if (f) fclose(f);
  }
  free(b->ops);
  free(b);
}

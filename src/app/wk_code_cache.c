/* wk_code_cache.c: see wk_code_cache.h. */
#include "app/wk_code_cache.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <unistd.h>

#include "adapters/wk_code_store.h"
#include "lib/wk_alloc.h"
#include "lib/wk_hash.h"

#define BUCKETS 256u /* functions hash into these; chains are short for any real store */

/* What changes a function's resolution: CURRENT renamed over or rewritten, an epoch
 * directory appearing or going, the directory itself going. */
#define FN_MASK                                                                       \
  (IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO | IN_MODIFY | IN_CLOSE_WRITE | \
   IN_DELETE_SELF | IN_MOVE_SELF)
/* A function directory appearing or going under the root, or the root itself going. */
#define ROOT_MASK \
  (IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO | IN_DELETE_SELF | IN_MOVE_SELF)

typedef struct entry {
  struct entry *next; /* in its bucket */
  int wd;             /* watch on root/<function>; -1 = none */
  bool valid;         /* epoch and path are CURRENT's */
  bool changed;       /* the directory changed since the last prune_due (set at creation) */
  uint64_t epoch;
  char *path;
  char function[WK_CODE_STORE_NAME_MAX + 1];
} entry;

struct wk_code_cache {
  pthread_mutex_t mu;
  char *root;
  int fd;      /* inotify, non-blocking; -1 = none */
  int root_wd; /* -1 = not watched (yet, or any more) */
  /* bumped by every invalidation: a lookup that read the disk keeps its answer only
   * when nothing changed meanwhile */
  uint64_t gen;
  bool drain_due; /* wk_code_cache_sync_lazily: the next lookup drains first */
  entry *buckets[BUCKETS];
  wk_code_cache_stats stats;
};

wk_code_cache *wk_code_cache_create(const char *root) {
  wk_code_cache *c = wk_xcalloc(1, sizeof *c);
  pthread_mutex_init(&c->mu, NULL);
  c->root = wk_xstrdup(root ? root : "");
  c->fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  c->root_wd = -1;
  return c;
}

void wk_code_cache_destroy(wk_code_cache *c) {
  if (!c) return;
  for (size_t i = 0; i < BUCKETS; i++) {
    for (entry *e = c->buckets[i], *next; e; e = next) {
      next = e->next;
      free(e->path);
      free(e);
    }
  }
  if (c->fd >= 0) close(c->fd);
  pthread_mutex_destroy(&c->mu);
  free(c->root);
  free(c);
}

static entry **bucket(wk_code_cache *c, const char *function) {
  return &c->buckets[wk_hash64(function, strlen(function), 0) % BUCKETS];
}

static entry *find(wk_code_cache *c, const char *function) {
  for (entry *e = *bucket(c, function); e; e = e->next)
    if (strcmp(e->function, function) == 0) return e;
  return NULL;
}

static void invalidate(wk_code_cache *c, entry *e) {
  c->gen++;
  e->changed = true;
  if (!e->valid) return;
  e->valid = false;
  c->stats.invalidations++;
}

static void invalidate_all(wk_code_cache *c) {
  c->gen++;
  for (size_t i = 0; i < BUCKETS; i++)
    for (entry *e = c->buckets[i]; e; e = e->next) invalidate(c, e);
}

/* One inotify event (under mu). */
static void on_event(wk_code_cache *c, const struct inotify_event *ev) {
  if (ev->mask & IN_Q_OVERFLOW) { /* events were lost: nothing cached can be trusted */
    invalidate_all(c);
    return;
  }
  bool gone = (ev->mask & (IN_IGNORED | IN_DELETE_SELF | IN_MOVE_SELF | IN_UNMOUNT)) != 0;
  if (ev->wd == c->root_wd) {
    if (gone) {
      if (ev->mask & IN_IGNORED) c->root_wd = -1;
      invalidate_all(c);
    } else if (ev->len && ev->name[0]) {
      entry *e = find(c, ev->name);
      if (e) invalidate(c, e);
    }
    return;
  }
  for (size_t i = 0; i < BUCKETS; i++) {
    for (entry *e = c->buckets[i]; e; e = e->next) {
      if (e->wd != ev->wd) continue;
      if (ev->mask & IN_IGNORED) e->wd = -1; /* the watch is gone with the directory */
      /* staging directories, the lock file and epochs being removed never change
       * what CURRENT resolves to */
      if (gone || !ev->len || ev->name[0] != '.') invalidate(c, e);
      return;
    }
  }
}

/* Reads every pending event (under mu): one read() when nothing changed. */
static void drain(wk_code_cache *c) {
  if (c->fd < 0) return;
  c->drain_due = false;
  _Alignas(struct inotify_event) char buf[4096];
  for (;;) {
    ssize_t n = read(c->fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return; /* EAGAIN: nothing more */
    for (char *p = buf; p < buf + n;) {
      const struct inotify_event *ev = (const struct inotify_event *)(void *)p;
      on_event(c, ev);
      p += sizeof *ev + ev->len;
    }
  }
}

/* Makes sure the root and `function`'s directory are watched (under mu); false when
 * they cannot be (then the disk answers). */
static bool watch(wk_code_cache *c, entry *e) {
  if (c->root_wd < 0) {
    c->root_wd = inotify_add_watch(c->fd, c->root, ROOT_MASK);
    if (c->root_wd < 0) return false;
  }
  if (e->wd < 0) {
    char dir[PATH_MAX];
    int n = snprintf(dir, sizeof dir, "%s/%s", c->root, e->function);
    if (n < 0 || (size_t)n >= sizeof dir) return false;
    e->wd = inotify_add_watch(c->fd, dir, FN_MASK);
    if (e->wd < 0) return false;
  }
  return true;
}

/* Under c->mu, drained: the cached answer for `e`, when it has one that fits. */
static bool hit(wk_code_cache *c, const entry *e, uint64_t *epoch, char *path, size_t path_len) {
  if (!e || !e->valid) return false;
  size_t n = strlen(e->path);
  if (n >= path_len) return false;
  *epoch = e->epoch;
  memcpy(path, e->path, n + 1);
  c->stats.hits++;
  return true;
}

bool wk_code_cache_lookup(wk_code_cache *c, const char *function, uint64_t requested_epoch,
                          uint64_t *epoch, char *path, size_t path_len) {
  if (requested_epoch != 0 || c->fd < 0) return false;
  pthread_mutex_lock(&c->mu);
  if (c->drain_due) drain(c);
  bool ok = hit(c, find(c, function), epoch, path, path_len);
  pthread_mutex_unlock(&c->mu);
  return ok;
}

int wk_code_cache_fd(const wk_code_cache *c) { return c->fd; }

void wk_code_cache_sync(wk_code_cache *c) {
  if (c->fd < 0) return;
  pthread_mutex_lock(&c->mu);
  drain(c);
  pthread_mutex_unlock(&c->mu);
}

void wk_code_cache_sync_lazily(wk_code_cache *c) {
  if (c->fd < 0) return;
  pthread_mutex_lock(&c->mu);
  c->drain_due = true;
  pthread_mutex_unlock(&c->mu);
}

int wk_code_cache_resolve(wk_code_cache *c, const char *function, uint64_t requested_epoch,
                          uint64_t *epoch, char *path, size_t path_len, char *err, size_t err_len) {
  if (requested_epoch != 0 || c->fd < 0 || !wk_code_store_valid_function_name(function)) {
    return wk_code_store_resolve(c->root, function, requested_epoch, epoch, path, path_len, err,
                                 err_len);
  }
  pthread_mutex_lock(&c->mu);
  drain(c);
  entry *e = find(c, function);
  if (hit(c, e, epoch, path, path_len)) {
    pthread_mutex_unlock(&c->mu);
    return 0;
  }
  if (!e) {
    e = wk_xcalloc(1, sizeof *e);
    e->wd = -1;
    e->changed = true; /* never pruned by this process yet */
    snprintf(e->function, sizeof e->function, "%s", function);
    entry **b = bucket(c, function);
    e->next = *b;
    *b = e;
  }
  /* watched before the disk is read: a change after this point shows in the drain below */
  bool watched = watch(c, e);
  uint64_t gen = c->gen;
  c->stats.misses++;
  pthread_mutex_unlock(&c->mu);
  int rc = wk_code_store_resolve(c->root, function, 0, epoch, path, path_len, err, err_len);
  if (rc != 0 || !watched) return rc;
  pthread_mutex_lock(&c->mu);
  drain(c);
  if (c->gen == gen) { /* nothing changed while the disk was read */
    free(e->path);
    e->path = wk_xstrdup(path);
    e->epoch = *epoch;
    e->valid = true;
  }
  pthread_mutex_unlock(&c->mu);
  return 0;
}

bool wk_code_cache_prune_due(wk_code_cache *c, const char *function, uint64_t epoch) {
  if (c->fd < 0) return true;
  pthread_mutex_lock(&c->mu);
  entry *e = find(c, function);
  bool due = !e || e->wd < 0 || e->changed || !e->valid || e->epoch != epoch;
  if (e && e->wd >= 0) e->changed = false;
  pthread_mutex_unlock(&c->mu);
  return due;
}

wk_code_cache_stats wk_code_cache_get_stats(wk_code_cache *c) {
  pthread_mutex_lock(&c->mu);
  wk_code_cache_stats s = c->stats;
  s.watching = c->fd >= 0;
  pthread_mutex_unlock(&c->mu);
  return s;
}

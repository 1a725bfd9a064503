/* wk_reaper.c: orphans of executors end (see wk_reaper.h). */
#include "adapters/wk_reaper.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "lib/wk_alloc.h"
#include "lib/wk_err.h"

#define WAIT_ROUNDS 2000 /* wk_reaper_sweep(true): at most this many 1 ms pauses */

typedef struct pid_list {
  pid_t *pids;
  size_t n, cap;
} pid_list;

static void pid_list_add(pid_list *l, pid_t pid) {
  if (l->n == l->cap) {
    l->cap = l->cap ? l->cap * 2 : 16;
    l->pids = wk_xrealloc(l->pids, l->cap * sizeof *l->pids);
  }
  l->pids[l->n++] = pid;
}

static bool pid_list_has(const pid_list *l, pid_t pid) {
  for (size_t i = 0; i < l->n; i++) {
    if (l->pids[i] == pid) return true;
  }
  return false;
}

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pid_list owned; /* children someone else waits for (wk_reaper_own) */
static bool started;

static void own_locked(pid_t pid) { pid_list_add(&owned, pid); }

static bool owned_locked(pid_t pid) { return pid_list_has(&owned, pid); }

/* The parent of process `pid` from /proc/<pid>/stat, or -1 (gone, unreadable). */
static pid_t parent_of(const char *pid) {
  char path[64], buf[512];
  snprintf(path, sizeof path, "/proc/%s/stat", pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return -1;
  buf[n] = '\0';
  const char *p = strrchr(buf, ')'); /* after "pid (comm)": comm may hold anything */
  if (!p) return -1;
  char state;
  int ppid;
  if (sscanf(p + 1, " %c %d", &state, &ppid) != 2) return -1;
  return (pid_t)ppid;
}

/* Adds the pids in one /proc/self/task/<tid>/children file (space-separated decimals)
 * to `l`; a thread that ended meanwhile has none. */
static void read_children_file(const char *path, pid_list *l) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  char buf[4096];
  long v = 0;
  bool in_number = false;
  for (;;) {
    ssize_t n = read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    for (ssize_t i = 0; i < n; i++) {
      if (isdigit((unsigned char)buf[i])) {
        v = v * 10 + (buf[i] - '0');
        in_number = true;
      } else if (in_number) {
        pid_list_add(l, (pid_t)v);
        v = 0;
        in_number = false;
      }
    }
    if (n <= 0) break;
  }
  if (in_number) pid_list_add(l, (pid_t)v);
  close(fd);
}

static bool walk_proc_only;         /* wk_reaper__walk_proc */
static int has_children_files = -1; /* the kernel's CONFIG_PROC_CHILDREN: probed once */

/* The children of every thread of this process from /proc/self/task/<tid>/children
 * (CONFIG_PROC_CHILDREN): as many small reads as the process has threads, where the
 * walk of /proc reads the stat of every process on the host (on a host with thousands,
 * thousands of opens a second on the worker's loop). A child's parent is the thread
 * that forked it, and an orphan handed to this subreaper goes to one of its threads,
 * so every thread's file is read. False when the kernel has no such files. The list is
 * taken before anyone is signalled: a child reaped while its parent's file is being read
 * could make the read skip another (a sweep that waits looks again; a periodic one
 * comes back a second later). */
static bool children_of_threads(pid_list *l) {
  char path[64];
  if (has_children_files < 0) {
    snprintf(path, sizeof path, "/proc/self/task/%ld/children", (long)getpid());
    has_children_files = access(path, R_OK) == 0;
  }
  if (walk_proc_only || !has_children_files) return false;
  DIR *d = opendir("/proc/self/task");
  if (!d) return false;
  const struct dirent *ent;
  while ((ent = readdir(d)) != NULL) {
    if (!isdigit((unsigned char)ent->d_name[0])) continue;
    snprintf(path, sizeof path, "/proc/self/task/%.16s/children", ent->d_name);
    read_children_file(path, l);
  }
  closedir(d);
  return true;
}

/* The same list from the parent field of every process in /proc. */
static void children_from_proc_walk(pid_list *l) {
  DIR *d = opendir("/proc");
  if (!d) return;
  pid_t me = getpid();
  const struct dirent *ent;
  while ((ent = readdir(d)) != NULL) {
    if (!isdigit((unsigned char)ent->d_name[0])) continue;
    if (parent_of(ent->d_name) != me) continue;
    pid_list_add(l, (pid_t)atoi(ent->d_name));
  }
  closedir(d);
}

/* Calls `fn(pid, arg)` for every process whose parent is this process. */
static void each_child(void (*fn)(pid_t, void *), void *arg) {
  pid_list l = {0};
  if (!children_of_threads(&l)) children_from_proc_walk(&l);
  for (size_t i = 0; i < l.n; i++) fn(l.pids[i], arg);
  free(l.pids);
}

void wk_reaper__walk_proc(bool on) {
  pthread_mutex_lock(&lock);
  walk_proc_only = on;
  pthread_mutex_unlock(&lock);
}

static void record_foreign(pid_t pid, void *arg) {
  (void)arg;
  if (!owned_locked(pid)) own_locked(pid);
}

int wk_reaper_start(char *err, size_t len) {
  pthread_mutex_lock(&lock);
  int rc = 0;
  if (!started) {
    if (prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0) {
      wk_errf(err, len, "cannot become a child subreaper: %s", strerror(errno));
      rc = -1;
    } else {
      each_child(record_foreign, NULL); /* children from before: not executors' */
      started = true;
    }
  }
  pthread_mutex_unlock(&lock);
  return rc;
}

void wk_reaper_own(pid_t pid) {
  pthread_mutex_lock(&lock);
  own_locked(pid);
  pthread_mutex_unlock(&lock);
}

void wk_reaper_fork_begin(void) { pthread_mutex_lock(&lock); }

void wk_reaper_fork_end(pid_t pid) {
  if (pid > 0) own_locked(pid);
  pthread_mutex_unlock(&lock);
}

void wk_reaper_disown(pid_t pid) {
  pthread_mutex_lock(&lock);
  for (size_t i = 0; i < owned.n; i++) {
    if (owned.pids[i] == pid) {
      owned.pids[i] = owned.pids[--owned.n];
      break;
    }
  }
  pthread_mutex_unlock(&lock);
}

typedef struct sweep_state {
  pid_list signalled;   /* every process this sweep signalled, once each */
  unsigned new_signals; /* processes signalled for the first time in this look */
  unsigned left;        /* orphans still there (alive, or dead and not reaped yet) */
} sweep_state;

static void end_orphan(pid_t pid, void *arg) {
  sweep_state *s = arg;
  if (owned_locked(pid)) return;
  /* a dying orphan (a zombie until reaped) takes the signal again in the next look:
   * counted once */
  if (kill(pid, SIGKILL) == 0 && !pid_list_has(&s->signalled, pid)) {
    pid_list_add(&s->signalled, pid);
    s->new_signals++;
  }
  pid_t r;
  do {
    r = waitpid(pid, NULL, WNOHANG);
  } while (r < 0 && errno == EINTR);
  if (r == 0) s->left++; /* still dying */
}

unsigned wk_reaper_sweep(bool wait) {
  sweep_state s = {{0}, 0, 0};
  for (int round = 0; round < WAIT_ROUNDS; round++) {
    s.new_signals = 0;
    s.left = 0;
    pthread_mutex_lock(&lock);
    each_child(end_orphan, &s);
    pthread_mutex_unlock(&lock);
    if (!wait || (s.left == 0 && s.new_signals == 0)) break;
    struct timespec ms = {0, 1000000};
    nanosleep(&ms, NULL);
  }
  unsigned signalled = (unsigned)s.signalled.n;
  free(s.signalled.pids);
  return signalled;
}

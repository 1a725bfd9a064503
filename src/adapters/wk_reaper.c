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

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pid_t *owned;
static size_t n_owned, cap_owned;
static bool started;

static void own_locked(pid_t pid) {
  if (n_owned == cap_owned) {
    cap_owned = cap_owned ? cap_owned * 2 : 16;
    owned = wk_xrealloc(owned, cap_owned * sizeof *owned);
  }
  owned[n_owned++] = pid;
}

static bool owned_locked(pid_t pid) {
  for (size_t i = 0; i < n_owned; i++) {
    if (owned[i] == pid) return true;
  }
  return false;
}

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

/* Calls `fn(pid, arg)` for every process whose parent is this process. */
static void each_child(void (*fn)(pid_t, void *), void *arg) {
  DIR *d = opendir("/proc");
  if (!d) return;
  pid_t me = getpid();
  const struct dirent *ent;
  while ((ent = readdir(d)) != NULL) {
    if (!isdigit((unsigned char)ent->d_name[0])) continue;
    if (parent_of(ent->d_name) != me) continue;
    fn((pid_t)atoi(ent->d_name), arg);
  }
  closedir(d);
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
  for (size_t i = 0; i < n_owned; i++) {
    if (owned[i] == pid) {
      owned[i] = owned[--n_owned];
      break;
    }
  }
  pthread_mutex_unlock(&lock);
}

typedef struct sweep_state {
  unsigned signalled;
  unsigned left; /* orphans still there (alive, or dead and not reaped yet) */
} sweep_state;

static void end_orphan(pid_t pid, void *arg) {
  sweep_state *s = arg;
  if (owned_locked(pid)) return;
  if (kill(pid, SIGKILL) == 0) s->signalled++;
  pid_t r;
  do {
    r = waitpid(pid, NULL, WNOHANG);
  } while (r < 0 && errno == EINTR);
  if (r == 0) s->left++; /* still dying */
}

unsigned wk_reaper_sweep(bool wait) {
  unsigned signalled = 0;
  for (int round = 0; round < WAIT_ROUNDS; round++) {
    sweep_state s = {0, 0};
    pthread_mutex_lock(&lock);
    each_child(end_orphan, &s);
    pthread_mutex_unlock(&lock);
    signalled += s.signalled;
    if (!wait || (s.left == 0 && s.signalled == 0)) break;
    struct timespec ms = {0, 1000000};
    nanosleep(&ms, NULL);
  }
  return signalled;
}

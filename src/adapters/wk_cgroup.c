/* wk_cgroup.c: per-executor control groups (v1 memory + pids, or v2). See wk_cgroup.h. */
#include "adapters/wk_cgroup.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "lib/wk_alloc.h"
#include "lib/wk_err.h"
#include "lib/wk_log.h"

#define DIR_PREFIX "wk-"
#define CLOSE_WAIT_MS 1000 /* wk_cgroup_close waits this long for processes to exit */
#define KILL_ROUNDS 64     /* a fork bomb refills a group while it is killed: rounds */

struct wk_cgroup_group {
  wk_cgroup_group *next;
  wk_cgroup *cg;
  char name[32];
  bool released;
};

struct wk_cgroup {
  int version;             /* 1 or 2 */
  char mem_dir[PATH_MAX];  /* v1: <own memory group>/wk-...; v2: <own group>/wk-... */
  char pids_dir[PATH_MAX]; /* v1: <own pids group>/wk-... ("" when no pids limit) */
  char self_dir[PATH_MAX]; /* v2: the group the worker was in before it moved itself */
  wk_cgroup_limits limits;
  uint64_t seq;
  wk_cgroup_group *groups; /* live and released-but-busy */
};

/* ---- small file helpers ---------------------------------------------------------- */

/* Reads up to len-1 bytes of `path` into buf, NUL-terminated. Returns the length or -1. */
static ssize_t read_text(const char *path, char *buf, size_t len) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  size_t got = 0;
  while (got + 1 < len) {
    ssize_t n = read(fd, buf + got, len - 1 - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += (size_t)n;
  }
  close(fd);
  buf[got] = '\0';
  return (ssize_t)got;
}

/* Writes `text` to an existing control file. Returns 0 or -1 with errno set. */
static int write_text(const char *path, const char *text) {
  int fd = open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  size_t len = strlen(text);
  ssize_t n = write(fd, text, len);
  int saved = errno;
  close(fd);
  if (n != (ssize_t)len) {
    errno = n < 0 ? saved : EIO;
    return -1;
  }
  return 0;
}

/* The value after `key ` on a line of a "key value" file (memory.stat, memory.events,
 * memory.oom_control); false when absent. */
static bool keyed_value(const char *text, const char *key, uint64_t *out) {
  size_t klen = strlen(key);
  for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
    if (strncmp(p, key, klen) == 0 && p[klen] == ' ') {
      *out = strtoull(p + klen + 1, NULL, 10);
      return true;
    }
  }
  return false;
}

static bool read_u64(const char *path, uint64_t *out) {
  char buf[64];
  if (read_text(path, buf, sizeof buf) <= 0) return false;
  if (strncmp(buf, "max", 3) == 0) {
    *out = UINT64_MAX;
    return true;
  }
  char *end;
  errno = 0;
  unsigned long long v = strtoull(buf, &end, 10);
  if (errno || end == buf) return false;
  *out = v;
  return true;
}

/* ---- where the worker's groups are --------------------------------------------- */

/* The worker's group in the hierarchy that has `controller` (v1), or the v2 group
 * (controller NULL), from /proc/self/cgroup. */
static bool own_group(const char *controller, char *out, size_t len) {
  char buf[8192];
  if (read_text("/proc/self/cgroup", buf, sizeof buf) <= 0) return false;
  for (char *line = strtok(buf, "\n"); line; line = strtok(NULL, "\n")) {
    char *c1 = strchr(line, ':');
    char *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
    if (!c2) continue;
    *c2 = '\0';
    const char *list = c1 + 1, *path = c2 + 1;
    bool match = false;
    if (!controller) {
      match = strcmp(line, "0") == 0 && *list == '\0';
    } else {
      char copy[256];
      snprintf(copy, sizeof copy, "%s", list);
      char *save = NULL;
      for (char *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        if (strcmp(t, controller) == 0) match = true;
      }
    }
    if (match) {
      snprintf(out, len, "%s", path);
      return true;
    }
  }
  return false;
}

/* The directory of the worker's own group: the mount of fstype (with `controller`
 * among its super options for v1) joined with the group path, the mount's root taken
 * off. */
static bool own_dir(const char *fstype, const char *controller, char *out, size_t len) {
  char group[PATH_MAX];
  if (!own_group(controller, group, sizeof group)) return false;
  FILE *f = fopen("/proc/self/mountinfo", "re");
  if (!f) return false;
  char line[4096];
  bool found = false;
  while (!found && fgets(line, sizeof line, f)) {
    /* id parent maj:min root mountpoint options [optional...] - fstype source superopts */
    char root[PATH_MAX], mnt[PATH_MAX];
    if (sscanf(line, "%*s %*s %*s %4095s %4095s", root, mnt) != 2) continue;
    char *dash = strstr(line, " - ");
    if (!dash) continue;
    char fs[64], src[256], opts[1024];
    if (sscanf(dash + 3, "%63s %255s %1023s", fs, src, opts) != 3) continue;
    if (strcmp(fs, fstype) != 0) continue;
    if (controller) {
      bool has = false;
      char *save = NULL;
      for (char *t = strtok_r(opts, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        if (strcmp(t, controller) == 0) has = true;
      }
      if (!has) continue;
    }
    const char *rel = group;
    size_t rlen = strlen(root);
    if (strcmp(root, "/") != 0) {
      if (strncmp(group, root, rlen) != 0 || (group[rlen] != '/' && group[rlen] != '\0')) continue;
      rel = group + rlen;
    }
    found = snprintf(out, len, "%s%s", mnt, strcmp(rel, "/") == 0 ? "" : rel) < (int)len;
  }
  fclose(f);
  struct stat st;
  return found && stat(out, &st) == 0 && S_ISDIR(st.st_mode);
}

/* Field 22 of /proc/<pid>/stat (start time in clock ticks since boot); 0 when the
 * process does not exist. */
static uint64_t start_time_of(long pid) {
  char path[64], buf[1024];
  snprintf(path, sizeof path, "/proc/%ld/stat", pid);
  if (read_text(path, buf, sizeof buf) <= 0) return 0;
  const char *p = strrchr(buf, ')');
  if (!p) return 0;
  p++;
  for (int field = 2; field < 22 && p; field++) p = strchr(p + 1, ' ');
  return p ? strtoull(p + 1, NULL, 10) : 0;
}

/* ---- killing and removing ---------------------------------------------------------- */

/* SIGKILLs every process listed in dir/cgroup.procs. Returns how many were listed. */
static int kill_listed(const char *dir) {
  char path[PATH_MAX + 16];
  snprintf(path, sizeof path, "%s/cgroup.procs", dir);
  FILE *f = fopen(path, "re");
  if (!f) return 0;
  int n = 0;
  long pid;
  while (fscanf(f, "%ld", &pid) == 1) {
    if (pid > 0 && pid != (long)getpid()) kill((pid_t)pid, SIGKILL);
    n++;
  }
  fclose(f);
  return n;
}

/* Kills what is in `dir` and removes it. Returns 0 when it is gone, -1 while
 * processes remain (they are dying: try again later). */
static int kill_and_remove(const char *dir) {
  for (int round = 0; round < KILL_ROUNDS; round++) {
    if (rmdir(dir) == 0 || errno == ENOENT) return 0;
    if (errno != EBUSY) return -1;
    kill_listed(dir);
    struct timespec ts = {0, 100000}; /* SIGKILLed processes take a moment to leave */
    nanosleep(&ts, NULL);
  }
  return rmdir(dir) == 0 || errno == ENOENT ? 0 : -1;
}

/* Removes a worker directory with every group inside it (a stale one, or ours at close). */
static void remove_tree(const char *dir) {
  DIR *d = opendir(dir);
  if (d) {
    struct dirent *ent;
    while ((ent = readdir(d)) != NULL) {
      if (ent->d_name[0] == '.' || ent->d_type != DT_DIR) continue;
      char sub[PATH_MAX + 300];
      if (snprintf(sub, sizeof sub, "%s/%s", dir, ent->d_name) >= (int)sizeof sub) continue;
      kill_and_remove(sub);
    }
    closedir(d);
  }
  kill_and_remove(dir);
}

/* Removes the directories of dead workers under `parent` (wk-<pid>-<start>). */
static int remove_stale(const char *parent) {
  DIR *d = opendir(parent);
  if (!d) return 0;
  int removed = 0;
  struct dirent *ent;
  while ((ent = readdir(d)) != NULL) {
    long pid;
    unsigned long long start;
    char tail;
    if (sscanf(ent->d_name, DIR_PREFIX "%ld-%llu%c", &pid, &start, &tail) != 2) continue;
    if (pid > 0 && start_time_of(pid) == start) continue; /* its worker lives */
    char dir[PATH_MAX + 300];
    if (snprintf(dir, sizeof dir, "%s/%s", parent, ent->d_name) >= (int)sizeof dir) continue;
    remove_tree(dir);
    removed++;
  }
  closedir(d);
  return removed;
}

/* ---- opening ------------------------------------------------------------------------ */

static void worker_dir_name(char *out, size_t len) {
  snprintf(out, len, DIR_PREFIX "%ld-%" PRIu64, (long)getpid(), start_time_of((long)getpid()));
}

/* Controllers the v2 group `dir` offers include every one the limits need. */
static bool v2_offers(const char *dir, const wk_cgroup_limits *limits, char *why, size_t len) {
  char path[PATH_MAX + 32], buf[512];
  snprintf(path, sizeof path, "%s/cgroup.controllers", dir);
  if (read_text(path, buf, sizeof buf) < 0) {
    wk_errf(why, len, "cannot read %s: %s", path, strerror(errno));
    return false;
  }
  char padded[600];
  snprintf(padded, sizeof padded, " %s ", buf);
  for (char *p = padded; *p; p++) {
    if (*p == '\n') *p = ' ';
  }
  if (limits->memory_max && !strstr(padded, " memory ")) {
    wk_errf(why, len, "the memory controller is not available in %s", dir);
    return false;
  }
  if (limits->pids_max && !strstr(padded, " pids ")) {
    wk_errf(why, len, "the pids controller is not available in %s", dir);
    return false;
  }
  return true;
}

static bool enable_controllers(const char *dir, const wk_cgroup_limits *limits) {
  char path[PATH_MAX + 32], what[32] = "";
  snprintf(path, sizeof path, "%s/cgroup.subtree_control", dir);
  if (limits->memory_max) strcat(what, "+memory ");
  if (limits->pids_max) strcat(what, "+pids");
  return write_text(path, what) == 0;
}

/* cgroup v2: own/wk-X/{worker, e<n>...}; the worker moves itself into wk-X/worker so
 * that own and wk-X hold no process and may enable controllers for their children. */
static bool open_v2(wk_cgroup *cg, char *why, size_t len) {
  char own[PATH_MAX];
  if (!own_dir("cgroup2", NULL, own, sizeof own)) {
    wk_errf(why, len, "no cgroup2 mount holds the worker's group");
    return false;
  }
  if (!v2_offers(own, &cg->limits, why, len)) return false;
  remove_stale(own);
  char name[64];
  worker_dir_name(name, sizeof name);
  char top[PATH_MAX], self[PATH_MAX], procs[PATH_MAX + 16], pid[32];
  if (snprintf(top, sizeof top, "%s/%s", own, name) >= (int)sizeof top ||
      snprintf(self, sizeof self, "%s/worker", top) >= (int)sizeof self) {
    wk_errf(why, len, "the path of the worker's group %s is too long", own);
    return false;
  }
  if (mkdir(top, 0755) != 0 || mkdir(self, 0755) != 0) {
    wk_errf(why, len, "cannot create %s: %s (the group is not delegated to this user)", self,
            strerror(errno));
    rmdir(top);
    return false;
  }
  snprintf(pid, sizeof pid, "%ld", (long)getpid());
  snprintf(procs, sizeof procs, "%s/cgroup.procs", self);
  if (write_text(procs, pid) != 0) {
    wk_errf(why, len, "cannot move the worker into %s: %s", self, strerror(errno));
    rmdir(self);
    rmdir(top);
    return false;
  }
  if (!enable_controllers(own, &cg->limits) || !enable_controllers(top, &cg->limits)) {
    int saved = errno;
    snprintf(procs, sizeof procs, "%s/cgroup.procs", own);
    (void)write_text(procs, pid);
    rmdir(self);
    rmdir(top);
    wk_errf(why, len,
            "cannot enable the controllers below %s: %s (other processes in the worker's group?)",
            own, strerror(saved));
    return false;
  }
  snprintf(cg->mem_dir, sizeof cg->mem_dir, "%s", top);
  snprintf(cg->self_dir, sizeof cg->self_dir, "%s", own);
  cg->version = 2;
  return true;
}

/* cgroup v1: <own memory group>/wk-X and <own pids group>/wk-X, each only when its
 * limit is set. */
static bool open_v1(wk_cgroup *cg, char *why, size_t len) {
  char name[64];
  worker_dir_name(name, sizeof name);
  struct {
    const char *controller;
    bool wanted;
    char *dir;
  } want[] = {{"memory", cg->limits.memory_max != 0, cg->mem_dir},
              {"pids", cg->limits.pids_max != 0, cg->pids_dir}};
  for (size_t i = 0; i < 2; i++) {
    if (!want[i].wanted) continue;
    char own[PATH_MAX];
    if (!own_dir("cgroup", want[i].controller, own, sizeof own)) {
      wk_errf(why, len, "no cgroup v1 %s hierarchy holds the worker's group", want[i].controller);
      return false;
    }
    remove_stale(own);
    if (snprintf(want[i].dir, PATH_MAX, "%s/%s", own, name) >= PATH_MAX ||
        mkdir(want[i].dir, 0755) != 0) {
      wk_errf(why, len, "cannot create %s/%s: %s", own, name, strerror(errno));
      want[i].dir[0] = '\0';
      return false;
    }
  }
  cg->version = 1;
  return true;
}

wk_cgroup *wk_cgroup_open(const wk_cgroup_limits *limits, char *mechanism, size_t mechanism_len,
                          char *err, size_t err_len) {
  wk_errf(err, err_len, "%s", "");
  if (!limits->memory_max && !limits->pids_max) {
    wk_errf(mechanism, mechanism_len,
            "none: executor_memory_max and executor_pids_max are not set");
    return NULL;
  }
  wk_cgroup *cg = wk_xcalloc(1, sizeof *cg);
  cg->limits = *limits;
  char why2[512] = "", why1[512] = "";
  if (open_v2(cg, why2, sizeof why2)) {
    wk_errf(mechanism, mechanism_len, "cgroup v2 at %s", cg->mem_dir);
    return cg;
  }
  if (open_v1(cg, why1, sizeof why1)) {
    wk_errf(mechanism, mechanism_len, "cgroup v1 (memory at %s, pids at %s)",
            cg->mem_dir[0] ? cg->mem_dir : "-", cg->pids_dir[0] ? cg->pids_dir : "-");
    return cg;
  }
  if (cg->mem_dir[0]) rmdir(cg->mem_dir);
  if (cg->pids_dir[0]) rmdir(cg->pids_dir);
  wk_errf(err, err_len,
          "executor_memory_max/executor_pids_max are set but this host does not let the worker "
          "create control groups: cgroup v2: %s; cgroup v1: %s",
          why2, why1);
  wk_errf(mechanism, mechanism_len, "none: %s", err);
  free(cg);
  return NULL;
}

/* ---- groups ------------------------------------------------------------------------- */

static void group_dir(const wk_cgroup_group *g, const char *base, char *out, size_t len) {
  snprintf(out, len, "%s/%s", base, g->name);
}

static int set_limit(const char *dir, const char *file, uint64_t value, char *err, size_t len) {
  char path[PATH_MAX + 64], text[32];
  snprintf(path, sizeof path, "%s/%s", dir, file);
  snprintf(text, sizeof text, "%" PRIu64, value);
  if (write_text(path, text) != 0) {
    wk_errf(err, len, "cannot write %s to %s: %s", text, path, strerror(errno));
    return -1;
  }
  return 0;
}

static int apply_limits(const wk_cgroup_group *g, char *err, size_t len) {
  const wk_cgroup *cg = g->cg;
  char mem[PATH_MAX + 40], pids[PATH_MAX + 40];
  group_dir(g, cg->mem_dir, mem, sizeof mem);
  group_dir(g, cg->version == 2 ? cg->mem_dir : cg->pids_dir, pids, sizeof pids);
  if (cg->limits.memory_max) {
    if (cg->version == 2) {
      if (set_limit(mem, "memory.max", cg->limits.memory_max, err, len) != 0) return -1;
      (void)set_limit(mem, "memory.swap.max", 0, NULL, 0);  /* absent without swap accounting */
      (void)set_limit(mem, "memory.oom.group", 1, NULL, 0); /* an OOM ends the whole group */
    } else {
      if (set_limit(mem, "memory.limit_in_bytes", cg->limits.memory_max, err, len) != 0) return -1;
      /* with swap accounting the limit would otherwise only bound RAM, and the rest swap */
      (void)set_limit(mem, "memory.memsw.limit_in_bytes", cg->limits.memory_max, NULL, 0);
    }
  }
  if (cg->limits.pids_max && set_limit(pids, "pids.max", cg->limits.pids_max, err, len) != 0)
    return -1;
  return 0;
}

wk_cgroup_group *wk_cgroup_create(wk_cgroup *cg, char *err, size_t err_len) {
  wk_cgroup_group *g = wk_xcalloc(1, sizeof *g);
  g->cg = cg;
  snprintf(g->name, sizeof g->name, "e%" PRIu64, ++cg->seq);
  const char *bases[2] = {cg->mem_dir, cg->version == 1 ? cg->pids_dir : ""};
  for (size_t i = 0; i < 2; i++) {
    if (!bases[i][0]) continue;
    char dir[PATH_MAX + 40];
    group_dir(g, bases[i], dir, sizeof dir);
    if (mkdir(dir, 0755) != 0) {
      wk_errf(err, err_len, "cannot create the executor group %s: %s", dir, strerror(errno));
      if (i == 1) {
        group_dir(g, bases[0], dir, sizeof dir);
        rmdir(dir);
      }
      free(g);
      return NULL;
    }
  }
  g->next = cg->groups;
  cg->groups = g;
  if (apply_limits(g, err, err_len) != 0) {
    wk_cgroup_release(g);
    return NULL;
  }
  return g;
}

int wk_cgroup_attach(wk_cgroup_group *g, int pid, char *err, size_t err_len) {
  const wk_cgroup *cg = g->cg;
  const char *bases[2] = {cg->mem_dir, cg->version == 1 ? cg->pids_dir : ""};
  char text[32];
  snprintf(text, sizeof text, "%d", pid);
  for (size_t i = 0; i < 2; i++) {
    if (!bases[i][0]) continue;
    char path[PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/%s/cgroup.procs", bases[i], g->name);
    if (write_text(path, text) != 0) {
      wk_errf(err, err_len, "cannot move executor %d into %s: %s", pid, path, strerror(errno));
      return -1;
    }
  }
  return 0;
}

uint64_t wk_cgroup_oom_kills(const wk_cgroup_group *g) {
  const wk_cgroup *cg = g->cg;
  if (!cg->limits.memory_max) return 0;
  char path[PATH_MAX + 64], buf[1024];
  uint64_t v = 0;
  if (cg->version == 2) {
    snprintf(path, sizeof path, "%s/%s/memory.events", cg->mem_dir, g->name);
    if (read_text(path, buf, sizeof buf) > 0 && keyed_value(buf, "oom_kill", &v)) return v;
    return 0;
  }
  snprintf(path, sizeof path, "%s/%s/memory.oom_control", cg->mem_dir, g->name);
  if (read_text(path, buf, sizeof buf) > 0 && keyed_value(buf, "oom_kill", &v)) return v;
  /* kernels before 4.13 do not count OOM kills: the limit was hit at least */
  snprintf(path, sizeof path, "%s/%s/memory.failcnt", cg->mem_dir, g->name);
  return read_u64(path, &v) ? v : 0;
}

uint64_t wk_cgroup_memory_max(const wk_cgroup_group *g) { return g->cg->limits.memory_max; }

/* Kills and removes g's directories; true when all are gone. */
static bool try_remove(wk_cgroup_group *g) {
  const wk_cgroup *cg = g->cg;
  /* pids first: killing there ends a fork bomb's processes, which leaves memory empty */
  const char *bases[2] = {cg->version == 1 ? cg->pids_dir : "", cg->mem_dir};
  bool gone = true;
  for (size_t i = 0; i < 2; i++) {
    if (!bases[i][0]) continue;
    char dir[PATH_MAX + 40];
    group_dir(g, bases[i], dir, sizeof dir);
    if (kill_and_remove(dir) != 0) gone = false;
  }
  return gone;
}

static void unlink_group(wk_cgroup *cg, wk_cgroup_group *g) {
  for (wk_cgroup_group **p = &cg->groups; *p; p = &(*p)->next) {
    if (*p == g) {
      *p = g->next;
      break;
    }
  }
  free(g);
}

void wk_cgroup_release(wk_cgroup_group *g) {
  g->released = true;
  if (try_remove(g)) unlink_group(g->cg, g);
}

void wk_cgroup_reap(wk_cgroup *cg) {
  for (wk_cgroup_group *g = cg->groups, *next; g; g = next) {
    next = g->next;
    if (g->released && try_remove(g)) unlink_group(cg, g);
  }
}

void wk_cgroup_close(wk_cgroup *cg) {
  if (!cg) return;
  for (int waited = 0; cg->groups && waited < CLOSE_WAIT_MS; waited += 10) {
    for (wk_cgroup_group *g = cg->groups, *next; g; g = next) {
      next = g->next;
      if (try_remove(g)) unlink_group(cg, g);
    }
    if (!cg->groups) break;
    struct timespec ts = {0, 10 * 1000000};
    nanosleep(&ts, NULL);
  }
  if (cg->groups) {
    wk_log(WK_LOG_WARN, "cgroup_not_removed",
           "executor groups under %s still hold processes; the next start removes them",
           cg->mem_dir[0] ? cg->mem_dir : cg->pids_dir);
  }
  while (cg->groups) unlink_group(cg, cg->groups);
  if (cg->version == 1) {
    if (cg->mem_dir[0]) rmdir(cg->mem_dir);
    if (cg->pids_dir[0]) rmdir(cg->pids_dir);
  }
  /* v2: the worker itself lives in <mem_dir>/worker until it exits; the next start
   * removes the directory as a dead worker's */
  free(cg);
}

/* ---- the worker's own memory group ------------------------------------------------ */

/* One level of the memory hierarchy: its limit (UINT64_MAX = none) and usage less
 * inactive file cache. False when `dir` is no memory group. */
static bool memory_level(const char *dir, bool v2, uint64_t *limit, uint64_t *usage) {
  char path[PATH_MAX + 64], stat[8192];
  uint64_t lim = 0, use = 0, inactive = 0;
  snprintf(path, sizeof path, "%s/%s", dir, v2 ? "memory.max" : "memory.limit_in_bytes");
  if (!read_u64(path, &lim)) return false;
  snprintf(path, sizeof path, "%s/%s", dir, v2 ? "memory.current" : "memory.usage_in_bytes");
  if (!read_u64(path, &use)) return false;
  snprintf(path, sizeof path, "%s/memory.stat", dir);
  if (read_text(path, stat, sizeof stat) > 0)
    keyed_value(stat, v2 ? "inactive_file" : "total_inactive_file", &inactive);
  /* v1 says "no limit" with the largest page-aligned value */
  *limit = lim >= (UINT64_C(1) << 62) ? UINT64_MAX : lim;
  *usage = use > inactive ? use - inactive : 0;
  return true;
}

int wk_cgroup_self_memory(uint64_t *limit, uint64_t *usage) {
  char dir[PATH_MAX];
  bool v2 = false;
  if (!own_dir("cgroup", "memory", dir, sizeof dir)) {
    if (!own_dir("cgroup2", NULL, dir, sizeof dir)) return -1;
    v2 = true;
  }
  /* the tightest of the worker's group and its ancestors: the one with the least room */
  bool any = false;
  uint64_t best_room = UINT64_MAX;
  *limit = 0;
  *usage = 0;
  for (;;) {
    uint64_t lim, use;
    if (!memory_level(dir, v2, &lim, &use)) break;
    if (!any) *usage = use;
    any = true;
    if (lim != UINT64_MAX) {
      uint64_t room = lim > use ? lim - use : 0;
      if (room < best_room) {
        best_room = room;
        *limit = lim;
        *usage = use;
      }
    }
    char *slash = strrchr(dir, '/');
    if (!slash || slash == dir) break;
    *slash = '\0';
  }
  return any ? 0 : -1;
}

/* wk_rundir.c: tagged run-time entries and the start-up sweep of dead workers' ones.
 * See wk_rundir.h. */
#include "app/wk_rundir.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include "app/wk_fs.h"

/* The start time (field 22 of /proc/<pid>/stat) of `pid`; 0 when /proc cannot tell,
 * -1 when the process does not exist. */
static long long start_time(long long pid) {
  char path[64], buf[1024];
  snprintf(path, sizeof path, "/proc/%lld/stat", pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno == ENOENT ? -1 : 0;
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return 0;
  buf[n] = '\0';
  const char *p = strrchr(buf, ')'); /* the command name may hold spaces and ')' */
  if (!p) return 0;
  /* ") S ppid ...": p is before field 3; each space passed starts the next field */
  for (int field = 3; field <= 22; field++) {
    p = strchr(p + 1, ' ');
    if (!p) return 0;
  }
  char *end;
  unsigned long long v = strtoull(p + 1, &end, 10);
  return end == p + 1 ? 0 : (long long)v;
}

void wk_rundir_tag(char *out, size_t len) {
  long long pid = (long long)getpid();
  long long start = start_time(pid);
  snprintf(out, len, "wk-%llx-%llx", pid, start > 0 ? (unsigned long long)start : 0ull);
}

static bool is_hex(char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); }

/* Parses "wk-<hex>-<hex>." at the start of `name`. */
static bool parse_tag(const char *name, long long *pid, long long *start) {
  if (strncmp(name, "wk-", 3) != 0 || !is_hex(name[3])) return false;
  char *end;
  unsigned long long a = strtoull(name + 3, &end, 16);
  if (*end != '-' || a == 0 || a > INT32_MAX || !is_hex(end[1])) return false;
  const char *p = end + 1;
  unsigned long long b = strtoull(p, &end, 16);
  if (*end != '.' || b > INT64_MAX) return false;
  *pid = (long long)a;
  *start = (long long)b;
  return true;
}

bool wk_rundir_is_stale(const char *name) {
  long long pid, start;
  if (!parse_tag(name, &pid, &start)) return false;
  long long now = start_time(pid);
  if (now < 0) return true;                      /* no such process */
  if (now > 0 && start > 0) return now != start; /* the pid is another process's now */
  /* /proc cannot tell: only a pid no process holds is dead */
  return kill((pid_t)pid, 0) != 0 && errno == ESRCH;
}

size_t wk_rundir_sweep(const char *dir, uid_t also) {
  DIR *d = opendir(dir);
  if (!d) return 0;
  size_t removed = 0;
  uid_t me = geteuid();
  struct dirent *de;
  while ((de = readdir(d)) != NULL) {
    if (!wk_rundir_is_stale(de->d_name)) continue;
    struct stat st;
    if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
    if (st.st_uid != me && st.st_uid != also) continue;
    char path[4096];
    int n = snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
    if (n < 0 || (size_t)n >= sizeof path) continue;
    if (S_ISDIR(st.st_mode)) chmod(path, 0700); /* a 0711 root: listed to be removed */
    if (wk_fs_remove_tree(path) == 0) removed++;
  }
  closedir(d);
  return removed;
}

/* bench_proc.c: see bench_proc.h. */
#define _GNU_SOURCE

#include "bench_proc.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

bool bench_proc_stat(pid_t pid, uint64_t *ticks, pid_t *ppid) {
  char path[64], buf[1024];
  snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  FILE *f = fopen(path, "r");
  if (!f) return false;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = '\0';
  const char *p = strrchr(buf, ')'); /* comm may hold spaces */
  if (!p) return false;
  /* after ") ": state(3) ppid(4) pgrp session tty tpgid flags minflt cminflt majflt
   * cmajflt utime(14) stime(15) */
  char state;
  int pp;
  unsigned long long ut, st;
  if (sscanf(p + 2, "%c %d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &state, &pp, &ut, &st) !=
      4) {
    return false;
  }
  *ticks = (uint64_t)(ut + st);
  if (ppid) *ppid = (pid_t)pp;
  return true;
}

/* Calls fn for each direct child of pid (from /proc/PID/task/TID/children). */
static void for_children(pid_t pid, void (*fn)(pid_t child, void *arg), void *arg) {
  char dir[64];
  snprintf(dir, sizeof dir, "/proc/%d/task", (int)pid);
  DIR *d = opendir(dir);
  if (!d) return;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.') continue;
    char path[sizeof dir + sizeof e->d_name + 16];
    snprintf(path, sizeof path, "%s/%s/children", dir, e->d_name);
    FILE *f = fopen(path, "r");
    if (!f) continue;
    int child;
    while (fscanf(f, "%d", &child) == 1) fn((pid_t)child, arg);
    fclose(f);
  }
  closedir(d);
}

typedef struct sum_arg {
  uint64_t sum;
  unsigned count;
} sum_arg;

typedef struct list_arg {
  pid_t *pids;
  uint64_t *ticks;
  unsigned n, max;
} list_arg;

static void add_child(pid_t child, void *arg) {
  list_arg *a = arg;
  uint64_t t;
  if (a->n < a->max && bench_proc_stat(child, &t, NULL)) {
    a->pids[a->n] = child;
    a->ticks[a->n] = t;
    a->n++;
  }
}

unsigned bench_proc_children(pid_t pid, pid_t *pids, uint64_t *ticks, unsigned max) {
  list_arg a = {pids, ticks, 0, max};
  for_children(pid, add_child, &a);
  return a.n;
}

uint64_t bench_proc_rss_kb(pid_t pid) {
  char path[64], line[256];
  snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  unsigned long long kb = 0;
  while (fgets(line, sizeof line, f)) {
    if (sscanf(line, "VmRSS: %llu kB", &kb) == 1) break;
  }
  fclose(f);
  return (uint64_t)kb;
}

static void add_rss(pid_t child, void *arg) {
  sum_arg *a = arg;
  uint64_t kb = bench_proc_rss_kb(child);
  if (kb) {
    a->sum += kb;
    a->count++;
  }
}

uint64_t bench_proc_children_rss_kb(pid_t pid, unsigned *count) {
  sum_arg a = {0, 0};
  for_children(pid, add_rss, &a);
  if (count) *count = a.count;
  return a.sum;
}

uint64_t bench_proc_self_cpu_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

uint64_t bench_proc_machine_busy_ticks(void) {
  FILE *f = fopen("/proc/stat", "r");
  if (!f) return 0;
  unsigned long long v[8] = {0};
  int n = fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3],
                 &v[4], &v[5], &v[6], &v[7]);
  fclose(f);
  if (n < 8) return 0;
  /* user nice system idle iowait irq softirq steal */
  return (uint64_t)(v[0] + v[1] + v[2] + v[5] + v[6] + v[7]);
}

double bench_proc_tick_s(void) { return 1.0 / (double)sysconf(_SC_CLK_TCK); }

uint64_t bench_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void bench_sleep_ms(unsigned ms) {
  struct timespec ts = {.tv_sec = (time_t)(ms / 1000u), .tv_nsec = (long)(ms % 1000u) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

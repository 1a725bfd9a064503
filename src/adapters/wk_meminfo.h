/* wk_meminfo.h: how much memory the worker may still use, for admission under memory
 * pressure: the host's MemAvailable (/proc/meminfo) and the room left in the worker's
 * own memory control group (its tightest limit less its usage without inactive file
 * cache), whichever is smaller; and a process's resident set. Reads files; no state. */
#ifndef WK_MEMINFO_H
#define WK_MEMINFO_H

#include <stdint.h>

typedef struct wk_mem_sample {
  uint64_t available; /* bytes the worker may still use */
  uint64_t total;     /* bytes it may use at most (MemTotal, or its group's limit) */
  const char *source; /* what bounds `available`: "host MemAvailable" or "the worker's cgroup" */
} wk_mem_sample;

/** Samples the memory available now. Returns 0, or -1 when /proc/meminfo cannot be
 * read (then `out` is untouched). */
int wk_meminfo_sample(wk_mem_sample *out);

/** Resident set of process `pid` (0: this process) in KiB, from /proc/PID/statm; 0
 * when it cannot be read. */
uint64_t wk_meminfo_rss_kib(int pid);

#endif

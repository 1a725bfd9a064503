/* wk_meminfo.c: the memory the worker may still use. See wk_meminfo.h. */
#include "adapters/wk_meminfo.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "adapters/wk_cgroup.h"

int wk_meminfo_sample(wk_mem_sample *out) {
  FILE *f = fopen("/proc/meminfo", "re");
  if (!f) return -1;
  char line[256];
  unsigned long long total_kb = 0, avail_kb = 0;
  int found = 0;
  while (found < 2 && fgets(line, sizeof line, f)) {
    if (sscanf(line, "MemTotal: %llu kB", &total_kb) == 1) found++;
    if (sscanf(line, "MemAvailable: %llu kB", &avail_kb) == 1) found++;
  }
  fclose(f);
  if (found < 2) return -1;
  wk_mem_sample s = {
      .available = (uint64_t)avail_kb * 1024u,
      .total = (uint64_t)total_kb * 1024u,
      .source = "host MemAvailable",
  };
  uint64_t limit = 0, usage = 0;
  if (wk_cgroup_self_memory(&limit, &usage) == 0 && limit) {
    uint64_t room = limit > usage ? limit - usage : 0;
    if (room < s.available) {
      s.available = room;
      s.source = "the worker's cgroup";
    }
    if (limit < s.total) s.total = limit;
  }
  *out = s;
  return 0;
}

uint64_t wk_meminfo_rss_kib(int pid) {
  char path[64];
  if (pid > 0) snprintf(path, sizeof path, "/proc/%d/statm", pid);
  else snprintf(path, sizeof path, "/proc/self/statm");
  FILE *f = fopen(path, "re");
  if (!f) return 0;
  unsigned long long size = 0, resident = 0;
  int n = fscanf(f, "%llu %llu", &size, &resident);
  fclose(f);
  long page = sysconf(_SC_PAGESIZE);
  return n == 2 && page > 0 ? (uint64_t)resident * (uint64_t)page / 1024u : 0;
}

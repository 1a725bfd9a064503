/* bench_proc.h: CPU time and memory of processes, read from /proc, for the benchmarks.
 *
 * Linux only. Nothing here allocates beyond stdio, and every reader returns false (or 0)
 * when the process is gone rather than failing. */
#ifndef WK_BENCH_PROC_H
#define WK_BENCH_PROC_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

/** utime + stime of pid in clock ticks (sysconf(_SC_CLK_TCK)) and its parent pid, from
 * /proc/PID/stat; false when the process is gone or the file unreadable. */
bool bench_proc_stat(pid_t pid, uint64_t *ticks, pid_t *ppid);

/** Up to max direct children of pid with their utime + stime ticks; returns how many
 * were written. Executors come and go (recycled): compare two lists by pid. */
unsigned bench_proc_children(pid_t pid, pid_t *pids, uint64_t *ticks, unsigned max);

/** VmRSS of pid in KiB from /proc/PID/status; 0 when unreadable. */
uint64_t bench_proc_rss_kb(pid_t pid);

/** VmRSS of pid's direct children in KiB, summed; *count as for bench_proc_children_ticks. */
uint64_t bench_proc_children_rss_kb(pid_t pid, unsigned *count);

/** CPU time of the calling process (all threads), nanoseconds. */
uint64_t bench_proc_self_cpu_ns(void);

/** CPU ticks the whole machine spent busy (/proc/stat: all but idle and iowait). */
uint64_t bench_proc_machine_busy_ticks(void);

/** CLOCK_MONOTONIC now, nanoseconds. */
uint64_t bench_now_ns(void);

/** Sleeps ms milliseconds (resumed after signals). */
void bench_sleep_ms(unsigned ms);

/** Seconds per clock tick of /proc/PID/stat. */
double bench_proc_tick_s(void);

#endif

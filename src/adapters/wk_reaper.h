/* wk_reaper.h: the worker as a child subreaper, ending what executors leave behind.
 *
 * Executors run in their own sessions and are subreapers themselves: what a call
 * starts stays in its executor's tree, and the executor ends it after the call. When an
 * executor dies (killed, recycled, crashed), its remaining descendants, in its process
 * group or in sessions of their own, are handed to the nearest living subreaper: the
 * worker, after wk_reaper_start. wk_reaper_sweep kills those orphans and reaps them.
 *
 * Which children are the worker's own is a registry: libuv spawns and reaps the
 * executors (it waits for each pid it started, never for any child), so the pool
 * registers each executor (wk_reaper_own) and the sweep never signals or waits for a
 * registered pid; children the process had before wk_reaper_start are left alone as
 * well. Everything else whose parent is the worker is an orphan of an executor.
 *
 * Thread-safe (one lock). The sweep reads the children of each of the process's
 * threads from /proc/self/task/<tid>/children; on a kernel without CONFIG_PROC_CHILDREN
 * it reads the parent of every process in /proc instead. */
#ifndef WK_REAPER_H
#define WK_REAPER_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

/** Makes this process a child subreaper (prctl PR_SET_CHILD_SUBREAPER) and records the
 * children it has now (never touched). Idempotent. Returns 0, or -1 with the reason in
 * `err`. */
int wk_reaper_start(char *err, size_t len);

/** `pid` is a child someone else waits for (an executor libuv spawned): never killed
 * or reaped by a sweep until wk_reaper_disown. */
void wk_reaper_own(pid_t pid);

/** A child forked outside libuv that its forker waits for (the deploy's code check):
 * wk_reaper_fork_begin before fork() holds off every sweep, wk_reaper_fork_end(pid)
 * after it registers pid (when > 0, as wk_reaper_own) and lets sweeps go on, so no
 * sweep sees the new child unregistered. wk_reaper_disown once it is reaped. */
void wk_reaper_fork_begin(void);
void wk_reaper_fork_end(pid_t pid);

/** `pid` was reaped by its owner: forgets it. */
void wk_reaper_disown(pid_t pid);

/** Kills (SIGKILL) every child of this process that is not registered, and reaps those
 * that have ended. Killing an orphan hands its own children to this process: with
 * `wait`, sweeps again until none is left (at most about two seconds, sleeping between
 * looks); without, one pass (a later sweep finds the next generation). Returns how
 * many processes it signalled. */
unsigned wk_reaper_sweep(bool wait);

/* For tests: with `on`, sweeps find children by the walk of /proc even where the
 * children files exist (the fallback for kernels without them). */
void wk_reaper__walk_proc(bool on);

#endif

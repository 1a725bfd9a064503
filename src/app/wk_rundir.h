/* wk_rundir.h: what a worker leaves on disk, named so a later worker can tell whether
 * its maker is still alive.
 *
 * Everything a worker makes under $TMPDIR or scratch_root (its scratch root, its
 * executors' directory, each task's scratch directory and output spool) starts with
 * its tag, "wk-<pid>-<start>." (both hexadecimal; <start> is the process's start time
 * in clock ticks since boot, from /proc/<pid>/stat, so a reused pid is another tag).
 * At start the worker removes the entries of dead workers: a kill -9 leaves them
 * behind. Entries of live workers sharing the directory, of other users, or not named
 * this way are never touched. Workers that share a directory must share a pid
 * namespace (a pid from another namespace means nothing here). */
#ifndef WK_RUNDIR_H
#define WK_RUNDIR_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#define WK_RUNDIR_TAG_MAX 48 /* room for a tag and its NUL */

/** Writes this process's tag ("wk-<pid hex>-<start hex>", no trailing dot) into `out`
 * (WK_RUNDIR_TAG_MAX bytes are enough). Without /proc the start is 0, and liveness
 * falls back to kill(pid, 0). */
void wk_rundir_tag(char *out, size_t len);

/** True when `name` is a tagged entry ("wk-<hex>-<hex>.<anything>") whose worker is
 * not running (its pid is gone, or belongs to a process started at another time).
 * False for other names and for live workers (this process included). */
bool wk_rundir_is_stale(const char *name);

/** Removes, under `dir`, every stale tagged entry (a file, or a directory tree with no
 * symlink followed) owned by this process's effective user or by `also` (the executor
 * user, to whom task directories are given; pass geteuid() when none). Returns how
 * many were removed; entries that vanish or resist removal meanwhile are skipped. */
size_t wk_rundir_sweep(const char *dir, uid_t also);

#endif

/* wk_cgroup.h: one control group per executor, where the host lets the worker make them.
 *
 * Detection (wk_cgroup_open): the worker's own groups come from /proc/self/cgroup and
 * the mounts from /proc/self/mountinfo. cgroup v2 is used when the worker's own v2
 * group offers the memory and pids controllers and can be delegated (the worker moves
 * itself into a leaf of its own directory so the controllers can be enabled below it);
 * else cgroup v1 when the memory and pids hierarchies are mounted and the worker can
 * create directories under its own groups there (root, as on the CI machines).
 *
 * Layout: <own group>/wk-<worker pid>-<worker start time>/e<n>, one e<n> per executor
 * (v1: in the memory and in the pids hierarchy). The start time (from /proc/<pid>/stat)
 * makes a directory of a dead worker recognisable even when its pid was reused: such
 * directories are stale and removed at open, after killing what is left in them.
 *
 * Limits: memory.limit_in_bytes (and memory.memsw.limit_in_bytes when swap is
 * accounted) / memory.max with memory.swap.max 0; pids.max. An OOM kill in a group is
 * read from memory.oom_control's oom_kill (v1; failcnt on kernels without it) or
 * memory.events' oom_kill (v2).
 *
 * Not thread-safe: one owner (the executor pool's loop thread). */
#ifndef WK_CGROUP_H
#define WK_CGROUP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct wk_cgroup wk_cgroup;
typedef struct wk_cgroup_group wk_cgroup_group;

typedef struct wk_cgroup_limits {
  uint64_t memory_max; /* bytes per executor group; 0 = no limit */
  uint64_t pids_max;   /* processes (threads) per executor group; 0 = no limit */
} wk_cgroup_limits;

/** Detects what the host supports and, when it supports what `limits` asks for,
 * removes stale directories of dead workers and creates this worker's directory.
 * Returns the context, or NULL: with an empty `err` when no limit is set (nothing to
 * enforce, no groups are made), else with the reason the limits cannot be enforced.
 * `mechanism` (when not NULL) always gets a one-line description of what is in use
 * ("cgroup v1 (memory at ..., pids at ...)", "cgroup v2 at ...", or "none: <why>"). The
 * caller owns the context and frees it with wk_cgroup_close. */
wk_cgroup *wk_cgroup_open(const wk_cgroup_limits *limits, char *mechanism, size_t mechanism_len,
                          char *err, size_t err_len);

/** Creates a new executor group with the limits applied. Returns NULL with the reason
 * in `err`. The group belongs to the context; release it with wk_cgroup_release. */
wk_cgroup_group *wk_cgroup_create(wk_cgroup *cg, char *err, size_t err_len);

/** Moves process `pid` into the group (its future children are born in it). Returns 0,
 * or -1 with the reason in `err`. */
int wk_cgroup_attach(wk_cgroup_group *g, int pid, char *err, size_t err_len);

/** OOM kills the kernel recorded in the group since it was made (0 when unknown). */
uint64_t wk_cgroup_oom_kills(const wk_cgroup_group *g);

/** The group's memory limit in bytes (0 = none), for messages. */
uint64_t wk_cgroup_memory_max(const wk_cgroup_group *g);

/** Kills every process left in the group and removes it; a group whose processes have
 * not exited yet is kept and removed by a later wk_cgroup_reap or wk_cgroup_close.
 * `g` is invalid afterwards. */
void wk_cgroup_release(wk_cgroup_group *g);

/** Retries the removal of released groups that still had processes. Cheap when there
 * are none; call it on a timer. */
void wk_cgroup_reap(wk_cgroup *cg);

/** Releases every group, waits up to about a second for their processes to go,
 * removes the worker's directory and frees the context. NULL is ignored. */
void wk_cgroup_close(wk_cgroup *cg);

/** The worker's own memory control group: its limit (0 = none, or no memory
 * controller) and its usage without reclaimable file cache. Returns 0, or -1 when the
 * worker has no readable memory group. Reads files; needs no context. */
int wk_cgroup_self_memory(uint64_t *limit, uint64_t *usage);

#endif

/* wk_code_cache.h: the code store's CURRENT pointers, resolved from memory.
 *
 * Epochs are immutable (wk_code_store.h); only CURRENT moves. The cache keeps, per
 * function, the epoch CURRENT named and its directory, and watches the code root and
 * each cached function's directory with inotify. A change is seen when the inotify
 * descriptor is drained (one non-blocking read): by wk_code_cache_sync, which the owner
 * calls when the descriptor (wk_code_cache_fd) turns readable; by the first lookup after
 * wk_code_cache_sync_lazily, which the owner calls each time it takes requests in (the
 * orchestrator: every batch of RPCs from the completion queue, before handling any); and
 * by every resolve. The kernel queues an inotify event inside the rename that moved
 * CURRENT, so a deploy that finished before a request was sent is in the queue when that
 * request's lookup drains: a task submitted right after `workerctl deploy` (or a
 * rollback) gets the new epoch, as when every lookup read the disk. A batch of requests
 * that looks nothing up (watches, results, slots) costs no system call, and nor does a
 * cache hit once drained. Without inotify (no descriptor, no watch) every lookup reads
 * the disk as wk_code_store_resolve does.
 *
 * Thread-safe (one mutex): activation resolves on the threadpool, subcall targets on
 * the loop. */
#ifndef WK_CODE_CACHE_H
#define WK_CODE_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct wk_code_cache wk_code_cache;

typedef struct wk_code_cache_stats {
  uint64_t hits;          /* lookups answered from memory */
  uint64_t misses;        /* lookups that read the disk (first use, after a change) */
  uint64_t invalidations; /* entries dropped by a change */
  bool watching;          /* inotify is in use (false: every lookup reads the disk) */
} wk_code_cache_stats;

/** Creates an empty cache over `root` (copied). Never NULL (aborts on OOM); when inotify
 * cannot be had the cache only passes lookups through to the disk. */
wk_code_cache *wk_code_cache_create(const char *root);

/** Frees the cache and closes its inotify descriptor. NULL is a no-op. */
void wk_code_cache_destroy(wk_code_cache *c);

/** wk_code_store_resolve(root, function, requested_epoch, ...) with the same results and
 * errors; requested_epoch 0 (CURRENT) is answered from memory while CURRENT of
 * `function` is unchanged since it was read. */
int wk_code_cache_resolve(wk_code_cache *c, const char *function, uint64_t requested_epoch,
                          uint64_t *epoch, char *path, size_t path_len, char *err, size_t err_len);

/** The inotify descriptor to poll for readability (then call wk_code_cache_sync), or
 * -1 when the cache has none. Owned by the cache. */
int wk_code_cache_fd(const wk_code_cache *c);

/** Reads the changes inotify queued since the last drain and drops what they touched.
 * One non-blocking read when nothing changed. */
void wk_code_cache_sync(wk_code_cache *c);

/** Marks the changes inotify queued so far as due: the next lookup (or resolve, or
 * wk_code_cache_sync) reads them before it answers. No system call here. */
void wk_code_cache_sync_lazily(wk_code_cache *c);

/** The part of wk_code_cache_resolve that needs no disk: true with *epoch and `path`
 * when CURRENT of `function` (requested_epoch 0) is cached and unchanged (counted as a
 * hit); false, and nothing read or counted, when only the disk can answer (not cached
 * yet, changed, not watched, a pinned requested_epoch, a path over path_len). Its one
 * possible system call: the drain wk_code_cache_sync_lazily made due. */
bool wk_code_cache_lookup(wk_code_cache *c, const char *function, uint64_t requested_epoch,
                          uint64_t *epoch, char *path, size_t path_len);

/** Whether a prune of `function` may remove an epoch now that a task that ran `epoch`
 * ended: true when the function's directory changed since the last call that returned
 * true (a deploy, a rollback, an epoch removed), when `epoch` is not the CURRENT cached,
 * or when the cache cannot tell (not cached, not watched). Knows the changes drained so
 * far (no system call: a task's end must not cost one); a change not drained yet marks
 * the function for the next call. Clears the changed mark. */
bool wk_code_cache_prune_due(wk_code_cache *c, const char *function, uint64_t epoch);

/** The counters so far. */
wk_code_cache_stats wk_code_cache_get_stats(wk_code_cache *c);

#endif

/* wk_trim.h: when to give freed memory back to the system (malloc_trim) after a mass
 * close: many watch streams cancelled, many retained results purged.
 *
 * glibc keeps what the program freed in its arenas for reuse and returns little of it
 * on its own: after 10,000 watch streams were cancelled the worker stayed at ~135 MB
 * (17 MB before they opened). malloc_trim(0) returns the free pages, but it walks and
 * locks every arena, so it must not run on every tick or per freed object. The caller
 * feeds, on each tick, an estimate of the memory its live objects hold (streams x
 * their measured cost + retained result bytes); a trim is due when the estimate fell
 * `drop_bytes` below its high-water mark since the last trim, once it has not fallen
 * for `settle_ms` (the frees of a mass close, or of results expiring over a few
 * seconds, are done; a fall that goes on past `max_wait_ms` is trimmed anyway), and at
 * most once per `min_gap_ms`. A steady load (a stable stream count, retention full)
 * never asks for one.
 *
 * The second reason is the memory a load used while it ran: the worker keeps glibc's
 * heap warm under load (adapters/wk_malloc_policy.h: up to 16 MiB free at the top of
 * each arena, payload buffers on the heap), so after a burst of large tasks the free
 * memory stays until someone trims. wk_trim_idle_due asks for a trim once no task has
 * been live for `settle_ms` and the resident set stands `drop_bytes` above what it was
 * after the last trim (or when the worker first stood idle), at most once per
 * `min_gap_ms` (shared with the first reason). A trim that frees nothing (the growth
 * was retained results) moves the base up, so it is not asked for again.
 *
 * Pure: no clock, no I/O; not thread-safe (one owner, the loop). */
#ifndef WK_TRIM_H
#define WK_TRIM_H

#include <stdbool.h>
#include <stdint.h>

typedef struct wk_trim_config {
  uint64_t drop_bytes;  /* a fall this far below the high-water mark asks for a trim */
  uint64_t settle_ms;   /* ... done once the estimate has not fallen for this long */
  uint64_t min_gap_ms;  /* at least this long between two trims */
  uint64_t max_wait_ms; /* a fall that goes on this long is trimmed anyway */
} wk_trim_config;

typedef struct wk_trim {
  wk_trim_config cfg;
  uint64_t high;         /* the largest estimate since the last trim */
  uint64_t prev;         /* the estimate of the previous call */
  uint64_t last_ms;      /* the last trim (0: none yet) */
  uint64_t pending_ms;   /* when the fall was seen (valid while pending) */
  uint64_t last_fall_ms; /* the last call that saw the estimate fall */
  uint64_t rss_base;     /* resident bytes after the last trim (0: not yet known) */
  uint64_t idle_ms;      /* since when no task has been live (0: busy) */
  bool pending;
} wk_trim;

/** Sets up `t` (no trim pending, no high-water mark yet). */
void wk_trim_init(wk_trim *t, wk_trim_config cfg);

/** Called on each tick with the estimate `held` (bytes) at `now_ms` (monotonic). True
 * when the caller should trim now; the call then counts as the trim (the mark restarts
 * from `held`). */
bool wk_trim_due(wk_trim *t, uint64_t held, uint64_t now_ms);

/** Called on each tick, after wk_trim_due, with whether the worker is `idle` (no task
 * live) and, when it is, its resident set `rss` (bytes; ignored when busy) at `now_ms`.
 * True when the caller should trim now (see above; never in the tick wk_trim_due asked
 * for one); the call then counts as the trim, and the caller reports the resident set
 * after it with wk_trim_done. */
bool wk_trim_idle_due(wk_trim *t, bool idle, uint64_t rss, uint64_t now_ms);

/** The resident set `rss` (bytes) right after a trim either function asked for: the
 * base the idle growth is measured from. */
void wk_trim_done(wk_trim *t, uint64_t rss);

#endif

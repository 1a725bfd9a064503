/* wk_status.h: the worker's live status, as the status page (GET / on metrics_addr),
 * GET /status and `workerctl top` show it.
 *
 * The document is built on the loop thread, when someone asks: the metrics server's
 * thread calls wk_status_json(), which wakes the loop (uv_async) and waits for a fresh
 * build (at most WK_STATUS_WAIT_MS; a build younger than WK_STATUS_FRESH_MS is served
 * as it is, so many viewers cost one build). Slots, tasks and phases are read from the
 * core's query functions at build time (wk_orch_heartbeat, wk_orch_list_tasks):
 * nothing here keeps a copy of them. What the core does not keep is kept here, bounded:
 *   - the last WK_STATUS_RECENT terminal tasks (id, function, state, failure code,
 *     duration), fed by the orchestrator's on_task_ended hook;
 *   - one sample a second over the last WK_STATUS_HISTORY seconds: tasks/s, calls/s,
 *     p50 and p99 task latency, executor utilisation (the worker keeps them so that a
 *     page opened during an incident, `workerctl top` and scripts all see the same
 *     last minutes at once, whoever was watching before).
 * The document holds ids, names and figures only: never a task's arguments or outputs.
 *
 * Threads: wk_status_json() on any thread; everything else on the loop thread. */
#ifndef WK_STATUS_H
#define WK_STATUS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "adapters/wk_etcd_publisher.h"
#include "adapters/wk_executor_pool.h"
#include "app/wk_orchestrator.h"

#define WK_STATUS_RECENT 50u      /* terminal tasks kept */
#define WK_STATUS_HISTORY 600u    /* one-second samples kept (10 minutes) */
#define WK_STATUS_MAX_TASKS 500u  /* live tasks listed at most */
#define WK_STATUS_MAX_EXECS 256u  /* executors listed at most */
#define WK_STATUS_WAIT_MS 2000    /* wk_status_json waits this long for the loop */
#define WK_STATUS_FRESH_MS 200    /* a build this young is served again */
#define WK_STATUS_LATENCIES 4096u /* task latencies kept per second (a uniform sample) */

typedef struct wk_status wk_status;

/* The page itself (src/app/wk_status_page.html, embedded at build time by
 * cmake/EmbedFile.cmake): NUL-terminated HTML of wk_status_page_html_len bytes. */
extern const unsigned char wk_status_page_html[];
extern const size_t wk_status_page_html_len;

/* What the app tells the status at build time (borrowed for the call). */
typedef struct wk_status_sources {
  const char *state;            /* "starting", "serving", "draining", "flushing", "stopping" */
  const char *deployment;       /* the Profile: "block" or "bundle" */
  const char *service;          /* the Profile's service */
  const char *version;          /* the worker's version */
  const char *listen_addr;      /* gRPC listen_addr */
  const char *advertise_addr;   /* the address registered in etcd */
  const char *status_addr;      /* host:port of this page */
  const char *isolation;        /* executor_isolation */
  const char *admission_paused; /* the reason, or NULL */
  bool executors_unavailable;
  uint32_t executors_min, executors_max;
  wk_orch *orch;                /* NULL: stopped (the last document stays) */
  const wk_pool *pool;          /* NULL: stopped */
  wk_etcd_publisher *publisher; /* NULL: stand-alone */
  const char *etcd_endpoints;   /* "" when stand-alone */
  const char *code;             /* the code held, as the registry's "code" JSON; NULL = not
                                   read yet */
  bool code_truncated;
} wk_status_sources;

/** Fills *out with the app's current sources (loop thread). */
typedef void (*wk_status_sources_fn)(void *ud, wk_status_sources *out);

/** Creates the status with its wake-up on `loop` (loop thread). `sources` is called
 * at each build. Never NULL (aborts when out of memory). */
wk_status *wk_status_new(uv_loop_t *loop, wk_status_sources_fn sources, void *ud);

/** Closes the wake-up handle (run the loop after): later wk_status_json calls get the
 * last document built. Loop thread. */
void wk_status_close(wk_status *st);

/** Frees the status; after wk_status_close, the loop run, and the metrics server
 * stopped. NULL is a no-op. */
void wk_status_free(wk_status *st);

/** The document as a malloc'd JSON text of *len bytes (free() it), fresh from the loop
 * when it answers within WK_STATUS_WAIT_MS, else the last one built with a first member
 * "stale_ms" (its age: the loop is stuck or very busy); NULL when none was ever built. Any thread (the metrics server's); `ud` is the wk_status (the signature
 * of wk_metrics_status.json). */
char *wk_status_json(void *ud, size_t *len);

/** The orchestrator's on_task_ended hook (`ud` is the wk_status): remembers the task
 * among the recent ones and counts it into this second's sample. Loop thread. */
void wk_status_on_task_ended(void *ud, const wk_task_result *r, const char *function);

/** Samples executor utilisation and, once a second has passed since the last sample,
 * closes it into the history. Call every few hundred ms from the loop (now: loop ms). */
void wk_status_tick(wk_status *st, int64_t now_ms, int64_t wall_offset_ms, const wk_pool *pool);

#endif

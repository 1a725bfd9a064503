/* wk_shadow.h: the shadow forwarder (DESIGN.md §3 "Shadow forwarding").
 *
 * With shadow_target_addr configured, the Worker mirrors a sampled fraction of its
 * successful SubmitTask requests to another Worker, asynchronously, with the metadata
 * `x-shadow-submit: 1`. The bytes go out exactly as they came in: the forwarder
 * rewrites nothing, and the receiving Worker (seeing the metadata, see
 * wk_shadow_is_shadow_request) strips the result_handler itself. A slow, failing or
 * absent target never delays or fails the primary submission.
 *
 *   wk_shadow_config cfg = {.target = "10.0.0.7:7070", .sample_rate = 0.1, .seed = 42};
 *   wk_shadow *s = wk_shadow_start(&cfg, err, sizeof err);
 *   ...on the actor thread, after a successful non-duplicate primary SubmitTask:
 *   wk_shadow_offer(s, encoded_request, encoded_len);
 *   ...
 *   wk_shadow_stop(s);
 *
 * How it works:
 *  - wk_shadow_offer never blocks on the network: under a mutex (held by others only
 *    to move a pointer or copy counters, never across I/O) it draws from a seeded PRNG (sampling), then
 *    reserves room in a bounded queue (queue_capacity requests and max_queued_bytes
 *    bytes) or counts a drop; the copy of the bytes is made outside the mutex.
 *  - One forwarding thread ("wk-shadow") takes requests in order and sends each as a
 *    unary /worker.v1.WorkerService/SubmitTask through wk_grpc_client with the
 *    metadata and a per-request deadline (deadline_ms). It waits on a condition
 *    variable when there is nothing to do: no polling. The answer is not decoded; an OK
 *    status counts as mirrored, anything else (a non-OK answer, the target unreachable,
 *    the deadline passed) as failed, keeping the last error text.
 *  - Logs (wk_log, JSON lines; never from wk_shadow_offer, never under the mutex) on
 *    transitions only: shadow_failing (the first failure, and the first after a
 *    success), shadow_recovered (the first success after failures), and
 *    shadow_stopped with the final counters and the number of queued requests
 *    discarded.
 *  - wk_shadow_stop returns within deadline_ms (plus scheduling): a request in flight
 *    runs to its answer or its deadline; requests still queued are discarded.
 *
 * Threads: every function is thread-safe, except that wk_shadow_stop must not run
 * concurrently with, or be followed by, any other call on the same forwarder. */
#ifndef WK_SHADOW_H
#define WK_SHADOW_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#define WK_SHADOW_METADATA_KEY "x-shadow-submit"
#define WK_SHADOW_METADATA_VALUE "1"
#define WK_SHADOW_SUBMIT_METHOD "/worker.v1.WorkerService/SubmitTask"

#define WK_SHADOW_DEFAULT_QUEUE_CAPACITY 1024u
#define WK_SHADOW_DEFAULT_DEADLINE_MS 2000u
#define WK_SHADOW_DEFAULT_MAX_QUEUED_BYTES ((size_t)64 << 20) /* 64 MiB */
#define WK_SHADOW_MAX_QUEUE_CAPACITY (1u << 20)
#define WK_SHADOW_MAX_DEADLINE_MS 60000u
#define WK_SHADOW_ERROR_MAX 256u

typedef struct wk_shadow_config {
  const char *target;      /* "host:port" (any gRPC target URI); required */
  double sample_rate;      /* fraction mirrored, 0.0 (none) .. 1.0 (all) */
  uint32_t queue_capacity; /* requests waiting at most; 0 = 1024; ≤ 2^20 */
  size_t max_queued_bytes; /* bytes waiting at most; 0 = 64 MiB */
  uint32_t deadline_ms;    /* per mirrored request; 0 = 2000; ≤ 60000 */
  uint64_t seed;           /* sampling PRNG seed: same seed, same choices */
} wk_shadow_config;

typedef struct wk_shadow_stats {
  /* offered = sampled_out + dropped + enqueued */
  uint64_t offered;     /* wk_shadow_offer calls */
  uint64_t sampled_out; /* not chosen by the sampling */
  uint64_t dropped;     /* chosen, but the queue was full (count or bytes) or no memory */
  uint64_t enqueued;    /* chosen and queued */
  /* enqueued = mirrored + failed + queued + in_flight (while running) */
  uint64_t mirrored; /* the target answered OK */
  uint64_t failed;   /* non-OK answer, unreachable target or deadline passed */
  uint64_t
      unreachable; /* of failed: no answer from the target (wk_grpc_status.reached_server false) */
  uint32_t queued; /* waiting now (not counting the one in flight) */
  bool in_flight;  /* a request is being sent now */
  int last_error_code;                  /* grpc_status_code of the last failure; 0 when none yet */
  char last_error[WK_SHADOW_ERROR_MAX]; /* "UNAVAILABLE: ..." of the last failure; "" when none */
} wk_shadow_stats;

typedef struct wk_shadow wk_shadow;

/** Validates cfg (target set; sample_rate within 0..1; limits in range), copies it,
 * creates the gRPC client (which connects lazily, at the first mirrored request) and
 * starts the forwarding thread. Returns NULL with one line in err on a bad config or
 * when the client or thread cannot be created. */
wk_shadow *wk_shadow_start(const wk_shadow_config *cfg, char *err, size_t len);

/** Offers one encoded worker.v1.SubmitTaskRequest (the bytes the primary received).
 * Meant for the actor thread, after a successful non-duplicate primary submission.
 * Never blocks on the target: samples, then copies the bytes into the queue or drops
 * them (counted). len may be 0 (req may then be NULL). */
void wk_shadow_offer(wk_shadow *s, const uint8_t *req, size_t len);

/** Copies the counters and the last error. */
void wk_shadow_stats_get(wk_shadow *s, wk_shadow_stats *out);

/** Waits until nothing is queued or in flight, at most timeout_ms (≤ 0: just checks).
 * Returns true when idle. For tests and for draining before a planned stop. */
bool wk_shadow_wait_idle(wk_shadow *s, int64_t timeout_ms);

/** The target the forwarder sends to; owned by s. */
const char *wk_shadow_target(const wk_shadow *s);

/** Stops the forwarding thread (a request in flight finishes or hits its deadline;
 * queued requests are discarded and counted in the shadow_stopped log line), joins
 * it, closes the client and frees s. NULL is a no-op. */
void wk_shadow_stop(wk_shadow *s);

/** The CLOCK_MONOTONIC instant `ms` from now, for pthread_cond_timedwait on a
 * condition variable that waits on CLOCK_MONOTONIC (as the forwarder's do). ms must be
 * >= 0. Thread-safe; reads the clock, nothing else. */
struct timespec wk_shadow_deadline_in(int64_t ms);

/** Receiver side: whether the value of the request's x-shadow-submit metadata marks a
 * shadow submission. Exactly "1" does; NULL (absent) or anything else does not. */
bool wk_shadow_is_shadow_request(const char *metadata_value);

#endif

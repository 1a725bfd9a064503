/* wk_executor_output.h: an executor's stdout and stderr, read by the worker and logged.
 *
 * Executors run untrusted code, which can write anything to file descriptors 1 and 2
 * (os.write, child processes). Those are pipes the worker reads (never its own
 * stderr): each line becomes one JSON log record, event "executor_output", with the
 * executor's id and pid, the stream's name and, while a call runs on the executor, its
 * task id, call index and call id; the text is only ever the value of the "line" field
 * (invalid UTF-8 replaced by U+FFFD), so it cannot forge a record of its own.
 *
 * Bounds, per executor: a line longer than `line_max` bytes is logged cut at that
 * length with a marker (the rest is read and discarded); at most `lines_per_s` lines
 * and about `bytes_per_s` bytes are logged per second (a token bucket holding one
 * second's worth); what is over is read and dropped, and an "executor_output_dropped"
 * record says how much (at most one a second, and one when the executor ends). The
 * worker reads without ever blocking and keeps at most `line_max` bytes per stream, so
 * an executor printing without end costs it CPU, not memory. The last bytes of stderr
 * are kept whatever the limits (wk_exec_output_tail), for start-failure messages.
 *
 * Runs on one libuv loop; every function must be called on that loop's thread. */
#ifndef WK_EXECUTOR_OUTPUT_H
#define WK_EXECUTOR_OUTPUT_H

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#define WK_EXEC_OUTPUT_TAIL_MAX 512u /* bytes of stderr kept for wk_exec_output_tail */

typedef struct wk_exec_output wk_exec_output;

typedef struct wk_exec_output_limits {
  uint32_t line_max;    /* bytes of one line logged (0: 16384) */
  uint32_t bytes_per_s; /* bytes logged per second over both streams (0: 65536) */
  uint32_t lines_per_s; /* lines logged per second over both streams (0: 200) */
} wk_exec_output_limits;

/* Counters, summed over every executor sharing them. */
typedef struct wk_exec_output_stats {
  uint64_t lines;           /* logged */
  uint64_t truncated_lines; /* logged cut at line_max */
  uint64_t truncated_bytes; /* cut off those lines */
  uint64_t dropped_lines;   /* over the rate: not logged */
  uint64_t dropped_bytes;   /* the same, in bytes (newlines included) */
} wk_exec_output_stats;

/* The call an executor runs, for attributing its output. */
typedef struct wk_exec_output_call {
  const char *task_id;
  uint32_t call_index;
  uint64_t call_id;
} wk_exec_output_call;

typedef struct wk_exec_output_hooks {
  void *arg;
  /* Fills `call` and returns true when a call runs on the executor now (may be NULL). */
  bool (*running)(void *arg, wk_exec_output_call *call);
  /* Both pipes are closed (their handles are gone); `o` stays the owner's until
   * wk_exec_output_free, which this hook may call. */
  void (*closed)(void *arg);
} wk_exec_output_hooks;

/** Creates the pipes for one executor (not yet open). `stats` (may be NULL) must
 * outlive the object. Never fails (aborts on OOM). */
wk_exec_output *wk_exec_output_new(uv_loop_t *loop, const wk_exec_output_limits *limits,
                                   wk_exec_output_stats *stats, wk_exec_output_hooks hooks);

/** The pipe to put in the spawn's stdio container for `fd` (1 or 2), with flags
 * UV_CREATE_PIPE | UV_WRITABLE_PIPE. */
uv_stream_t *wk_exec_output_pipe(wk_exec_output *o, int fd);

/** The executor was spawned with pid `pid`: starts reading. Returns the executor id
 * its records carry (unique in the process). */
uint64_t wk_exec_output_start(wk_exec_output *o, int pid);

/** The executor exited (or was never spawned): reads what its pipes still hold (a
 * bounded amount: descendants that kept them open cannot hold the worker), logs the
 * unfinished lines and the drop count, and closes both pipes; `hooks.closed` runs
 * once they are closed. Call once. */
void wk_exec_output_finish(wk_exec_output *o);

/** The last bytes (up to WK_EXEC_OUTPUT_TAIL_MAX) the executor wrote to stderr, for
 * error messages; valid until wk_exec_output_free. */
const char *wk_exec_output_tail(const wk_exec_output *o, uint32_t *len);

/** Frees `o`, once `hooks.closed` has run (its pipes' handles must be closed first).
 * The owner decides when: the pipes may reach EOF, and close, long before the
 * executor exits (a function may close fds 1 and 2). */
void wk_exec_output_free(wk_exec_output *o);

#endif

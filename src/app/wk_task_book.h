/* wk_task_book.h: what the Worker remembers of each task besides the core's truth, for
 * ListTasks and GetTaskLogs: its function, builder and labels, and the captured
 * stdout/stderr of its calls (bounded in bytes).
 *
 * Entries are kept in admission order (a sequence number each, newest last) so a
 * listing can page through them newest first with a cursor that survives removals.
 * The core decides how long a task is known (live, then retained): the orchestrator
 * removes a task's entry when the core forgets it (the core's forget hook).
 *
 * Captured output: each ended attempt of a top-level call adds one record (call index,
 * attempt, stdout, stderr) to its task's log while the task's log holds less than
 * `task_log_max_bytes`; a record that would pass it is dropped and counted. Over all
 * tasks at most `total_log_max_bytes` are kept: the logs of the oldest tasks are
 * evicted first (counted as dropped for them). Records are kept encoded as
 * GetTaskLogsResponse field-2 (CallLog) records, so an answer is their concatenation.
 *
 * Single-threaded (the orchestrator's loop). Memory: O(tasks + kept log bytes). */
#ifndef WK_TASK_BOOK_H
#define WK_TASK_BOOK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lib/wk_buf.h"
#include "lib/wk_options.h"

typedef struct wk_task_book wk_task_book;

typedef struct wk_task_book_limits {
  uint64_t task_log_max_bytes;  /* captured output kept per task (0 = none) */
  uint64_t total_log_max_bytes; /* over every task (oldest tasks' logs evicted first) */
} wk_task_book_limits;

/* One task as the book holds it (read-only for callers). */
typedef struct wk_task_entry {
  uint64_t seq; /* admission order, from 1 */
  char *task_id, *function, *builder;
  wk_option *labels; /* keys and values owned */
  size_t n_labels;
  uint64_t log_bytes;         /* kept */
  uint64_t log_dropped_bytes; /* captured but not kept (over a bound, or evicted) */
} wk_task_entry;

/** Creates an empty book. Never fails (aborts on OOM). */
wk_task_book *wk_task_book_create(const wk_task_book_limits *limits);
/** Frees the book and every entry. */
void wk_task_book_destroy(wk_task_book *b);

/** Records a newly admitted task (strings copied); an id already in the book is left
 * as it is. Returns the entry. */
const wk_task_entry *wk_task_book_add(wk_task_book *b, const char *task_id, const char *function,
                                      const char *builder, const wk_option *labels,
                                      size_t n_labels);
/** The entry of `task_id`, or NULL. */
const wk_task_entry *wk_task_book_find(const wk_task_book *b, const char *task_id);
/** Forgets `task_id` and its log (no-op when absent). */
void wk_task_book_remove(wk_task_book *b, const char *task_id);
/** Number of entries. */
size_t wk_task_book_count(const wk_task_book *b);
/** Bytes of captured output kept over all tasks. */
uint64_t wk_task_book_log_bytes(const wk_task_book *b);

/** Adds one ended attempt's captured output to the task's log (see the bounds above).
 * Unknown task ids are ignored. */
void wk_task_book_log(wk_task_book *b, const char *task_id, uint32_t index, uint32_t attempt,
                      const uint8_t *out, size_t out_len, const uint8_t *err, size_t err_len);

/** Appends the task's CallLog records (every call, or only call `call` when one_call)
 * to `out`, in the order the attempts ended. Returns false when the task is unknown. */
bool wk_task_book_logs(const wk_task_book *b, const char *task_id, bool one_call, uint32_t call,
                       wk_buf *out);

/* A listing visitor: return true to go on, false when the page is full (the entry it
 * was given is then NOT counted as listed: the next page starts with it). */
typedef bool (*wk_task_book_visit_fn)(void *ud, const wk_task_entry *e);

/** Visits entries newest first, starting below sequence number `before` (0 = from the
 * newest), examining at most `max_examined`. Sets *next to the `before` of the next
 * page, or 0 when every entry was examined. */
void wk_task_book_walk(const wk_task_book *b, uint64_t before, size_t max_examined,
                       wk_task_book_visit_fn visit, void *ud, uint64_t *next);

#endif

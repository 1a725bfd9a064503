/* wk_output_spool.h: a task's call outputs spooled to a file as they arrive, for its
 * writer (a task with a result_handler).
 *
 * Such a task's outputs never wait in memory: each call's final output, encoded as a
 * TaskResult field-7 record (wk_task_rt_encode_output), is appended to the spool file
 * in arrival order through a WK_OUTPUT_SPOOL_BUFFER-byte buffer. The spool keeps each
 * call's file offset (8 bytes per call: 8 MB for a million calls), so its reader gives
 * the records back in call order, with the same buffer size, as a wk_output_source
 * that the writers read (plugins/wk_writers.h).
 *
 * Life cycle: create (activation, on the threadpool: it opens the file), set_calls
 * (the calls phase starts; the builder has sized the task), put (each call's output,
 * on the actor thread), then on the writer's thread finish and source; destroy closes
 * and removes the file. One thread at a time: puts end before finish. The file lives
 * beside the task's scratch directory, not in it: the calls do not see it and it does
 * not count against io_scope_max_mb.
 *
 * Errors: functions that can fail return -1 with a one-line message in err naming the
 * file and the system's reason (disk full, ...). */
#ifndef WK_OUTPUT_SPOOL_H
#define WK_OUTPUT_SPOOL_H

#include <stddef.h>
#include <stdint.h>

#include "plugins/wk_writers.h"

#define WK_OUTPUT_SPOOL_BUFFER (256u * 1024u) /* bytes buffered per write and per read */

typedef struct wk_output_spool wk_output_spool;

/** Creates the spool file at `path` (it must not exist; mode 0600). Returns the spool,
 * or NULL with the reason in err. The caller owns it (wk_output_spool_destroy). */
wk_output_spool *wk_output_spool_create(const char *path, char *err, size_t err_len);

/** Sizes the spool for `calls` calls (indexes 0..calls-1); once, before any put. */
void wk_output_spool_set_calls(wk_output_spool *s, uint64_t calls);

/** Appends call `index`'s encoded output record (rec, n bytes); once per index (asserted).
 * Returns 0, or -1 with err (the file could not be written: the spool is then unusable). */
int wk_output_spool_put(wk_output_spool *s, uint64_t index, const uint8_t *rec, size_t n, char *err,
                        size_t err_len);

/** Writes what the buffer holds; the spool is then only read. Returns 0 or -1 + err. */
int wk_output_spool_finish(wk_output_spool *s, char *err, size_t err_len);

/** A source over the spooled records in call order (calls without an output are
 * skipped), for wk_writer_task.source; valid while the spool lives. Each record of
 * the source is one output. */
wk_output_source wk_output_spool_source(wk_output_spool *s);

/** Outputs put so far (distinct calls) and the bytes of their records. */
uint64_t wk_output_spool_count(const wk_output_spool *s);
uint64_t wk_output_spool_bytes(const wk_output_spool *s);

/** Closes and removes the file and frees the spool (NULL is a no-op). */
void wk_output_spool_destroy(wk_output_spool *s);

#endif

/* wk_journal_writer.h: records a running WorkerCore's inputs into rotating journal
 * files (format: adapters/wk_journal.h), off the core's thread.
 *
 * The core's thread only encodes each input into an in-memory ring (no lock, no system
 * call, no allocation); a thread of the writer's own takes what the ring holds every
 * few milliseconds, adds the CRCs and writes it. When the ring is full the input is
 * dropped and counted (the core never waits for the disk); the file then says LOST
 * there, and a replay stops at that point.
 *
 * Files: DIR/core-journal-<run start, UTC>-p<pid>-<index>.wkj, a new one when the
 * current one passes max_bytes / files; the oldest *.wkj of DIR (earlier runs' too)
 * are removed so that at most `files` remain. */
#ifndef WK_JOURNAL_WRITER_H
#define WK_JOURNAL_WRITER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/wk_core.h"

typedef struct wk_journal_writer wk_journal_writer;

typedef struct wk_journal_writer_config {
  const char *dir;     /* created if missing (one level) */
  uint64_t max_bytes;  /* all files of the directory together, about */
  uint32_t files;      /* rotated across this many (>= 2) */
  size_t ring_bytes;   /* in-memory buffer; 0 = 4 MiB */
  uint32_t flush_ms;   /* the thread writes this often; 0 = 20 */
  bool decisions;      /* also record the line of every decision (tests, debugging) */
  const char *version; /* the worker's, into the header */
} wk_journal_writer_config;

typedef struct wk_journal_stats {
  uint64_t inputs;  /* recorded */
  uint64_t dropped; /* not recorded: the ring was full */
  uint64_t bytes;   /* written to files */
  uint64_t files;   /* opened */
  uint64_t write_errors;
} wk_journal_stats;

/** Starts a journal for `core` (whose configuration becomes every file's header; its
 * clock now reads `mono_ms`, the wall clock `wall_ms`) and installs its tap on the core.
 * Opens the first file before returning. Returns NULL with a reason in `err` when the
 * directory cannot be made or written. The caller owns the writer and closes it with
 * wk_journal_writer_close before destroying the core. */
wk_journal_writer *wk_journal_writer_open(const wk_journal_writer_config *cfg, wk_core *core,
                                          int64_t mono_ms, int64_t wall_ms, char *err,
                                          size_t err_len);

/** Removes the tap from the core, writes what the ring still holds, stops the thread,
 * closes the file and frees the writer. NULL is a no-op. */
void wk_journal_writer_close(wk_journal_writer *w);

/** Waits until every input recorded so far is in the file (the core's thread; for
 * tests, benchmarks and a worker's shutdown). */
void wk_journal_writer_sync(wk_journal_writer *w);

/** Counters so far (any thread). */
wk_journal_stats wk_journal_writer_stats(const wk_journal_writer *w);

/** The file being written now (a copy into `out`), "" before the first. */
void wk_journal_writer_current_file(wk_journal_writer *w, char *out, size_t out_len);

#endif

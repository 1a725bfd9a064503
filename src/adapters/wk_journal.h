/* wk_journal.h: the incident journal's file format: WorkerCore's inputs (each with its
 * now_ms), recorded at the core's input boundary (core/wk_core_tap.h), read back and
 * printed as the core's decisions. The writer that records a running core is
 * adapters/wk_journal_writer.h; `workerctl replay` reads the files.
 *
 * A file:   "WKJOURNL" u16 version (1) u16 0 u32 0          (16 bytes)
 *           then records, each  u32 length  u32 crc32c(payload)  payload[length]
 * Integers are little-endian. A payload starts with its type byte:
 *   HEADER   (first record of every file) the run, the file's index in it, the first
 *            input's sequence number, wall and monotonic clocks at the start, and the
 *            core's configuration: what a fresh core needs to replay the inputs;
 *   INPUT    one call into the core: kind, sequence number, now_ms and its arguments.
 *            Task outputs and plugin results are not recorded, only their length (the
 *            core keeps them as opaque bytes; only their size steers its decisions);
 *            failure messages are, up to max_failure_message_bytes + 1;
 *   DECISION (core_journal_decisions only) the text line the worker printed for the
 *            input of the same sequence number: what replay must reproduce;
 *   LOST     inputs the writer's buffer could not hold were dropped here: the record
 *            ends for replay purposes.
 * A reader stops at the first record whose length runs past the end (a truncated tail:
 * the writer was killed) or whose CRC does not match, and says which and where. */
#ifndef WK_JOURNAL_H
#define WK_JOURNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/wk_core_tap.h"
#include "lib/wk_buf.h"

#define WK_JOURNAL_MAGIC "WKJOURNL"
#define WK_JOURNAL_VERSION 1u
#define WK_JOURNAL_FILE_HEADER 16u
#define WK_JOURNAL_RECORD_HEADER 8u           /* length + crc */
#define WK_JOURNAL_RECORD_MAX (4u << 20)      /* longest payload a reader accepts */
#define WK_JOURNAL_NOW_MAX (INT64_C(1) << 50) /* a now_ms beyond is no worker's (35,000 years) */
#define WK_JOURNAL_OUTPUTS_MAX (UINT64_C(1) << 40) /* largest outputs length accepted */

typedef enum wk_journal_rec_type {
  WK_JREC_HEADER = 1,
  WK_JREC_INPUT = 2,
  WK_JREC_DECISION = 3,
  WK_JREC_LOST = 4,
} wk_journal_rec_type;

/* The HEADER record. */
typedef struct wk_journal_header {
  uint64_t run_id;     /* one value per worker start */
  uint32_t file_index; /* 0, 1, 2, ... within the run */
  uint64_t first_seq;  /* sequence number of the file's first input (0: the core's first) */
  int64_t wall_ms;     /* Unix ms at mono_ms */
  int64_t mono_ms;     /* the core's clock (now_ms) when the run's journal started */
  uint32_t pid;
  bool decisions;      /* DECISION records follow the inputs */
  char version[32];    /* the worker's version */
  wk_core_config core; /* allocator left zero */
} wk_journal_header;

/* One decoded record. Its pointers point into the record itself or into the bytes
 * being read: valid until the next wk_journal_next on the same reader. */
typedef struct wk_journal_record {
  wk_journal_rec_type type;
  uint64_t offset; /* of the record in its file */
  uint64_t seq;    /* INPUT, DECISION; LOST: the first input missing */
  wk_journal_header header;
  wk_core_input input; /* INPUT: submit/outcome/stats point to the fields below */
  wk_submit_request submit;
  wk_phase_outcome outcome; /* outcome.data: data NULL, len = the outputs' length */
  wk_call_stats stats;
  char task_id[WK_TASK_ID_MAX + 2];
  char *message_buf; /* the reader's */
  const char *text;  /* DECISION: the line (not NUL-terminated) */
  size_t text_len;
  uint64_t lost; /* LOST: how many inputs were dropped */
} wk_journal_record;

/* ---- writing (the writer and tests) ------------------------------------------- */

/** Bytes of the INPUT payload for `in` (messages cut at `msg_cap` bytes). */
size_t wk_journal_input_size(const wk_core_input *in, uint32_t msg_cap);
/** Encodes the INPUT payload for `in` with sequence number `seq` into `dst`, which
 * holds wk_journal_input_size(in, msg_cap) bytes. */
void wk_journal_encode_input(uint8_t *dst, const wk_core_input *in, uint64_t seq, uint32_t msg_cap);
/** Appends the HEADER payload for `h` to `b`. */
void wk_journal_encode_header(wk_buf *b, const wk_journal_header *h);
/** Appends a DECISION payload (seq, the line) to `b`. */
void wk_journal_encode_decision(wk_buf *b, uint64_t seq, const char *line, size_t len);
/** Appends a LOST payload (the first dropped seq, how many) to `b`. */
void wk_journal_encode_lost(wk_buf *b, uint64_t seq, uint64_t count);
/** Appends the 16-byte file header to `b`. */
void wk_journal_file_header(wk_buf *b);
/** Appends one framed record (length, CRC, payload) to `b`. */
void wk_journal_frame(wk_buf *b, const uint8_t *payload, size_t len);
/** CRC-32C (Castagnoli) of `len` bytes, continuing from `crc` (0 to start). */
uint32_t wk_crc32c(uint32_t crc, const void *data, size_t len);

/* ---- reading --------------------------------------------------------------------- */

typedef struct wk_journal_reader {
  const uint8_t *data; /* the caller's bytes: a whole file */
  size_t len, pos;
  char *message; /* decoded messages (NUL-terminated) */
  size_t message_cap;
} wk_journal_reader;

/** Starts reading a file held in `data` (the caller's, kept during reading). Returns
 * false with a reason in `why` when the file header is not a journal's or its version
 * is not WK_JOURNAL_VERSION. */
bool wk_journal_reader_init(wk_journal_reader *r, const uint8_t *data, size_t len, char *why,
                            size_t why_len);
/** Decodes the next record into `rec`. Returns 1 for a record, 0 at a clean end, -1 when
 * the rest cannot be read (truncated record, CRC mismatch, malformed payload), with
 * what and at which offset in `why`. Never reads past `len`. */
int wk_journal_next(wk_journal_reader *r, wk_journal_record *rec, char *why, size_t why_len);
/** Frees the reader's buffers (not the data). */
void wk_journal_reader_free(wk_journal_reader *r);

/** Reads the file at `path` whole into *data (the caller frees it). Returns false with
 * a reason in `err` when it cannot be read. */
bool wk_journal_read_file(const char *path, uint8_t **data, size_t *len, char *err, size_t err_len);

/** Makes the input of `rec` ready for wk_core_apply_input: a phase_finished outcome
 * gets outputs of its recorded length (zero bytes from *zeros, grown as needed; the
 * caller frees *zeros). */
void wk_journal_prepare_replay(wk_journal_record *rec, uint8_t **zeros, size_t *zeros_len);

/* Where a run's inputs stand: a worker records them numbered from the file header's
 * first_seq on, each now_ms no earlier than the one before (the core's clock is
 * monotonic; its structures assume so). */
typedef struct wk_journal_order {
  uint64_t next_seq;
  int64_t last_now;
} wk_journal_order;

/** Starts checking the inputs of a run whose first file has header `h`. */
void wk_journal_order_init(wk_journal_order *o, const wk_journal_header *h);

/** Checks that INPUT `rec` is the run's next (its seq, a now_ms in 0..WK_JOURNAL_NOW_MAX
 * not going back; inputs without a now_ms are 0 and not compared) and advances. Returns false with a reason
 * in `why` otherwise: the rest of the record cannot be replayed faithfully. */
bool wk_journal_order_next(wk_journal_order *o, const wk_journal_record *rec, char *why,
                           size_t why_len);

/* ---- printing decisions ---------------------------------------------------------- */

/* The state lines are printed with: the clocks of the run, and which task holds which
 * slot (so a slot_lease_expired line names its task). The worker (for DECISION
 * records) and the replay both print through one, fed every input in order, so that
 * equal decisions print equal lines. */
typedef struct wk_journal_printer {
  int64_t wall_ms, mono_ms; /* from the HEADER */
  uint32_t slots;
  char (*slot_task)[WK_TASK_ID_MAX + 1]; /* by slot index: the task that holds it last */
} wk_journal_printer;

/** Starts a printer for a core with `h`'s configuration and clocks. */
void wk_journal_printer_init(wk_journal_printer *p, const wk_journal_header *h);
void wk_journal_printer_free(wk_journal_printer *p);

/** Appends one line (no newline) for input `seq`, `in` and the core's answer `out` to
 * `line`, and notes the slots `out` assigns. Format:
 *   #SEQ TIME t=NOW KIND [task=ID] ARGS -> ERR [RESULT] [| COMMAND ...]...   */
void wk_journal_print(wk_journal_printer *p, uint64_t seq, const wk_core_input *in,
                      const wk_core_output *out, wk_buf *line);

/** True when the input or any of its commands concerns task `id` (a slot input: the
 * task that last held the slot). Call before wk_journal_print of the same input. */
bool wk_journal_concerns(const wk_journal_printer *p, const wk_core_input *in,
                         const wk_core_output *out, const char *id);

/** The task that last held slot `slot_id` ("" if none known). */
const char *wk_journal_slot_task(const wk_journal_printer *p, uint64_t slot_id);

/** Appends an ISO-8601 UTC time ("2026-12-03T13:45:01.123Z") for the core's `now_ms`
 * under the printer's clocks. */
void wk_journal_print_time(const wk_journal_printer *p, int64_t now_ms, wk_buf *b);

#endif

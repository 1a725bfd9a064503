/* wk_writers.h: writer plugins, which put a finished task's outputs somewhere other
 * than the TaskResult (DESIGN.md §6), and their registry.
 *
 *   file      JSON lines in <output_dir>, written to a temporary file in the same
 *             directory, fsync'ed and renamed: a reader never sees half a result.
 *   redis     XADD to a Redis stream (hiredis), one MULTI/EXEC batch per task.
 *   postgres  COPY into a table (libpq), one transaction per task.
 *
 * Every writer writes one JSON object per call output, in the order of the outputs:
 *
 *   {"task_id":"t1","index":0,"ok":true,"value":<JSON>,"content_type":"json"}
 *   {"task_id":"t1","index":1,"ok":true,"value":"<base64>","content_type":"bytes"}
 *   {"task_id":"t1","index":2,"ok":false,"error":{"type":"ValueError","message":"..."}}
 *
 * A JSON value is embedded as the executor spelled it (whitespace outside strings
 * removed, so numbers keep their exact digits); a value tagged JSON that is not valid
 * JSON (as jansson reads it, without "\u0000") is written as base64 with content_type
 * "bytes". An output with no outcome set, or an empty JSON value, is "value":null.
 * Strings that are not valid UTF-8 have each bad byte replaced by U+FFFD.
 *
 * Life cycle. At start-up, for each writer the Profile enables: wk_writer_find(name),
 * then validate(settings) (the file writer checks its directory, the others connect to
 * their backend); a failure there is a configuration error. Per task, on a worker
 * thread (never the event loop: write blocks on disk and network I/O): write(). Each
 * write opens and closes its own connection or file, so any number of threads may
 * call any writer at once; writers keep no state between calls. The orchestrator
 * never hands shadow submissions to a writer.
 *
 * Errors: every function that can fail returns -1 and writes a one-line message into
 * err (always NUL-terminated when len > 0): the backend's own words, prefixed with
 * what was being talked to, e.g. "redis 127.0.0.1:6390: Connection refused" or
 * "postgres: relation \"x\" does not exist". A failed write maps to PLUGIN_FAILED. */
#ifndef WK_WRITERS_H
#define WK_WRITERS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lib/wk_buf.h"
#include "lib/wk_options.h"

/* The writers' static configuration (from the worker's configuration). Strings are
 * borrowed: they must outlive every validate and write call that is given them. NULL
 * and "" mean unset. */
typedef struct wk_writer_settings {
  const char *output_dir;          /* file: an existing, writable directory */
  const char *redis_addr;          /* redis: "host:port", "[v6addr]:port" or a redis:// or
                                  rediss:// URL (plugins/wk_redis_conn_int.h) */
  const char *redis_tls_ca_file;   /* rediss: the CA of the server's certificate */
  const char *redis_tls_cert_file; /* rediss: a client certificate, for servers asking one */
  const char *redis_tls_key_file;  /* and its key */
  const char *postgres_dsn;        /* postgres: a libpq connection string or URI */
  uint32_t connect_timeout_ms;     /* redis, postgres; 0 = WK_WRITER_CONNECT_TIMEOUT_MS */
  uint32_t io_timeout_ms;          /* redis: each socket read/write; postgres: statement_timeout
                                   and tcp_user_timeout (a DSN's own settings win);
                                   0 = WK_WRITER_IO_TIMEOUT_MS */
} wk_writer_settings;

#define WK_WRITER_CONNECT_TIMEOUT_MS 2000u
#define WK_WRITER_IO_TIMEOUT_MS 30000u
#define WK_WRITER_VALIDATE_TIMEOUT_MS 1000u /* validate's connect and PING, at most */

/* One entry of ResultHandler.options (borrowed strings). */
typedef wk_option wk_writer_option;

/* A task's outputs read one at a time (the orchestrator's spool file: see
 * app/wk_output_spool.h), so a writer never needs them all in memory. */
typedef struct wk_output_source {
  /** The next piece of the outputs blob (see wk_writer_task.outputs: whole field
   * records, the next outputs in call order): returns 1 with it in *data / *len (valid
   * until the next call), 0 at the end, or -1 with a message in err. */
  int (*next)(void *ud, const uint8_t **data, size_t *len, char *err, size_t err_len);
  void *ud;
} wk_output_source;

/* What a writer is given for one task. Everything is borrowed for the duration of the
 * write call only. */
typedef struct wk_writer_task {
  const wk_writer_settings *settings; /* the same settings validate accepted */
  const char *task_id;
  const char *function;            /* the function's name (not written; for messages) */
  uint64_t epoch;                  /* the pinned code epoch (not written) */
  const wk_writer_option *options; /* ResultHandler.options; n_options entries */
  size_t n_options;
  /* The outputs: the encoded bytes of TaskResult's repeated field 7, i.e. CallOutput
   * records each as tag 0x3A (field 7, length-delimited), varint length, message bytes
   * (what wk_task_rt_collect_outputs produces). Records of other fields are skipped;
   * a truncated or malformed blob fails the write. */
  const uint8_t *outputs;
  size_t outputs_len;
  /* Or, when set, the outputs come from here instead of the blob above (the worker's
   * way: a task's outputs are spooled to a file as they arrive, never held in memory). */
  const wk_output_source *source;
} wk_writer_task;

typedef struct wk_writer wk_writer;

struct wk_writer {
  const char *name;    /* "file", "redis", "postgres" */
  const char *setting; /* the worker setting that configures it: "output_dir", "redis_addr",
                          "postgres_dsn" (without it the writer is off) */

  /** Start-up check of the static settings this writer needs. file: output_dir is set,
   * is a directory, and a file can be created in it (a probe file is created and
   * removed). redis: redis_addr parses as host:port and the server answers PING
   * within WK_WRITER_VALIDATE_TIMEOUT_MS. postgres: postgres_dsn is set, and a
   * connection is made and answers "SELECT 1". Returns 0, or -1 with the reason in
   * err. Thread-safe; borrows s. */
  int (*validate)(const wk_writer_settings *s, char *err, size_t len);

  /** Checks a task's options before any I/O: unknown keys and bad values are
   * rejected (file: "name", a single path component not starting with '.'; redis:
   * "stream", 1..512 bytes; postgres: "table", an identifier or schema.identifier of
   * [A-Za-z_][A-Za-z0-9_]*, at most 63 bytes each). write checks them again, so
   * calling this at submission (to fail fast) is optional. Returns 0 or -1 + err. */
  int (*check_options)(const wk_writer_option *options, size_t n_options, char *err, size_t len);

  /** Writes the task's outputs, all or nothing, then appends one encoded PluginResult
   * as a TaskResult field-8 record (tag 0x42, varint length, PluginResult{plugin,
   * location, records, bytes}) to plugin_results: location is the final file path,
   * the stream key or the table name; records is the number of outputs; bytes is the
   * bytes of JSON records written (without newlines or framing). Returns 0, or -1
   * with the backend's message in err and plugin_results unchanged (its len as
   * before; it may have grown its capacity). Nothing is kept after the call: the
   * caller owns plugin_results (wk_buf_free). Blocking; thread-safe; call it from a
   * worker thread. The settings in t must be ones validate accepted.
   *   file:     <output_dir>/<name option, or the task id percent-encoded ('%' → %25,
   *             '/' → %2F, a leading '.' → %2E: reversible, so no two ids share a file)
   *             plus ".jsonl">; written as ".<final>.tmp-XXXXXX" in the same directory,
   *             fsync'ed, moved to the final name only if nothing has it (a file there,
   *             another task's or an earlier run's, fails the write and is kept), and
   *             the directory fsync'ed; mode 0644. A failure removes the temporary file.
   *   redis:    MULTI, one "XADD <stream> * task_id <id> index <i> record <json>" per
   *             output, EXEC, pipelined; "stream" defaults to "worker:outputs".
   *   postgres: BEGIN; COPY <table> (task_id, idx, record) FROM STDIN; COMMIT. The
   *             table ("worker_outputs" by default) is created first if missing:
   *             (task_id text not null, idx integer not null, record jsonb not null,
   *             written_at timestamptz not null default now()). Names are quoted, so
   *             their case is kept. Any failure rolls the whole task back. */
  int (*write)(const wk_writer *w, const wk_writer_task *t, wk_buf *plugin_results, char *err,
               size_t len);
};

/** The writer named `name` ("file", "redis", "postgres"), or NULL. The result is a
 * static object: never freed, shareable between threads. */
const wk_writer *wk_writer_find(const char *name);

/** Masks (in place, wk_mask_value) every password of `s` (redis_addr's, postgres_dsn's)
 * wherever it appears in the NUL-terminated `text`: applied to every writer error
 * before it is shown, whatever a backend library put in it. */
void wk_writers_mask_secrets(const wk_writer_settings *s, char *text);

/** The names of all writers, comma-separated, for messages ("file, redis, postgres"). */
const char *wk_writer_names(void);

/** The value of option `key` in t's options, or NULL (the last entry wins). */
const char *wk_writer_task_option(const wk_writer_task *t, const char *key);

#endif

/* wk_frame.h: the executor wire protocol (docs/executor-protocol.md): frame types,
 * an encoder into a growable buffer and a zero-copy decoder.
 *
 * Pure: no I/O, no clock, no globals. The caller owns every socket; this module only
 * turns frames into bytes and bytes into frames.
 *
 * A frame on the wire:
 *
 *   u32 length (little-endian; counts the bytes after itself: type + body)
 *   u8  type
 *   body: the type's fields in order; integers little-endian, byte strings as
 *         u32 length + bytes (no terminator)
 *
 * Every length is bounded by a caller-given `max_frame` (bytes after the prefix); the
 * decoder rejects a larger prefix as soon as its 4 bytes are in, before buffering the
 * body. Many frames may sit back to back in one buffer (pipelining, batching): decode
 * them one at a time, advancing by the size each decode reports.
 *
 * Lifetime of decoded frames: every wk_frame_bytes in a decoded wk_frame points into
 * the input the decoder was given; it is valid as long as those input bytes are. With
 * a wk_frame_buf as the input, wk_frame_buf_consume() keeps them valid, while
 * wk_frame_buf_reserve / _append / _clear / _free and wk_frame_encode into that same
 * buffer may move or free them. Copy what you keep.
 */
#ifndef WK_FRAME_H
#define WK_FRAME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lib/wk_alloc.h"

/* ---- constants ---------------------------------------------------------------- */

#define WK_FRAME_VERSION 1u            /* protocol version carried in HELLO */
#define WK_FRAME_PREFIX_SIZE 4u        /* the u32 length prefix */
#define WK_FRAME_MAX_DEFAULT (16u << 20) /* a sensible max_frame: 16 MiB */
#define WK_FRAME_CAPTURE_MAX 65536u    /* executor cap on each of stdout/stderr per call */

/* Frame types; the byte after the length prefix. */
typedef enum wk_frame_type {
  WK_FRAME_HELLO = 1,    /* executor -> worker, first frame: version, pid */
  WK_FRAME_CALL = 2,     /* worker -> executor: run one call */
  WK_FRAME_RESULT = 3,   /* executor -> worker: exactly one per CALL */
  WK_FRAME_CANCEL = 4,   /* worker -> executor: cancel a call */
  WK_FRAME_PING = 5,     /* either direction: answer with PONG, same nonce */
  WK_FRAME_PONG = 6,     /* either direction */
  WK_FRAME_SHUTDOWN = 7, /* worker -> executor: finish what was sent, then exit 0 */
} wk_frame_type;

/* Encoding of CALL args and RESULT output (== worker.v1.ContentType). */
typedef enum wk_frame_content {
  WK_FRAME_CONTENT_JSON = 0,
  WK_FRAME_CONTENT_BYTES = 1,
} wk_frame_content;

/* RESULT status. */
typedef enum wk_frame_status {
  WK_FRAME_STATUS_OK = 0,        /* output holds the return value */
  WK_FRAME_STATUS_ERROR = 1,     /* the call raised (or was cancelled, or could not load) */
  WK_FRAME_STATUS_RETRYABLE = 2, /* the call raised worker.Retryable */
} wk_frame_status;

/* Return codes. Negative values are errors; every one is fatal for the connection
 * (the peer is broken or hostile: close it). */
typedef enum wk_frame_rc {
  WK_FRAME_OK = 0,           /* decoded (or encoded) one frame */
  WK_FRAME_NEED_MORE = 1,    /* the input holds no complete frame yet: read more */
  WK_FRAME_E_TOO_LARGE = -1, /* length prefix (or an encoded frame) above max_frame */
  WK_FRAME_E_EMPTY = -2,     /* length prefix 0: no type byte */
  WK_FRAME_E_TYPE = -3,      /* unknown frame type */
  WK_FRAME_E_TRUNCATED = -4, /* a field runs past the end of its frame */
  WK_FRAME_E_TRAILING = -5,  /* bytes left in the frame after its last field */
  WK_FRAME_E_VALUE = -6,     /* a field out of range (status, content_type) */
} wk_frame_rc;

/** Name of a return code ("E_TRUNCATED"); "UNKNOWN" outside the enum. Static string. */
const char *wk_frame_rc_name(wk_frame_rc rc);

/** One line describing a return code for logs ("a field runs past the end of its
 * frame"). Static string. */
const char *wk_frame_rc_describe(wk_frame_rc rc);

/** Name of a frame type ("CALL"); "UNKNOWN" outside the enum. Static string. */
const char *wk_frame_type_name(wk_frame_type t);

/* ---- frames ------------------------------------------------------------------- */

/* A byte string: a view, never owned, not NUL-terminated. len 0 may have ptr NULL. */
typedef struct wk_frame_bytes {
  const uint8_t *ptr;
  uint32_t len;
} wk_frame_bytes;

/** A view of the NUL-terminated string `s` (NULL gives the empty view). The string
 * must outlive the view and be shorter than 4 GiB. */
wk_frame_bytes wk_frame_bytes_cstr(const char *s);

/** True when `b` holds exactly the NUL-terminated string `s`. */
bool wk_frame_bytes_eq_cstr(wk_frame_bytes b, const char *s);

typedef struct wk_frame_hello {
  uint32_t version; /* WK_FRAME_VERSION of the executor */
  uint32_t pid;     /* the executor's process id */
} wk_frame_hello;

typedef struct wk_frame_call {
  uint64_t call_id; /* chosen by the worker, unique per connection */
  wk_frame_bytes task_id;
  wk_frame_bytes function; /* function name */
  uint64_t epoch;          /* code epoch */
  wk_frame_bytes code_dir; /* absolute path of the epoch directory */
  wk_frame_bytes entrypoint; /* "module:attr"; empty = "main:handler" */
  wk_frame_content content_type; /* of args */
  uint32_t call_index;
  uint32_t deadline_ms; /* relative to receipt; 0 = no deadline */
  wk_frame_bytes scratch_dir;
  wk_frame_bytes traceparent; /* W3C trace context; may be empty */
  wk_frame_bytes args;
} wk_frame_call;

typedef struct wk_frame_result {
  uint64_t call_id;
  wk_frame_status status;
  wk_frame_content content_type; /* of output */
  wk_frame_bytes output;         /* the return value (status OK); empty otherwise */
  wk_frame_bytes error_type;     /* exception type name (status != OK) */
  wk_frame_bytes error_message;
  wk_frame_bytes traceback;
  uint64_t cpu_us;     /* executor CPU time (user + system) spent on this call */
  uint64_t max_rss_kb; /* executor peak resident set size so far */
  wk_frame_bytes stdout_bytes; /* captured, at most WK_FRAME_CAPTURE_MAX bytes by contract */
  wk_frame_bytes stderr_bytes;
} wk_frame_result;

typedef struct wk_frame_cancel {
  uint64_t call_id;
} wk_frame_cancel;

typedef struct wk_frame_ping {
  uint64_t nonce; /* PONG echoes the PING's nonce */
} wk_frame_ping;

/* A decoded (or to-be-encoded) frame: `type` selects the union member. SHUTDOWN has
 * no body; PING and PONG both use `ping`. */
typedef struct wk_frame {
  wk_frame_type type;
  union {
    wk_frame_hello hello;
    wk_frame_call call;
    wk_frame_result result;
    wk_frame_cancel cancel;
    wk_frame_ping ping;
  };
} wk_frame;

/* ---- buffer ------------------------------------------------------------------- */

/* A growable byte buffer owned by the caller: bytes data[start..end) are held.
 * Used for the write side (frames are encoded at the end) and the read side (read()
 * into wk_frame_buf_reserve space, decode from wk_frame_buf_bytes, consume).
 * Memory comes from the allocator given at init; running out aborts. */
typedef struct wk_frame_buf {
  uint8_t *data;
  size_t start; /* first held byte */
  size_t end;   /* one past the last held byte */
  size_t cap;   /* bytes allocated at data */
  wk_allocator alloc;
} wk_frame_buf;

/** Initialises an empty buffer (no allocation yet). `a` is copied; NULL means
 * malloc/free. */
void wk_frame_buf_init(wk_frame_buf *b, const wk_allocator *a);

/** Frees the buffer's memory; the buffer is empty afterwards and may be reused. */
void wk_frame_buf_free(wk_frame_buf *b);

/** Start of the held bytes (NULL when nothing was ever allocated). */
static inline const uint8_t *wk_frame_buf_bytes(const wk_frame_buf *b) {
  return b->data ? b->data + b->start : NULL;
}

/** Number of held bytes. */
static inline size_t wk_frame_buf_size(const wk_frame_buf *b) { return b->end - b->start; }

/** Makes room for at least `n` more bytes after the held ones and returns where they
 * go (for read()). Nothing is held until wk_frame_buf_commit. May move the held
 * bytes: views into the buffer become invalid. Never returns NULL (aborts on OOM). */
uint8_t *wk_frame_buf_reserve(wk_frame_buf *b, size_t n);

/** Marks `n` bytes written into the space from wk_frame_buf_reserve as held; `n`
 * must not exceed what was reserved. */
void wk_frame_buf_commit(wk_frame_buf *b, size_t n);

/** Appends `n` bytes from `p` (may move the held bytes, like reserve). */
void wk_frame_buf_append(wk_frame_buf *b, const void *p, size_t n);

/** Drops the first `n` held bytes (n <= size). Does not move memory: views into the
 * dropped bytes stay valid until the next reserve/append/encode/clear/free. */
void wk_frame_buf_consume(wk_frame_buf *b, size_t n);

/** Drops every held byte, keeping the allocation. */
void wk_frame_buf_clear(wk_frame_buf *b);

/* ---- codec -------------------------------------------------------------------- */

/** Total bytes `f` takes on the wire, length prefix included; 0 when f->type is not a
 * known frame type. Pure arithmetic: no field is validated. */
uint64_t wk_frame_encoded_size(const wk_frame *f);

/** Appends the encoding of `f` to `b`.
 * Returns WK_FRAME_OK; or, with `b` unchanged: WK_FRAME_E_TYPE (unknown f->type),
 * WK_FRAME_E_VALUE (status or content_type out of range), WK_FRAME_E_TOO_LARGE (the
 * bytes after the prefix would exceed `max_frame`, e.g. args too big).
 * The frame's views are only read; `b` may not alias them. May move the buffer's
 * held bytes (like wk_frame_buf_reserve). */
wk_frame_rc wk_frame_encode(wk_frame_buf *b, const wk_frame *f, uint32_t max_frame);

/** Decodes the first frame of `in[0..in_len)`; never reads past in_len.
 * Returns:
 *   WK_FRAME_OK: `*out` holds the frame; its views point into `in`; `*size` = bytes
 *     the frame took (prefix included): advance the input by that much.
 *   WK_FRAME_NEED_MORE: no complete frame yet; `*size` = the input length needed to
 *     make progress (4 while the prefix is incomplete, then the whole frame's size),
 *     always > in_len. Nothing in `*out` is meaningful.
 *   WK_FRAME_E_TOO_LARGE: the length prefix exceeds `max_frame` (reported as soon as
 *     the prefix is in); WK_FRAME_E_EMPTY, WK_FRAME_E_TYPE, WK_FRAME_E_TRUNCATED,
 *     WK_FRAME_E_TRAILING, WK_FRAME_E_VALUE: a malformed frame. `*size` = 0; out->type
 *     is the frame's type when it is a known one (for the log line), else 0. Every
 *     error is fatal for the connection.
 * `in` may be NULL when in_len is 0. */
wk_frame_rc wk_frame_decode(const uint8_t *in, size_t in_len, uint32_t max_frame, wk_frame *out,
                            size_t *size);

#endif

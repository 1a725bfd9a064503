/* wk_frame.h: the executor wire protocol (docs/specs/executor-protocol.md): frame types,
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

#define WK_FRAME_VERSION 5u              /* protocol version carried in HELLO */
#define WK_FRAME_PREFIX_SIZE 4u          /* the u32 length prefix */
#define WK_FRAME_MAX_DEFAULT (16u << 20) /* a sensible max_frame: 16 MiB */
#define WK_FRAME_CAPTURE_MAX 65536u      /* executor cap on each of stdout/stderr per call */

/* Frame types; the byte after the length prefix. */
typedef enum wk_frame_type {
  WK_FRAME_HELLO = 1,           /* executor -> worker, first frame: version, pid */
  WK_FRAME_CALL = 2,            /* worker -> executor: run one call */
  WK_FRAME_RESULT = 3,          /* executor -> worker: exactly one per CALL */
  WK_FRAME_CANCEL = 4,          /* worker -> executor: cancel a call */
  WK_FRAME_PING = 5,            /* either direction: answer with PONG, same nonce */
  WK_FRAME_PONG = 6,            /* either direction */
  WK_FRAME_SHUTDOWN = 7,        /* worker -> executor: finish what was sent, then exit 0 */
  WK_FRAME_SUBCALLS = 8,        /* executor -> worker: a running call asks for child calls */
  WK_FRAME_SUBCALLS_RESULT = 9, /* worker -> executor: the children's outcomes, in order */
  WK_FRAME_STACK_REQUEST = 10,  /* worker -> executor: send the running call's Python stack */
  WK_FRAME_STACK = 11,          /* executor -> worker: answer to STACK_REQUEST */
  WK_FRAME_RECALL = 12,         /* worker -> executor: give a queued call back unstarted
                                   (body as CANCEL: the `cancel` member) */
  WK_FRAME_SCRATCH = 13,        /* executor -> worker: a running call's first use of
                                   ctx.scratch_dir: make the task's scratch directory */
  WK_FRAME_SCRATCH_RESULT = 14, /* worker -> executor: answer to SCRATCH ("" = made) */
} wk_frame_type;

/* Encoding of CALL args and RESULT output (== worker.v1.ContentType). */
typedef enum wk_frame_content {
  WK_FRAME_CONTENT_JSON = 0,
  WK_FRAME_CONTENT_BYTES = 1,
} wk_frame_content;

/* RESULT status (and the status of each child in SUBCALLS_RESULT). */
typedef enum wk_frame_status {
  WK_FRAME_STATUS_OK = 0,          /* output holds the return value */
  WK_FRAME_STATUS_ERROR = 1,       /* the call raised (or was cancelled, or could not load) */
  WK_FRAME_STATUS_RETRYABLE = 2,   /* the call raised worker.Retryable */
  WK_FRAME_STATUS_NOT_STARTED = 3, /* RESULT only: a RECALLed call given back unstarted */
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
  WK_FRAME_E_VALUE = -6,     /* a field out of range (status, content_type, count 0) */
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
  wk_frame_bytes function;       /* function name */
  uint64_t epoch;                /* code epoch */
  wk_frame_bytes code_dir;       /* absolute path of the epoch directory */
  wk_frame_bytes entrypoint;     /* "module:attr"; empty = "main:handler" */
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
  uint64_t cpu_us;             /* executor CPU time (user + system) spent on this call */
  uint64_t max_rss_kb;         /* executor peak resident set size so far */
  wk_frame_bytes stdout_bytes; /* captured, at most WK_FRAME_CAPTURE_MAX bytes by contract */
  wk_frame_bytes stderr_bytes;
} wk_frame_result;

typedef struct wk_frame_cancel {
  uint64_t call_id;
} wk_frame_cancel;

typedef struct wk_frame_ping {
  uint64_t nonce; /* PONG echoes the PING's nonce */
} wk_frame_ping;

/* Lists (SUBCALLS args, SUBCALLS_RESULT children). On the wire a list is a u32 count
 * (at least 1) followed by that many items. In memory a list has two forms:
 *   - to encode, point `args` / `children` at `count` items;
 *   - a decoded frame has `args` / `children` NULL and `*_enc` viewing the encoded items
 *     (the bytes after the count, validated): walk them with wk_frame_iter.
 * The encoder takes the array when it is non-NULL, else copies `*_enc`, which must then
 * hold exactly `count` well-formed items (so a decoded frame re-encodes as it is). */

typedef struct wk_frame_subcalls {
  uint64_t parent_call_id;       /* the running CALL asking */
  uint64_t request_id;           /* chosen by the executor, unique per connection */
  wk_frame_bytes function;       /* children's function; empty = the parent's */
  wk_frame_bytes entrypoint;     /* "module:attr"; empty = the parent's */
  wk_frame_content content_type; /* of every arg */
  uint32_t count;                /* children, >= 1 */
  const wk_frame_bytes *args;    /* encode: `count` args, in order; NULL when decoded */
  wk_frame_bytes args_enc;       /* decoded: the encoded args (u32 length + bytes each) */
} wk_frame_subcalls;

/* One child's outcome: RESULT's first fields without the accounting. */
typedef struct wk_frame_child {
  wk_frame_status status;
  wk_frame_content content_type; /* of output */
  wk_frame_bytes output;         /* the return value (status OK); empty otherwise */
  wk_frame_bytes error_type;
  wk_frame_bytes error_message;
  wk_frame_bytes traceback;
} wk_frame_child;

typedef struct wk_frame_subcalls_result {
  uint64_t request_id; /* the SUBCALLS' */
  uint32_t count;      /* == the SUBCALLS' count, >= 1 */
  const wk_frame_child
      *children;               /* encode: `count` outcomes, in SUBCALLS order; NULL when decoded */
  wk_frame_bytes children_enc; /* decoded: the encoded outcomes */
} wk_frame_subcalls_result;

typedef struct wk_frame_stack_request {
  uint64_t call_id; /* the call whose stack is wanted */
} wk_frame_stack_request;

typedef struct wk_frame_stack {
  uint64_t call_id;     /* the STACK_REQUEST's */
  wk_frame_bytes stack; /* the main thread's Python stack; empty when the call is not running */
} wk_frame_stack;

typedef struct wk_frame_scratch {
  uint64_t call_id;    /* the running call that asks */
  uint64_t request_id; /* chosen by the executor, echoed in SCRATCH_RESULT */
} wk_frame_scratch;

typedef struct wk_frame_scratch_result {
  uint64_t request_id;  /* the SCRATCH's */
  wk_frame_bytes error; /* empty: the directory exists; else why it could not be made */
} wk_frame_scratch_result;

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
    wk_frame_subcalls subcalls;
    wk_frame_subcalls_result subcalls_result;
    wk_frame_stack_request stack_request;
    wk_frame_stack stack;
    wk_frame_scratch scratch;
    wk_frame_scratch_result scratch_result;
  };
} wk_frame;

/* An iterator over the items of a decoded list (args_enc / children_enc). */
typedef struct wk_frame_iter {
  const uint8_t *p;
  size_t left;        /* encoded bytes not yet read */
  uint32_t remaining; /* items not yet read */
} wk_frame_iter;

/** An iterator over the args of a decoded SUBCALLS (its args_enc and count). */
wk_frame_iter wk_frame_subcalls_args(const wk_frame_subcalls *s);

/** An iterator over the children of a decoded SUBCALLS_RESULT. */
wk_frame_iter wk_frame_subcalls_children(const wk_frame_subcalls_result *r);

/** The next arg: true and `*arg` (a view into the frame's input), or false after the
 * last one (or at a malformed item, which a decoded frame never has). */
bool wk_frame_iter_next_arg(wk_frame_iter *it, wk_frame_bytes *arg);

/** The next child outcome, like wk_frame_iter_next_arg. */
bool wk_frame_iter_next_child(wk_frame_iter *it, wk_frame_child *child);

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

/** When the held bytes begin with a frame's length prefix but not the whole frame:
 * true, with the frame's size on the wire (prefix included, as the prefix claims it:
 * nothing is checked against a limit) in *total and the bytes still missing in *rest.
 * False otherwise (fewer than 4 bytes held, or a whole frame held). */
bool wk_frame_buf_partial(const wk_frame_buf *b, uint64_t *total, uint64_t *rest);

/* ---- codec -------------------------------------------------------------------- */

/** Total bytes `f` takes on the wire, length prefix included; 0 when f->type is not a
 * known frame type. Pure arithmetic: no field is validated (a list's size saturates at
 * UINT64_MAX). */
uint64_t wk_frame_encoded_size(const wk_frame *f);

/** Appends the encoding of `f` to `b`.
 * Returns WK_FRAME_OK; or, with `b` unchanged: WK_FRAME_E_TYPE (unknown f->type),
 * WK_FRAME_E_VALUE (status or content_type out of range, a list of count 0, or an
 * `*_enc` list that does not hold exactly `count` well-formed items),
 * WK_FRAME_E_TOO_LARGE (the bytes after the prefix would exceed `max_frame`, e.g. args
 * too big).
 * The frame's views are only read; `b` may not alias them. May move the buffer's
 * held bytes (like wk_frame_buf_reserve). */
wk_frame_rc wk_frame_encode(wk_frame_buf *b, const wk_frame *f, uint32_t max_frame);

/** Encodes `f` into a new block of exactly its size: `*out` (malloc'ed, the caller
 * frees it) and `*out_len`. Returns what wk_frame_encode returns; on an error nothing
 * is allocated. Out of memory aborts. */
wk_frame_rc wk_frame_encode_alloc(const wk_frame *f, uint32_t max_frame, uint8_t **out,
                                  size_t *out_len);

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

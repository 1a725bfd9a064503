/* wk_frame.c: encoder, decoder and buffer of the executor wire protocol.
 * See wk_frame.h and docs/specs/executor-protocol.md. */
#include "adapters/wk_frame.h"

#include <stdlib.h>
#include <string.h>

#include "lib/wk_alloc.h"
#include "lib/wk_assert.h"

/* Frame sizes (prefix + up to UINT32_MAX bytes) are held in size_t without checks. */
_Static_assert(SIZE_MAX > UINT32_MAX, "wk_frame needs a 64-bit size_t");

/* ---- names -------------------------------------------------------------------- */

const char *wk_frame_rc_name(wk_frame_rc rc) {
  switch (rc) {
    case WK_FRAME_OK: return "OK";
    case WK_FRAME_NEED_MORE: return "NEED_MORE";
    case WK_FRAME_E_TOO_LARGE: return "E_TOO_LARGE";
    case WK_FRAME_E_EMPTY: return "E_EMPTY";
    case WK_FRAME_E_TYPE: return "E_TYPE";
    case WK_FRAME_E_TRUNCATED: return "E_TRUNCATED";
    case WK_FRAME_E_TRAILING: return "E_TRAILING";
    case WK_FRAME_E_VALUE: return "E_VALUE";
  }
  return "UNKNOWN";
}

const char *wk_frame_rc_describe(wk_frame_rc rc) {
  switch (rc) {
    case WK_FRAME_OK: return "ok";
    case WK_FRAME_NEED_MORE: return "incomplete frame, more bytes needed";
    case WK_FRAME_E_TOO_LARGE: return "frame length above the maximum frame size";
    case WK_FRAME_E_EMPTY: return "frame length 0 (no type byte)";
    case WK_FRAME_E_TYPE: return "unknown frame type";
    case WK_FRAME_E_TRUNCATED: return "a field runs past the end of its frame";
    case WK_FRAME_E_TRAILING: return "bytes left in the frame after its last field";
    case WK_FRAME_E_VALUE: return "a field value out of range (status, content_type or count)";
  }
  return "unknown return code";
}

const char *wk_frame_type_name(wk_frame_type t) {
  switch (t) {
    case WK_FRAME_HELLO: return "HELLO";
    case WK_FRAME_CALL: return "CALL";
    case WK_FRAME_RESULT: return "RESULT";
    case WK_FRAME_CANCEL: return "CANCEL";
    case WK_FRAME_PING: return "PING";
    case WK_FRAME_PONG: return "PONG";
    case WK_FRAME_SHUTDOWN: return "SHUTDOWN";
    case WK_FRAME_SUBCALLS: return "SUBCALLS";
    case WK_FRAME_SUBCALLS_RESULT: return "SUBCALLS_RESULT";
    case WK_FRAME_STACK_REQUEST: return "STACK_REQUEST";
    case WK_FRAME_STACK: return "STACK";
    case WK_FRAME_RECALL: return "RECALL";
    case WK_FRAME_SCRATCH: return "SCRATCH";
    case WK_FRAME_SCRATCH_RESULT: return "SCRATCH_RESULT";
  }
  return "UNKNOWN";
}

static bool type_known(unsigned t) {
  return t >= (unsigned)WK_FRAME_HELLO && t <= (unsigned)WK_FRAME_SCRATCH_RESULT;
}

static bool content_valid(unsigned c) { return c <= (unsigned)WK_FRAME_CONTENT_BYTES; }

static bool status_valid(unsigned s) { return s <= (unsigned)WK_FRAME_STATUS_RETRYABLE; }

/* A RESULT may also say NOT_STARTED (a child's status may not). */
static bool result_status_valid(unsigned s) { return s <= (unsigned)WK_FRAME_STATUS_NOT_STARTED; }

/* ---- byte views --------------------------------------------------------------- */

wk_frame_bytes wk_frame_bytes_cstr(const char *s) {
  wk_frame_bytes b = {NULL, 0};
  if (!s) return b;
  size_t n = strlen(s);
  WK_ASSERT(n <= UINT32_MAX);
  b.ptr = (const uint8_t *)s;
  b.len = (uint32_t)n;
  return b;
}

bool wk_frame_bytes_eq_cstr(wk_frame_bytes b, const char *s) {
  WK_ASSERT(s != NULL);
  size_t n = strlen(s);
  if (n != b.len) return false;
  return n == 0 || memcmp(b.ptr, s, n) == 0;
}

/* ---- buffer ------------------------------------------------------------------- */

#define BUF_MIN_CAP 256u

void wk_frame_buf_init(wk_frame_buf *b, const wk_allocator *a) {
  WK_ASSERT(b != NULL);
  memset(b, 0, sizeof *b);
  if (a) b->alloc = *a;
}

void wk_frame_buf_free(wk_frame_buf *b) {
  WK_ASSERT(b != NULL);
  WK_ASSERT(b->start <= b->end && b->end <= b->cap);
  wk_allocator_free(&b->alloc, b->data, b->cap);
  b->data = NULL;
  b->start = b->end = b->cap = 0;
}

uint8_t *wk_frame_buf_reserve(wk_frame_buf *b, size_t n) {
  WK_ASSERT(b != NULL);
  WK_ASSERT(b->start <= b->end && b->end <= b->cap);
  if (b->data && b->cap - b->end >= n) return b->data + b->end;
  size_t held = b->end - b->start;
  if (n > SIZE_MAX - held) abort(); /* no buffer can be that large */
  size_t need = held + n;
  if (b->data && need <= b->cap) {
    /* fits once the consumed prefix is reclaimed; start > 0 here, so this happens at
     * most once between two consumes */
    memmove(b->data, b->data + b->start, held);
  } else {
    size_t cap = b->cap > BUF_MIN_CAP ? b->cap : BUF_MIN_CAP;
    while (cap < need) {
      if (cap > SIZE_MAX / 2) abort();
      cap *= 2;
    }
    uint8_t *data = wk_allocator_calloc(&b->alloc, cap, 1);
    if (held) memcpy(data, b->data + b->start, held);
    wk_allocator_free(&b->alloc, b->data, b->cap);
    b->data = data;
    b->cap = cap;
  }
  b->start = 0;
  b->end = held;
  WK_ASSERT(b->cap - b->end >= n);
  return b->data + b->end;
}

void wk_frame_buf_commit(wk_frame_buf *b, size_t n) {
  WK_ASSERT(b != NULL);
  WK_ASSERT(n <= b->cap - b->end);
  b->end += n;
  WK_ASSERT(b->end <= b->cap);
}

void wk_frame_buf_append(wk_frame_buf *b, const void *p, size_t n) {
  WK_ASSERT(b != NULL);
  if (n == 0) return;
  WK_ASSERT(p != NULL);
  uint8_t *dst = wk_frame_buf_reserve(b, n);
  memcpy(dst, p, n);
  wk_frame_buf_commit(b, n);
}

void wk_frame_buf_consume(wk_frame_buf *b, size_t n) {
  WK_ASSERT(b != NULL);
  WK_ASSERT(n <= b->end - b->start);
  b->start += n;
  if (b->start == b->end) b->start = b->end = 0; /* empty: next write starts at the front */
}

void wk_frame_buf_clear(wk_frame_buf *b) {
  WK_ASSERT(b != NULL);
  b->start = b->end = 0;
}

/* ---- encoder ------------------------------------------------------------------ */

/* Body sizes (after the type byte). Byte strings cost 4 + len. */
#define STR_SIZE(b) (4u + (uint64_t)(b).len)

/* Fixed bytes of one child outcome: status, content_type and 4 string lengths. */
#define CHILD_FIXED 18u

static uint64_t sat_add(uint64_t a, uint64_t b) { return a > UINT64_MAX - b ? UINT64_MAX : a + b; }

static uint64_t args_size(const wk_frame_subcalls *s) {
  if (!s->args) return s->args_enc.len;
  uint64_t n = 0;
  for (uint32_t i = 0; i < s->count; i++) n = sat_add(n, STR_SIZE(s->args[i]));
  return n;
}

static uint64_t child_size(const wk_frame_child *k) {
  return CHILD_FIXED + (uint64_t)k->output.len + k->error_type.len + k->error_message.len +
         k->traceback.len;
}

static uint64_t children_size(const wk_frame_subcalls_result *r) {
  if (!r->children) return r->children_enc.len;
  uint64_t n = 0;
  for (uint32_t i = 0; i < r->count; i++) n = sat_add(n, child_size(&r->children[i]));
  return n;
}

static uint64_t body_size(const wk_frame *f) {
  switch (f->type) {
    case WK_FRAME_HELLO: return 4u + 4u;
    case WK_FRAME_CALL: {
      const wk_frame_call *c = &f->call;
      return 8u + STR_SIZE(c->task_id) + STR_SIZE(c->function) + 8u + STR_SIZE(c->code_dir) +
             STR_SIZE(c->entrypoint) + 1u + 4u + 4u + STR_SIZE(c->scratch_dir) +
             STR_SIZE(c->traceparent) + STR_SIZE(c->args);
    }
    case WK_FRAME_RESULT: {
      const wk_frame_result *r = &f->result;
      return 8u + 1u + 1u + STR_SIZE(r->output) + STR_SIZE(r->error_type) +
             STR_SIZE(r->error_message) + STR_SIZE(r->traceback) + 8u + 8u +
             STR_SIZE(r->stdout_bytes) + STR_SIZE(r->stderr_bytes);
    }
    case WK_FRAME_CANCEL:
    case WK_FRAME_RECALL: return 8u;
    case WK_FRAME_PING:
    case WK_FRAME_PONG: return 8u;
    case WK_FRAME_SHUTDOWN: return 0u;
    case WK_FRAME_SUBCALLS: {
      const wk_frame_subcalls *k = &f->subcalls;
      return sat_add(8u + 8u + STR_SIZE(k->function) + STR_SIZE(k->entrypoint) + 1u + 4u,
                     args_size(k));
    }
    case WK_FRAME_SUBCALLS_RESULT: return sat_add(8u + 4u, children_size(&f->subcalls_result));
    case WK_FRAME_STACK_REQUEST: return 8u;
    case WK_FRAME_STACK: return 8u + STR_SIZE(f->stack.stack);
    case WK_FRAME_SCRATCH: return 8u + 8u;
    case WK_FRAME_SCRATCH_RESULT: return 8u + STR_SIZE(f->scratch_result.error);
  }
  return UINT64_MAX;
}

uint64_t wk_frame_encoded_size(const wk_frame *f) {
  WK_ASSERT(f != NULL);
  if (!type_known((unsigned)f->type)) return 0;
  return sat_add(WK_FRAME_PREFIX_SIZE + 1u, body_size(f));
}

static bool encodable(const wk_frame *f); /* with the decoder: it walks encoded lists */

static uint8_t *put_u8(uint8_t *p, unsigned v) {
  WK_ASSERT(v <= UINT8_MAX);
  *p = (uint8_t)v;
  return p + 1;
}

static uint8_t *put_u32(uint8_t *p, uint32_t v) {
  p[0] = (uint8_t)v;
  p[1] = (uint8_t)(v >> 8);
  p[2] = (uint8_t)(v >> 16);
  p[3] = (uint8_t)(v >> 24);
  return p + 4;
}

static uint8_t *put_u64(uint8_t *p, uint64_t v) {
  p = put_u32(p, (uint32_t)v);
  return put_u32(p, (uint32_t)(v >> 32));
}

static uint8_t *put_bytes(uint8_t *p, wk_frame_bytes b) {
  p = put_u32(p, b.len);
  if (b.len) {
    WK_ASSERT(b.ptr != NULL);
    memcpy(p, b.ptr, b.len);
  }
  return p + b.len;
}

static uint8_t *put_raw(uint8_t *p, wk_frame_bytes b) {
  if (b.len) {
    WK_ASSERT(b.ptr != NULL);
    memcpy(p, b.ptr, b.len);
  }
  return p + b.len;
}

static uint8_t *put_body(uint8_t *p, const wk_frame *f) {
  switch (f->type) {
    case WK_FRAME_HELLO: p = put_u32(p, f->hello.version); return put_u32(p, f->hello.pid);
    case WK_FRAME_CALL: {
      const wk_frame_call *c = &f->call;
      p = put_u64(p, c->call_id);
      p = put_bytes(p, c->task_id);
      p = put_bytes(p, c->function);
      p = put_u64(p, c->epoch);
      p = put_bytes(p, c->code_dir);
      p = put_bytes(p, c->entrypoint);
      p = put_u8(p, (unsigned)c->content_type);
      p = put_u32(p, c->call_index);
      p = put_u32(p, c->deadline_ms);
      p = put_bytes(p, c->scratch_dir);
      p = put_bytes(p, c->traceparent);
      return put_bytes(p, c->args);
    }
    case WK_FRAME_RESULT: {
      const wk_frame_result *r = &f->result;
      p = put_u64(p, r->call_id);
      p = put_u8(p, (unsigned)r->status);
      p = put_u8(p, (unsigned)r->content_type);
      p = put_bytes(p, r->output);
      p = put_bytes(p, r->error_type);
      p = put_bytes(p, r->error_message);
      p = put_bytes(p, r->traceback);
      p = put_u64(p, r->cpu_us);
      p = put_u64(p, r->max_rss_kb);
      p = put_bytes(p, r->stdout_bytes);
      return put_bytes(p, r->stderr_bytes);
    }
    case WK_FRAME_CANCEL:
    case WK_FRAME_RECALL: return put_u64(p, f->cancel.call_id);
    case WK_FRAME_PING:
    case WK_FRAME_PONG: return put_u64(p, f->ping.nonce);
    case WK_FRAME_SHUTDOWN: return p;
    case WK_FRAME_SUBCALLS: {
      const wk_frame_subcalls *k = &f->subcalls;
      p = put_u64(p, k->parent_call_id);
      p = put_u64(p, k->request_id);
      p = put_bytes(p, k->function);
      p = put_bytes(p, k->entrypoint);
      p = put_u8(p, (unsigned)k->content_type);
      p = put_u32(p, k->count);
      if (!k->args) return put_raw(p, k->args_enc);
      for (uint32_t i = 0; i < k->count; i++) p = put_bytes(p, k->args[i]);
      return p;
    }
    case WK_FRAME_SUBCALLS_RESULT: {
      const wk_frame_subcalls_result *r = &f->subcalls_result;
      p = put_u64(p, r->request_id);
      p = put_u32(p, r->count);
      if (!r->children) return put_raw(p, r->children_enc);
      for (uint32_t i = 0; i < r->count; i++) {
        const wk_frame_child *k = &r->children[i];
        p = put_u8(p, (unsigned)k->status);
        p = put_u8(p, (unsigned)k->content_type);
        p = put_bytes(p, k->output);
        p = put_bytes(p, k->error_type);
        p = put_bytes(p, k->error_message);
        p = put_bytes(p, k->traceback);
      }
      return p;
    }
    case WK_FRAME_STACK_REQUEST: return put_u64(p, f->stack_request.call_id);
    case WK_FRAME_STACK: p = put_u64(p, f->stack.call_id); return put_bytes(p, f->stack.stack);
    case WK_FRAME_SCRATCH:
      p = put_u64(p, f->scratch.call_id);
      return put_u64(p, f->scratch.request_id);
    case WK_FRAME_SCRATCH_RESULT:
      p = put_u64(p, f->scratch_result.request_id);
      return put_bytes(p, f->scratch_result.error);
  }
  return p;
}

/* Checks that f can be encoded within max_frame; *total = its bytes on the wire. */
static wk_frame_rc encode_check(const wk_frame *f, uint32_t max_frame, size_t *total) {
  WK_ASSERT(f != NULL);
  if (!type_known((unsigned)f->type)) return WK_FRAME_E_TYPE;
  if (!encodable(f)) return WK_FRAME_E_VALUE;
  uint64_t len = sat_add(1u, body_size(f)); /* the prefix's value: type + body */
  if (len > max_frame) return WK_FRAME_E_TOO_LARGE;
  *total = (size_t)(WK_FRAME_PREFIX_SIZE + len);
  return WK_FRAME_OK;
}

/* Writes f's encoding, `total` bytes (from encode_check), at start. */
static void encode_at(uint8_t *start, size_t total, const wk_frame *f) {
  uint8_t *p = put_u32(start, (uint32_t)(total - WK_FRAME_PREFIX_SIZE));
  p = put_u8(p, (unsigned)f->type);
  p = put_body(p, f);
  WK_ASSERT((size_t)(p - start) == total); /* the size computed is the size written */
}

wk_frame_rc wk_frame_encode(wk_frame_buf *b, const wk_frame *f, uint32_t max_frame) {
  WK_ASSERT(b != NULL);
  size_t total;
  wk_frame_rc rc = encode_check(f, max_frame, &total);
  if (rc != WK_FRAME_OK) return rc;
  encode_at(wk_frame_buf_reserve(b, total), total, f);
  wk_frame_buf_commit(b, total);
  return WK_FRAME_OK;
}

wk_frame_rc wk_frame_encode_alloc(const wk_frame *f, uint32_t max_frame, uint8_t **out,
                                  size_t *out_len) {
  WK_ASSERT(out != NULL && out_len != NULL);
  size_t total;
  wk_frame_rc rc = encode_check(f, max_frame, &total);
  if (rc != WK_FRAME_OK) return rc;
  uint8_t *bytes = wk_xmalloc(total);
  encode_at(bytes, total, f);
  *out = bytes;
  *out_len = total;
  return WK_FRAME_OK;
}

/* ---- decoder ------------------------------------------------------------------ */

/* A cursor over one frame's body; `bad` latches on the first read past its end. */
typedef struct cursor {
  const uint8_t *p;
  size_t left;
  bool bad;
} cursor;

static uint32_t rd_u32_at(const uint8_t *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

bool wk_frame_buf_partial(const wk_frame_buf *b, uint64_t *total, uint64_t *rest) {
  WK_ASSERT(b != NULL && total != NULL && rest != NULL);
  size_t held = b->end - b->start;
  if (held < WK_FRAME_PREFIX_SIZE) return false;
  uint64_t t = (uint64_t)WK_FRAME_PREFIX_SIZE + rd_u32_at(b->data + b->start);
  if (t <= held) return false;
  *total = t;
  *rest = t - held;
  return true;
}

static bool take(cursor *c, size_t n) {
  if (c->bad || c->left < n) {
    c->bad = true;
    return false;
  }
  return true;
}

static unsigned get_u8(cursor *c) {
  if (!take(c, 1)) return 0;
  unsigned v = c->p[0];
  c->p += 1;
  c->left -= 1;
  return v;
}

static uint32_t get_u32(cursor *c) {
  if (!take(c, 4)) return 0;
  uint32_t v = rd_u32_at(c->p);
  c->p += 4;
  c->left -= 4;
  return v;
}

static uint64_t get_u64(cursor *c) {
  uint64_t lo = get_u32(c);
  uint64_t hi = get_u32(c);
  return lo | hi << 32;
}

static wk_frame_bytes get_bytes(cursor *c) {
  wk_frame_bytes b = {NULL, 0};
  uint32_t n = get_u32(c);
  if (!take(c, n)) return b;
  b.ptr = c->p;
  b.len = n;
  c->p += n;
  c->left -= n;
  return b;
}

/* Reads `count` byte strings (a SUBCALLS args list). Latches c->bad when they run past
 * the end; every item takes at least 4 bytes, so a hostile count fails at once. */
static void walk_args(cursor *c, uint32_t count) {
  if (count > c->left / 4u) c->bad = true;
  for (uint32_t i = 0; i < count && !c->bad; i++) (void)get_bytes(c);
}

/* Reads `count` child outcomes; false when a status or content_type is out of range
 * (c->bad reports truncation, which takes precedence). */
static bool walk_children(cursor *c, uint32_t count) {
  bool valid = true;
  if (count > c->left / CHILD_FIXED) c->bad = true;
  for (uint32_t i = 0; i < count && !c->bad; i++) {
    unsigned status = get_u8(c);
    unsigned content = get_u8(c);
    for (int k = 0; k < 4; k++) (void)get_bytes(c);
    if (!status_valid(status) || !content_valid(content)) valid = false;
  }
  return valid;
}

static wk_frame_bytes span(const uint8_t *from, const cursor *c) {
  wk_frame_bytes b = {NULL, 0};
  if (c->bad || c->p == from) return b;
  b.ptr = from;
  b.len = (uint32_t)(c->p - from); /* within one frame: below 4 GiB */
  return b;
}

/* The encoder's checks: enumerations in range, lists non-empty and well formed. */
static bool encodable(const wk_frame *f) {
  switch (f->type) {
    case WK_FRAME_CALL: return content_valid((unsigned)f->call.content_type);
    case WK_FRAME_RESULT:
      return result_status_valid((unsigned)f->result.status) &&
             content_valid((unsigned)f->result.content_type);
    case WK_FRAME_SUBCALLS: {
      const wk_frame_subcalls *k = &f->subcalls;
      if (!content_valid((unsigned)k->content_type) || k->count == 0) return false;
      if (k->args) return true;
      cursor c = {k->args_enc.ptr, k->args_enc.len, false};
      walk_args(&c, k->count);
      return !c.bad && c.left == 0;
    }
    case WK_FRAME_SUBCALLS_RESULT: {
      const wk_frame_subcalls_result *r = &f->subcalls_result;
      if (r->count == 0) return false;
      if (r->children) {
        for (uint32_t i = 0; i < r->count; i++) {
          if (!status_valid((unsigned)r->children[i].status) ||
              !content_valid((unsigned)r->children[i].content_type))
            return false;
        }
        return true;
      }
      cursor c = {r->children_enc.ptr, r->children_enc.len, false};
      bool valid = walk_children(&c, r->count);
      return valid && !c.bad && c.left == 0;
    }
    case WK_FRAME_HELLO:
    case WK_FRAME_CANCEL:
    case WK_FRAME_RECALL:
    case WK_FRAME_PING:
    case WK_FRAME_PONG:
    case WK_FRAME_SHUTDOWN:
    case WK_FRAME_STACK_REQUEST:
    case WK_FRAME_STACK:
    case WK_FRAME_SCRATCH:
    case WK_FRAME_SCRATCH_RESULT: return true;
  }
  return false;
}

/* ---- list iterators ------------------------------------------------------------- */

wk_frame_iter wk_frame_subcalls_args(const wk_frame_subcalls *s) {
  WK_ASSERT(s != NULL);
  wk_frame_iter it = {s->args_enc.ptr, s->args_enc.len, s->count};
  return it;
}

wk_frame_iter wk_frame_subcalls_children(const wk_frame_subcalls_result *r) {
  WK_ASSERT(r != NULL);
  wk_frame_iter it = {r->children_enc.ptr, r->children_enc.len, r->count};
  return it;
}

bool wk_frame_iter_next_arg(wk_frame_iter *it, wk_frame_bytes *arg) {
  WK_ASSERT(it != NULL);
  WK_ASSERT(arg != NULL);
  if (it->remaining == 0) return false;
  cursor c = {it->p, it->left, false};
  wk_frame_bytes b = get_bytes(&c);
  if (c.bad) {
    it->remaining = 0;
    return false;
  }
  *arg = b;
  it->p = c.p;
  it->left = c.left;
  it->remaining--;
  return true;
}

bool wk_frame_iter_next_child(wk_frame_iter *it, wk_frame_child *child) {
  WK_ASSERT(it != NULL);
  WK_ASSERT(child != NULL);
  if (it->remaining == 0) return false;
  cursor c = {it->p, it->left, false};
  unsigned status = get_u8(&c);
  unsigned content = get_u8(&c);
  wk_frame_child k;
  k.output = get_bytes(&c);
  k.error_type = get_bytes(&c);
  k.error_message = get_bytes(&c);
  k.traceback = get_bytes(&c);
  if (c.bad || !status_valid(status) || !content_valid(content)) {
    it->remaining = 0;
    return false;
  }
  k.status = (wk_frame_status)status;
  k.content_type = (wk_frame_content)content;
  *child = k;
  it->p = c.p;
  it->left = c.left;
  it->remaining--;
  return true;
}

/* ---- frame bodies ------------------------------------------------------------------- */

static wk_frame_rc get_body(cursor *c, wk_frame *f) {
  unsigned content = 0;
  unsigned status = 0;
  switch (f->type) {
    case WK_FRAME_HELLO:
      f->hello.version = get_u32(c);
      f->hello.pid = get_u32(c);
      break;
    case WK_FRAME_CALL: {
      wk_frame_call *k = &f->call;
      k->call_id = get_u64(c);
      k->task_id = get_bytes(c);
      k->function = get_bytes(c);
      k->epoch = get_u64(c);
      k->code_dir = get_bytes(c);
      k->entrypoint = get_bytes(c);
      content = get_u8(c);
      k->call_index = get_u32(c);
      k->deadline_ms = get_u32(c);
      k->scratch_dir = get_bytes(c);
      k->traceparent = get_bytes(c);
      k->args = get_bytes(c);
      if (!c->bad && !content_valid(content)) return WK_FRAME_E_VALUE;
      k->content_type = (wk_frame_content)content;
      break;
    }
    case WK_FRAME_RESULT: {
      wk_frame_result *r = &f->result;
      r->call_id = get_u64(c);
      status = get_u8(c);
      content = get_u8(c);
      r->output = get_bytes(c);
      r->error_type = get_bytes(c);
      r->error_message = get_bytes(c);
      r->traceback = get_bytes(c);
      r->cpu_us = get_u64(c);
      r->max_rss_kb = get_u64(c);
      r->stdout_bytes = get_bytes(c);
      r->stderr_bytes = get_bytes(c);
      if (!c->bad && (!result_status_valid(status) || !content_valid(content)))
        return WK_FRAME_E_VALUE;
      r->status = (wk_frame_status)status;
      r->content_type = (wk_frame_content)content;
      break;
    }
    case WK_FRAME_CANCEL:
    case WK_FRAME_RECALL: f->cancel.call_id = get_u64(c); break;
    case WK_FRAME_PING:
    case WK_FRAME_PONG: f->ping.nonce = get_u64(c); break;
    case WK_FRAME_SHUTDOWN: break;
    case WK_FRAME_SUBCALLS: {
      wk_frame_subcalls *k = &f->subcalls;
      k->parent_call_id = get_u64(c);
      k->request_id = get_u64(c);
      k->function = get_bytes(c);
      k->entrypoint = get_bytes(c);
      content = get_u8(c);
      k->count = get_u32(c);
      const uint8_t *list = c->p;
      walk_args(c, k->count);
      k->args = NULL;
      k->args_enc = span(list, c);
      if (!c->bad && (!content_valid(content) || k->count == 0)) return WK_FRAME_E_VALUE;
      k->content_type = (wk_frame_content)content;
      break;
    }
    case WK_FRAME_SUBCALLS_RESULT: {
      wk_frame_subcalls_result *r = &f->subcalls_result;
      r->request_id = get_u64(c);
      r->count = get_u32(c);
      const uint8_t *list = c->p;
      bool valid = walk_children(c, r->count);
      r->children = NULL;
      r->children_enc = span(list, c);
      if (!c->bad && (!valid || r->count == 0)) return WK_FRAME_E_VALUE;
      break;
    }
    case WK_FRAME_STACK_REQUEST: f->stack_request.call_id = get_u64(c); break;
    case WK_FRAME_STACK:
      f->stack.call_id = get_u64(c);
      f->stack.stack = get_bytes(c);
      break;
    case WK_FRAME_SCRATCH:
      f->scratch.call_id = get_u64(c);
      f->scratch.request_id = get_u64(c);
      break;
    case WK_FRAME_SCRATCH_RESULT:
      f->scratch_result.request_id = get_u64(c);
      f->scratch_result.error = get_bytes(c);
      break;
  }
  if (c->bad) return WK_FRAME_E_TRUNCATED;
  if (c->left != 0) return WK_FRAME_E_TRAILING;
  return WK_FRAME_OK;
}

wk_frame_rc wk_frame_decode(const uint8_t *in, size_t in_len, uint32_t max_frame, wk_frame *out,
                            size_t *size) {
  WK_ASSERT(out != NULL);
  WK_ASSERT(size != NULL);
  WK_ASSERT(in != NULL || in_len == 0);
  memset(out, 0, sizeof *out);
  *size = 0;
  if (in_len < WK_FRAME_PREFIX_SIZE) {
    *size = WK_FRAME_PREFIX_SIZE;
    return WK_FRAME_NEED_MORE;
  }
  uint32_t len = rd_u32_at(in);
  if (len > max_frame) return WK_FRAME_E_TOO_LARGE;
  if (len == 0) return WK_FRAME_E_EMPTY;
  size_t total = (size_t)WK_FRAME_PREFIX_SIZE + len;
  if (in_len < total) {
    *size = total;
    return WK_FRAME_NEED_MORE;
  }
  unsigned type = in[WK_FRAME_PREFIX_SIZE];
  if (!type_known(type)) return WK_FRAME_E_TYPE;
  out->type = (wk_frame_type)type;
  cursor c = {in + WK_FRAME_PREFIX_SIZE + 1, (size_t)len - 1u, false};
  wk_frame_rc rc = get_body(&c, out);
  if (rc != WK_FRAME_OK) return rc;
  WK_ASSERT(c.p == in + total); /* the frame's bytes, exactly, were read */
  /* the encoding is canonical: the frame re-encodes to exactly the bytes it came from
   * (walks its lists: a debug check) */
  WK_DEBUG_ASSERT(wk_frame_encoded_size(out) == total);
  *size = total;
  return WK_FRAME_OK;
}

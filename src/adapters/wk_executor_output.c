/* wk_executor_output.c: an executor's stdout and stderr as bounded JSON log records.
 * See wk_executor_output.h for the contract. */
#include "adapters/wk_executor_output.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lib/wk_alloc.h"
#include "lib/wk_assert.h"
#include "lib/wk_json_out.h"
#include "lib/wk_log.h"

#define LINE_MAX_DEFAULT 16384u
#define BYTES_PER_S_DEFAULT 65536u
#define LINES_PER_S_DEFAULT 200u
#define READ_BUF 16384u
#define FINISH_READ_MAX (1u << 20) /* read at the exit at most: descendants may write on */
#define DROP_REPORT_MS 1000        /* one drop record a second at most */

typedef enum line_state {
  LINE_START, /* nothing of the current line read yet */
  LINE_KEEP,  /* admitted: its bytes go to the buffer */
  LINE_CUT,   /* logged at line_max: the rest is counted and discarded */
  LINE_DROP,  /* over the rate: counted and discarded */
} line_state;

typedef struct stream {
  uv_pipe_t pipe;
  wk_exec_output *o;
  const char *name;
  char *line; /* line_max bytes */
  uint32_t len;
  uint64_t cut; /* bytes cut off the current line */
  line_state state;
  bool eof; /* read to its end: no longer read, closed by wk_exec_output_finish */
  bool closing;
} stream;

struct wk_exec_output {
  uv_loop_t *loop;
  wk_exec_output_limits lim;
  wk_exec_output_stats *stats;
  wk_exec_output_stats own; /* when the caller gave none */
  wk_exec_output_hooks hooks;
  uint64_t id;
  int pid;
  stream s[2]; /* stdout, stderr */
  int open;    /* pipes not yet closed */
  /* the rate: tokens refilled from the loop's clock, one second's worth at most */
  double byte_tokens, line_tokens;
  int64_t refilled_ms;
  /* dropped since the last drop record */
  uint64_t drop_bytes, drop_lines;
  int64_t drop_reported_ms;
  char tail[WK_EXEC_OUTPUT_TAIL_MAX];
  uint32_t tail_len;
  char *clean; /* a line as valid UTF-8: up to 3 bytes per byte, and the marker */
  size_t clean_cap;
  char rbuf[READ_BUF];
};

static uint64_t next_id(void) {
  static uint64_t seq;
  return __atomic_add_fetch(&seq, 1, __ATOMIC_RELAXED);
}

wk_exec_output *wk_exec_output_new(uv_loop_t *loop, const wk_exec_output_limits *limits,
                                   wk_exec_output_stats *stats, wk_exec_output_hooks hooks) {
  wk_exec_output *o = wk_xcalloc(1, sizeof *o);
  o->loop = loop;
  if (limits) o->lim = *limits;
  if (!o->lim.line_max) o->lim.line_max = LINE_MAX_DEFAULT;
  if (!o->lim.bytes_per_s) o->lim.bytes_per_s = BYTES_PER_S_DEFAULT;
  if (!o->lim.lines_per_s) o->lim.lines_per_s = LINES_PER_S_DEFAULT;
  o->stats = stats ? stats : &o->own;
  o->hooks = hooks;
  o->byte_tokens = o->lim.bytes_per_s;
  o->line_tokens = o->lim.lines_per_s;
  o->refilled_ms = (int64_t)uv_now(loop);
  o->drop_reported_ms = o->refilled_ms - DROP_REPORT_MS;
  o->clean_cap = (size_t)o->lim.line_max * 3 + 64;
  o->clean = wk_xmalloc(o->clean_cap);
  static const char *const names[2] = {"stdout", "stderr"};
  for (int i = 0; i < 2; i++) {
    stream *st = &o->s[i];
    st->o = o;
    st->name = names[i];
    st->line = wk_xmalloc(o->lim.line_max);
    uv_pipe_init(loop, &st->pipe, 0);
    st->pipe.data = st;
  }
  o->open = 2;
  return o;
}

uv_stream_t *wk_exec_output_pipe(wk_exec_output *o, int fd) {
  return (uv_stream_t *)&o->s[fd == 2 ? 1 : 0].pipe;
}

const char *wk_exec_output_tail(const wk_exec_output *o, uint32_t *len) {
  *len = o->tail_len;
  return o->tail;
}

/* ---- records ------------------------------------------------------------------- */

/* Copies `n` bytes of `in` to `out` as valid UTF-8: each byte that does not begin a
 * well-formed sequence (overlong forms, surrogates and code points above U+10FFFF
 * included) becomes U+FFFD. `out` holds 3 * n bytes. Returns the length written. */
static size_t utf8_clean(const unsigned char *in, size_t n, char *out) {
  size_t o = 0;
  for (size_t i = 0; i < n;) {
    size_t len = wk_utf8_len(in + i, n - i);
    if (len > 0) {
      memcpy(out + o, in + i, len);
      o += len;
      i += len;
    } else {
      memcpy(out + o, "\xef\xbf\xbd", 3);
      o += 3;
      i++;
    }
  }
  return o;
}

/* Adds the executor's identity and, when a call runs on it, the call's. */
static json_t *fields(const wk_exec_output *o, const char *stream_name) {
  json_t *f = json_pack("{s:I,s:i}", "executor", (json_int_t)o->id, "pid", o->pid);
  if (stream_name) json_object_set_new(f, "stream", json_string(stream_name));
  wk_exec_output_call call = {0};
  if (o->hooks.running && o->hooks.running(o->hooks.arg, &call)) {
    /* task ids are checked UTF-8 at admission; a NULL from jansson just leaves it out */
    if (call.task_id) json_object_set_new(f, "task_id", json_string(call.task_id));
    json_object_set_new(f, "call_index", json_integer(call.call_index));
    json_object_set_new(f, "call_id", json_integer((json_int_t)call.call_id));
  }
  return f;
}

/* Logs what was dropped since the last report, if anything. */
static void report_drops(wk_exec_output *o) {
  if (!o->drop_bytes && !o->drop_lines) return;
  json_t *f = fields(o, NULL);
  char msg[200];
  snprintf(msg, sizeof msg,
           "dropped %llu bytes (%llu lines) of executor output over the rate limit (%u bytes/s, "
           "%u lines/s)",
           (unsigned long long)o->drop_bytes, (unsigned long long)o->drop_lines, o->lim.bytes_per_s,
           o->lim.lines_per_s);
  json_object_set_new(f, "msg", json_string(msg));
  json_object_set_new(f, "dropped_bytes", json_integer((json_int_t)o->drop_bytes));
  json_object_set_new(f, "dropped_lines", json_integer((json_int_t)o->drop_lines));
  wk_log_json(WK_LOG_WARN, "executor_output_dropped", f);
  o->drop_bytes = o->drop_lines = 0;
  o->drop_reported_ms = (int64_t)uv_now(o->loop);
}

/* Reports the drops when the last report is a second old (so a steady flood costs one
 * record a second, not one per admitted line). */
static void maybe_report_drops(wk_exec_output *o) {
  if ((o->drop_bytes || o->drop_lines) &&
      (int64_t)uv_now(o->loop) - o->drop_reported_ms >= DROP_REPORT_MS)
    report_drops(o);
}

/* Logs the current line of `st` (its kept bytes, a trailing '\r' dropped). */
static void emit(stream *st, bool truncated) {
  wk_exec_output *o = st->o;
  maybe_report_drops(o); /* before the line: the records stay in the order of the output */
  uint32_t len = st->len;
  if (!truncated && len > 0 && st->line[len - 1] == '\r') len--;
  size_t n = utf8_clean((const unsigned char *)st->line, len, o->clean);
  if (truncated) {
    n += (size_t)snprintf(o->clean + n, o->clean_cap - n, " [line truncated at %u bytes]",
                          o->lim.line_max);
  }
  json_t *f = fields(o, st->name);
  json_object_set_new(f, "line", json_stringn(o->clean, n));
  if (truncated) json_object_set_new(f, "truncated", json_true());
  wk_log_json(st == &o->s[1] ? WK_LOG_WARN : WK_LOG_INFO, "executor_output", f);
  o->stats->lines++;
  if (truncated) o->stats->truncated_lines++;
  o->byte_tokens -= st->len; /* may go below zero: later lines wait for it */
  st->len = 0;
}

static void refill(wk_exec_output *o) {
  int64_t now = (int64_t)uv_now(o->loop);
  if (now <= o->refilled_ms) return;
  double secs = (double)(now - o->refilled_ms) / 1000.0;
  o->refilled_ms = now;
  o->byte_tokens += secs * o->lim.bytes_per_s;
  if (o->byte_tokens > o->lim.bytes_per_s) o->byte_tokens = o->lim.bytes_per_s;
  o->line_tokens += secs * o->lim.lines_per_s;
  if (o->line_tokens > o->lim.lines_per_s) o->line_tokens = o->lim.lines_per_s;
}

/* A new line begins: logged if the rate allows, else dropped. */
static void admit(stream *st) {
  wk_exec_output *o = st->o;
  refill(o);
  if (o->line_tokens >= 1.0 && o->byte_tokens > 0.0) {
    o->line_tokens -= 1.0;
    st->state = LINE_KEEP;
  } else {
    st->state = LINE_DROP;
    o->drop_lines++;
    o->stats->dropped_lines++;
  }
}

/* The current line of `st` ends (a newline, or the end of the stream). */
static void end_line(stream *st) {
  if (st->state == LINE_KEEP) emit(st, false);
  if (st->state == LINE_CUT) st->o->stats->truncated_bytes += st->cut;
  st->cut = 0;
  st->len = 0;
  st->state = LINE_START;
}

static void keep_tail(wk_exec_output *o, const char *src, size_t n) {
  if (n >= WK_EXEC_OUTPUT_TAIL_MAX) {
    src += n - WK_EXEC_OUTPUT_TAIL_MAX;
    n = WK_EXEC_OUTPUT_TAIL_MAX;
    o->tail_len = 0;
  } else if (o->tail_len + n > WK_EXEC_OUTPUT_TAIL_MAX) {
    uint32_t drop = (uint32_t)(o->tail_len + n - WK_EXEC_OUTPUT_TAIL_MAX);
    memmove(o->tail, o->tail + drop, o->tail_len - drop);
    o->tail_len -= drop;
  }
  memcpy(o->tail + o->tail_len, src, n);
  o->tail_len += (uint32_t)n;
}

/* Splits `n` bytes read from `st` into lines and logs, cuts or drops them. */
static void consume(stream *st, const char *p, size_t n) {
  wk_exec_output *o = st->o;
  if (st == &o->s[1]) keep_tail(o, p, n);
  while (n > 0) {
    const char *nl = memchr(p, '\n', n);
    size_t seg = nl ? (size_t)(nl - p) : n;
    if (st->state == LINE_START) admit(st);
    switch (st->state) {
      case LINE_KEEP: {
        size_t room = o->lim.line_max - st->len;
        size_t take = seg < room ? seg : room;
        memcpy(st->line + st->len, p, take);
        st->len += (uint32_t)take;
        if (seg > take) { /* over line_max: log what fits now, discard the rest */
          emit(st, true);
          st->state = LINE_CUT;
          st->cut = seg - take;
        }
        break;
      }
      case LINE_CUT: st->cut += seg; break;
      case LINE_DROP:
        o->drop_bytes += seg + (nl ? 1 : 0);
        o->stats->dropped_bytes += seg + (nl ? 1 : 0);
        break;
      case LINE_START: break;
    }
    if (nl) end_line(st);
    size_t used = seg + (nl ? 1 : 0);
    p += used;
    n -= used;
  }
  maybe_report_drops(o);
}

/* ---- reading ------------------------------------------------------------------- */

static void on_closed(uv_handle_t *h) {
  stream *st = h->data;
  wk_exec_output *o = st->o;
  if (--o->open > 0) return;
  if (o->hooks.closed) o->hooks.closed(o->hooks.arg); /* may free `o`: nothing after it */
}

void wk_exec_output_free(wk_exec_output *o) {
  if (!o) return;
  WK_ASSERT(o->open == 0);
  for (int i = 0; i < 2; i++) free(o->s[i].line);
  free(o->clean);
  free(o);
}

/* Logs the unfinished line of `st` and closes it. */
static void close_stream(stream *st) {
  if (st->closing) return;
  st->closing = true;
  if (st->state != LINE_START) end_line(st);
  uv_read_stop((uv_stream_t *)&st->pipe);
  uv_close((uv_handle_t *)&st->pipe, on_closed);
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  (void)suggested;
  stream *st = h->data;
  buf->base = st->o->rbuf;
  buf->len = sizeof st->o->rbuf;
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf) {
  stream *st = s->data;
  if (nread < 0) { /* EOF: every writer closed it (or an error) */
    /* not closed here: the output lives until wk_exec_output_finish (its caller still
     * uses it, e.g. the tail, once the process exit is seen, which may come later) */
    if (st->state != LINE_START) end_line(st);
    uv_read_stop(s);
    st->eof = true;
    return;
  }
  consume(st, buf->base, (size_t)nread);
}

uint64_t wk_exec_output_start(wk_exec_output *o, int pid) {
  o->id = next_id();
  o->pid = pid;
  for (int i = 0; i < 2; i++) {
    if (uv_read_start((uv_stream_t *)&o->s[i].pipe, on_alloc, on_read) != 0) close_stream(&o->s[i]);
  }
  return o->id;
}

void wk_exec_output_finish(wk_exec_output *o) {
  for (int i = 0; i < 2; i++) {
    stream *st = &o->s[i];
    if (st->closing) continue;
    uv_os_fd_t fd;
    size_t budget = FINISH_READ_MAX;
    /* libuv made the pipe non-blocking: this reads what is there and stops */
    if (!st->eof && uv_fileno((const uv_handle_t *)&st->pipe, &fd) == 0) {
      while (budget > 0) {
        ssize_t n = read(fd, o->rbuf, sizeof o->rbuf < budget ? sizeof o->rbuf : budget);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        consume(st, o->rbuf, (size_t)n);
        budget -= (size_t)n;
      }
    }
    close_stream(st);
  }
  report_drops(o);
}

/* wk_journal.c: the incident journal's codec, reader and line printer (wk_journal.h). */
#define _POSIX_C_SOURCE 200809L

#include "adapters/wk_journal.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "lib/wk_alloc.h"
#include "lib/wk_err.h"

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
               "the journal is written in the host's order, which must be little-endian");

/* ---- CRC-32C ------------------------------------------------------------------------ */

static uint32_t crc_table[256];
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;
static bool crc_hw;

static void crc_init(void) {
  for (uint32_t i = 0; i < 256; i++) {
    uint32_t c = i;
    for (int k = 0; k < 8; k++) c = (c & 1u) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    crc_table[i] = c;
  }
#if defined(__x86_64__)
  __builtin_cpu_init();
  crc_hw = __builtin_cpu_supports("sse4.2");
#endif
}

#if defined(__x86_64__)
/* The SSE4.2 crc32 instruction computes CRC-32C: 8 bytes a step. */
__attribute__((target("sse4.2"))) static uint32_t crc_sse42(uint32_t crc, const uint8_t *p,
                                                            size_t len) {
  uint64_t c = crc;
  for (; len >= 8; len -= 8, p += 8) {
    uint64_t v;
    memcpy(&v, p, 8);
    c = __builtin_ia32_crc32di(c, v);
  }
  uint32_t c32 = (uint32_t)c;
  for (; len > 0; len--, p++) c32 = __builtin_ia32_crc32qi(c32, *p);
  return c32;
}
#endif

uint32_t wk_crc32c(uint32_t crc, const void *data, size_t len) {
  pthread_once(&crc_once, crc_init);
  const uint8_t *p = data;
  crc = ~crc;
#if defined(__x86_64__)
  if (crc_hw) return ~crc_sse42(crc, p, len);
#endif
  for (size_t i = 0; i < len; i++) crc = crc_table[(crc ^ p[i]) & 0xFFu] ^ (crc >> 8);
  return ~crc;
}

/* ---- encoding ----------------------------------------------------------------------- */

#define INPUT_FIXED 32u /* type kind flags 0 | id_len 0 | msg_len 0 | seq | now */
#define HEADER_SIZE 144u

enum {
  F_FLAG = 1u << 0,      /* set_ready / set_draining */
  F_OK = 1u << 1,        /* outcome.ok */
  F_STREAMING = 1u << 2, /* outcome.streaming */
  F_ABSENT = 1u << 3,    /* submit, outcome or stats was NULL */
};

static uint8_t *put8(uint8_t *p, uint8_t v) {
  *p = v;
  return p + 1;
}
static uint8_t *put16(uint8_t *p, uint16_t v) {
  memcpy(p, &v, 2);
  return p + 2;
}
static uint8_t *put32(uint8_t *p, uint32_t v) {
  memcpy(p, &v, 4);
  return p + 4;
}
static uint8_t *put64(uint8_t *p, uint64_t v) {
  memcpy(p, &v, 8);
  return p + 8;
}

/* Bytes of the kind's own fields. */
static size_t kind_fixed(wk_core_input_kind k) {
  switch (k) {
    case WK_INPUT_REQUEST_SLOT: return 8;
    case WK_INPUT_SUBMIT: return 72;
    case WK_INPUT_ACTIVATION_PREPARED: return 16;
    case WK_INPUT_ACTIVATION_FAILED:
    case WK_INPUT_ABORT: return 8;
    case WK_INPUT_PHASE_FINISHED: return 96;
    case WK_INPUT_CALL_PROGRESS: return 64;
    case WK_INPUT_SLOT_LEASE_EXPIRED: return 8;
    case WK_INPUT_SET_READY:
    case WK_INPUT_SET_DRAINING:
    case WK_INPUT_SET_PAUSED:
    case WK_INPUT_TASK_TIMED_OUT:
    case WK_INPUT_WATCH_ATTACHED:
    case WK_INPUT_WATCH_DETACHED:
    case WK_INPUT_WATCH_DISCONNECTED:
    case WK_INPUT_WATCH_GRACE_EXPIRED:
    case WK_INPUT_PURGE: return 0;
  }
  return 0;
}

/* The message an input carries, and how much of it is recorded: a failure message up
 * to msg_cap (the core keeps at most max_failure_message_bytes and looks one byte
 * further), a pause reason up to what the core keeps. */
static const char *input_message(const wk_core_input *in) {
  if (in->kind == WK_INPUT_PHASE_FINISHED) return in->outcome ? in->outcome->message : NULL;
  return in->message;
}

static size_t message_len(const wk_core_input *in, uint32_t msg_cap) {
  const char *m = input_message(in);
  if (!m) return 0;
  size_t cap = in->kind == WK_INPUT_SET_PAUSED ? WK_CORE_PAUSE_REASON_MAX : msg_cap;
  size_t n = 0;
  while (n < cap && m[n]) n++;
  return n;
}

static size_t id_len_of(const wk_core_input *in) {
  if (!in->task_id) return 0;
  /* an id longer than the longest valid one is as invalid at 129 bytes */
  return in->task_id_len > WK_TASK_ID_MAX + 1 ? WK_TASK_ID_MAX + 1 : in->task_id_len;
}

size_t wk_journal_input_size(const wk_core_input *in, uint32_t msg_cap) {
  return INPUT_FIXED + kind_fixed(in->kind) + id_len_of(in) + message_len(in, msg_cap);
}

static uint8_t *put_stats(uint8_t *p, const wk_call_stats *s) {
  wk_call_stats z = {0};
  if (!s) s = &z;
  p = put64(p, s->calls_total);
  p = put64(p, s->calls_succeeded);
  p = put64(p, s->calls_failed);
  p = put64(p, s->calls_retried);
  p = put64(p, s->subcalls);
  p = put64(p, s->executor_cpu_us);
  p = put64(p, s->bytes_in);
  return put64(p, s->bytes_out);
}

void wk_journal_encode_input(uint8_t *dst, const wk_core_input *in, uint64_t seq,
                             uint32_t msg_cap) {
  size_t id_len = id_len_of(in), msg_len = message_len(in, msg_cap);
  uint8_t flags = in->flag ? F_FLAG : 0;
  const wk_phase_outcome *o = in->outcome;
  if (in->kind == WK_INPUT_PHASE_FINISHED && o) {
    if (o->ok) flags |= F_OK;
    if (o->streaming) flags |= F_STREAMING;
  }
  if ((in->kind == WK_INPUT_SUBMIT && !in->submit) || (in->kind == WK_INPUT_PHASE_FINISHED && !o) ||
      (in->kind == WK_INPUT_CALL_PROGRESS && !in->stats)) {
    flags |= F_ABSENT;
  }
  uint8_t *p = dst;
  p = put8(p, WK_JREC_INPUT);
  p = put8(p, (uint8_t)in->kind);
  p = put8(p, flags);
  p = put8(p, 0);
  p = put16(p, (uint16_t)id_len);
  p = put16(p, 0);
  p = put32(p, (uint32_t)msg_len);
  p = put32(p, 0);
  p = put64(p, seq);
  p = put64(p, (uint64_t)in->now_ms);
  switch (in->kind) {
    case WK_INPUT_REQUEST_SLOT: p = put64(p, (uint64_t)in->ttl_ms); break;
    case WK_INPUT_SUBMIT: {
      wk_submit_request z = {0};
      const wk_submit_request *s = in->submit ? in->submit : &z;
      p = put64(p, s->slot_id);
      p = put64(p, s->request_digest);
      p = put64(p, s->requested_epoch);
      p = put64(p, (uint64_t)s->timeout_ms);
      p = put32(p, (uint32_t)s->call_failure_policy);
      p = put32(p, s->max_failed_calls);
      p = put32(p, s->retry.max_attempts);
      p = put32(p, s->retry.backoff_multiplier_milli);
      p = put64(p, (uint64_t)s->retry.initial_backoff_ms);
      p = put64(p, (uint64_t)s->retry.max_backoff_ms);
      p = put32(p, s->retry.retry_on_timeout ? 1u : 0u);
      p = put32(p, 0);
      break;
    }
    case WK_INPUT_ACTIVATION_PREPARED:
      p = put64(p, in->slot_id);
      p = put64(p, in->code_epoch);
      break;
    case WK_INPUT_ACTIVATION_FAILED:
    case WK_INPUT_ABORT:
      p = put32(p, (uint32_t)in->code);
      p = put32(p, 0);
      break;
    case WK_INPUT_PHASE_FINISHED: {
      wk_phase_outcome z = {0};
      if (!o) o = &z;
      p = put32(p, (uint32_t)in->phase);
      p = put32(p, (uint32_t)o->failure_code);
      p = put64(p, o->data.data ? (uint64_t)o->data.len : 0);
      p = put_stats(p, &o->stats);
      p = put64(p, (uint64_t)o->ran_from_ms);
      p = put64(p, (uint64_t)o->ran_to_ms);
      break;
    }
    case WK_INPUT_CALL_PROGRESS: p = put_stats(p, in->stats); break;
    case WK_INPUT_SLOT_LEASE_EXPIRED: p = put64(p, in->slot_id); break;
    case WK_INPUT_SET_READY:
    case WK_INPUT_SET_DRAINING:
    case WK_INPUT_SET_PAUSED:
    case WK_INPUT_TASK_TIMED_OUT:
    case WK_INPUT_WATCH_ATTACHED:
    case WK_INPUT_WATCH_DETACHED:
    case WK_INPUT_WATCH_DISCONNECTED:
    case WK_INPUT_WATCH_GRACE_EXPIRED:
    case WK_INPUT_PURGE: break;
  }
  if (id_len) memcpy(p, in->task_id, id_len);
  p += id_len;
  if (msg_len) memcpy(p, input_message(in), msg_len);
}

void wk_journal_encode_header(wk_buf *b, const wk_journal_header *h) {
  uint8_t *p = wk_buf_reserve(b, HEADER_SIZE), *start = p;
  const wk_core_config *c = &h->core;
  p = put8(p, WK_JREC_HEADER);
  p = put8(p, h->decisions ? 1 : 0);
  p = put16(p, 0);
  p = put32(p, h->file_index);
  p = put64(p, h->run_id);
  p = put64(p, h->first_seq);
  p = put64(p, (uint64_t)h->wall_ms);
  p = put64(p, (uint64_t)h->mono_ms);
  p = put32(p, h->pid);
  p = put32(p, c->task_slots);
  p = put64(p, (uint64_t)c->default_slot_ttl_ms);
  p = put64(p, (uint64_t)c->max_slot_ttl_ms);
  p = put64(p, (uint64_t)c->default_task_timeout_ms);
  p = put64(p, (uint64_t)c->max_task_timeout_ms);
  p = put64(p, (uint64_t)c->watch_disconnect_grace_ms);
  p = put64(p, (uint64_t)c->result_retention_ms);
  p = put32(p, c->max_retained_results);
  p = put32(p, c->max_failure_message_bytes);
  p = put64(p, c->max_retained_bytes);
  memset(p, 0, sizeof h->version);
  memcpy(p, h->version, strnlen(h->version, sizeof h->version));
  p += sizeof h->version;
  b->len += (size_t)(p - start);
}

void wk_journal_encode_decision(wk_buf *b, uint64_t seq, const char *line, size_t len) {
  uint8_t *p = wk_buf_reserve(b, 16 + len), *start = p;
  p = put8(p, WK_JREC_DECISION);
  memset(p, 0, 7);
  p = put64(p + 7, seq);
  memcpy(p, line, len);
  b->len += (size_t)(p - start) + len;
}

void wk_journal_encode_lost(wk_buf *b, uint64_t seq, uint64_t count) {
  uint8_t *p = wk_buf_reserve(b, 24), *start = p;
  p = put8(p, WK_JREC_LOST);
  memset(p, 0, 7);
  p = put64(p + 7, seq);
  p = put64(p, count);
  b->len += (size_t)(p - start);
}

void wk_journal_file_header(wk_buf *b) {
  uint8_t *p = wk_buf_reserve(b, WK_JOURNAL_FILE_HEADER), *start = p;
  memcpy(p, WK_JOURNAL_MAGIC, 8);
  p = put16(p + 8, WK_JOURNAL_VERSION);
  p = put16(p, 0);
  p = put32(p, 0);
  b->len += (size_t)(p - start);
}

void wk_journal_frame(wk_buf *b, const uint8_t *payload, size_t len) {
  uint8_t *p = wk_buf_reserve(b, WK_JOURNAL_RECORD_HEADER + len);
  p = put32(p, (uint32_t)len);
  p = put32(p, wk_crc32c(0, payload, len));
  memcpy(p, payload, len);
  b->len += WK_JOURNAL_RECORD_HEADER + len;
}

/* ---- decoding ----------------------------------------------------------------------- */

typedef struct cursor {
  const uint8_t *p;
  size_t left;
} cursor;

static uint64_t get(cursor *c, size_t n) {
  uint64_t v = 0;
  if (c->left < n) { /* callers check lengths first: unreachable, but never read past */
    c->left = 0;
    return 0;
  }
  memcpy(&v, c->p, n);
  c->p += n;
  c->left -= n;
  return v;
}

static void get_stats(cursor *c, wk_call_stats *s) {
  s->calls_total = get(c, 8);
  s->calls_succeeded = get(c, 8);
  s->calls_failed = get(c, 8);
  s->calls_retried = get(c, 8);
  s->subcalls = get(c, 8);
  s->executor_cpu_us = get(c, 8);
  s->bytes_in = get(c, 8);
  s->bytes_out = get(c, 8);
}

bool wk_journal_reader_init(wk_journal_reader *r, const uint8_t *data, size_t len, char *why,
                            size_t why_len) {
  memset(r, 0, sizeof *r);
  if (len < WK_JOURNAL_FILE_HEADER || memcmp(data, WK_JOURNAL_MAGIC, 8) != 0) {
    wk_errf(why, why_len, "not a core journal (no %s header)", WK_JOURNAL_MAGIC);
    return false;
  }
  uint16_t version;
  memcpy(&version, data + 8, 2);
  if (version != WK_JOURNAL_VERSION) {
    wk_errf(why, why_len, "journal format version %u, this program reads version %u", version,
            WK_JOURNAL_VERSION);
    return false;
  }
  r->data = data;
  r->len = len;
  r->pos = WK_JOURNAL_FILE_HEADER;
  return true;
}

void wk_journal_reader_free(wk_journal_reader *r) {
  free(r->message);
  r->message = NULL;
  r->message_cap = 0;
}

static bool decode_header(cursor *c, wk_journal_header *h, char *why, size_t why_len) {
  if (c->left != HEADER_SIZE - 1) {
    wk_errf(why, why_len, "header record of %zu bytes, expected %u", c->left + 1, HEADER_SIZE);
    return false;
  }
  memset(h, 0, sizeof *h);
  h->decisions = get(c, 1) != 0;
  get(c, 2);
  h->file_index = (uint32_t)get(c, 4);
  h->run_id = get(c, 8);
  h->first_seq = get(c, 8);
  h->wall_ms = (int64_t)get(c, 8);
  h->mono_ms = (int64_t)get(c, 8);
  h->pid = (uint32_t)get(c, 4);
  wk_core_config *k = &h->core;
  k->task_slots = (uint32_t)get(c, 4);
  k->default_slot_ttl_ms = (int64_t)get(c, 8);
  k->max_slot_ttl_ms = (int64_t)get(c, 8);
  k->default_task_timeout_ms = (int64_t)get(c, 8);
  k->max_task_timeout_ms = (int64_t)get(c, 8);
  k->watch_disconnect_grace_ms = (int64_t)get(c, 8);
  k->result_retention_ms = (int64_t)get(c, 8);
  k->max_retained_results = (uint32_t)get(c, 4);
  k->max_failure_message_bytes = (uint32_t)get(c, 4);
  k->max_retained_bytes = get(c, 8);
  memcpy(h->version, c->p, sizeof h->version - 1);
  h->version[sizeof h->version - 1] = '\0';
  for (char *v = h->version; *v; v++) {
    if (*v < 0x20 || *v > 0x7e) *v = '?';
  }
  const char *bad = NULL;
  if (wk_core_config_validate(k, &bad) != WK_OK) {
    wk_errf(why, why_len, "header holds an invalid core configuration: %s", bad);
    return false;
  }
  return true;
}

static bool decode_input(wk_journal_reader *r, cursor *c, wk_journal_record *rec, char *why,
                         size_t why_len) {
  if (c->left < INPUT_FIXED - 1) {
    wk_errf(why, why_len, "input record of %zu bytes is too short", c->left + 1);
    return false;
  }
  unsigned kind = (unsigned)get(c, 1);
  unsigned flags = (unsigned)get(c, 1);
  get(c, 1);
  size_t id_len = (size_t)get(c, 2);
  get(c, 2);
  size_t msg_len = (size_t)get(c, 4);
  get(c, 4);
  rec->seq = get(c, 8);
  int64_t now = (int64_t)get(c, 8);
  if (kind < 1 || kind > WK_INPUT_KIND_MAX) {
    wk_errf(why, why_len, "input of unknown kind %u", kind);
    return false;
  }
  wk_core_input_kind k = (wk_core_input_kind)kind;
  size_t fixed = kind_fixed(k);
  if (id_len > WK_TASK_ID_MAX + 1 || c->left != fixed + id_len + msg_len) {
    wk_errf(why, why_len, "%s input: its lengths (id %zu, message %zu) do not add up",
            wk_core_input_kind_name(k), id_len, msg_len);
    return false;
  }
  wk_core_input *in = &rec->input;
  memset(in, 0, sizeof *in);
  in->kind = k;
  in->now_ms = now;
  in->flag = (flags & F_FLAG) != 0;
  bool absent = (flags & F_ABSENT) != 0;
  switch (k) {
    case WK_INPUT_REQUEST_SLOT: in->ttl_ms = (int64_t)get(c, 8); break;
    case WK_INPUT_SUBMIT: {
      wk_submit_request *s = &rec->submit;
      memset(s, 0, sizeof *s);
      s->slot_id = get(c, 8);
      s->request_digest = get(c, 8);
      s->requested_epoch = get(c, 8);
      s->timeout_ms = (int64_t)get(c, 8);
      s->call_failure_policy = (wk_call_failure_policy)get(c, 4);
      s->max_failed_calls = (uint32_t)get(c, 4);
      s->retry.max_attempts = (uint32_t)get(c, 4);
      s->retry.backoff_multiplier_milli = (uint32_t)get(c, 4);
      s->retry.initial_backoff_ms = (int64_t)get(c, 8);
      s->retry.max_backoff_ms = (int64_t)get(c, 8);
      s->retry.retry_on_timeout = get(c, 4) != 0;
      get(c, 4);
      if (!absent) in->submit = s;
      break;
    }
    case WK_INPUT_ACTIVATION_PREPARED:
      in->slot_id = get(c, 8);
      in->code_epoch = get(c, 8);
      break;
    case WK_INPUT_ACTIVATION_FAILED:
    case WK_INPUT_ABORT:
      in->code = (wk_failure_code)get(c, 4);
      get(c, 4);
      break;
    case WK_INPUT_PHASE_FINISHED: {
      wk_phase_outcome *o = &rec->outcome;
      memset(o, 0, sizeof *o);
      in->phase = (wk_phase)get(c, 4);
      o->failure_code = (wk_failure_code)get(c, 4);
      o->data.len = (size_t)get(c, 8);
      if (o->data.len > WK_JOURNAL_OUTPUTS_MAX) {
        wk_errf(why, why_len, "phase_finished input with %zu bytes of outputs", o->data.len);
        return false;
      }
      get_stats(c, &o->stats);
      o->ran_from_ms = (int64_t)get(c, 8);
      o->ran_to_ms = (int64_t)get(c, 8);
      o->ok = (flags & F_OK) != 0;
      o->streaming = (flags & F_STREAMING) != 0;
      if (!absent) in->outcome = o;
      break;
    }
    case WK_INPUT_CALL_PROGRESS:
      get_stats(c, &rec->stats);
      if (!absent) in->stats = &rec->stats;
      break;
    case WK_INPUT_SLOT_LEASE_EXPIRED: in->slot_id = get(c, 8); break;
    case WK_INPUT_SET_READY:
    case WK_INPUT_SET_DRAINING:
    case WK_INPUT_SET_PAUSED:
    case WK_INPUT_TASK_TIMED_OUT:
    case WK_INPUT_WATCH_ATTACHED:
    case WK_INPUT_WATCH_DETACHED:
    case WK_INPUT_WATCH_DISCONNECTED:
    case WK_INPUT_WATCH_GRACE_EXPIRED:
    case WK_INPUT_PURGE: break;
  }
  memcpy(rec->task_id, c->p, id_len);
  rec->task_id[id_len] = '\0';
  c->p += id_len;
  c->left -= id_len;
  if (id_len) {
    in->task_id = rec->task_id;
    in->task_id_len = id_len;
  }
  if (k == WK_INPUT_SUBMIT) {
    rec->submit.task_id = in->task_id;
    rec->submit.task_id_len = in->task_id_len;
  }
  if (msg_len) {
    if (msg_len + 1 > r->message_cap) {
      r->message = wk_xrealloc(r->message, msg_len + 1);
      r->message_cap = msg_len + 1;
    }
    memcpy(r->message, c->p, msg_len);
    r->message[msg_len] = '\0';
    rec->message_buf = r->message;
    if (k == WK_INPUT_PHASE_FINISHED) {
      rec->outcome.message = r->message;
    } else {
      in->message = r->message;
    }
  }
  return true;
}

int wk_journal_next(wk_journal_reader *r, wk_journal_record *rec, char *why, size_t why_len) {
  memset(rec, 0, offsetof(wk_journal_record, submit));
  rec->message_buf = NULL;
  rec->text = NULL;
  rec->text_len = 0;
  rec->lost = 0;
  if (r->pos >= r->len) return 0;
  rec->offset = r->pos;
  size_t left = r->len - r->pos;
  if (left < WK_JOURNAL_RECORD_HEADER) {
    wk_errf(why, why_len, "truncated record at offset %zu (%zu bytes of its header)", r->pos, left);
    return -1;
  }
  uint32_t len, crc;
  memcpy(&len, r->data + r->pos, 4);
  memcpy(&crc, r->data + r->pos + 4, 4);
  if (len == 0 || len > WK_JOURNAL_RECORD_MAX) {
    wk_errf(why, why_len, "record at offset %zu claims %" PRIu32 " bytes", r->pos, len);
    return -1;
  }
  if (len > left - WK_JOURNAL_RECORD_HEADER) {
    wk_errf(why, why_len, "truncated record at offset %zu (%zu of its %" PRIu32 " bytes)", r->pos,
            left - WK_JOURNAL_RECORD_HEADER, len);
    return -1;
  }
  const uint8_t *payload = r->data + r->pos + WK_JOURNAL_RECORD_HEADER;
  if (wk_crc32c(0, payload, len) != crc) {
    wk_errf(why, why_len, "record at offset %zu fails its CRC (corrupt)", r->pos);
    return -1;
  }
  cursor c = {payload + 1, len - 1};
  bool ok = true;
  switch (payload[0]) {
    case WK_JREC_HEADER:
      rec->type = WK_JREC_HEADER;
      ok = decode_header(&c, &rec->header, why, why_len);
      break;
    case WK_JREC_INPUT:
      rec->type = WK_JREC_INPUT;
      ok = decode_input(r, &c, rec, why, why_len);
      break;
    case WK_JREC_DECISION:
      rec->type = WK_JREC_DECISION;
      if (len < 16) {
        ok = false;
        wk_errf(why, why_len, "decision record of %" PRIu32 " bytes", len);
        break;
      }
      get(&c, 7);
      rec->seq = get(&c, 8);
      rec->text = (const char *)c.p;
      rec->text_len = c.left;
      break;
    case WK_JREC_LOST:
      rec->type = WK_JREC_LOST;
      if (len != 24) {
        ok = false;
        wk_errf(why, why_len, "lost record of %" PRIu32 " bytes", len);
        break;
      }
      get(&c, 7);
      rec->seq = get(&c, 8);
      rec->lost = get(&c, 8);
      break;
    default:
      ok = false;
      wk_errf(why, why_len, "record of unknown type %u", payload[0]);
      break;
  }
  if (!ok) {
    char inner[256];
    snprintf(inner, sizeof inner, "%s", why);
    wk_errf(why, why_len, "malformed record at offset %zu: %s", r->pos, inner);
    return -1;
  }
  r->pos += WK_JOURNAL_RECORD_HEADER + len;
  return 1;
}

bool wk_journal_read_file(const char *path, uint8_t **data, size_t *len, char *err,
                          size_t err_len) {
  *data = NULL;
  *len = 0;
  FILE *f = fopen(path, "rb");
  if (!f) {
    wk_errf(err, err_len, "%s: %s", path, strerror(errno));
    return false;
  }
  size_t cap = 1 << 16, n = 0;
  uint8_t *buf = wk_xmalloc(cap);
  size_t k;
  while ((k = fread(buf + n, 1, cap - n, f)) > 0) {
    n += k;
    if (n == cap) {
      cap *= 2;
      buf = wk_xrealloc(buf, cap);
    }
  }
  bool failed = ferror(f) != 0;
  fclose(f);
  if (failed) {
    free(buf);
    wk_errf(err, err_len, "%s: read error", path);
    return false;
  }
  *data = buf;
  *len = n;
  return true;
}

void wk_journal_prepare_replay(wk_journal_record *rec, uint8_t **zeros, size_t *zeros_len) {
  if (rec->type != WK_JREC_INPUT || rec->input.kind != WK_INPUT_PHASE_FINISHED) return;
  wk_bytes *d = &rec->outcome.data;
  if (d->len == 0) return;
  if (d->len > *zeros_len) {
    free(*zeros);
    *zeros = wk_xcalloc(1, d->len);
    *zeros_len = d->len;
  }
  d->data = *zeros;
}

void wk_journal_order_init(wk_journal_order *o, const wk_journal_header *h) {
  o->next_seq = h->first_seq;
  o->last_now = INT64_MIN;
}

bool wk_journal_order_next(wk_journal_order *o, const wk_journal_record *rec, char *why,
                           size_t why_len) {
  if (rec->seq != o->next_seq) {
    wk_errf(why, why_len, "input #%" PRIu64 " where #%" PRIu64 " was due (inputs missing)",
            rec->seq, o->next_seq);
    return false;
  }
  int64_t now = rec->input.now_ms;
  bool timed = now != 0 || rec->input.kind == WK_INPUT_PURGE;
  if (now < 0 || now > WK_JOURNAL_NOW_MAX) {
    wk_errf(why, why_len, "input #%" PRIu64 " at t=%" PRId64 ": no worker's clock reads that",
            rec->seq, now);
    return false;
  }
  if (timed && now < o->last_now) {
    wk_errf(why, why_len,
            "input #%" PRIu64 " at t=%" PRId64 " comes after t=%" PRId64
            ": the core's clock never goes back, this is no worker's record",
            rec->seq, now, o->last_now);
    return false;
  }
  if (timed) o->last_now = now;
  o->next_seq++;
  return true;
}

/* ---- printing ------------------------------------------------------------------------ */

void wk_journal_printer_init(wk_journal_printer *p, const wk_journal_header *h) {
  memset(p, 0, sizeof *p);
  p->wall_ms = h->wall_ms;
  p->mono_ms = h->mono_ms;
  p->slots = h->core.task_slots;
  p->slot_task = wk_xcalloc(p->slots, sizeof *p->slot_task);
}

void wk_journal_printer_free(wk_journal_printer *p) {
  free(p->slot_task);
  p->slot_task = NULL;
}

const char *wk_journal_slot_task(const wk_journal_printer *p, uint64_t slot_id) {
  uint32_t i = wk_slot_id_index(slot_id);
  if (slot_id == 0 || i >= p->slots) return "";
  return p->slot_task[i];
}

static void note_slot(wk_journal_printer *p, uint64_t slot_id, const char *id, size_t len) {
  uint32_t i = wk_slot_id_index(slot_id);
  if (slot_id == 0 || i >= p->slots || !id || len > WK_TASK_ID_MAX) return;
  memcpy(p->slot_task[i], id, len);
  p->slot_task[i][len] = '\0';
}

__attribute__((format(printf, 2, 3))) static void bprintf(wk_buf *b, const char *fmt, ...) {
  va_list ap, ap2;
  va_start(ap, fmt);
  va_copy(ap2, ap);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  if (n > 0) {
    char *dst = (char *)wk_buf_reserve(b, (size_t)n + 1);
    vsnprintf(dst, (size_t)n + 1, fmt, ap2);
    b->len += (size_t)n;
  }
  va_end(ap2);
}

/* A quoted string with ", \ and control bytes escaped. */
static void put_quoted(wk_buf *b, const char *s, size_t len) {
  wk_buf_append(b, "\"", 1);
  for (size_t i = 0; i < len; i++) {
    unsigned char ch = (unsigned char)s[i];
    if (ch == '"' || ch == '\\') {
      char esc[2] = {'\\', (char)ch};
      wk_buf_append(b, esc, 2);
    } else if (ch < 0x20 || ch == 0x7f) {
      bprintf(b, "\\x%02x", ch);
    } else {
      wk_buf_append(b, &s[i], 1);
    }
  }
  wk_buf_append(b, "\"", 1);
}

void wk_journal_print_time(const wk_journal_printer *p, int64_t now_ms, wk_buf *b) {
  int64_t since, wall;
  if (__builtin_sub_overflow(now_ms, p->mono_ms, &since) ||
      __builtin_add_overflow(p->wall_ms, since, &wall) || wall < -(INT64_C(1) << 52) ||
      wall > INT64_C(1) << 52) {
    bprintf(b, "?");
    return;
  }
  time_t secs = (time_t)(wall >= 0 ? wall / 1000 : (wall - 999) / 1000);
  int ms = (int)(wall - (int64_t)secs * 1000);
  struct tm tm;
  if (!gmtime_r(&secs, &tm)) {
    bprintf(b, "?");
    return;
  }
  bprintf(b, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
          tm.tm_hour, tm.tm_min, tm.tm_sec, ms);
}

static void print_stats(wk_buf *b, const wk_call_stats *s) {
  bprintf(b, " calls=%" PRIu64 "/%" PRIu64 "ok/%" PRIu64 "failed", s->calls_total,
          s->calls_succeeded, s->calls_failed);
}

static void print_args(const wk_journal_printer *p, const wk_core_input *in, wk_buf *b) {
  switch (in->kind) {
    case WK_INPUT_SET_READY:
    case WK_INPUT_SET_DRAINING: bprintf(b, " %s", in->flag ? "true" : "false"); break;
    case WK_INPUT_SET_PAUSED:
      bprintf(b, " reason=");
      put_quoted(b, in->message ? in->message : "", in->message ? strlen(in->message) : 0);
      break;
    case WK_INPUT_REQUEST_SLOT: bprintf(b, " ttl=%" PRId64, in->ttl_ms); break;
    case WK_INPUT_SUBMIT:
      if (in->submit) {
        const wk_submit_request *s = in->submit;
        bprintf(b, " slot=%" PRIu64 " timeout=%" PRId64 " epoch=%" PRIu64 " digest=%016" PRIx64,
                s->slot_id, s->timeout_ms, s->requested_epoch, s->request_digest);
      }
      break;
    case WK_INPUT_ACTIVATION_PREPARED:
      bprintf(b, " slot=%" PRIu64 " epoch=%" PRIu64, in->slot_id, in->code_epoch);
      break;
    case WK_INPUT_ACTIVATION_FAILED:
    case WK_INPUT_ABORT:
      bprintf(b, " code=%s message=", wk_failure_code_name(in->code));
      put_quoted(b, in->message ? in->message : "", in->message ? strlen(in->message) : 0);
      break;
    case WK_INPUT_PHASE_FINISHED:
      bprintf(b, " phase=%s", wk_phase_name(in->phase));
      if (in->outcome) {
        const wk_phase_outcome *o = in->outcome;
        bprintf(b, " %s", o->ok ? "ok" : "failed");
        if (o->failure_code) bprintf(b, " code=%s", wk_failure_code_name(o->failure_code));
        if (in->phase == WK_PHASE_CALLS) {
          print_stats(b, &o->stats);
          bprintf(b, " outputs=%zuB", o->data.len);
        } else if (in->phase == WK_PHASE_WRITER) {
          bprintf(b, " results=%zuB", o->data.len);
        }
        if (o->message && o->message[0]) {
          bprintf(b, " message=");
          put_quoted(b, o->message, strlen(o->message));
        }
      }
      break;
    case WK_INPUT_CALL_PROGRESS:
      if (in->stats) print_stats(b, in->stats);
      break;
    case WK_INPUT_SLOT_LEASE_EXPIRED: {
      bprintf(b, " slot=%" PRIu64, in->slot_id);
      const char *holder = wk_journal_slot_task(p, in->slot_id);
      if (holder[0]) bprintf(b, " (task=%s)", holder);
      break;
    }
    case WK_INPUT_TASK_TIMED_OUT:
    case WK_INPUT_WATCH_ATTACHED:
    case WK_INPUT_WATCH_DETACHED:
    case WK_INPUT_WATCH_DISCONNECTED:
    case WK_INPUT_WATCH_GRACE_EXPIRED:
    case WK_INPUT_PURGE: break;
  }
}

static bool same_id(const char *a, size_t alen, const char *b, size_t blen) {
  return alen == blen && (alen == 0 || memcmp(a, b, alen) == 0);
}

static void print_cmds(const wk_core_input *in, const wk_cmds *cmds, wk_buf *b) {
  for (uint32_t i = 0; i < cmds->count && i < WK_CMDS_MAX; i++) {
    const wk_cmd *c = &cmds->items[i];
    bprintf(b, " | %s", wk_cmd_kind_name(c->kind));
    if (!same_id(c->task_id, c->task_id_len, in->task_id, in->task_id ? in->task_id_len : 0)) {
      bprintf(b, " task=%.*s", (int)c->task_id_len, c->task_id);
    }
    switch (c->kind) {
      case WK_CMD_PREPARE_ACTIVATION:
        bprintf(b, " epoch=%" PRIu64, c->u.prepare.requested_epoch);
        break;
      case WK_CMD_START_CALLS:
        if (c->u.calls.streaming) bprintf(b, " streaming");
        break;
      case WK_CMD_START_WRITER: bprintf(b, " outputs=%zuB", c->u.writer.outputs.len); break;
      case WK_CMD_CONVERGE: {
        const wk_task_result *r = c->u.converge.result;
        if (!r) break;
        bprintf(b, " %s", wk_task_state_name(r->state));
        if (r->failure_code) bprintf(b, "/%s", wk_failure_code_name(r->failure_code));
        bprintf(b, " slot=%" PRIu64 " epoch=%" PRIu64, r->slot_id, r->code_epoch);
        if (r->failure_message && r->failure_message[0]) {
          bprintf(b, " message=");
          put_quoted(b, r->failure_message, strlen(r->failure_message));
        }
        break;
      }
      case WK_CMD_START_BUILDER:
      case WK_CMD_CANCEL_TASK: break;
    }
  }
}

static void print_result_state(const wk_task_result *r, wk_buf *b) {
  if (!r) return;
  bprintf(b, " state=%s", wk_task_state_name(r->state));
  if (r->failure_code) bprintf(b, "/%s", wk_failure_code_name(r->failure_code));
}

void wk_journal_print(wk_journal_printer *p, uint64_t seq, const wk_core_input *in,
                      const wk_core_output *out, wk_buf *line) {
  bprintf(line, "#%" PRIu64 " ", seq);
  if (in->kind == WK_INPUT_SET_READY || in->kind == WK_INPUT_SET_DRAINING ||
      in->kind == WK_INPUT_SET_PAUSED || in->kind == WK_INPUT_CALL_PROGRESS) {
    bprintf(line, "- t=-"); /* these inputs carry no time */
  } else {
    wk_journal_print_time(p, in->now_ms, line);
    bprintf(line, " t=%" PRId64, in->now_ms);
  }
  bprintf(line, " %s", wk_core_input_kind_name(in->kind));
  if (in->task_id) {
    bprintf(line, " task=");
    size_t n = in->task_id_len > WK_TASK_ID_MAX + 1 ? WK_TASK_ID_MAX + 1 : in->task_id_len;
    bool plain = wk_task_id_valid(in->task_id, n);
    if (plain) {
      wk_buf_append(line, in->task_id, n);
    } else {
      put_quoted(line, in->task_id, n);
    }
  }
  print_args(p, in, line);
  bprintf(line, " -> %s", wk_err_name(out->err));
  if (out->slot && out->err == WK_OK) {
    const wk_slot_result *s = out->slot;
    bprintf(line, " slot=%" PRIu64, s->slot_id);
    if (s->lease_expires_ms) bprintf(line, " lease=%" PRId64, s->lease_expires_ms);
    if (s->duplicate) bprintf(line, " duplicate");
    print_result_state(s->result, line);
    if (!s->duplicate) note_slot(p, s->slot_id, in->task_id, in->task_id_len);
  }
  if (out->submit) {
    const wk_submit_result *s = out->submit;
    if (s->err == WK_OK) {
      bprintf(line, " slot=%" PRIu64 " accepted=%" PRId64, s->slot_id, s->accepted_ms);
      if (s->duplicate) bprintf(line, " duplicate");
      print_result_state(s->result, line);
      if (!s->duplicate) note_slot(p, s->slot_id, in->task_id, in->task_id_len);
    }
    print_cmds(in, &s->cmds, line);
  }
  if (out->transition) print_cmds(in, &out->transition->cmds, line);
  if (in->kind == WK_INPUT_PURGE) bprintf(line, " purged=%zu", out->purged);
}

static bool cmds_concern(const wk_cmds *cmds, const char *id, size_t len) {
  for (uint32_t i = 0; i < cmds->count && i < WK_CMDS_MAX; i++) {
    if (same_id(cmds->items[i].task_id, cmds->items[i].task_id_len, id, len)) return true;
  }
  return false;
}

bool wk_journal_concerns(const wk_journal_printer *p, const wk_core_input *in,
                         const wk_core_output *out, const char *id) {
  size_t len = strlen(id);
  if (in->task_id && same_id(in->task_id, in->task_id_len, id, len)) return true;
  if (in->kind == WK_INPUT_SLOT_LEASE_EXPIRED &&
      strcmp(wk_journal_slot_task(p, in->slot_id), id) == 0)
    return true;
  if (out->submit && cmds_concern(&out->submit->cmds, id, len)) return true;
  if (out->transition && cmds_concern(&out->transition->cmds, id, len)) return true;
  return false;
}

/* wk_writers.c: the writer registry and what the writers share: the outputs blob
 * turned into JSON records, the PluginResult encoding, options and messages. */
#include "plugins/wk_writers.h"

#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include "plugins/wk_writers_int.h"
#include "worker/v1/worker.pb-c.h"

/* ---- registry ----------------------------------------------------------------------- */

static const wk_writer *const writers[] = {&wk_writer_file, &wk_writer_redis, &wk_writer_postgres};

const wk_writer *wk_writer_find(const char *name) {
  if (!name) return NULL;
  for (size_t i = 0; i < sizeof writers / sizeof writers[0]; i++) {
    if (strcmp(writers[i]->name, name) == 0) return writers[i];
  }
  return NULL;
}

void wk_writers_mask_secrets(const wk_writer_settings *s, char *text) {
  if (!s || !text) return;
  wk_redis_mask_secrets(s, text);
  wk_postgres_mask_secrets(s, text);
}

const char *wk_writer_names(void) { return "file, redis, postgres"; }

const char *wk_writer_task_option(const wk_writer_task *t, const char *key) {
  return wk_option_get(t->options, t->n_options, key);
}

/* ---- errors ------------------------------------------------------------------------- */

int wk_werr(char *err, size_t len, const char *fmt, ...) {
  if (!err || len == 0) return -1;
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(err, len, fmt, ap);
  va_end(ap);
  if (n < 0) err[0] = '\0';
  /* One line: runs of control characters become one space; no trailing spaces. */
  size_t w = 0;
  bool gap = false;
  for (size_t r = 0; err[r]; r++) {
    unsigned char c = (unsigned char)err[r];
    if (c < 0x20 || c == 0x7f) {
      gap = true;
      continue;
    }
    if (gap && w > 0) err[w++] = ' ';
    gap = false;
    err[w++] = (char)c;
  }
  while (w > 0 && err[w - 1] == ' ') w--;
  err[w] = '\0';
  return -1;
}

/* ---- settings and options ------------------------------------------------------------ */

uint32_t wk_connect_timeout_ms(const wk_writer_settings *s) {
  return s && s->connect_timeout_ms ? s->connect_timeout_ms : WK_WRITER_CONNECT_TIMEOUT_MS;
}

uint32_t wk_io_timeout_ms(const wk_writer_settings *s) {
  return s && s->io_timeout_ms ? s->io_timeout_ms : WK_WRITER_IO_TIMEOUT_MS;
}

int wk_check_option_keys(const char *writer, const wk_writer_option *options, size_t n,
                         const char *allowed, char *err, size_t len) {
  const char *const known[] = {allowed, NULL};
  return wk_option_check_keys(writer, options, n, known, err, len);
}

/* ---- protobuf framing ----------------------------------------------------------------- */

/* Reads a varint at *p (< end). Returns 0, or -1 when truncated or longer than 10 bytes. */
static int get_varint(const uint8_t **p, const uint8_t *end, uint64_t *v) {
  uint64_t x = 0;
  for (unsigned shift = 0; shift < 70; shift += 7) {
    if (*p >= end) return -1;
    uint8_t b = *(*p)++;
    x |= (uint64_t)(b & 0x7f) << shift;
    if (!(b & 0x80)) {
      *v = x;
      return 0;
    }
  }
  return -1;
}

/* Advances past one field record. On field 7 (length-delimited) returns 1 with the
 * message in *msg / *msg_len; other well-formed fields return 0 (skipped); -1 when
 * malformed. */
static int next_field(const uint8_t **p, const uint8_t *end, const uint8_t **msg, size_t *msg_len) {
  uint64_t tag, n;
  if (get_varint(p, end, &tag) != 0) return -1;
  switch (tag & 7u) {
    case 0: return get_varint(p, end, &n);
    case 1:
      if ((size_t)(end - *p) < 8) return -1;
      *p += 8;
      return 0;
    case 5:
      if ((size_t)(end - *p) < 4) return -1;
      *p += 4;
      return 0;
    case 2:
      if (get_varint(p, end, &n) != 0 || n > (uint64_t)(end - *p)) return -1;
      *msg = *p;
      *msg_len = (size_t)n;
      *p += n;
      return (tag >> 3) == 7 ? 1 : 0;
    default: return -1;
  }
}

/* ---- JSON pieces ------------------------------------------------------------------------ */

void wk_put_base64(wk_buf *b, const uint8_t *p, size_t n) {
  static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  uint8_t *o = wk_buf_reserve(b, (n + 2) / 3 * 4);
  size_t w = 0, i = 0;
  for (; i + 3 <= n; i += 3) {
    uint32_t v = (uint32_t)p[i] << 16 | (uint32_t)p[i + 1] << 8 | p[i + 2];
    o[w++] = (uint8_t)tab[v >> 18];
    o[w++] = (uint8_t)tab[(v >> 12) & 63];
    o[w++] = (uint8_t)tab[(v >> 6) & 63];
    o[w++] = (uint8_t)tab[v & 63];
  }
  if (n - i == 1) {
    uint32_t v = (uint32_t)p[i] << 16;
    o[w++] = (uint8_t)tab[v >> 18];
    o[w++] = (uint8_t)tab[(v >> 12) & 63];
    o[w++] = '=';
    o[w++] = '=';
  } else if (n - i == 2) {
    uint32_t v = (uint32_t)p[i] << 16 | (uint32_t)p[i + 1] << 8;
    o[w++] = (uint8_t)tab[v >> 18];
    o[w++] = (uint8_t)tab[(v >> 12) & 63];
    o[w++] = (uint8_t)tab[(v >> 6) & 63];
    o[w++] = '=';
  }
  b->len += w;
}

/* Appends JSON text that jansson accepted with its whitespace outside strings removed
 * (the rest verbatim, so numbers keep their spelling). */
static void put_json_minified(wk_buf *b, const uint8_t *p, size_t n) {
  uint8_t *o = wk_buf_reserve(b, n);
  size_t w = 0;
  bool in_str = false, esc = false;
  for (size_t i = 0; i < n; i++) {
    uint8_t c = p[i];
    if (in_str) {
      if (esc) {
        esc = false;
      } else if (c == '\\') {
        esc = true;
      } else if (c == '"') {
        in_str = false;
      }
    } else if (c == '"') {
      in_str = true;
    } else if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
      continue;
    }
    o[w++] = c;
  }
  b->len += w;
}

/* Whether p[0..n) is one JSON value jansson reads (any type, big integers allowed, no
 * "\u0000" in strings: PostgreSQL's jsonb refuses it). */
static bool is_json(const uint8_t *p, size_t n) {
  json_error_t e;
  json_t *v = json_loadb((const char *)p, n, JSON_DECODE_ANY | JSON_DECODE_INT_AS_REAL, &e);
  if (!v) return false;
  json_decref(v);
  return true;
}

static void put_cstr(wk_buf *b, const char *s) { wk_buf_append(b, s, strlen(s)); }

static void put_uint(wk_buf *b, uint64_t v) {
  char tmp[24];
  int n = snprintf(tmp, sizeof tmp, "%llu", (unsigned long long)v);
  wk_buf_append(b, tmp, (size_t)n);
}

/* The JSON record of one decoded output. */
static void put_record(wk_buf *rec, const char *task_id, const Worker__V1__CallOutput *o) {
  put_cstr(rec, "{\"task_id\":");
  wk_json_put_string(rec, task_id, strlen(task_id));
  put_cstr(rec, ",\"index\":");
  put_uint(rec, o->index);
  if (o->outcome_case == WORKER__V1__CALL_OUTPUT__OUTCOME_ERROR && o->error) {
    const char *type = o->error->type ? o->error->type : "";
    const char *message = o->error->message ? o->error->message : "";
    put_cstr(rec, ",\"ok\":false,\"error\":{\"type\":");
    wk_json_put_string(rec, type, strlen(type));
    put_cstr(rec, ",\"message\":");
    wk_json_put_string(rec, message, strlen(message));
    put_cstr(rec, "}}");
    return;
  }
  const uint8_t *v = NULL;
  size_t vn = 0;
  if (o->outcome_case == WORKER__V1__CALL_OUTPUT__OUTCOME_VALUE) {
    v = o->value.data;
    vn = o->value.len;
  }
  put_cstr(rec, ",\"ok\":true,\"value\":");
  bool json = o->content_type == WORKER__V1__CONTENT_TYPE__CONTENT_TYPE_JSON;
  if (json && vn == 0) {
    put_cstr(rec, "null");
  } else if (json && is_json(v, vn)) {
    put_json_minified(rec, v, vn);
  } else {
    json = false;
    wk_buf_append(rec, "\"", 1);
    wk_put_base64(rec, v, vn);
    wk_buf_append(rec, "\"", 1);
  }
  put_cstr(rec, json ? ",\"content_type\":\"json\"}" : ",\"content_type\":\"bytes\"}");
}

void wk_output_iter_init(wk_output_iter *it, const wk_writer_task *t) {
  it->source = t->source;
  it->p = t->outputs;
  it->end = t->outputs ? t->outputs + t->outputs_len : NULL;
  it->task_id = t->task_id ? t->task_id : "";
  it->n = 0;
}

/* The next CallOutput message: 1 with it in *m / *ml, 0 at the end, -1 with err. */
static int next_message(wk_output_iter *it, const uint8_t **m, size_t *ml, char *err, size_t len) {
  for (;;) {
    while (it->p && it->p < it->end) {
      int rc = next_field(&it->p, it->end, m, ml);
      if (rc < 0) {
        return wk_werr(err, len, "outputs: malformed record after output %llu",
                       (unsigned long long)it->n);
      }
      if (rc == 1) return 1;
    }
    if (!it->source) return 0;
    size_t n = 0;
    int more = it->source->next(it->source->ud, &it->p, &n, err, len);
    if (more <= 0) return more;
    it->end = it->p + n;
  }
}

int wk_output_iter_next(wk_output_iter *it, wk_buf *rec, uint32_t *index, char *err, size_t len) {
  const uint8_t *m = NULL;
  size_t ml = 0;
  int more = next_message(it, &m, &ml, err, len);
  if (more <= 0) return more;
  Worker__V1__CallOutput *o = worker__v1__call_output__unpack(NULL, ml, m);
  if (!o) {
    return wk_werr(err, len, "outputs: output %llu is not a valid CallOutput",
                   (unsigned long long)it->n);
  }
  wk_buf_clear(rec);
  put_record(rec, it->task_id, o);
  *index = o->index;
  worker__v1__call_output__free_unpacked(o, NULL);
  it->n++;
  return 1;
}

/* ---- PluginResult ------------------------------------------------------------------------- */

static void put_string_field(wk_buf *b, uint32_t field, const char *s) {
  size_t n = strlen(s);
  if (n == 0) return;
  wk_buf_append_varint(b, (uint64_t)field << 3 | 2u);
  wk_buf_append_varint(b, n);
  wk_buf_append(b, s, n);
}

static void put_uint_field(wk_buf *b, uint32_t field, uint64_t v) {
  if (v == 0) return;
  wk_buf_append_varint(b, (uint64_t)field << 3);
  wk_buf_append_varint(b, v);
}

void wk_put_plugin_result(wk_buf *out, const char *plugin, const char *location, uint64_t records,
                          uint64_t bytes) {
  wk_buf msg = {0};
  put_string_field(&msg, 1, plugin);
  put_string_field(&msg, 2, location);
  put_uint_field(&msg, 3, records);
  put_uint_field(&msg, 4, bytes);
  wk_buf_append_varint(out, 8u << 3 | 2u);
  wk_buf_append_varint(out, msg.len);
  wk_buf_append(out, msg.data, msg.len);
  wk_buf_free(&msg);
}

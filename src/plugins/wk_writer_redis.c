/* wk_writer_redis.c: the "redis" writer. A task's records are appended to a Redis
 * stream with XADD, one entry per output, inside MULTI/EXEC sent as one pipelined
 * batch, so a task's records land together and in order. A connection per write
 * (plain or TLS, with AUTH and SELECT as redis_addr says: wk_redis_conn_int.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/wk_mask.h"
#include "plugins/wk_redis_conn_int.h"
#include "plugins/wk_writers_int.h"

#define DEFAULT_STREAM "worker:outputs"
#define STREAM_MAX_BYTES 512

/* The writer's connection: redis_addr and the TLS settings. */
static wk_redis_conn *connect_redis(const wk_writer_settings *s, uint32_t connect_ms,
                                    uint32_t io_ms, char *err, size_t len) {
  wk_redis_target t;
  if (wk_redis_parse(s ? s->redis_addr : NULL, &t, err, len) != 0) return NULL;
  wk_redis_tls tls = {.ca_file = s->redis_tls_ca_file,
                      .cert_file = s->redis_tls_cert_file,
                      .key_file = s->redis_tls_key_file};
  wk_redis_conn *c = wk_redis_connect(&t, &tls, connect_ms, io_ms, err, len);
  memset(t.password, 0, sizeof t.password);
  return c;
}

static int redis_validate(const wk_writer_settings *s, char *err, size_t len) {
  wk_redis_target t;
  if (wk_redis_parse(s ? s->redis_addr : NULL, &t, err, len) != 0) return -1;
  memset(t.password, 0, sizeof t.password);
  uint32_t timeout = wk_connect_timeout_ms(s);
  if (timeout > WK_WRITER_VALIDATE_TIMEOUT_MS) timeout = WK_WRITER_VALIDATE_TIMEOUT_MS;
  wk_redis_conn *c = connect_redis(s, timeout, timeout, err, len);
  if (!c) return -1;
  int rc = -1;
  const char *ping[] = {"PING"};
  redisReply *r = wk_redis_command(c, 1, ping, NULL, err, len);
  if (!r) {
    /* err says why */
  } else if (r->type == REDIS_REPLY_ERROR) {
    wk_werr(err, len, "redis %s: PING: %s", wk_redis_shown(c), r->str);
  } else if (r->type != REDIS_REPLY_STATUS || strcmp(r->str, "PONG") != 0) {
    wk_werr(err, len, "redis %s: PING: unexpected answer", wk_redis_shown(c));
  } else {
    rc = 0;
  }
  if (r) freeReplyObject(r);
  wk_redis_close(c);
  return rc;
}

static int redis_check_options(const wk_writer_option *options, size_t n, char *err, size_t len) {
  if (wk_check_option_keys("redis", options, n, "stream", err, len) != 0) return -1;
  const char *stream = wk_option_get(options, n, "stream");
  if (stream && (!stream[0] || strlen(stream) > STREAM_MAX_BYTES)) {
    return wk_werr(err, len, "redis: option stream must be 1..%d bytes", STREAM_MAX_BYTES);
  }
  return 0;
}

static int redis_write(const wk_writer *w, const wk_writer_task *t, wk_buf *plugin_results,
                       char *err, size_t len) {
  (void)w;
  if (redis_check_options(t->options, t->n_options, err, len) != 0) return -1;
  const char *stream = wk_option_get(t->options, t->n_options, "stream");
  if (!stream) stream = DEFAULT_STREAM;
  const char *task_id = t->task_id ? t->task_id : "";

  uint32_t io_ms = wk_io_timeout_ms(t->settings);
  wk_redis_conn *c =
      connect_redis(t->settings, wk_connect_timeout_ms(t->settings), io_ms, err, len);
  if (!c) return -1;
  const char *addr = wk_redis_shown(c);

  /* Build the whole batch in the output buffer: nothing is sent before every record was
   * built, so a malformed blob sends nothing. */
  int rc = -1;
  uint64_t records = 0, bytes = 0;
  wk_buf rec = {0};
  const char *multi[] = {"MULTI"}, *exec[] = {"EXEC"};
  wk_redis_append(c, 1, multi, NULL);
  wk_output_iter it;
  wk_output_iter_init(&it, t);
  uint32_t index;
  int more;
  while ((more = wk_output_iter_next(&it, &rec, &index, err, len)) == 1) {
    char idx[16];
    int il = snprintf(idx, sizeof idx, "%u", index);
    const char *argv[] = {
        "XADD", stream, "*", "task_id", task_id, "index", idx, "record", (const char *)rec.data};
    size_t argl[] = {4, strlen(stream), 1, 7, strlen(task_id), 5, (size_t)il, 6, rec.len};
    wk_redis_append(c, 9, argv, argl);
    records++;
    bytes += rec.len;
  }
  if (more < 0) goto out;
  wk_redis_append(c, 1, exec, NULL);
  if (wk_redis_flush(c, "", err, len) != 0) goto out;

  /* MULTI's +OK, one +QUEUED (or an error) per XADD, then EXEC's array. */
  char first[512] = "";
  for (uint64_t i = 0; i < records + 1; i++) {
    redisReply *r = wk_redis_reply(c, "", err, len);
    if (!r) goto out;
    if (r->type == REDIS_REPLY_ERROR && !first[0]) snprintf(first, sizeof first, "%s", r->str);
    freeReplyObject(r);
  }
  redisReply *r = wk_redis_reply(c, "", err, len);
  if (!r) goto out;
  if (first[0]) {
    wk_werr(err, len, "redis %s: %s", addr, first);
  } else if (r->type == REDIS_REPLY_ERROR) {
    wk_werr(err, len, "redis %s: EXEC: %s", addr, r->str);
  } else if (r->type != REDIS_REPLY_ARRAY || r->elements != records) {
    wk_werr(err, len, "redis %s: EXEC: the transaction was not executed", addr);
  } else {
    rc = 0;
    for (size_t i = 0; i < r->elements; i++) {
      if (r->element[i]->type == REDIS_REPLY_ERROR) {
        wk_werr(err, len, "redis %s: XADD %s: %s", addr, stream, r->element[i]->str);
        rc = -1;
        break;
      }
    }
  }
  freeReplyObject(r);
  if (rc == 0) wk_put_plugin_result(plugin_results, "redis", stream, records, bytes);

out:
  wk_buf_free(&rec);
  wk_redis_close(c);
  return rc;
}

void wk_redis_mask_secrets(const wk_writer_settings *s, char *text) {
  const char *addr = s ? s->redis_addr : NULL;
  if (!addr || !addr[0]) return;
  wk_redis_target t;
  char ignored[8];
  if (wk_redis_parse(addr, &t, ignored, sizeof ignored) != 0) return;
  wk_mask_value(text, t.password);
  memset(t.password, 0, sizeof t.password);
}

const wk_writer wk_writer_redis = {
    .name = "redis",
    .setting = "redis_addr",
    .validate = redis_validate,
    .check_options = redis_check_options,
    .write = redis_write,
};

/* wk_writer_redis.c: the "redis" writer. A task's records are appended to a Redis
 * stream with XADD, one entry per output, inside MULTI/EXEC sent as one pipelined
 * batch, so a task's records land together and in order. A connection per write
 * (hiredis contexts are not shared between threads). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include <hiredis/hiredis.h>

#include "plugins/wk_writers_int.h"

#define DEFAULT_STREAM "worker:outputs"
#define STREAM_MAX_BYTES 512

typedef struct redis_addr {
  char host[256];
  int port;
} redis_addr;

/* "host:port" or "[v6]:port" with a port of 1..65535. */
static int parse_addr(const char *s, redis_addr *a, char *err, size_t len) {
  if (!s || !s[0]) return wk_werr(err, len, "redis: redis_addr is not set");
  const char *colon = strrchr(s, ':');
  if (!colon || colon == s || !colon[1]) {
    return wk_werr(err, len, "redis: redis_addr must be host:port, got '%.200s'", s);
  }
  const char *h = s;
  size_t hl = (size_t)(colon - s);
  if (h[0] == '[') {
    if (hl < 3 || h[hl - 1] != ']') {
      return wk_werr(err, len, "redis: redis_addr must be host:port, got '%.200s'", s);
    }
    h++;
    hl -= 2;
  } else if (memchr(h, ':', hl)) {
    return wk_werr(
        err, len, "redis: redis_addr: an IPv6 host goes in brackets ([::1]:6379), got '%.200s'", s);
  }
  if (hl >= sizeof a->host) return wk_werr(err, len, "redis: redis_addr: host too long");
  long port = 0;
  for (const char *p = colon + 1; *p; p++) {
    if (*p < '0' || *p > '9' || port > 65535) {
      return wk_werr(err, len, "redis: redis_addr: bad port in '%.200s'", s);
    }
    port = port * 10 + (*p - '0');
  }
  if (port < 1 || port > 65535)
    return wk_werr(err, len, "redis: redis_addr: bad port in '%.200s'", s);
  memcpy(a->host, h, hl);
  a->host[hl] = '\0';
  a->port = (int)port;
  return 0;
}

static struct timeval tv_ms(uint32_t ms) {
  return (struct timeval){.tv_sec = (time_t)(ms / 1000),
                          .tv_usec = (suseconds_t)(ms % 1000) * 1000};
}

/* Connects with the given timeouts. Returns the context, or NULL with a message. */
static redisContext *connect_redis(const char *addr_text, uint32_t connect_ms, uint32_t io_ms,
                                   char *err, size_t len) {
  redis_addr a;
  if (parse_addr(addr_text, &a, err, len) != 0) return NULL;
  redisContext *c = redisConnectWithTimeout(a.host, a.port, tv_ms(connect_ms));
  if (!c) {
    wk_werr(err, len, "redis %s: cannot allocate a connection", addr_text);
    return NULL;
  }
  if (c->err || redisSetTimeout(c, tv_ms(io_ms)) != REDIS_OK) {
    wk_werr(err, len, "redis %s: %s", addr_text, c->errstr[0] ? c->errstr : "cannot connect");
    redisFree(c);
    return NULL;
  }
  return c;
}

/* The connection's error, saying "no answer within N ms" for a socket timeout (hiredis
 * reports EAGAIN's text). */
static int conn_err(const redisContext *c, const char *addr, const char *what, uint32_t io_ms,
                    char *err, size_t len) {
  if (c->err == REDIS_ERR_IO && strstr(c->errstr, "temporarily unavailable")) {
    return wk_werr(err, len, "redis %s: %sno answer within %u ms", addr, what, io_ms);
  }
  return wk_werr(err, len, "redis %s: %s%s", addr, what,
                 c->errstr[0] ? c->errstr : "connection lost");
}

/* Reads the next reply. Returns it, or NULL with the connection's error in err. */
static redisReply *next_reply(redisContext *c, const char *addr, uint32_t io_ms, char *err,
                              size_t len) {
  void *r = NULL;
  if (redisGetReply(c, &r) != REDIS_OK || !r) {
    conn_err(c, addr, "", io_ms, err, len);
    return NULL;
  }
  return r;
}

static int redis_validate(const wk_writer_settings *s, char *err, size_t len) {
  const char *addr = s ? s->redis_addr : NULL;
  redis_addr a;
  if (parse_addr(addr, &a, err, len) != 0) return -1;
  uint32_t t = wk_connect_timeout_ms(s);
  if (t > WK_WRITER_VALIDATE_TIMEOUT_MS) t = WK_WRITER_VALIDATE_TIMEOUT_MS;
  redisContext *c = connect_redis(addr, t, t, err, len);
  if (!c) return -1;
  int rc = -1;
  redisReply *r = redisCommand(c, "PING");
  if (!r) {
    conn_err(c, addr, "PING: ", t, err, len);
  } else if (r->type == REDIS_REPLY_ERROR) {
    wk_werr(err, len, "redis %s: PING: %s", addr, r->str);
  } else if (r->type != REDIS_REPLY_STATUS || strcmp(r->str, "PONG") != 0) {
    wk_werr(err, len, "redis %s: PING: unexpected answer", addr);
  } else {
    rc = 0;
  }
  if (r) freeReplyObject(r);
  redisFree(c);
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
  const char *addr = t->settings ? t->settings->redis_addr : NULL;
  const char *task_id = t->task_id ? t->task_id : "";

  uint32_t io_ms = wk_io_timeout_ms(t->settings);
  redisContext *c = connect_redis(addr, wk_connect_timeout_ms(t->settings), io_ms, err, len);
  if (!c) return -1;

  /* Queue the whole batch in hiredis's output buffer: nothing is sent before every
   * record was built, so a malformed blob sends nothing. */
  int rc = -1;
  uint64_t records = 0, bytes = 0;
  wk_buf rec = {0};
  const char *multi[] = {"MULTI"}, *exec[] = {"EXEC"};
  if (redisAppendCommandArgv(c, 1, multi, NULL) != REDIS_OK) goto conn_error;
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
    if (redisAppendCommandArgv(c, 9, argv, argl) != REDIS_OK) goto conn_error;
    records++;
    bytes += rec.len;
  }
  if (more < 0) goto out;
  if (redisAppendCommandArgv(c, 1, exec, NULL) != REDIS_OK) goto conn_error;

  /* MULTI's +OK, one +QUEUED (or an error) per XADD, then EXEC's array. */
  char first[512] = "";
  for (uint64_t i = 0; i < records + 1; i++) {
    redisReply *r = next_reply(c, addr, io_ms, err, len);
    if (!r) goto out;
    if (r->type == REDIS_REPLY_ERROR && !first[0]) snprintf(first, sizeof first, "%s", r->str);
    freeReplyObject(r);
  }
  redisReply *r = next_reply(c, addr, io_ms, err, len);
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
  goto out;

conn_error:
  conn_err(c, addr, "", io_ms, err, len);
out:
  wk_buf_free(&rec);
  redisFree(c);
  return rc;
}

const wk_writer wk_writer_redis = {
    .name = "redis",
    .setting = "redis_addr",
    .validate = redis_validate,
    .check_options = redis_check_options,
    .write = redis_write,
};

/* wk_redis_conn.c: Redis connections, plain or TLS (see wk_redis_conn_int.h). */
#include "plugins/wk_redis_conn_int.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "lib/wk_alloc.h"
#include "lib/wk_buf.h"
#include "lib/wk_mask.h"
#include "plugins/wk_writers_int.h"

#define DEFAULT_PORT 6379
#define READ_CHUNK 16384

struct wk_redis_conn {
  char shown[sizeof(((wk_redis_target *)0)->shown)];
  uint32_t io_ms;
  redisContext *ctx; /* the socket (hiredis connected it) */
  SSL_CTX *sctx;     /* TLS only */
  SSL *ssl;
  redisReader *reader;
  wk_buf out; /* commands not yet sent */
  bool broken;
};

/* ---- the address ---------------------------------------------------------------- */

static int hexval(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

/* Percent-decodes s[0..n) into out (cap bytes with the NUL). Returns 0 or -1. */
static int decode(const char *s, size_t n, char *out, size_t cap) {
  size_t w = 0;
  for (size_t i = 0; i < n; i++) {
    char c = s[i];
    if (c == '%') {
      if (i + 2 >= n) return -1;
      int hi = hexval(s[i + 1]), lo = hexval(s[i + 2]);
      if (hi < 0 || lo < 0) return -1;
      c = (char)(hi * 16 + lo);
      i += 2;
      if (c == '\0') return -1;
    }
    if (w + 1 >= cap) return -1;
    out[w++] = c;
  }
  out[w] = '\0';
  return 0;
}

/* "host:port" or "[v6]:port" (s[0..n)) into t; a missing ":port" is DEFAULT_PORT when
 * `port_optional`. */
static int parse_host_port(const char *s, size_t n, bool port_optional, wk_redis_target *t,
                           char *err, size_t len) {
  const char *end = s + n;
  const char *colon = NULL;
  if (n > 0 && s[0] == '[') {
    const char *close = memchr(s, ']', n);
    if (!close || close == s + 1)
      return wk_werr(err, len, "redis: redis_addr must be host:port, got '%.200s'", t->shown);
    if (close + 1 < end && close[1] != ':')
      return wk_werr(err, len, "redis: redis_addr must be host:port, got '%.200s'", t->shown);
    colon = close + 1 < end ? close + 1 : NULL;
    size_t hl = (size_t)(close - s - 1);
    if (hl >= sizeof t->host) return wk_werr(err, len, "redis: redis_addr: host too long");
    memcpy(t->host, s + 1, hl);
    t->host[hl] = '\0';
  } else {
    colon = n ? memchr(s, ':', n) : NULL;
    if (colon && memchr(colon + 1, ':', (size_t)(end - colon - 1))) {
      return wk_werr(err, len,
                     "redis: redis_addr: an IPv6 host goes in brackets ([::1]:6379), got '%.200s'",
                     t->shown);
    }
    size_t hl = colon ? (size_t)(colon - s) : n;
    if (hl == 0)
      return wk_werr(err, len, "redis: redis_addr must be host:port, got '%.200s'", t->shown);
    if (hl >= sizeof t->host) return wk_werr(err, len, "redis: redis_addr: host too long");
    memcpy(t->host, s, hl);
    t->host[hl] = '\0';
  }
  if (!colon) {
    if (!port_optional)
      return wk_werr(err, len, "redis: redis_addr must be host:port, got '%.200s'", t->shown);
    t->port = DEFAULT_PORT;
    return 0;
  }
  long port = 0;
  const char *p = colon + 1;
  if (p == end)
    return wk_werr(err, len, "redis: redis_addr must be host:port, got '%.200s'", t->shown);
  for (; p < end; p++) {
    if (*p < '0' || *p > '9' || port > 65535)
      return wk_werr(err, len, "redis: redis_addr: bad port in '%.200s'", t->shown);
    port = port * 10 + (*p - '0');
  }
  if (port < 1 || port > 65535)
    return wk_werr(err, len, "redis: redis_addr: bad port in '%.200s'", t->shown);
  t->port = (int)port;
  return 0;
}

int wk_redis_parse(const char *s, wk_redis_target *t, char *err, size_t len) {
  memset(t, 0, sizeof *t);
  t->db = -1;
  if (!s || !s[0]) return wk_werr(err, len, "redis: redis_addr is not set");
  wk_mask_credentials(s, t->shown, sizeof t->shown);
  const char *rest;
  if (strncmp(s, "redis://", 8) == 0) {
    rest = s + 8;
  } else if (strncmp(s, "rediss://", 9) == 0) {
    rest = s + 9;
    t->tls = true;
  } else if (strstr(s, "://")) {
    return wk_werr(err, len,
                   "redis: redis_addr: the URL scheme must be redis:// or rediss://, got '%.200s'",
                   t->shown);
  } else {
    return parse_host_port(s, strlen(s), false, t, err, len);
  }
  const char *end = rest + strlen(rest);
  const char *slash = strchr(rest, '/');
  if (strpbrk(rest, "?#"))
    return wk_werr(err, len, "redis: redis_addr: query parameters are not supported, got '%.200s'",
                   t->shown);
  const char *auth_end = slash ? slash : end;
  const char *at = NULL;
  for (const char *p = rest; p < auth_end; p++) {
    if (*p == '@') at = p;
  }
  const char *hp = rest;
  if (at) {
    const char *colon = memchr(rest, ':', (size_t)(at - rest));
    const char *pw = colon ? colon + 1 : rest;
    if (colon && decode(rest, (size_t)(colon - rest), t->user, sizeof t->user) != 0)
      return wk_werr(err, len,
                     "redis: redis_addr: the user name is not valid (percent-encoding, "
                     "at most %zu bytes) in '%.200s'",
                     sizeof t->user - 1, t->shown);
    if (decode(pw, (size_t)(at - pw), t->password, sizeof t->password) != 0)
      return wk_werr(err, len,
                     "redis: redis_addr: the password is not valid (percent-encoding, "
                     "at most %zu bytes) in '%.200s'",
                     sizeof t->password - 1, t->shown);
    t->has_password = t->password[0] != '\0';
    if (t->user[0] && !t->has_password)
      return wk_werr(err, len, "redis: redis_addr: user '%s' has no password in '%.200s'", t->user,
                     t->shown);
    hp = at + 1;
  }
  if (parse_host_port(hp, (size_t)(auth_end - hp), true, t, err, len) != 0) return -1;
  if (slash && slash + 1 < end) {
    long db = 0;
    for (const char *p = slash + 1; p < end; p++) {
      if (*p < '0' || *p > '9' || db > 100000)
        return wk_werr(err, len, "redis: redis_addr: the database must be a number, got '%.200s'",
                       t->shown);
      db = db * 10 + (*p - '0');
    }
    t->db = (int)db;
  }
  return 0;
}

/* ---- I/O -------------------------------------------------------------------------- */

static struct timeval tv_ms(uint32_t ms) {
  return (struct timeval){.tv_sec = (time_t)(ms / 1000),
                          .tv_usec = (suseconds_t)(ms % 1000) * 1000};
}

/* The OpenSSL error queue's first entry, as text ("" when empty); clears the queue. */
static void ssl_error_text(char *out, size_t len) {
  unsigned long e = ERR_get_error();
  out[0] = '\0';
  if (e) ERR_error_string_n(e, out, len);
  ERR_clear_error();
}

/* Describes a failed socket or TLS read/write (rc from read/write or SSL_*). */
static int io_error(wk_redis_conn *c, int rc, int saved_errno, const char *what, char *err,
                    size_t len) {
  c->broken = true;
  if (c->ssl) {
    int e = SSL_get_error(c->ssl, rc);
    char text[256];
    ssl_error_text(text, sizeof text);
    if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE ||
        (e == SSL_ERROR_SYSCALL && saved_errno == EAGAIN))
      return wk_werr(err, len, "redis %s: %sno answer within %u ms", c->shown, what, c->io_ms);
    if (e == SSL_ERROR_ZERO_RETURN || (e == SSL_ERROR_SYSCALL && rc == 0))
      return wk_werr(err, len, "redis %s: %sconnection closed by the server", c->shown, what);
    if (e == SSL_ERROR_SYSCALL)
      return wk_werr(err, len, "redis %s: %s%s", c->shown, what,
                     saved_errno ? strerror(saved_errno) : "connection lost");
    return wk_werr(err, len, "redis %s: %sTLS: %s", c->shown, what, text[0] ? text : "error");
  }
  if (rc == 0)
    return wk_werr(err, len, "redis %s: %sconnection closed by the server", c->shown, what);
  if (saved_errno == EAGAIN)
    return wk_werr(err, len, "redis %s: %sno answer within %u ms", c->shown, what, c->io_ms);
  return wk_werr(err, len, "redis %s: %s%s", c->shown, what, strerror(saved_errno));
}

int wk_redis_flush(wk_redis_conn *c, const char *what, char *err, size_t len) {
  if (c->broken) return wk_werr(err, len, "redis %s: %sconnection lost", c->shown, what);
  size_t off = 0;
  while (off < c->out.len) {
    size_t n = c->out.len - off;
    if (n > (1u << 30)) n = 1u << 30;
    int rc;
    errno = 0;
    if (c->ssl) {
      ERR_clear_error();
      rc = SSL_write(c->ssl, c->out.data + off, (int)n);
    } else {
      ssize_t w = send(c->ctx->fd, c->out.data + off, n, MSG_NOSIGNAL);
      if (w < 0 && errno == EINTR) continue;
      rc = w > 0 ? (int)(w > INT32_MAX ? INT32_MAX : w) : (w == 0 ? 0 : -1);
    }
    if (rc <= 0) return io_error(c, rc, errno, what, err, len);
    off += (size_t)rc;
  }
  wk_buf_clear(&c->out);
  return 0;
}

void wk_redis_append(wk_redis_conn *c, int argc, const char **argv, const size_t *argl) {
  char *cmd = NULL;
  int n = redisFormatCommandArgv(&cmd, argc, argv, argl);
  if (n < 0 || !cmd)
    abort(); /* out of memory, as wk_x* do */ /* hiredis fails only when it cannot allocate */
  wk_buf_append(&c->out, cmd, (size_t)n);
  redisFreeCommand(cmd);
}

redisReply *wk_redis_reply(wk_redis_conn *c, const char *what, char *err, size_t len) {
  if (c->broken) {
    wk_werr(err, len, "redis %s: %sconnection lost", c->shown, what);
    return NULL;
  }
  for (;;) {
    void *r = NULL;
    if (redisReaderGetReply(c->reader, &r) != REDIS_OK) {
      c->broken = true;
      wk_werr(err, len, "redis %s: %sprotocol error: %s", c->shown, what, c->reader->errstr);
      return NULL;
    }
    if (r) return r;
    char buf[READ_CHUNK];
    int rc;
    errno = 0;
    if (c->ssl) {
      ERR_clear_error();
      rc = SSL_read(c->ssl, buf, sizeof buf);
    } else {
      ssize_t n = recv(c->ctx->fd, buf, sizeof buf, 0);
      if (n < 0 && errno == EINTR) continue;
      rc = (int)n;
    }
    if (rc <= 0) {
      io_error(c, rc, errno, what, err, len);
      return NULL;
    }
    if (redisReaderFeed(c->reader, buf, (size_t)rc) != REDIS_OK) {
      c->broken = true;
      wk_werr(err, len, "redis %s: %sprotocol error: %s", c->shown, what, c->reader->errstr);
      return NULL;
    }
  }
}

redisReply *wk_redis_command(wk_redis_conn *c, int argc, const char **argv, const size_t *argl,
                             char *err, size_t len) {
  char what[64];
  snprintf(what, sizeof what, "%s: ", argv[0]);
  wk_redis_append(c, argc, argv, argl);
  if (wk_redis_flush(c, what, err, len) != 0) return NULL;
  return wk_redis_reply(c, what, err, len);
}

const char *wk_redis_shown(const wk_redis_conn *c) { return c->shown; }

void wk_redis_close(wk_redis_conn *c) {
  if (!c) return;
  if (c->ssl) SSL_free(c->ssl);
  if (c->sctx) SSL_CTX_free(c->sctx);
  if (c->reader) redisReaderFree(c->reader);
  if (c->ctx) redisFree(c->ctx);
  wk_buf_free(&c->out);
  ERR_clear_error();
  free(c);
}

/* ---- connecting ------------------------------------------------------------------- */

static bool set(const char *s) { return s && s[0]; }

/* The TLS handshake on the connected socket, verifying the server's chain and name. */
static int start_tls(wk_redis_conn *c, const wk_redis_target *t, const wk_redis_tls *tls, char *err,
                     size_t len) {
  char text[256];
  ERR_clear_error();
  c->sctx = SSL_CTX_new(TLS_client_method());
  if (!c->sctx) abort(); /* out of memory, as wk_x* do */
  SSL_CTX_set_min_proto_version(c->sctx, TLS1_2_VERSION);
  SSL_CTX_set_verify(c->sctx, SSL_VERIFY_PEER, NULL);
  const char *ca = tls ? tls->ca_file : NULL;
  if (set(ca) ? SSL_CTX_load_verify_locations(c->sctx, ca, NULL) != 1
              : SSL_CTX_set_default_verify_paths(c->sctx) != 1) {
    ssl_error_text(text, sizeof text);
    if (set(ca))
      return wk_werr(err, len, "redis %s: redis_tls_ca_file %s: cannot load it: %s", c->shown, ca,
                     text);
    return wk_werr(err, len, "redis %s: cannot load the system's CA certificates: %s", c->shown,
                   text);
  }
  if (tls && (set(tls->cert_file) || set(tls->key_file))) {
    if (!set(tls->cert_file) || !set(tls->key_file))
      return wk_werr(err, len, "redis %s: redis_tls_cert_file and redis_tls_key_file go together",
                     c->shown);
    if (SSL_CTX_use_certificate_chain_file(c->sctx, tls->cert_file) != 1) {
      ssl_error_text(text, sizeof text);
      return wk_werr(err, len, "redis %s: redis_tls_cert_file %s: %s", c->shown, tls->cert_file,
                     text);
    }
    if (SSL_CTX_use_PrivateKey_file(c->sctx, tls->key_file, SSL_FILETYPE_PEM) != 1 ||
        SSL_CTX_check_private_key(c->sctx) != 1) {
      ssl_error_text(text, sizeof text);
      return wk_werr(err, len, "redis %s: redis_tls_key_file %s: %s", c->shown, tls->key_file,
                     text);
    }
  }
  c->ssl = SSL_new(c->sctx);
  if (!c->ssl) abort(); /* out of memory, as wk_x* do */
  unsigned char ip[16];
  bool is_ip = inet_pton(AF_INET, t->host, ip) == 1 || inet_pton(AF_INET6, t->host, ip) == 1;
  X509_VERIFY_PARAM *param = SSL_get0_param(c->ssl);
  X509_VERIFY_PARAM_set_hostflags(param, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
  if (is_ip ? X509_VERIFY_PARAM_set1_ip_asc(param, t->host) != 1
            : (SSL_set_tlsext_host_name(c->ssl, t->host) != 1 ||
               X509_VERIFY_PARAM_set1_host(param, t->host, 0) != 1))
    return wk_werr(err, len, "redis %s: cannot set the name to verify", c->shown);
  if (SSL_set_fd(c->ssl, c->ctx->fd) != 1) abort(); /* out of memory, as wk_x* do */
  errno = 0;
  int rc = SSL_connect(c->ssl);
  if (rc == 1) return 0;
  int saved = errno;
  long verify = SSL_get_verify_result(c->ssl);
  if (verify != X509_V_OK) {
    ERR_clear_error();
    c->broken = true;
    return wk_werr(err, len,
                   "redis %s: TLS: the server's certificate is not trusted: %s (the CA is %s; "
                   "the name checked is %s)",
                   c->shown, X509_verify_cert_error_string(verify),
                   set(ca) ? ca : "the system's (set redis_tls_ca_file)", t->host);
  }
  return io_error(c, rc, saved, "TLS handshake: ", err, len);
}

/* AUTH and SELECT, as the address asks. */
static int handshake(wk_redis_conn *c, const wk_redis_target *t, char *err, size_t len) {
  if (t->has_password) {
    const char *argv[] = {"AUTH", t->user, t->password};
    const char *auth_argv[] = {"AUTH", t->password};
    redisReply *r = t->user[0] ? wk_redis_command(c, 3, argv, NULL, err, len)
                               : wk_redis_command(c, 2, auth_argv, NULL, err, len);
    if (!r) return -1;
    int rc = 0;
    if (r->type == REDIS_REPLY_ERROR)
      rc = wk_werr(err, len, "redis %s: AUTH%s%s: %s", c->shown, t->user[0] ? " as " : "", t->user,
                   r->str);
    freeReplyObject(r);
    if (rc) return rc;
  }
  if (t->db >= 0) {
    char db[16];
    snprintf(db, sizeof db, "%d", t->db);
    const char *argv[] = {"SELECT", db};
    redisReply *r = wk_redis_command(c, 2, argv, NULL, err, len);
    if (!r) return -1;
    int rc = 0;
    if (r->type == REDIS_REPLY_ERROR)
      rc = wk_werr(err, len, "redis %s: SELECT %d: %s", c->shown, t->db, r->str);
    freeReplyObject(r);
    if (rc) return rc;
  }
  return 0;
}

wk_redis_conn *wk_redis_connect(const wk_redis_target *t, const wk_redis_tls *tls,
                                uint32_t connect_ms, uint32_t io_ms, char *err, size_t len) {
  wk_redis_conn *c = wk_xcalloc(1, sizeof *c);
  snprintf(c->shown, sizeof c->shown, "%s", t->shown);
  c->io_ms = io_ms;
  c->ctx = redisConnectWithTimeout(t->host, t->port, tv_ms(connect_ms));
  if (!c->ctx) abort(); /* out of memory, as wk_x* do */
  if (c->ctx->err || redisSetTimeout(c->ctx, tv_ms(io_ms)) != REDIS_OK) {
    wk_werr(err, len, "redis %s: %s", c->shown,
            c->ctx->errstr[0] ? c->ctx->errstr : "cannot connect");
    wk_redis_close(c);
    return NULL;
  }
  c->reader = redisReaderCreate();
  if (!c->reader) abort(); /* out of memory, as wk_x* do */
  if ((t->tls && start_tls(c, t, tls, err, len) != 0) || handshake(c, t, err, len) != 0) {
    wk_redis_close(c);
    return NULL;
  }
  return c;
}

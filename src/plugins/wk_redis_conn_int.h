/* wk_redis_conn_int.h: a blocking connection to a Redis server, plain or TLS, for the redis
 * writer (src/plugins/wk_writer_redis.c).
 *
 * The address (redis_addr) is "host:port", "[v6addr]:port", or a URL
 * "redis://[[user]:password@]host:port[/db]" ("rediss://" for TLS). Userinfo without a
 * ':' is a password alone (as wk_mask_credentials reads it); user and password may be
 * percent-encoded. A password makes the connection send AUTH (AUTH user password with
 * a user: Redis 6 ACLs), a /db SELECT.
 *
 * Debian 12's hiredis (0.14) has no TLS. hiredis connects (name lookup, connect
 * timeout) and formats commands (redisFormatCommandArgv) and parses replies
 * (redisReader); the bytes go over the socket directly or through OpenSSL, which
 * verifies the server's certificate chain (against `ca_file`, else the system's CAs)
 * and its name (or IP address) against the host of the address.
 *
 * Every message names the server by wk_redis_target.shown: the password masked.
 * A connection belongs to one thread at a time. */
#ifndef WK_REDIS_CONN_INT_H
#define WK_REDIS_CONN_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <hiredis/hiredis.h>

typedef struct wk_redis_target {
  bool tls;
  char host[256];
  int port;
  char user[256];     /* "" = none (AUTH password: the default user) */
  char password[512]; /* valid when has_password */
  bool has_password;
  int db;          /* SELECT this after AUTH; -1 = none */
  char shown[640]; /* the address for messages, password masked */
} wk_redis_target;

/* TLS files (NULL or "" = unset): the CA for the server's certificate (unset = the
 * system's), and a client certificate and key for servers that require one. */
typedef struct wk_redis_tls {
  const char *ca_file;
  const char *cert_file;
  const char *key_file;
} wk_redis_tls;

typedef struct wk_redis_conn wk_redis_conn;

/** Parses a redis_addr (see above) into `t`. Returns 0, or -1 with a message in err that
 * never shows the password. */
int wk_redis_parse(const char *addr, wk_redis_target *t, char *err, size_t len);

/** Connects to `t` (connect_ms for the TCP connection, io_ms for each read and write,
 * the TLS handshake included), authenticates and selects the database. Returns the
 * connection (free with wk_redis_close), or NULL with a message in err. */
wk_redis_conn *wk_redis_connect(const wk_redis_target *t, const wk_redis_tls *tls,
                                uint32_t connect_ms, uint32_t io_ms, char *err, size_t len);

/** Appends a command to the connection's output buffer (sent by wk_redis_flush). */
void wk_redis_append(wk_redis_conn *c, int argc, const char **argv, const size_t *argl);

/** Sends the buffered commands. Returns 0, or -1 with a message prefixed by `what`. */
int wk_redis_flush(wk_redis_conn *c, const char *what, char *err, size_t len);

/** Reads the next reply (free with freeReplyObject). Returns it, or NULL with a message
 * prefixed by `what` (the connection is then unusable). */
redisReply *wk_redis_reply(wk_redis_conn *c, const char *what, char *err, size_t len);

/** Sends one command and reads its reply: wk_redis_append, flush and reply. */
redisReply *wk_redis_command(wk_redis_conn *c, int argc, const char **argv, const size_t *argl,
                             char *err, size_t len);

/** The server as shown in messages (password masked). */
const char *wk_redis_shown(const wk_redis_conn *c);

/** Closes and frees (NULL is fine). */
void wk_redis_close(wk_redis_conn *c);

#endif

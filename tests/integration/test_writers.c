/* Integration: the writer plugins (src/plugins/wk_writers.h) against a real directory,
 * a real redis-server and a real PostgreSQL.
 *
 * The group setup starts redis-server (--port N --save '' --appendonly no) and a
 * PostgreSQL cluster (initdb -A trust into a temporary directory, then postgres -D dir
 * -k dir -p N -c listen_addresses=127.0.0.1) on free loopback ports; as root, both
 * PostgreSQL programs run as "nobody" (it refuses root) in a directory owned by that
 * user. The group teardown stops both and removes the directories. WK_TEST_REDIS
 * overrides the redis-server binary, WK_TEST_PG_BIN the PostgreSQL bin directory
 * (else the newest /usr/lib/postgresql/N/bin); WK_TEST_KEEP=1 keeps the directories
 * (redis.log, pg.log tell what the servers saw). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <glob.h>
#include <grp.h>
#include <netinet/in.h>
#include <pthread.h>
#include <pwd.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <hiredis/hiredis.h>
#include <jansson.h>
#include <libpq-fe.h>

#include "plugins/wk_writers.h"
#include "plugins/wk_redis_conn_int.h"
#include "plugins/wk_writers_int.h"
#include "worker/v1/worker.pb-c.h"

/* ---- small helpers ------------------------------------------------------------------ */

static void sleep_ms(long ms) {
  struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

static int64_t mono_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int free_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  assert_true(fd >= 0);
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = 0};
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof sa), 0);
  socklen_t sl = sizeof sa;
  assert_int_equal(getsockname(fd, (struct sockaddr *)&sa, &sl), 0);
  close(fd);
  return ntohs(sa.sin_port);
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb, (void)flag, (void)ftw;
  remove(path);
  return 0;
}

static void rm_tree(const char *path) {
  const char *keep = getenv("WK_TEST_KEEP");
  if (keep && strcmp(keep, "1") == 0) {
    fprintf(stderr, "kept %s\n", path);
    return;
  }
  nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static char *read_file(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  wk_buf b = {0};
  char tmp[65536];
  size_t r;
  while ((r = fread(tmp, 1, sizeof tmp, f)) > 0) wk_buf_append(&b, tmp, r);
  fclose(f);
  wk_buf_append(&b, "", 1);
  *n = b.len - 1;
  return (char *)b.data;
}

/* ---- building outputs --------------------------------------------------------------- */

/* Appends one CallOutput as a TaskResult field-7 record. */
static void put_output(wk_buf *blob, const Worker__V1__CallOutput *o) {
  size_t n = worker__v1__call_output__get_packed_size(o);
  uint8_t *tmp = malloc(n ? n : 1);
  assert_non_null(tmp);
  assert_int_equal(worker__v1__call_output__pack(o, tmp), n);
  wk_buf_append_varint(blob, 7u << 3 | 2u);
  wk_buf_append_varint(blob, n);
  wk_buf_append(blob, tmp, n);
  free(tmp);
}

static void put_json_output(wk_buf *blob, uint32_t index, const char *json) {
  Worker__V1__CallOutput o = WORKER__V1__CALL_OUTPUT__INIT;
  o.index = index;
  o.outcome_case = WORKER__V1__CALL_OUTPUT__OUTCOME_VALUE;
  o.value.data = (uint8_t *)(uintptr_t)json;
  o.value.len = strlen(json);
  o.content_type = WORKER__V1__CONTENT_TYPE__CONTENT_TYPE_JSON;
  put_output(blob, &o);
}

static void put_bytes_output(wk_buf *blob, uint32_t index, const uint8_t *p, size_t n) {
  Worker__V1__CallOutput o = WORKER__V1__CALL_OUTPUT__INIT;
  o.index = index;
  o.outcome_case = WORKER__V1__CALL_OUTPUT__OUTCOME_VALUE;
  o.value.data = (uint8_t *)(uintptr_t)p;
  o.value.len = n;
  o.content_type = WORKER__V1__CONTENT_TYPE__CONTENT_TYPE_BYTES;
  put_output(blob, &o);
}

static void put_error_output(wk_buf *blob, uint32_t index, const char *type, const char *msg) {
  Worker__V1__CallError e;
  worker__v1__call_error__init(&e); /* (the INIT macro casts const away) */
  e.type = (char *)(uintptr_t)type;
  e.message = (char *)(uintptr_t)msg;
  e.traceback = (char *)(uintptr_t) "Traceback...";
  Worker__V1__CallOutput o = WORKER__V1__CALL_OUTPUT__INIT;
  o.index = index;
  o.outcome_case = WORKER__V1__CALL_OUTPUT__OUTCOME_ERROR;
  o.error = &e;
  put_output(blob, &o);
}

/* The mixed outputs most tests write, and the records every writer must produce. */
#define MIXED_N 6
static void mixed_outputs(wk_buf *blob) {
  put_json_output(blob, 0,
                  "{\n  \"a\": 0.1,\n  \"big\": 12345678901234567890,\n  \"s\": \"x y\\n\"\n}");
  static const uint8_t raw[] = {0x00, 0xff, 0x10, 'h', 'i'};
  put_bytes_output(blob, 1, raw, sizeof raw);
  put_error_output(blob, 2, "ValueError", "bad \"input\"\nline two");
  put_json_output(blob, 3, "[1, 2, 3]");
  put_json_output(blob, 4, "not json{"); /* tagged JSON but is not: written as bytes */
  Worker__V1__CallOutput none = WORKER__V1__CALL_OUTPUT__INIT;
  none.index = 5;
  put_output(blob, &none); /* no outcome: null */
}

static const char *mixed_expected(const char *task_id, int i, char *buf, size_t n) {
  static const char *tmpl[MIXED_N] = {
      "{\"task_id\":\"@\",\"index\":0,\"ok\":true,\"value\":{\"a\":0.1,\"big\":12345678901234567890,\"s\":\"x y\\n\"},\"content_type\":\"json\"}",
      "{\"task_id\":\"@\",\"index\":1,\"ok\":true,\"value\":\"AP8QaGk=\",\"content_type\":\"bytes\"}",
      "{\"task_id\":\"@\",\"index\":2,\"ok\":false,\"error\":{\"type\":\"ValueError\",\"message\":\"bad \\\"input\\\"\\nline two\"}}",
      "{\"task_id\":\"@\",\"index\":3,\"ok\":true,\"value\":[1,2,3],\"content_type\":\"json\"}",
      "{\"task_id\":\"@\",\"index\":4,\"ok\":true,\"value\":\"bm90IGpzb257\",\"content_type\":\"bytes\"}",
      "{\"task_id\":\"@\",\"index\":5,\"ok\":true,\"value\":null,\"content_type\":\"json\"}",
  };
  /* The template with its one '@' replaced by task_id (already JSON-escaped). */
  const char *at = strchr(tmpl[i], '@');
  snprintf(buf, n, "%.*s%s%s", (int)(at - tmpl[i]), tmpl[i], task_id, at + 1);
  return buf;
}

/* Many small JSON outputs: {"i":k}. */
static void counted_outputs(wk_buf *blob, uint32_t n) {
  for (uint32_t i = 0; i < n; i++) {
    char v[32];
    snprintf(v, sizeof v, "{\"i\": %u}", i);
    put_json_output(blob, i, v);
  }
}

static wk_writer_task make_task(const wk_writer_settings *s, const char *id, const wk_buf *blob,
                                const wk_writer_option *opts, size_t n_opts) {
  return (wk_writer_task){.settings = s,
                          .task_id = id,
                          .function = "fn",
                          .epoch = 7,
                          .options = opts,
                          .n_options = n_opts,
                          .outputs = blob->data,
                          .outputs_len = blob->len};
}

/* Decodes the single PluginResult record in buf (TaskResult field 8). */
static Worker__V1__PluginResult *one_plugin_result(const wk_buf *buf) {
  assert_true(buf->len > 2);
  assert_int_equal(buf->data[0], 8u << 3 | 2u);
  const uint8_t *p = buf->data + 1;
  uint64_t n = 0;
  unsigned shift = 0;
  while (*p & 0x80) n |= (uint64_t)(*p++ & 0x7f) << shift, shift += 7;
  n |= (uint64_t)(*p++) << shift;
  assert_int_equal((size_t)(p - buf->data) + n, buf->len);
  Worker__V1__PluginResult *r = worker__v1__plugin_result__unpack(NULL, (size_t)n, p);
  assert_non_null(r);
  return r;
}

static void check_plugin_result(const wk_buf *buf, const char *plugin, const char *location,
                                uint64_t records, uint64_t bytes) {
  Worker__V1__PluginResult *r = one_plugin_result(buf);
  assert_string_equal(r->plugin, plugin);
  assert_string_equal(r->location, location);
  assert_int_equal(r->records, records);
  if (bytes) assert_int_equal(r->bytes, bytes);
  worker__v1__plugin_result__free_unpacked(r, NULL);
}

/* Whether two JSON texts hold equal values (jsonb normalises spacing and key order). */
static bool json_same(const char *a, const char *b) {
  json_error_t e;
  json_t *x = json_loads(a, JSON_DECODE_ANY | JSON_DECODE_INT_AS_REAL, &e);
  json_t *y = json_loads(b, JSON_DECODE_ANY | JSON_DECODE_INT_AS_REAL, &e);
  bool same = x && y && json_equal(x, y);
  if (!same) fprintf(stderr, "json differs:\n  %s\n  %s\n", a, b);
  json_decref(x);
  json_decref(y);
  return same;
}

/* ---- servers --------------------------------------------------------------------------- */

typedef struct servers {
  char dir[128]; /* root of everything: redis/, pg/ */
  pid_t redis_pid;
  int redis_port;
  char redis_addr[64];
  pid_t pg_pid;
  int pg_port;
  char pg_dsn[256];
  uid_t run_uid; /* PostgreSQL's user (nobody when we are root) */
  gid_t run_gid;
  wk_writer_settings settings;
} servers;

static servers S;

/* Child: drop to run_uid if root, set the death signal, redirect output, exec. */
static void exec_child(const char *log, bool drop, const char *const argv[]) {
  if (drop && geteuid() == 0) {
    if (setgroups(0, NULL) != 0 || setgid(S.run_gid) != 0 || setuid(S.run_uid) != 0) _exit(126);
  }
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  int fd = open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd >= 0) {
    dup2(fd, 1);
    dup2(fd, 2);
  }
  execv(argv[0], (char *const *)(uintptr_t)argv);
  _exit(127);
}

static pid_t spawn(const char *log, bool drop, const char *const argv[]) {
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) exec_child(log, drop, argv);
  return pid;
}

static void stop_pid(pid_t *pid, int sig) {
  if (*pid <= 0) return;
  kill(*pid, sig);
  int64_t t0 = mono_ms();
  while (waitpid(*pid, NULL, WNOHANG) == 0) {
    if (mono_ms() - t0 > 10000) {
      kill(*pid, SIGKILL);
      waitpid(*pid, NULL, 0);
      break;
    }
    sleep_ms(20);
  }
  *pid = 0;
}

static const char *redis_binary(void) {
  const char *b = getenv("WK_TEST_REDIS");
  return b && *b ? b : "/usr/bin/redis-server";
}

static void pg_bindir(char *out, size_t n) {
  const char *b = getenv("WK_TEST_PG_BIN");
  if (b && *b) {
    snprintf(out, n, "%s", b);
    return;
  }
  glob_t g;
  out[0] = '\0';
  if (glob("/usr/lib/postgresql/*/bin/postgres", 0, NULL, &g) == 0 && g.gl_pathc > 0) {
    /* The newest major version (compare numerically: 9 < 15). */
    long best = -1;
    for (size_t i = 0; i < g.gl_pathc; i++) {
      long v = strtol(g.gl_pathv[i] + strlen("/usr/lib/postgresql/"), NULL, 10);
      if (v > best) {
        best = v;
        snprintf(out, n, "%.*s", (int)(strlen(g.gl_pathv[i]) - strlen("/postgres")), g.gl_pathv[i]);
      }
    }
  }
  globfree(&g);
}

static int start_redis(void) {
  char dir[200], log[240], port[16];
  snprintf(dir, sizeof dir, "%s/redis", S.dir);
  snprintf(log, sizeof log, "%s/redis.log", dir);
  if (mkdir(dir, 0755) != 0) return -1;
  S.redis_port = free_port();
  snprintf(port, sizeof port, "%d", S.redis_port);
  snprintf(S.redis_addr, sizeof S.redis_addr, "127.0.0.1:%d", S.redis_port);
  const char *argv[] = {redis_binary(), "--port", port,    "--bind", "127.0.0.1", "--save", "",
                        "--appendonly", "no",     "--dir", dir,      NULL};
  if (access(argv[0], X_OK) != 0) {
    fprintf(stderr, "no %s (scripts/deps.sh installs redis-server)\n", argv[0]);
    return -1;
  }
  S.redis_pid = spawn(log, false, argv);
  for (int64_t t0 = mono_ms(); mono_ms() - t0 < 20000; sleep_ms(20)) {
    redisContext *c = redisConnect("127.0.0.1", S.redis_port);
    bool up = false;
    if (c && !c->err) {
      redisReply *r = redisCommand(c, "PING");
      up = r && r->type == REDIS_REPLY_STATUS;
      if (r) freeReplyObject(r);
    }
    if (c) redisFree(c);
    if (up) return 0;
  }
  fprintf(stderr, "redis-server did not start: see %s\n", log);
  return -1;
}

static int start_postgres(void) {
  char bin[200], initdb[240], postgres[240], dir[200], data[240], log[240];
  pg_bindir(bin, sizeof bin);
  snprintf(initdb, sizeof initdb, "%s/initdb", bin);
  snprintf(postgres, sizeof postgres, "%s/postgres", bin);
  if (!bin[0] || access(initdb, X_OK) != 0 || access(postgres, X_OK) != 0) {
    fprintf(stderr, "no PostgreSQL server programs in '%s' (scripts/deps.sh installs postgresql)\n",
            bin);
    return -1;
  }
  snprintf(dir, sizeof dir, "%s/pg", S.dir);
  snprintf(data, sizeof data, "%s/data", dir);
  snprintf(log, sizeof log, "%s/pg.log", dir);
  if (mkdir(dir, 0700) != 0) return -1;
  S.run_uid = geteuid();
  S.run_gid = getegid();
  if (geteuid() == 0) {
    struct passwd *pw = getpwnam("nobody");
    if (!pw) {
      fprintf(stderr, "running as root and there is no user 'nobody' to run PostgreSQL as\n");
      return -1;
    }
    S.run_uid = pw->pw_uid;
    S.run_gid = pw->pw_gid;
    if (chown(dir, S.run_uid, S.run_gid) != 0) return -1;
    chmod(S.dir, 0755); /* let nobody reach pg/ */
  }
  const char *iargv[] = {initdb,     "-D",          data, "-A",   "trust",     "-U",
                         "postgres", "--no-locale", "-E", "UTF8", "--no-sync", NULL};
  pid_t ip = spawn(log, true, iargv);
  int st = 0;
  waitpid(ip, &st, 0);
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
    fprintf(stderr, "initdb failed: see %s\n", log);
    return -1;
  }
  S.pg_port = free_port();
  char port[16];
  snprintf(port, sizeof port, "%d", S.pg_port);
  const char *pargv[] = {postgres,
                         "-D",
                         data,
                         "-k",
                         dir,
                         "-p",
                         port,
                         "-c",
                         "listen_addresses=127.0.0.1",
                         "-c",
                         "fsync=off",
                         "-c",
                         "synchronous_commit=off",
                         "-c",
                         "full_page_writes=off",
                         "-c",
                         "max_connections=60",
                         NULL};
  S.pg_pid = spawn(log, true, pargv);
  snprintf(S.pg_dsn, sizeof S.pg_dsn, "host=127.0.0.1 port=%d user=postgres dbname=postgres",
           S.pg_port);
  char ping[300];
  snprintf(ping, sizeof ping, "%s connect_timeout=2", S.pg_dsn);
  for (int64_t t0 = mono_ms(); mono_ms() - t0 < 60000; sleep_ms(50)) {
    if (PQping(ping) == PQPING_OK) return 0;
    if (waitpid(S.pg_pid, &st, WNOHANG) == S.pg_pid) {
      S.pg_pid = 0;
      break;
    }
  }
  fprintf(stderr, "postgres did not start: see %s\n", log);
  return -1;
}

static int group_setup(void **state) {
  (void)state;
  memset(&S, 0, sizeof S);
  snprintf(S.dir, sizeof S.dir, "/tmp/wk-writers-test-XXXXXX");
  if (!mkdtemp(S.dir)) return -1;
  if (start_redis() != 0 || start_postgres() != 0) return -1;
  S.settings = (wk_writer_settings){.redis_addr = S.redis_addr, .postgres_dsn = S.pg_dsn};
  return 0;
}

static int group_teardown(void **state) {
  (void)state;
  stop_pid(&S.redis_pid, SIGTERM);
  stop_pid(&S.pg_pid, SIGINT); /* PostgreSQL's fast shutdown */
  rm_tree(S.dir);
  return 0;
}

/* A fresh, empty output directory per test. */
static char out_dir[256];
static int dir_setup(void **state) {
  (void)state;
  snprintf(out_dir, sizeof out_dir, "%s/out-XXXXXX", S.dir);
  return mkdtemp(out_dir) ? 0 : -1;
}
static int dir_teardown(void **state) {
  (void)state;
  rm_tree(out_dir);
  return 0;
}

/* Names in out_dir, sorted, joined by ','. */
static void list_dir(const char *dir, char *out, size_t n) {
  struct dirent **ents;
  int k = scandir(dir, &ents, NULL, alphasort);
  assert_true(k >= 0);
  out[0] = '\0';
  for (int i = 0; i < k; i++) {
    if (strcmp(ents[i]->d_name, ".") != 0 && strcmp(ents[i]->d_name, "..") != 0) {
      if (out[0]) strncat(out, ",", n - strlen(out) - 1);
      strncat(out, ents[i]->d_name, n - strlen(out) - 1);
    }
    free(ents[i]);
  }
  free(ents);
}

/* ---- registry and shared pieces ------------------------------------------------------- */

static void test_registry(void **state) {
  (void)state;
  const char *names[] = {"file", "redis", "postgres"};
  for (size_t i = 0; i < 3; i++) {
    const wk_writer *w = wk_writer_find(names[i]);
    assert_non_null(w);
    assert_string_equal(w->name, names[i]);
    assert_non_null(w->validate);
    assert_non_null(w->check_options);
    assert_non_null(w->write);
  }
  assert_null(wk_writer_find("s3"));
  assert_null(wk_writer_find(""));
  assert_null(wk_writer_find(NULL));
  assert_string_equal(wk_writer_names(), "file, redis, postgres");

  char err[256];
  wk_writer_option unknown[] = {{"tabel", "x"}};
  assert_int_equal(wk_writer_find("postgres")->check_options(unknown, 1, err, sizeof err), -1);
  assert_string_equal(err, "postgres: unknown option 'tabel' (known: table)");
  wk_writer_option good[] = {{"table", "myschema.My_Table2"}};
  assert_int_equal(wk_writer_find("postgres")->check_options(good, 1, err, sizeof err), 0);
  const char *bad_tables[] = {
      "",   "1abc", "a-b",  "a.b.c",
      "a.", ".a",   "x\"y", "a234567890123456789012345678901234567890123456789012345678901234"};
  for (size_t i = 0; i < sizeof bad_tables / sizeof bad_tables[0]; i++) {
    wk_writer_option o[] = {{"table", bad_tables[i]}};
    assert_int_equal(wk_writer_find("postgres")->check_options(o, 1, err, sizeof err), -1);
  }
  wk_writer_option empty_stream[] = {{"stream", ""}};
  assert_int_equal(wk_writer_find("redis")->check_options(empty_stream, 1, err, sizeof err), -1);
  const char *bad_names[] = {"", ".hidden", "a/b", "../x", "a\nb"};
  for (size_t i = 0; i < sizeof bad_names / sizeof bad_names[0]; i++) {
    wk_writer_option o[] = {{"name", bad_names[i]}};
    assert_int_equal(wk_writer_find("file")->check_options(o, 1, err, sizeof err), -1);
  }
  wk_writer_task t = {.options = good, .n_options = 1};
  assert_string_equal(wk_writer_task_option(&t, "table"), "myschema.My_Table2");
  assert_null(wk_writer_task_option(&t, "stream"));
}

static void test_json_pieces(void **state) {
  (void)state;
  wk_buf b = {0};
  /* Escapes, control characters, valid UTF-8 kept, invalid bytes -> U+FFFD. */
  const char in[] =
      "a\"\\\n\t\x01\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80|\xff|\xc0\xaf|\xed\xa0\x80|\xe2\x82";
  wk_json_put_string(&b, in, sizeof in - 1);
  wk_buf_append(&b, "", 1);
  assert_string_equal(
      (char *)b.data,
      "\"a\\\"\\\\\\n\\t\\u0001\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80|\xef\xbf\xbd|"
      "\xef\xbf\xbd\xef\xbf\xbd|\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd|\xef\xbf\xbd\xef\xbf\xbd\"");
  json_error_t e;
  json_t *v = json_loads((char *)b.data, JSON_DECODE_ANY, &e);
  assert_non_null(v);
  json_decref(v);
  /* RFC 4648 test vectors. */
  const char *plain[] = {"", "f", "fo", "foo", "foob", "fooba", "foobar"};
  const char *enc[] = {"", "Zg==", "Zm8=", "Zm9v", "Zm9vYg==", "Zm9vYmE=", "Zm9vYmFy"};
  for (size_t i = 0; i < 7; i++) {
    wk_buf_clear(&b);
    wk_put_base64(&b, (const uint8_t *)plain[i], strlen(plain[i]));
    wk_buf_append(&b, "", 1);
    assert_string_equal((char *)b.data, enc[i]);
  }
  /* One line out of a multi-line backend message. */
  char err[64];
  assert_int_equal(wk_werr(err, sizeof err, "x: %s", "ERROR:  bad\n\tDETAIL: y\n"), -1);
  assert_string_equal(err, "x: ERROR:  bad DETAIL: y");
  wk_buf_free(&b);
}

/* The iterator's records for the mixed outputs, and a malformed blob. */
static void test_records(void **state) {
  (void)state;
  wk_buf blob = {0}, rec = {0};
  mixed_outputs(&blob);
  wk_buf_append(&blob, "\x08\x05", 2); /* a varint field 1: skipped */
  wk_writer_task t = make_task(&S.settings, "t-rec", &blob, NULL, 0);
  wk_output_iter it;
  wk_output_iter_init(&it, &t);
  char err[256], want[512];
  uint32_t index;
  for (int i = 0; i < MIXED_N; i++) {
    assert_int_equal(wk_output_iter_next(&it, &rec, &index, err, sizeof err), 1);
    assert_int_equal(index, (uint32_t)i);
    wk_buf_append(&rec, "", 1);
    assert_string_equal((char *)rec.data, mixed_expected("t-rec", i, want, sizeof want));
  }
  assert_int_equal(wk_output_iter_next(&it, &rec, &index, err, sizeof err), 0);

  /* Truncated: the last record's length runs past the end. */
  blob.len -= 4;
  t = make_task(&S.settings, "t-rec", &blob, NULL, 0);
  wk_output_iter_init(&it, &t);
  int rc;
  int n = 0;
  while ((rc = wk_output_iter_next(&it, &rec, &index, err, sizeof err)) == 1) n++;
  assert_int_equal(rc, -1);
  assert_int_equal(n, MIXED_N - 1);
  assert_string_equal(err, "outputs: malformed record after output 5");
  wk_buf_free(&blob);
  wk_buf_free(&rec);
}

/* ---- file ----------------------------------------------------------------------------- */

static const wk_writer *W(const char *name) {
  const wk_writer *w = wk_writer_find(name);
  assert_non_null(w);
  return w;
}

static void test_file_writes_in_order(void **state) {
  (void)state;
  wk_writer_settings s = {.output_dir = out_dir};
  char err[256] = "";
  assert_int_equal(W("file")->validate(&s, err, sizeof err), 0);
  wk_buf blob = {0}, pr = {0};
  mixed_outputs(&blob);
  wk_writer_task t = make_task(&s, "job/42", &blob, NULL, 0);
  assert_int_equal(W("file")->write(W("file"), &t, &pr, err, sizeof err), 0);

  char path[400], names[400], want[512];
  snprintf(path, sizeof path, "%s/job%%2F42.jsonl", out_dir);
  list_dir(out_dir, names, sizeof names);
  assert_string_equal(names, "job%2F42.jsonl"); /* nothing else: no temporary, no probe */
  size_t n;
  char *text = read_file(path, &n);
  assert_non_null(text);
  struct stat st;
  assert_int_equal(stat(path, &st), 0);
  assert_int_equal(st.st_mode & 0777, 0644);
  char *line = text;
  uint64_t bytes = 0;
  for (int i = 0; i < MIXED_N; i++) {
    char *nl = strchr(line, '\n');
    assert_non_null(nl);
    *nl = '\0';
    assert_string_equal(line, mixed_expected("job/42", i, want, sizeof want));
    bytes += strlen(line);
    line = nl + 1;
  }
  assert_string_equal(line, ""); /* ends with the last newline */
  check_plugin_result(&pr, "file", path, MIXED_N, bytes);
  free(text);

  /* The "name" option; zero outputs make an empty file; a second write to the same
   * name is refused and leaves the first file as it was. */
  wk_writer_option opt[] = {{"name", "custom.out"}};
  wk_buf empty = {0};
  t = make_task(&s, "job/42", &empty, opt, 1);
  wk_buf_clear(&pr);
  assert_int_equal(W("file")->write(W("file"), &t, &pr, err, sizeof err), 0);
  size_t one_result = pr.len;
  assert_true(one_result > 0);
  t = make_task(&s, "job/43", &blob, opt, 1);
  assert_int_equal(W("file")->write(W("file"), &t, &pr, err, sizeof err), -1);
  snprintf(path, sizeof path, "%s/custom.out", out_dir);
  char refused[1024];
  snprintf(refused, sizeof refused,
           "file %s exists already: the writer never replaces a file (another task's output, "
           "or an earlier run of this task id); remove it or choose another name",
           path);
  assert_string_equal(err, refused);
  assert_int_equal(pr.len, one_result);
  assert_int_equal(stat(path, &st), 0);
  assert_int_equal(st.st_size, 0);
  list_dir(out_dir, names, sizeof names);
  assert_string_equal(names, "custom.out,job%2F42.jsonl");

  wk_buf_free(&blob);
  wk_buf_free(&pr);
}

/* File names are a reversible encoding of the task id: ids that the old '/' → '_'
 * mapping merged get files of their own, and no write replaces another's file. */
static void test_file_names_encode_the_task_id(void **state) {
  (void)state;
  wk_writer_settings s = {.output_dir = out_dir};
  char err[256] = "", names[600];
  wk_buf pr = {0};
  const char *ids[] = {"team/a", "team_a", "team%2Fa", ".hidden", "..", "a.b/c%"};
  wk_buf blobs[6] = {0};
  for (int i = 0; i < 6; i++) {
    counted_outputs(&blobs[i], (uint32_t)i + 1);
    wk_writer_task t = make_task(&s, ids[i], &blobs[i], NULL, 0);
    assert_int_equal(W("file")->write(W("file"), &t, &pr, err, sizeof err), 0);
  }
  list_dir(out_dir, names, sizeof names);
  assert_string_equal(names,
                      "%2E..jsonl,%2Ehidden.jsonl,a.b%2Fc%25.jsonl,team%252Fa.jsonl,"
                      "team%2Fa.jsonl,team_a.jsonl");
  /* each file holds its own task's outputs: i + 1 lines */
  const char *files[] = {"team%2Fa.jsonl", "team_a.jsonl", "team%252Fa.jsonl"};
  for (int i = 0; i < 3; i++) {
    char path[400];
    snprintf(path, sizeof path, "%s/%s", out_dir, files[i]);
    size_t n, lines = 0;
    char *text = read_file(path, &n);
    assert_non_null(text);
    for (size_t k = 0; k < n; k++) lines += text[k] == '\n';
    assert_int_equal(lines, (size_t)i + 1);
    free(text);
  }
  /* a name option naming another task's file is refused; that file is kept */
  wk_writer_option opt[] = {{"name", "team_a.jsonl"}};
  wk_writer_task t = make_task(&s, "intruder", &blobs[5], opt, 1);
  assert_int_equal(W("file")->write(W("file"), &t, &pr, err, sizeof err), -1);
  assert_non_null(strstr(err, "team_a.jsonl exists already"));
  char path[400];
  snprintf(path, sizeof path, "%s/team_a.jsonl", out_dir);
  size_t n, lines = 0;
  char *text = read_file(path, &n);
  for (size_t k = 0; k < n; k++) lines += text[k] == '\n';
  assert_int_equal(lines, 2);
  free(text);
  /* an id too long for a file name once encoded: a message naming the option */
  char longid[129];
  memset(longid, '/', 128);
  longid[128] = '\0';
  t = make_task(&s, longid, &blobs[0], NULL, 0);
  assert_int_equal(W("file")->write(W("file"), &t, &pr, err, sizeof err), -1);
  assert_non_null(strstr(err, "give the task the result_handler option name"));
  list_dir(out_dir, names, sizeof names);
  assert_null(strstr(names, "tmp"));
  for (int i = 0; i < 6; i++) wk_buf_free(&blobs[i]);
  wk_buf_free(&pr);
}

/* A failing write leaves nothing behind and leaves plugin_results as it was. */
static void test_file_failure_leaves_nothing(void **state) {
  (void)state;
  wk_writer_settings s = {.output_dir = out_dir};
  char err[256] = "", names[400];
  wk_buf blob = {0}, pr = {0};
  wk_buf_append(&pr, "keep", 4);
  counted_outputs(&blob, 50);
  blob.len -= 3; /* truncated last record */
  wk_writer_task t = make_task(&s, "broken", &blob, NULL, 0);
  assert_int_equal(W("file")->write(W("file"), &t, &pr, err, sizeof err), -1);
  assert_string_equal(err, "outputs: malformed record after output 49");
  list_dir(out_dir, names, sizeof names);
  assert_string_equal(names, "");
  assert_int_equal(pr.len, 4);

  /* The final name is taken by a directory: the move fails, the temporary goes. */
  blob.len = 0;
  counted_outputs(&blob, 3);
  char path[400];
  snprintf(path, sizeof path, "%s/occupied.jsonl", out_dir);
  assert_int_equal(mkdir(path, 0755), 0);
  t = make_task(&s, "occupied", &blob, NULL, 0);
  assert_int_equal(W("file")->write(W("file"), &t, &pr, err, sizeof err), -1);
  char want[500];
  snprintf(want, sizeof want, "file %s exists already: the writer never replaces", path);
  assert_non_null(strstr(err, want));
  list_dir(out_dir, names, sizeof names);
  assert_string_equal(names, "occupied.jsonl");
  assert_int_equal(pr.len, 4);

  /* A bad option fails before anything is created. */
  wk_writer_option opt[] = {{"name", "../escape"}};
  t = make_task(&s, "x", &blob, opt, 1);
  assert_int_equal(W("file")->write(W("file"), &t, &pr, err, sizeof err), -1);
  list_dir(out_dir, names, sizeof names);
  assert_string_equal(names, "occupied.jsonl");

  /* The directory went away after validation. */
  char gone[300];
  snprintf(gone, sizeof gone, "%s/gone", out_dir);
  wk_writer_settings s2 = {.output_dir = gone};
  t = make_task(&s2, "x", &blob, NULL, 0);
  assert_int_equal(W("file")->write(W("file"), &t, &pr, err, sizeof err), -1);
  assert_non_null(strstr(err, "No such file or directory"));
  assert_int_equal(pr.len, 4);
  wk_buf_free(&blob);
  wk_buf_free(&pr);
}

/* A reader polling the directory while big files are written and removed: whenever
 * the final name exists it holds a complete file; the temporary has another name. */
typedef struct watch {
  atomic_bool stop;
  atomic_int saw_tmp, saw_final, saw_partial;
  size_t want_lines;
} watch;

static void *watcher(void *arg) {
  watch *wt = arg;
  char path[400];
  snprintf(path, sizeof path, "%s/big.jsonl", out_dir);
  while (!atomic_load(&wt->stop)) {
    DIR *d = opendir(out_dir);
    if (!d) continue;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
      if (strncmp(e->d_name, ".big.jsonl.tmp-", 15) == 0) atomic_fetch_add(&wt->saw_tmp, 1);
    }
    closedir(d);
    size_t n;
    char *text = read_file(path, &n);
    if (text) {
      size_t lines = 0;
      for (size_t i = 0; i < n; i++) lines += text[i] == '\n';
      if (lines != wt->want_lines || n == 0 || text[n - 1] != '\n')
        atomic_fetch_add(&wt->saw_partial, 1);
      atomic_fetch_add(&wt->saw_final, 1);
      free(text);
    }
  }
  return NULL;
}

static void test_file_never_half_visible(void **state) {
  (void)state;
  wk_writer_settings s = {.output_dir = out_dir};
  enum { N = 2000 };
  static uint8_t val[3000];
  for (size_t i = 0; i < sizeof val; i++) val[i] = (uint8_t)(i * 31);
  wk_buf blob = {0}, pr = {0};
  for (uint32_t i = 0; i < N; i++) put_bytes_output(&blob, i, val, sizeof val);
  wk_writer_option opt[] = {{"name", "big.jsonl"}};
  wk_writer_task t = make_task(&s, "big", &blob, opt, 1);
  watch wt = {.want_lines = N};
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, watcher, &wt), 0);
  char err[256];
  int writes = 0;
  while (writes < 60 &&
         (writes < 4 || atomic_load(&wt.saw_tmp) == 0 || atomic_load(&wt.saw_final) < 3)) {
    wk_buf_clear(&pr);
    if (writes > 0) { /* the writer never replaces a file: make room for the next */
      char big[400];
      snprintf(big, sizeof big, "%s/big.jsonl", out_dir);
      assert_int_equal(unlink(big), 0);
    }
    assert_int_equal(W("file")->write(W("file"), &t, &pr, err, sizeof err), 0);
    writes++;
  }
  atomic_store(&wt.stop, true);
  pthread_join(th, NULL);
  struct stat st;
  char path[400];
  snprintf(path, sizeof path, "%s/big.jsonl", out_dir);
  assert_int_equal(stat(path, &st), 0);
  fprintf(
      stderr,
      "  %d writes of %lld bytes: the reader saw the temporary %d times, the final file %d times\n",
      writes, (long long)st.st_size, atomic_load(&wt.saw_tmp), atomic_load(&wt.saw_final));
  assert_int_equal(atomic_load(&wt.saw_partial), 0);
  assert_true(atomic_load(&wt.saw_tmp) > 0);
  assert_true(atomic_load(&wt.saw_final) > 0);
  char names[400];
  list_dir(out_dir, names, sizeof names);
  assert_string_equal(names, "big.jsonl");
  wk_buf_free(&blob);
  wk_buf_free(&pr);
}

static void test_file_validate(void **state) {
  (void)state;
  char err[256], path[400], want[500];
  wk_writer_settings s = {0};
  assert_int_equal(W("file")->validate(&s, err, sizeof err), -1);
  assert_string_equal(err, "file: output_dir is not set");
  snprintf(path, sizeof path, "%s/missing", out_dir);
  s.output_dir = path;
  assert_int_equal(W("file")->validate(&s, err, sizeof err), -1);
  snprintf(want, sizeof want, "file: output_dir %s: No such file or directory", path);
  assert_string_equal(err, want);
  snprintf(path, sizeof path, "%s/plain", out_dir);
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fclose(f);
  assert_int_equal(W("file")->validate(&s, err, sizeof err), -1);
  snprintf(want, sizeof want, "file: output_dir %s: not a directory", path);
  assert_string_equal(err, want);

  /* Not writable: root writes anywhere, so as root the check runs as nobody. */
  snprintf(path, sizeof path, "%s/ro", out_dir);
  assert_int_equal(mkdir(path, 0755), 0);
  assert_int_equal(chmod(out_dir, 0755), 0); /* nobody may look inside */
  if (geteuid() != 0) assert_int_equal(chmod(path, 0555), 0);
  int pipefd[2];
  assert_int_equal(pipe(pipefd), 0);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    if (geteuid() == 0 &&
        (setgroups(0, NULL) != 0 || setgid(S.run_gid) != 0 || setuid(S.run_uid) != 0))
      _exit(3);
    char e[256] = "";
    int rc = W("file")->validate(&s, e, sizeof e);
    ssize_t wr = write(pipefd[1], e, strlen(e) + 1);
    _exit(rc == -1 && wr > 0 ? 0 : 1);
  }
  close(pipefd[1]);
  char child_err[256] = "";
  ssize_t got = read(pipefd[0], child_err, sizeof child_err - 1);
  close(pipefd[0]);
  int st;
  waitpid(pid, &st, 0);
  assert_true(WIFEXITED(st));
  assert_int_equal(WEXITSTATUS(st), 0);
  assert_true(got > 0);
  snprintf(want, sizeof want, "file: output_dir %s is not writable: Permission denied", path);
  assert_string_equal(child_err, want);
  chmod(path, 0755);
  s.output_dir = out_dir;
  assert_int_equal(W("file")->validate(&s, err, sizeof err), 0);
  list_dir(out_dir, want, sizeof want);
  assert_string_equal(want, "plain,ro"); /* the probe is gone */
}

/* ---- redis ---------------------------------------------------------------------------- */

static redisContext *redis_check(void) {
  redisContext *c = redisConnect("127.0.0.1", S.redis_port);
  assert_non_null(c);
  assert_int_equal(c->err, 0);
  return c;
}

static const char *field(const redisReply *fields, const char *name) {
  for (size_t i = 0; i + 1 < fields->elements; i += 2) {
    if (strcmp(fields->element[i]->str, name) == 0) return fields->element[i + 1]->str;
  }
  return NULL;
}

static void test_redis_writes_stream_in_order(void **state) {
  (void)state;
  char err[256] = "", want[512];
  assert_int_equal(W("redis")->validate(&S.settings, err, sizeof err), 0);
  wk_buf blob = {0}, pr = {0};
  mixed_outputs(&blob);
  wk_writer_option opt[] = {{"stream", "results:mixed"}};
  wk_writer_task t = make_task(&S.settings, "r-1", &blob, opt, 1);
  assert_int_equal(W("redis")->write(W("redis"), &t, &pr, err, sizeof err), 0);

  redisContext *c = redis_check();
  redisReply *r = redisCommand(c, "XRANGE results:mixed - +");
  assert_non_null(r);
  assert_int_equal(r->type, REDIS_REPLY_ARRAY);
  assert_int_equal(r->elements, MIXED_N);
  uint64_t bytes = 0;
  for (size_t i = 0; i < r->elements; i++) {
    const redisReply *fields = r->element[i]->element[1];
    assert_int_equal(fields->elements, 6);
    assert_string_equal(fields->element[0]->str, "task_id");
    assert_string_equal(field(fields, "task_id"), "r-1");
    char idx[24];
    snprintf(idx, sizeof idx, "%zu", i);
    assert_string_equal(field(fields, "index"), idx);
    assert_string_equal(field(fields, "record"), mixed_expected("r-1", (int)i, want, sizeof want));
    bytes += strlen(field(fields, "record"));
  }
  freeReplyObject(r);
  check_plugin_result(&pr, "redis", "results:mixed", MIXED_N, bytes);

  /* The default stream. */
  wk_buf_clear(&blob);
  counted_outputs(&blob, 25);
  t = make_task(&S.settings, "r-2", &blob, NULL, 0);
  wk_buf_clear(&pr);
  assert_int_equal(W("redis")->write(W("redis"), &t, &pr, err, sizeof err), 0);
  check_plugin_result(&pr, "redis", "worker:outputs", 25, 0);
  r = redisCommand(c, "XLEN worker:outputs");
  assert_int_equal(r->integer, 25);
  freeReplyObject(r);
  redisFree(c);
  wk_buf_free(&blob);
  wk_buf_free(&pr);
}

/* Many tasks on many threads into one stream: each task's entries are contiguous. */
typedef struct par_arg {
  const char *writer;
  char task_id[32];
  const wk_buf *blob;
  const wk_writer_option *opt;
  size_t n_opt;
  int rc;
  char err[256];
} par_arg;

static void *par_write(void *arg) {
  par_arg *a = arg;
  wk_buf pr = {0};
  wk_writer_task t = make_task(&S.settings, a->task_id, a->blob, a->opt, a->n_opt);
  a->rc =
      wk_writer_find(a->writer)->write(wk_writer_find(a->writer), &t, &pr, a->err, sizeof a->err);
  wk_buf_free(&pr);
  return NULL;
}

enum { PAR_TASKS = 8, PAR_OUTPUTS = 200 };

static void run_parallel(const char *writer, const wk_writer_option *opt, size_t n_opt,
                         par_arg *args) {
  wk_buf blob = {0};
  counted_outputs(&blob, PAR_OUTPUTS);
  pthread_t th[PAR_TASKS];
  for (int i = 0; i < PAR_TASKS; i++) {
    args[i] = (par_arg){.writer = writer, .blob = &blob, .opt = opt, .n_opt = n_opt};
    snprintf(args[i].task_id, sizeof args[i].task_id, "par-%d", i);
    assert_int_equal(pthread_create(&th[i], NULL, par_write, &args[i]), 0);
  }
  for (int i = 0; i < PAR_TASKS; i++) pthread_join(th[i], NULL);
  for (int i = 0; i < PAR_TASKS; i++) {
    if (args[i].rc != 0) fprintf(stderr, "%s: %s\n", args[i].task_id, args[i].err);
    assert_int_equal(args[i].rc, 0);
  }
  wk_buf_free(&blob);
}

static void test_redis_parallel_tasks_land_together(void **state) {
  (void)state;
  par_arg args[PAR_TASKS];
  wk_writer_option opt[] = {{"stream", "results:par"}};
  run_parallel("redis", opt, 1, args);
  redisContext *c = redis_check();
  redisReply *r = redisCommand(c, "XRANGE results:par - +");
  assert_int_equal(r->elements, PAR_TASKS * PAR_OUTPUTS);
  for (size_t i = 0; i < r->elements; i += PAR_OUTPUTS) {
    const char *task = field(r->element[i]->element[1], "task_id");
    for (size_t k = 0; k < PAR_OUTPUTS; k++) {
      const redisReply *f = r->element[i + k]->element[1];
      assert_string_equal(field(f, "task_id"), task);
      assert_int_equal(strtoul(field(f, "index"), NULL, 10), k);
    }
  }
  freeReplyObject(r);
  redisFree(c);
}

static void test_redis_backend_errors(void **state) {
  (void)state;
  char err[256], want[300];
  wk_buf blob = {0}, pr = {0};
  counted_outputs(&blob, 3);

  /* Down: a port nobody listens on. */
  int port = free_port();
  char addr[64];
  snprintf(addr, sizeof addr, "127.0.0.1:%d", port);
  wk_writer_settings down = {.redis_addr = addr};
  wk_writer_task t = make_task(&down, "r-down", &blob, NULL, 0);
  assert_int_equal(W("redis")->write(W("redis"), &t, &pr, err, sizeof err), -1);
  snprintf(want, sizeof want, "redis %s: Connection refused", addr);
  assert_string_equal(err, want);
  assert_int_equal(pr.len, 0);

  /* Refused: the stream key holds a string. */
  redisContext *c = redis_check();
  freeReplyObject(redisCommand(c, "SET results:str hello"));
  wk_writer_option opt[] = {{"stream", "results:str"}};
  t = make_task(&S.settings, "r-type", &blob, opt, 1);
  assert_int_equal(W("redis")->write(W("redis"), &t, &pr, err, sizeof err), -1);
  snprintf(want, sizeof want, "redis %s: XADD results:str: WRONGTYPE", S.redis_addr);
  assert_memory_equal(err, want, strlen(want));
  assert_int_equal(pr.len, 0);
  redisReply *r = redisCommand(c, "GET results:str");
  assert_string_equal(r->str, "hello");
  freeReplyObject(r);

  /* A malformed blob sends nothing. */
  blob.len -= 2;
  wk_writer_option opt2[] = {{"stream", "results:never"}};
  t = make_task(&S.settings, "r-bad", &blob, opt2, 1);
  assert_int_equal(W("redis")->write(W("redis"), &t, &pr, err, sizeof err), -1);
  r = redisCommand(c, "EXISTS results:never");
  assert_int_equal(r->integer, 0);
  freeReplyObject(r);
  redisFree(c);
  wk_buf_free(&blob);
  wk_buf_free(&pr);
}

static void test_redis_validate(void **state) {
  (void)state;
  char err[256], want[300];
  const char *bad[] = {"",
                       "localhost",
                       "127.0.0.1:",
                       ":6379",
                       "127.0.0.1:0",
                       "127.0.0.1:65536",
                       "127.0.0.1:63x9",
                       "::1:6379",
                       "[::1:6379",
                       "[]:6379"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    wk_writer_settings s = {.redis_addr = bad[i]};
    assert_int_equal(W("redis")->validate(&s, err, sizeof err), -1);
    assert_memory_equal(err, "redis: redis_addr", 17);
  }
  wk_writer_settings unset = {0};
  assert_int_equal(W("redis")->validate(&unset, err, sizeof err), -1);
  assert_string_equal(err, "redis: redis_addr is not set");
  char addr[64];
  snprintf(addr, sizeof addr, "127.0.0.1:%d", free_port());
  wk_writer_settings down = {.redis_addr = addr};
  int64_t t0 = mono_ms();
  assert_int_equal(W("redis")->validate(&down, err, sizeof err), -1);
  assert_true(mono_ms() - t0 < 2000);
  snprintf(want, sizeof want, "redis %s: Connection refused", addr);
  assert_string_equal(err, want);
  /* A listener that never answers: the PING times out within the validate bound. */
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = 0};
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof sa), 0);
  assert_int_equal(listen(fd, 4), 0);
  socklen_t sl = sizeof sa;
  getsockname(fd, (struct sockaddr *)&sa, &sl);
  snprintf(addr, sizeof addr, "127.0.0.1:%d", ntohs(sa.sin_port));
  t0 = mono_ms();
  assert_int_equal(W("redis")->validate(&down, err, sizeof err), -1);
  int64_t took = mono_ms() - t0;
  assert_true(took < 3000);
  snprintf(want, sizeof want, "redis %s: PING: no answer within 1000 ms", addr);
  assert_string_equal(err, want);
  /* The same silent listener as a write's backend: the batch gives up after io_timeout_ms. */
  wk_buf blob = {0}, pr = {0};
  counted_outputs(&blob, 3);
  wk_writer_settings hung = {.redis_addr = addr, .io_timeout_ms = 300};
  wk_writer_task t = make_task(&hung, "r-hung", &blob, NULL, 0);
  t0 = mono_ms();
  assert_int_equal(W("redis")->write(W("redis"), &t, &pr, err, sizeof err), -1);
  took = mono_ms() - t0;
  assert_true(took >= 250 && took < 3000);
  snprintf(want, sizeof want, "redis %s: no answer within 300 ms", addr);
  assert_string_equal(err, want);
  assert_int_equal(pr.len, 0);
  wk_buf_free(&blob);
  wk_buf_free(&pr);
  close(fd);
  wk_writer_settings v6 = {.redis_addr = "[::1]:1"};
  assert_int_equal(W("redis")->validate(&v6, err, sizeof err), -1); /* parses, then refused */
  assert_null(strstr(err, "redis_addr"));
  assert_int_equal(W("redis")->validate(&S.settings, err, sizeof err), 0);
}

/* ---- postgres ---------------------------------------------------------------------------- */

static PGconn *pg_check(void) {
  char dsn[300];
  snprintf(dsn, sizeof dsn, "%s options='-c client_min_messages=warning'", S.pg_dsn);
  PGconn *c = PQconnectdb(dsn);
  assert_int_equal(PQstatus(c), CONNECTION_OK);
  return c;
}

static PGresult *pg_q(PGconn *c, const char *sql) {
  PGresult *r = PQexec(c, sql);
  if (PQresultStatus(r) != PGRES_TUPLES_OK && PQresultStatus(r) != PGRES_COMMAND_OK) {
    fprintf(stderr, "%s: %s\n", sql, PQresultErrorMessage(r));
    fail();
  }
  return r;
}

static long pg_count(PGconn *c, const char *sql) {
  PGresult *r = pg_q(c, sql);
  long n = strtol(PQgetvalue(r, 0, 0), NULL, 10);
  PQclear(r);
  return n;
}

static void test_pg_writes_rows(void **state) {
  (void)state;
  char err[256] = "", want[512];
  assert_int_equal(W("postgres")->validate(&S.settings, err, sizeof err), 0);
  PGconn *c = pg_check();
  PQclear(pg_q(c, "DROP TABLE IF EXISTS worker_outputs"));
  wk_buf blob = {0}, pr = {0};
  mixed_outputs(&blob);
  wk_writer_task t = make_task(&S.settings, "p\\1\t", &blob, NULL, 0); /* COPY escapes */
  assert_int_equal(W("postgres")->write(W("postgres"), &t, &pr, err, sizeof err), 0);
  PGresult *r = pg_q(c,
                     "SELECT task_id, idx, record::text, written_at IS NOT NULL "
                     "FROM worker_outputs ORDER BY idx");
  assert_int_equal(PQntuples(r), MIXED_N);
  uint64_t bytes = 0;
  for (int i = 0; i < MIXED_N; i++) {
    assert_string_equal(PQgetvalue(r, i, 0), "p\\1\t");
    assert_int_equal(strtol(PQgetvalue(r, i, 1), NULL, 10), i);
    mixed_expected("p\\\\1\\t", i, want, sizeof want);
    assert_true(json_same(PQgetvalue(r, i, 2), want));
    bytes += strlen(want);
    assert_string_equal(PQgetvalue(r, i, 3), "t");
  }
  PQclear(r);
  check_plugin_result(&pr, "postgres", "worker_outputs", MIXED_N, bytes);
  /* The big integer kept its digits (jsonb numerics are exact). */
  assert_int_equal(pg_count(c,
                            "SELECT count(*) FROM worker_outputs "
                            "WHERE record->'value'->>'big' = '12345678901234567890'"),
                   1);

  /* Another table, 500 rows, all in one transaction (one xmin). */
  wk_buf_clear(&blob);
  counted_outputs(&blob, 500);
  wk_writer_option opt[] = {{"table", "many_rows"}};
  t = make_task(&S.settings, "p-2", &blob, opt, 1);
  wk_buf_clear(&pr);
  assert_int_equal(W("postgres")->write(W("postgres"), &t, &pr, err, sizeof err), 0);
  check_plugin_result(&pr, "postgres", "many_rows", 500, 0);
  assert_int_equal(pg_count(c, "SELECT count(*) FROM many_rows"), 500);
  assert_int_equal(pg_count(c, "SELECT count(DISTINCT xmin::text) FROM many_rows"), 1);
  assert_int_equal(
      pg_count(c, "SELECT count(*) FROM many_rows WHERE (record->'value'->>'i')::int = idx"), 500);
  /* The schema the writer created. */
  r = pg_q(c,
           "SELECT string_agg(column_name || ' ' || data_type, ', ' ORDER BY ordinal_position) "
           "FROM information_schema.columns WHERE table_name = 'many_rows'");
  assert_string_equal(
      PQgetvalue(r, 0, 0),
      "task_id text, idx integer, record jsonb, written_at timestamp with time zone");
  PQclear(r);
  PQfinish(c);
  wk_buf_free(&blob);
  wk_buf_free(&pr);
}

static void test_pg_parallel_tasks(void **state) {
  (void)state;
  PGconn *c = pg_check();
  PQclear(pg_q(c, "DROP TABLE IF EXISTS par_rows"));
  par_arg args[PAR_TASKS];
  wk_writer_option opt[] = {{"table", "par_rows"}}; /* created by whichever task is first */
  run_parallel("postgres", opt, 1, args);
  assert_int_equal(pg_count(c, "SELECT count(*) FROM par_rows"), PAR_TASKS * PAR_OUTPUTS);
  assert_int_equal(pg_count(c, "SELECT count(DISTINCT xmin::text) FROM par_rows"), PAR_TASKS);
  assert_int_equal(pg_count(c, "SELECT count(DISTINCT (task_id, xmin::text)) FROM par_rows"),
                   PAR_TASKS);
  PQfinish(c);
}

/* The 3rd record violates a CHECK: the whole task is rolled back. */
static void test_pg_failure_midway_leaves_nothing(void **state) {
  (void)state;
  PGconn *c = pg_check();
  PQclear(pg_q(c, "DROP TABLE IF EXISTS checked"));
  PQclear(pg_q(c,
               "CREATE TABLE checked (task_id text, idx integer, record jsonb, "
               "written_at timestamptz DEFAULT now(), CONSTRAINT no_third CHECK (idx <> 2))"));
  char err[256];
  wk_buf blob = {0}, pr = {0};
  counted_outputs(&blob, 5);
  wk_writer_option opt[] = {{"table", "checked"}};
  wk_writer_task t = make_task(&S.settings, "p-check", &blob, opt, 1);
  assert_int_equal(W("postgres")->write(W("postgres"), &t, &pr, err, sizeof err), -1);
  assert_string_equal(
      err, "postgres: new row for relation \"checked\" violates check constraint \"no_third\"");
  assert_int_equal(pr.len, 0);
  assert_int_equal(pg_count(c, "SELECT count(*) FROM checked"), 0);

  /* A malformed blob aborts the COPY: still nothing. */
  wk_buf_clear(&blob);
  counted_outputs(&blob, 2);
  blob.len -= 1;
  PQclear(pg_q(c, "ALTER TABLE checked DROP CONSTRAINT no_third"));
  t = make_task(&S.settings, "p-check", &blob, opt, 1);
  assert_int_equal(W("postgres")->write(W("postgres"), &t, &pr, err, sizeof err), -1);
  assert_string_equal(err, "outputs: malformed record after output 1");
  assert_int_equal(pg_count(c, "SELECT count(*) FROM checked"), 0);

  /* Refused: a schema that does not exist; a table with other columns. */
  wk_writer_option opt2[] = {{"table", "nosuch.t"}};
  t = make_task(&S.settings, "p-x", &blob, opt2, 1);
  assert_int_equal(W("postgres")->write(W("postgres"), &t, &pr, err, sizeof err), -1);
  assert_string_equal(err, "postgres: schema \"nosuch\" does not exist");
  PQclear(pg_q(c, "DROP TABLE IF EXISTS other_cols"));
  PQclear(pg_q(c, "CREATE TABLE other_cols (a int)"));
  wk_buf_clear(&blob);
  counted_outputs(&blob, 2);
  wk_writer_option opt3[] = {{"table", "other_cols"}};
  t = make_task(&S.settings, "p-y", &blob, opt3, 1);
  assert_int_equal(W("postgres")->write(W("postgres"), &t, &pr, err, sizeof err), -1);
  assert_string_equal(err,
                      "postgres: column \"task_id\" of relation \"other_cols\" does not exist");
  assert_int_equal(pr.len, 0);
  PQfinish(c);
  wk_buf_free(&blob);
  wk_buf_free(&pr);
}

/* A table locked by another session: the write gives up after io_timeout_ms with the
 * server's words, and nothing was written. */
static void test_pg_io_timeout(void **state) {
  (void)state;
  PGconn *c = pg_check();
  PQclear(pg_q(c, "DROP TABLE IF EXISTS locked"));
  PQclear(pg_q(c,
               "CREATE TABLE locked (task_id text, idx integer, record jsonb, "
               "written_at timestamptz DEFAULT now())"));
  PQclear(pg_q(c, "BEGIN"));
  PQclear(pg_q(c, "LOCK TABLE locked IN ACCESS EXCLUSIVE MODE"));
  wk_writer_settings s = S.settings;
  s.io_timeout_ms = 300;
  char err[256];
  wk_buf blob = {0}, pr = {0};
  counted_outputs(&blob, 3);
  wk_writer_option opt[] = {{"table", "locked"}};
  wk_writer_task t = make_task(&s, "p-lock", &blob, opt, 1);
  int64_t t0 = mono_ms();
  assert_int_equal(W("postgres")->write(W("postgres"), &t, &pr, err, sizeof err), -1);
  int64_t took = mono_ms() - t0;
  assert_true(took >= 250 && took < 3000);
  assert_string_equal(err, "postgres: canceling statement due to statement timeout");
  PQclear(pg_q(c, "COMMIT"));
  assert_int_equal(pg_count(c, "SELECT count(*) FROM locked"), 0);
  PQfinish(c);
  wk_buf_free(&blob);
  wk_buf_free(&pr);
}

static void test_pg_down_and_validate(void **state) {
  (void)state;
  char err[512], dsn[256];
  wk_buf blob = {0}, pr = {0};
  counted_outputs(&blob, 2);
  int port = free_port();
  snprintf(dsn, sizeof dsn, "host=127.0.0.1 port=%d user=postgres dbname=postgres", port);
  wk_writer_settings down = {.postgres_dsn = dsn};
  wk_writer_task t = make_task(&down, "p-down", &blob, NULL, 0);
  assert_int_equal(W("postgres")->write(W("postgres"), &t, &pr, err, sizeof err), -1);
  fprintf(stderr, "  down: %s\n", err);
  assert_memory_equal(err, "postgres: ", 10);
  assert_non_null(strstr(err, "Connection refused"));
  assert_null(strchr(err, '\n'));
  assert_int_equal(pr.len, 0);

  assert_int_equal(W("postgres")->validate(&down, err, sizeof err), -1);
  assert_non_null(strstr(err, "Connection refused"));
  wk_writer_settings unset = {0};
  assert_int_equal(W("postgres")->validate(&unset, err, sizeof err), -1);
  assert_string_equal(err, "postgres: postgres_dsn is not set");
  wk_writer_settings garbage = {.postgres_dsn = "host=127.0.0.1 nonsense"};
  assert_int_equal(W("postgres")->validate(&garbage, err, sizeof err), -1);
  fprintf(stderr, "  garbage: %s\n", err);
  char nodb[300];
  snprintf(nodb, sizeof nodb, "postgresql://postgres@127.0.0.1:%d/nosuchdb", S.pg_port);
  wk_writer_settings missing_db = {.postgres_dsn = nodb};
  assert_int_equal(W("postgres")->validate(&missing_db, err, sizeof err), -1);
  assert_non_null(strstr(err, "database \"nosuchdb\" does not exist"));
  assert_int_equal(W("postgres")->validate(&S.settings, err, sizeof err), 0);
  wk_buf_free(&blob);
  wk_buf_free(&pr);
}

/* redis_addr's forms (wk_redis_parse): what each connects to, and errors that never
 * show the password. */
static void test_redis_addr_forms(void **state) {
  (void)state;
  wk_redis_target t;
  char err[512];
  assert_int_equal(wk_redis_parse("127.0.0.1:6380", &t, err, sizeof err), 0);
  assert_string_equal(t.host, "127.0.0.1");
  assert_int_equal(t.port, 6380);
  assert_false(t.tls || t.has_password);
  assert_int_equal(t.db, -1);
  assert_int_equal(wk_redis_parse("[::1]:7000", &t, err, sizeof err), 0);
  assert_string_equal(t.host, "::1");
  assert_int_equal(wk_redis_parse("redis://cache", &t, err, sizeof err), 0);
  assert_string_equal(t.host, "cache");
  assert_int_equal(t.port, 6379);
  assert_int_equal(wk_redis_parse("rediss://app:p%40ss%3Aw@[::1]:6380/12", &t, err, sizeof err), 0);
  assert_true(t.tls && t.has_password);
  assert_string_equal(t.user, "app");
  assert_string_equal(t.password, "p@ss:w");
  assert_string_equal(t.host, "::1");
  assert_int_equal(t.port, 6380);
  assert_int_equal(t.db, 12);
  assert_string_equal(t.shown, "rediss://app:***@[::1]:6380/12");
  assert_int_equal(wk_redis_parse("redis://:pw0rd@h:1/", &t, err, sizeof err), 0);
  assert_string_equal(t.user, "");
  assert_string_equal(t.password, "pw0rd");
  assert_int_equal(t.db, -1);
  assert_int_equal(wk_redis_parse("redis://bare-pw@h:1", &t, err, sizeof err), 0);
  assert_string_equal(t.password, "bare-pw"); /* userinfo without ':' is a password */
  const char *bad[] = {"redis://:pw0rd@h:0",     "redis://:pw0rd@h:x",   "redis://:pw0rd@:1",
                       "redis://:pw%zz0rd@h:1",  "redis://:pw0rd@h:1/x", "redis://:pw0rd@h:1?db=1",
                       "http://:pw0rd@h:1",      "redis://app:@h:1",     "h",
                       "redis://:pw0rd@::1:6379"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    err[0] = '\0';
    if (wk_redis_parse(bad[i], &t, err, sizeof err) != -1) fail_msg("accepted %s", bad[i]);
    if (!err[0] || strstr(err, "pw0rd") || strstr(err, "pw%zz"))
      fail_msg("%s: message '%s'", bad[i], err);
  }
}

/* wk_writers_mask_secrets: the configured passwords, wherever a message has them. */
static void test_writer_errors_masked(void **state) {
  (void)state;
  wk_writer_settings s = {.redis_addr = "redis://app:r3dis-pw@h:1",
                          .postgres_dsn = "host=db password='pg pw 1' user=w"};
  char text[] = "AUTH r3dis-pw failed; libpq: pg pw 1 is wrong";
  wk_writers_mask_secrets(&s, text);
  assert_string_equal(text, "AUTH *** failed; libpq: *** is wrong");
  wk_writer_settings none = {0};
  char same[] = "nothing to hide";
  wk_writers_mask_secrets(&none, same);
  assert_string_equal(same, "nothing to hide");
}

int main(void) {
  signal(SIGPIPE, SIG_IGN); /* as the worker does */
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_registry),
      cmocka_unit_test(test_json_pieces),
      cmocka_unit_test(test_records),
      cmocka_unit_test_setup_teardown(test_file_writes_in_order, dir_setup, dir_teardown),
      cmocka_unit_test_setup_teardown(test_file_names_encode_the_task_id, dir_setup, dir_teardown),
      cmocka_unit_test_setup_teardown(test_file_failure_leaves_nothing, dir_setup, dir_teardown),
      cmocka_unit_test_setup_teardown(test_file_never_half_visible, dir_setup, dir_teardown),
      cmocka_unit_test_setup_teardown(test_file_validate, dir_setup, dir_teardown),
      cmocka_unit_test(test_redis_writes_stream_in_order),
      cmocka_unit_test(test_redis_parallel_tasks_land_together),
      cmocka_unit_test(test_redis_backend_errors),
      cmocka_unit_test(test_redis_validate),
      cmocka_unit_test(test_redis_addr_forms),
      cmocka_unit_test(test_writer_errors_masked),
      cmocka_unit_test(test_pg_writes_rows),
      cmocka_unit_test(test_pg_parallel_tasks),
      cmocka_unit_test(test_pg_failure_midway_leaves_nothing),
      cmocka_unit_test(test_pg_io_timeout),
      cmocka_unit_test(test_pg_down_and_validate),
  };
  return cmocka_run_group_tests_name("writers", tests, group_setup, group_teardown);
}

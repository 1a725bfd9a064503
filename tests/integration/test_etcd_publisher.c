/* Integration: the etcd client (wk_etcd) and the EtcdPublisher against a real etcd.
 *
 * Each test starts its own /usr/bin/etcd (Debian's etcd-server 3.4) on 127.0.0.1 with
 * free ports and a temporary data dir, with --heartbeat-interval=10
 * --election-timeout=100 so it is ready in a fraction of a second, and stops it (and
 * removes the dir) in its teardown. Failures are simulated by killing (SIGKILL),
 * freezing (SIGSTOP), restarting and wiping that etcd. WK_TEST_ETCD overrides the
 * binary; WK_TEST_KEEP=1 keeps the data dirs (their etcd.log tells what etcd saw). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <signal.h>
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

#include <jansson.h>

#include "adapters/wk_etcd.h"
#include "adapters/wk_etcd_registry.h"
#include "adapters/wk_etcd_publisher.h"
#include "lib/wk_alloc.h"

#define ADDR "127.0.0.1:7070"
#define PREFIX "/workers/"
#define KEY PREFIX ADDR

/* ---- time and polling ------------------------------------------------------------------ */

static int64_t mono_ms(void) { return wk_etcd_mono_ms(); }

static int64_t wall_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void sleep_ms(int64_t ms) {
  struct timespec ts = {.tv_sec = (time_t)(ms / 1000), .tv_nsec = (long)(ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

/* Polls `cond` every 10 ms for up to timeout_ms; evaluates to the ms it took, or -1. */
#define WAIT_FOR(cond, timeout_ms)               \
  __extension__({                                \
    int64_t t0_ = mono_ms(), r_ = -1;            \
    for (;;) {                                   \
      if (cond) {                                \
        r_ = mono_ms() - t0_;                    \
        break;                                   \
      }                                          \
      if (mono_ms() - t0_ > (timeout_ms)) break; \
      sleep_ms(10);                              \
    }                                            \
    r_;                                          \
  })

/* ---- a real etcd ----------------------------------------------------------------------- */

typedef struct etcd_proc {
  pid_t pid;
  char dir[128]; /* temporary root: data/ and etcd.log */
  char data[160];
  int client_port, peer_port;
  char endpoint[64];
} etcd_proc;

typedef struct fixture {
  etcd_proc etcd;
  wk_etcd *check; /* the test's own client, to look at what the publisher wrote */
  wk_etcd_publisher *pub;
  pid_t child;
  pid_t harness[2]; /* gRPC servers of a test (start_harness), ended by teardown */
} fixture;

static int free_port(int *keep_fd) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  assert_true(fd >= 0);
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = 0};
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof sa), 0);
  socklen_t sl = sizeof sa;
  assert_int_equal(getsockname(fd, (struct sockaddr *)&sa, &sl), 0);
  *keep_fd = fd;
  return ntohs(sa.sin_port);
}

static const char *etcd_binary(void) {
  const char *b = getenv("WK_TEST_ETCD");
  return b && *b ? b : "/usr/bin/etcd";
}

/* Temp dir and two free ports (both sockets held until both are picked). */
static void etcd_prepare(etcd_proc *e) {
  memset(e, 0, sizeof *e);
  snprintf(e->dir, sizeof e->dir, "/tmp/wk-etcd-test-XXXXXX");
  assert_non_null(mkdtemp(e->dir));
  snprintf(e->data, sizeof e->data, "%s/data", e->dir);
  int fd1, fd2;
  e->client_port = free_port(&fd1);
  e->peer_port = free_port(&fd2);
  close(fd1);
  close(fd2);
  snprintf(e->endpoint, sizeof e->endpoint, "http://127.0.0.1:%d", e->client_port);
}

static void etcd_spawn(etcd_proc *e) {
  char client[64], peer[64], cluster[96], log[200];
  snprintf(client, sizeof client, "http://127.0.0.1:%d", e->client_port);
  snprintf(peer, sizeof peer, "http://127.0.0.1:%d", e->peer_port);
  snprintf(cluster, sizeof cluster, "default=%s", peer);
  snprintf(log, sizeof log, "%s/etcd.log", e->dir);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0600);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
      close(fd);
    }
    const char *bin = etcd_binary();
    execl(bin, bin, "--name", "default", "--data-dir", e->data, "--listen-client-urls", client,
          "--advertise-client-urls", client, "--listen-peer-urls", peer,
          "--initial-advertise-peer-urls", peer, "--initial-cluster", cluster,
          "--heartbeat-interval=10", "--election-timeout=100", (char *)NULL);
    _exit(127);
  }
  e->pid = pid;
}

/* Waits until etcd answers a read (up to 10 s). */
static void etcd_wait_ready(etcd_proc *e) {
  char err[256];
  wk_etcd *c = wk_etcd_new(e->endpoint, 500, err, sizeof err);
  assert_non_null(c);
  wk_etcd_kv kv;
  bool found;
  int64_t took = WAIT_FOR(wk_etcd_get(c, "/probe", &kv, &found) == WK_ETCD_OK, 10000);
  if (took < 0) fprintf(stderr, "etcd at %s not ready: %s\n", e->endpoint, wk_etcd_errmsg(c));
  wk_etcd_free(c);
  assert_true(took >= 0);
}

static void etcd_signal(etcd_proc *e, int sig) {
  if (e->pid > 0) kill(e->pid, sig);
}

static void etcd_kill(etcd_proc *e) {
  if (e->pid <= 0) return;
  kill(e->pid, SIGCONT);
  kill(e->pid, SIGKILL);
  waitpid(e->pid, NULL, 0);
  e->pid = 0;
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb;
  (void)flag;
  (void)ftw;
  return remove(path);
}

static void rm_tree(const char *path) { nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS); }

static void etcd_stop(etcd_proc *e) {
  if (e->pid > 0) {
    kill(e->pid, SIGCONT);
    kill(e->pid, SIGTERM);
    int64_t t0 = mono_ms();
    while (waitpid(e->pid, NULL, WNOHANG) == 0) {
      if (mono_ms() - t0 > 3000) {
        kill(e->pid, SIGKILL);
        waitpid(e->pid, NULL, 0);
        break;
      }
      sleep_ms(10);
    }
    e->pid = 0;
  }
  const char *keep = getenv("WK_TEST_KEEP");
  if (e->dir[0] && !(keep && strcmp(keep, "1") == 0)) rm_tree(e->dir);
}

/* ---- fixtures ------------------------------------------------------------------------- */

static int setup_prepared(void **state) {
  fixture *f = calloc(1, sizeof *f);
  assert_non_null(f);
  etcd_prepare(&f->etcd);
  char err[256];
  f->check = wk_etcd_new(f->etcd.endpoint, 2000, err, sizeof err);
  assert_non_null(f->check);
  *state = f;
  return 0;
}

static int setup_running(void **state) {
  setup_prepared(state);
  fixture *f = *state;
  etcd_spawn(&f->etcd);
  etcd_wait_ready(&f->etcd);
  return 0;
}

static int teardown(void **state) {
  fixture *f = *state;
  if (f->child > 0) {
    kill(f->child, SIGKILL);
    waitpid(f->child, NULL, 0);
  }
  for (int i = 0; i < 2; i++) {
    if (f->harness[i] > 0) {
      kill(f->harness[i], SIGKILL);
      waitpid(f->harness[i], NULL, 0);
    }
  }
  if (f->pub) wk_etcd_publisher_stop(f->pub, false);
  wk_etcd_free(f->check);
  etcd_stop(&f->etcd);
  free(f);
  return 0;
}

/* ---- helpers ------------------------------------------------------------------------------ */

static wk_etcd_publisher_config base_config(const fixture *f) {
  wk_etcd_publisher_config c = {
      .endpoints = f->etcd.endpoint,
      .key_prefix = PREFIX,
      .advertise_addr = ADDR,
      .deployment = "block",
      .service = "worker-test",
      .version = "0.1.0",
  };
  return c;
}

static wk_etcd_publisher *start_pub(const wk_etcd_publisher_config *cfg) {
  char err[256] = "";
  wk_etcd_publisher *p = wk_etcd_publisher_start(cfg, err, sizeof err);
  if (!p) fprintf(stderr, "publisher: %s\n", err);
  assert_non_null(p);
  return p;
}

static wk_etcd_heartbeat hb_make(uint32_t slots, uint32_t reserved, uint32_t running) {
  wk_etcd_heartbeat hb = {.task_slots = slots,
                          .reserved = reserved,
                          .running = running,
                          .free = slots - reserved - running,
                          .ready = true,
                          .draining = false};
  return hb;
}

/* Reads the registration; true when the key exists (then *w is filled). */
static bool read_worker(fixture *f, wk_etcd_worker *w) {
  wk_etcd_kv kv;
  bool found = false;
  if (wk_etcd_get(f->check, KEY, &kv, &found) != WK_ETCD_OK || !found) return false;
  wk_etcd_worker_parse(PREFIX, kv.key, kv.value, kv.value_len, kv.lease, w);
  wk_etcd_kv_free(&kv);
  return true;
}

static bool key_exists(fixture *f) {
  wk_etcd_kv kv;
  bool found = false;
  if (wk_etcd_get(f->check, KEY, &kv, &found) != WK_ETCD_OK) return false;
  wk_etcd_kv_free(&kv);
  return found;
}

static bool key_absent(fixture *f) {
  wk_etcd_kv kv;
  bool found = true;
  if (wk_etcd_get(f->check, KEY, &kv, &found) != WK_ETCD_OK) return false;
  wk_etcd_kv_free(&kv);
  return !found;
}

static wk_etcd_publisher_stats stats(wk_etcd_publisher *p) {
  wk_etcd_publisher_stats s;
  wk_etcd_publisher_stats_get(p, &s);
  return s;
}

/* The key exists with the worker's value; its running_tasks is `running`. */
static bool registered_with_running(fixture *f, uint32_t running) {
  wk_etcd_worker w;
  if (!read_worker(f, &w)) return false;
  bool ok = w.valid && w.running_tasks == running;
  wk_etcd_worker_clear(&w);
  return ok;
}

/* The key exists with a value put after `after_unix_ms`. */
static bool registered_after(fixture *f, int64_t after_unix_ms) {
  wk_etcd_worker w;
  if (!read_worker(f, &w)) return false;
  bool ok = w.valid && w.updated_unix_ms > after_unix_ms;
  wk_etcd_worker_clear(&w);
  return ok;
}

static int64_t key_lease(fixture *f) {
  wk_etcd_worker w;
  if (!read_worker(f, &w)) return 0;
  int64_t l = w.lease;
  wk_etcd_worker_clear(&w);
  return l;
}

/* ---- tests: the client on its own ---------------------------------------------------------- */

static void test_helpers(void **state) {
  (void)state;
  char out[16];
  assert_int_equal(wk_etcd_prefix_end("/workers/", 9, out), 9);
  assert_memory_equal(out, "/workers0", 9);
  assert_int_equal(wk_etcd_prefix_end("a\xff\xff", 3, out), 1);
  assert_memory_equal(out, "b", 1);
  assert_int_equal(wk_etcd_prefix_end("", 0, out), 1);
  assert_int_equal(out[0], '\0');

  char err[128];
  assert_null(wk_etcd_new("", 100, err, sizeof err));
  assert_non_null(strstr(err, "empty"));
  assert_null(wk_etcd_new("127.0.0.1:2379", 100, err, sizeof err));
  assert_non_null(strstr(err, "http://"));
  wk_etcd *c = wk_etcd_new(" http://a:1/ , http://b:2 ", 100, err, sizeof err);
  assert_non_null(c);
  assert_string_equal(wk_etcd_endpoint(c), "http://a:1");
  wk_etcd_free(c);

  wk_etcd_worker w;
  wk_etcd_worker_parse(PREFIX, "/workers/h:1", "nope", 4, 0, &w);
  assert_false(w.valid);
  assert_string_equal(w.address, "h:1"); /* from the key */
  wk_etcd_worker_clear(&w);
  const char *good =
      "{\"address\":\"h:2\",\"task_slots\":4,\"reserved_slots\":1,"
      "\"running_tasks\":1,\"free_slots\":2,\"ready\":true,\"draining\":false,"
      "\"deployment\":\"block\",\"service\":\"s\",\"version\":\"v\","
      "\"updated_unix_ms\":5}";
  wk_etcd_worker_parse(PREFIX, "/workers/h:2", good, strlen(good), 7, &w);
  assert_true(w.valid);
  assert_string_equal(w.address, "h:2");
  assert_int_equal(w.free_slots, 2);
  assert_int_equal(w.updated_unix_ms, 5);
  assert_int_equal(w.lease, 7);
  wk_etcd_worker_clear(&w);
  const char *bad = "{\"address\":\"h:3\",\"task_slots\":-1,\"free_slots\":1,\"ready\":true}";
  wk_etcd_worker_parse(PREFIX, "/workers/h:3", bad, strlen(bad), 0, &w);
  assert_false(w.valid);
  assert_non_null(strstr(w.error, "task_slots"));
  wk_etcd_worker_clear(&w);

  wk_etcd_publisher_config cfg = {.endpoints = "http://127.0.0.1:1", .advertise_addr = ""};
  assert_null(wk_etcd_publisher_start(&cfg, err, sizeof err));
  assert_non_null(strstr(err, "advertise"));
  cfg.advertise_addr = ADDR;
  cfg.lease_ttl_s = 100000;
  assert_null(wk_etcd_publisher_start(&cfg, err, sizeof err));
  assert_non_null(strstr(err, "TTL"));
}

/* Lease and key operations of the client, failover past a dead endpoint. */
static void test_client_basics(void **state) {
  fixture *f = *state;
  int fd;
  int dead = free_port(&fd);
  close(fd);
  char eps[160], err[256];
  snprintf(eps, sizeof eps, "http://127.0.0.1:%d,%s", dead, f->etcd.endpoint);
  wk_etcd *c = wk_etcd_new(eps, 1000, err, sizeof err);
  assert_non_null(c);

  int64_t id = 0, ttl = 0, granted = 0;
  assert_int_equal(wk_etcd_lease_grant(c, 5, &id, &ttl), WK_ETCD_OK);
  assert_string_equal(wk_etcd_endpoint(c), f->etcd.endpoint); /* failed over */
  assert_true(id != 0);
  assert_int_equal(ttl, 5);
  assert_int_equal(wk_etcd_lease_keepalive(c, id, &ttl), WK_ETCD_OK);
  assert_int_equal(ttl, 5);
  assert_int_equal(wk_etcd_lease_ttl(c, id, &ttl, &granted), WK_ETCD_OK);
  assert_true(ttl > 0 && ttl <= 5);
  assert_int_equal(granted, 5);

  assert_int_equal(wk_etcd_put(c, "/t/a", "1", 1, id), WK_ETCD_OK);
  assert_int_equal(wk_etcd_put(c, "/t/b", "2", 1, 0), WK_ETCD_OK);
  assert_int_equal(wk_etcd_put(c, "/t0", "x", 1, 0), WK_ETCD_OK); /* outside /t/ */
  assert_int_equal(wk_etcd_put(c, "/t", "y", 1, 0), WK_ETCD_OK);  /* outside /t/ */
  assert_int_equal(wk_etcd_put(c, "/t/c", "3", 1, 987654321), WK_ETCD_E_LEASE_NOT_FOUND);
  assert_non_null(strstr(wk_etcd_errmsg(c), "lease not found"));

  wk_etcd_kvs kvs;
  assert_int_equal(wk_etcd_range_prefix(c, "/t/", 0, &kvs), WK_ETCD_OK);
  assert_int_equal(kvs.n, 2);
  assert_string_equal(kvs.items[0].key, "/t/a");
  assert_string_equal(kvs.items[0].value, "1");
  assert_int_equal(kvs.items[0].lease, id);
  assert_string_equal(kvs.items[1].key, "/t/b");
  assert_int_equal(kvs.items[1].lease, 0);
  assert_true(kvs.revision > 0);
  wk_etcd_kvs_free(&kvs);
  assert_int_equal(wk_etcd_range_prefix(c, "/t/", 1, &kvs), WK_ETCD_OK);
  assert_int_equal(kvs.n, 1);
  wk_etcd_kvs_free(&kvs);
  assert_int_equal(wk_etcd_range_prefix(c, "/none/", 0, &kvs), WK_ETCD_OK);
  assert_int_equal(kvs.n, 0);
  wk_etcd_kvs_free(&kvs);

  int64_t deleted = -1;
  assert_int_equal(wk_etcd_delete_if_lease(c, "/t/a", id + 1, &deleted), WK_ETCD_OK);
  assert_int_equal(deleted, 0); /* on another lease: left alone */
  assert_int_equal(wk_etcd_delete_if_lease(c, "/t/a", id, &deleted), WK_ETCD_OK);
  assert_int_equal(deleted, 1);
  assert_int_equal(wk_etcd_delete(c, "/t/b", &deleted), WK_ETCD_OK);
  assert_int_equal(deleted, 1);
  assert_int_equal(wk_etcd_delete(c, "/t/b", &deleted), WK_ETCD_OK);
  assert_int_equal(deleted, 0);

  assert_int_equal(wk_etcd_lease_revoke(c, id), WK_ETCD_OK);
  assert_int_equal(wk_etcd_lease_revoke(c, id), WK_ETCD_E_LEASE_NOT_FOUND);
  assert_int_equal(wk_etcd_lease_keepalive(c, id, &ttl), WK_ETCD_E_LEASE_NOT_FOUND);
  assert_int_equal(wk_etcd_lease_ttl(c, id, &ttl, NULL), WK_ETCD_E_LEASE_NOT_FOUND);
  wk_etcd_free(c);

  /* Nothing listens: UNREACHABLE quickly, with the endpoint in the message. */
  snprintf(eps, sizeof eps, "http://127.0.0.1:%d", dead);
  c = wk_etcd_new(eps, 1000, err, sizeof err);
  int64_t t0 = mono_ms();
  assert_int_equal(wk_etcd_lease_grant(c, 5, &id, NULL), WK_ETCD_E_UNREACHABLE);
  assert_true(mono_ms() - t0 < 1000);
  assert_non_null(strstr(wk_etcd_errmsg(c), eps));
  wk_etcd_free(c);
}

/* wk_etcd_txn_put: create-if-absent (a guard of revision 0) and compare-and-swap. */
static void test_txn_put(void **state) {
  fixture *f = *state;
  char err[256];
  wk_etcd *c = wk_etcd_new(f->etcd.endpoint, 1000, err, sizeof err);
  assert_non_null(c);
  bool ok = false;
  wk_etcd_guard absent = {"/e/by-digest/aa", 0};
  wk_etcd_put_op put = {"/e/by-digest/aa", "7", 1};
  assert_int_equal(wk_etcd_txn_put(c, &absent, 1, &put, 1, &ok), WK_ETCD_OK);
  assert_true(ok);
  wk_etcd_put_op other = {"/e/by-digest/aa", "8", 1};
  assert_int_equal(wk_etcd_txn_put(c, &absent, 1, &other, 1, &ok), WK_ETCD_OK);
  assert_false(ok); /* present now: nothing changed */
  wk_etcd_kv kv;
  bool found = false;
  assert_int_equal(wk_etcd_get(c, "/e/by-digest/aa", &kv, &found), WK_ETCD_OK);
  assert_true(found);
  assert_string_equal(kv.value, "7");
  /* compare-and-swap on the revision read; two puts at once */
  wk_etcd_guard same = {"/e/by-digest/aa", kv.mod_revision};
  wk_etcd_put_op two[2] = {{"/e/counter", "9", 1}, {"/e/by-digest/aa", "9", 1}};
  assert_int_equal(wk_etcd_txn_put(c, &same, 1, two, 2, &ok), WK_ETCD_OK);
  assert_true(ok);
  assert_int_equal(wk_etcd_txn_put(c, &same, 1, two, 2, &ok), WK_ETCD_OK);
  assert_false(ok); /* the revision moved */
  wk_etcd_kv_free(&kv);
  assert_int_equal(wk_etcd_get(c, "/e/counter", &kv, &found), WK_ETCD_OK);
  assert_true(found);
  assert_string_equal(kv.value, "9");
  wk_etcd_kv_free(&kv);
  assert_int_equal(wk_etcd_txn_put(c, NULL, 0, NULL, 0, &ok), WK_ETCD_E_INVALID);
  wk_etcd_free(c);
}

/* A record's "code": parsed, asked for an epoch, ordered for a pinned epoch. */
#define RECORD_BASE                                                                       \
  "{\"address\":\"%s\",\"task_slots\":4,\"reserved_slots\":0,\"running_tasks\":0,\"free_" \
  "slots\":2,\"ready\":true,\"draining\":false,\"updated_unix_ms\":5%s}"

static void test_record_code(void **state) {
  (void)state;
  const char *extra[4] = {
      ",\"code\":{\"f\":{\"current\":7,\"epochs\":[{\"epoch\":7,\"digest\":\"ab\"},"
      "{\"epoch\":\"3\",\"digest\":\"\"}]}},\"code_truncated\":false",
      ",\"code\":{\"f\":{\"current\":3,\"epochs\":[{\"epoch\":3}]}}", "", /* no code: cannot tell */
      ",\"code\":{\"g\":{\"epochs\":[]}},\"code_truncated\":true",        /* truncated */
  };
  wk_etcd_workers ws = {wk_xcalloc(5, sizeof(wk_etcd_worker)), 0};
  for (int i = 0; i < 4; i++) {
    char addr[16], value[512];
    snprintf(addr, sizeof addr, "h:%d", i);
    snprintf(value, sizeof value, RECORD_BASE, addr, extra[i]);
    wk_etcd_worker_parse(PREFIX, addr, value, strlen(value), 0, &ws.items[ws.n++]);
    assert_true(ws.items[i].valid);
  }
  /* a malformed "code" counts as none, the record stays valid */
  char bad[512];
  snprintf(bad, sizeof bad, RECORD_BASE, "h:4", ",\"code\":{\"f\":{\"epochs\":[{\"epoch\":-1}]}}");
  wk_etcd_worker_parse(PREFIX, "h:4", bad, strlen(bad), 0, &ws.items[ws.n++]);
  assert_true(ws.items[4].valid);
  assert_false(ws.items[4].has_code);

  assert_true(ws.items[0].has_code && !ws.items[0].code_truncated);
  const wk_etcd_code_fn *fn = wk_etcd_worker_code(&ws.items[0], "f");
  assert_non_null(fn);
  assert_int_equal(fn->current, 7);
  assert_int_equal(fn->n_epochs, 2);
  assert_string_equal(fn->epochs[0].digest, "ab");
  assert_int_equal(fn->epochs[1].epoch, 3);
  assert_int_equal(wk_etcd_worker_holds(&ws.items[0], "f", 3), WK_ETCD_HOLDS_YES);
  assert_int_equal(wk_etcd_worker_holds(&ws.items[0], "f", 5), WK_ETCD_HOLDS_NO);
  assert_int_equal(wk_etcd_worker_holds(&ws.items[0], "other", 5), WK_ETCD_HOLDS_NO);
  assert_int_equal(wk_etcd_worker_holds(&ws.items[2], "f", 5), WK_ETCD_HOLDS_UNKNOWN);
  assert_int_equal(wk_etcd_worker_holds(&ws.items[3], "f", 5), WK_ETCD_HOLDS_UNKNOWN);
  assert_int_equal(wk_etcd_workers_max_epoch(&ws, "f"), 7);
  assert_int_equal(wk_etcd_workers_max_epoch(&ws, "g"), 0);

  /* epoch 3: the holders (h:0, h:1) first, then those that cannot tell (h:2, h:3, h:4) */
  size_t unknown = 0;
  assert_int_equal(wk_etcd_workers_order_for_epoch(&ws, "f", 3, &unknown), 5);
  assert_int_equal(unknown, 3);
  assert_string_equal(ws.items[0].address, "h:0");
  assert_string_equal(ws.items[1].address, "h:1");
  assert_string_equal(ws.items[2].address, "h:2");
  /* epoch 7: h:1 lists f without it and goes */
  assert_int_equal(wk_etcd_workers_order_for_epoch(&ws, "f", 7, &unknown), 4);
  assert_string_equal(ws.items[0].address, "h:0");
  assert_int_equal(unknown, 3);
  wk_etcd_workers_free(&ws);
}

/* Listing the registry and choosing candidates for a submit. */
static void test_candidates(void **state) {
  fixture *f = *state;
  int64_t now = wall_ms();
  struct {
    const char *addr;
    int free, running;
    bool ready, draining;
    int64_t age_ms;
  } ws[] = {
      {"a:1", 3, 0, true, false, 0},  {"b:1", 5, 0, true, false, 0},
      {"c:1", 8, 0, true, true, 0},                                       /* draining */
      {"d:1", 8, 0, false, false, 0},                                     /* not ready */
      {"e:1", 0, 4, true, false, 0},                                      /* full */
      {"g:1", 5, 1, true, false, 0},  {"h:1", 9, 0, true, false, 600000}, /* stale */
  };
  for (size_t i = 0; i < sizeof ws / sizeof ws[0]; i++) {
    char key[64], value[512];
    snprintf(key, sizeof key, PREFIX "%s", ws[i].addr);
    snprintf(value, sizeof value,
             "{\"address\":\"%s\",\"task_slots\":%d,\"reserved_slots\":0,\"running_tasks\":%d,"
             "\"free_slots\":%d,\"ready\":%s,\"draining\":%s,\"deployment\":\"block\","
             "\"service\":\"s\",\"version\":\"v\",\"updated_unix_ms\":%" PRId64 "}",
             ws[i].addr, ws[i].free + ws[i].running, ws[i].running, ws[i].free,
             ws[i].ready ? "true" : "false", ws[i].draining ? "true" : "false", now - ws[i].age_ms);
    assert_int_equal(wk_etcd_put(f->check, key, value, strlen(value), 0), WK_ETCD_OK);
  }
  assert_int_equal(wk_etcd_put(f->check, PREFIX "f:1", "{oops", 5, 0), WK_ETCD_OK);
  assert_int_equal(wk_etcd_put(f->check, "/workers0", "{}", 2, 0), WK_ETCD_OK);

  wk_etcd_workers all;
  assert_int_equal(wk_etcd_list_workers(f->check, PREFIX, &all), WK_ETCD_OK);
  assert_int_equal(all.n, 8);
  assert_string_equal(all.items[5].address, "f:1");
  assert_false(all.items[5].valid);
  wk_etcd_workers_free(&all);

  wk_etcd_workers cand;
  char err[256] = "";
  assert_int_equal(
      wk_etcd_find_candidates(f->etcd.endpoint, PREFIX, 1000, 60000, 0, &cand, err, sizeof err),
      WK_ETCD_OK);
  assert_int_equal(cand.n, 3);
  assert_string_equal(cand.items[0].address, "b:1"); /* 5 free, 0 running */
  assert_string_equal(cand.items[1].address, "g:1"); /* 5 free, 1 running */
  assert_string_equal(cand.items[2].address, "a:1");
  wk_etcd_workers_free(&cand);
  /* Without an age limit the stale one (most free) comes first. */
  assert_int_equal(
      wk_etcd_find_candidates(f->etcd.endpoint, PREFIX, 1000, 0, 42, &cand, err, sizeof err),
      WK_ETCD_OK);
  assert_int_equal(cand.n, 4);
  assert_string_equal(cand.items[0].address, "h:1");
  wk_etcd_workers_free(&cand);
  /* Nothing registered under another prefix. */
  assert_int_equal(
      wk_etcd_find_candidates(f->etcd.endpoint, "/nobody/", 1000, 0, 0, &cand, err, sizeof err),
      WK_ETCD_OK);
  assert_int_equal(cand.n, 0);
  wk_etcd_workers_free(&cand);
  /* An unreachable etcd is an error with a message. */
  assert_int_equal(
      wk_etcd_find_candidates("http://127.0.0.1:1", PREFIX, 500, 0, 0, &cand, err, sizeof err),
      WK_ETCD_E_UNREACHABLE);
  assert_non_null(strstr(err, "127.0.0.1:1"));
}

/* ---- tests: the publisher ---------------------------------------------------------------- */

static void test_register(void **state) {
  fixture *f = *state;
  wk_etcd_publisher_config cfg = base_config(f);
  int fd;
  int dead = free_port(&fd);
  close(fd);
  char eps[160];
  snprintf(eps, sizeof eps, "http://127.0.0.1:%d,%s", dead, f->etcd.endpoint);
  cfg.endpoints = eps; /* the first endpoint is down: the publisher moves on */
  int64_t before = wall_ms();
  f->pub = start_pub(&cfg);
  assert_string_equal(wk_etcd_publisher_key(f->pub), KEY);
  /* Nothing is put before the first heartbeat. */
  sleep_ms(100);
  assert_true(key_absent(f));
  wk_etcd_heartbeat hb = hb_make(8, 1, 2);
  wk_etcd_publisher_update(f->pub, &hb);
  int64_t took = WAIT_FOR(key_exists(f), 3000);
  assert_true(took >= 0);
  fprintf(stderr, "  registered %" PRId64 " ms after the first update\n", took);

  wk_etcd_worker w;
  assert_true(read_worker(f, &w));
  assert_true(w.valid);
  assert_string_equal(w.address, ADDR);
  assert_int_equal(w.task_slots, 8);
  assert_int_equal(w.reserved_slots, 1);
  assert_int_equal(w.running_tasks, 2);
  assert_int_equal(w.free_slots, 5);
  assert_true(w.ready);
  assert_false(w.draining);
  assert_string_equal(w.deployment, "block");
  assert_string_equal(w.service, "worker-test");
  assert_string_equal(w.version, "0.1.0");
  assert_true(w.updated_unix_ms >= before && w.updated_unix_ms <= wall_ms());
  int64_t lease = w.lease;
  wk_etcd_worker_clear(&w);

  /* The exact JSON field names. */
  wk_etcd_kv kv;
  bool found;
  assert_int_equal(wk_etcd_get(f->check, KEY, &kv, &found), WK_ETCD_OK);
  json_t *j = json_loads(kv.value, 0, NULL);
  assert_non_null(j);
  const char *names[] = {"address",    "task_slots", "reserved_slots", "running_tasks",
                         "free_slots", "ready",      "draining",       "deployment",
                         "service",    "version",    "updated_unix_ms"};
  assert_int_equal(json_object_size(j), sizeof names / sizeof names[0]);
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    assert_non_null(json_object_get(j, names[i]));
  }
  json_decref(j);
  wk_etcd_kv_free(&kv);

  /* On a lease of TTL <= 10 s (the default). */
  assert_true(lease != 0);
  int64_t ttl = 0, granted = 0;
  assert_int_equal(wk_etcd_lease_ttl(f->check, lease, &ttl, &granted), WK_ETCD_OK);
  assert_true(ttl > 0 && ttl <= 10);
  assert_int_equal(granted, 10);

  /* The thread records a put just after etcd has it. */
  assert_true(WAIT_FOR(stats(f->pub).registered, 1000) >= 0);
  wk_etcd_publisher_stats s = stats(f->pub);
  assert_true(s.registered);
  assert_int_equal(s.lease_id, lease);
  assert_int_equal(s.lease_grants, 1);
  assert_true(s.puts_ok >= 1);
  assert_int_equal(s.puts_failed, 0);
  assert_string_equal(s.endpoint, f->etcd.endpoint);
}

static void test_update_coalescing(void **state) {
  fixture *f = *state;
  wk_etcd_publisher_config cfg = base_config(f);
  cfg.refresh_interval_ms = 60000; /* no refresh puts during the test */
  f->pub = start_pub(&cfg);
  wk_etcd_heartbeat hb = hb_make(200, 0, 0);
  wk_etcd_publisher_update(f->pub, &hb);
  assert_true(WAIT_FOR(registered_with_running(f, 0), 3000) >= 0);
  sleep_ms(50);
  wk_etcd_publisher_stats s0 = stats(f->pub);

  int64_t t0 = mono_ms();
  for (uint32_t i = 1; i <= 100; i++) {
    hb = hb_make(200, 0, i);
    wk_etcd_publisher_update(f->pub, &hb);
  }
  int64_t burst = mono_ms() - t0;
  int64_t took = WAIT_FOR(registered_with_running(f, 100), 2000);
  assert_true(took >= 0);
  sleep_ms(200); /* any put still to come would come now */
  wk_etcd_publisher_stats s1 = stats(f->pub);
  uint64_t puts = s1.puts_ok - s0.puts_ok;
  fprintf(stderr,
          "  100 updates in %" PRId64 " ms → %" PRIu64 " put(s), visible after %" PRId64 " ms\n",
          burst, puts, took);
  assert_true(puts >= 1 && puts <= 3);
  assert_int_equal(s1.updates - s0.updates, 100);
  assert_true(took <= 500);

  /* Unchanged heartbeats cost nothing. */
  for (int i = 0; i < 50; i++) wk_etcd_publisher_update(f->pub, &hb);
  sleep_ms(150);
  assert_int_equal(stats(f->pub).puts_ok, s1.puts_ok);
}

static void on_published_count(void *ud) { __atomic_add_fetch((int *)ud, 1, __ATOMIC_SEQ_CST); }

/* A heartbeat that turns draining on is put at once (not after coalesce_ms), and the
 * stats say which generation etcd acknowledged, at which revision: the worker waits for
 * exactly that before refusing new work. */
static void test_draining_put_at_once_and_acknowledged(void **state) {
  fixture *f = *state;
  wk_etcd_publisher_config cfg = base_config(f);
  int published = 0;
  cfg.refresh_interval_ms = 60000;
  cfg.coalesce_ms = 1000; /* the longest: an ordinary change waits this long */
  cfg.on_published = on_published_count;
  cfg.on_published_ud = &published;
  f->pub = start_pub(&cfg);
  wk_etcd_heartbeat hb = hb_make(8, 0, 0);
  uint64_t g0 = wk_etcd_publisher_update(f->pub, &hb);
  assert_true(WAIT_FOR(stats(f->pub).put_gen >= g0, 5000) >= 0);
  /* the callback runs after the stats are updated, on the publisher's thread: stats
   * that show the put do not mean it has run yet (under TSan it had not, once) */
  assert_true(WAIT_FOR(__atomic_load_n(&published, __ATOMIC_SEQ_CST) >= 1, 5000) >= 0);

  hb = hb_make(8, 1, 0); /* an ordinary change: coalesced for 1 s */
  uint64_t g1 = wk_etcd_publisher_update(f->pub, &hb);
  hb.draining = true;
  uint64_t g2 = wk_etcd_publisher_update(f->pub, &hb);
  assert_true(g2 > g1 && g1 > g0);
  int64_t took = WAIT_FOR(stats(f->pub).put_gen >= g2, 5000);
  fprintf(stderr, "  draining acknowledged %" PRId64 " ms after the update (coalesce_ms 1000)\n",
          took);
  assert_true(took >= 0 && took < 1000);
  wk_etcd_publisher_stats s = stats(f->pub);
  wk_etcd_kv kv;
  bool found = false;
  assert_int_equal(wk_etcd_get(f->check, KEY, &kv, &found), WK_ETCD_OK);
  assert_true(found);
  assert_non_null(strstr(kv.value, "\"draining\":true"));
  assert_true(s.put_revision > 0);
  assert_int_equal(kv.mod_revision, s.put_revision);
  wk_etcd_kv_free(&kv);
  /* unchanged afterwards: nothing more is due */
  assert_int_equal(wk_etcd_publisher_update(f->pub, &hb), g2);
}

/* Stops the fixture's publisher and forgets it first, so that a failed assertion on
 * the result never has the teardown stop it a second time. */
static int stop_pub(fixture *f, bool deregister) {
  wk_etcd_publisher *p = f->pub;
  f->pub = NULL;
  return wk_etcd_publisher_stop(p, deregister);
}

static void test_stop_deregister(void **state) {
  fixture *f = *state;
  wk_etcd_publisher_config cfg = base_config(f);
  f->pub = start_pub(&cfg);
  wk_etcd_heartbeat hb = hb_make(4, 0, 0);
  wk_etcd_publisher_update(f->pub, &hb);
  assert_true(WAIT_FOR(key_exists(f), 3000) >= 0);
  int64_t lease = stats(f->pub).lease_id;
  assert_true(lease != 0);

  int64_t t0 = mono_ms();
  assert_int_equal(stop_pub(f, true), 0);
  int64_t took = mono_ms() - t0;
  fprintf(stderr, "  stop(deregister) took %" PRId64 " ms\n", took);
  assert_true(took < 2000);
  assert_true(key_absent(f)); /* at once, not after the TTL */
  int64_t ttl;
  assert_int_equal(wk_etcd_lease_ttl(f->check, lease, &ttl, NULL), WK_ETCD_E_LEASE_NOT_FOUND);
}

static void test_expires_without_deregister(void **state) {
  fixture *f = *state;
  /* (a) stop without deregistering: the key lives until its 1 s lease runs out. */
  wk_etcd_publisher_config cfg = base_config(f);
  cfg.lease_ttl_s = 1;
  f->pub = start_pub(&cfg);
  wk_etcd_heartbeat hb = hb_make(4, 0, 0);
  wk_etcd_publisher_update(f->pub, &hb);
  assert_true(WAIT_FOR(key_exists(f), 3000) >= 0);
  sleep_ms(600); /* a keepalive or two have happened */
  assert_true(key_exists(f));
  assert_true(stats(f->pub).keepalives_ok >= 1);
  int64_t t0 = mono_ms();
  assert_int_equal(stop_pub(f, false), 0);
  int64_t gone = WAIT_FOR(key_absent(f), 4000);
  int64_t stop_to_gone = mono_ms() - t0;
  fprintf(stderr, "  TTL 1 s, stop(no deregister): key gone after %" PRId64 " ms\n", stop_to_gone);
  assert_true(gone >= 0);
  assert_true(stop_to_gone <= 2000); /* TTL + 1 s */

  /* (b) a process that dies (SIGKILL) with a publisher on a 2 s lease. */
  pid_t child = fork();
  assert_true(child >= 0);
  if (child == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    cfg.lease_ttl_s = 2;
    char err[256];
    wk_etcd_publisher *p = wk_etcd_publisher_start(&cfg, err, sizeof err);
    if (!p) _exit(1);
    wk_etcd_publisher_update(p, &hb);
    for (;;) pause();
  }
  f->child = child;
  assert_true(WAIT_FOR(key_exists(f), 3000) >= 0);
  int64_t lease = key_lease(f);
  int64_t ttl = 0, granted = 0;
  assert_int_equal(wk_etcd_lease_ttl(f->check, lease, &ttl, &granted), WK_ETCD_OK);
  assert_int_equal(granted, 2);
  sleep_ms(300);
  kill(child, SIGKILL);
  waitpid(child, NULL, 0);
  f->child = 0;
  t0 = mono_ms();
  gone = WAIT_FOR(key_absent(f), 5000);
  stop_to_gone = mono_ms() - t0;
  fprintf(stderr, "  TTL 2 s, SIGKILL: key gone after %" PRId64 " ms\n", stop_to_gone);
  assert_true(gone >= 0);
  assert_true(stop_to_gone <= 3000); /* TTL + 1 s */
}

static void test_key_deleted_comes_back(void **state) {
  fixture *f = *state;
  wk_etcd_publisher_config cfg = base_config(f);
  cfg.refresh_interval_ms = 500;
  f->pub = start_pub(&cfg);
  wk_etcd_heartbeat hb = hb_make(4, 0, 1);
  wk_etcd_publisher_update(f->pub, &hb);
  assert_true(WAIT_FOR(key_exists(f), 3000) >= 0);
  int64_t lease = key_lease(f);
  int64_t deleted = 0;
  assert_int_equal(wk_etcd_delete(f->check, KEY, &deleted), WK_ETCD_OK);
  assert_int_equal(deleted, 1);
  int64_t back = WAIT_FOR(key_exists(f), 2000);
  fprintf(stderr, "  deleted key back after %" PRId64 " ms (refresh 500 ms)\n", back);
  assert_true(back >= 0);
  assert_true(back <= 1000);
  assert_true(registered_with_running(f, 1));
  assert_int_equal(key_lease(f), lease); /* same lease */
}

static void test_etcd_killed_and_restarted(void **state) {
  fixture *f = *state;
  wk_etcd_publisher_config cfg = base_config(f);
  cfg.lease_ttl_s = 2;
  cfg.refresh_interval_ms = 500;
  cfg.request_timeout_ms = 500;
  cfg.backoff_max_ms = 1000;
  f->pub = start_pub(&cfg);
  wk_etcd_heartbeat hb = hb_make(4, 0, 0);
  wk_etcd_publisher_update(f->pub, &hb);
  assert_true(WAIT_FOR(key_exists(f), 3000) >= 0);

  etcd_kill(&f->etcd);
  assert_true(WAIT_FOR(!stats(f->pub).registered, 3000) >= 0);
  /* The caller is never held up while etcd is down. */
  int64_t t0 = mono_ms();
  for (uint32_t i = 0; i < 100; i++) {
    hb = hb_make(4, 0, i % 4);
    wk_etcd_publisher_update(f->pub, &hb);
  }
  assert_true(mono_ms() - t0 < 50);
  hb = hb_make(4, 0, 3);
  wk_etcd_publisher_update(f->pub, &hb);
  sleep_ms(2500); /* longer than the TTL */
  wk_etcd_publisher_stats down = stats(f->pub);
  assert_false(down.registered);
  assert_true(down.puts_failed + down.keepalives_failed >= 2);
  assert_non_null(strstr(down.last_error, f->etcd.endpoint));

  int64_t restart = wall_ms();
  etcd_spawn(&f->etcd); /* same data dir, same ports */
  etcd_wait_ready(&f->etcd);
  int64_t took = WAIT_FOR(registered_after(f, restart) && registered_with_running(f, 3), 5000);
  fprintf(stderr, "  re-registered %" PRId64 " ms after etcd answered again\n", took);
  assert_true(took >= 0);
  assert_true(WAIT_FOR(stats(f->pub).registered, 1000) >= 0); /* the key shows first */
  /* It stays: keepalives work on the (renewed or new) lease. */
  sleep_ms(2500);
  assert_true(key_exists(f));
  int64_t ttl;
  assert_int_equal(wk_etcd_lease_ttl(f->check, key_lease(f), &ttl, NULL), WK_ETCD_OK);
  assert_true(ttl > 0);
}

static void test_etcd_wiped(void **state) {
  fixture *f = *state;
  wk_etcd_publisher_config cfg = base_config(f);
  cfg.lease_ttl_s = 2;
  cfg.refresh_interval_ms = 500;
  cfg.request_timeout_ms = 500;
  cfg.backoff_max_ms = 1000;
  f->pub = start_pub(&cfg);
  wk_etcd_heartbeat hb = hb_make(4, 0, 0);
  wk_etcd_publisher_update(f->pub, &hb);
  assert_true(WAIT_FOR(key_exists(f), 3000) >= 0);
  int64_t lease1 = stats(f->pub).lease_id;

  etcd_kill(&f->etcd);
  rm_tree(f->etcd.data);
  etcd_spawn(&f->etcd); /* a fresh, empty etcd on the same ports */
  etcd_wait_ready(&f->etcd);
  int64_t took = WAIT_FOR(key_exists(f), 5000);
  fprintf(stderr, "  re-registered in a wiped etcd after %" PRId64 " ms\n", took);
  assert_true(took >= 0);
  wk_etcd_publisher_stats s = stats(f->pub);
  assert_true(s.lease_grants >= 2);
  assert_true(s.leases_lost >= 1);
  /* losing the lease is a reason to be unregistered like any failed request: it is said */
  if (!strstr(s.last_error, "lease lost")) fail_msg("last error: '%s'", s.last_error);
  int64_t lease2 = key_lease(f);
  assert_true(lease2 != 0 && lease2 != lease1);
  assert_int_equal(lease2, s.lease_id);
  int64_t ttl;
  assert_int_equal(wk_etcd_lease_ttl(f->check, lease2, &ttl, NULL), WK_ETCD_OK);
  assert_true(ttl > 0 && ttl <= 2);
}

static void test_etcd_down_at_start(void **state) {
  fixture *f = *state; /* etcd prepared, not started */
  wk_etcd_publisher_config cfg = base_config(f);
  cfg.lease_ttl_s = 2;
  cfg.backoff_max_ms = 800;
  f->pub = start_pub(&cfg);
  wk_etcd_heartbeat hb = hb_make(4, 0, 0);
  wk_etcd_publisher_update(f->pub, &hb);
  sleep_ms(700);
  wk_etcd_publisher_stats s = stats(f->pub);
  assert_false(s.registered);
  assert_true(s.lease_grants_failed >= 2); /* retried */
  assert_true(s.lease_grants_failed <= 8); /* with backoff, not in a tight loop */
  assert_non_null(strstr(s.last_error, f->etcd.endpoint));

  etcd_spawn(&f->etcd);
  etcd_wait_ready(&f->etcd);
  int64_t took = WAIT_FOR(key_exists(f), 4000);
  fprintf(stderr, "  registered %" PRId64 " ms after etcd appeared (%" PRIu64 " failed grants)\n",
          took, stats(f->pub).lease_grants_failed);
  assert_true(took >= 0);
  assert_true(WAIT_FOR(stats(f->pub).registered, 1000) >= 0); /* the key shows first */
}

/* libcurl says "Timeout was reached" or "Operation timed out after N ms ..." */
static bool said_timeout(const char *last_error) {
  return strstr(last_error, "imeout") || strstr(last_error, "timed out");
}

static void test_etcd_hung(void **state) {
  fixture *f = *state;
  wk_etcd_publisher_config cfg = base_config(f);
  cfg.lease_ttl_s = 2;
  cfg.refresh_interval_ms = 300;
  cfg.request_timeout_ms = 300;
  cfg.backoff_max_ms = 500;
  f->pub = start_pub(&cfg);
  wk_etcd_heartbeat hb = hb_make(4, 0, 0);
  wk_etcd_publisher_update(f->pub, &hb);
  assert_true(WAIT_FOR(key_exists(f), 3000) >= 0);

  etcd_signal(&f->etcd, SIGSTOP); /* accepts connections, never answers */
  /* Unregistered because a request timed out. (Under load the 2 s lease may also lapse
   * in etcd first: then the publisher says "lease lost" before its next request times
   * out, so wait for the timeout itself, not for the first reason to be unregistered.) */
  assert_true(WAIT_FOR(!stats(f->pub).registered && said_timeout(stats(f->pub).last_error), 5000) >=
              0);
  int64_t t0 = mono_ms();
  hb = hb_make(4, 1, 0);
  wk_etcd_publisher_update(f->pub, &hb);
  wk_etcd_publisher_stats s;
  wk_etcd_publisher_stats_get(f->pub, &s);
  /* update() never waits for etcd: far below one request timeout (300 ms) */
  assert_true(mono_ms() - t0 < 250);
  assert_false(s.registered);

  int64_t resumed = wall_ms();
  etcd_signal(&f->etcd, SIGCONT);
  int64_t took = WAIT_FOR(stats(f->pub).registered && registered_after(f, resumed), 4000);
  fprintf(stderr, "  back %" PRId64 " ms after etcd resumed\n", took);
  assert_true(took >= 0);

  /* Deregistering against a hung etcd is bounded (and reports failure). */
  etcd_signal(&f->etcd, SIGSTOP);
  t0 = mono_ms();
  assert_int_equal(stop_pub(f, true), -1);
  int64_t stop_ms = mono_ms() - t0;
  fprintf(stderr, "  stop(deregister) against a hung etcd took %" PRId64 " ms\n", stop_ms);
  assert_true(stop_ms <= WK_ETCD_PUB_DEREGISTER_BUDGET_MS + 1000); /* + a loaded machine */
  etcd_signal(&f->etcd, SIGCONT);
}

/* ---- workerctl workers (when the binary is built alongside) ------------------------------- */

#ifdef WK_WORKERCTL
static int run_capture(const char *cmd, char *out, size_t len) {
  FILE *p = popen(cmd, "r");
  assert_non_null(p);
  size_t n = fread(out, 1, len - 1, p);
  out[n] = '\0';
  int st = pclose(p);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void test_workerctl_workers(void **state) {
  fixture *f = *state;
  wk_etcd_publisher_config cfg = base_config(f);
  f->pub = start_pub(&cfg);
  wk_etcd_heartbeat hb = hb_make(8, 1, 2);
  wk_etcd_publisher_update(f->pub, &hb);
  assert_true(WAIT_FOR(key_exists(f), 3000) >= 0);
  assert_int_equal(wk_etcd_put(f->check, PREFIX "z:9", "garbage", 7, 0), WK_ETCD_OK);

  char cmd[512], out[4096];
  snprintf(cmd, sizeof cmd, "%s workers --etcd %s --json", WK_WORKERCTL, f->etcd.endpoint);
  assert_int_equal(run_capture(cmd, out, sizeof out), 0);
  char *nl = strchr(out, '\n');
  assert_non_null(nl);
  *nl = '\0';
  json_t *j = json_loads(out, 0, NULL);
  assert_non_null(j);
  assert_string_equal(json_string_value(json_object_get(j, "address")), ADDR);
  assert_string_equal(json_string_value(json_object_get(j, "state")), "ready");
  assert_int_equal(json_integer_value(json_object_get(j, "free_slots")), 5);
  assert_int_equal(json_integer_value(json_object_get(j, "task_slots")), 8);
  assert_int_equal(json_integer_value(json_object_get(j, "running_tasks")), 2);
  json_decref(j);
  j = json_loads(nl + 1, JSON_DISABLE_EOF_CHECK, NULL);
  assert_non_null(j);
  assert_false(json_is_true(json_object_get(j, "valid")));
  json_decref(j);

  setenv("WORKERCTL_ETCD", f->etcd.endpoint, 1);
  snprintf(cmd, sizeof cmd, "%s workers", WK_WORKERCTL);
  assert_int_equal(run_capture(cmd, out, sizeof out), 0);
  unsetenv("WORKERCTL_ETCD");
  fprintf(stderr, "%s", out);
  assert_non_null(strstr(out, "ADDRESS"));
  assert_non_null(strstr(out, ADDR));
  assert_non_null(strstr(out, "5/8"));
  assert_non_null(strstr(out, "invalid"));

  snprintf(cmd, sizeof cmd, "%s workers --etcd http://127.0.0.1:1 2>/dev/null", WK_WORKERCTL);
  assert_int_equal(run_capture(cmd, out, sizeof out), 4);
  snprintf(cmd, sizeof cmd, "%s workers --etcd 127.0.0.1:1 2>/dev/null", WK_WORKERCTL);
  assert_int_equal(run_capture(cmd, out, sizeof out), 2);
}

/* A gRPC server adapter with a canned sink (tests/integration/grpc_server_harness.c:
 * DeployCode answers NOT_FOUND), listening on a free port written to *port. */
static pid_t start_harness(int *port) {
  int fds[2];
  assert_int_equal(pipe(fds), 0);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    dup2(fds[1], 1);
    close(fds[0]);
    close(fds[1]);
    execl(WK_GRPC_HARNESS, WK_GRPC_HARNESS, (char *)NULL);
    _exit(127);
  }
  close(fds[1]);
  FILE *out = fdopen(fds[0], "r");
  assert_non_null(out);
  char line[128];
  *port = 0;
  while (*port == 0 && fgets(line, sizeof line, out)) (void)sscanf(line, "PORT %d", port);
  fclose(out); /* it prints nothing more */
  assert_true(*port > 0);
  return pid;
}

/* workerctl deploy --fleet calls the workers from several threads at once: nothing they
 * share may be written without a lock (the user-agent buffer was: ASan saw a thread copy
 * it half written; ThreadSanitizer, whose options the test passes on, stops workerctl
 * at such a race with its own exit code). Three registrations: two gRPC servers that
 * answer DeployCode NOT_FOUND (a whole call on each thread) and an address nobody
 * listens on. Every call fails, so CURRENT moves nowhere (exit 1), each worker named. */
static void test_workerctl_fleet_deploy_threads(void **state) {
  fixture *f = *state;
  char code_dir[] = "/tmp/wk-fleet-code-XXXXXX";
  assert_non_null(mkdtemp(code_dir));
  char path[160];
  snprintf(path, sizeof path, "%s/main.py", code_dir);
  FILE *fp = fopen(path, "w");
  assert_non_null(fp);
  fputs("def handler(args, ctx):\n    return args\n", fp);
  fclose(fp);
  int ports[3];
  for (int i = 0; i < 3; i++) {
    if (i < 2) {
      f->harness[i] = start_harness(&ports[i]);
    } else {
      int fd;
      ports[i] = free_port(&fd);
      close(fd);
    }
    char key[64], rec[512];
    snprintf(key, sizeof key, PREFIX "127.0.0.1:%d", ports[i]);
    int n = snprintf(rec, sizeof rec,
                     "{\"address\":\"127.0.0.1:%d\",\"task_slots\":4,\"reserved_slots\":0,"
                     "\"running_tasks\":0,\"free_slots\":4,\"ready\":true,\"draining\":false,"
                     "\"deployment\":\"block\",\"service\":\"worker-test\",\"version\":\"0.1.0\","
                     "\"updated_unix_ms\":%" PRId64 "}",
                     ports[i], wall_ms());
    assert_int_equal(wk_etcd_put(f->check, key, rec, (size_t)n, 0), WK_ETCD_OK);
  }
  char cmd[640], out[8192];
  snprintf(cmd, sizeof cmd,
           "%s deploy --fleet --etcd %s --parallel 3 --deadline-ms 2000 fn %s 2>&1", WK_WORKERCTL,
           f->etcd.endpoint, code_dir);
  int rc = run_capture(cmd, out, sizeof out);
  fprintf(stderr, "%s", out);
  assert_null(strstr(out, "Sanitizer"));
  assert_int_equal(rc, 1);
  assert_non_null(strstr(out, "moved nowhere"));
  for (int i = 0; i < 3; i++) {
    char addr[32];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", ports[i]);
    assert_non_null(strstr(out, addr));
  }
  assert_non_null(strstr(out, "NOT_FOUND")); /* the servers answered */
  for (int i = 0; i < 2; i++) {
    kill(f->harness[i], SIGTERM);
    int st = 0;
    waitpid(f->harness[i], &st, 0);
    f->harness[i] = 0;
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  }
  unlink(path);
  rmdir(code_dir);
}
#endif

int main(void) {
  signal(SIGPIPE, SIG_IGN);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_helpers),
      cmocka_unit_test_setup_teardown(test_client_basics, setup_running, teardown),
      cmocka_unit_test_setup_teardown(test_txn_put, setup_running, teardown),
      cmocka_unit_test(test_record_code),
      cmocka_unit_test_setup_teardown(test_candidates, setup_running, teardown),
      cmocka_unit_test_setup_teardown(test_register, setup_running, teardown),
      cmocka_unit_test_setup_teardown(test_update_coalescing, setup_running, teardown),
      cmocka_unit_test_setup_teardown(test_draining_put_at_once_and_acknowledged, setup_running,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_stop_deregister, setup_running, teardown),
      cmocka_unit_test_setup_teardown(test_expires_without_deregister, setup_running, teardown),
      cmocka_unit_test_setup_teardown(test_key_deleted_comes_back, setup_running, teardown),
      cmocka_unit_test_setup_teardown(test_etcd_killed_and_restarted, setup_running, teardown),
      cmocka_unit_test_setup_teardown(test_etcd_wiped, setup_running, teardown),
      cmocka_unit_test_setup_teardown(test_etcd_down_at_start, setup_prepared, teardown),
      cmocka_unit_test_setup_teardown(test_etcd_hung, setup_running, teardown),
#ifdef WK_WORKERCTL
      cmocka_unit_test_setup_teardown(test_workerctl_workers, setup_running, teardown),
      cmocka_unit_test_setup_teardown(test_workerctl_fleet_deploy_threads, setup_running, teardown),
#endif
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

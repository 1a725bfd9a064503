/* fuzz_etcd.c: libFuzzer target for the etcd client's decoding of etcd's answers
 * (src/adapters/wk_etcd.c): the JSON gateway's answers to grant / keepalive / revoke /
 * time-to-live / put / range / delete / txn, the registry values of other Workers
 * (wk_etcd_worker_parse), and base64.
 *
 * The answer parsers are static in wk_etcd.c (request(), parse_kvs(), the bodies of
 * the lease and key calls), so the public calls are driven end to end over a scripted
 * libcurl (fake_curl.c, linked instead of libcurl): each transfer gets the next answer
 * cut from the input. Input:
 *   byte 0   the operation (see `enum op`, modulo OP_COUNT)
 *   byte 1   knobs: bit 0: two endpoints (failover) instead of one; bits 1-7: deliver
 *            bodies in chunks of this many bytes (0: whole); for OP_WORKER_PARSE bit 0
 *            passes a NULL prefix and bit 1 a key outside the prefix
 *   rest     OP_WORKER_PARSE: the registry value; OP_B64: the text; otherwise answers
 *            separated by "\n--\n", each one outcome byte then the HTTP body. Outcome
 *            (byte - '0') % 10: 0 HTTP 200, 1 400, 2 404, 3 500, 4 503, 5 no status,
 *            6 connection refused, 7 timeout after the body, 8 and 9 HTTP 200.
 * Properties checked:
 *   - nothing reads outside its buffers (AddressSanitizer; every body is a separate
 *     allocation of exactly its size, delivered in chunks);
 *   - a call returns OK or one of the errors a server can cause (never INVALID,
 *     ABORTED, TOO_LARGE here), with a message exactly when it failed; it makes at most
 *     one transfer per endpoint;
 *   - what an OK answer yields holds together: a granted lease has an id and a TTL > 0,
 *     a kept-alive one a TTL > 0; every key and value of a range is NUL-terminated at
 *     its length;
 *   - a parsed worker has every string set, `error` set exactly when it is not valid,
 *     and the ranked list holds only eligible workers, most free slots first;
 *   - base64 that decodes re-encodes to text that decodes to the same bytes.
 *
 * Build (Clang): see tests/fuzz/CMakeLists.txt. Run:
 *   ./fuzz_etcd -max_total_time=600 scratch/ tests/fuzz/corpus/etcd   (explore)
 *   ./fuzz_etcd -runs=0 tests/fuzz/corpus/etcd                       (replay)
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "adapters/wk_etcd.h"
#include "adapters/wk_etcd_registry.h"
#include "lib/wk_base64.h"
#include "fake_curl.h"

#include "fuzz_check.h"

enum op {
  OP_WORKER_PARSE,
  OP_B64,
  OP_GRANT,
  OP_KEEPALIVE,
  OP_REVOKE,
  OP_TTL,
  OP_PUT,
  OP_GET,
  OP_RANGE,
  OP_DELETE,
  OP_DELETE_IF_LEASE,
  OP_LIST_WORKERS,
  OP_COUNT
};

#define MAX_ANSWERS 8
#define PREFIX "/workers/"
#define SEP "\n--\n"

static uint8_t *copy(const uint8_t *p, size_t n) {
  uint8_t *c = malloc(n ? n : 1);
  CHECK(c != NULL);
  if (n) memcpy(c, p, n);
  return c;
}

static void check_worker(const wk_etcd_worker *w, const char *key, int64_t lease) {
  CHECK(w->key && strcmp(w->key, key) == 0 && w->lease == lease);
  CHECK(w->address && w->deployment && w->service && w->version);
  CHECK(strnlen(w->error, sizeof w->error) < sizeof w->error);
  CHECK(w->valid == (w->error[0] == '\0'));
  if (wk_etcd_worker_eligible(w, 0, 0)) {
    CHECK(w->valid && w->ready && !w->draining && w->free_slots > 0 && w->address[0]);
  }
}

static void fuzz_worker_parse(uint8_t knobs, const uint8_t *p, size_t n) {
  const char *prefix = (knobs & 1u) ? NULL : PREFIX;
  const char *key = (knobs & 2u) ? "other/10.0.0.9:7070" : PREFIX "10.0.0.1:7070";
  char *value = (char *)copy(p, n);
  wk_etcd_worker w;
  wk_etcd_worker_parse(prefix, key, value, n, 42, &w);
  check_worker(&w, key, 42);
  wk_etcd_worker_clear(&w);
  free(value);
}

static void fuzz_b64(const uint8_t *p, size_t n) {
  char *text = (char *)copy(p, n);
  size_t len = 0;
  char *bytes = wk_base64_decode_alloc(text, n, WK_ETCD_BASE64_FLAGS, &len);
  if (bytes) {
    CHECK(bytes[len] == '\0');
    char *again = wk_base64_encode(bytes, len);
    CHECK(strlen(again) == (len + 2) / 3 * 4);
    size_t len2 = 0;
    char *bytes2 = wk_base64_decode_alloc(again, strlen(again), WK_ETCD_BASE64_FLAGS, &len2);
    CHECK(bytes2 && len2 == len && memcmp(bytes, bytes2, len) == 0);
    free(bytes2);
    free(again);
    free(bytes);
  }
  free(text);
}

static void check_kv(const wk_etcd_kv *kv) {
  CHECK(kv->key && kv->value);
  CHECK(kv->key[kv->key_len] == '\0' && kv->value[kv->value_len] == '\0');
}

/* Runs op against the scripted answers; returns its rc. */
static int run_op(wk_etcd *c, enum op op) {
  int rc = WK_ETCD_OK;
  int64_t a = 0, b = 0;
  switch (op) {
    case OP_GRANT:
      rc = wk_etcd_lease_grant(c, 10, &a, &b);
      if (rc == WK_ETCD_OK) CHECK(a != 0 && b > 0);
      break;
    case OP_KEEPALIVE:
      rc = wk_etcd_lease_keepalive(c, 7, &a);
      if (rc == WK_ETCD_OK) CHECK(a > 0);
      break;
    case OP_REVOKE: rc = wk_etcd_lease_revoke(c, 7); break;
    case OP_TTL:
      rc = wk_etcd_lease_ttl(c, 7, &a, &b);
      if (rc == WK_ETCD_OK) CHECK(a >= 0);
      break;
    case OP_PUT: rc = wk_etcd_put(c, PREFIX "k", "v", 1, 7); break;
    case OP_GET: {
      wk_etcd_kv kv;
      bool found = true;
      rc = wk_etcd_get(c, PREFIX "k", &kv, &found);
      if (rc == WK_ETCD_OK && found) check_kv(&kv);
      if (rc != WK_ETCD_OK) CHECK(!found);
      wk_etcd_kv_free(&kv);
      break;
    }
    case OP_RANGE: {
      wk_etcd_kvs kvs;
      rc = wk_etcd_range_prefix(c, PREFIX, 0, &kvs);
      if (rc == WK_ETCD_OK) {
        for (size_t i = 0; i < kvs.n; i++) check_kv(&kvs.items[i]);
      } else {
        CHECK(kvs.n == 0 && kvs.items == NULL);
      }
      wk_etcd_kvs_free(&kvs);
      break;
    }
    case OP_DELETE: rc = wk_etcd_delete(c, PREFIX "k", &a); break;
    case OP_DELETE_IF_LEASE: rc = wk_etcd_delete_if_lease(c, PREFIX "k", 7, &a); break;
    case OP_LIST_WORKERS: {
      wk_etcd_workers ws;
      rc = wk_etcd_list_workers(c, PREFIX, &ws);
      if (rc != WK_ETCD_OK) {
        CHECK(ws.n == 0);
        wk_etcd_workers_free(&ws);
        break;
      }
      for (size_t i = 0; i < ws.n; i++)
        check_worker(&ws.items[i], ws.items[i].key, ws.items[i].lease);
      size_t kept = wk_etcd_workers_rank(&ws, 1000000, 0, 99);
      CHECK(kept == ws.n);
      for (size_t i = 0; i < kept; i++) {
        CHECK(wk_etcd_worker_eligible(&ws.items[i], 1000000, 0));
        if (i > 0) CHECK(ws.items[i - 1].free_slots >= ws.items[i].free_slots);
      }
      wk_etcd_workers_free(&ws);
      break;
    }
    case OP_WORKER_PARSE:
    case OP_B64:
    case OP_COUNT: break;
  }
  return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 2) return 0;
  enum op op = (enum op)(data[0] % OP_COUNT);
  uint8_t knobs = data[1];
  const uint8_t *rest = data + 2;
  size_t rest_len = size - 2;
  if (op == OP_WORKER_PARSE) {
    fuzz_worker_parse(knobs, rest, rest_len);
    return 0;
  }
  if (op == OP_B64) {
    fuzz_b64(rest, rest_len);
    return 0;
  }

  static const long codes[10] = {200, 400, 404, 500, 503, 0, 0, 200, 200, 200};
  fake_curl_answer answers[MAX_ANSWERS];
  size_t n = 0;
  while (n < MAX_ANSWERS) {
    const uint8_t *end = memmem(rest, rest_len, SEP, strlen(SEP));
    size_t len = end ? (size_t)(end - rest) : rest_len;
    if (len > 0 || end) {
      unsigned sel = len > 0 ? (uint8_t)(rest[0] - '0') % 10u : 0u;
      fake_curl_answer *a = &answers[n++];
      a->result = sel == 6 ? FAKE_CURL_CONNECT : sel == 7 ? FAKE_CURL_TIMEOUT : FAKE_CURL_OK;
      a->http_code = codes[sel];
      a->len = len > 0 ? len - 1 : 0;
      a->body = copy(rest + 1, a->len);
    }
    if (!end) break;
    rest = end + strlen(SEP);
    rest_len -= len + strlen(SEP);
  }
  size_t endpoints = (knobs & 1u) ? 2 : 1;
  fake_curl_script(answers, n, knobs >> 1);

  char err[256];
  wk_etcd *c =
      wk_etcd_new(endpoints == 2 ? "http://etcd-a:2379, http://etcd-b:2379/" : "http://etcd-a:2379",
                  1000, err, sizeof err);
  CHECK(c != NULL);
  int rc = run_op(c, op);
  CHECK(rc == WK_ETCD_OK || rc == WK_ETCD_E_UNREACHABLE || rc == WK_ETCD_E_SERVER ||
        rc == WK_ETCD_E_PROTOCOL || rc == WK_ETCD_E_LEASE_NOT_FOUND);
  CHECK(strcmp(wk_etcd_rc_name(rc), "UNKNOWN") != 0);
  const char *msg = wk_etcd_errmsg(c);
  CHECK((rc == WK_ETCD_OK) == (msg[0] == '\0'));
  CHECK(fake_curl_transfers() >= 1 && fake_curl_transfers() <= endpoints);
  CHECK(strncmp(fake_curl_last_url(), "http://etcd-", 12) == 0);
  wk_etcd_free(c);
  for (size_t i = 0; i < n; i++) free(answers[i].body);
  return 0;
}

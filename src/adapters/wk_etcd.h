/* wk_etcd.h: a small synchronous client of etcd's v3 JSON gateway (etcd 3.4 serves it
 * on the client port): lease grant / keepalive (one round) / revoke / time-to-live,
 * put (optionally on a lease), range by prefix, delete, and a guarded delete (only
 * when the key is still on a given lease). HTTP through libcurl, JSON through jansson;
 * keys and values travel base64-encoded and int64 fields as decimal strings.
 *
 * Endpoints: a comma-separated list of http(s)://host:port. A request goes to the
 * current endpoint; when it cannot be reached (connect failure, timeout, broken
 * answer, HTTP 5xx without an etcd error) the next one is tried, and the one that
 * answered becomes current. Every request is bounded by the client's timeout (per
 * endpoint tried), so a call returns within timeout_ms × number of endpoints.
 *
 * A wk_etcd handle is used by one thread at a time (it owns a curl easy handle that
 * keeps the connection alive between calls). Proxies from the environment are ignored.
 *
 * Errors are negative wk_etcd_rc values; after a failed call wk_etcd_errmsg() holds a
 * line a person can act on ("etcd http://127.0.0.1:2379/v3/kv/put: HTTP 404: etcdserver:
 * requested lease not found"). */
#ifndef WK_ETCD_H
#define WK_ETCD_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum wk_etcd_rc {
  WK_ETCD_OK = 0,
  WK_ETCD_E_INVALID = -1,         /* bad argument (empty key, bad endpoint list, ...) */
  WK_ETCD_E_UNREACHABLE = -2,     /* no endpoint answered (connect failed, timed out) */
  WK_ETCD_E_SERVER = -3,          /* etcd answered an error (HTTP status + its message) */
  WK_ETCD_E_PROTOCOL = -4,        /* the answer was not the JSON we expect */
  WK_ETCD_E_LEASE_NOT_FOUND = -5, /* the lease does not exist (expired, revoked, wiped) */
  WK_ETCD_E_ABORTED = -6,         /* the abort flag (wk_etcd_set_abort) was raised */
  WK_ETCD_E_TOO_LARGE = -7,       /* the answer exceeded WK_ETCD_MAX_RESPONSE_BYTES */
} wk_etcd_rc;

#define WK_ETCD_MAX_RESPONSE_BYTES (64u << 20)
#define WK_ETCD_MAX_ENDPOINTS 16u
#define WK_ETCD_DEFAULT_ENDPOINTS "http://127.0.0.1:2379"
#define WK_ETCD_DEFAULT_PREFIX "/workers/"

/** Name of a wk_etcd_rc ("UNREACHABLE", ...); "UNKNOWN" for other values. */
const char *wk_etcd_rc_name(int rc);

typedef struct wk_etcd wk_etcd;

/** Creates a client for `endpoints` (comma-separated http(s)://host:port, at most
 * WK_ETCD_MAX_ENDPOINTS; blanks around commas are ignored) with a per-request timeout
 * (ms, > 0; the connect timeout is the same bound). Does no I/O. Returns NULL with a
 * message in err when the list is empty, an entry does not start with http:// or
 * https:// or is longer than 256 characters. Free with wk_etcd_free. */
wk_etcd *wk_etcd_new(const char *endpoints, int64_t timeout_ms, char *err, size_t len);
void wk_etcd_free(wk_etcd *c);

/** Changes the per-request timeout (ms, > 0) for the following calls. */
void wk_etcd_set_timeout_ms(wk_etcd *c, int64_t timeout_ms);

/** When *flag becomes true (from any thread) the request in progress stops within a
 * few ms with WK_ETCD_E_ABORTED, and no further endpoint is tried. NULL: none. */
void wk_etcd_set_abort(wk_etcd *c, const atomic_bool *flag);

/** Bounds every following request to end by `deadline_ms` on CLOCK_MONOTONIC (ms;
 * 0: no deadline): each attempt's timeout is clamped to the time left, and once it has
 * passed a call fails at once with UNREACHABLE. */
void wk_etcd_set_deadline(wk_etcd *c, int64_t deadline_ms);

/** CLOCK_MONOTONIC in ms (the clock of wk_etcd_set_deadline). */
int64_t wk_etcd_mono_ms(void);

/** The message of the last failed call ("" after a success). Valid until the next call. */
const char *wk_etcd_errmsg(const wk_etcd *c);

/** The endpoint the last request went to (the current one). */
const char *wk_etcd_endpoint(const wk_etcd *c);

/* ---- leases ---------------------------------------------------------------------- */

/** Grants a lease of ttl_s seconds (etcd rounds it up to its minimum, 1 s on a
 * loopback test cluster). *id gets the lease id, *granted_ttl_s (may be NULL) the TTL
 * etcd granted. Errors: INVALID (ttl_s < 1), UNREACHABLE, SERVER, PROTOCOL, ABORTED. */
int wk_etcd_lease_grant(wk_etcd *c, int64_t ttl_s, int64_t *id, int64_t *granted_ttl_s);

/** One keepalive round for lease id; *ttl_s (may be NULL) gets the renewed TTL.
 * LEASE_NOT_FOUND when etcd's answer has no TTL (the lease is gone: grant a new one
 * and put the keys again). Other errors as for grant. */
int wk_etcd_lease_keepalive(wk_etcd *c, int64_t id, int64_t *ttl_s);

/** Revokes lease id, which deletes every key attached to it. LEASE_NOT_FOUND when
 * it no longer exists. */
int wk_etcd_lease_revoke(wk_etcd *c, int64_t id);

/** The remaining TTL of lease id (*ttl_s) and the TTL it was granted with
 * (*granted_ttl_s, may be NULL). LEASE_NOT_FOUND when it does not exist. */
int wk_etcd_lease_ttl(wk_etcd *c, int64_t id, int64_t *ttl_s, int64_t *granted_ttl_s);

/* ---- keys ------------------------------------------------------------------------ */

typedef struct wk_etcd_kv {
  char *key; /* NUL-terminated (keys and values are bytes; a NUL inside is kept) */
  size_t key_len;
  char *value; /* NUL-terminated */
  size_t value_len;
  int64_t lease;           /* 0 when the key has no lease */
  int64_t create_revision; /* etcd revisions */
  int64_t mod_revision;
} wk_etcd_kv;

typedef struct wk_etcd_kvs {
  wk_etcd_kv *items; /* owned; free with wk_etcd_kvs_free */
  size_t n;
  int64_t revision; /* the store revision of the answer */
} wk_etcd_kvs;

void wk_etcd_kvs_free(wk_etcd_kvs *kvs);

/** Puts key = value, attached to `lease` (0: no lease). LEASE_NOT_FOUND when the lease
 * does not exist. Errors otherwise as for grant. */
int wk_etcd_put(wk_etcd *c, const char *key, const char *value, size_t value_len, int64_t lease);

/** wk_etcd_put that also gives the store revision etcd answered with (the put's
 * mod_revision) in *revision (0 when the answer has none, or on an error). */
int wk_etcd_put_rev(wk_etcd *c, const char *key, const char *value, size_t value_len, int64_t lease,
                    int64_t *revision);

/** Reads one key; *found tells whether it exists, out is filled when it does (free
 * it with wk_etcd_kv_free). */
int wk_etcd_get(wk_etcd *c, const char *key, wk_etcd_kv *out, bool *found);
void wk_etcd_kv_free(wk_etcd_kv *kv);

/** Every key starting with `prefix` ("" for all keys), in key order, at most `limit`
 * (0: no limit). *out is reset first; free it with wk_etcd_kvs_free. */
int wk_etcd_range_prefix(wk_etcd *c, const char *prefix, size_t limit, wk_etcd_kvs *out);

/** Deletes key; *deleted (may be NULL) gets how many keys went (0 or 1). */
int wk_etcd_delete(wk_etcd *c, const char *key, int64_t *deleted);

/** Deletes key only if it is still attached to `lease` (one etcd transaction), so a
 * key re-registered by someone else on another lease is left alone. *deleted (may be
 * NULL) gets 1 when it was deleted, 0 when absent or on another lease. */
int wk_etcd_delete_if_lease(wk_etcd *c, const char *key, int64_t lease, int64_t *deleted);

/* A guard of wk_etcd_txn_put: the key's mod_revision must equal this (0: the key must
 * not exist). */
typedef struct wk_etcd_guard {
  const char *key;
  int64_t mod_revision;
} wk_etcd_guard;

typedef struct wk_etcd_put_op {
  const char *key;
  const char *value;
  size_t value_len;
} wk_etcd_put_op;

/** One etcd transaction: when every guard holds, puts every op (no lease) and sets
 * *succeeded; otherwise changes nothing and clears it. Create-if-absent is a guard of
 * mod_revision 0 on the key put; compare-and-swap a guard of the revision read.
 * INVALID for an empty key or no op; other errors as for put. */
int wk_etcd_txn_put(wk_etcd *c, const wk_etcd_guard *guards, size_t n_guards,
                    const wk_etcd_put_op *ops, size_t n_ops, bool *succeeded);

/* The registry of Workers (reading, ranking) is in wk_etcd_registry.h. */

/* ---- helpers (exposed for tests) --------------------------------------------------- */

/* How keys and values from the gateway are decoded (flags of lib/wk_base64.h, which the
 * user of this macro includes): the standard and the URL-safe alphabets, any number of
 * trailing '='. Keys and values sent are encoded with wk_base64_encode. */
#define WK_ETCD_BASE64_FLAGS WK_BASE64_URL_SAFE

/** The range_end that selects every key starting with prefix (prefix with its last
 * byte < 0xff incremented, trailing 0xff bytes dropped; "\0" for an empty prefix or
 * one of 0xff bytes only, meaning "to the end"). Returns the length written to out
 * (at most prefix_len bytes, or 1). out must hold prefix_len + 1 bytes. */
size_t wk_etcd_prefix_end(const char *prefix, size_t prefix_len, char *out);

#endif

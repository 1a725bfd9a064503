/* wk_etcd.c: the etcd v3 JSON-gateway client (see wk_etcd.h). */
#include "lib/wk_err.h"
#include "adapters/wk_etcd.h"
#include "adapters/wk_etcd_int.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <curl/curl.h>
#include <jansson.h>
#include "lib/wk_alloc.h"
#include "lib/wk_base64.h"
#include "lib/wk_dl.h"

/* libcurl is opened when the first client is made (lib/wk_dl.h), not at start-up: a
 * worker without etcd_endpoints never maps it and its dependencies. fuzz_etcd links a
 * scripted libcurl in its place (WK_LINKED_CURL): there the calls go straight to it. */
#ifndef WK_LINKED_CURL
/* clang-format off */
#define CURL_FNS(X) \
  X(curl_global_init) X(curl_easy_init) X(curl_easy_reset) \
  X(curl_easy_cleanup) X(curl_easy_setopt) X(curl_easy_getinfo) \
  X(curl_easy_strerror) X(curl_multi_init) X(curl_multi_cleanup) \
  X(curl_multi_add_handle) X(curl_multi_remove_handle) X(curl_multi_perform) \
  X(curl_multi_poll) X(curl_multi_info_read) X(curl_slist_append) \
  X(curl_slist_free_all)
/* clang-format on */
static struct { CURL_FNS(WK_DL_FIELD) } curl_fns;
static const char *const curl_names[] = {CURL_FNS(WK_DL_NAME)};
static wk_dl_lib curl_lib = WK_DL_LIB("libcurl.so.4", curl_names, curl_fns);
#undef curl_easy_setopt  /* curl's type-checking macros (typecheck-gcc.h) */
#undef curl_easy_getinfo /* call the function they wrap */
#define curl_global_init (curl_fns.curl_global_init)
#define curl_easy_init (curl_fns.curl_easy_init)
#define curl_easy_reset (curl_fns.curl_easy_reset)
#define curl_easy_cleanup (curl_fns.curl_easy_cleanup)
#define curl_easy_setopt (curl_fns.curl_easy_setopt)
#define curl_easy_getinfo (curl_fns.curl_easy_getinfo)
#define curl_easy_strerror (curl_fns.curl_easy_strerror)
#define curl_multi_init (curl_fns.curl_multi_init)
#define curl_multi_cleanup (curl_fns.curl_multi_cleanup)
#define curl_multi_add_handle (curl_fns.curl_multi_add_handle)
#define curl_multi_remove_handle (curl_fns.curl_multi_remove_handle)
#define curl_multi_perform (curl_fns.curl_multi_perform)
#define curl_multi_poll (curl_fns.curl_multi_poll)
#define curl_multi_info_read (curl_fns.curl_multi_info_read)
#define curl_slist_append (curl_fns.curl_slist_append)
#define curl_slist_free_all (curl_fns.curl_slist_free_all)
#endif

#define POLL_SLICE_MS 50 /* how often a transfer in progress looks at the abort flag */
#define GRPC_DEADLINE_EXCEEDED 4
#define GRPC_NOT_FOUND 5
#define GRPC_UNAVAILABLE 14

struct wk_etcd {
  char *endpoints[WK_ETCD_MAX_ENDPOINTS]; /* without a trailing '/' */
  size_t n_endpoints;
  size_t current;
  int64_t timeout_ms;
  int64_t deadline_ms; /* CLOCK_MONOTONIC; 0: none */
  const atomic_bool *abort_flag;
  CURLM *multi; /* keeps the connection cache between requests */
  CURL *easy;
  struct curl_slist *headers;
  char curl_err[CURL_ERROR_SIZE];
  char err[512];
  /* the answer being received */
  char *resp;
  size_t resp_len, resp_cap;
  bool resp_too_large;
};

const char *wk_etcd_rc_name(int rc) {
  switch (rc) {
    case WK_ETCD_OK: return "OK";
    case WK_ETCD_E_INVALID: return "INVALID";
    case WK_ETCD_E_UNREACHABLE: return "UNREACHABLE";
    case WK_ETCD_E_SERVER: return "SERVER";
    case WK_ETCD_E_PROTOCOL: return "PROTOCOL";
    case WK_ETCD_E_LEASE_NOT_FOUND: return "LEASE_NOT_FOUND";
    case WK_ETCD_E_ABORTED: return "ABORTED";
    case WK_ETCD_E_TOO_LARGE: return "TOO_LARGE";
    default: return "UNKNOWN";
  }
}

/* ---- small helpers ---------------------------------------------------------------- */

__attribute__((format(printf, 2, 3))) static void set_err(wk_etcd *c, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  wk_verrf(c->err, sizeof c->err, fmt, ap);
  va_end(ap);
}

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static char curl_init_err[320]; /* empty: libcurl is loaded and initialised */

static void curl_init(void) {
#ifndef WK_LINKED_CURL
  char why[256];
  if (!wk_dl_load(&curl_lib, why, sizeof why)) {
    wk_errf(curl_init_err, sizeof curl_init_err, "etcd: %s", why);
    return;
  }
#endif
  CURLcode rc = curl_global_init(CURL_GLOBAL_DEFAULT);
  if (rc != CURLE_OK) {
    wk_errf(curl_init_err, sizeof curl_init_err, "etcd: curl_global_init failed: %s",
            curl_easy_strerror(rc));
  }
}

/* ---- keys and ranges ------------------------------------------------------------ */

size_t wk_etcd_prefix_end(const char *prefix, size_t prefix_len, char *out) {
  size_t n = prefix_len;
  while (n > 0 && (unsigned char)prefix[n - 1] == 0xffu) n--;
  if (n == 0) {
    out[0] = '\0';
    return 1;
  }
  memcpy(out, prefix, n);
  out[n - 1] = (char)(unsigned char)((unsigned char)prefix[n - 1] + 1u);
  return n;
}

/* ---- JSON helpers -------------------------------------------------------------------- */

bool wk_etcd__json_i64_field(const json_t *obj, const char *name, int64_t *out) {
  *out = 0;
  const json_t *v = json_object_get(obj, name);
  if (!v || json_is_null(v)) return true;
  if (json_is_integer(v)) {
    *out = (int64_t)json_integer_value(v);
    return true;
  }
  if (!json_is_string(v)) return false;
  const char *s = json_string_value(v);
  if (!*s) return false;
  char *end = NULL;
  errno = 0;
  long long x = strtoll(s, &end, 10);
  if (errno != 0 || *end != '\0') return false;
  *out = (int64_t)x;
  return true;
}

static json_t *json_i64_string(int64_t v) {
  char buf[24];
  snprintf(buf, sizeof buf, "%" PRId64, v);
  return json_string(buf);
}

static json_t *json_b64(const void *data, size_t len) {
  char *t = wk_base64_encode(data, len);
  json_t *j = json_string(t);
  free(t);
  return j;
}

/* ---- client ---------------------------------------------------------------------------- */

wk_etcd *wk_etcd_new(const char *endpoints, int64_t timeout_ms, char *err, size_t len) {
  if (!endpoints || timeout_ms <= 0) {
    wk_errf(err, len, "etcd: no endpoints, or a timeout <= 0");
    return NULL;
  }
  pthread_once(&curl_once, curl_init);
  if (curl_init_err[0]) {
    wk_errf(err, len, "%s", curl_init_err);
    return NULL;
  }
  wk_etcd *c = wk_xcalloc(1, sizeof *c);
  c->timeout_ms = timeout_ms;
  const char *p = endpoints;
  while (*p) {
    size_t n = strcspn(p, ",");
    const char *s = p;
    size_t m = n;
    while (m > 0 && isspace((unsigned char)*s)) {
      s++;
      m--;
    }
    while (m > 0 && isspace((unsigned char)s[m - 1])) m--;
    while (m > 0 && s[m - 1] == '/') m--;
    if (m > 0) {
      bool http = m > 7 && strncmp(s, "http://", 7) == 0;
      bool https = m > 8 && strncmp(s, "https://", 8) == 0;
      if (!http && !https) {
        wk_errf(err, len, "etcd endpoint '%.*s' must look like http://HOST:PORT", (int)m, s);
        wk_etcd_free(c);
        return NULL;
      }
      if (m > 256) {
        wk_errf(err, len, "etcd endpoint '%.40s...' is longer than 256 characters", s);
        wk_etcd_free(c);
        return NULL;
      }
      if (c->n_endpoints == WK_ETCD_MAX_ENDPOINTS) {
        wk_errf(err, len, "etcd: more than %u endpoints", WK_ETCD_MAX_ENDPOINTS);
        wk_etcd_free(c);
        return NULL;
      }
      c->endpoints[c->n_endpoints++] = wk_xstrndup(s, m);
    }
    p += n;
    if (*p == ',') p++;
  }
  if (c->n_endpoints == 0) {
    wk_errf(err, len, "etcd: the endpoint list '%s' is empty", endpoints);
    wk_etcd_free(c);
    return NULL;
  }
  c->multi = curl_multi_init();
  c->easy = curl_easy_init();
  c->headers = curl_slist_append(NULL, "Content-Type: application/json");
  if (!c->multi || !c->easy || !c->headers) abort();
  return c;
}

void wk_etcd_free(wk_etcd *c) {
  if (!c) return;
  for (size_t i = 0; i < c->n_endpoints; i++) free(c->endpoints[i]);
  if (c->easy) curl_easy_cleanup(c->easy);
  if (c->multi) curl_multi_cleanup(c->multi);
  curl_slist_free_all(c->headers);
  free(c->resp);
  free(c);
}

void wk_etcd_set_timeout_ms(wk_etcd *c, int64_t timeout_ms) {
  if (timeout_ms > 0) c->timeout_ms = timeout_ms;
}

void wk_etcd_set_deadline(wk_etcd *c, int64_t deadline_ms) { c->deadline_ms = deadline_ms; }

int64_t wk_etcd_mono_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void wk_etcd_set_abort(wk_etcd *c, const atomic_bool *flag) { c->abort_flag = flag; }

const char *wk_etcd_errmsg(const wk_etcd *c) { return c->err; }

const char *wk_etcd_endpoint(const wk_etcd *c) { return c->endpoints[c->current]; }

static bool aborted(const wk_etcd *c) {
  return c->abort_flag && atomic_load_explicit(c->abort_flag, memory_order_relaxed);
}

static size_t on_data(char *ptr, size_t size, size_t nmemb, void *ud) {
  wk_etcd *c = ud;
  size_t n = size * nmemb;
  if (c->resp_len + n > WK_ETCD_MAX_RESPONSE_BYTES) {
    c->resp_too_large = true;
    return 0; /* makes curl fail the transfer with CURLE_WRITE_ERROR */
  }
  if (c->resp_len + n + 1 > c->resp_cap) {
    size_t cap = c->resp_cap ? c->resp_cap : 4096;
    while (cap < c->resp_len + n + 1) cap *= 2;
    char *r = wk_xrealloc(c->resp, cap);
    c->resp = r;
    c->resp_cap = cap;
  }
  memcpy(c->resp + c->resp_len, ptr, n);
  c->resp_len += n;
  c->resp[c->resp_len] = '\0';
  return n;
}

/* One HTTP POST to one endpoint through the multi handle, polling the abort flag.
 * Returns the curl result; *http_code gets the status (0 if none). */
static CURLcode post_once(wk_etcd *c, const char *url, const char *body, size_t body_len,
                          long *http_code) {
  CURL *e = c->easy;
  curl_easy_reset(e);
  c->resp_len = 0;
  c->resp_too_large = false;
  if (c->resp) c->resp[0] = '\0';
  c->curl_err[0] = '\0';
  int64_t t = c->timeout_ms;
  if (c->deadline_ms > 0) {
    int64_t left = c->deadline_ms - wk_etcd_mono_ms();
    if (left < t) t = left < 1 ? 1 : left;
  }
  long timeout = (long)t;
  curl_easy_setopt(e, CURLOPT_URL, url);
  curl_easy_setopt(e, CURLOPT_POST, 1L);
  curl_easy_setopt(e, CURLOPT_POSTFIELDS, body);
  curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)body_len);
  curl_easy_setopt(e, CURLOPT_HTTPHEADER, c->headers);
  curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, timeout);
  curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, timeout);
  curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(e, CURLOPT_PROXY, ""); /* ignore http_proxy & co. */
  curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_data);
  curl_easy_setopt(e, CURLOPT_WRITEDATA, c);
  curl_easy_setopt(e, CURLOPT_ERRORBUFFER, c->curl_err);
  curl_easy_setopt(e, CURLOPT_USERAGENT, "wk-etcd/0.1");
  curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
  *http_code = 0;

  if (curl_multi_add_handle(c->multi, e) != CURLM_OK) return CURLE_FAILED_INIT;
  CURLcode result = CURLE_OK;
  bool done = false;
  while (!done) {
    int running = 0;
    CURLMcode mc = curl_multi_perform(c->multi, &running);
    if (mc != CURLM_OK) {
      result = CURLE_FAILED_INIT;
      break;
    }
    int queued = 0;
    CURLMsg *msg;
    while ((msg = curl_multi_info_read(c->multi, &queued)) != NULL) {
      if (msg->msg == CURLMSG_DONE && msg->easy_handle == e) {
        result = msg->data.result;
        done = true;
      }
    }
    if (done) break;
    if (running == 0) { /* finished without a message: should not happen */
      result = CURLE_RECV_ERROR;
      break;
    }
    if (aborted(c)) {
      result = CURLE_ABORTED_BY_CALLBACK;
      break;
    }
    mc = curl_multi_poll(c->multi, NULL, 0, POLL_SLICE_MS, NULL);
    if (mc != CURLM_OK) {
      result = CURLE_FAILED_INIT;
      break;
    }
  }
  curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, http_code);
  curl_multi_remove_handle(c->multi, e);
  return result;
}

/* POSTs body (a JSON object, stolen) to path, trying the endpoints in turn from the
 * current one. On WK_ETCD_OK *answer holds the parsed answer (HTTP 200). */
static int request(wk_etcd *c, const char *path, json_t *body, json_t **answer) {
  *answer = NULL;
  c->err[0] = '\0';
  char *text = json_dumps(body, JSON_COMPACT);
  json_decref(body);
  if (!text) abort();
  size_t text_len = strlen(text);
  int rc = WK_ETCD_E_UNREACHABLE;
  for (size_t attempt = 0; attempt < c->n_endpoints; attempt++) {
    if (aborted(c)) {
      set_err(c, "etcd: request to %s aborted (stopping)", path);
      rc = WK_ETCD_E_ABORTED;
      break;
    }
    if (c->deadline_ms > 0 && wk_etcd_mono_ms() >= c->deadline_ms) {
      if (attempt == 0) set_err(c, "etcd: no time left for %s (deadline passed)", path);
      rc = WK_ETCD_E_UNREACHABLE;
      break;
    }
    size_t idx = (c->current + attempt) % c->n_endpoints;
    char url[512];
    snprintf(url, sizeof url, "%s%s", c->endpoints[idx], path);
    long code = 0;
    CURLcode cr = post_once(c, url, text, text_len, &code);
    if (cr == CURLE_ABORTED_BY_CALLBACK) {
      set_err(c, "etcd %s: aborted (stopping)", url);
      rc = WK_ETCD_E_ABORTED;
      break;
    }
    if (cr == CURLE_WRITE_ERROR && c->resp_too_large) {
      set_err(c, "etcd %s: answer larger than %u bytes", url, WK_ETCD_MAX_RESPONSE_BYTES);
      rc = WK_ETCD_E_TOO_LARGE;
      break;
    }
    if (cr != CURLE_OK) {
      set_err(c, "etcd %s: %s", url, c->curl_err[0] ? c->curl_err : curl_easy_strerror(cr));
      if (cr == CURLE_OPERATION_TIMEDOUT) {
        size_t n = strlen(c->err);
        wk_errf(c->err + n, sizeof c->err - n, " (timeout %" PRId64 " ms)", c->timeout_ms);
      }
      rc = WK_ETCD_E_UNREACHABLE;
      continue;
    }
    json_error_t jerr;
    json_t *j = c->resp_len ? json_loadb(c->resp, c->resp_len, 0, &jerr) : NULL;
    if (code == 200) {
      if (!j || !json_is_object(j)) {
        set_err(c, "etcd %s: the answer is not a JSON object: %.80s", url,
                c->resp_len ? c->resp : "(empty)");
        json_decref(j);
        rc = WK_ETCD_E_PROTOCOL;
        break;
      }
      c->current = idx;
      c->err[0] = '\0'; /* an earlier endpoint's failure is not this call's */
      *answer = j;
      rc = WK_ETCD_OK;
      break;
    }
    /* An error status: etcd's gateway answers {"error","message","code"}. */
    const char *msg = NULL;
    int64_t gcode = -1;
    if (j && json_is_object(j)) {
      msg = json_string_value(json_object_get(j, "message"));
      if (!msg) msg = json_string_value(json_object_get(j, "error"));
      if (!wk_etcd__json_i64_field(j, "code", &gcode)) gcode = -1;
    }
    set_err(c, "etcd %s: HTTP %ld: %.300s", url, code,
            msg ? msg : (c->resp_len ? c->resp : "(no body)"));
    bool lease_not_found = gcode == GRPC_NOT_FOUND && msg && strstr(msg, "lease not found");
    bool has_msg = msg != NULL;
    json_decref(j); /* msg pointed into j */
    if (lease_not_found) {
      c->current = idx;
      rc = WK_ETCD_E_LEASE_NOT_FOUND;
      break;
    }
    bool retry_elsewhere =
        gcode == GRPC_UNAVAILABLE || gcode == GRPC_DEADLINE_EXCEEDED || (!has_msg && code >= 500);
    if (retry_elsewhere) {
      rc = WK_ETCD_E_UNREACHABLE;
      continue;
    }
    c->current = idx;
    rc = code == 0 ? WK_ETCD_E_PROTOCOL : WK_ETCD_E_SERVER;
    break;
  }
  free(text);
  return rc;
}

/* ---- leases ------------------------------------------------------------------------ */

int wk_etcd_lease_grant(wk_etcd *c, int64_t ttl_s, int64_t *id, int64_t *granted_ttl_s) {
  if (ttl_s < 1) {
    set_err(c, "etcd lease grant: TTL %" PRId64 " s is not >= 1", ttl_s);
    return WK_ETCD_E_INVALID;
  }
  json_t *ans;
  int rc = request(c, "/v3/lease/grant", json_pack("{s:o}", "TTL", json_i64_string(ttl_s)), &ans);
  if (rc != WK_ETCD_OK) return rc;
  int64_t lid = 0, ttl = 0;
  const char *e = json_string_value(json_object_get(ans, "error"));
  if (e && *e) {
    set_err(c, "etcd lease grant: %s", e);
    json_decref(ans);
    return WK_ETCD_E_SERVER;
  }
  if (!wk_etcd__json_i64_field(ans, "ID", &lid) || !wk_etcd__json_i64_field(ans, "TTL", &ttl) ||
      lid == 0 || ttl <= 0) {
    set_err(c, "etcd lease grant: no lease ID/TTL in the answer");
    json_decref(ans);
    return WK_ETCD_E_PROTOCOL;
  }
  json_decref(ans);
  *id = lid;
  if (granted_ttl_s) *granted_ttl_s = ttl;
  return WK_ETCD_OK;
}

int wk_etcd_lease_keepalive(wk_etcd *c, int64_t id, int64_t *ttl_s) {
  json_t *ans;
  int rc = request(c, "/v3/lease/keepalive", json_pack("{s:o}", "ID", json_i64_string(id)), &ans);
  if (rc != WK_ETCD_OK) return rc;
  /* A streaming RPC through the gateway: {"result":{...}} or {"error":{...}}. */
  const json_t *err = json_object_get(ans, "error");
  if (err) {
    const char *m = json_string_value(json_object_get(err, "message"));
    int64_t gcode = 0;
    (void)wk_etcd__json_i64_field(err, "code", &gcode);
    set_err(c, "etcd lease keepalive %" PRId64 ": %s", id, m ? m : "error");
    json_decref(ans);
    return (gcode == GRPC_NOT_FOUND) ? WK_ETCD_E_LEASE_NOT_FOUND : WK_ETCD_E_SERVER;
  }
  const json_t *res = json_object_get(ans, "result");
  if (!json_is_object(res)) {
    set_err(c, "etcd lease keepalive %" PRId64 ": no result in the answer", id);
    json_decref(ans);
    return WK_ETCD_E_PROTOCOL;
  }
  int64_t ttl = 0;
  if (!wk_etcd__json_i64_field(res, "TTL", &ttl)) {
    set_err(c, "etcd lease keepalive %" PRId64 ": malformed TTL", id);
    json_decref(ans);
    return WK_ETCD_E_PROTOCOL;
  }
  json_decref(ans);
  if (ttl <= 0) {
    set_err(c, "etcd lease %" PRId64 " is gone (keepalive answered without a TTL)", id);
    return WK_ETCD_E_LEASE_NOT_FOUND;
  }
  if (ttl_s) *ttl_s = ttl;
  return WK_ETCD_OK;
}

int wk_etcd_lease_revoke(wk_etcd *c, int64_t id) {
  json_t *ans;
  int rc = request(c, "/v3/lease/revoke", json_pack("{s:o}", "ID", json_i64_string(id)), &ans);
  json_decref(ans);
  return rc;
}

int wk_etcd_lease_ttl(wk_etcd *c, int64_t id, int64_t *ttl_s, int64_t *granted_ttl_s) {
  json_t *ans;
  int rc = request(c, "/v3/lease/timetolive", json_pack("{s:o}", "ID", json_i64_string(id)), &ans);
  if (rc != WK_ETCD_OK) return rc;
  int64_t ttl = 0, granted = 0;
  bool ok = wk_etcd__json_i64_field(ans, "TTL", &ttl) &&
            wk_etcd__json_i64_field(ans, "grantedTTL", &granted);
  json_decref(ans);
  if (!ok) {
    set_err(c, "etcd lease time-to-live %" PRId64 ": malformed answer", id);
    return WK_ETCD_E_PROTOCOL;
  }
  if (ttl < 0) {
    set_err(c, "etcd lease %" PRId64 " does not exist", id);
    return WK_ETCD_E_LEASE_NOT_FOUND;
  }
  *ttl_s = ttl;
  if (granted_ttl_s) *granted_ttl_s = granted;
  return WK_ETCD_OK;
}

/* ---- keys ---------------------------------------------------------------------------- */

void wk_etcd_kv_free(wk_etcd_kv *kv) {
  if (!kv) return;
  free(kv->key);
  free(kv->value);
  memset(kv, 0, sizeof *kv);
}

void wk_etcd_kvs_free(wk_etcd_kvs *kvs) {
  if (!kvs) return;
  for (size_t i = 0; i < kvs->n; i++) wk_etcd_kv_free(&kvs->items[i]);
  free(kvs->items);
  memset(kvs, 0, sizeof *kvs);
}

int wk_etcd_put(wk_etcd *c, const char *key, const char *value, size_t value_len, int64_t lease) {
  return wk_etcd_put_rev(c, key, value, value_len, lease, NULL);
}

int wk_etcd_put_rev(wk_etcd *c, const char *key, const char *value, size_t value_len, int64_t lease,
                    int64_t *revision) {
  if (revision) *revision = 0;
  if (!key || !*key) {
    set_err(c, "etcd put: empty key");
    return WK_ETCD_E_INVALID;
  }
  json_t *body = json_object();
  json_object_set_new(body, "key", json_b64(key, strlen(key)));
  json_object_set_new(body, "value", json_b64(value, value_len));
  if (lease != 0) json_object_set_new(body, "lease", json_i64_string(lease));
  json_t *ans;
  int rc = request(c, "/v3/kv/put", body, &ans);
  if (rc == WK_ETCD_OK && revision &&
      !wk_etcd__json_i64_field(json_object_get(ans, "header"), "revision", revision)) {
    *revision = 0;
  }
  json_decref(ans);
  return rc;
}

static bool decode_field(const json_t *obj, const char *name, char **out, size_t *out_len) {
  const json_t *v = json_object_get(obj, name);
  if (!v) { /* proto3 omits empty bytes */
    *out = wk_xstrdup("");
    *out_len = 0;
    return true;
  }
  if (!json_is_string(v)) return false;
  *out = wk_base64_decode_alloc(json_string_value(v), json_string_length(v), WK_ETCD_BASE64_FLAGS,
                                out_len);
  return *out != NULL;
}

static int parse_kvs(wk_etcd *c, const json_t *ans, wk_etcd_kvs *out) {
  if (!wk_etcd__json_i64_field(json_object_get(ans, "header"), "revision", &out->revision)) {
    out->revision = 0;
  }
  const json_t *arr = json_object_get(ans, "kvs");
  if (!arr) return WK_ETCD_OK;
  if (!json_is_array(arr)) {
    set_err(c, "etcd range: \"kvs\" is not an array");
    return WK_ETCD_E_PROTOCOL;
  }
  size_t n = json_array_size(arr);
  out->items = wk_xcalloc(n ? n : 1, sizeof *out->items);
  for (size_t i = 0; i < n; i++) {
    const json_t *o = json_array_get(arr, i);
    wk_etcd_kv *kv = &out->items[out->n];
    if (!json_is_object(o) || !decode_field(o, "key", &kv->key, &kv->key_len) ||
        !decode_field(o, "value", &kv->value, &kv->value_len) ||
        !wk_etcd__json_i64_field(o, "lease", &kv->lease) ||
        !wk_etcd__json_i64_field(o, "create_revision", &kv->create_revision) ||
        !wk_etcd__json_i64_field(o, "mod_revision", &kv->mod_revision)) {
      wk_etcd_kv_free(kv);
      set_err(c, "etcd range: entry %zu is malformed", i);
      return WK_ETCD_E_PROTOCOL;
    }
    out->n++;
  }
  return WK_ETCD_OK;
}

int wk_etcd_range_prefix(wk_etcd *c, const char *prefix, size_t limit, wk_etcd_kvs *out) {
  memset(out, 0, sizeof *out);
  size_t plen = strlen(prefix);
  char *end = wk_xmalloc(plen + 1);
  size_t elen = wk_etcd_prefix_end(prefix, plen, end);
  json_t *body = json_object();
  if (plen == 0) {
    json_object_set_new(body, "key", json_b64("", 1)); /* "\0": from the first key */
  } else {
    json_object_set_new(body, "key", json_b64(prefix, plen));
  }
  json_object_set_new(body, "range_end", json_b64(end, elen));
  free(end);
  if (limit > 0) json_object_set_new(body, "limit", json_i64_string((int64_t)limit));
  json_t *ans;
  int rc = request(c, "/v3/kv/range", body, &ans);
  if (rc != WK_ETCD_OK) return rc;
  rc = parse_kvs(c, ans, out);
  json_decref(ans);
  if (rc != WK_ETCD_OK) wk_etcd_kvs_free(out);
  return rc;
}

int wk_etcd_get(wk_etcd *c, const char *key, wk_etcd_kv *out, bool *found) {
  memset(out, 0, sizeof *out);
  *found = false;
  if (!key || !*key) {
    set_err(c, "etcd get: empty key");
    return WK_ETCD_E_INVALID;
  }
  json_t *ans;
  int rc = request(c, "/v3/kv/range", json_pack("{s:o}", "key", json_b64(key, strlen(key))), &ans);
  if (rc != WK_ETCD_OK) return rc;
  wk_etcd_kvs kvs = {0};
  rc = parse_kvs(c, ans, &kvs);
  json_decref(ans);
  if (rc != WK_ETCD_OK) {
    wk_etcd_kvs_free(&kvs);
    return rc;
  }
  if (kvs.n > 0) {
    *out = kvs.items[0];
    memset(&kvs.items[0], 0, sizeof kvs.items[0]);
    *found = true;
  }
  wk_etcd_kvs_free(&kvs);
  return WK_ETCD_OK;
}

int wk_etcd_delete(wk_etcd *c, const char *key, int64_t *deleted) {
  if (deleted) *deleted = 0;
  if (!key || !*key) {
    set_err(c, "etcd delete: empty key");
    return WK_ETCD_E_INVALID;
  }
  json_t *ans;
  int rc =
      request(c, "/v3/kv/deleterange", json_pack("{s:o}", "key", json_b64(key, strlen(key))), &ans);
  if (rc != WK_ETCD_OK) return rc;
  int64_t d = 0;
  bool ok = wk_etcd__json_i64_field(ans, "deleted", &d);
  json_decref(ans);
  if (!ok) {
    set_err(c, "etcd delete: malformed \"deleted\"");
    return WK_ETCD_E_PROTOCOL;
  }
  if (deleted) *deleted = d;
  return WK_ETCD_OK;
}

int wk_etcd_delete_if_lease(wk_etcd *c, const char *key, int64_t lease, int64_t *deleted) {
  if (deleted) *deleted = 0;
  if (!key || !*key || lease == 0) {
    set_err(c, "etcd delete: empty key or no lease");
    return WK_ETCD_E_INVALID;
  }
  json_t *body =
      json_pack("{s:[{s:s,s:s,s:o,s:o}],s:[{s:{s:o}}]}", "compare", "result", "EQUAL", "target",
                "LEASE", "key", json_b64(key, strlen(key)), "lease", json_i64_string(lease),
                "success", "request_delete_range", "key", json_b64(key, strlen(key)));
  if (!body) abort();
  json_t *ans;
  int rc = request(c, "/v3/kv/txn", body, &ans);
  if (rc != WK_ETCD_OK) return rc;
  int64_t d = 0;
  if (json_is_true(json_object_get(ans, "succeeded"))) {
    const json_t *r = json_array_get(json_object_get(ans, "responses"), 0);
    if (!wk_etcd__json_i64_field(json_object_get(r, "response_delete_range"), "deleted", &d)) d = 0;
  }
  json_decref(ans);
  if (deleted) *deleted = d;
  return WK_ETCD_OK;
}

int wk_etcd_txn_put(wk_etcd *c, const wk_etcd_guard *guards, size_t n_guards,
                    const wk_etcd_put_op *ops, size_t n_ops, bool *succeeded) {
  *succeeded = false;
  bool bad = n_ops == 0;
  for (size_t i = 0; i < n_guards; i++) bad = bad || !guards[i].key || !*guards[i].key;
  for (size_t i = 0; i < n_ops; i++) bad = bad || !ops[i].key || !*ops[i].key;
  if (bad) {
    set_err(c, "etcd txn: empty key or no put");
    return WK_ETCD_E_INVALID;
  }
  json_t *compare = json_array();
  for (size_t i = 0; i < n_guards; i++) {
    const char *k = guards[i].key;
    json_array_append_new(compare, json_pack("{s:s,s:s,s:o,s:o}", "result", "EQUAL", "target",
                                             "MOD", "key", json_b64(k, strlen(k)), "mod_revision",
                                             json_i64_string(guards[i].mod_revision)));
  }
  json_t *success = json_array();
  for (size_t i = 0; i < n_ops; i++) {
    const char *k = ops[i].key;
    json_array_append_new(
        success, json_pack("{s:{s:o,s:o}}", "request_put", "key", json_b64(k, strlen(k)), "value",
                           json_b64(ops[i].value, ops[i].value_len)));
  }
  json_t *body = json_pack("{s:o,s:o}", "compare", compare, "success", success);
  if (!body) abort();
  json_t *ans;
  int rc = request(c, "/v3/kv/txn", body, &ans);
  if (rc != WK_ETCD_OK) return rc;
  *succeeded = json_is_true(json_object_get(ans, "succeeded"));
  json_decref(ans);
  return WK_ETCD_OK;
}

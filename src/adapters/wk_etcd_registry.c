/* wk_etcd_registry.c: reading the Worker registry in etcd (see wk_etcd_registry.h). */
#include "adapters/wk_etcd_registry.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "adapters/wk_etcd_int.h"
#include "lib/wk_alloc.h"
#include "lib/wk_err.h"

static void code_clear(wk_etcd_worker *w) {
  for (size_t i = 0; i < w->n_code; i++) {
    free(w->code[i].function);
    free(w->code[i].epochs);
  }
  free(w->code);
  w->code = NULL;
  w->n_code = 0;
  w->has_code = false;
}

void wk_etcd_worker_clear(wk_etcd_worker *w) {
  if (!w) return;
  code_clear(w);
  free(w->key);
  free(w->address);
  free(w->deployment);
  free(w->service);
  free(w->version);
  free(w->status_addr);
  memset(w, 0, sizeof *w);
}

void wk_etcd_workers_free(wk_etcd_workers *ws) {
  if (!ws) return;
  for (size_t i = 0; i < ws->n; i++) wk_etcd_worker_clear(&ws->items[i]);
  free(ws->items);
  memset(ws, 0, sizeof *ws);
}

static char *str_field(const json_t *o, const char *name) {
  const char *s = json_string_value(json_object_get(o, name));
  return wk_xstrdup(s ? s : "");
}

/* A uint32 count; false when present and not a non-negative integer that fits. */
static bool u32_field(const json_t *o, const char *name, uint32_t *out) {
  int64_t v = 0;
  if (!wk_etcd__json_i64_field(o, name, &v) || v < 0 || v > (int64_t)UINT32_MAX) return false;
  *out = (uint32_t)v;
  return true;
}

/* A positive epoch number (a JSON integer, or a decimal string as int64 fields travel). */
static bool epoch_value(const json_t *v, uint64_t *out) {
  if (json_is_integer(v) && json_integer_value(v) > 0) {
    *out = (uint64_t)json_integer_value(v);
    return true;
  }
  const char *s = json_string_value(v);
  if (!s || !*s || strlen(s) > 20) return false;
  uint64_t n = 0;
  for (const char *p = s; *p; p++) {
    if (*p < '0' || *p > '9' || n > (UINT64_MAX - 9) / 10) return false;
    n = n * 10 + (uint64_t)(*p - '0');
  }
  *out = n;
  return n > 0;
}

/* One function's {"current":N,"epochs":[{"epoch":N,"digest":"hex"},...]}; false when
 * it is not of that shape. */
static bool parse_code_fn(const char *name, const json_t *v, wk_etcd_code_fn *out) {
  const json_t *epochs = json_object_get(v, "epochs");
  if (!json_is_object(v) || !json_is_array(epochs)) return false;
  uint64_t current = 0;
  const json_t *cur = json_object_get(v, "current");
  if (cur && !json_is_null(cur) && !epoch_value(cur, &current) &&
      !(json_is_integer(cur) && json_integer_value(cur) == 0))
    return false;
  size_t n = json_array_size(epochs);
  wk_etcd_code_epoch *list = wk_xcalloc(n ? n : 1, sizeof *list);
  for (size_t i = 0; i < n; i++) {
    const json_t *e = json_array_get(epochs, i);
    const char *digest = json_string_value(json_object_get(e, "digest"));
    if (!json_is_object(e) || !epoch_value(json_object_get(e, "epoch"), &list[i].epoch) ||
        (digest && strlen(digest) >= sizeof list[i].digest)) {
      free(list);
      return false;
    }
    snprintf(list[i].digest, sizeof list[i].digest, "%s", digest ? digest : "");
  }
  *out = (wk_etcd_code_fn){
      .function = wk_xstrdup(name), .current = current, .epochs = list, .n_epochs = n};
  return true;
}

/* The record's "code" and "code_truncated"; a malformed "code" counts as none (the
 * worker is then a last resort for a pinned epoch, never wrongly excluded). */
static void parse_code(const json_t *j, wk_etcd_worker *out) {
  const json_t *code = json_object_get(j, "code");
  if (!json_is_object(code)) return;
  out->code = wk_xcalloc(json_object_size(code) + 1, sizeof *out->code);
  const char *name;
  const json_t *v;
  json_object_foreach((json_t *)(uintptr_t)code, name, v) {
    if (!parse_code_fn(name, v, &out->code[out->n_code])) {
      code_clear(out);
      return;
    }
    out->n_code++;
  }
  out->has_code = true;
  out->code_truncated = json_is_true(json_object_get(j, "code_truncated"));
}

void wk_etcd_worker_parse(const char *prefix, const char *key, const char *value, size_t value_len,
                          int64_t lease, wk_etcd_worker *out) {
  memset(out, 0, sizeof *out);
  out->key = wk_xstrdup(key);
  out->lease = lease;
  json_error_t jerr;
  json_t *j = json_loadb(value, value_len, 0, &jerr);
  if (!j || !json_is_object(j)) {
    wk_errf(out->error, sizeof out->error, "value is not a JSON object%s%.90s", j ? "" : ": ",
            j ? "" : jerr.text);
    json_decref(j);
    j = json_object();
  } else {
    out->valid = true;
  }
  out->address = str_field(j, "address");
  if (!*out->address) {
    free(out->address);
    size_t plen = prefix ? strlen(prefix) : 0;
    out->address = wk_xstrdup(strncmp(key, prefix ? prefix : "", plen) == 0 ? key + plen : key);
  }
  out->deployment = str_field(j, "deployment");
  out->service = str_field(j, "service");
  out->version = str_field(j, "version");
  out->status_addr = str_field(j, "status_addr");
  if (out->valid) {
    const char *bad = NULL;
    if (!u32_field(j, "task_slots", &out->task_slots)) bad = "task_slots";
    if (!u32_field(j, "reserved_slots", &out->reserved_slots)) bad = "reserved_slots";
    if (!u32_field(j, "running_tasks", &out->running_tasks)) bad = "running_tasks";
    if (!u32_field(j, "free_slots", &out->free_slots)) bad = "free_slots";
    if (!wk_etcd__json_i64_field(j, "updated_unix_ms", &out->updated_unix_ms))
      bad = "updated_unix_ms";
    const json_t *ready = json_object_get(j, "ready");
    const json_t *draining = json_object_get(j, "draining");
    if (!json_is_boolean(ready)) bad = "ready";
    if (draining && !json_is_boolean(draining)) bad = "draining";
    out->ready = json_is_true(ready);
    out->draining = json_is_true(draining);
    if (!json_object_get(j, "task_slots")) bad = "task_slots";
    if (!json_object_get(j, "free_slots")) bad = "free_slots";
    if (bad) {
      out->valid = false;
      wk_errf(out->error, sizeof out->error, "missing or malformed \"%s\"", bad);
    }
  }
  if (out->valid) parse_code(j, out);
  json_decref(j);
}

int wk_etcd_list_workers(wk_etcd *c, const char *prefix, wk_etcd_workers *out) {
  memset(out, 0, sizeof *out);
  wk_etcd_kvs kvs;
  int rc = wk_etcd_range_prefix(c, prefix, 0, &kvs);
  if (rc != WK_ETCD_OK) return rc;
  out->items = wk_xcalloc(kvs.n ? kvs.n : 1, sizeof *out->items);
  for (size_t i = 0; i < kvs.n; i++) {
    const wk_etcd_kv *kv = &kvs.items[i];
    wk_etcd_worker_parse(prefix, kv->key, kv->value, kv->value_len, kv->lease,
                         &out->items[out->n++]);
  }
  wk_etcd_kvs_free(&kvs);
  return WK_ETCD_OK;
}

bool wk_etcd_worker_eligible(const wk_etcd_worker *w, int64_t now_unix_ms, int64_t max_age_ms) {
  if (!w->valid || !w->ready || w->draining || w->free_slots == 0 || !*w->address) return false;
  if (max_age_ms > 0 && now_unix_ms - w->updated_unix_ms > max_age_ms) return false;
  return true;
}

static uint64_t tie_hash(const char *s, uint64_t seed) {
  uint64_t h = 1469598103934665603ull ^ seed; /* FNV-1a, then a final mix */
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    h ^= *p;
    h *= 1099511628211ull;
  }
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  return h;
}

typedef struct ranked {
  wk_etcd_worker w;
  uint64_t tie; /* 0 when ties go by address */
} ranked;

static int cmp_ranked(const void *pa, const void *pb) {
  const ranked *ra = pa, *rb = pb;
  const wk_etcd_worker *a = &ra->w, *b = &rb->w;
  if (a->free_slots != b->free_slots) return a->free_slots > b->free_slots ? -1 : 1;
  if (a->running_tasks != b->running_tasks) return a->running_tasks < b->running_tasks ? -1 : 1;
  if (ra->tie != rb->tie) return ra->tie < rb->tie ? -1 : 1;
  return strcmp(a->address, b->address);
}

size_t wk_etcd_workers_rank(wk_etcd_workers *ws, int64_t now_unix_ms, int64_t max_age_ms,
                            uint64_t tie_seed) {
  ranked *r = wk_xcalloc(ws->n ? ws->n : 1, sizeof *r);
  size_t kept = 0;
  for (size_t i = 0; i < ws->n; i++) {
    if (wk_etcd_worker_eligible(&ws->items[i], now_unix_ms, max_age_ms)) {
      r[kept].w = ws->items[i];
      r[kept].tie = tie_seed ? tie_hash(ws->items[i].address, tie_seed) : 0;
      kept++;
    } else {
      wk_etcd_worker_clear(&ws->items[i]);
    }
  }
  if (kept > 1) qsort(r, kept, sizeof r[0], cmp_ranked);
  for (size_t i = 0; i < kept; i++) ws->items[i] = r[i].w;
  ws->n = kept;
  free(r);
  return kept;
}

int wk_etcd_find_candidates(const char *endpoints, const char *prefix, int64_t timeout_ms,
                            int64_t max_age_ms, uint64_t tie_seed, wk_etcd_workers *out, char *err,
                            size_t len) {
  memset(out, 0, sizeof *out);
  wk_etcd *c = wk_etcd_new(endpoints, timeout_ms, err, len);
  if (!c) return WK_ETCD_E_INVALID;
  int rc = wk_etcd_list_workers(c, prefix ? prefix : WK_ETCD_DEFAULT_PREFIX, out);
  if (rc != WK_ETCD_OK) {
    wk_errf(err, len, "%s", wk_etcd_errmsg(c));
    wk_etcd_free(c);
    return rc;
  }
  wk_etcd_free(c);
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  int64_t now = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
  wk_etcd_workers_rank(out, now, max_age_ms, tie_seed);
  return WK_ETCD_OK;
}

/* ---- the code a worker holds ------------------------------------------------------- */

const wk_etcd_code_fn *wk_etcd_worker_code(const wk_etcd_worker *w, const char *function) {
  for (size_t i = 0; w->has_code && i < w->n_code; i++) {
    if (strcmp(w->code[i].function, function) == 0) return &w->code[i];
  }
  return NULL;
}

wk_etcd_holds wk_etcd_worker_holds(const wk_etcd_worker *w, const char *function, uint64_t epoch) {
  if (!w->has_code) return WK_ETCD_HOLDS_UNKNOWN;
  const wk_etcd_code_fn *f = wk_etcd_worker_code(w, function);
  for (size_t i = 0; f && i < f->n_epochs; i++) {
    if (f->epochs[i].epoch == epoch) return WK_ETCD_HOLDS_YES;
  }
  return w->code_truncated ? WK_ETCD_HOLDS_UNKNOWN : WK_ETCD_HOLDS_NO;
}

size_t wk_etcd_workers_order_for_epoch(wk_etcd_workers *ws, const char *function, uint64_t epoch,
                                       size_t *unknown) {
  if (unknown) *unknown = 0;
  if (epoch == 0) return ws->n;
  wk_etcd_worker *out = wk_xcalloc(ws->n ? ws->n : 1, sizeof *out);
  size_t kept = 0;
  const wk_etcd_holds order[2] = {WK_ETCD_HOLDS_YES, WK_ETCD_HOLDS_UNKNOWN};
  for (size_t k = 0; k < 2; k++) {
    for (size_t i = 0; i < ws->n; i++) {
      if (ws->items[i].key && wk_etcd_worker_holds(&ws->items[i], function, epoch) == order[k]) {
        out[kept++] = ws->items[i];
        ws->items[i] = (wk_etcd_worker){0};
        if (unknown && k == 1) (*unknown)++;
      }
    }
  }
  for (size_t i = 0; i < ws->n; i++) wk_etcd_worker_clear(&ws->items[i]);
  free(ws->items);
  ws->items = out;
  ws->n = kept;
  return kept;
}

uint64_t wk_etcd_workers_max_epoch(const wk_etcd_workers *ws, const char *function) {
  uint64_t max = 0;
  for (size_t i = 0; i < ws->n; i++) {
    const wk_etcd_code_fn *f =
        ws->items[i].valid ? wk_etcd_worker_code(&ws->items[i], function) : NULL;
    for (size_t k = 0; f && k < f->n_epochs; k++) {
      if (f->epochs[k].epoch > max) max = f->epochs[k].epoch;
    }
    if (f && f->current > max) max = f->current;
  }
  return max;
}

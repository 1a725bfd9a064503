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

void wk_etcd_worker_clear(wk_etcd_worker *w) {
  if (!w) return;
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

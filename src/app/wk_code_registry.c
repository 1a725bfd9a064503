/* wk_code_registry.c: the registry's "code" field (see wk_code_registry.h). */
#include "app/wk_code_registry.h"

#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "adapters/wk_code_store.h"
#include "lib/wk_alloc.h"

typedef struct fn_code {
  char *name;
  uint64_t current;
  uint64_t *order; /* CURRENT first (when published), then the rest highest first */
  size_t n;
  size_t kept; /* of order, taken so far */
  char (*digests)[WK_CODE_STORE_DIGEST_HEX + 1];
} fn_code;

static int desc(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return (x < y) - (x > y);
}

static json_t *epoch_entry(const fn_code *f, size_t i) {
  json_t *e = json_object();
  json_object_set_new(e, "epoch", json_integer((json_int_t)f->order[i]));
  json_object_set_new(e, "digest", json_string(f->digests[i]));
  return e;
}

/* Bytes of j's compact text. */
static size_t text_len(const json_t *j) {
  return json_dumpb(j, NULL, 0, JSON_COMPACT | JSON_PRESERVE_ORDER);
}

static int by_epoch_desc(const void *a, const void *b) {
  json_int_t x = json_integer_value(json_object_get(*(json_t *const *)a, "epoch"));
  json_int_t y = json_integer_value(json_object_get(*(json_t *const *)b, "epoch"));
  return (x < y) - (x > y);
}

/* One function's entry with its first `kept` epochs, listed highest first. */
static json_t *fn_entry(const fn_code *f, size_t kept) {
  json_t **v = wk_xcalloc(kept ? kept : 1, sizeof *v);
  for (size_t i = 0; i < kept; i++) v[i] = epoch_entry(f, i);
  qsort(v, kept, sizeof *v, by_epoch_desc);
  json_t *arr = json_array();
  for (size_t i = 0; i < kept; i++) json_array_append_new(arr, v[i]);
  free(v);
  json_t *o = json_object();
  json_object_set_new(o, "current", json_integer((json_int_t)f->current));
  json_object_set_new(o, "epochs", arr);
  return o;
}

static void load_fn(const char *root, fn_code *f) {
  char err[256];
  size_t count = 0;
  if (wk_code_store_list(root, f->name, NULL, 0, &count, &f->current, err, sizeof err) != 0) return;
  uint64_t *all = wk_xcalloc(count ? count : 1, sizeof *all);
  size_t got = 0;
  if (wk_code_store_list(root, f->name, all, count, &got, &f->current, err, sizeof err) != 0)
    got = 0;
  if (got > count) got = count;
  qsort(all, got, sizeof *all, desc);
  /* CURRENT first: the epoch unpinned tasks get must be listed if anything is */
  for (size_t i = 0; i < got; i++) {
    if (all[i] == f->current && i > 0) {
      memmove(all + 1, all, i * sizeof *all);
      all[0] = f->current;
      break;
    }
  }
  f->order = all;
  f->n = got;
  f->digests = wk_xcalloc(got ? got : 1, sizeof *f->digests);
  for (size_t i = 0; i < got; i++) {
    if (wk_code_store_digest(root, f->name, all[i], f->digests[i]) != 0) f->digests[i][0] = '\0';
  }
}

char *wk_code_registry_build(const char *root, size_t max_bytes, bool *truncated) {
  *truncated = false;
  char **names = NULL;
  size_t n = 0;
  char err[256];
  if (max_bytes < 2) max_bytes = 2;
  if (wk_code_store_functions(root, &names, &n, err, sizeof err) != 0) n = 0;
  fn_code *fns = wk_xcalloc(n ? n : 1, sizeof *fns);
  for (size_t i = 0; i < n; i++) {
    fns[i].name = names[i];
    load_fn(root, &fns[i]);
  }
  /* Round r gives every function its r-th epoch while the text stays within the bound;
   * sizes are counted piece by piece (each piece's own text, plus its comma). */
  size_t used = 2; /* {} */
  bool room = true;
  for (size_t round = 0; room; round++) {
    bool any = false;
    for (size_t i = 0; i < n && room; i++) {
      fn_code *f = &fns[i];
      if (f->kept != round || round >= f->n) continue;
      size_t cost;
      if (round == 0) { /* "name":{"current":C,"epochs":[{...}]} and a comma */
        json_t *one = json_object();
        json_object_set_new(one, f->name, fn_entry(f, 1));
        cost = text_len(one) - 2 + (used > 2 ? 1 : 0);
        json_decref(one);
      } else { /* {...} and a comma */
        json_t *e = epoch_entry(f, round);
        cost = text_len(e) + 1;
        json_decref(e);
      }
      if (used + cost > max_bytes) {
        room = false;
        break;
      }
      used += cost;
      f->kept++;
      any = true;
    }
    if (!any) break;
  }
  json_t *code = json_object();
  for (size_t i = 0; i < n; i++) {
    if (fns[i].kept < fns[i].n) *truncated = true;
    if (fns[i].kept > 0) json_object_set_new(code, fns[i].name, fn_entry(&fns[i], fns[i].kept));
  }
  char *text = json_dumps(code, JSON_COMPACT | JSON_PRESERVE_ORDER);
  json_decref(code);
  if (!text || strlen(text) > max_bytes) { /* never expected: the count above is exact */
    free(text);
    text = wk_xstrdup("{}");
    *truncated = n > 0;
  }
  for (size_t i = 0; i < n; i++) {
    free(fns[i].name);
    free(fns[i].order);
    free(fns[i].digests);
  }
  free(fns);
  free(names);
  return text;
}

/* wk_digest.c: see wk_digest.h. */
#include "adapters/wk_digest.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "lib/wk_alloc.h"
#include "lib/wk_hash.h"

#define DIGEST_SEED 0xd1e5u

/* A map entry's key and where it arrived. */
typedef struct keyed {
  const char *key;
  size_t at;
} keyed;

static int by_key_then_arrival(const void *a, const void *b) {
  const keyed *x = a, *y = b;
  int c = strcmp(x->key, y->key);
  if (c) return c;
  return x->at < y->at ? -1 : x->at > y->at;
}

/* The canonical order of n map entries with keys[i]: indices sorted by key, one per
 * key (the last to arrive). Writes them to order; returns how many. */
static size_t canonical_order(const char *const *keys, size_t n, size_t *order) {
  keyed *k = wk_xcalloc(n ? n : 1, sizeof *k);
  for (size_t i = 0; i < n; i++) k[i] = (keyed){keys[i] ? keys[i] : "", i};
  qsort(k, n, sizeof *k, by_key_then_arrival);
  size_t m = 0;
  for (size_t i = 0; i < n; i++) {
    if (i + 1 < n && strcmp(k[i].key, k[i + 1].key) == 0) continue; /* a later one wins */
    order[m++] = k[i].at;
  }
  free(k);
  return m;
}

/* The entries of a protobuf-c map field (n pointers to entry messages whose key is at
 * key_offset) in canonical order, as a new array of the same pointers; *n becomes its
 * count. The caller frees the array. */
static void **canonical_entries(void *const *entries, size_t *n, size_t key_offset) {
  const char **keys = wk_xcalloc(*n ? *n : 1, sizeof *keys);
  size_t *order = wk_xcalloc(*n ? *n : 1, sizeof *order);
  for (size_t i = 0; i < *n; i++) {
    memcpy(&keys[i], (const char *)entries[i] + key_offset, sizeof keys[i]);
  }
  size_t m = canonical_order(keys, *n, order);
  void **out = wk_xcalloc(m ? m : 1, sizeof *out);
  for (size_t i = 0; i < m; i++) out[i] = entries[order[i]];
  free(keys);
  free(order);
  *n = m;
  return out;
}

#define CANONICAL(type, field, n) \
  ((type **)canonical_entries((void *const *)(field), &(n), offsetof(type, key)))

uint64_t wk_submit_digest(const Worker__V1__SubmitTaskRequest *req) {
  Worker__V1__SubmitTaskRequest copy = *req;
  copy.slot_id = 0;
  copy.labels = CANONICAL(Worker__V1__SubmitTaskRequest__LabelsEntry, req->labels, copy.n_labels);
  Worker__V1__FunctionCallConfig fn;
  Worker__V1__FunctionCallConfig__OptionsEntry **fn_opts = NULL;
  ProtobufCBinaryData args = {0, NULL};
  if (req->function) {
    fn = *req->function;
    /* the args (the bulk of a large request) are hashed where they lie, not packed
     * again: the rest is packed without them, and its hash seeds theirs */
    args = fn.args;
    fn.args = (ProtobufCBinaryData){0, NULL};
    fn_opts = CANONICAL(Worker__V1__FunctionCallConfig__OptionsEntry, req->function->options,
                        fn.n_options);
    fn.options = fn_opts;
    copy.function = &fn;
  }
  Worker__V1__ResultHandler rh;
  Worker__V1__ResultHandler__OptionsEntry **rh_opts = NULL;
  if (req->result_handler) {
    rh = *req->result_handler;
    rh_opts = CANONICAL(Worker__V1__ResultHandler__OptionsEntry, req->result_handler->options,
                        rh.n_options);
    rh.options = rh_opts;
    copy.result_handler = &rh;
  }
  size_t n = worker__v1__submit_task_request__get_packed_size(&copy);
  uint8_t *p = wk_xmalloc(n ? n : 1);
  worker__v1__submit_task_request__pack(&copy, p);
  uint64_t h = wk_hash64(p, n, DIGEST_SEED);
  h = wk_hash64(args.len ? args.data : (const uint8_t *)"", args.len, h);
  free(p);
  free(copy.labels);
  free(fn_opts);
  free(rh_opts);
  return h;
}

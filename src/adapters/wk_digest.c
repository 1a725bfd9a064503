/* wk_digest.c: see wk_digest.h. */
#include "adapters/wk_digest.h"

#include <stdbool.h>
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

/* Map entries up to this many are put in order on the stack (every request the
 * validator lets through: WK_LABELS_MAX, WK_OPTIONS_MAX); more, on the heap. */
#define STACK_ENTRIES 64u

/* The canonical order of n map entries with keys[i]: indices sorted by key, one per
 * key (the last to arrive). Writes them to order; returns how many. */
static size_t canonical_order(const char *const *keys, size_t n, size_t *order) {
  keyed stack[STACK_ENTRIES];
  keyed *k = n <= STACK_ENTRIES ? stack : wk_xcalloc(n, sizeof *k);
  for (size_t i = 0; i < n; i++) k[i] = (keyed){keys[i] ? keys[i] : "", i};
  qsort(k, n, sizeof *k, by_key_then_arrival);
  size_t m = 0;
  for (size_t i = 0; i < n; i++) {
    if (i + 1 < n && strcmp(k[i].key, k[i + 1].key) == 0) continue; /* a later one wins */
    order[m++] = k[i].at;
  }
  if (k != stack) free(k);
  return m;
}

/* The entries of a protobuf-c map field (n pointers to entry messages whose key is at
 * key_offset) in canonical order, into `out` (room for *n); *n becomes their count. */
static void canonical_entries(void *const *entries, size_t *n, size_t key_offset, void **out) {
  if (*n <= 1) { /* nothing to order or to drop */
    if (*n) out[0] = entries[0];
    return;
  }
  const char *keys_stack[STACK_ENTRIES];
  size_t order_stack[STACK_ENTRIES];
  bool heap = *n > STACK_ENTRIES;
  const char **keys = heap ? wk_xcalloc(*n, sizeof *keys) : keys_stack;
  size_t *order = heap ? wk_xcalloc(*n, sizeof *order) : order_stack;
  for (size_t i = 0; i < *n; i++) {
    memcpy(&keys[i], (const char *)entries[i] + key_offset, sizeof keys[i]);
  }
  size_t m = canonical_order(keys, *n, order);
  for (size_t i = 0; i < m; i++) out[i] = entries[order[i]];
  if (heap) {
    free(keys);
    free(order);
  }
  *n = m;
}

/* A map field's entries in canonical order: in `stack` (STACK_ENTRIES pointers) when
 * they fit, else in a new array the caller frees (when the result is not `stack`). */
static void **canonical(void *const *entries, size_t *n, size_t key_offset, void **stack) {
  void **out = *n <= STACK_ENTRIES ? stack : wk_xcalloc(*n, sizeof *out);
  canonical_entries(entries, n, key_offset, out);
  return out;
}

#define CANONICAL(type, field, n, stack) \
  ((type **)canonical((void *const *)(field), &(n), offsetof(type, key), (void **)(stack)))

static void free_unless(void *p, void *stack) {
  if (p != stack) free(p);
}

uint64_t wk_submit_digest(const Worker__V1__SubmitTaskRequest *req) {
  Worker__V1__SubmitTaskRequest copy = *req;
  copy.slot_id = 0;
  void *labels_stack[STACK_ENTRIES], *fn_stack[STACK_ENTRIES], *rh_stack[STACK_ENTRIES];
  copy.labels = CANONICAL(Worker__V1__SubmitTaskRequest__LabelsEntry, req->labels, copy.n_labels,
                          labels_stack);
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
                        fn.n_options, fn_stack);
    fn.options = fn_opts;
    copy.function = &fn;
  }
  Worker__V1__ResultHandler rh;
  Worker__V1__ResultHandler__OptionsEntry **rh_opts = NULL;
  if (req->result_handler) {
    rh = *req->result_handler;
    rh_opts = CANONICAL(Worker__V1__ResultHandler__OptionsEntry, req->result_handler->options,
                        rh.n_options, rh_stack);
    rh.options = rh_opts;
    copy.result_handler = &rh;
  }
  size_t n = worker__v1__submit_task_request__get_packed_size(&copy);
  uint8_t packed_stack[1024];
  uint8_t *p = n <= sizeof packed_stack ? packed_stack : wk_xmalloc(n);
  worker__v1__submit_task_request__pack(&copy, p);
  uint64_t h = wk_hash64(p, n, DIGEST_SEED);
  h = wk_hash64(args.len ? args.data : (const uint8_t *)"", args.len, h);
  free_unless(p, packed_stack);
  free_unless(copy.labels, labels_stack);
  if (fn_opts) free_unless(fn_opts, fn_stack);
  if (rh_opts) free_unless(rh_opts, rh_stack);
  return h;
}

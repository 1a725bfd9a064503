/* Unit tests of the idempotency digest (src/adapters/wk_digest.c): a canonical form,
 * so map entry order and slot_id never change it, and every other difference does. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "adapters/wk_digest.h"

#define MAX_ENTRIES 8

/* A request with labels, function options and result handler options given as
 * "k=v" strings in arrival order. */
typedef struct fixture {
  Worker__V1__SubmitTaskRequest req;
  Worker__V1__FunctionCallConfig fn;
  Worker__V1__ResultHandler rh;
  Worker__V1__SubmitTaskRequest__LabelsEntry labels[MAX_ENTRIES], *label_ptrs[MAX_ENTRIES];
  Worker__V1__FunctionCallConfig__OptionsEntry fopts[MAX_ENTRIES], *fopt_ptrs[MAX_ENTRIES];
  Worker__V1__ResultHandler__OptionsEntry ropts[MAX_ENTRIES], *ropt_ptrs[MAX_ENTRIES];
} fixture;

typedef struct kv {
  const char *k, *v;
} kv;

static void make(fixture *f, const kv *labels, size_t nl, const kv *fopts, size_t nf,
                 const kv *ropts, size_t nr) {
  *f = (fixture){0};
  worker__v1__submit_task_request__init(&f->req);
  worker__v1__function_call_config__init(&f->fn);
  worker__v1__result_handler__init(&f->rh);
  f->req.task_id = (char *)(uintptr_t) "t1";
  f->fn.name = (char *)(uintptr_t) "echo";
  f->fn.type = (char *)(uintptr_t) "map";
  f->fn.args = (ProtobufCBinaryData){3, (uint8_t *)(uintptr_t) "[1]"};
  f->rh.type = (char *)(uintptr_t) "file";
  f->req.function = &f->fn;
  f->req.result_handler = &f->rh;
  for (size_t i = 0; i < nl; i++) {
    worker__v1__submit_task_request__labels_entry__init(&f->labels[i]);
    f->labels[i].key = (char *)(uintptr_t)labels[i].k;
    f->labels[i].value = (char *)(uintptr_t)labels[i].v;
    f->label_ptrs[i] = &f->labels[i];
  }
  for (size_t i = 0; i < nf; i++) {
    worker__v1__function_call_config__options_entry__init(&f->fopts[i]);
    f->fopts[i].key = (char *)(uintptr_t)fopts[i].k;
    f->fopts[i].value = (char *)(uintptr_t)fopts[i].v;
    f->fopt_ptrs[i] = &f->fopts[i];
  }
  for (size_t i = 0; i < nr; i++) {
    worker__v1__result_handler__options_entry__init(&f->ropts[i]);
    f->ropts[i].key = (char *)(uintptr_t)ropts[i].k;
    f->ropts[i].value = (char *)(uintptr_t)ropts[i].v;
    f->ropt_ptrs[i] = &f->ropts[i];
  }
  f->req.labels = f->label_ptrs;
  f->req.n_labels = nl;
  f->fn.options = f->fopt_ptrs;
  f->fn.n_options = nf;
  f->rh.options = f->ropt_ptrs;
  f->rh.n_options = nr;
}

#define N(a) (sizeof(a) / sizeof((a)[0]))

static void test_map_order_does_not_matter(void **state) {
  (void)state;
  kv l1[] = {{"team", "a"}, {"env", "prod"}, {"run", "7"}};
  kv l2[] = {{"run", "7"}, {"team", "a"}, {"env", "prod"}};
  kv f1[] = {{"items", "data"}, {"x", "1"}};
  kv f2[] = {{"x", "1"}, {"items", "data"}};
  kv r1[] = {{"name", "out"}, {"y", "2"}};
  kv r2[] = {{"y", "2"}, {"name", "out"}};
  fixture a, b;
  make(&a, l1, N(l1), f1, N(f1), r1, N(r1));
  make(&b, l2, N(l2), f2, N(f2), r2, N(r2));
  assert_int_equal(wk_submit_digest(&a.req), wk_submit_digest(&b.req));
  b.req.slot_id = 42; /* a retry naming the slot it was given */
  assert_int_equal(wk_submit_digest(&a.req), wk_submit_digest(&b.req));
  /* the request itself is left as it arrived */
  assert_string_equal(b.req.labels[0]->key, "run");
  assert_int_equal(b.req.slot_id, 42);
}

static void test_every_other_difference_matters(void **state) {
  (void)state;
  kv l1[] = {{"team", "a"}, {"env", "prod"}};
  kv l2[] = {{"team", "b"}, {"env", "prod"}};
  kv l3[] = {{"team", "a"}};
  kv f1[] = {{"items", "data"}};
  kv f2[] = {{"items", "other"}};
  fixture a, b;
  make(&a, l1, N(l1), f1, N(f1), NULL, 0);
  uint64_t d = wk_submit_digest(&a.req);
  make(&b, l2, N(l2), f1, N(f1), NULL, 0);
  assert_int_not_equal(d, wk_submit_digest(&b.req));
  make(&b, l3, N(l3), f1, N(f1), NULL, 0);
  assert_int_not_equal(d, wk_submit_digest(&b.req));
  make(&b, l1, N(l1), f2, N(f2), NULL, 0);
  assert_int_not_equal(d, wk_submit_digest(&b.req));
  make(&b, l1, N(l1), NULL, 0, f1, N(f1)); /* the same entry in the other map */
  assert_int_not_equal(d, wk_submit_digest(&b.req));
  make(&b, l1, N(l1), f1, N(f1), NULL, 0);
  b.req.timeout_ms = 5;
  assert_int_not_equal(d, wk_submit_digest(&b.req));
}

/* A key sent twice: protobuf keeps the last value, and so does the digest. */
static void test_repeated_key_last_wins(void **state) {
  (void)state;
  kv twice[] = {{"env", "dev"}, {"team", "a"}, {"env", "prod"}};
  kv once[] = {{"team", "a"}, {"env", "prod"}};
  kv other[] = {{"team", "a"}, {"env", "dev"}};
  fixture a, b;
  make(&a, twice, N(twice), NULL, 0, NULL, 0);
  make(&b, once, N(once), NULL, 0, NULL, 0);
  assert_int_equal(wk_submit_digest(&a.req), wk_submit_digest(&b.req));
  make(&b, other, N(other), NULL, 0, NULL, 0);
  assert_int_not_equal(wk_submit_digest(&a.req), wk_submit_digest(&b.req));
}

static void test_absent_parts(void **state) {
  (void)state;
  fixture a, b;
  make(&a, NULL, 0, NULL, 0, NULL, 0);
  make(&b, NULL, 0, NULL, 0, NULL, 0);
  a.req.result_handler = NULL;
  assert_int_not_equal(wk_submit_digest(&a.req), wk_submit_digest(&b.req));
  a.req.function = NULL;
  assert_int_equal(wk_submit_digest(&a.req), wk_submit_digest(&a.req));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_map_order_does_not_matter),
      cmocka_unit_test(test_every_other_difference_matters),
      cmocka_unit_test(test_repeated_key_last_wins),
      cmocka_unit_test(test_absent_parts),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

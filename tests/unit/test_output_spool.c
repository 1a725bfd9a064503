/* The outputs spool (src/app/wk_output_spool.c) against a real file: records put in any
 * order come back in call order through the writers' iterator, across buffer
 * boundaries and for records larger than the buffer; calls without an output are
 * skipped; the file is removed on destroy; an unwritable spool says why. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "app/wk_output_spool.h"
#include "app/wk_task_runtime.h"
#include "plugins/wk_writers_int.h"

static char dir[] = "/tmp/wk-spool-test-XXXXXX";

static int setup(void **state) {
  (void)state;
  assert_non_null(mkdtemp(dir));
  return 0;
}

static int teardown(void **state) {
  (void)state;
  rmdir(dir);
  return 0;
}

/* Call i's output: a JSON string of `size` bytes of one letter. */
static void encode(uint32_t i, size_t size, wk_buf *out) {
  char *v = malloc(size + 2);
  v[0] = '"';
  memset(v + 1, 'a' + (int)(i % 26), size);
  v[size + 1] = '"';
  wk_call_outcome o = {.status = WK_CALL_OK,
                       .content_type = WK_FRAME_CONTENT_JSON,
                       .output = {(const uint8_t *)v, (uint32_t)(size + 2)}};
  wk_buf_clear(out);
  wk_task_rt_encode_output(i, &o, out, NULL, 0);
  free(v);
}

static size_t size_of(uint32_t i) {
  return i == 7 ? 3 * WK_OUTPUT_SPOOL_BUFFER
                : 1000 + (i * 37) % 3000; /* one larger than the buffer */
}

static void test_records_come_back_in_call_order(void **state) {
  (void)state;
  char path[64], err[256];
  snprintf(path, sizeof path, "%s/t.outputs", dir);
  wk_output_spool *s = wk_output_spool_create(path, err, sizeof err);
  assert_non_null(s);
  enum { N = 600 };
  wk_output_spool_set_calls(s, N);
  wk_buf rec = {0};
  uint64_t bytes = 0;
  /* arrival order: odd calls backwards, then even ones; call 10 never answers */
  for (int pass = 0; pass < 2; pass++) {
    for (int k = 0; k < N; k++) {
      uint32_t i = pass == 0 ? (uint32_t)(N - 1 - k) : (uint32_t)k;
      if ((i % 2 == 1) != (pass == 0) || i == 10) continue;
      encode(i, size_of(i), &rec);
      bytes += rec.len;
      assert_int_equal(wk_output_spool_put(s, i, rec.data, rec.len, err, sizeof err), 0);
    }
  }
  assert_int_equal(wk_output_spool_count(s), N - 1);
  assert_int_equal(wk_output_spool_bytes(s), bytes);
  assert_int_equal(wk_output_spool_finish(s, err, sizeof err), 0);

  wk_output_source src = wk_output_spool_source(s);
  wk_writer_task t = {.task_id = "t", .source = &src};
  wk_output_iter it;
  wk_output_iter_init(&it, &t);
  uint32_t index, want = 0;
  int more;
  while ((more = wk_output_iter_next(&it, &rec, &index, err, sizeof err)) == 1) {
    if (want == 10) want++;
    assert_int_equal(index, want);
    /* {"task_id":"t","index":i,"ok":true,"value":"aaa...","content_type":"json"} */
    const char *v = strstr((const char *)rec.data, "\"value\":\"");
    assert_non_null(v);
    v += 9;
    size_t n = size_of(want);
    for (size_t k = 0; k < n; k++) assert_int_equal(v[k], 'a' + (int)(want % 26));
    assert_int_equal(v[n], '"');
    want++;
  }
  assert_int_equal(more, 0);
  assert_int_equal(want, N);
  wk_buf_free(&rec);

  struct stat st;
  assert_int_equal(stat(path, &st), 0);
  wk_output_spool_destroy(s);
  assert_int_not_equal(stat(path, &st), 0); /* removed */
}

static void test_create_refuses_an_existing_file_and_says_why(void **state) {
  (void)state;
  char path[64], err[256];
  snprintf(path, sizeof path, "%s/nodir/t.outputs", dir);
  assert_null(wk_output_spool_create(path, err, sizeof err));
  assert_non_null(strstr(err, "cannot create the outputs spool"));
  assert_non_null(strstr(err, path));
  snprintf(path, sizeof path, "%s/t.outputs", dir);
  wk_output_spool *s = wk_output_spool_create(path, err, sizeof err);
  assert_non_null(s);
  assert_null(wk_output_spool_create(path, err, sizeof err)); /* O_EXCL */
  wk_output_spool_destroy(s);
}

/* A spool that cannot grow (RLIMIT_FSIZE: writes fail EFBIG) fails a put with the
 * system's reason, and stays failed. */
static void test_a_write_error_says_why(void **state) {
  (void)state;
  char path[64], err[256];
  snprintf(path, sizeof path, "%s/t.outputs", dir);
  wk_output_spool *s = wk_output_spool_create(path, err, sizeof err);
  assert_non_null(s);
  wk_output_spool_set_calls(s, 1000);
  struct rlimit old, small = {.rlim_cur = 1u << 20, .rlim_max = 0};
  assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
  small.rlim_max = old.rlim_max;
  void (*prev)(int) = signal(SIGXFSZ, SIG_IGN);
  assert_int_equal(setrlimit(RLIMIT_FSIZE, &small), 0);
  wk_buf rec = {0};
  int rc = 0;
  uint32_t i = 0;
  for (; i < 1000 && rc == 0; i++) {
    encode(i, 4000, &rec);
    rc = wk_output_spool_put(s, i, rec.data, rec.len, err, sizeof err);
  }
  if (rc == 0) rc = wk_output_spool_finish(s, err, sizeof err);
  assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
  signal(SIGXFSZ, prev);
  assert_int_equal(rc, -1);
  assert_non_null(strstr(err, "cannot write the outputs spool"));
  assert_non_null(strstr(err, "File too large"));
  assert_int_equal(wk_output_spool_put(s, 999, rec.data, rec.len, err, sizeof err), -1);
  assert_non_null(strstr(err, "failed before"));
  wk_buf_free(&rec);
  wk_output_spool_destroy(s);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_records_come_back_in_call_order),
      cmocka_unit_test(test_create_refuses_an_existing_file_and_says_why),
      cmocka_unit_test(test_a_write_error_says_why),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}

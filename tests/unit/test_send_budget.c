/* test_send_budget.c: the byte bounds on streams' unsent messages (lib/wk_send_budget.h)
 * and the shared buffer they count (lib/wk_shared.h). Streams are plain structs here:
 * each test queues and releases messages in the order the gRPC server does (oldest
 * first, with the message after it). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "lib/wk_send_budget.h"
#include "lib/wk_shared.h"

#define MAXQ 8

/* A stream's unsent messages, oldest first. */
typedef struct queue {
  wk_send_stream st;
  wk_send_charge msgs[MAXQ];
  size_t head, n;
} queue;

static wk_send_verdict push(wk_send_budget *b, queue *q, size_t own, wk_shared *body) {
  assert_true(q->n < MAXQ);
  wk_send_charge *c = &q->msgs[(q->head + q->n) % MAXQ];
  *c = (wk_send_charge){.own = own, .body = body};
  wk_send_verdict v = wk_send_budget_add(b, &q->st, c);
  if (v == WK_SEND_FITS) q->n++;
  return v;
}

/* The oldest message was sent (or dropped). */
static void pop(wk_send_budget *b, queue *q) {
  assert_true(q->n > 0);
  wk_send_charge *c = &q->msgs[q->head];
  wk_send_charge *next = q->n > 1 ? &q->msgs[(q->head + 1) % MAXQ] : NULL;
  wk_send_budget_release(b, &q->st, c, next);
  q->head = (q->head + 1) % MAXQ;
  q->n--;
}

static wk_shared *body_of(size_t len) {
  uint8_t *bytes = calloc(1, len);
  assert_non_null(bytes);
  wk_shared *s = wk_shared_copy(bytes, len);
  free(bytes);
  return s;
}

/* A stream holds at most stream_max unsent bytes; one with nothing unsent takes any one
 * message; what is sent frees room. */
static void test_stream_bound(void **state) {
  (void)state;
  wk_send_budget b = {.stream_max = 1000, .total_max = 0};
  queue q = {0};
  assert_int_equal(push(&b, &q, 600, NULL), WK_SEND_FITS);
  assert_int_equal(push(&b, &q, 400, NULL), WK_SEND_FITS); /* exactly the bound */
  assert_int_equal(push(&b, &q, 1, NULL), WK_SEND_OVER_STREAM);
  assert_int_equal(q.st.bytes, 1000);
  pop(&b, &q);
  assert_int_equal(q.st.bytes, 400);
  assert_int_equal(push(&b, &q, 600, NULL), WK_SEND_FITS);
  pop(&b, &q);
  pop(&b, &q);
  assert_int_equal(q.st.bytes, 0);
  assert_int_equal(b.total, 0);
  /* empty: one message bigger than the bound still goes, a second does not */
  assert_int_equal(push(&b, &q, 5000, NULL), WK_SEND_FITS);
  assert_int_equal(push(&b, &q, 1, NULL), WK_SEND_OVER_STREAM);
  pop(&b, &q);
  assert_int_equal(b.total, 0);
}

/* One body on many streams: in full on each stream's bound, once in the total; the
 * total falls only when the last stream lets it go. */
static void test_shared_body_counts_once_in_the_total(void **state) {
  (void)state;
  wk_send_budget b = {.stream_max = 1 << 20, .total_max = 10000};
  wk_shared *body = body_of(8000);
  queue qs[100];
  memset(qs, 0, sizeof qs);
  for (int i = 0; i < 100; i++) {
    assert_int_equal(push(&b, &qs[i], 10, body), WK_SEND_FITS);
    assert_int_equal(qs[i].st.bytes, 8010);
  }
  assert_int_equal(b.total, 8000 + 100 * 10);
  assert_int_equal(body->held, 100);
  /* another body of the same size no longer fits the total */
  wk_shared *other = body_of(8000);
  queue q2 = {0};
  assert_int_equal(push(&b, &q2, 10, other), WK_SEND_OVER_TOTAL);
  assert_int_equal(other->held, 0);
  for (int i = 0; i < 99; i++) pop(&b, &qs[i]);
  assert_int_equal(b.total, 8000 + 10);
  pop(&b, &qs[99]);
  assert_int_equal(b.total, 0);
  assert_int_equal(body->held, 0);
  assert_int_equal(push(&b, &q2, 10, other), WK_SEND_FITS);
  pop(&b, &q2);
  assert_int_equal(b.total, 0);
  wk_shared_unref(body);
  wk_shared_unref(other);
}

/* A SNAPSHOT and the TERMINAL of a finished task share their body: the stream counts
 * it once, keeps it while either is unsent, and lets it go with the second. */
static void test_consecutive_messages_share_a_body(void **state) {
  (void)state;
  wk_send_budget b = {.stream_max = 5000, .total_max = 0};
  wk_shared *body = body_of(4000);
  queue q = {0};
  assert_int_equal(push(&b, &q, 20, body), WK_SEND_FITS);
  assert_int_equal(push(&b, &q, 20, body), WK_SEND_FITS);
  assert_int_equal(q.st.bytes, 4040);
  assert_int_equal(b.total, 4040);
  pop(&b, &q); /* the SNAPSHOT went: the TERMINAL still holds the body */
  assert_int_equal(q.st.bytes, 4020);
  assert_int_equal(b.total, 4020);
  assert_int_equal(body->held, 1);
  pop(&b, &q);
  assert_int_equal(q.st.bytes, 0);
  assert_int_equal(b.total, 0);
  assert_int_equal(body->held, 0);
  /* not consecutive: A, B, A counts A twice on the stream (still once in the total) */
  wk_shared *other = body_of(100);
  assert_int_equal(push(&b, &q, 0, body), WK_SEND_FITS);
  assert_int_equal(push(&b, &q, 0, other), WK_SEND_FITS);
  assert_int_equal(push(&b, &q, 0, body), WK_SEND_OVER_STREAM); /* 8100 > 5000 */
  assert_int_equal(q.st.bytes, 4100);
  pop(&b, &q);
  pop(&b, &q);
  assert_int_equal(b.total, 0);
  wk_shared_unref(body);
  wk_shared_unref(other);
}

/* Releasing every queued message (a stream dropped) in order leaves nothing behind. */
static void test_drop_all(void **state) {
  (void)state;
  wk_send_budget b = {.stream_max = 0, .total_max = 0};
  wk_shared *x = body_of(300), *y = body_of(500);
  queue q = {0}, r = {0};
  assert_int_equal(push(&b, &q, 5, x), WK_SEND_FITS);
  assert_int_equal(push(&b, &q, 5, x), WK_SEND_FITS);
  assert_int_equal(push(&b, &q, 5, y), WK_SEND_FITS);
  assert_int_equal(push(&b, &q, 5, NULL), WK_SEND_FITS);
  assert_int_equal(push(&b, &r, 5, y), WK_SEND_FITS);
  assert_int_equal(b.total, 300 + 500 + 25);
  while (q.n) pop(&b, &q);
  assert_int_equal(q.st.bytes, 0);
  assert_int_equal(b.total, 505);
  assert_int_equal(y->held, 1);
  pop(&b, &r);
  assert_int_equal(b.total, 0);
  assert_int_equal(x->held + y->held, 0);
  wk_shared_unref(x);
  wk_shared_unref(y);
}

/* The buffer: taken from a wk_buf without a copy, counted references. */
static void test_shared_buffer(void **state) {
  (void)state;
  wk_buf buf = {0};
  wk_buf_append(&buf, "hello", 5);
  uint8_t *bytes = buf.data;
  wk_shared *s = wk_shared_take(&buf);
  assert_ptr_equal(s->data, bytes);
  assert_null(buf.data);
  assert_int_equal(buf.len, 0);
  assert_int_equal(s->len, 5);
  assert_int_equal(wk_shared_refs(s), 1);
  assert_ptr_equal(wk_shared_ref(s), s);
  assert_int_equal(wk_shared_refs(s), 2);
  wk_shared_unref(s);
  assert_int_equal(wk_shared_refs(s), 1);
  assert_memory_equal(s->data, "hello", 5);
  wk_shared_unref(s);
  wk_shared_unref(NULL);
  wk_buf empty = {0};
  s = wk_shared_take(&empty);
  assert_int_equal(s->len, 0);
  assert_non_null(s->data);
  wk_shared_unref(s);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_stream_bound),
      cmocka_unit_test(test_shared_body_counts_once_in_the_total),
      cmocka_unit_test(test_consecutive_messages_share_a_body),
      cmocka_unit_test(test_drop_all),
      cmocka_unit_test(test_shared_buffer),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

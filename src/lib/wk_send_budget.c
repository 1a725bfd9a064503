#include "lib/wk_send_budget.h"

#include "lib/wk_assert.h"

wk_send_verdict wk_send_budget_add(wk_send_budget *b, wk_send_stream *st, wk_send_charge *c) {
  bool new_body = c->body != NULL && !(st->unsent > 0 && st->last_body == c->body);
  size_t body_len = new_body ? c->body->len : 0;
  size_t stream_add = c->own + body_len;
  size_t total_add = c->own + (new_body && c->body->held == 0 ? body_len : 0);
  if (st->unsent > 0 && b->stream_max != 0 &&
      (st->bytes > b->stream_max || stream_add > b->stream_max - st->bytes)) {
    return WK_SEND_OVER_STREAM;
  }
  if (b->total_max != 0 && (b->total > b->total_max || total_add > b->total_max - b->total)) {
    return WK_SEND_OVER_TOTAL;
  }
  st->bytes += stream_add;
  st->unsent++;
  st->last_body = c->body;
  b->total += total_add;
  c->body_charged = new_body;
  if (new_body) c->body->held++;
  return WK_SEND_FITS;
}

void wk_send_budget_release(wk_send_budget *b, wk_send_stream *st, wk_send_charge *c,
                            wk_send_charge *next) {
  WK_ASSERT(st->unsent > 0 && st->bytes >= c->own && b->total >= c->own);
  st->unsent--;
  st->bytes -= c->own;
  b->total -= c->own;
  if (!c->body_charged) return;
  c->body_charged = false;
  if (next != NULL && next->body == c->body) {
    WK_ASSERT(!next->body_charged);
    next->body_charged = true; /* the stream still holds the body */
    return;
  }
  size_t len = c->body->len;
  WK_ASSERT(st->bytes >= len && c->body->held > 0);
  st->bytes -= len;
  if (--c->body->held == 0) {
    WK_ASSERT(b->total >= len);
    b->total -= len;
  }
}

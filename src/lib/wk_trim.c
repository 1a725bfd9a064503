/* wk_trim.c: when to give freed memory back (see wk_trim.h). */
#include "lib/wk_trim.h"

void wk_trim_init(wk_trim *t, uint64_t drop_bytes, uint64_t min_gap_ms, uint64_t max_wait_ms) {
  *t = (wk_trim){.drop_bytes = drop_bytes, .min_gap_ms = min_gap_ms, .max_wait_ms = max_wait_ms};
}

bool wk_trim_due(wk_trim *t, uint64_t held, uint64_t now_ms) {
  bool falling = held < t->prev;
  t->prev = held;
  if (held > t->high) t->high = held;
  if (!t->pending) {
    if (t->high - held < t->drop_bytes) return false;
    if (t->last_ms != 0 && now_ms - t->last_ms < t->min_gap_ms) return false;
    t->pending = true;
    t->pending_ms = now_ms;
    return false; /* seen falling: trim once the fall is over */
  }
  if (falling && now_ms - t->pending_ms < t->max_wait_ms) return false;
  t->pending = false;
  t->last_ms = now_ms == 0 ? 1 : now_ms;
  t->high = held;
  return true;
}

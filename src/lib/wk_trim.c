/* wk_trim.c: when to give freed memory back (see wk_trim.h). */
#include "lib/wk_trim.h"

void wk_trim_init(wk_trim *t, wk_trim_config cfg) { *t = (wk_trim){.cfg = cfg}; }

bool wk_trim_due(wk_trim *t, uint64_t held, uint64_t now_ms) {
  if (held < t->prev) t->last_fall_ms = now_ms;
  t->prev = held;
  if (held > t->high) t->high = held;
  if (!t->pending) {
    if (t->high - held < t->cfg.drop_bytes) return false;
    if (t->last_ms != 0 && now_ms - t->last_ms < t->cfg.min_gap_ms) return false;
    t->pending = true;
    t->pending_ms = now_ms;
    return false; /* seen falling: trim once the fall is over */
  }
  bool settled = now_ms - t->last_fall_ms >= t->cfg.settle_ms;
  if (!settled && now_ms - t->pending_ms < t->cfg.max_wait_ms) return false;
  t->pending = false;
  t->last_ms = now_ms == 0 ? 1 : now_ms;
  t->high = held;
  return true;
}

bool wk_trim_idle_due(wk_trim *t, bool idle, uint64_t rss, uint64_t now_ms) {
  if (!idle) {
    t->idle_ms = 0;
    return false;
  }
  if (t->idle_ms == 0) t->idle_ms = now_ms == 0 ? 1 : now_ms;
  if (t->rss_base == 0 || rss < t->rss_base) t->rss_base = rss; /* the first idle tick */
  if (rss - t->rss_base < t->cfg.drop_bytes) return false;
  if (now_ms - t->idle_ms < t->cfg.settle_ms) return false;
  if (t->last_ms != 0 && now_ms - t->last_ms < t->cfg.min_gap_ms) return false;
  t->last_ms = now_ms == 0 ? 1 : now_ms;
  t->rss_base = rss; /* until wk_trim_done says what the trim left */
  return true;
}

void wk_trim_done(wk_trim *t, uint64_t rss) {
  if (rss != 0) t->rss_base = rss;
}

/* wk_core_timers.c: the timer scans an adapter runs on every tick, the result purge
 * and the next-deadline query. Scans only read: the adapter feeds what they return
 * back into the matching wk_core_handle_* so every state change stays an event. */
#include <string.h>

#include "core/wk_core_int.h"

#define WK_SCAN_BATCH WK_CORE_SCAN_MAX

size_t wk_core_expired_slots(const wk_core *core, int64_t now_ms, uint64_t *out, size_t max) {
  uint32_t handles[WK_SCAN_BATCH];
  uint32_t cap = max < WK_SCAN_BATCH ? (uint32_t)max : WK_SCAN_BATCH;
  uint32_t n = wk_heap_collect_le(&core->lease_heap, now_ms, handles, cap);
  for (uint32_t k = 0; k < n; k++) {
    out[k] = wk_slot_id_make(handles[k], core->slots[handles[k]].generation);
  }
  return n;
}

static size_t collect_tasks(const wk_core *core, const wk_heap *heap, int64_t now_ms,
                            wk_task_id *out, size_t max) {
  uint32_t handles[WK_SCAN_BATCH];
  uint32_t cap = max < WK_SCAN_BATCH ? (uint32_t)max : WK_SCAN_BATCH;
  uint32_t n = wk_heap_collect_le(heap, now_ms, handles, cap);
  for (uint32_t k = 0; k < n; k++) {
    const wk_task *t = &core->tasks[handles[k]];
    out[k].len = t->id_len;
    memcpy(out[k].bytes, t->id, (size_t)t->id_len + 1);
  }
  return n;
}

size_t wk_core_timed_out_tasks(const wk_core *core, int64_t now_ms, wk_task_id *out, size_t max) {
  return collect_tasks(core, &core->timeout_heap, now_ms, out, max);
}

size_t wk_core_watch_disconnected_tasks(const wk_core *core, int64_t now_ms, wk_task_id *out,
                                        size_t max) {
  return collect_tasks(core, &core->watch_heap, now_ms, out, max);
}

size_t wk_core__purge_expired_results(wk_core *core, int64_t now_ms) {
  size_t purged = 0;
  /* retention is one duration for all, so the ring is ordered by expiry */
  while (core->retained_count > 0 && core->retained[core->retained_head].until_ms <= now_ms) {
    wk_core__evict_oldest(core);
    purged++;
  }
  return purged;
}

int64_t wk_core_next_deadline(const wk_core *core) {
  int64_t next = INT64_MAX;
  const wk_heap *heaps[] = {&core->lease_heap, &core->timeout_heap, &core->watch_heap};
  for (size_t k = 0; k < sizeof heaps / sizeof heaps[0]; k++) {
    if (!wk_heap_empty(heaps[k]) && wk_heap_top_key(heaps[k]) < next) {
      next = wk_heap_top_key(heaps[k]);
    }
  }
  if (core->retained_count > 0 && core->retained[core->retained_head].until_ms < next) {
    next = core->retained[core->retained_head].until_ms;
  }
  return next;
}

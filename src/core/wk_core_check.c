/* wk_core_check.c: a full walk of WorkerCore's structures, for tests and the
 * simulation. Every redundant piece of state is recomputed and compared. */
#include "core/wk_core_int.h"

static const char *check_slots(const wk_core *core) {
  uint32_t n_free = 0, n_allocated = 0, n_running = 0;
  for (uint32_t s = 0; s < core->cfg.task_slots; s++) {
    const wk_slot *slot = &core->slots[s];
    if (slot->state == WK_SLOT_FREE) {
      n_free++;
      if (slot->task != WK_NONE) return "slot: FREE slot names a task";
      if (wk_heap_contains(&core->lease_heap, s)) return "slot: FREE slot in the lease heap";
      continue;
    }
    if (slot->generation == 0) return "slot: held slot with generation 0";
    if (slot->task >= core->task_capacity) return "slot: held slot without a task";
    const wk_task *t = &core->tasks[slot->task];
    if (t->slot != s) return "slot: task does not point back at its slot";
    if (t->result.slot_id != wk_slot_id_make(s, slot->generation))
      return "slot: task's slot id is stale";
    if (slot->state == WK_SLOT_ALLOCATED) {
      n_allocated++;
      if (t->stage == WK_STAGE_ACTIVE && t->result.phase != WK_PHASE_PREPARING) {
        return "slot: ALLOCATED slot under an activated task";
      }
      if (t->stage != WK_STAGE_RESERVED && t->stage != WK_STAGE_ACTIVE) {
        return "slot: ALLOCATED slot under a terminal or free record";
      }
      if (!wk_heap_contains(&core->lease_heap, s) ||
          wk_heap_key(&core->lease_heap, s) != slot->lease_expires_ms) {
        return "slot: ALLOCATED slot missing from the lease heap";
      }
    } else if (slot->state == WK_SLOT_RUNNING) {
      n_running++;
      if (t->stage != WK_STAGE_ACTIVE || t->result.phase == WK_PHASE_PREPARING ||
          t->result.phase == WK_PHASE_DONE) {
        return "slot: RUNNING slot without an activated live task";
      }
      if (wk_heap_contains(&core->lease_heap, s)) return "slot: RUNNING slot in the lease heap";
    } else {
      return "slot: unknown state";
    }
  }
  if (n_free != core->n_free || n_allocated != core->n_allocated || n_running != core->n_running) {
    return "slot: counters differ from the slot table";
  }
  if (n_free + n_allocated + n_running != core->cfg.task_slots) return "slot: counts do not add up";
  uint32_t listed = 0;
  for (uint32_t s = core->free_slot_head; s != WK_NONE; s = core->slots[s].next_free) {
    if (core->slots[s].state != WK_SLOT_FREE) return "slot: free list holds a held slot";
    if (++listed > core->cfg.task_slots) return "slot: free list loops";
  }
  if (listed != n_free) return "slot: free list length differs from FREE count";
  return NULL;
}

static const char *check_tasks(const wk_core *core) {
  uint32_t used = 0, live = 0, terminal = 0;
  uint64_t terminal_sum = 0, terminal_sq = 0;
  uint64_t bytes = 0;
  for (uint32_t i = 0; i < core->task_capacity; i++) {
    const wk_task *t = &core->tasks[i];
    if (t->stage == WK_STAGE_FREE) {
      if (wk_heap_contains(&core->timeout_heap, i) || wk_heap_contains(&core->watch_heap, i)) {
        return "task: free record in a timer heap";
      }
      continue;
    }
    used++;
    if (t->watch_grace != wk_heap_contains(&core->watch_heap, i)) {
      return "task: watch grace flag disagrees with the watch heap";
    }
    if (wk_core__index_find(core, t->id, t->id_len, t->hash) != i)
      return "task: record not found by its id";
    if (t->hash != wk_task_hash(t->id, t->id_len)) return "task: stored hash is wrong";
    if (t->result.task_id != t->id) return "task: result names another id";
    switch ((wk_stage)t->stage) {
      case WK_STAGE_RESERVED:
        if (t->slot == WK_NONE || core->slots[t->slot].state != WK_SLOT_ALLOCATED) {
          return "task: reservation without an ALLOCATED slot";
        }
        if (wk_heap_contains(&core->timeout_heap, i)) return "task: reservation has a timeout";
        break;
      case WK_STAGE_ACTIVE:
        live++;
        if (t->slot == WK_NONE || core->slots[t->slot].task != i)
          return "task: live task without its slot";
        if (wk_task_state_terminal(t->result.state) || t->result.phase == WK_PHASE_DONE) {
          return "task: live task with a terminal state";
        }
        if (!wk_heap_contains(&core->timeout_heap, i))
          return "task: live task missing from the timeout heap";
        if (t->watch_grace && t->watch_attached)
          return "task: watch grace pending for an attached task";
        break;
      case WK_STAGE_TERMINAL:
        terminal++;
        terminal_sum += i;
        terminal_sq += (uint64_t)i * i;
        bytes += wk_core__task_held_bytes(t);
        if (t->slot != WK_NONE) return "task: terminal task still holds a slot";
        if (!wk_task_state_terminal(t->result.state) || t->result.phase != WK_PHASE_DONE) {
          return "task: retained result is not terminal";
        }
        if (t->adapter_ctx) return "task: terminal task kept its adapter context";
        if (wk_heap_contains(&core->timeout_heap, i) || wk_heap_contains(&core->watch_heap, i)) {
          return "task: terminal task has a pending timer";
        }
        break;
      case WK_STAGE_FREE: break;
    }
  }
  if (used != core->index.count) return "task: index count differs from records in use";
  if (core->index.recent != WK_NONE && (core->index.recent >= core->task_capacity ||
                                        core->tasks[core->index.recent].stage == WK_STAGE_FREE)) {
    return "task: the index's recent record is not in use";
  }
  if (live != core->n_live) return "task: live counter is wrong";
  if (live != core->timeout_heap.size) return "task: timeout heap size differs from live tasks";
  if (terminal != core->retained_count || bytes != core->retained_bytes) {
    return "task: retention counters are wrong";
  }
  if (terminal > core->cfg.max_retained_results) return "task: more results retained than allowed";
  if (core->retained_cap != core->cfg.max_retained_results + 1 ||
      core->retained_head >= core->retained_cap) {
    return "task: retention ring is misshapen";
  }
  int64_t last = INT64_MIN;
  for (uint32_t k = 0; k < core->retained_count; k++) {
    const wk_retained *r = &core->retained[wk_retained_index(core, k)];
    if (r->record >= core->task_capacity) return "task: retention ring names no record";
    const wk_task *t = &core->tasks[r->record];
    if (t->stage != WK_STAGE_TERMINAL) return "task: retention ring holds a non-terminal record";
    if (r->hash32 != (uint32_t)t->hash) return "task: retention ring's hash tag is wrong";
    if (r->until_ms < last) return "task: retention ring out of order";
    last = r->until_ms;
  }
  if (core->retained_count != terminal) return "task: retention ring length is wrong";
  /* each TERMINAL record once: the ring's records and the TERMINAL records have the
   * same sum and sum of squares (a repeat in place of a missing one changes both) */
  uint64_t ring_sum = 0, ring_sq = 0;
  for (uint32_t k = 0; k < core->retained_count; k++) {
    uint64_t rec = core->retained[wk_retained_index(core, k)].record;
    ring_sum += rec;
    ring_sq += rec * rec;
  }
  if (ring_sum != terminal_sum || ring_sq != terminal_sq)
    return "task: retention ring misses a result";
  uint32_t free_listed = 0;
  if (core->tasks_touched > core->task_capacity) return "task: more records touched than exist";
  for (uint32_t i = core->free_task_head; i != WK_NONE; i = core->tasks[i].next_free) {
    if (i >= core->tasks_touched) return "task: free list holds an untouched record";
    if (core->tasks[i].stage != WK_STAGE_FREE) return "task: free list holds a used record";
    if (++free_listed > core->task_capacity) return "task: free list loops";
  }
  /* the free records are those on the list and those never touched */
  if (free_listed + used != core->tasks_touched) return "task: free list length is wrong";
  return NULL;
}

const char *wk_core_check_invariants(const wk_core *core) {
  const char *why = check_slots(core);
  if (!why) why = check_tasks(core);
  if (!why) why = wk_heap_check(&core->lease_heap);
  if (!why) why = wk_heap_check(&core->timeout_heap);
  if (!why) why = wk_heap_check(&core->watch_heap);
  return why;
}

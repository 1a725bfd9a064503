/* wk_core.c: WorkerCore's entry points: configuration, slots, admission, activation,
 * phases, watch, abort and convergence. Timer scans live in wk_core_timers.c, the
 * invariant walk in wk_core_check.c, the id → record table in wk_task_index.c. */
#include <string.h>

#include "core/wk_core_int.h"
#include "lib/wk_assert.h"

/* ---- configuration ------------------------------------------------------- */

void wk_core_config_default(wk_core_config *cfg) {
  memset(cfg, 0, sizeof *cfg);
  cfg->task_slots = 16;
  cfg->default_slot_ttl_ms = 30000;
  cfg->max_slot_ttl_ms = 600000;
  cfg->default_task_timeout_ms = 600000;
  cfg->max_task_timeout_ms = 3600000;
  cfg->watch_disconnect_grace_ms = 10000;
  cfg->result_retention_ms = 600000;
  cfg->max_retained_results = 10000;
  cfg->max_retained_bytes = 256u << 20;
  cfg->max_failure_message_bytes = WK_CORE_FAILURE_MESSAGE_BYTES;
}

#define WK_TIME_MAX_MS (INT64_C(1) << 40) /* ~35 years: keeps now + any limit far from overflow */

wk_err wk_core_config_validate(const wk_core_config *cfg, const char **why) {
  const char *reason = NULL;
  if (cfg->task_slots < 1 || cfg->task_slots > WK_CORE_SLOTS_MAX) {
    reason = "task_slots must be between 1 and 1048576";
  } else if (cfg->default_slot_ttl_ms < 1 || cfg->default_slot_ttl_ms > cfg->max_slot_ttl_ms) {
    reason = "default_slot_ttl_ms must be at least 1 and at most max_slot_ttl_ms";
  } else if (cfg->max_slot_ttl_ms > WK_TIME_MAX_MS) {
    reason = "max_slot_ttl_ms is too large";
  } else if (cfg->default_task_timeout_ms < 1 ||
             cfg->default_task_timeout_ms > cfg->max_task_timeout_ms) {
    reason = "default_task_timeout_ms must be at least 1 and at most max_task_timeout_ms";
  } else if (cfg->max_task_timeout_ms > WK_TIME_MAX_MS) {
    reason = "max_task_timeout_ms is too large";
  } else if (cfg->watch_disconnect_grace_ms < 0 ||
             cfg->watch_disconnect_grace_ms > WK_TIME_MAX_MS) {
    reason = "watch_disconnect_grace_ms must be between 0 and 2^40";
  } else if (cfg->result_retention_ms < 0 || cfg->result_retention_ms > WK_TIME_MAX_MS) {
    reason = "result_retention_ms must be between 0 and 2^40";
  } else if (cfg->max_retained_results < 1 || cfg->max_retained_results > WK_CORE_RETAINED_MAX) {
    reason = "max_retained_results must be between 1 and 4194304";
  } else if (cfg->max_retained_bytes < 1) {
    reason = "max_retained_bytes must be at least 1";
  } else if (cfg->max_failure_message_bytes < 16 || cfg->max_failure_message_bytes > (1u << 20)) {
    reason = "max_failure_message_bytes must be between 16 and 1048576";
  }
  if (why) *why = reason;
  return reason ? WK_ERR_INVALID_ARGUMENT : WK_OK;
}

/* ---- lifecycle ------------------------------------------------------------- */

/* The record array, with room to align it to a cache line. */
static size_t tasks_bytes(uint32_t capacity) { return (size_t)capacity * sizeof(wk_task) + 63u; }

wk_core *wk_core_create(const wk_core_config *cfg) {
  if (wk_core_config_validate(cfg, NULL) != WK_OK) return NULL;
  const wk_allocator *a = &cfg->allocator;
  wk_core *core = wk_allocator_calloc(a, 1, sizeof *core);
  core->cfg = *cfg;
  a = &core->cfg.allocator;

  uint32_t n = cfg->task_slots;
  core->slots = wk_allocator_calloc(a, n, sizeof *core->slots);
  for (uint32_t i = 0; i < n; i++) {
    core->slots[i].state = WK_SLOT_FREE;
    core->slots[i].task = WK_NONE;
    core->slots[i].next_free = (i + 1 < n) ? i + 1 : WK_NONE;
  }
  core->free_slot_head = 0;
  core->n_free = n;

  core->task_capacity = n + cfg->max_retained_results;
  core->tasks_mem = wk_allocator_calloc(a, 1, tasks_bytes(core->task_capacity));
  core->tasks = (wk_task *)(((uintptr_t)core->tasks_mem + 63u) & ~(uintptr_t)63u);
  /* zeroed (WK_STAGE_FREE) and left untouched: a record is set up when first used */
  core->free_task_head = WK_NONE;
  core->tasks_touched = 0;

  wk_core__index_init(&core->index, core->task_capacity, a);
  wk_heap_init(&core->lease_heap, n, a);
  /* deadlines are mostly now + the default timeout: they arrive in order */
  wk_heap_init_with_run(&core->timeout_heap, core->task_capacity, a);
  wk_heap_init(&core->watch_heap, core->task_capacity, a);
  core->retained_cap = cfg->max_retained_results + 1;
  core->retained = wk_allocator_calloc(a, core->retained_cap, sizeof *core->retained);
  return core;
}

static void release_blobs(wk_core *core, wk_task *t) {
  const wk_allocator *a = &core->cfg.allocator;
  wk_allocator_free(a, (void *)(uintptr_t)t->result.outputs.data, t->result.outputs.len);
  wk_allocator_free(a, (void *)(uintptr_t)t->result.plugin_results.data,
                    t->result.plugin_results.len);
  if (t->message_size)
    wk_allocator_free(a, (void *)(uintptr_t)t->result.failure_message, t->message_size);
  t->result.outputs = (wk_bytes){0};
  t->result.plugin_results = (wk_bytes){0};
  t->result.failure_message = "";
  t->message_size = 0;
}

void wk_core_destroy(wk_core *core) {
  if (!core) return;
  wk_allocator a = core->cfg.allocator;
  for (uint32_t i = 0; i < core->tasks_touched; i++) release_blobs(core, &core->tasks[i]);
  wk_heap_free(&core->lease_heap, &a);
  wk_heap_free(&core->timeout_heap, &a);
  wk_heap_free(&core->watch_heap, &a);
  wk_core__index_free(&core->index, &a);
  wk_allocator_free(&a, core->retained, (size_t)core->retained_cap * sizeof *core->retained);
  wk_allocator_free(&a, core->tasks_mem, tasks_bytes(core->task_capacity));
  wk_allocator_free(&a, core->slots, (size_t)core->cfg.task_slots * sizeof *core->slots);
  wk_allocator_free(&a, core, sizeof *core);
}

static void do_set_ready(wk_core *core, bool ready) { core->ready = ready; }
static void do_set_draining(wk_core *core, bool draining) { core->draining = draining; }

static void do_set_admission_paused(wk_core *core, const char *reason) {
  size_t n = reason ? strlen(reason) : 0;
  if (n >= sizeof core->paused) n = sizeof core->paused - 1;
  if (n) memcpy(core->paused, reason, n);
  core->paused[n] = '\0';
}

const char *wk_core_admission_paused(const wk_core *core) {
  return core->paused[0] ? core->paused : NULL;
}

const char *wk_cmd_kind_name(wk_cmd_kind k) {
  switch (k) {
    case WK_CMD_PREPARE_ACTIVATION: return "PREPARE_ACTIVATION";
    case WK_CMD_START_BUILDER: return "START_BUILDER";
    case WK_CMD_START_CALLS: return "START_CALLS";
    case WK_CMD_START_WRITER: return "START_WRITER";
    case WK_CMD_CANCEL_TASK: return "CANCEL_TASK";
    case WK_CMD_CONVERGE: return "CONVERGE";
  }
  return "UNKNOWN";
}

/* ---- helpers: records, slots, commands ------------------------------------- */

/* The record of task `id`, or WK_NONE. The characters of `id` are not checked: only
 * valid ids are ever inserted (new_task's callers check first), so an invalid one is
 * simply not found. The task the core last handled an event of is tried first: the
 * adapter's reads after an event (its result, its commands' task) ask for that task
 * again and again, and a compare of the id costs a fraction of the hash and the probe
 * (about 20 lookups per no-op task). */
static uint32_t find_task(const wk_core *core, const char *id, size_t len) {
  if (!id || len == 0 || len > WK_TASK_ID_MAX) return WK_NONE;
  uint32_t r = core->index.recent;
  if (r != WK_NONE) {
    const wk_task *t = &core->tasks[r];
    if (t->id_len == len && (t->id == id || memcmp(t->id, id, len) == 0)) return r;
  }
  return wk_core__index_find(core, id, len, wk_task_hash(id, len));
}

/* find_task for an event's handler: the task found is the one tried first next. */
static uint32_t find_task_for_event(wk_core *core, const char *id, size_t len) {
  uint32_t r = find_task(core, id, len);
  if (r != WK_NONE) core->index.recent = r;
  return r;
}

static uint64_t slot_id_of(const wk_core *core, uint32_t slot) {
  return wk_slot_id_make(slot, core->slots[slot].generation);
}

static wk_cmd *push_cmd(wk_cmds *cmds, wk_cmd_kind kind, const wk_task *t) {
  WK_ASSERT(cmds->count < WK_CMDS_MAX);
  wk_cmd *c = &cmds->items[cmds->count++];
  memset(c, 0, sizeof *c);
  c->kind = kind;
  c->task_id = t->id;
  c->task_id_len = t->id_len;
  c->slot_id = t->result.slot_id;
  c->adapter_ctx = t->adapter_ctx;
  return c;
}

/* Takes a record off the free list with `id`, indexes it. Never fails: records are
 * sized for every slot plus every retained result. */
static uint32_t new_task(wk_core *core, const char *id, size_t len, uint8_t stage) {
  WK_DEBUG_ASSERT(wk_task_id_valid(id, len)); /* find_task relies on it */
  uint32_t i = core->free_task_head;
  if (i != WK_NONE) {
    core->free_task_head = core->tasks[i].next_free;
  } else { /* a record never used before (zeroed) */
    WK_ASSERT(core->tasks_touched < core->task_capacity);
    i = core->tasks_touched++;
  }
  wk_task *t = &core->tasks[i];
  WK_ASSERT(t->stage == WK_STAGE_FREE);
  /* everything but the id's unused tail: an id of up to 31 bytes leaves line 1
   * (the rest of the id) untouched */
  memset(t, 0, offsetof(wk_task, id));
  memcpy(t->id, id, len);
  t->id[len] = '\0';
  memset((char *)t + offsetof(wk_task, max_failed_calls), 0,
         sizeof *t - offsetof(wk_task, max_failed_calls));
  t->id_len = (uint8_t)len;
  t->hash = wk_task_hash(id, len);
  t->stage = stage;
  t->slot = WK_NONE;
  t->next_free = WK_NONE;
  t->result.task_id = t->id;
  t->result.task_id_len = len;
  t->result.failure_message = "";
  wk_core__index_insert(core, i);
  core->index.recent = i;
  return i;
}

static void free_task(wk_core *core, uint32_t i) {
  wk_task *t = &core->tasks[i];
  WK_ASSERT(t->stage != WK_STAGE_FREE);
  WK_ASSERT(t->slot == WK_NONE); /* its slot was released first */
  if (core->forget) core->forget(core->forget_ud, t->id, t->id_len);
  wk_core__index_remove(core, i);
  release_blobs(core, t);
  t->stage = WK_STAGE_FREE;
  t->slot = WK_NONE;
  t->next_free = core->free_task_head;
  core->free_task_head = i;
}

static bool can_admit(const wk_core *core, wk_err *err) {
  if (!core->ready || core->draining) {
    *err = WK_ERR_UNAVAILABLE;
    return false;
  }
  if (core->paused[0]) {
    *err = WK_ERR_PAUSED;
    return false;
  }
  if (core->free_slot_head == WK_NONE) {
    *err = WK_ERR_NO_SLOT;
    return false;
  }
  return true;
}

/* Allocates a FREE slot for record t under a lease: FREE → ALLOCATED, generation bumped. */
static uint32_t allocate_slot(wk_core *core, uint32_t t, int64_t lease_expires_ms) {
  uint32_t s = core->free_slot_head;
  WK_ASSERT(s != WK_NONE);
  wk_slot *slot = &core->slots[s];
  WK_ASSERT(slot->state == WK_SLOT_FREE);
  WK_ASSERT(core->tasks[t].slot == WK_NONE); /* one slot per task */
  core->free_slot_head = slot->next_free;
  slot->next_free = WK_NONE;
  slot->state = WK_SLOT_ALLOCATED;
  slot->generation++;
  if (slot->generation == 0) slot->generation = 1; /* 0 is reserved for "no slot" */
  slot->task = t;
  slot->lease_expires_ms = lease_expires_ms;
  core->n_free--;
  core->n_allocated++;
  wk_heap_set(&core->lease_heap, s, lease_expires_ms);
  core->tasks[t].slot = s;
  core->tasks[t].result.slot_id = slot_id_of(core, s);
  return s;
}

/* ALLOCATED or RUNNING → FREE, detached from its task. */
static void release_slot(wk_core *core, uint32_t s) {
  wk_slot *slot = &core->slots[s];
  WK_ASSERT(slot->state != WK_SLOT_FREE);
  WK_ASSERT(core->tasks[slot->task].slot == s); /* the slot and its task name each other */
  if (slot->state == WK_SLOT_ALLOCATED) {
    core->n_allocated--;
    wk_heap_remove(&core->lease_heap, s);
  } else {
    core->n_running--;
  }
  core->tasks[slot->task].slot = WK_NONE;
  slot->state = WK_SLOT_FREE;
  slot->task = WK_NONE;
  slot->lease_expires_ms = 0;
  slot->next_free = core->free_slot_head;
  core->free_slot_head = s;
  core->n_free++;
}

static int64_t clamp_ttl(const wk_core *core, int64_t ttl_ms) {
  if (ttl_ms == 0) return core->cfg.default_slot_ttl_ms;
  return ttl_ms > core->cfg.max_slot_ttl_ms ? core->cfg.max_slot_ttl_ms : ttl_ms;
}

static const void *copy_bytes(wk_core *core, wk_bytes b) {
  if (!b.data || b.len == 0) return NULL;
  return wk_allocator_memdup(&core->cfg.allocator, b.data, b.len);
}

static void set_message(wk_core *core, wk_task *t, const char *msg) {
  if (t->message_size) {
    wk_allocator_free(&core->cfg.allocator, (void *)(uintptr_t)t->result.failure_message,
                      t->message_size);
    t->message_size = 0;
  }
  t->result.failure_message = "";
  if (!msg || !msg[0]) return;
  size_t len = 0;
  while (len < core->cfg.max_failure_message_bytes && msg[len]) len++;
  /* never cut a UTF-8 sequence in half */
  while (len > 0 && msg[len] && ((unsigned char)msg[len] & 0xC0u) == 0x80u) len--;
  char *copy = wk_allocator_calloc(&core->cfg.allocator, 1, len + 1);
  memcpy(copy, msg, len);
  t->result.failure_message = copy;
  t->message_size = (uint32_t)(len + 1); /* len <= max_failure_message_bytes <= 2^20 */
}

/* ---- retention ------------------------------------------------------------- */

uint64_t wk_core__task_held_bytes(const wk_task *t) {
  return sizeof *t + t->result.outputs.len + t->result.plugin_results.len + t->message_size;
}

void wk_core__evict_oldest(wk_core *core) {
  WK_ASSERT(core->retained_count > 0);
  uint32_t i = core->retained[core->retained_head].record;
  wk_task *t = &core->tasks[i];
  WK_ASSERT(t->stage == WK_STAGE_TERMINAL);
  if (++core->retained_head == core->retained_cap) core->retained_head = 0;
  core->retained_count--;
  core->retained_bytes -= wk_core__task_held_bytes(t);
  free_task(core, i);
}

/* Starts fetching what evicting the oldest retained result will read: its record
 * and its index entry, known from the ring without touching either. */
WK_PREFETCH_FN void prefetch_oldest(const wk_core *core) {
  const wk_retained *r = &core->retained[core->retained_head];
  wk_task_prefetch(core, r->record);
  WK_PREFETCH(&core->index.entries[r->hash32 & core->index.mask]);
}

/* Makes record i TERMINAL and retained; evicts the oldest others past the bounds. */
static void retain(wk_core *core, uint32_t i, int64_t now_ms) {
  wk_task *t = &core->tasks[i];
  WK_ASSERT(t->slot == WK_NONE); /* a terminal task holds no slot */
  t->stage = WK_STAGE_TERMINAL;
  WK_ASSERT(core->retained_count < core->retained_cap);
  /* the ring expires from its head, so it stays ordered by until_ms: a `now` older
   * than a retained result's (a replayed or hand-made input sequence; the worker's
   * clock is monotonic) keeps this one no shorter than the newest already retained */
  int64_t until = now_ms + core->cfg.result_retention_ms;
  if (core->retained_count > 0) {
    int64_t newest = core->retained[wk_retained_index(core, core->retained_count - 1)].until_ms;
    if (until < newest) until = newest;
  }
  wk_retained *r = &core->retained[wk_retained_index(core, core->retained_count)];
  r->until_ms = until;
  r->record = i;
  r->hash32 = (uint32_t)t->hash;
  core->retained_count++;
  core->retained_bytes += wk_core__task_held_bytes(t);
  while (core->retained_count > 1 && (core->retained_count > core->cfg.max_retained_results ||
                                      core->retained_bytes > core->cfg.max_retained_bytes)) {
    wk_core__evict_oldest(core);
  }
  /* the next convergence evicts the next oldest: start fetching it now, a whole
   * task event ahead, rather than when it is needed */
  if (core->retained_count >= core->cfg.max_retained_results) prefetch_oldest(core);
}

/* Drops the task's OWNER_LOST grace timer, if one runs. The record's flag mirrors
 * the watch heap, so the common case (no grace) never reads the heap. */
static void end_watch_grace(wk_core *core, uint32_t i) {
  wk_task *t = &core->tasks[i];
  WK_DEBUG_ASSERT(t->watch_grace == wk_heap_contains(&core->watch_heap, i));
  if (!t->watch_grace) return;
  t->watch_grace = false;
  wk_heap_remove(&core->watch_heap, i);
}

/* ---- phase records ----------------------------------------------------------- */

const char *wk_phase_end_name(wk_phase_end e) {
  switch (e) {
    case WK_PHASE_END_NOT_RUN: return "NOT_RUN";
    case WK_PHASE_END_RUNNING: return "RUNNING";
    case WK_PHASE_END_OK: return "OK";
    case WK_PHASE_END_FAILED: return "FAILED";
  }
  return "UNKNOWN";
}

/* The start and end timestamps of a phase with a record. */
static int64_t *phase_started(wk_task_statistic *s, wk_phase p) {
  return p == WK_PHASE_BUILDER ? &s->builder_started_ms
         : p == WK_PHASE_CALLS ? &s->calls_started_ms
                               : &s->writer_started_ms;
}

static int64_t *phase_finished(wk_task_statistic *s, wk_phase p) {
  return p == WK_PHASE_BUILDER ? &s->builder_finished_ms
         : p == WK_PHASE_CALLS ? &s->calls_finished_ms
                               : &s->writer_finished_ms;
}

static bool has_record(wk_phase p) { return p >= WK_PHASE_BUILDER && p <= WK_PHASE_WRITER; }

bool wk_task_phase_ms(const wk_task_statistic *s, wk_phase p, int64_t now_ms, int64_t *ms) {
  *ms = 0;
  if (!has_record(p)) return false;
  wk_task_statistic copy = *s;
  int64_t from = *phase_started(&copy, p), to = *phase_finished(&copy, p);
  if (from == 0) return false;
  if (to == 0) to = now_ms;
  *ms = to > from ? to - from : 0;
  return true;
}

/* The task enters phase p at now_ms. */
static void start_phase(wk_task *t, wk_phase p, int64_t now_ms) {
  WK_ASSERT(has_record(p));
  t->result.phase = p;
  *phase_started(&t->result.statistic, p) = now_ms;
  t->result.phases[p - WK_PHASE_BUILDER] = (wk_phase_record){.end = (uint8_t)WK_PHASE_END_RUNNING};
}

/* The task's phase p ends at now_ms, ok or with `code`. */
static void end_phase(wk_task *t, wk_phase p, bool ok, wk_failure_code code, int64_t now_ms) {
  WK_ASSERT(has_record(p));
  WK_ASSERT(t->result.phases[p - WK_PHASE_BUILDER].end == WK_PHASE_END_RUNNING);
  *phase_finished(&t->result.statistic, p) = now_ms;
  t->result.phases[p - WK_PHASE_BUILDER] =
      (wk_phase_record){.end = (uint8_t)(ok ? WK_PHASE_END_OK : WK_PHASE_END_FAILED),
                        .failure_code = (uint8_t)(ok ? WK_FAIL_NONE : code)};
}

/* A convergence from outside the phase (timeout, cancel, shutdown, owner lost) ends the
 * phase that runs with the convergence's code, so its time and outcome are kept. */
static void end_running_phase(wk_task *t, wk_failure_code code, int64_t now_ms) {
  wk_phase p = t->result.phase;
  if (has_record(p) && t->result.phases[p - WK_PHASE_BUILDER].end == WK_PHASE_END_RUNNING)
    end_phase(t, p, false, code, now_ms);
}

/* ---- convergence ----------------------------------------------------------- */

/* The one way an ACTIVE task becomes terminal: slot freed, timers dropped, result
 * frozen, CONVERGE emitted (after CANCEL_TASK when work may still be in flight). */
static void converge(wk_core *core, uint32_t i, wk_task_state state, wk_failure_code code,
                     const char *message, bool cancel_in_flight, int64_t now_ms, wk_cmds *cmds) {
  wk_task *t = &core->tasks[i];
  WK_ASSERT(t->stage == WK_STAGE_ACTIVE);
  WK_ASSERT(wk_task_state_terminal(state));
  /* the misses ahead overlap: the slot and the timeout queue position */
  if (t->slot != WK_NONE) WK_PREFETCH_W(&core->slots[t->slot]);
  WK_PREFETCH(&core->timeout_heap.pos[i]);
  if (cancel_in_flight) push_cmd(cmds, WK_CMD_CANCEL_TASK, t);
  if (t->slot != WK_NONE) release_slot(core, t->slot);
  wk_heap_remove(&core->timeout_heap, i);
  end_watch_grace(core, i);
  core->n_live--;
  end_running_phase(t, code, now_ms);
  t->result.state = state;
  t->result.phase = WK_PHASE_DONE;
  t->result.failure_code = code;
  set_message(core, t, message);
  t->result.statistic.finished_ms = now_ms;
  wk_cmd *c = push_cmd(cmds, WK_CMD_CONVERGE, t);
  c->u.converge.result = &t->result;
  t->adapter_ctx = NULL;
  retain(core, i, now_ms);
}

/* ---- RequestTaskSlot ------------------------------------------------------- */

/* A reservation whose lease ran out before the timer scan saw it is dropped now, so
 * that answers never depend on how late the scan runs. */
static bool reservation_lapsed(wk_core *core, uint32_t i, int64_t now_ms) {
  wk_task *t = &core->tasks[i];
  if (t->stage != WK_STAGE_RESERVED) return false;
  WK_ASSERT(t->slot != WK_NONE); /* a reservation holds its slot until it lapses */
  if (now_ms < core->slots[t->slot].lease_expires_ms) return false;
  release_slot(core, t->slot);
  free_task(core, i);
  return true;
}

static void do_handle_request_slot(wk_core *core, const char *task_id, size_t task_id_len,
                                   int64_t ttl_ms, int64_t now_ms, wk_slot_result *out) {
  memset(out, 0, sizeof *out);
  if (!wk_task_id_valid(task_id, task_id_len) || ttl_ms < 0) {
    out->err = WK_ERR_INVALID_ARGUMENT;
    return;
  }
  uint32_t i = find_task_for_event(core, task_id, task_id_len);
  if (i != WK_NONE && !reservation_lapsed(core, i, now_ms)) {
    wk_task *t = &core->tasks[i];
    out->duplicate = true;
    /* a terminal task holds no slot: 0, as the proto says (its result keeps the id) */
    out->slot_id = t->stage == WK_STAGE_TERMINAL ? 0 : t->result.slot_id;
    if (t->slot != WK_NONE && core->slots[t->slot].state == WK_SLOT_ALLOCATED) {
      out->lease_expires_ms = core->slots[t->slot].lease_expires_ms;
    }
    out->result = (t->stage == WK_STAGE_RESERVED) ? NULL : &t->result;
    return;
  }
  if (!can_admit(core, &out->err)) return;
  i = new_task(core, task_id, task_id_len, WK_STAGE_RESERVED);
  int64_t lease = now_ms + clamp_ttl(core, ttl_ms);
  uint32_t s = allocate_slot(core, i, lease);
  out->slot_id = slot_id_of(core, s);
  out->lease_expires_ms = lease;
}

/* ---- SubmitTask ------------------------------------------------------------ */

static bool submit_args_valid(const wk_core *core, const wk_submit_request *req) {
  if (!wk_task_id_valid(req->task_id, req->task_id_len)) return false;
  if (req->timeout_ms < 0 || req->timeout_ms > core->cfg.max_task_timeout_ms) return false;
  if (req->call_failure_policy != WK_CALL_FAIL_FAST &&
      req->call_failure_policy != WK_CALL_CONTINUE) {
    return false;
  }
  const wk_retry_policy *r = &req->retry;
  if (r->initial_backoff_ms < 0 || r->max_backoff_ms < 0) return false;
  if (r->max_backoff_ms && r->max_backoff_ms < r->initial_backoff_ms) return false;
  return true;
}

/* Which error a slot id earns when it is not the task's reservation (the task has
 * none, or another one). Decided by the id's generation against its slot's, never by
 * where the task's own reservation sits: a generation the slot never issued (or no
 * such slot) is INVALID_SLOT; the generation the slot holds now, for a live
 * reservation or task, is another task's: INVALID_SLOT; a generation the slot issued
 * and lost since (its lease lapsed, the slot was reclaimed) is SLOT_UNCERTAIN. The
 * core keeps no history of who held past generations: a lapsed one reads as the
 * caller's own lapsed lease, the only way a correct client holds such an id. */
static wk_err foreign_slot_error(const wk_core *core, uint64_t slot_id) {
  uint32_t s = wk_slot_id_index(slot_id);
  uint32_t gen = wk_slot_id_generation(slot_id);
  if (s >= core->cfg.task_slots || gen == 0) return WK_ERR_INVALID_SLOT;
  const wk_slot *slot = &core->slots[s];
  if (gen > slot->generation) return WK_ERR_INVALID_SLOT;    /* never issued */
  if (gen < slot->generation) return WK_ERR_SLOT_UNCERTAIN;  /* reclaimed since */
  return slot->state == WK_SLOT_FREE ? WK_ERR_SLOT_UNCERTAIN /* lease lapsed */
                                     : WK_ERR_INVALID_SLOT;  /* another task's */
}

static void activate_record(wk_core *core, uint32_t i, const wk_submit_request *req,
                            void *adapter_ctx, int64_t now_ms, wk_submit_result *out) {
  wk_task *t = &core->tasks[i];
  WK_ASSERT(t->stage == WK_STAGE_RESERVED);
  WK_ASSERT(t->slot != WK_NONE);
  WK_ASSERT(core->slots[t->slot].state == WK_SLOT_ALLOCATED);
  t->stage = WK_STAGE_ACTIVE;
  t->digest = req->request_digest;
  t->digest_known = true;
  t->call_failure_policy = (uint8_t)req->call_failure_policy;
  t->max_failed_calls = req->max_failed_calls;
  t->retry = req->retry;
  t->adapter_ctx = adapter_ctx;
  int64_t timeout = req->timeout_ms ? req->timeout_ms : core->cfg.default_task_timeout_ms;
  int64_t deadline_ms = now_ms + timeout;
  t->result.state = WK_TASK_PREPARING;
  t->result.phase = WK_PHASE_PREPARING;
  t->result.statistic.accepted_ms = now_ms;
  wk_heap_set(&core->timeout_heap, i, deadline_ms);
  core->n_live++;

  out->adapter_ctx_taken = true;
  out->slot_id = t->result.slot_id;
  out->accepted_ms = now_ms;
  out->result = &t->result;
  wk_cmd *c = push_cmd(&out->cmds, WK_CMD_PREPARE_ACTIVATION, t);
  c->u.prepare.requested_epoch = req->requested_epoch;
}

static void do_handle_submit(wk_core *core, const wk_submit_request *req, void *adapter_ctx,
                             int64_t now_ms, wk_submit_result *out) {
  memset(out, 0, sizeof *out);
  if (!submit_args_valid(core, req)) {
    out->err = WK_ERR_INVALID_ARGUMENT;
    return;
  }
  uint32_t i = find_task_for_event(core, req->task_id, req->task_id_len);
  if (i != WK_NONE && core->tasks[i].stage != WK_STAGE_RESERVED) {
    wk_task *t = &core->tasks[i];
    if (t->digest_known && t->digest != req->request_digest) {
      out->err = WK_ERR_CONFLICT;
      return;
    }
    out->duplicate = true;
    out->slot_id = t->result.slot_id;
    out->accepted_ms = t->result.statistic.accepted_ms;
    out->result = &t->result;
    return;
  }
  if (i != WK_NONE) { /* reserved by RequestTaskSlot */
    wk_task *t = &core->tasks[i];
    if (req->slot_id != 0 && req->slot_id != t->result.slot_id) {
      out->err = foreign_slot_error(core, req->slot_id);
      return;
    }
    if (reservation_lapsed(core, i, now_ms)) {
      out->err = WK_ERR_SLOT_UNCERTAIN;
      return;
    }
    if (!core->ready || core->draining) {
      out->err = WK_ERR_UNAVAILABLE;
      return;
    }
    activate_record(core, i, req, adapter_ctx, now_ms, out);
    return;
  }
  if (req->slot_id != 0) {
    out->err = foreign_slot_error(core, req->slot_id);
    return;
  }
  if (!can_admit(core, &out->err)) return;
  i = new_task(core, req->task_id, req->task_id_len, WK_STAGE_RESERVED);
  allocate_slot(core, i, now_ms + core->cfg.default_slot_ttl_ms);
  activate_record(core, i, req, adapter_ctx, now_ms, out);
}

/* ---- activation ------------------------------------------------------------ */

/* The ACTIVE record for an event expected in `phase`, or an error in out->err. */
static uint32_t task_in_phase(wk_core *core, const char *id, size_t len, wk_phase phase,
                              wk_err *err) {
  uint32_t i = find_task_for_event(core, id, len);
  if (i == WK_NONE || core->tasks[i].stage == WK_STAGE_RESERVED) {
    *err = WK_ERR_NOT_FOUND;
    return WK_NONE;
  }
  const wk_task *t = &core->tasks[i];
  if (t->stage != WK_STAGE_ACTIVE || t->result.phase != phase) {
    *err = WK_ERR_STALE;
    return WK_NONE;
  }
  *err = WK_OK;
  return i;
}

static void do_handle_activation_prepared(wk_core *core, const char *task_id, size_t task_id_len,
                                          uint64_t slot_id, uint64_t code_epoch, int64_t now_ms,
                                          wk_transition_result *out) {
  memset(out, 0, sizeof *out);
  uint32_t i = task_in_phase(core, task_id, task_id_len, WK_PHASE_PREPARING, &out->err);
  if (i == WK_NONE) return;
  wk_task *t = &core->tasks[i];
  if (slot_id != t->result.slot_id) {
    out->err = WK_ERR_STALE;
    return;
  }
  wk_slot *slot = &core->slots[t->slot];
  WK_ASSERT(slot->state == WK_SLOT_ALLOCATED);
  WK_ASSERT(slot->task == i);
  if (now_ms >= slot->lease_expires_ms) {
    converge(core, i, WK_TASK_FAILED, WK_FAIL_SLOT_LOST,
             "the slot's lease expired before the task was activated", true, now_ms, &out->cmds);
    return;
  }
  wk_heap_remove(&core->lease_heap, t->slot);
  slot->state = WK_SLOT_RUNNING;
  slot->lease_expires_ms = 0;
  core->n_allocated--;
  core->n_running++;
  t->result.state = WK_TASK_RUNNING;
  t->result.code_epoch = code_epoch;
  t->result.statistic.activated_ms = now_ms;
  start_phase(t, WK_PHASE_BUILDER, now_ms);
  push_cmd(&out->cmds, WK_CMD_START_BUILDER, t);
}

static void do_handle_activation_failed(wk_core *core, const char *task_id, size_t task_id_len,
                                        wk_failure_code code, const char *message, int64_t now_ms,
                                        wk_transition_result *out) {
  memset(out, 0, sizeof *out);
  if (code != WK_FAIL_ACTIVATION_FAILED && code != WK_FAIL_IO_SCOPE_FAILED) {
    out->err = WK_ERR_INVALID_ARGUMENT;
    return;
  }
  uint32_t i = task_in_phase(core, task_id, task_id_len, WK_PHASE_PREPARING, &out->err);
  if (i == WK_NONE) return;
  converge(core, i, WK_TASK_FAILED, code, message, false, now_ms, &out->cmds);
}

/* ---- phases ---------------------------------------------------------------- */

/* The outcome's message, or one naming the phase and code when the adapter gave none. */
static const char *phase_message(const wk_phase_outcome *o, wk_phase phase, wk_failure_code code) {
  if (o->message && o->message[0]) return o->message;
  switch (code) {
    case WK_FAIL_BUILDER_NOT_FOUND: return "the builder phase failed: BUILDER_NOT_FOUND";
    case WK_FAIL_BUILDER_FAILED: return "the builder phase failed: BUILDER_FAILED";
    case WK_FAIL_CALL_FAILED: return "the calls phase failed: CALL_FAILED";
    case WK_FAIL_PLUGIN_NOT_FOUND: return "the writer phase failed: PLUGIN_NOT_FOUND";
    case WK_FAIL_PLUGIN_FAILED: return "the writer phase failed: PLUGIN_FAILED";
    case WK_FAIL_NONE:
    case WK_FAIL_ACTIVATION_FAILED:
    case WK_FAIL_IO_SCOPE_FAILED:
    case WK_FAIL_SLOT_LOST:
    case WK_FAIL_TASK_TIMEOUT:
    case WK_FAIL_OWNER_LOST:
    case WK_FAIL_CANCELLED:
    case WK_FAIL_WORKER_SHUTDOWN: break;
  }
  return phase == WK_PHASE_BUILDER ? "the builder phase failed"
         : phase == WK_PHASE_CALLS ? "the calls phase failed"
                                   : "the writer phase failed";
}

/* The builder's run: the outcome's span, clamped to START_BUILDER..now. */
static void builder_span(wk_task_statistic *st, const wk_phase_outcome *o, int64_t now_ms) {
  st->builder_finished_ms = now_ms;
  if (o->ran_to_ms <= 0) return;
  int64_t to = o->ran_to_ms < now_ms ? o->ran_to_ms : now_ms;
  int64_t from = o->ran_from_ms < to ? o->ran_from_ms : to;
  if (from < st->builder_started_ms) from = st->builder_started_ms;
  if (to < from) to = from;
  st->builder_started_ms = from;
  st->builder_finished_ms = to;
}

static void do_handle_phase_finished(wk_core *core, const char *task_id, size_t task_id_len,
                                     wk_phase phase, const wk_phase_outcome *outcome,
                                     int64_t now_ms, wk_transition_result *out) {
  memset(out, 0, sizeof *out);
  if (!outcome ||
      (phase != WK_PHASE_BUILDER && phase != WK_PHASE_CALLS && phase != WK_PHASE_WRITER) ||
      !wk_failure_code_valid((int)outcome->failure_code)) {
    out->err = WK_ERR_INVALID_ARGUMENT;
    return;
  }
  uint32_t i = task_in_phase(core, task_id, task_id_len, phase, &out->err);
  if (i == WK_NONE) return;
  wk_task *t = &core->tasks[i];
  wk_task_statistic *st = &t->result.statistic;
  wk_failure_code code = outcome->failure_code;
  if (!outcome->ok && !code) {
    code = phase == WK_PHASE_BUILDER ? WK_FAIL_BUILDER_FAILED
           : phase == WK_PHASE_CALLS ? WK_FAIL_CALL_FAILED
                                     : WK_FAIL_PLUGIN_FAILED;
  }
  end_phase(t, phase, outcome->ok, code, now_ms);
  switch (phase) {
    case WK_PHASE_BUILDER:
      builder_span(st, outcome, now_ms);
      if (!outcome->ok) {
        converge(core, i, WK_TASK_FAILED, code, phase_message(outcome, phase, code), false, now_ms,
                 &out->cmds);
        return;
      }
      start_phase(t, WK_PHASE_CALLS, now_ms);
      wk_cmd *calls = push_cmd(&out->cmds, WK_CMD_START_CALLS, t);
      calls->u.calls.call_list = outcome->call_list;
      calls->u.calls.streaming = outcome->streaming;
      return;
    case WK_PHASE_CALLS:
      st->calls = outcome->stats;
      t->result.outputs.data = copy_bytes(core, outcome->data);
      t->result.outputs.len = t->result.outputs.data ? outcome->data.len : 0;
      if (!outcome->ok) {
        converge(core, i, WK_TASK_FAILED, code, phase_message(outcome, phase, code), false, now_ms,
                 &out->cmds);
        return;
      }
      start_phase(t, WK_PHASE_WRITER, now_ms);
      wk_cmd *writer = push_cmd(&out->cmds, WK_CMD_START_WRITER, t);
      writer->u.writer.outputs = t->result.outputs;
      return;
    case WK_PHASE_WRITER:
      t->result.plugin_results.data = copy_bytes(core, outcome->data);
      t->result.plugin_results.len = t->result.plugin_results.data ? outcome->data.len : 0;
      if (!outcome->ok) {
        converge(core, i, WK_TASK_FAILED, code, phase_message(outcome, phase, code), false, now_ms,
                 &out->cmds);
        return;
      }
      converge(core, i, WK_TASK_SUCCEEDED, WK_FAIL_NONE, NULL, false, now_ms, &out->cmds);
      return;
    case WK_PHASE_PREPARING:
    case WK_PHASE_DONE: break;
  }
  WK_UNREACHABLE("phase validated above");
}

static wk_err do_handle_call_progress(wk_core *core, const char *task_id, size_t task_id_len,
                                      const wk_call_stats *stats) {
  wk_err err;
  uint32_t i = task_in_phase(core, task_id, task_id_len, WK_PHASE_CALLS, &err);
  if (i == WK_NONE) return err;
  core->tasks[i].result.statistic.calls = *stats;
  return WK_OK;
}

/* ---- timeouts, aborts, watch ---------------------------------------------- */

static uint32_t active_task(wk_core *core, const char *id, size_t len, wk_err *err) {
  uint32_t i = find_task_for_event(core, id, len);
  if (i == WK_NONE || core->tasks[i].stage == WK_STAGE_RESERVED) {
    *err = WK_ERR_NOT_FOUND;
    return WK_NONE;
  }
  *err = WK_OK;
  return i;
}

static void do_handle_task_timed_out(wk_core *core, const char *task_id, size_t task_id_len,
                                     int64_t now_ms, wk_transition_result *out) {
  memset(out, 0, sizeof *out);
  uint32_t i = active_task(core, task_id, task_id_len, &out->err);
  if (i == WK_NONE) return;
  wk_task *t = &core->tasks[i];
  if (t->stage != WK_STAGE_ACTIVE || now_ms < wk_heap_key(&core->timeout_heap, i)) {
    out->err = WK_ERR_STALE;
    return;
  }
  converge(core, i, WK_TASK_FAILED, WK_FAIL_TASK_TIMEOUT, "the task exceeded its timeout", true,
           now_ms, &out->cmds);
}

static void do_handle_abort(wk_core *core, const char *task_id, size_t task_id_len,
                            wk_failure_code code, const char *message, int64_t now_ms,
                            wk_transition_result *out) {
  memset(out, 0, sizeof *out);
  if (code != WK_FAIL_CANCELLED && code != WK_FAIL_WORKER_SHUTDOWN) {
    out->err = WK_ERR_INVALID_ARGUMENT;
    return;
  }
  wk_task_state state = code == WK_FAIL_CANCELLED ? WK_TASK_CANCELLED : WK_TASK_FAILED;
  uint32_t i = find_task_for_event(core, task_id, task_id_len);
  if (i == WK_NONE) {
    out->err = WK_ERR_NOT_FOUND;
    return;
  }
  wk_task *t = &core->tasks[i];
  if (t->stage == WK_STAGE_TERMINAL) return;
  if (t->stage == WK_STAGE_RESERVED) {
    /* never submitted: nothing runs, nobody watches; keep the answer for the id */
    release_slot(core, t->slot);
    t->digest_known = false;
    t->result.state = state;
    t->result.phase = WK_PHASE_DONE;
    t->result.failure_code = code;
    set_message(core, t, message);
    t->result.statistic.finished_ms = now_ms;
    retain(core, i, now_ms);
    return;
  }
  converge(core, i, state, code, message, true, now_ms, &out->cmds);
}

static wk_err do_handle_watch_attached(wk_core *core, const char *task_id, size_t task_id_len,
                                       int64_t now_ms) {
  (void)now_ms;
  wk_err err;
  uint32_t i = active_task(core, task_id, task_id_len, &err);
  if (i == WK_NONE || core->tasks[i].stage != WK_STAGE_ACTIVE) return err;
  wk_task *t = &core->tasks[i];
  t->watch_attached = true;
  t->watch_ever_attached = true;
  end_watch_grace(core, i);
  return WK_OK;
}

static wk_err do_handle_watch_detached(wk_core *core, const char *task_id, size_t task_id_len,
                                       int64_t now_ms) {
  (void)now_ms;
  wk_err err;
  uint32_t i = active_task(core, task_id, task_id_len, &err);
  if (i == WK_NONE || core->tasks[i].stage != WK_STAGE_ACTIVE) return err;
  wk_task *t = &core->tasks[i];
  t->watch_attached = false;
  end_watch_grace(core, i);
  return WK_OK;
}

static wk_err do_handle_watch_disconnected(wk_core *core, const char *task_id, size_t task_id_len,
                                           int64_t now_ms) {
  wk_err err;
  uint32_t i = active_task(core, task_id, task_id_len, &err);
  if (i == WK_NONE || core->tasks[i].stage != WK_STAGE_ACTIVE) return err;
  wk_task *t = &core->tasks[i];
  t->watch_attached = false;
  t->watch_ever_attached = true;
  t->watch_grace = true;
  wk_heap_set(&core->watch_heap, i, now_ms + core->cfg.watch_disconnect_grace_ms);
  return WK_OK;
}

static void do_handle_watch_grace_expired(wk_core *core, const char *task_id, size_t task_id_len,
                                          int64_t now_ms, wk_transition_result *out) {
  memset(out, 0, sizeof *out);
  uint32_t i = active_task(core, task_id, task_id_len, &out->err);
  if (i == WK_NONE) return;
  wk_task *t = &core->tasks[i];
  if (t->stage != WK_STAGE_ACTIVE || !t->watch_grace ||
      now_ms < wk_heap_key(&core->watch_heap, i)) {
    out->err = WK_ERR_STALE;
    return;
  }
  converge(core, i, WK_TASK_FAILED, WK_FAIL_OWNER_LOST,
           "every watcher disconnected and none re-attached within the grace period", true, now_ms,
           &out->cmds);
}

static void do_handle_slot_lease_expired(wk_core *core, uint64_t slot_id, int64_t now_ms,
                                         wk_transition_result *out) {
  memset(out, 0, sizeof *out);
  uint32_t s = wk_slot_id_index(slot_id);
  if (s >= core->cfg.task_slots || wk_slot_id_generation(slot_id) == 0) {
    out->err = WK_ERR_INVALID_SLOT;
    return;
  }
  wk_slot *slot = &core->slots[s];
  if (slot->generation != wk_slot_id_generation(slot_id) || slot->state != WK_SLOT_ALLOCATED ||
      now_ms < slot->lease_expires_ms) {
    out->err = WK_ERR_STALE;
    return;
  }
  uint32_t i = slot->task;
  WK_ASSERT(core->tasks[i].slot == s);
  if (core->tasks[i].stage == WK_STAGE_RESERVED) {
    release_slot(core, s);
    free_task(core, i);
    return;
  }
  converge(core, i, WK_TASK_FAILED, WK_FAIL_SLOT_LOST,
           "the slot's lease expired before the task was activated", true, now_ms, &out->cmds);
}

/* ---- views ------------------------------------------------------------------ */

wk_err wk_core_get_result(const wk_core *core, const char *task_id, size_t task_id_len,
                          const wk_task_result **result) {
  *result = NULL;
  uint32_t i = find_task(core, task_id, task_id_len);
  if (i == WK_NONE || core->tasks[i].stage == WK_STAGE_RESERVED) return WK_ERR_NOT_FOUND;
  *result = &core->tasks[i].result;
  return WK_OK;
}

wk_err wk_core_live_task(const wk_core *core, const char *task_id, size_t task_id_len,
                         wk_task_view *out) {
  uint32_t i = find_task(core, task_id, task_id_len);
  if (i == WK_NONE || core->tasks[i].stage != WK_STAGE_ACTIVE) return WK_ERR_NOT_FOUND;
  const wk_task *t = &core->tasks[i];
  WK_ASSERT(wk_heap_contains(&core->timeout_heap, i)); /* every ACTIVE task has a deadline */
  *out = (wk_task_view){
      .adapter_ctx = t->adapter_ctx,
      .slot_id = t->result.slot_id,
      .deadline_ms = wk_heap_key(&core->timeout_heap, i),
      .call_failure_policy = (wk_call_failure_policy)t->call_failure_policy,
      .max_failed_calls = t->max_failed_calls,
      .retry = t->retry,
  };
  return WK_OK;
}

wk_heartbeat wk_core_derive_heartbeat(const wk_core *core, int64_t now_ms) {
  wk_heartbeat hb = {
      .task_slots = core->cfg.task_slots,
      .reserved = core->n_allocated,
      .running = core->n_running,
      .free = core->n_free,
      .ready = core->ready,
      .draining = core->draining,
      .now_ms = now_ms,
  };
  return hb;
}

uint32_t wk_core_live_tasks(const wk_core *core) { return core->n_live; }

size_t wk_core_list_live_tasks(const wk_core *core, wk_task_id *out, size_t max) {
  /* live tasks are exactly those in the timeout heap */
  size_t n = 0;
  uint32_t cursor = 0, handle;
  while (n < max && wk_heap_walk(&core->timeout_heap, &cursor, &handle)) {
    const wk_task *t = &core->tasks[handle];
    out[n].len = t->id_len;
    memcpy(out[n].bytes, t->id, (size_t)t->id_len + 1);
    n++;
  }
  return n;
}

uint32_t wk_core_retained_count(const wk_core *core) { return core->retained_count; }
uint64_t wk_core_retained_bytes(const wk_core *core) { return core->retained_bytes; }

wk_slot_view wk_core_slot(const wk_core *core, uint32_t index) {
  wk_slot_view v = {0};
  WK_ASSERT(index < core->cfg.task_slots);
  const wk_slot *s = &core->slots[index];
  v.state = (wk_slot_state)s->state;
  v.generation = s->generation;
  v.lease_expires_ms = s->lease_expires_ms;
  if (s->state != WK_SLOT_FREE) {
    v.task_id = core->tasks[s->task].id;
    v.task_id_len = core->tasks[s->task].id_len;
  }
  return v;
}

/* ---- the input boundary (core/wk_core_tap.h) -------------------------------------
 * Every state-changing entry point is its do_* above (its one caller: inlined) behind
 * a test of `tapped`. With a tap the call goes to its tapped_* twin out of line, which
 * hands the tap the input, calls the entry point again with `tapped` off, and hands the
 * tap the answer. The path without a tap keeps no state across the call and costs a
 * load and a predictable branch. */

#define TAPPED(core) __builtin_expect((core)->tapped, 0)
#define TAPPED_FN static __attribute__((noinline, cold))

void wk_core_set_tap(wk_core *core, const wk_core_tap *tap) {
  core->tap = tap ? *tap : (wk_core_tap){0};
  core->tapped = core->tap.input || core->tap.output;
}

void wk_core_set_forget_hook(wk_core *core, wk_core_forget_fn fn, void *ud) {
  core->forget = fn;
  core->forget_ud = fn ? ud : NULL;
}

static void tap_in(const wk_core *core, const wk_core_input *in) {
  if (core->tap.input) core->tap.input(core->tap.ctx, in);
}

static void tap_out(const wk_core *core, const wk_core_input *in, const wk_core_output *out) {
  if (core->tap.output) core->tap.output(core->tap.ctx, in, out);
}

TAPPED_FN void tapped_set_ready(wk_core *core, bool ready) {
  const wk_core_input in = {.kind = WK_INPUT_SET_READY, .flag = ready};
  tap_in(core, &in);
  core->tapped = false; /* the entry point itself, past its test */
  wk_core_set_ready(core, ready);
  core->tapped = true;
  tap_out(core, &in, &(wk_core_output){.err = WK_OK});
}

void wk_core_set_ready(wk_core *core, bool ready) {
  if (TAPPED(core)) {
    tapped_set_ready(core, ready);
    return;
  }
  do_set_ready(core, ready);
}

TAPPED_FN void tapped_set_draining(wk_core *core, bool draining) {
  const wk_core_input in = {.kind = WK_INPUT_SET_DRAINING, .flag = draining};
  tap_in(core, &in);
  core->tapped = false; /* the entry point itself, past its test */
  wk_core_set_draining(core, draining);
  core->tapped = true;
  tap_out(core, &in, &(wk_core_output){.err = WK_OK});
}

void wk_core_set_draining(wk_core *core, bool draining) {
  if (TAPPED(core)) {
    tapped_set_draining(core, draining);
    return;
  }
  do_set_draining(core, draining);
}

TAPPED_FN void tapped_set_admission_paused(wk_core *core, const char *reason) {
  const wk_core_input in = {.kind = WK_INPUT_SET_PAUSED, .message = reason};
  tap_in(core, &in);
  core->tapped = false; /* the entry point itself, past its test */
  wk_core_set_admission_paused(core, reason);
  core->tapped = true;
  tap_out(core, &in, &(wk_core_output){.err = WK_OK});
}

void wk_core_set_admission_paused(wk_core *core, const char *reason) {
  if (TAPPED(core)) {
    tapped_set_admission_paused(core, reason);
    return;
  }
  do_set_admission_paused(core, reason);
}

TAPPED_FN void tapped_request_slot(wk_core *core, const char *task_id, size_t task_id_len,
                                   int64_t ttl_ms, int64_t now_ms, wk_slot_result *out) {
  const wk_core_input in = {.kind = WK_INPUT_REQUEST_SLOT,
                            .now_ms = now_ms,
                            .task_id = task_id,
                            .task_id_len = task_id_len,
                            .ttl_ms = ttl_ms};
  tap_in(core, &in);
  core->tapped = false; /* the entry point itself, past its test */
  wk_core_handle_request_slot(core, task_id, task_id_len, ttl_ms, now_ms, out);
  core->tapped = true;
  tap_out(core, &in, &(wk_core_output){.err = out->err, .slot = out});
}

void wk_core_handle_request_slot(wk_core *core, const char *task_id, size_t task_id_len,
                                 int64_t ttl_ms, int64_t now_ms, wk_slot_result *out) {
  if (TAPPED(core)) {
    tapped_request_slot(core, task_id, task_id_len, ttl_ms, now_ms, out);
    return;
  }
  do_handle_request_slot(core, task_id, task_id_len, ttl_ms, now_ms, out);
}

TAPPED_FN void tapped_submit(wk_core *core, const wk_submit_request *req, void *adapter_ctx,
                             int64_t now_ms, wk_submit_result *out) {
  const wk_core_input in = {.kind = WK_INPUT_SUBMIT,
                            .now_ms = now_ms,
                            .task_id = req->task_id,
                            .task_id_len = req->task_id_len,
                            .submit = req};
  tap_in(core, &in);
  core->tapped = false; /* the entry point itself, past its test */
  wk_core_handle_submit(core, req, adapter_ctx, now_ms, out);
  core->tapped = true;
  tap_out(core, &in, &(wk_core_output){.err = out->err, .submit = out});
}

void wk_core_handle_submit(wk_core *core, const wk_submit_request *req, void *adapter_ctx,
                           int64_t now_ms, wk_submit_result *out) {
  if (TAPPED(core)) {
    tapped_submit(core, req, adapter_ctx, now_ms, out);
    return;
  }
  do_handle_submit(core, req, adapter_ctx, now_ms, out);
}

/* Runs one of the transition inputs (a task's or slot's event answered with commands)
 * by its handler. */
static void run_transition(wk_core *core, const wk_core_input *in, wk_transition_result *out) {
  const char *id = in->task_id;
  size_t len = in->task_id_len;
  switch (in->kind) {
    case WK_INPUT_ACTIVATION_PREPARED:
      do_handle_activation_prepared(core, id, len, in->slot_id, in->code_epoch, in->now_ms, out);
      return;
    case WK_INPUT_ACTIVATION_FAILED:
      do_handle_activation_failed(core, id, len, in->code, in->message, in->now_ms, out);
      return;
    case WK_INPUT_PHASE_FINISHED:
      do_handle_phase_finished(core, id, len, in->phase, in->outcome, in->now_ms, out);
      return;
    case WK_INPUT_TASK_TIMED_OUT: do_handle_task_timed_out(core, id, len, in->now_ms, out); return;
    case WK_INPUT_ABORT:
      do_handle_abort(core, id, len, in->code, in->message, in->now_ms, out);
      return;
    case WK_INPUT_WATCH_GRACE_EXPIRED:
      do_handle_watch_grace_expired(core, id, len, in->now_ms, out);
      return;
    case WK_INPUT_SLOT_LEASE_EXPIRED:
      do_handle_slot_lease_expired(core, in->slot_id, in->now_ms, out);
      return;
    case WK_INPUT_SET_READY:
    case WK_INPUT_SET_DRAINING:
    case WK_INPUT_SET_PAUSED:
    case WK_INPUT_REQUEST_SLOT:
    case WK_INPUT_SUBMIT:
    case WK_INPUT_CALL_PROGRESS:
    case WK_INPUT_WATCH_ATTACHED:
    case WK_INPUT_WATCH_DETACHED:
    case WK_INPUT_WATCH_DISCONNECTED:
    case WK_INPUT_PURGE: break;
  }
  WK_UNREACHABLE("an input kind that is not a transition");
}

/* The tapped path of the transition inputs, which share one answer (a transition
 * result): recorded, run with the tap off (inputs it causes are not recorded again),
 * and its answer recorded. */
TAPPED_FN void tapped_transition(wk_core *core, const wk_core_input *in,
                                 wk_transition_result *out) {
  tap_in(core, in);
  core->tapped = false;
  run_transition(core, in, out);
  core->tapped = true;
  tap_out(core, in, &(wk_core_output){.err = out->err, .transition = out});
}

void wk_core_handle_activation_prepared(wk_core *core, const char *task_id, size_t task_id_len,
                                        uint64_t slot_id, uint64_t code_epoch, int64_t now_ms,
                                        wk_transition_result *out) {
  if (TAPPED(core)) {
    tapped_transition(core,
                      &(wk_core_input){.kind = WK_INPUT_ACTIVATION_PREPARED,
                                       .now_ms = now_ms,
                                       .task_id = task_id,
                                       .task_id_len = task_id_len,
                                       .slot_id = slot_id,
                                       .code_epoch = code_epoch},
                      out);
    return;
  }
  do_handle_activation_prepared(core, task_id, task_id_len, slot_id, code_epoch, now_ms, out);
}

void wk_core_handle_activation_failed(wk_core *core, const char *task_id, size_t task_id_len,
                                      wk_failure_code code, const char *message, int64_t now_ms,
                                      wk_transition_result *out) {
  if (TAPPED(core)) {
    tapped_transition(core,
                      &(wk_core_input){.kind = WK_INPUT_ACTIVATION_FAILED,
                                       .now_ms = now_ms,
                                       .task_id = task_id,
                                       .task_id_len = task_id_len,
                                       .code = code,
                                       .message = message},
                      out);
    return;
  }
  do_handle_activation_failed(core, task_id, task_id_len, code, message, now_ms, out);
}

void wk_core_handle_phase_finished(wk_core *core, const char *task_id, size_t task_id_len,
                                   wk_phase phase, const wk_phase_outcome *outcome, int64_t now_ms,
                                   wk_transition_result *out) {
  if (TAPPED(core)) {
    tapped_transition(core,
                      &(wk_core_input){.kind = WK_INPUT_PHASE_FINISHED,
                                       .now_ms = now_ms,
                                       .task_id = task_id,
                                       .task_id_len = task_id_len,
                                       .phase = phase,
                                       .outcome = outcome},
                      out);
    return;
  }
  do_handle_phase_finished(core, task_id, task_id_len, phase, outcome, now_ms, out);
}

TAPPED_FN wk_err tapped_call_progress(wk_core *core, const char *task_id, size_t task_id_len,
                                      const wk_call_stats *stats) {
  const wk_core_input in = {.kind = WK_INPUT_CALL_PROGRESS,
                            .task_id = task_id,
                            .task_id_len = task_id_len,
                            .stats = stats};
  tap_in(core, &in);
  core->tapped = false; /* the entry point itself, past its test */
  wk_err err = wk_core_handle_call_progress(core, task_id, task_id_len, stats);
  core->tapped = true;
  tap_out(core, &in, &(wk_core_output){.err = err});
  return err;
}

wk_err wk_core_handle_call_progress(wk_core *core, const char *task_id, size_t task_id_len,
                                    const wk_call_stats *stats) {
  if (TAPPED(core)) return tapped_call_progress(core, task_id, task_id_len, stats);
  return do_handle_call_progress(core, task_id, task_id_len, stats);
}

void wk_core_handle_task_timed_out(wk_core *core, const char *task_id, size_t task_id_len,
                                   int64_t now_ms, wk_transition_result *out) {
  if (TAPPED(core)) {
    tapped_transition(core,
                      &(wk_core_input){.kind = WK_INPUT_TASK_TIMED_OUT,
                                       .now_ms = now_ms,
                                       .task_id = task_id,
                                       .task_id_len = task_id_len},
                      out);
    return;
  }
  do_handle_task_timed_out(core, task_id, task_id_len, now_ms, out);
}

void wk_core_handle_abort(wk_core *core, const char *task_id, size_t task_id_len,
                          wk_failure_code code, const char *message, int64_t now_ms,
                          wk_transition_result *out) {
  if (TAPPED(core)) {
    tapped_transition(core,
                      &(wk_core_input){.kind = WK_INPUT_ABORT,
                                       .now_ms = now_ms,
                                       .task_id = task_id,
                                       .task_id_len = task_id_len,
                                       .code = code,
                                       .message = message},
                      out);
    return;
  }
  do_handle_abort(core, task_id, task_id_len, code, message, now_ms, out);
}

/* The tapped path of the watch inputs, which share one shape (a task id and `now`):
 * recorded, run by `handle` with the tap off (inputs it causes are not recorded again),
 * and its answer recorded. */
TAPPED_FN wk_err tapped_watch_input(wk_core *core, wk_core_input_kind kind, const char *task_id,
                                    size_t task_id_len, int64_t now_ms,
                                    wk_err (*handle)(wk_core *, const char *, size_t, int64_t)) {
  const wk_core_input in = {
      .kind = kind, .now_ms = now_ms, .task_id = task_id, .task_id_len = task_id_len};
  tap_in(core, &in);
  core->tapped = false; /* the entry point itself, past its test */
  wk_err err = handle(core, task_id, task_id_len, now_ms);
  core->tapped = true;
  tap_out(core, &in, &(wk_core_output){.err = err});
  return err;
}

wk_err wk_core_handle_watch_attached(wk_core *core, const char *task_id, size_t task_id_len,
                                     int64_t now_ms) {
  if (TAPPED(core))
    return tapped_watch_input(core, WK_INPUT_WATCH_ATTACHED, task_id, task_id_len, now_ms,
                              wk_core_handle_watch_attached);
  return do_handle_watch_attached(core, task_id, task_id_len, now_ms);
}

wk_err wk_core_handle_watch_detached(wk_core *core, const char *task_id, size_t task_id_len,
                                     int64_t now_ms) {
  if (TAPPED(core))
    return tapped_watch_input(core, WK_INPUT_WATCH_DETACHED, task_id, task_id_len, now_ms,
                              wk_core_handle_watch_detached);
  return do_handle_watch_detached(core, task_id, task_id_len, now_ms);
}

wk_err wk_core_handle_watch_disconnected(wk_core *core, const char *task_id, size_t task_id_len,
                                         int64_t now_ms) {
  if (TAPPED(core))
    return tapped_watch_input(core, WK_INPUT_WATCH_DISCONNECTED, task_id, task_id_len, now_ms,
                              wk_core_handle_watch_disconnected);
  return do_handle_watch_disconnected(core, task_id, task_id_len, now_ms);
}

void wk_core_handle_watch_grace_expired(wk_core *core, const char *task_id, size_t task_id_len,
                                        int64_t now_ms, wk_transition_result *out) {
  if (TAPPED(core)) {
    tapped_transition(core,
                      &(wk_core_input){.kind = WK_INPUT_WATCH_GRACE_EXPIRED,
                                       .now_ms = now_ms,
                                       .task_id = task_id,
                                       .task_id_len = task_id_len},
                      out);
    return;
  }
  do_handle_watch_grace_expired(core, task_id, task_id_len, now_ms, out);
}

void wk_core_handle_slot_lease_expired(wk_core *core, uint64_t slot_id, int64_t now_ms,
                                       wk_transition_result *out) {
  if (TAPPED(core)) {
    tapped_transition(
        core,
        &(wk_core_input){.kind = WK_INPUT_SLOT_LEASE_EXPIRED, .now_ms = now_ms, .slot_id = slot_id},
        out);
    return;
  }
  do_handle_slot_lease_expired(core, slot_id, now_ms, out);
}

TAPPED_FN size_t tapped_purge_expired_results(wk_core *core, int64_t now_ms) {
  const wk_core_input in = {.kind = WK_INPUT_PURGE, .now_ms = now_ms};
  tap_in(core, &in);
  core->tapped = false; /* the entry point itself, past its test */
  size_t purged = wk_core_purge_expired_results(core, now_ms);
  core->tapped = true;
  tap_out(core, &in, &(wk_core_output){.err = WK_OK, .purged = purged});
  return purged;
}

size_t wk_core_purge_expired_results(wk_core *core, int64_t now_ms) {
  if (TAPPED(core)) return tapped_purge_expired_results(core, now_ms);
  return wk_core__purge_expired_results(core, now_ms);
}

/* wk_core_int.h: WorkerCore's internal layout, shared by its own files only
 * (wk_core.c handlers, wk_core_timers.c, wk_core_check.c, wk_task_index.c). */
#ifndef WK_CORE_INT_H
#define WK_CORE_INT_H

#include <stddef.h>

#include "core/wk_core.h"
#include "core/wk_core_tap.h"
#include "lib/wk_hash.h"
#include "lib/wk_heap.h"

#define WK_NONE UINT32_MAX

/* Where a task record stands. */
typedef enum wk_stage {
  WK_STAGE_FREE = 0,     /* unused record, on the free list */
  WK_STAGE_RESERVED = 1, /* slot reserved by RequestTaskSlot, not yet submitted */
  WK_STAGE_ACTIVE = 2,   /* submitted, not terminal */
  WK_STAGE_TERMINAL = 3, /* converged; retained for GetTaskResult and idempotency */
} wk_stage;

/* A task record: 448 bytes, seven cache lines, 64-byte aligned. At 100,000 slots the
 * records no longer fit any cache, so an event's cost is the lines it touches: the
 * first line holds what every lookup and event reads (hash, slot, stage, flags, the
 * adapter context and the start of the id: all of an id up to 31 bytes); the public
 * result fills the last four. Timer deadlines live in the heaps, the retention
 * deadline in the retention ring: the record does not keep copies. */
typedef struct wk_task {
  /* ---- line 0 ---- */
  _Alignas(64) uint64_t hash;
  uint32_t slot;      /* slot index while RESERVED/ACTIVE, else WK_NONE */
  uint32_t next_free; /* free list link while FREE */
  uint8_t stage;      /* wk_stage */
  uint8_t id_len;
  bool watch_attached;
  bool watch_ever_attached;
  bool watch_grace;            /* in the watch heap (a grace period runs) */
  bool digest_known;           /* false for a reservation cancelled before any submit */
  uint8_t call_failure_policy; /* wk_call_failure_policy */
  uint8_t unused_;
  void *adapter_ctx;
  char id[WK_TASK_ID_MAX + 1];
  /* ---- submit-time settings, read rarely ---- */
  uint32_t max_failed_calls;
  uint32_t message_size; /* allocation behind result.failure_message, 0 = static */
  uint64_t digest;
  wk_retry_policy retry;
  /* ---- the public result, lines 3..6 ---- */
  wk_task_result result;
} wk_task;

_Static_assert(sizeof(wk_task) % 64 == 0 && sizeof(wk_task) <= 448,
               "a task record is at most seven whole cache lines");
_Static_assert(offsetof(wk_task, id) + 32 <= 64, "an id of up to 31 bytes sits in line 0");

/* One retained result in the retention ring, oldest first. The ring answers the
 * purge and names the next record to evict, with its hash tag, without reading the
 * record: eviction can fetch the record and its index entry at once. */
typedef struct wk_retained {
  int64_t until_ms; /* purge at */
  uint32_t record;
  uint32_t hash32;
} wk_retained;

typedef struct wk_slot {
  uint8_t state; /* wk_slot_state */
  uint32_t generation;
  uint32_t task;            /* record index while ALLOCATED/RUNNING */
  uint32_t next_free;       /* free list link while FREE */
  int64_t lease_expires_ms; /* while ALLOCATED */
} wk_slot;

/* Open-addressing hash table (linear probing, backward-shift deletion) from task id
 * to record index. Each entry carries the low 32 bits of the id's hash, so probing and
 * the deletion shift never read a task record except on a likely match. */
typedef struct wk_index_entry {
  uint32_t not_record; /* ~record, so that zeroed memory reads empty (~WK_NONE == 0): the
                          table stays untouched, costing no RSS, until used */
  uint32_t hash32;
} wk_index_entry;

typedef struct wk_task_index {
  wk_index_entry *entries;
  uint32_t mask; /* capacity - 1, capacity a power of two */
  uint32_t count;
  uint32_t recent; /* the record of the task the core last handled an event of, tried
                      before the table (WK_NONE when none, or once it is removed) */
} wk_task_index;

struct wk_core {
  wk_core_config cfg;
  bool ready, draining;
  char paused[WK_CORE_PAUSE_REASON_MAX]; /* admission paused: why ("" = admitting) */
  bool tapped;                           /* tap has a function: the boundary reports */
  wk_core_tap tap;                       /* core/wk_core_tap.h */
  wk_core_forget_fn forget;              /* wk_core_set_forget_hook (NULL: none) */
  void *forget_ud;

  wk_slot *slots;
  uint32_t free_slot_head;
  uint32_t n_free, n_allocated, n_running;

  wk_task *tasks; /* 64-byte aligned inside tasks_mem */
  void *tasks_mem;
  uint32_t task_capacity;
  uint32_t free_task_head;
  uint32_t tasks_touched; /* records [tasks_touched, task_capacity) were never used: still
                             the allocator's zero pages (FREE), on no list, so an idle
                             core costs no memory for its retained-results capacity */
  uint32_t n_live;        /* ACTIVE */

  wk_task_index index;

  wk_heap lease_heap;   /* ALLOCATED slots by lease expiry (handle = slot index) */
  wk_heap timeout_heap; /* ACTIVE tasks by deadline (handle = record index) */
  wk_heap watch_heap;   /* ACTIVE tasks in watch grace (handle = record index) */

  wk_retained *retained; /* ring of retained_cap entries, oldest at retained_head */
  uint32_t retained_cap; /* max_retained_results + 1: the newest is kept past the bound */
  uint32_t retained_head;
  uint32_t retained_count;
  uint64_t retained_bytes;
};

/* ---- wk_task_index.c ---- */
void wk_core__index_init(wk_task_index *ix, uint32_t records, const wk_allocator *a);
void wk_core__index_free(wk_task_index *ix, const wk_allocator *a);
/** Record index of the task with this id, or WK_NONE. */
uint32_t wk_core__index_find(const wk_core *core, const char *id, size_t len, uint64_t hash);
/** Adds record `t` (its id and hash set); the id must not be present. */
void wk_core__index_insert(wk_core *core, uint32_t t);
/** Removes record `t`, which must be present. */
void wk_core__index_remove(wk_core *core, uint32_t t);

/* ---- wk_core_timers.c ---- */
/** wk_core_purge_expired_results without the input boundary (wk_core.c wraps it). */
size_t wk_core__purge_expired_results(wk_core *core, int64_t now_ms);

/* ---- wk_core.c, used by the timer and check files ---- */
/** Forgets the oldest retained result: ring, index, blobs, record back to the free list. */
void wk_core__evict_oldest(wk_core *core);
/** Bytes a TERMINAL record holds, as counted in retained_bytes. */
uint64_t wk_core__task_held_bytes(const wk_task *t);

/** Ring index of the retained entry `k` places after the oldest (k < retained_cap). */
static inline uint32_t wk_retained_index(const wk_core *core, uint32_t k) {
  uint32_t i = core->retained_head + k;
  return i >= core->retained_cap ? i - core->retained_cap : i;
}

/* Hints that a line will be read soon; pure (no effect on results), compiles to a
 * prefetch instruction. Used where the next record or index line is known before it
 * is needed, so its cache miss overlaps other work instead of following it. */
#define WK_PREFETCH(p) __builtin_prefetch((p), 0, 3)
#define WK_PREFETCH_W(p) __builtin_prefetch((p), 1, 3)
/* A function that only prefetches must be inlined: GCC takes one left out of line
 * for a pure function (a prefetch has no side effect) and deletes the calls to it. */
#define WK_PREFETCH_FN static inline __attribute__((always_inline))

/** Prefetches all lines of record `t` (for writing). */
WK_PREFETCH_FN void wk_task_prefetch(const wk_core *core, uint32_t t) {
  const char *p = (const char *)&core->tasks[t];
  for (size_t off = 0; off < sizeof(wk_task); off += 64) WK_PREFETCH_W(p + off);
}

/** Hash of a task id, as stored in wk_task.hash. */
static inline uint64_t wk_task_hash(const char *id, size_t len) {
  return wk_hash64(id, len, 0x6b77u);
}

#endif

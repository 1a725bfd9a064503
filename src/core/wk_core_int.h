/* wk_core_int.h: WorkerCore's internal layout, shared by its own files only
 * (wk_core.c handlers, wk_core_timers.c, wk_core_check.c, wk_task_index.c). */
#ifndef WK_CORE_INT_H
#define WK_CORE_INT_H

#include "core/wk_core.h"
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

typedef struct wk_task {
  /* what every lookup reads first sits together: hash, stage, length, the id itself */
  uint64_t hash;
  uint8_t stage;        /* wk_stage */
  uint8_t id_len;
  char id[WK_TASK_ID_MAX + 1];
  uint32_t slot;        /* slot index while RESERVED/ACTIVE, else WK_NONE */
  uint32_t link_prev;   /* retention FIFO (TERMINAL) */
  uint32_t link_next;   /* retention FIFO (TERMINAL) or free list (FREE) */
  bool digest_known;    /* false for a reservation cancelled before any submit */
  bool watch_attached;
  bool watch_ever_attached;
  uint64_t digest;
  uint64_t requested_epoch;
  int64_t deadline_ms;              /* accepted + timeout */
  int64_t watch_disconnect_deadline_ms;
  int64_t retained_until_ms;
  uint64_t held_bytes;              /* counted in retained_bytes while TERMINAL */
  size_t message_size;              /* allocation behind result.failure_message, 0 = static */
  wk_call_failure_policy call_failure_policy;
  uint32_t max_failed_calls;
  wk_retry_policy retry;
  void *adapter_ctx;
  wk_task_result result;
} wk_task;

typedef struct wk_slot {
  uint8_t state; /* wk_slot_state */
  uint32_t generation;
  uint32_t task;      /* record index while ALLOCATED/RUNNING */
  uint32_t next_free; /* free list link while FREE */
  int64_t lease_expires_ms; /* while ALLOCATED */
} wk_slot;

/* Open-addressing hash table (linear probing, backward-shift deletion) from task id
 * to record index. Each entry carries the low 32 bits of the id's hash, so probing and
 * the deletion shift never read a task record except on a likely match. */
typedef struct wk_index_entry {
  uint32_t record; /* WK_NONE = empty */
  uint32_t hash32;
} wk_index_entry;

typedef struct wk_task_index {
  wk_index_entry *entries;
  uint32_t mask; /* capacity - 1, capacity a power of two */
  uint32_t count;
} wk_task_index;

struct wk_core {
  wk_core_config cfg;
  bool ready, draining;

  wk_slot *slots;
  uint32_t free_slot_head;
  uint32_t n_free, n_allocated, n_running;

  wk_task *tasks;
  uint32_t task_capacity;
  uint32_t free_task_head;
  uint32_t n_live; /* ACTIVE */

  wk_task_index index;

  wk_heap lease_heap;   /* ALLOCATED slots by lease expiry (handle = slot index) */
  wk_heap timeout_heap; /* ACTIVE tasks by deadline (handle = record index) */
  wk_heap watch_heap;   /* ACTIVE tasks in watch grace (handle = record index) */

  uint32_t retained_head, retained_tail; /* FIFO, oldest at head */
  uint32_t retained_count;
  uint64_t retained_bytes;
};

/* ---- wk_task_index.c ---- */
void wk_task_index_init(wk_task_index *ix, uint32_t records, const wk_allocator *a);
void wk_task_index_free(wk_task_index *ix, const wk_allocator *a);
/** Record index of the task with this id, or WK_NONE. */
uint32_t wk_task_index_find(const wk_core *core, const char *id, size_t len, uint64_t hash);
/** Adds record `t` (its id and hash set); the id must not be present. */
void wk_task_index_insert(wk_core *core, uint32_t t);
/** Removes record `t`, which must be present. */
void wk_task_index_remove(wk_core *core, uint32_t t);

/* ---- wk_core.c, used by the timer file ---- */
/** Forgets a TERMINAL record: index, FIFO, blobs, back to the free list. */
void wk_core_evict_retained(wk_core *core, uint32_t t);

/** Hash of a task id, as stored in wk_task.hash. */
static inline uint64_t wk_task_hash(const char *id, size_t len) {
  return wk_hash64(id, len, 0x6b77u);
}

#endif

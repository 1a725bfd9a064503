/* wk_dispatch_int.h: DispatcherCore's internal layout, shared by its own files only
 * (wk_dispatcher.c: configuration, tasks, views; wk_dispatch_sched.c: emission and
 * the send loop; wk_dispatch_calls.c: results, retries, timers, subcalls, cancel;
 * wk_dispatch_check.c: the invariant walk). */
#ifndef WK_DISPATCH_INT_H
#define WK_DISPATCH_INT_H

#include "core/wk_dispatcher.h"
#include "lib/wk_heap.h"
#include "lib/wk_rng.h"

#define WK_DNONE UINT32_MAX

/* ---- call records ---------------------------------------------------------------
 * A record exists for a call from its first SEND (top-level) or its request (child)
 * until it is final or dropped. It is in exactly one state, and the state names its
 * container:
 *   QUEUED    in its task's ready FIFO (retry after backoff, or a child not yet sent)
 *   INFLIGHT  sent; counted in task->inflight and d->inflight
 *   WAITING   a parent waiting on children (not counted in admission)
 *   RESUMING  a parent whose children are all final, running again outside admission
 *   BACKOFF   in d->backoff_heap until its retry time
 * INFLIGHT, WAITING and RESUMING are "live attempts": call_id = gen << 32 | index
 * names them, and they sit in d->deadline_heap when their deadline is finite.
 * Every live record is on its task's member list; children are on their parent's
 * child list (a parent has children only while WAITING). */
typedef enum wk_dcall_state {
  WK_DC_FREE = 0,
  WK_DC_QUEUED = 1,
  WK_DC_INFLIGHT = 2,
  WK_DC_WAITING = 3,
  WK_DC_RESUMING = 4,
  WK_DC_BACKOFF = 5,
} wk_dcall_state;

typedef struct wk_dcall {
  uint32_t gen;            /* attempt generation: bumped at every SEND, never 0 once sent */
  uint32_t task;           /* task record index */
  uint32_t index;          /* top-level: call index; child: position in its group */
  uint32_t parent;         /* parent record, WK_DNONE at depth 0 */
  uint32_t q_prev, q_next; /* ready FIFO; q_next links the free list */
  uint32_t m_prev, m_next; /* task member list */
  uint32_t s_prev, s_next; /* parent's child list */
  uint32_t child_head;     /* first live child (WAITING only) */
  uint32_t group_left;     /* children not yet final = length of the child list */
  uint64_t group;          /* the group this parent waits on (WAITING, RESUMING), else 0 */
  int64_t deadline_ms;     /* live attempt's deadline, INT64_MAX = none */
  int64_t backoff_ms;      /* base of the last backoff drawn (grows by the multiplier) */
  uint16_t attempts;       /* attempts sent so far */
  uint8_t state;           /* wk_dcall_state */
  uint8_t depth;
  bool again; /* given back unstarted: its next SEND says so */
} wk_dcall;

typedef struct wk_dlist {
  uint32_t head, tail, len;
} wk_dlist;

/* ---- task records ----------------------------------------------------------------- */

typedef enum wk_dtask_state {
  WK_DT_FREE = 0,
  WK_DT_LIVE = 1,      /* may still send */
  WK_DT_ENDED = 2,     /* TASK_DONE decided; only CANCELs may still come out */
  WK_DT_CANCELLED = 3, /* cancelled: nothing but CANCELs come out */
} wk_dtask_state;

typedef enum wk_dtask_where {
  WK_DW_NOWHERE = 0,
  WK_DW_RING = 1,   /* in the round-robin ring of tasks with sendable work */
  WK_DW_PARKED = 2, /* sendable work needs a call record and none was free */
} wk_dtask_where;

typedef struct wk_dtask {
  uint64_t key;
  wk_disp_task_params p; /* normalised */
  uint32_t gen;          /* handle generation, 1..WK_DTASK_GEN_MASK */
  uint8_t state;         /* wk_dtask_state */
  uint8_t where;         /* wk_dtask_where */
  bool last;
  bool done_pending; /* on the TASK_DONE FIFO */
  bool ok;
  uint32_t window, inflight;
  uint32_t waiting, backoff; /* records WAITING or RESUMING; records in BACKOFF */
  uint32_t added, next_index, finished, failed;
  uint32_t l_prev, l_next; /* ring or parked list; l_next links the free list */
  uint32_t d_prev, d_next; /* TASK_DONE FIFO */
  wk_dlist members;        /* every record of the task (m_prev/m_next) */
  wk_dlist ready;          /* QUEUED records (q_prev/q_next) */
  uint64_t succeeded, retried, subcalls, returned;
} wk_dtask;

/* Task handle: generation (12 bits) above the record index (20 bits); never 0. */
#define WK_DTASK_INDEX_BITS 20u
#define WK_DTASK_GEN_MASK 0xfffu

static inline uint32_t wk_dtask_handle(uint32_t index, uint32_t gen) {
  return (gen << WK_DTASK_INDEX_BITS) | index;
}

static inline uint64_t wk_dcall_id(uint32_t index, uint32_t gen) {
  return ((uint64_t)gen << 32) | index;
}

/* ---- pending actions -----------------------------------------------------------------
 * CANCEL, CALL_DONE, SUBCALL_DONE and SUBCALLS_COMPLETE are recorded here when decided
 * and emitted by the next emission with room. Between two moments when the queue is
 * empty, each record adds at most one CANCEL, one *_DONE and one SUBCALLS_COMPLETE: a
 * second of any needs a new attempt or new children to be sent, SENDs are emitted only
 * when this queue is empty, and a record freed meanwhile is reused only for a QUEUED
 * child, which adds nothing before its SEND. So 3 x max_calls entries suffice. (2 x is
 * not enough: a chain parent <- child <- grandchild whose deadlines pass in one tick,
 * grandchild first, adds CANCEL, SUBCALL_DONE and SUBCALLS_COMPLETE per level.) */
typedef struct wk_dpend {
  uint64_t call_id;
  uint64_t key;            /* task key */
  uint64_t group;          /* child: its group */
  uint64_t parent_call_id; /* child CANCEL */
  uint32_t task;           /* task handle */
  uint32_t index;
  uint32_t parent; /* SUBCALL_DONE: parent record (to drop it if the group died) */
  uint16_t attempts;
  uint8_t kind; /* wk_disp_action_kind */
  uint8_t code; /* result (DONE kinds) or reason (CANCEL) */
  uint8_t depth;
} wk_dpend;

struct wk_disp {
  wk_disp_config cfg;
  uint32_t capacity;
  uint32_t inflight;
  wk_rng rng;

  wk_dcall *calls;
  uint32_t free_call_head, free_calls;
  uint32_t calls_touched; /* records [calls_touched, max_calls) were never used: still the
                             allocator's zero pages (FREE, gen 0), on no list, so an idle
                             dispatcher costs no memory for its max_calls records */

  wk_dtask *tasks;
  uint32_t free_task_head, n_tasks;

  wk_dlist ring;   /* tasks with sendable work and window room (l_prev/l_next) */
  wk_dlist parked; /* tasks whose next unit needs a record and none was free */
  wk_dlist done;   /* tasks with TASK_DONE to emit (d_prev/d_next) */

  wk_heap backoff_heap;  /* BACKOFF records by retry time */
  wk_heap deadline_heap; /* live attempts with a finite deadline */

  wk_dpend *pend;
  uint32_t pend_cap, pend_head, pend_count;

  uint64_t group_seq;
  uint64_t sends, stale_results, timeouts, retries, not_started;
};

/* ---- wk_dispatcher.c ---- */
/** Task record behind a handle, or NULL when the handle is stale or unknown. */
wk_dtask *wk_disp__task(const wk_disp *d, uint32_t handle);
uint32_t wk_disp__handle(const wk_disp *d, uint32_t t);
/** Records an action to emit. */
wk_dpend *wk_disp__pend_push(wk_disp *d, wk_disp_action_kind kind);

/* ---- wk_dispatch_sched.c ---- */
/** True when the task may send now: live, work to send, inflight < window. */
bool wk_disp__eligible(const wk_disp *d, const wk_dtask *t);
/** True when the task's next unit is a new top-level call (needs a free record). */
bool wk_disp__needs_record(const wk_dtask *t);
/** Puts the task in or out of the ring after anything that changes eligibility. */
void wk_disp__update(wk_disp *d, uint32_t t);
/** Takes the task out of the ring or the parked list. */
void wk_disp__unschedule(wk_disp *d, uint32_t t);
/** Emits pending actions, TASK_DONEs, then (with `sends`) SENDs: the end of every
 * entry point. Sets out->more when something is left for a later poll. */
void wk_disp__flush(wk_disp *d, int64_t now_ms, bool sends, wk_disp_out *out);
void wk_disp__ready_push(wk_disp *d, uint32_t c);
/** Puts `c` at the front of its task's ready FIFO (an attempt given back unstarted). */
void wk_disp__ready_push_front(wk_disp *d, uint32_t c);
void wk_disp__ready_remove(wk_disp *d, uint32_t c);

/* ---- wk_dispatch_calls.c ---- */
uint32_t wk_disp__call_alloc(wk_disp *d, uint32_t t);
/** Drops every record of the task (CANCEL for live attempts); the task sends nothing more. */
void wk_disp__drop_all(wk_disp *d, uint32_t t);
/** Ends a live task: drops its records, decides TASK_DONE {ok}. */
void wk_disp__end_task(wk_disp *d, uint32_t t, bool ok);
/** Ends the task with ok = true when `last` was given and every call is final, or with
 * ok = false when failures pass the policy. */
void wk_disp__check_end(wk_disp *d, uint32_t t);

/* ---- intrusive doubly linked lists over an index space ---------------------------- */

#define WK_DL_PUSH_TAIL(list, arr, i, PREV, NEXT) \
  do {                                            \
    uint32_t i_ = (i);                            \
    (arr)[i_].PREV = (list)->tail;                \
    (arr)[i_].NEXT = WK_DNONE;                    \
    if ((list)->tail != WK_DNONE) {               \
      (arr)[(list)->tail].NEXT = i_;              \
    } else {                                      \
      (list)->head = i_;                          \
    }                                             \
    (list)->tail = i_;                            \
    (list)->len++;                                \
  } while (0)

#define WK_DL_REMOVE(list, arr, i, PREV, NEXT)         \
  do {                                                 \
    uint32_t i_ = (i);                                 \
    uint32_t p_ = (arr)[i_].PREV, n_ = (arr)[i_].NEXT; \
    if (p_ != WK_DNONE) {                              \
      (arr)[p_].NEXT = n_;                             \
    } else {                                           \
      (list)->head = n_;                               \
    }                                                  \
    if (n_ != WK_DNONE) {                              \
      (arr)[n_].PREV = p_;                             \
    } else {                                           \
      (list)->tail = p_;                               \
    }                                                  \
    (arr)[i_].PREV = (arr)[i_].NEXT = WK_DNONE;        \
    (list)->len--;                                     \
  } while (0)

#endif

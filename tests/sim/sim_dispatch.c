/* sim_dispatch.c: deterministic simulation of WorkerCore and DispatcherCore together,
 * driven the way the orchestrator drives them.
 *
 * For each seed: a WorkerCore and a DispatcherCore with a random small configuration,
 * a simulated clock, a pool of simulated executors (E executors x pipeline depth P =
 * the dispatcher's capacity) and a PRNG of our own. Tasks are submitted to WorkerCore;
 * its commands are carried out as the orchestrator would: PREPARE_ACTIVATION and
 * START_BUILDER complete after a while; START_CALLS → wk_disp_add_task + add_calls
 * (all at once, or streamed in chunks under backpressure); the dispatcher's TASK_DONE →
 * wk_core_handle_phase_finished(CALLS) with the outputs assembled by call index;
 * START_WRITER completes after a while; CANCEL_TASK → wk_disp_cancel_task; CONVERGE →
 * wk_disp_remove_task. Executors answer with random results, crash (the attempts they
 * started EXECUTOR_LOST, those still queued on an in-order executor NOT_STARTED and
 * sent again without counting as an attempt; capacity down until they restart), stall (never answer: the
 * deadline or the task timeout must end the attempt), answer twice, answer late
 * (after a cancel, a timeout or a retry), and ask for subcalls (sometimes past the
 * depth limit or the call records), also again after being resumed. Output buffers
 * are random and small (1..24 actions), so emission is resumed with wk_disp_poll all
 * the time.
 *
 * Most executors (each with probability 3/4 per seed) run like the Python executor:
 * one call at a time, arrivals in a FIFO, and a call that waits for subcalls runs the
 * next arrivals nested, so the calls it holds form a stack; only the top of the stack
 * answers or asks, and a resumed parent goes on only once the calls sent after it
 * and nested above it have returned. The others answer any of their calls in any
 * order.
 *
 * The simulation keeps its own view of every attempt, group and task, built only from
 * the actions, and checks after every dispatcher call and every step:
 *   - each call index gets at most one CALL_DONE, and exactly one before TASK_DONE ok;
 *     each child position at most one SUBCALL_DONE, all before SUBCALLS_COMPLETE;
 *   - a CALL_DONE names an attempt of that very index and carries the result the
 *     executor gave it (or TIMEOUT after a deadline CANCEL); TASK_DONE's failure
 *     count and ok agree with the policy;
 *   - admission: counted inflight <= capacity at all times (unless the pool shrank
 *     under the calls), after any SEND the task's inflight <= its window; resumed
 *     parents are outside both: SUBCALLS_COMPLETE changes neither count, and the
 *     dispatcher's inflight / waiting / resuming counts equal ours;
 *   - a parent resumes at once: SUBCALLS_COMPLETE comes right after its group's last
 *     SUBCALL_DONE, whatever admission and the window say, so no parent whose
 *     children are all final is left waiting once the output is drained;
 *   - answers are accepted exactly for live attempts and STALE otherwise;
 *   - a cancelled or ended task gets no SEND, CALL_DONE or TASK_DONE afterwards;
 *   - outputs land in call order: the bytes WorkerCore hands to the writer hold, at
 *     position i, the value the executor produced for call i;
 *   - work conservation: after every step, a task with sendable work and room in its
 *     window is sent to unless admission is full or call records ran out (no stall,
 *     no deadlock with every admitted attempt a waiting parent);
 *   - no deadlock under nesting: while the pool has capacity, some attempt can always
 *     go on (a call on top of its executor's stack, or on a free executor), or no
 *     task has work waiting for admission. (Re-admitting resumed parents broke this:
 *     a parent held under nested calls kept the slot their children needed.)
 *   - wk_disp_check_invariants and wk_core_check_invariants hold.
 * At the end of a seed, executors restart, every attempt is answered, time runs on,
 * and every task must converge; both cores must be empty and the allocator balanced.
 *
 * A failure prints the seed and the step and the command that replays it.
 *
 *   sim_dispatch [--seed S] [--seeds N] [--steps M] [--verbose]
 *
 * Default: seeds 1..N with 2000 steps each, N chosen so that the total is
 * $WK_SIM_STEPS (default 1,000,000). --seed S alone runs that one seed; with --steps
 * it stops the random phase after that many steps (the replay of a failure). */
#define _POSIX_C_SOURCE 200809L

#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/wk_core.h"
#include "core/wk_dispatcher.h"
#include "lib/wk_rng.h"
#include "sim_harness.h"

#define SIM_DEFAULT_TOTAL_STEPS 1000000u
#define SIM_DEFAULT_SEED_STEPS 2000u
#define SIM_ATT_MAX (1u << 17)   /* attempts per seed */
#define SIM_HASH_SIZE (1u << 18) /* call_id -> attempt */
#define SIM_GROUP_MAX (1u << 15) /* groups per seed */
#define SIM_TASK_MAX 2048u       /* tasks per seed */
#define SIM_EXEC_MAX 6u
#define SIM_STALE_POOL 64u
#define SIM_EFFECT_MAX 4096u
#define SIM_BUF_MAX 256u
#define SIM_CALLS_MAX 240u /* calls per task */
#define SIM_CHILDREN_MAX 5u
#define SIM_EXEC_SLOTS 256u /* calls held by one executor (> max_calls) */

/* ---- the simulation's model ----------------------------------------------------- */

/* RUNNING: sent, counted in admission; WAITING: asked for subcalls; RESUMED: its
 * SUBCALLS_COMPLETE came, running again outside admission; DEAD: over in our view. */
enum { A_RUNNING = 1, A_WAITING = 2, A_DEAD = 3, A_RESUMED = 4 };
enum { B_NORMAL = 0, B_STALL = 1, B_TWICE = 2 };
enum { S_PREPARING = 0, S_BUILDER = 1, S_CALLS = 2, S_WRITER = 3, S_TERMINAL = 4 };

typedef struct att {
  uint64_t call_id;
  uint32_t task;       /* sim task index = task_key */
  uint32_t index;      /* call index or child position */
  uint64_t group;      /* 0 at depth 0 */
  uint64_t wait_group; /* the group it asked for last, 0 before */
  uint32_t depth;
  uint32_t attempt;
  uint32_t executor;
  uint32_t live_pos; /* in g.live, or UINT32_MAX */
  int64_t deadline_ms;
  uint64_t value; /* what the executor returns on OK */
  uint8_t state, behavior;
  bool timed_out;     /* CANCEL with reason DEADLINE seen */
  bool given_back;    /* answered NOT_STARTED: the call is sent again, same attempt */
  bool answered;      /* a result of ours was accepted */
  uint8_t result;     /* that result */
  int64_t decided_at; /* when it was answered or timed out */
} att;

typedef struct sgroup {
  uint32_t last_att[SIM_CHILDREN_MAX]; /* latest attempt of each child, index + 1 */
  uint32_t parent;                     /* attempt index */
  uint32_t n;
  uint32_t done_mask;
  bool used, complete;
} sgroup;

typedef struct stask {
  char id[24];
  size_t id_len;
  uint64_t slot_id;
  int64_t accepted_ms, timeout_ms;
  int stage;
  int64_t work_at;  /* pending adapter work (activation, builder, writer), INT64_MAX none */
  uint32_t disp;    /* dispatcher handle, 0 when none */
  bool disp_closed; /* TASK_DONE seen or cancel issued: the dispatcher must stay silent */
  bool disp_removed;
  bool calls_ok; /* TASK_DONE said ok */
  bool aborted, timed_out;
  bool streaming, last;
  uint32_t n_total, n_added;
  wk_disp_task_params params;
  uint64_t out_val[SIM_CALLS_MAX];
  uint8_t out_cnt[SIM_CALLS_MAX];
  uint8_t out_res[SIM_CALLS_MAX];
  uint32_t failed_seen, done_seen;
  uint32_t admitted, waiting; /* waiting: WAITING + RESUMED, as the dispatcher counts */
  uint32_t resumed;
  uint32_t win;                     /* the window as our model of the rule computes it */
  uint32_t last_att[SIM_CALLS_MAX]; /* latest attempt of each call, index + 1 */
  bool sent_in_batch;
  uint32_t live_task_pos;
  uint8_t outputs[SIM_CALLS_MAX * 8];
  size_t outputs_len;
} stask;

/* One executor's calls when it runs them nested (see the file comment). */
typedef struct sexec {
  bool nested;
  uint32_t stack[SIM_EXEC_SLOTS], n_stack; /* started calls (att indices), top last */
  uint32_t queue[SIM_EXEC_SLOTS], n_queue; /* arrived, not started yet */
} sexec;

typedef struct sim {
  wk_rng rng;
  int64_t now;
  sim_alloc core_alloc, disp_alloc;
  wk_core *core;
  wk_disp *disp;
  wk_disp_config dcfg;
  uint32_t slots;
  /* executors */
  uint32_t n_exec, depth_per_exec;
  bool exec_alive[SIM_EXEC_MAX];
  sexec ex[SIM_EXEC_MAX];
  uint32_t capacity;
  bool shrunk; /* the pool shrank under the calls: admitted may exceed capacity */
  /* attempts */
  att *atts;
  uint32_t n_atts;
  uint32_t *hash; /* att index + 1, 0 = empty */
  uint32_t live[SIM_ATT_MAX];
  uint32_t n_live;
  uint32_t admitted, resumed;
  uint8_t prev_kind; /* the last action booked, for SUBCALLS_COMPLETE's place */
  uint64_t prev_group;
  uint64_t stale_pool[SIM_STALE_POOL];
  uint32_t n_stale;
  /* groups, tasks */
  sgroup *groups;
  stask *tasks;
  uint32_t n_tasks;
  uint32_t live_task[SIM_TASK_MAX]; /* tasks not yet converged (at most task_slots) */
  uint32_t n_live_tasks;
  /* deferred effects: dispatcher TASK_DONEs for the core */
  uint32_t effects[SIM_EFFECT_MAX];
  uint32_t n_effects;
  bool batch_sent;
  /* counters for the summary */
  uint64_t n_sends, n_calls_done, n_stale_ok, n_subcalls, n_tasks_ok, n_tasks_failed;
  uint64_t n_timeouts, n_crashes, n_cancels, n_resumes, n_held, n_reasks, n_given_back;
} sim;

static uint64_t g_total_sends, g_total_done, g_total_stale, g_total_subcalls;
static uint64_t g_total_given_back; /* queued attempts of crashed executors, NOT_STARTED */
static uint64_t g_total_tasks_ok, g_total_tasks_failed, g_total_timeouts, g_total_crashes;
static uint64_t g_total_converged, g_total_resumes, g_total_held, g_total_reasks;
static uint64_t g_fail_codes[WK_FAIL_COUNT];

static wk_disp_action g_buf[SIM_BUF_MAX];

static uint32_t below(sim *s, uint32_t n) { return (uint32_t)wk_rng_below(&s->rng, n); }
static bool pct(sim *s, uint32_t p) { return below(s, 100) < p; }

static uint64_t mix(uint64_t a, uint64_t b) {
  uint64_t z = a * UINT64_C(0x9E3779B97F4A7C15) ^ (b + UINT64_C(0x632BE59BD9B4E019));
  z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
  z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
  return z ^ (z >> 31);
}

/* The output the executor produces for call `index` of task `key` (depth 0). */
static uint64_t expect_value(uint64_t key, uint32_t index) { return mix(key, index) | 1u; }
#define FAILED_VALUE(r) (UINT64_C(0xFA11ED0000000000) | (uint64_t)(r))

/* ---- attempts ----------------------------------------------------------------------- */

static uint32_t hash_slot(uint64_t call_id) {
  return (uint32_t)(mix(call_id, 7) & (SIM_HASH_SIZE - 1u));
}

static att *att_find(sim *s, uint64_t call_id) {
  for (uint32_t h = hash_slot(call_id);; h = (h + 1u) & (SIM_HASH_SIZE - 1u)) {
    uint32_t v = s->hash[h];
    if (v == 0) return NULL;
    if (s->atts[v - 1].call_id == call_id) return &s->atts[v - 1];
  }
}

static att *att_new(sim *s, uint64_t call_id) {
  CHECK(call_id != 0, "SEND with call id 0");
  CHECK(s->n_atts < SIM_ATT_MAX, "too many attempts for one seed");
  uint32_t h = hash_slot(call_id);
  while (s->hash[h] != 0) {
    CHECK(s->atts[s->hash[h] - 1].call_id != call_id, "call id %#" PRIx64 " issued twice", call_id);
    h = (h + 1u) & (SIM_HASH_SIZE - 1u);
  }
  uint32_t i = s->n_atts++;
  s->hash[h] = i + 1u;
  att *a = &s->atts[i];
  memset(a, 0, sizeof *a);
  a->call_id = call_id;
  a->live_pos = UINT32_MAX;
  return a;
}

static uint32_t att_index(const sim *s, const att *a) { return (uint32_t)(a - s->atts); }

static void live_add(sim *s, att *a) {
  a->live_pos = s->n_live;
  s->live[s->n_live++] = att_index(s, a);
}

static void live_remove(sim *s, att *a) {
  uint32_t p = a->live_pos;
  CHECK(p < s->n_live && s->live[p] == att_index(s, a), "live list broken");
  uint32_t last = s->live[--s->n_live];
  s->live[p] = last;
  s->atts[last].live_pos = p;
  a->live_pos = UINT32_MAX;
}

/* ---- executors that run calls nested -------------------------------------------------- */

/* Starts arrivals while nothing runs or the top of the stack waits for subcalls. */
static void ex_advance(sim *s, sexec *e) {
  while (e->n_queue > 0 &&
         (e->n_stack == 0 || s->atts[e->stack[e->n_stack - 1]].state == A_WAITING)) {
    CHECK(e->n_stack < SIM_EXEC_SLOTS, "executor stack overflow");
    e->stack[e->n_stack++] = e->queue[0];
    e->n_queue--;
    memmove(e->queue, e->queue + 1, e->n_queue * sizeof e->queue[0]);
  }
}

static void ex_arrive(sim *s, att *x) {
  sexec *e = &s->ex[x->executor];
  if (!e->nested) return;
  CHECK(e->n_queue < SIM_EXEC_SLOTS, "executor queue overflow");
  e->queue[e->n_queue++] = att_index(s, x);
  ex_advance(s, e);
}

static bool ex_take_out(uint32_t *arr, uint32_t *n, uint32_t i) {
  for (uint32_t k = 0; k < *n; k++) {
    if (arr[k] != i) continue;
    (*n)--;
    memmove(arr + k, arr + k + 1, (*n - k) * sizeof arr[0]);
    return true;
  }
  return false;
}

/* The attempt is over (answered, cancelled, lost): off its executor's stack or queue.
 * (A cancelled call in the middle of a stack unwinds as soon as the calls above it
 * return; the dispatcher has forgotten it already, so it simply goes.) */
static void ex_leave(sim *s, att *x) {
  sexec *e = &s->ex[x->executor];
  if (!e->nested) return;
  uint32_t i = att_index(s, x);
  CHECK(ex_take_out(e->stack, &e->n_stack, i) || ex_take_out(e->queue, &e->n_queue, i),
        "attempt %#" PRIx64 " not held by its executor", x->call_id);
  ex_advance(s, e);
}

/* True when the attempt can go on by itself: it runs (sent or resumed) and is the
 * top of its executor's stack, or its executor answers in any order. */
static bool att_can_go_on(const sim *s, const att *x) {
  if (x->state != A_RUNNING && x->state != A_RESUMED) return false;
  const sexec *e = &s->ex[x->executor];
  return !e->nested || (e->n_stack > 0 && e->stack[e->n_stack - 1] == att_index(s, x));
}

/* The attempt is over in our view (answered or cancelled). */
static void att_kill(sim *s, att *a) {
  stask *t = &s->tasks[a->task];
  if (a->state == A_RUNNING) {
    CHECK(t->admitted > 0 && s->admitted > 0, "admission count underflow");
    t->admitted--;
    s->admitted--;
  } else if (a->state == A_WAITING) {
    CHECK(t->waiting > 0, "waiting count underflow");
    t->waiting--;
  } else if (a->state == A_RESUMED) {
    CHECK(t->waiting > 0 && t->resumed > 0 && s->resumed > 0, "resumed count underflow");
    t->waiting--;
    t->resumed--;
    s->resumed--;
  }
  a->state = A_DEAD;
  live_remove(s, a);
  ex_leave(s, a);
  s->stale_pool[s->n_stale++ % SIM_STALE_POOL] = a->call_id;
}

/* ---- the model of the rules: window, retries ----------------------------------------- */

/* The window rule: +1 per success up to window_max; halved (>= 1) by RETRYABLE,
 * EXECUTOR_LOST and TIMEOUT; ERROR leaves it. */
static void model_result(sim *s, stask *t, wk_disp_result r) {
  if (r == WK_DISP_OK) {
    if (t->win < s->dcfg.window_max) t->win++;
  } else if (r != WK_DISP_ERROR) {
    t->win = t->win > 1 ? t->win / 2 : 1;
  }
}

static uint32_t max_attempts(const stask *t) {
  return t->params.retry.max_attempts ? t->params.retry.max_attempts : 1;
}

static bool retryable(const stask *t, wk_disp_result r) {
  return r == WK_DISP_RETRYABLE ||
         (r == WK_DISP_EXECUTOR_LOST && t->params.retry_on_executor_lost) ||
         (r == WK_DISP_TIMEOUT && t->params.retry.retry_on_timeout);
}

/* The backoff base after the k-th attempt failed: min(max, initial * mult^(k-1)). */
static int64_t backoff_base(const stask *t, uint32_t k) {
  const wk_retry_policy *rp = &t->params.retry;
  int64_t maxb = rp->max_backoff_ms == 0 || rp->max_backoff_ms > WK_DISP_BACKOFF_MS_MAX
                     ? WK_DISP_BACKOFF_MS_MAX
                     : rp->max_backoff_ms;
  int64_t mult = rp->backoff_multiplier_milli ? rp->backoff_multiplier_milli : 2000;
  int64_t b = rp->initial_backoff_ms < maxb ? rp->initial_backoff_ms : maxb;
  for (uint32_t i = 1; i < k; i++) {
    b = b * mult / 1000;
    if (b > maxb) b = maxb;
  }
  return b;
}

static int64_t backoff_floor(const sim *s, int64_t base) {
  switch (s->dcfg.jitter) {
    case WK_DISP_JITTER_EQUAL: return base - base / 2;
    case WK_DISP_JITTER_FULL: return 0;
    case WK_DISP_JITTER_NONE: break;
  }
  return base;
}

/* How attempt x ended, for the retry rule. */
static wk_disp_result ended_with(const att *x) {
  return x->answered ? (wk_disp_result)x->result : WK_DISP_TIMEOUT;
}

/* A new attempt of a call whose previous attempt is `prev` (NULL for a first one). */
static void check_retry_send(sim *s, const stask *t, const att *prev, const wk_disp_action *a) {
  if (prev != NULL && prev->given_back) {
    /* given back unstarted: sent again as the same attempt, no backoff, any result */
    CHECK(prev->state == A_DEAD, "SEND again while the given-back attempt is live");
    CHECK(a->attempt == prev->attempt, "attempt %u sent again as attempt %u", prev->attempt,
          a->attempt);
    return;
  }
  if (a->attempt == 1) {
    CHECK(prev == NULL, "first attempt of a call that had one already");
    return;
  }
  CHECK(prev != NULL && prev->attempt + 1 == a->attempt, "attempt %u without attempt %u before",
        a->attempt, a->attempt - 1);
  CHECK(prev->state == A_DEAD && (prev->answered || prev->timed_out),
        "retry while the previous attempt is not over");
  wk_disp_result r = ended_with(prev);
  CHECK(retryable(t, r), "retry after %s, which the policy does not retry", wk_disp_result_name(r));
  CHECK(prev->attempt < max_attempts(t), "attempt %u past max_attempts %u", a->attempt,
        max_attempts(t));
  int64_t floor = backoff_floor(s, backoff_base(t, prev->attempt));
  CHECK(s->now >= prev->decided_at + floor,
        "retry at %" PRId64 " before the backoff floor %" PRId64 " + %" PRId64, s->now,
        prev->decided_at, floor);
}

/* A call is final with attempt x: if the policy would retry, only the deadline excuses it. */
static void check_final(const stask *t, const att *x) {
  wk_disp_result r = ended_with(x);
  if (!retryable(t, r) || x->attempt >= max_attempts(t)) return;
  int64_t dl = t->params.task_deadline_ms;
  CHECK(dl > 0 && x->decided_at + backoff_base(t, x->attempt) >= dl,
        "call final after a retryable %s with attempts left and no deadline in the way",
        wk_disp_result_name(r));
}

/* ---- bookkeeping of the dispatcher's actions -------------------------------------- */

static stask *task_of(sim *s, const wk_disp_action *a, const char *what) {
  CHECK(a->task_key < s->n_tasks, "%s for unknown task key %" PRIu64, what, a->task_key);
  stask *t = &s->tasks[a->task_key];
  CHECK(t->disp != 0 && a->task == t->disp, "%s for task %s with handle %#x, expected %#x", what,
        t->id, a->task, t->disp);
  return t;
}

static uint32_t pick_executor(sim *s) {
  uint32_t alive[SIM_EXEC_MAX], n = 0;
  for (uint32_t e = 0; e < s->n_exec; e++) {
    if (s->exec_alive[e]) alive[n++] = e;
  }
  CHECK(n > 0, "SEND while no executor is alive (capacity %u)", s->capacity);
  return alive[below(s, n)];
}

static void on_send(sim *s, const wk_disp_action *a) {
  stask *t = task_of(s, a, "SEND");
  CHECK(!t->disp_closed, "SEND for task %s after it ended or was cancelled", t->id);
  CHECK(t->stage == S_CALLS, "SEND for task %s outside its calls phase", t->id);
  CHECK(a->attempt >= 1 &&
            a->attempt <= t->params.retry.max_attempts + (t->params.retry.max_attempts == 0),
        "SEND attempt %u out of range", a->attempt);
  CHECK(a->depth <= s->dcfg.max_depth, "SEND at depth %u > max_depth", a->depth);
  if (t->params.call_timeout_ms > 0) {
    CHECK(a->deadline_ms <= s->now + t->params.call_timeout_ms, "SEND deadline past now + timeout");
  }
  if (t->params.task_deadline_ms > 0) {
    CHECK(a->deadline_ms <= t->params.task_deadline_ms, "SEND deadline past the task deadline");
  }
  att *x = att_new(s, a->call_id);
  x->task = (uint32_t)a->task_key;
  x->index = a->index;
  x->group = a->group;
  x->depth = a->depth;
  x->attempt = a->attempt;
  x->deadline_ms = a->deadline_ms;
  x->state = A_RUNNING;
  x->executor = pick_executor(s);
  ex_arrive(s, x);
  uint32_t r = below(s, 100);
  x->behavior = r < 3 ? B_STALL : r < 8 ? B_TWICE : B_NORMAL;
  if (a->depth == 0) {
    CHECK(a->group == 0 && a->index < t->n_added, "SEND of call %u of %u added", a->index,
          t->n_added);
    CHECK(t->out_cnt[a->index] == 0, "SEND of call %u of %s after its CALL_DONE", a->index, t->id);
    uint32_t prev = t->last_att[a->index];
    check_retry_send(s, t, prev ? &s->atts[prev - 1] : NULL, a);
    t->last_att[a->index] = att_index(s, x) + 1;
    x->value = expect_value(a->task_key, a->index);
  } else {
    CHECK(a->group > 0 && a->group < SIM_GROUP_MAX && s->groups[a->group].used,
          "child SEND of unknown group %" PRIu64, a->group);
    sgroup *g = &s->groups[a->group];
    const att *p = &s->atts[g->parent];
    CHECK(!g->complete && p->state == A_WAITING, "child SEND for a group no longer waited on");
    CHECK(a->parent_call_id == p->call_id, "child SEND names the wrong parent");
    CHECK(a->index < g->n && !(g->done_mask & (1u << a->index)), "child SEND position %u bad",
          a->index);
    CHECK(a->depth == p->depth + 1, "child depth %u under parent depth %u", a->depth, p->depth);
    CHECK(a->deadline_ms <= p->deadline_ms, "child deadline after its parent's");
    uint32_t prev = g->last_att[a->index];
    check_retry_send(s, t, prev ? &s->atts[prev - 1] : NULL, a);
    g->last_att[a->index] = att_index(s, x) + 1;
    x->value = mix(a->group, a->index);
  }
  live_add(s, x);
  t->admitted++;
  s->admitted++;
  t->sent_in_batch = true;
  s->batch_sent = true;
  s->n_sends++;
}

static void on_cancel(sim *s, const wk_disp_action *a) {
  att *x = att_find(s, a->call_id);
  CHECK(x != NULL, "CANCEL of unknown call id %#" PRIx64, a->call_id);
  CHECK(x->state == A_RUNNING || x->state == A_WAITING || x->state == A_RESUMED,
        "CANCEL of call id %#" PRIx64 " that is not in flight", a->call_id);
  CHECK(a->task_key == x->task, "CANCEL with the wrong task key");
  if (a->reason == WK_DISP_CANCEL_DEADLINE) {
    CHECK(x->deadline_ms <= s->now,
          "deadline CANCEL before the deadline (%" PRId64 " > %" PRId64 ")", x->deadline_ms,
          s->now);
    x->timed_out = true;
    x->decided_at = s->now;
    model_result(s, &s->tasks[x->task], WK_DISP_TIMEOUT);
    s->n_timeouts++;
  }
  att_kill(s, x);
}

/* The result a *_DONE must carry for attempt x. */
static void check_final_result(const att *x, const wk_disp_action *a, const char *what) {
  if (x->answered) {
    CHECK(a->result == (wk_disp_result)x->result, "%s result %s, the executor said %s", what,
          wk_disp_result_name(a->result), wk_disp_result_name((wk_disp_result)x->result));
  } else {
    CHECK(x->timed_out && a->result == WK_DISP_TIMEOUT, "%s for an attempt that never ended", what);
  }
  CHECK(a->attempt == x->attempt, "%s attempts %u, the deciding attempt was %u", what, a->attempt,
        x->attempt);
}

static void on_call_done(sim *s, const wk_disp_action *a) {
  stask *t = task_of(s, a, "CALL_DONE");
  CHECK(!t->disp_closed, "CALL_DONE for task %s after it ended or was cancelled", t->id);
  att *x = att_find(s, a->call_id);
  CHECK(x != NULL && x->task == a->task_key && x->depth == 0,
        "CALL_DONE names call id %#" PRIx64 " that is no top-level attempt of the task",
        a->call_id);
  CHECK(x->index == a->index, "CALL_DONE for index %u names an attempt of index %u", a->index,
        x->index);
  CHECK(x->state == A_DEAD, "CALL_DONE for an attempt still in flight");
  check_final_result(x, a, "CALL_DONE");
  CHECK(t->last_att[a->index] == att_index(s, x) + 1, "CALL_DONE names an older attempt");
  check_final(t, x);
  CHECK(a->index < t->n_added, "CALL_DONE index past the calls added");
  CHECK(t->out_cnt[a->index] == 0, "call %u of %s completed twice", a->index, t->id);
  t->out_cnt[a->index] = 1;
  t->out_res[a->index] = (uint8_t)a->result;
  t->out_val[a->index] = a->result == WK_DISP_OK ? x->value : FAILED_VALUE(a->result);
  t->done_seen++;
  if (a->result != WK_DISP_OK) t->failed_seen++;
  s->n_calls_done++;
}

static void on_subcall_done(sim *s, const wk_disp_action *a) {
  stask *t = task_of(s, a, "SUBCALL_DONE");
  CHECK(!t->disp_closed, "SUBCALL_DONE for task %s after it ended", t->id);
  att *x = att_find(s, a->call_id);
  CHECK(x != NULL && x->depth >= 1 && x->group == a->group && x->index == a->index,
        "SUBCALL_DONE does not match its attempt");
  CHECK(x->state == A_DEAD, "SUBCALL_DONE for an attempt still in flight");
  check_final_result(x, a, "SUBCALL_DONE");
  sgroup *g = &s->groups[a->group];
  CHECK(g->last_att[a->index] == att_index(s, x) + 1, "SUBCALL_DONE names an older attempt");
  check_final(t, x);
  CHECK(g->used && !g->complete, "SUBCALL_DONE for a closed group");
  CHECK(s->atts[g->parent].state == A_WAITING, "SUBCALL_DONE while the parent is not waiting");
  CHECK(!(g->done_mask & (1u << a->index)), "child %u of group %" PRIu64 " completed twice",
        a->index, a->group);
  g->done_mask |= 1u << a->index;
}

static void on_subcalls_complete(sim *s, const wk_disp_action *a) {
  stask *t = task_of(s, a, "SUBCALLS_COMPLETE");
  CHECK(!t->disp_closed, "SUBCALLS_COMPLETE for task %s after it ended", t->id);
  CHECK(a->group > 0 && a->group < SIM_GROUP_MAX, "SUBCALLS_COMPLETE of unknown group");
  sgroup *g = &s->groups[a->group];
  CHECK(g->used && !g->complete, "SUBCALLS_COMPLETE twice for group %" PRIu64, a->group);
  CHECK(g->done_mask == (1u << g->n) - 1u, "SUBCALLS_COMPLETE before every child is final");
  att *p = &s->atts[g->parent];
  CHECK(a->call_id == p->call_id && p->state == A_WAITING && p->wait_group == a->group,
        "SUBCALLS_COMPLETE for the wrong parent");
  CHECK(a->index == p->index && a->depth == p->depth, "SUBCALLS_COMPLETE names another call");
  /* right after the group's last SUBCALL_DONE, nothing in between */
  CHECK(s->prev_kind == WK_DISP_SUBCALL_DONE && s->prev_group == a->group,
        "SUBCALLS_COMPLETE of group %" PRIu64 " not right after its last SUBCALL_DONE", a->group);
  g->complete = true;
  /* resumed outside admission and the window: neither count moves */
  p->state = A_RESUMED;
  t->resumed++;
  s->resumed++;
  s->n_resumes++;
  if (!att_can_go_on(s, p)) s->n_held++; /* held under calls nested above it */
}

static void on_task_done(sim *s, const wk_disp_action *a) {
  stask *t = task_of(s, a, "TASK_DONE");
  CHECK(!t->disp_closed, "second TASK_DONE for task %s", t->id);
  t->disp_closed = true;
  CHECK(t->admitted == 0 && t->waiting == 0, "TASK_DONE with attempts still in flight");
  CHECK(a->failed == t->failed_seen, "TASK_DONE failed %u, CALL_DONEs said %u", a->failed,
        t->failed_seen);
  uint32_t tolerated =
      t->params.failure_policy == WK_CALL_FAIL_FAST ? 0 : t->params.max_failed_calls;
  if (a->ok) {
    CHECK(t->last, "TASK_DONE ok before the last calls were added");
    CHECK(t->done_seen == t->n_added, "TASK_DONE ok with %u of %u calls final", t->done_seen,
          t->n_added);
    for (uint32_t i = 0; i < t->n_added; i++) {
      CHECK(t->out_cnt[i] == 1, "TASK_DONE ok but call %u has %u CALL_DONEs", i, t->out_cnt[i]);
    }
    CHECK(t->failed_seen <= tolerated, "TASK_DONE ok with %u failures (%u tolerated)",
          t->failed_seen, tolerated);
  } else {
    CHECK(t->failed_seen > tolerated, "TASK_DONE failed with %u failures (%u tolerated)",
          t->failed_seen, tolerated);
  }
  t->calls_ok = a->ok;
  CHECK(s->n_effects < SIM_EFFECT_MAX, "effect queue full");
  s->effects[s->n_effects++] = (uint32_t)a->task_key;
}

static void bookkeep(sim *s, const wk_disp_action *a) {
  vlog("    %s task=%" PRIu64 " id=%#" PRIx64 " idx=%u depth=%u group=%" PRIu64
       " att=%u res=%s ok=%d\n",
       wk_disp_action_kind_name(a->kind), a->task_key, a->call_id, a->index, a->depth, a->group,
       a->attempt, wk_disp_result_name(a->result), a->ok);
  switch (a->kind) {
    case WK_DISP_SEND: on_send(s, a); return;
    case WK_DISP_CANCEL: on_cancel(s, a); return;
    case WK_DISP_CALL_DONE: on_call_done(s, a); return;
    case WK_DISP_SUBCALL_DONE: on_subcall_done(s, a); return;
    case WK_DISP_SUBCALLS_COMPLETE: on_subcalls_complete(s, a); return;
    case WK_DISP_TASK_DONE: on_task_done(s, a); return;
  }
  sim_fail("action of unknown kind %d", (int)a->kind);
}

static void book(sim *s, const wk_disp_action *a) {
  bookkeep(s, a);
  s->prev_kind = (uint8_t)a->kind;
  s->prev_group = a->group;
}

/* Counts and limits after a batch of actions. */
static void check_accounting(sim *s) {
  wk_disp_stats st = wk_disp_stats_get(s->disp);
  CHECK(st.inflight == s->admitted, "dispatcher inflight %u, ours %u", st.inflight, s->admitted);
  CHECK(st.capacity == s->capacity, "dispatcher capacity %u, ours %u", st.capacity, s->capacity);
  if (s->batch_sent) {
    CHECK(st.inflight <= st.capacity, "admission exceeded: %u in flight, capacity %u", st.inflight,
          st.capacity);
  }
  for (uint32_t k = 0; k < s->n_live_tasks; k++) {
    stask *t = &s->tasks[s->live_task[k]];
    if (t->disp == 0 || t->disp_removed) continue;
    wk_disp_task_info info;
    CHECK(wk_disp_task_info_get(s->disp, t->disp, &info) == WK_OK, "task %s lost its handle",
          t->id);
    CHECK(info.inflight == t->admitted, "task %s: dispatcher inflight %u, ours %u", t->id,
          info.inflight, t->admitted);
    CHECK(info.waiting == t->waiting, "task %s: dispatcher waiting %u, ours %u", t->id,
          info.waiting, t->waiting);
    CHECK(info.resuming == t->resumed, "task %s: dispatcher resuming %u, ours %u", t->id,
          info.resuming, t->resumed);
    CHECK(info.window == t->win, "task %s: window %u, the rule says %u", t->id, info.window,
          t->win);
    if (t->sent_in_batch) {
      CHECK(info.inflight <= info.window, "task %s: window exceeded: %u in flight, window %u",
            t->id, info.inflight, info.window);
    }
    t->sent_in_batch = false;
  }
  s->batch_sent = false;
}

static void begin_out(sim *s, wk_disp_out *o) {
  o->items = g_buf;
  o->capacity = pct(s, 10) ? SIM_BUF_MAX : 1u + below(s, 24);
  o->count = 0;
  o->more = false;
}

/* Round robin within one send loop: a task gets two SENDs in a row only when it is
 * the only task in the ring, so no other task may be sent to after that. (A
 * SUBCALLS_COMPLETE is no unit of the send loop: it comes out with the SUBCALL_DONEs.) */
static void check_round_robin(const wk_disp_out *o) {
  uint64_t seq[SIM_BUF_MAX];
  uint32_t n = 0;
  for (uint32_t i = 0; i < o->count; i++) {
    const wk_disp_action *a = &o->items[i];
    if (a->kind == WK_DISP_SEND) seq[n++] = a->task_key;
  }
  for (uint32_t i = 0; i + 1 < n; i++) {
    if (seq[i] != seq[i + 1]) continue;
    for (uint32_t j = i + 2; j < n; j++) {
      CHECK(seq[j] == seq[i],
            "round robin broken: task %" PRIu64 " sent twice in a row while task %" PRIu64
            " was waiting",
            seq[i], seq[j]);
    }
    return;
  }
}

/* Books every action of `o`, polling again while the dispatcher has more; the counts
 * are compared once everything decided has come out. */
static void drain_out(sim *s, wk_disp_out *o) {
  for (;;) {
    for (uint32_t i = 0; i < o->count; i++) book(s, &o->items[i]);
    check_round_robin(o);
    if (!o->more) {
      check_accounting(s);
      return;
    }
    o->count = 0;
    wk_disp_poll(s->disp, s->now, o);
  }
}

static void disp_poll(sim *s) {
  wk_disp_out o;
  begin_out(s, &o);
  wk_disp_poll(s->disp, s->now, &o);
  drain_out(s, &o);
}

static void run_effects(sim *s);

/* The orchestrator's loop end: poll and hand TASK_DONEs to the core until quiet. */
static void settle(sim *s) {
  for (int guard = 0;; guard++) {
    CHECK(guard < 1000, "settle: no quiescence");
    disp_poll(s);
    if (s->n_effects == 0) return;
    run_effects(s);
  }
}

/* ---- WorkerCore commands: the orchestrator's side ------------------------------------ */

static void apply_cmds(sim *s, const wk_cmds *cmds);

static void disp_cancel(sim *s, stask *t) {
  if (t->disp == 0 || t->disp_removed) return;
  wk_disp_out o;
  begin_out(s, &o);
  CHECK(wk_disp_cancel_task(s->disp, t->disp, &o) == WK_OK, "cancel_task refused");
  t->disp_closed = true;
  drain_out(s, &o);
  CHECK(t->admitted == 0 && t->waiting == 0, "task %s: attempts left after its cancel", t->id);
  s->n_cancels++;
}

static void add_calls(sim *s, stask *t, uint32_t n, bool last) {
  wk_disp_out o;
  begin_out(s, &o);
  t->n_added += n;
  t->last = last;
  wk_err err = wk_disp_add_calls(s->disp, t->disp, n, last, s->now, &o);
  CHECK(err == WK_OK, "add_calls(%s, %u): %s", t->id, n, wk_err_name(err));
  drain_out(s, &o);
}

static void start_calls(sim *s, stask *t) {
  wk_disp_task_params *p = &t->params;
  memset(p, 0, sizeof *p);
  p->failure_policy = pct(s, 40) ? WK_CALL_FAIL_FAST : WK_CALL_CONTINUE;
  p->max_failed_calls = below(s, 6);
  p->retry.max_attempts = below(s, 5);
  p->retry.initial_backoff_ms = pct(s, 30) ? 0 : 1 + below(s, 50);
  p->retry.max_backoff_ms = pct(s, 30) ? 0 : p->retry.initial_backoff_ms + below(s, 200);
  static const uint32_t mult[] = {0, 1000, 1500, 2000, 3000};
  p->retry.backoff_multiplier_milli = mult[below(s, 5)];
  p->retry.retry_on_timeout = pct(s, 50);
  p->retry_on_executor_lost = pct(s, 60);
  p->call_timeout_ms = pct(s, 20) ? 0 : 30 + below(s, 400);
  p->task_deadline_ms = t->accepted_ms + t->timeout_ms;
  uint32_t r = below(s, 100);
  t->n_total = r < 10 ? 0 : r < 90 ? 1 + below(s, 24) : 1 + below(s, SIM_CALLS_MAX);
  t->streaming = pct(s, 30);
  CHECK(wk_disp_add_task(s->disp, (uint64_t)(t - s->tasks), p, &t->disp) == WK_OK,
        "add_task refused for %s", t->id);
  CHECK(t->disp != 0, "add_task gave handle 0");
  t->win = s->dcfg.window_initial;
  t->stage = S_CALLS;
  vlog("  START_CALLS %s: %u calls%s, policy %d/%u, attempts %u, timeout %" PRId64 "\n", t->id,
       t->n_total, t->streaming ? " streamed" : "", (int)p->failure_policy, p->max_failed_calls,
       p->retry.max_attempts, p->call_timeout_ms);
  if (t->streaming) {
    uint32_t n = t->n_total < 4 ? t->n_total : below(s, 5);
    add_calls(s, t, n, n == t->n_total);
  } else {
    add_calls(s, t, t->n_total, true);
  }
}

static stask *task_by_id(sim *s, const char *id, size_t len) {
  /* ids are "t<number>" */
  CHECK(len > 1 && id[0] == 't', "core command for a foreign id");
  uint32_t n = (uint32_t)strtoul(id + 1, NULL, 10);
  CHECK(n < s->n_tasks, "core command for an unknown id");
  return &s->tasks[n];
}

static void converge(sim *s, stask *t, const wk_cmd *c) {
  const wk_task_result *r = c->u.converge.result;
  CHECK(t->stage != S_TERMINAL, "CONVERGE twice for %s", t->id);
  CHECK(c->adapter_ctx == (void *)t, "CONVERGE hands back the wrong context");
  if (r->state == WK_TASK_SUCCEEDED) {
    CHECK(t->disp_closed && t->calls_ok, "%s SUCCEEDED without a successful calls phase", t->id);
    s->n_tasks_ok++;
  } else {
    s->n_tasks_failed++;
    if ((int)r->failure_code >= 0 && (int)r->failure_code < WK_FAIL_COUNT)
      g_fail_codes[r->failure_code]++;
  }
  if (t->disp != 0 && !t->disp_removed) {
    CHECK(wk_disp_remove_task(s->disp, t->disp) == WK_OK, "remove_task refused for %s", t->id);
    t->disp_removed = true;
    t->disp_closed = true;
    CHECK(t->admitted == 0 && t->waiting == 0, "task %s removed with attempts in flight", t->id);
  }
  t->stage = S_TERMINAL;
  t->work_at = INT64_MAX;
  uint32_t last = s->live_task[--s->n_live_tasks];
  s->live_task[t->live_task_pos] = last;
  s->tasks[last].live_task_pos = t->live_task_pos;
  g_total_converged++;
}

static void apply_cmds(sim *s, const wk_cmds *cmds) {
  for (uint32_t i = 0; i < cmds->count; i++) {
    const wk_cmd *c = &cmds->items[i];
    stask *t = task_by_id(s, c->task_id, c->task_id_len);
    vlog("  core %s %s\n", wk_cmd_kind_name(c->kind), t->id);
    switch (c->kind) {
      case WK_CMD_PREPARE_ACTIVATION:
        t->stage = S_PREPARING;
        t->work_at = s->now + below(s, 20);
        break;
      case WK_CMD_START_BUILDER:
        t->stage = S_BUILDER;
        t->work_at = s->now + below(s, 20);
        break;
      case WK_CMD_START_CALLS:
        CHECK(c->u.calls.call_list == (void *)t, "START_CALLS lost the call list");
        t->work_at = INT64_MAX;
        start_calls(s, t);
        break;
      case WK_CMD_START_WRITER:
        CHECK(t->calls_ok, "START_WRITER after a failed calls phase");
        CHECK(c->u.writer.outputs.len == t->outputs_len &&
                  (t->outputs_len == 0 ||
                   memcmp(c->u.writer.outputs.data, t->outputs, t->outputs_len) == 0),
              "the writer's outputs differ from the ones assembled");
        /* outputs land in call order: chunk i is call i's value */
        for (uint32_t k = 0; k < t->n_added; k++) {
          uint64_t v;
          memcpy(&v, c->u.writer.outputs.data + 8u * k, 8);
          if (t->out_res[k] == WK_DISP_OK) {
            CHECK(v == expect_value((uint64_t)(t - s->tasks), k),
                  "output %u of %s is not call %u's value", k, t->id, k);
          }
        }
        t->stage = S_WRITER;
        t->work_at = s->now + below(s, 20);
        break;
      case WK_CMD_CANCEL_TASK:
        disp_cancel(s, t);
        t->work_at = INT64_MAX;
        break;
      case WK_CMD_CONVERGE: converge(s, t, c); break;
    }
  }
}

/* Dispatcher TASK_DONEs → the calls phase of WorkerCore. */
static void run_effects(sim *s) {
  if (s->n_effects == 0) return;
  for (uint32_t k = 0; k < s->n_effects; k++) {
    stask *t = &s->tasks[s->effects[k]];
    if (t->stage != S_CALLS) continue; /* timed out or aborted meanwhile */
    wk_phase_outcome o;
    memset(&o, 0, sizeof o);
    o.ok = t->calls_ok;
    if (t->calls_ok) {
      for (uint32_t i = 0; i < t->n_added; i++) memcpy(t->outputs + 8u * i, &t->out_val[i], 8);
      t->outputs_len = 8u * (size_t)t->n_added;
      o.data = (wk_bytes){t->outputs, t->outputs_len};
    }
    o.stats.calls_total = t->n_added;
    o.stats.calls_failed = t->failed_seen;
    wk_transition_result tr;
    wk_core_handle_phase_finished(s->core, t->id, t->id_len, WK_PHASE_CALLS, &o, s->now, &tr);
    CHECK(tr.err == WK_OK, "phase_finished(CALLS) for %s: %s", t->id, wk_err_name(tr.err));
    apply_cmds(s, &tr.cmds);
  }
  s->n_effects = 0;
}

/* ---- steps -------------------------------------------------------------------------------- */

static void step_submit(sim *s) {
  if (s->n_tasks >= SIM_TASK_MAX) return;
  stask *t = &s->tasks[s->n_tasks];
  memset(t, 0, sizeof *t);
  int len = snprintf(t->id, sizeof t->id, "t%u", s->n_tasks);
  t->id_len = (size_t)len;
  t->work_at = INT64_MAX;
  wk_submit_request req;
  memset(&req, 0, sizeof req);
  req.task_id = t->id;
  req.task_id_len = t->id_len;
  req.request_digest = mix(s->n_tasks, 1);
  req.timeout_ms = pct(s, 30) ? 0 : 300 + below(s, 4000);
  req.call_failure_policy = WK_CALL_FAIL_FAST;
  wk_submit_result out;
  wk_core_handle_submit(s->core, &req, t, s->now, &out);
  if (out.err == WK_ERR_NO_SLOT) return;
  CHECK(out.err == WK_OK && out.adapter_ctx_taken, "submit %s: %s", t->id, wk_err_name(out.err));
  s->n_tasks++;
  t->live_task_pos = s->n_live_tasks;
  s->live_task[s->n_live_tasks++] = (uint32_t)(t - s->tasks);
  t->slot_id = out.slot_id;
  t->accepted_ms = out.accepted_ms;
  t->timeout_ms = req.timeout_ms ? req.timeout_ms : 5000;
  vlog("  submit %s timeout %" PRId64 "\n", t->id, t->timeout_ms);
  apply_cmds(s, &out.cmds);
}

static void do_work(sim *s, stask *t) {
  wk_transition_result tr;
  t->work_at = INT64_MAX;
  switch (t->stage) {
    case S_PREPARING:
      wk_core_handle_activation_prepared(s->core, t->id, t->id_len, t->slot_id, 1, s->now, &tr);
      break;
    case S_BUILDER: {
      wk_phase_outcome o;
      memset(&o, 0, sizeof o);
      o.ok = true;
      o.call_list = t;
      wk_core_handle_phase_finished(s->core, t->id, t->id_len, WK_PHASE_BUILDER, &o, s->now, &tr);
      break;
    }
    case S_WRITER: {
      wk_phase_outcome o;
      memset(&o, 0, sizeof o);
      o.ok = pct(s, 95);
      wk_core_handle_phase_finished(s->core, t->id, t->id_len, WK_PHASE_WRITER, &o, s->now, &tr);
      break;
    }
    default: return;
  }
  CHECK(tr.err == WK_OK, "adapter work for %s: %s", t->id, wk_err_name(tr.err));
  apply_cmds(s, &tr.cmds);
}

static void run_due_work(sim *s) {
  /* do_work may converge a task (and shrink the list): walk a copy */
  uint32_t ids[SIM_TASK_MAX];
  uint32_t n = s->n_live_tasks;
  memcpy(ids, s->live_task, n * sizeof ids[0]);
  for (uint32_t k = 0; k < n; k++) {
    stask *t = &s->tasks[ids[k]];
    if (t->work_at <= s->now) do_work(s, t);
  }
}

static void run_timers(sim *s) {
  wk_disp_out o;
  begin_out(s, &o);
  wk_disp_tick(s->disp, s->now, &o);
  drain_out(s, &o);
  run_effects(s);
  wk_task_id ids[8];
  size_t n = wk_core_timed_out_tasks(s->core, s->now, ids, 8);
  for (size_t k = 0; k < n; k++) {
    stask *t = task_by_id(s, ids[k].bytes, ids[k].len);
    wk_transition_result tr;
    wk_core_handle_task_timed_out(s->core, ids[k].bytes, ids[k].len, s->now, &tr);
    CHECK(tr.err == WK_OK, "task_timed_out(%s): %s", t->id, wk_err_name(tr.err));
    t->timed_out = true;
    apply_cmds(s, &tr.cmds);
  }
  (void)wk_core_purge_expired_results(s->core, s->now);
  run_due_work(s);
}

static void step_time(sim *s, int64_t dt) {
  s->now += dt;
  run_timers(s);
}

/* The executor answers attempt x with r; the dispatcher must accept exactly live ones. */
static void answer(sim *s, att *x, wk_disp_result r) {
  bool live = x->state == A_RUNNING || x->state == A_WAITING || x->state == A_RESUMED;
  vlog("  answer %#" PRIx64 " (%s, task %u idx %u depth %u) %s\n", x->call_id,
       live ? "live" : "stale", x->task, x->index, x->depth, wk_disp_result_name(r));
  if (live && r == WK_DISP_NOT_STARTED) {
    x->given_back = true; /* nothing final, the window stays */
    att_kill(s, x);
  } else if (live) {
    x->answered = true;
    x->result = (uint8_t)r;
    x->decided_at = s->now;
    model_result(s, &s->tasks[x->task], r);
    att_kill(s, x);
  }
  wk_disp_out o;
  begin_out(s, &o);
  wk_err err = wk_disp_call_finished(s->disp, x->call_id, r, s->now, &o);
  CHECK(err == (live ? WK_OK : WK_ERR_STALE), "call_finished(%#" PRIx64 ", %s) = %s, expected %s",
        x->call_id, wk_disp_result_name(r), wk_err_name(err), live ? "OK" : "STALE");
  if (!live) s->n_stale_ok++;
  drain_out(s, &o);
  run_effects(s);
}

static wk_disp_result random_result(sim *s) {
  uint32_t r = below(s, 100);
  if (r < 84) return WK_DISP_OK;
  if (r < 88) return WK_DISP_ERROR;
  if (r < 97) return WK_DISP_RETRYABLE;
  return WK_DISP_EXECUTOR_LOST;
}

/* A random attempt that can answer or ask now: running (sent or resumed), on top of
 * its executor's stack when that executor nests, and not stalled. */
static att *pick_live(sim *s) {
  static uint32_t cand[SIM_ATT_MAX];
  uint32_t n = 0;
  for (uint32_t i = 0; i < s->n_live; i++) {
    const att *x = &s->atts[s->live[i]];
    if (x->behavior != B_STALL && att_can_go_on(s, x)) cand[n++] = s->live[i];
  }
  return n == 0 ? NULL : &s->atts[cand[below(s, n)]];
}

static void step_answer(sim *s) {
  att *x = pick_live(s);
  if (x == NULL) return;
  answer(s, x, random_result(s));
  if (x->behavior == B_TWICE) answer(s, x, random_result(s)); /* the duplicate: STALE */
}

static void step_stale_answer(sim *s) {
  if (s->n_stale == 0) return;
  uint32_t n = s->n_stale < SIM_STALE_POOL ? s->n_stale : SIM_STALE_POOL;
  att *x = att_find(s, s->stale_pool[below(s, n)]);
  CHECK(x != NULL && x->state == A_DEAD, "stale pool holds a live attempt");
  answer(s, x, random_result(s));
}

/* An answer whose consequences stay pending in the dispatcher (a full output buffer),
 * then, before anything is emitted, the task is aborted or the child's parent dies:
 * the CALL_DONE / SUBCALL_DONE / TASK_DONE decided by the answer must never come out
 * (only CANCELs may). The answered attempt runs (sent or resumed) and has no
 * children, so the answer itself cancels nothing unless it ends the task, and then
 * the abort path follows. */
static void step_deferred(sim *s) {
  att *x = pick_live(s);
  if (x == NULL) return;
  stask *t = &s->tasks[x->task];
  if (t->stage != S_CALLS || t->disp_closed) return;
  wk_disp_result r = random_result(s);
  vlog("  deferred answer %#" PRIx64 " %s\n", x->call_id, wk_disp_result_name(r));
  x->answered = true;
  x->result = (uint8_t)r;
  x->decided_at = s->now;
  model_result(s, t, r);
  att_kill(s, x);
  wk_disp_out o = {g_buf, 0, 0, false};
  wk_err err = wk_disp_call_finished(s->disp, x->call_id, r, s->now, &o);
  CHECK(err == WK_OK && o.count == 0, "deferred call_finished: %s", wk_err_name(err));
  att *parent = x->depth > 0 ? &s->atts[s->groups[x->group].parent] : NULL;
  if (parent != NULL && parent->state == A_WAITING && pct(s, 60)) {
    answer(s, parent, WK_DISP_EXECUTOR_LOST); /* the child's SUBCALL_DONE must vanish */
    return;
  }
  wk_transition_result tr;
  wk_core_handle_abort(s->core, t->id, t->id_len, WK_FAIL_CANCELLED, "sim abort", s->now, &tr);
  CHECK(tr.err == WK_OK, "abort(%s): %s", t->id, wk_err_name(tr.err));
  t->aborted = true;
  apply_cmds(s, &tr.cmds);
  CHECK(t->stage == S_TERMINAL, "abort did not converge %s", t->id);
}

static void step_subcalls(sim *s) {
  att *x = pick_live(s);
  if (x == NULL) return;
  stask *t = &s->tasks[x->task];
  uint32_t n = pct(s, 3) ? 0 : 1 + below(s, SIM_CHILDREN_MAX);
  wk_disp_stats st = wk_disp_stats_get(s->disp);
  uint32_t free_calls = s->dcfg.max_calls - st.live_calls;
  wk_err want = WK_OK;
  if (n == 0 || x->depth + 1 > s->dcfg.max_depth) {
    want = WK_ERR_INVALID_ARGUMENT;
  } else if (n > free_calls) {
    want = WK_ERR_NO_SLOT;
  }
  wk_disp_out o;
  begin_out(s, &o);
  uint64_t group = 0;
  wk_err err = wk_disp_add_subcalls(s->disp, x->call_id, n, s->now, &group, &o);
  vlog("  subcalls %#" PRIx64 " n=%u depth=%u -> %s group %" PRIu64 "\n", x->call_id, n, x->depth,
       wk_err_name(err), group);
  CHECK(err == want, "add_subcalls(n=%u, depth %u, %u free) = %s, expected %s", n, x->depth,
        free_calls, wk_err_name(err), wk_err_name(want));
  if (err == WK_OK) {
    CHECK(group > 0 && group < SIM_GROUP_MAX && !s->groups[group].used,
          "group id %" PRIu64 " reused", group);
    sgroup *g = &s->groups[group];
    g->used = true;
    g->parent = att_index(s, x);
    g->n = n;
    if (x->state == A_RESUMED) {
      /* asking again: it was outside admission already */
      t->resumed--;
      s->resumed--;
      s->n_reasks++;
    } else {
      t->admitted--;
      s->admitted--;
      t->waiting++;
    }
    x->state = A_WAITING;
    x->wait_group = group;
    s->n_subcalls += n;
    ex_advance(s, &s->ex[x->executor]); /* it runs the next arrivals nested */
  }
  drain_out(s, &o);
  run_effects(s);
}

static void set_capacity(sim *s) {
  uint32_t alive = 0;
  for (uint32_t e = 0; e < s->n_exec; e++) alive += s->exec_alive[e];
  s->capacity = alive * s->depth_per_exec;
  wk_disp_set_capacity(s->disp, s->capacity);
  disp_poll(s);
  run_effects(s);
}

static void step_crash(sim *s) {
  uint32_t e = below(s, s->n_exec);
  if (!s->exec_alive[e]) return;
  vlog("  executor %u crashes\n", e);
  s->exec_alive[e] = false;
  s->n_crashes++;
  s->capacity -= s->depth_per_exec;
  s->shrunk = true;
  wk_disp_set_capacity(s->disp, s->capacity);
  /* the attempts it started are lost; on an executor that runs calls in order, the
   * ones still in its queue never started: given back NOT_STARTED, after the lost ones
   * (as the pool does). Answers for ones cancelled meanwhile are STALE. */
  uint32_t victims[SIM_ATT_MAX > 4096 ? 4096 : SIM_ATT_MAX];
  bool queued[SIM_ATT_MAX > 4096 ? 4096 : SIM_ATT_MAX];
  uint32_t n = 0;
  const sexec *ex = &s->ex[e];
  for (uint32_t i = 0; i < s->n_live && n < 4096; i++) {
    if (s->atts[s->live[i]].executor != e) continue;
    queued[n] = false;
    for (uint32_t k = 0; ex->nested && k < ex->n_queue; k++) {
      if (ex->queue[k] == s->live[i]) queued[n] = true;
    }
    victims[n++] = s->live[i];
  }
  for (uint32_t k = 0; k < n; k++) {
    if (!queued[k]) answer(s, &s->atts[victims[k]], WK_DISP_EXECUTOR_LOST);
  }
  for (uint32_t k = 0; k < n; k++) {
    if (queued[k]) {
      s->n_given_back++;
      answer(s, &s->atts[victims[k]], WK_DISP_NOT_STARTED);
    }
  }
  CHECK(s->ex[e].n_stack == 0 && s->ex[e].n_queue == 0, "crashed executor still holds calls");
  disp_poll(s);
  run_effects(s);
}

static void step_restart(sim *s) {
  uint32_t e = below(s, s->n_exec);
  if (s->exec_alive[e]) return;
  vlog("  executor %u restarts\n", e);
  s->exec_alive[e] = true;
  set_capacity(s);
}

static void step_abort(sim *s) {
  if (s->n_tasks == 0) return;
  stask *t = &s->tasks[below(s, s->n_tasks)];
  if (t->stage == S_TERMINAL) return;
  wk_transition_result tr;
  wk_core_handle_abort(s->core, t->id, t->id_len, WK_FAIL_CANCELLED, "sim abort", s->now, &tr);
  CHECK(tr.err == WK_OK, "abort(%s): %s", t->id, wk_err_name(tr.err));
  t->aborted = true;
  apply_cmds(s, &tr.cmds);
}

static void step_produce(sim *s) {
  if (s->n_tasks == 0) return;
  for (int tries = 0; tries < 4; tries++) {
    stask *t = &s->tasks[below(s, s->n_tasks)];
    if (t->stage != S_CALLS || !t->streaming || t->last || t->disp_closed) continue;
    if (wk_disp_task_queued(s->disp, t->disp) >= 4) continue; /* backpressure */
    uint32_t left = t->n_total - t->n_added;
    uint32_t n = left < 8 ? left : 1 + below(s, 8);
    add_calls(s, t, n, n == left);
    run_effects(s);
    return;
  }
}

/* After a step (and a final poll): a task with sendable work and window room must have
 * been sent to, unless admission is full or it needs a call record and none is free. */
static void check_work_conserving(sim *s) {
  wk_disp_stats st = wk_disp_stats_get(s->disp);
  bool no_records = st.live_calls == s->dcfg.max_calls;
  for (uint32_t k = 0; k < s->n_live_tasks; k++) {
    stask *t = &s->tasks[s->live_task[k]];
    if (t->disp == 0 || t->disp_closed) continue;
    wk_disp_task_info info;
    CHECK(wk_disp_task_info_get(s->disp, t->disp, &info) == WK_OK, "task handle lost");
    bool recorded_work = info.ready > 0; /* resumed parents are no work to send */
    bool work = recorded_work || info.queued > 0;
    if (!work || info.inflight >= info.window || st.inflight >= st.capacity) continue;
    CHECK(!recorded_work && no_records,
          "task %s idles: queued %u ready %u resuming %u, inflight %u < window %u, "
          "global %u < capacity %u, %u records live",
          t->id, info.queued, info.ready, info.resuming, info.inflight, info.window, st.inflight,
          st.capacity, st.live_calls);
  }
}

/* Admission counts sent attempts only, never resumed parents: at most `capacity`, unless
 * the pool shrank under the calls (then no SEND until enough of them end). Resumed
 * parents are the only load beyond it. */
static void check_admission(sim *s) {
  wk_disp_stats st = wk_disp_stats_get(s->disp);
  CHECK(st.inflight == s->admitted, "dispatcher inflight %u, ours %u (resumed parents %u)",
        st.inflight, s->admitted, s->resumed);
  if (s->admitted <= s->capacity) {
    s->shrunk = false;
  } else {
    CHECK(s->shrunk, "admission exceeded: %u in flight, capacity %u (resumed parents %u)",
          s->admitted, s->capacity, s->resumed);
  }
  uint32_t waiting = 0, resumed = 0;
  for (uint32_t i = 0; i < s->n_live; i++) {
    const att *x = &s->atts[s->live[i]];
    waiting += x->state == A_WAITING;
    resumed += x->state == A_RESUMED;
    /* resumed at once: no parent whose children are all final still waits */
    if (x->state == A_WAITING) {
      const sgroup *g = &s->groups[x->wait_group];
      CHECK(g->done_mask != (1u << g->n) - 1u,
            "parent %#" PRIx64 " not resumed: group %" PRIu64
            " is final (%u in flight, "
            "capacity %u)",
            x->call_id, x->wait_group, st.inflight, st.capacity);
    }
  }
  CHECK(resumed == s->resumed, "resumed parents: %u live, counted %u", resumed, s->resumed);
  CHECK(s->admitted + waiting + resumed == s->n_live, "live attempts do not add up");
}

/* While the pool has capacity, some attempt must be able to go on by itself, or no task
 * may have work waiting for admission: otherwise only a deadline could end the wait. */
static void check_no_deadlock(sim *s) {
  if (s->capacity == 0) return;
  for (uint32_t i = 0; i < s->n_live; i++) {
    if (att_can_go_on(s, &s->atts[s->live[i]])) return; /* stalled ones end by deadline */
  }
  wk_disp_stats st = wk_disp_stats_get(s->disp);
  bool records = st.live_calls < s->dcfg.max_calls;
  for (uint32_t k = 0; k < s->n_live_tasks; k++) {
    stask *t = &s->tasks[s->live_task[k]];
    if (t->disp == 0 || t->disp_closed) continue;
    wk_disp_task_info info;
    CHECK(wk_disp_task_info_get(s->disp, t->disp, &info) == WK_OK, "task handle lost");
    bool work = info.ready > 0 || (info.queued > 0 && records);
    CHECK(!work || info.inflight >= info.window,
          "deadlock: no attempt can go on (%u live: %u counted in flight, %u resumed, held "
          "under nested calls), yet task %s has work waiting: ready %u queued %u, global %u / "
          "capacity %u",
          s->n_live, s->admitted, s->resumed, t->id, info.ready, info.queued, st.inflight,
          st.capacity);
  }
}

static void check_step(sim *s) {
  const char *why = wk_disp_check_invariants(s->disp);
  CHECK(why == NULL, "dispatcher invariant: %s", why);
  why = wk_core_check_invariants(s->core);
  CHECK(why == NULL, "core invariant: %s", why);
  CHECK(!wk_disp_pending(s->disp), "actions left pending after a full poll");
  check_admission(s);
  check_work_conserving(s);
  check_no_deadlock(s);
}

static void random_step(sim *s) {
  uint32_t r = below(s, 100);
  if (r < 30) {
    step_answer(s);
  } else if (r < 35) {
    step_stale_answer(s);
  } else if (r < 43) {
    step_subcalls(s);
  } else if (r < 60) {
    step_time(s, 1 + (int64_t)below(s, pct(s, 10) ? 400 : 30));
  } else if (r < 67) {
    step_submit(s);
  } else if (r < 68) {
    step_abort(s);
  } else if (r < 69) {
    step_crash(s);
  } else if (r < 72) {
    step_restart(s);
  } else if (r < 78) {
    step_produce(s);
  } else if (r < 79) {
    step_deferred(s);
  } else {
    run_due_work(s);
  }
  settle(s);
}

/* ---- a seed ------------------------------------------------------------------------------ */

static void setup(sim *s, uint64_t seed) {
  memset(s, 0, sizeof *s);
  wk_rng_seed(&s->rng, seed);
  s->now = 1000;
  wk_core_config cc;
  wk_core_config_default(&cc);
  s->slots = 1 + below(s, 6);
  cc.task_slots = s->slots;
  cc.default_slot_ttl_ms = 60000;
  cc.max_slot_ttl_ms = 60000;
  cc.default_task_timeout_ms = 5000;
  cc.max_task_timeout_ms = 60000;
  cc.result_retention_ms = 1000;
  cc.max_retained_results = 8;
  cc.allocator = sim_allocator(&s->core_alloc);
  s->core = wk_core_create(&cc);
  CHECK(s->core != NULL, "core config rejected");
  wk_core_set_ready(s->core, true);

  s->n_exec = 1 + below(s, 4);
  s->depth_per_exec = 1 + below(s, 3);
  for (uint32_t e = 0; e < s->n_exec; e++) {
    s->exec_alive[e] = true;
    s->ex[e].nested = pct(s, 75);
  }
  s->capacity = s->n_exec * s->depth_per_exec;
  wk_disp_config_default(&s->dcfg);
  s->dcfg.max_inflight = s->capacity;
  s->dcfg.window_initial = 1 + below(s, 4);
  s->dcfg.window_max = s->dcfg.window_initial + below(s, 12);
  s->dcfg.max_depth = below(s, 4);
  s->dcfg.max_tasks = s->slots + below(s, 3);
  s->dcfg.max_calls = pct(s, 30) ? 4 + below(s, 12) : 16 + below(s, 120);
  s->dcfg.rng_seed = mix(seed, 99);
  s->dcfg.jitter = (wk_disp_jitter)below(s, 3);
  s->dcfg.allocator = sim_allocator(&s->disp_alloc);
  s->disp = wk_disp_create(&s->dcfg);
  CHECK(s->disp != NULL, "dispatcher config rejected");

  s->atts = calloc(SIM_ATT_MAX, sizeof *s->atts);
  s->hash = calloc(SIM_HASH_SIZE, sizeof *s->hash);
  s->groups = calloc(SIM_GROUP_MAX, sizeof *s->groups);
  s->tasks = calloc(SIM_TASK_MAX, sizeof *s->tasks);
  CHECK(s->atts && s->hash && s->groups && s->tasks, "out of memory");
  vlog("seed %" PRIu64
       ": slots %u, executors %u x %u, window %u..%u, depth %u, tasks %u, calls %u,"
       " jitter %d\n",
       seed, s->slots, s->n_exec, s->depth_per_exec, s->dcfg.window_initial, s->dcfg.window_max,
       s->dcfg.max_depth, s->dcfg.max_tasks, s->dcfg.max_calls, (int)s->dcfg.jitter);
}

static uint32_t live_tasks(const sim *s) { return s->n_live_tasks; }

/* Everything recovers and every attempt is answered OK: every task must converge. */
static void drain(sim *s) {
  g_run.in_drain = true;
  for (uint32_t e = 0; e < s->n_exec; e++) s->exec_alive[e] = true;
  set_capacity(s);
  check_step(s);
  for (uint32_t round = 0; live_tasks(s) > 0; round++) {
    CHECK(round < 200000, "drain: %u tasks never converged", live_tasks(s));
    g_run.step++;
    bool acted = false;
    for (uint32_t tries = 0; tries < 64 && s->n_live > 0; tries++) {
      att *x = pick_live(s);
      if (x == NULL) break;
      answer(s, x, WK_DISP_OK);
      acted = true;
    }
    for (uint32_t k = 0; k < s->n_live_tasks; k++) {
      stask *t = &s->tasks[s->live_task[k]];
      if (t->stage == S_CALLS && t->streaming && !t->last && !t->disp_closed) {
        uint32_t left = t->n_total - t->n_added;
        add_calls(s, t, left < 16 ? left : 16, left <= 16);
        run_effects(s);
        acted = true;
      }
    }
    if (!acted) {
      /* nothing to answer: let time run to the next timer or piece of work */
      int64_t next = wk_disp_next_deadline(s->disp);
      int64_t cn = wk_core_next_deadline(s->core);
      if (cn < next) next = cn;
      for (uint32_t k = 0; k < s->n_live_tasks; k++) {
        if (s->tasks[s->live_task[k]].work_at < next) next = s->tasks[s->live_task[k]].work_at;
      }
      CHECK(next != INT64_MAX, "drain: no timer, no work, %u tasks live", live_tasks(s));
      s->now = next > s->now ? next : s->now + 1;
      run_timers(s);
    }
    settle(s);
    check_step(s);
  }
  wk_disp_stats st = wk_disp_stats_get(s->disp);
  CHECK(st.tasks == 0 && st.live_calls == 0 && st.inflight == 0 && st.pending == 0,
        "dispatcher not empty at the end: %u tasks, %u calls", st.tasks, st.live_calls);
  CHECK(s->n_live == 0 || s->admitted == 0, "attempts still in flight at the end");
  CHECK(wk_core_live_tasks(s->core) == 0, "core still has live tasks");
}

static void teardown(sim *s) {
  wk_disp_destroy(s->disp);
  wk_core_destroy(s->core);
  CHECK(s->disp_alloc.live_bytes == 0, "dispatcher leaked %" PRIu64 " bytes",
        s->disp_alloc.live_bytes);
  CHECK(s->core_alloc.live_bytes == 0, "core leaked %" PRIu64 " bytes", s->core_alloc.live_bytes);
  g_total_sends += s->n_sends;
  g_total_done += s->n_calls_done;
  g_total_stale += s->n_stale_ok;
  g_total_subcalls += s->n_subcalls;
  g_total_tasks_ok += s->n_tasks_ok;
  g_total_tasks_failed += s->n_tasks_failed;
  g_total_timeouts += s->n_timeouts;
  g_total_crashes += s->n_crashes;
  g_total_resumes += s->n_resumes;
  g_total_held += s->n_held;
  g_total_reasks += s->n_reasks;
  g_total_given_back += s->n_given_back;
  free(s->atts);
  free(s->hash);
  free(s->groups);
  free(s->tasks);
}

static void run_seed(uint64_t seed, uint64_t steps) {
  static sim s;
  sim_begin_seed(seed);
  setup(&s, seed);
  for (uint64_t k = 1; k <= steps; k++) {
    g_run.step = k;
    vlog("step %" PRIu64 " now %" PRId64 "\n", k, s.now);
    random_step(&s);
    check_step(&s);
    if (s.n_atts > SIM_ATT_MAX - 4096 || s.n_tasks >= SIM_TASK_MAX - 1) break;
  }
  drain(&s);
  teardown(&s);
}

int main(int argc, char **argv) {
  g_run.name = "sim_dispatch";
  sim_plan plan;
  sim_parse_args(argc, argv, SIM_DEFAULT_TOTAL_STEPS, SIM_DEFAULT_SEED_STEPS,
                 "usage: sim_dispatch [--seed S] [--seeds N] [--steps M] [--verbose]", NULL, &plan);
  double t0 = sim_mono_s();
  uint64_t total_steps = 0;
  for (uint64_t k = 0; k < plan.seeds; k++) {
    run_seed(plan.first_seed + k, plan.steps);
    total_steps += g_run.step;
  }
  double secs = sim_mono_s() - t0;
  printf("sim_dispatch: OK: %" PRIu64 " seeds, %" PRIu64 " steps in %.1f s: %" PRIu64
         " sends, %" PRIu64 " calls done, %" PRIu64 " stale answers ignored, %" PRIu64
         " subcalls, %" PRIu64 " timeouts, %" PRIu64 " crashes, %" PRIu64
         " tasks converged (%" PRIu64 " succeeded, %" PRIu64 " failed)\n",
         plan.seeds, total_steps, secs, g_total_sends, g_total_done, g_total_stale,
         g_total_subcalls, g_total_timeouts, g_total_crashes, g_total_converged, g_total_tasks_ok,
         g_total_tasks_failed);
  printf("sim_dispatch: %" PRIu64 " parents resumed (%" PRIu64
         " of them held under nested calls"
         " at that moment), %" PRIu64 " asked again after resuming, %" PRIu64
         " queued attempts of crashed executors given back NOT_STARTED\n",
         g_total_resumes, g_total_held, g_total_reasks, g_total_given_back);
  printf("sim_dispatch: failures by code:");
  for (int c = 1; c < WK_FAIL_COUNT; c++) {
    if (g_fail_codes[c])
      printf(" %s %" PRIu64, wk_failure_code_name((wk_failure_code)c), g_fail_codes[c]);
  }
  printf("\n");
  return 0;
}

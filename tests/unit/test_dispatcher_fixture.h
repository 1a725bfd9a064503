/* test_dispatcher_fixture.h: shared helpers for the DispatcherCore unit tests.
 *
 * Static inline functions only. A fixture holds one dispatcher and one action buffer;
 * every helper that emits collects the actions of that one call into `fx->out` (the
 * buffer is reset first) and checks the dispatcher's invariants afterwards. Checking
 * helpers take the caller's file and line (through DFX_* macros) so that a failure
 * points at the test. Times are fixed numbers: the clock is never read. */
#ifndef TEST_DISPATCHER_FIXTURE_H
#define TEST_DISPATCHER_FIXTURE_H

#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/wk_dispatcher.h"

#define DFX_BUF 512u

#define DFX_LOC const char *file, int line
#define DFX_AT __FILE__, __LINE__
#define DFX_EQ(a, b) \
  _assert_int_equal(cast_to_largest_integral_type(a), cast_to_largest_integral_type(b), file, line)
#define DFX_TRUE(c) _assert_true(cast_to_largest_integral_type(c), #c, file, line)

typedef struct dfx {
  wk_disp *d;
  wk_disp_out out;
  wk_disp_action buf[DFX_BUF];
} dfx;

/* The configuration tests start from: 4 in flight, window 2..8, depth 2, 8 tasks,
 * 64 call records, no jitter (exact backoffs), seed 42. */
static inline wk_disp_config dfx_config(void) {
  wk_disp_config cfg;
  wk_disp_config_default(&cfg);
  cfg.max_inflight = 4;
  cfg.window_initial = 2;
  cfg.window_max = 8;
  cfg.max_depth = 2;
  cfg.max_tasks = 8;
  cfg.max_calls = 64;
  cfg.rng_seed = 42;
  cfg.jitter = WK_DISP_JITTER_NONE;
  return cfg;
}

/* FAIL_FAST, one attempt, no timeout, no deadline. */
static inline wk_disp_task_params dfx_params(void) {
  wk_disp_task_params p;
  memset(&p, 0, sizeof p);
  p.failure_policy = WK_CALL_FAIL_FAST;
  p.retry.max_attempts = 1;
  return p;
}

static inline void dfx_inv_at(const dfx *fx, DFX_LOC) {
  const char *why = wk_disp_check_invariants(fx->d);
  if (why != NULL) {
    print_error("dispatcher invariant broken: %s\n", why);
    _fail(file, line);
  }
}
#define DFX_INV(fx) dfx_inv_at((fx), DFX_AT)

static inline dfx *dfx_new_cfg(const wk_disp_config *cfg) {
  dfx *fx = calloc(1, sizeof *fx);
  assert_non_null(fx);
  fx->d = wk_disp_create(cfg);
  assert_non_null(fx->d);
  fx->out.items = fx->buf;
  fx->out.capacity = DFX_BUF;
  DFX_INV(fx);
  return fx;
}

static inline int dfx_setup(void **state) {
  wk_disp_config cfg = dfx_config();
  *state = dfx_new_cfg(&cfg);
  return 0;
}

static inline int dfx_teardown(void **state) {
  dfx *fx = *state;
  if (fx) {
    DFX_INV(fx);
    wk_disp_destroy(fx->d);
    free(fx);
  }
  return 0;
}

/* Replaces the fixture's dispatcher with one built from `cfg`. */
static inline void dfx_reconfigure(dfx *fx, const wk_disp_config *cfg) {
  wk_disp_destroy(fx->d);
  fx->d = wk_disp_create(cfg);
  assert_non_null(fx->d);
}

static inline void dfx_reset(dfx *fx) {
  fx->out.count = 0;
  fx->out.more = false;
}

/* ---- driving ------------------------------------------------------------------------ */

static inline uint32_t dfx_task_at(dfx *fx, uint64_t key, const wk_disp_task_params *p, DFX_LOC) {
  uint32_t h = 0;
  DFX_EQ(wk_disp_add_task(fx->d, key, p, &h), WK_OK);
  DFX_TRUE(h != 0);
  dfx_inv_at(fx, file, line);
  return h;
}
#define DFX_TASK(fx, key, p) dfx_task_at((fx), (key), (p), DFX_AT)

static inline void dfx_add_at(dfx *fx, uint32_t task, uint32_t n, bool last, int64_t now, DFX_LOC) {
  dfx_reset(fx);
  DFX_EQ(wk_disp_add_calls(fx->d, task, n, last, now, &fx->out), WK_OK);
  dfx_inv_at(fx, file, line);
}
#define DFX_ADD(fx, task, n, last, now) dfx_add_at((fx), (task), (n), (last), (now), DFX_AT)

static inline wk_err dfx_finish_at(dfx *fx, uint64_t call_id, wk_disp_result r, int64_t now,
                                   DFX_LOC) {
  dfx_reset(fx);
  wk_err err = wk_disp_call_finished(fx->d, call_id, r, now, &fx->out);
  dfx_inv_at(fx, file, line);
  return err;
}
#define DFX_FINISH(fx, id, r, now) dfx_finish_at((fx), (id), (r), (now), DFX_AT)

static inline void dfx_poll_at(dfx *fx, int64_t now, DFX_LOC) {
  dfx_reset(fx);
  wk_disp_poll(fx->d, now, &fx->out);
  dfx_inv_at(fx, file, line);
}
#define DFX_POLL(fx, now) dfx_poll_at((fx), (now), DFX_AT)

static inline void dfx_tick_at(dfx *fx, int64_t now, DFX_LOC) {
  dfx_reset(fx);
  wk_disp_tick(fx->d, now, &fx->out);
  dfx_inv_at(fx, file, line);
}
#define DFX_TICK(fx, now) dfx_tick_at((fx), (now), DFX_AT)

static inline void dfx_cancel_at(dfx *fx, uint32_t task, DFX_LOC) {
  dfx_reset(fx);
  DFX_EQ(wk_disp_cancel_task(fx->d, task, &fx->out), WK_OK);
  dfx_inv_at(fx, file, line);
}
#define DFX_CANCEL(fx, task) dfx_cancel_at((fx), (task), DFX_AT)

static inline uint64_t dfx_subcalls_at(dfx *fx, uint64_t parent, uint32_t n, int64_t now, DFX_LOC) {
  dfx_reset(fx);
  uint64_t group = 0;
  DFX_EQ(wk_disp_add_subcalls(fx->d, parent, n, now, &group, &fx->out), WK_OK);
  DFX_TRUE(group != 0);
  dfx_inv_at(fx, file, line);
  return group;
}
#define DFX_SUBCALLS(fx, parent, n, now) dfx_subcalls_at((fx), (parent), (n), (now), DFX_AT)

/* ---- reading the actions of the last call ------------------------------------------------ */

static inline uint32_t dfx_count(const dfx *fx, wk_disp_action_kind kind) {
  uint32_t n = 0;
  for (uint32_t i = 0; i < fx->out.count; i++) n += fx->out.items[i].kind == kind;
  return n;
}

/* The k-th (0-based) action of `kind`, or NULL. */
static inline const wk_disp_action *dfx_nth(const dfx *fx, wk_disp_action_kind kind, uint32_t k) {
  for (uint32_t i = 0; i < fx->out.count; i++) {
    if (fx->out.items[i].kind != kind) continue;
    if (k-- == 0) return &fx->out.items[i];
  }
  return NULL;
}

/* The SEND of top-level call `index` of `task` in the last output, or NULL. */
static inline const wk_disp_action *dfx_send_of(const dfx *fx, uint32_t task, uint32_t index) {
  for (uint32_t i = 0; i < fx->out.count; i++) {
    const wk_disp_action *a = &fx->out.items[i];
    if (a->kind == WK_DISP_SEND && a->task == task && a->depth == 0 && a->index == index) return a;
  }
  return NULL;
}

static inline uint64_t dfx_send_id_at(const dfx *fx, uint32_t task, uint32_t index, DFX_LOC) {
  const wk_disp_action *a = dfx_send_of(fx, task, index);
  _assert_true(a != NULL, "SEND of the call in the last output", file, line);
  return a->call_id;
}
#define DFX_SEND_ID(fx, task, index) dfx_send_id_at((fx), (task), (index), DFX_AT)

static inline void dfx_kinds_at(const dfx *fx, const char *want, DFX_LOC) {
  /* a compact picture of the output: S send, X cancel, D call done, d subcall done,
   * C subcalls complete, T task done */
  char got[DFX_BUF + 1];
  uint32_t i = 0;
  for (; i < fx->out.count && i < DFX_BUF; i++) {
    switch (fx->out.items[i].kind) {
      case WK_DISP_SEND: got[i] = 'S'; break;
      case WK_DISP_CANCEL: got[i] = 'X'; break;
      case WK_DISP_CALL_DONE: got[i] = 'D'; break;
      case WK_DISP_SUBCALL_DONE: got[i] = 'd'; break;
      case WK_DISP_SUBCALLS_COMPLETE: got[i] = 'C'; break;
      case WK_DISP_TASK_DONE: got[i] = 'T'; break;
      default: got[i] = '?'; break;
    }
  }
  got[i] = '\0';
  _assert_string_equal(got, want, file, line);
}
/* Expects the kinds of the last output, in order, e.g. "DXXT". */
#define DFX_KINDS(fx, want) dfx_kinds_at((fx), (want), DFX_AT)

/* A FIFO of call ids in flight, fed from the SENDs of each output. */
typedef struct dfx_q {
  uint64_t id[1024];
  uint32_t head, tail;
} dfx_q;

static inline void dfx_q_sends(dfx_q *q, const dfx *fx) {
  for (uint32_t i = 0; i < fx->out.count; i++) {
    if (fx->out.items[i].kind == WK_DISP_SEND) q->id[q->tail++ % 1024u] = fx->out.items[i].call_id;
  }
}
static inline uint32_t dfx_q_len(const dfx_q *q) { return q->tail - q->head; }
static inline uint64_t dfx_q_pop(dfx_q *q) {
  assert_true(q->head < q->tail);
  return q->id[q->head++ % 1024u];
}

static inline wk_disp_task_info dfx_info_at(const dfx *fx, uint32_t task, DFX_LOC) {
  wk_disp_task_info info;
  DFX_EQ(wk_disp_task_info_get(fx->d, task, &info), WK_OK);
  return info;
}
#define DFX_INFO(fx, task) dfx_info_at((fx), (task), DFX_AT)

#endif

/* wk_code_prune.c: removing old code epochs once no task pins them (see wk_orch_int.h).
 *
 * A task's end (wk_task_code_unpin) asks for its functions to be pruned when that may
 * remove something (the function changed since its last prune, or the task ran an epoch
 * other than CURRENT: wk_code_cache_prune_due); requests wait
 * in a list (one per function) and one threadpool job at a time takes the whole list
 * and runs wk_code_store_prune on each, so a burst of ending tasks costs one pass. The
 * job decides under the pins' mutex, so a task activating meanwhile (its function held
 * from the loop thread before any file is read) never loses the epoch it resolves. */
#include "app/wk_orch_int.h"

#include <stdlib.h>
#include <string.h>

#include "adapters/wk_code_store.h"
#include "app/wk_code_cache.h"
#include "lib/wk_alloc.h"
#include "lib/wk_log.h"

#define PRUNE_REMOVED_LOGGED 64u /* epochs named in one log line at most */

typedef struct wk_orch__prune {
  struct wk_orch__prune *next;
  char function[WK_CODE_STORE_NAME_MAX + 1];
  size_t removed; /* set by the job */
  uint64_t epochs[PRUNE_REMOVED_LOGGED];
  int rc;
  char error[256];
} wk_orch__prune;

typedef struct prune_job {
  uv_work_t work;
  wk_orch *o;
  wk_orch__prune *list;
  /* copies for the worker thread: the orchestrator's config is not read off the loop */
  const char *code_root;
  uint32_t keep;
  wk_code_pins *pins;
} prune_job;

static void free_list(wk_orch__prune *p) {
  while (p) {
    wk_orch__prune *next = p->next;
    free(p);
    p = next;
  }
}

static void on_prune_work(uv_work_t *w) {
  prune_job *j = w->data;
  for (wk_orch__prune *p = j->list; p; p = p->next) {
    p->rc = wk_code_store_prune(j->code_root, p->function, j->keep, j->pins, p->epochs,
                                PRUNE_REMOVED_LOGGED, &p->removed, p->error, sizeof p->error);
  }
}

static void start(wk_orch *o);

static void on_prune_done(uv_work_t *w, int status) {
  prune_job *j = w->data;
  wk_orch *o = j->o;
  for (wk_orch__prune *p = j->list; p && status == 0; p = p->next) {
    if (p->rc != 0) {
      json_t *f = json_pack("{s:s, s:s}", "function", p->function, "error", p->error);
      wk_log_json(WK_LOG_WARN, "code_prune_failed", f);
    } else if (p->removed > 0) {
      json_t *epochs = json_array();
      for (size_t i = 0; i < p->removed && i < PRUNE_REMOVED_LOGGED; i++)
        json_array_append_new(epochs, json_integer((json_int_t)p->epochs[i]));
      json_t *f = json_pack("{s:s, s:o, s:I}", "function", p->function, "epochs", epochs, "kept",
                            (json_int_t)j->keep);
      wk_log_json(WK_LOG_INFO, "code_epochs_removed", f);
    }
  }
  free_list(j->list);
  free(j);
  o->prune_running = false;
  o->jobs--;
  if (o->closing) {
    wk_orch__maybe_free(o);
    return;
  }
  if (o->prune_pending) start(o);
}

static void start(wk_orch *o) {
  prune_job *j = wk_xcalloc(1, sizeof *j);
  j->o = o;
  j->list = o->prune_pending;
  j->code_root = o->cfg.code_root;
  j->keep = o->cfg.code_epochs_kept;
  j->pins = o->pins;
  j->work.data = j;
  o->prune_pending = NULL;
  o->prune_running = true;
  o->jobs++;
  if (uv_queue_work(o->loop, &j->work, on_prune_work, on_prune_done) != 0) {
    o->jobs--;
    o->prune_running = false;
    free_list(j->list);
    free(j);
  }
}

void wk_orch__prune_code(wk_orch *o, const char *function) {
  if (o->cfg.code_epochs_kept == 0 || o->closing || !o->cfg.code_root) return;
  for (const wk_orch__prune *p = o->prune_pending; p; p = p->next) {
    if (strcmp(p->function, function) == 0) return; /* merged with the waiting request */
  }
  wk_orch__prune *p = wk_xcalloc(1, sizeof *p);
  snprintf(p->function, sizeof p->function, "%s", function);
  p->next = o->prune_pending;
  o->prune_pending = p;
  if (!o->prune_running) start(o);
}

void wk_orch__prune_code_cb(void *ud, const char *function, uint64_t epoch) {
  wk_orch *o = ud;
  if (o->cfg.code_epochs_kept == 0) return;
  /* a task that ran CURRENT of an unchanged function frees no epoch a prune could take:
   * no pass (no lock file, no directory scan) at every task's end */
  if (o->code_cache && !wk_code_cache_prune_due(o->code_cache, function, epoch)) return;
  wk_orch__prune_code(o, function);
}

void wk_orch__prune_free(wk_orch *o) {
  free_list(o->prune_pending);
  o->prune_pending = NULL;
}

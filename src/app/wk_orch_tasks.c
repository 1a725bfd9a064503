/* wk_orch_tasks.c: ListTasks and GetTaskLogs over the task book. See wk_orch_int.h.
 *
 * The book (wk_task_book.h) holds what the core does not: each task's function,
 * builder and labels, and its calls' captured output. The core stays the truth of
 * which tasks exist and how they stand: a listing reads each task's state from it, and
 * an entry goes when the core tells its forget hook that it forgot the task, so the
 * book holds exactly the tasks the core knows. */
#include "app/wk_orch_int.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "adapters/wk_validate.h"
#include "app/wk_wire.h"
#include "lib/wk_alloc.h"

/* Tasks one ListTasks page examines at most against its filters. */
#define LIST_EXAMINE_MAX 10000u
void wk_orch__book_add(wk_orch *o, const Worker__V1__SubmitTaskRequest *req) {
  wk_option labels[WK_LABELS_MAX];
  size_t n = req->n_labels < WK_LABELS_MAX ? req->n_labels : WK_LABELS_MAX;
  for (size_t i = 0; i < n; i++)
    labels[i] = (wk_option){req->labels[i]->key, req->labels[i]->value};
  const char *builder =
      (req->function->type && req->function->type[0]) ? req->function->type : "single";
  wk_task_book_add(o->book, req->task_id, req->function->name, builder, labels, n);
}

void wk_orch__book_forget(void *ud, const char *task_id, size_t task_id_len) {
  wk_orch *o = ud;
  (void)task_id_len; /* the core's ids are NUL-terminated */
  wk_task_book_remove(o->book, task_id);
}

void wk_orch__book_log(void *ud, const char *task_id, uint32_t index, uint32_t attempt,
                       wk_frame_bytes out, wk_frame_bytes err) {
  wk_orch *o = ud;
  wk_task_book_log(o->book, task_id, index, attempt, out.ptr, out.len, err.ptr, err.len);
}

/* ---- ListTasks ------------------------------------------------------------------------ */

typedef struct list_page {
  const wk_orch *o;
  const Worker__V1__ListTasksRequest *req;
  size_t max;
  Worker__V1__TaskSummary *items;
  Worker__V1__TaskSummary **ptrs;
  Worker__V1__TaskSummary__LabelsEntry *labels; /* every item's, back to back */
  Worker__V1__TaskSummary__LabelsEntry **label_ptrs;
  size_t n, n_labels, cap_labels;
} list_page;

static bool state_wanted(const Worker__V1__ListTasksRequest *req, int state) {
  if (req->n_states == 0) return true;
  for (size_t i = 0; i < req->n_states; i++) {
    if ((int)req->states[i] == state) return true;
  }
  return false;
}

static bool labels_match(const Worker__V1__ListTasksRequest *req, const wk_task_entry *e) {
  for (size_t i = 0; i < req->n_labels; i++) {
    const char *want = req->labels[i]->value ? req->labels[i]->value : "";
    const char *have = wk_option_get(e->labels, e->n_labels, req->labels[i]->key);
    if (!have || strcmp(have, want) != 0) return false;
  }
  return true;
}

static bool list_visit(void *ud, const wk_task_entry *e) {
  list_page *pg = ud;
  const wk_task_result *r;
  if (wk_core_get_result(pg->o->core, e->task_id, strlen(e->task_id), &r) != WK_OK) return true;
  int state = wk_wire_task_state(r->state);
  if (!state_wanted(pg->req, state) || !labels_match(pg->req, e)) return true;
  if (pg->n == pg->max) return false; /* full: this one starts the next page */
  Worker__V1__TaskSummary *t = &pg->items[pg->n];
  worker__v1__task_summary__init(t);
  t->task_id = e->task_id;
  t->state = (Worker__V1__TaskState)state;
  t->phase = (Worker__V1__Phase)wk_wire_phase(r->phase);
  t->function = e->function;
  t->builder = e->builder;
  t->code_epoch = r->code_epoch;
  const wk_task_statistic *s = &r->statistic;
  t->accepted_unix_ms = wk_wire_unix_ms(s->accepted_ms, pg->o->wall_offset_ms);
  t->finished_unix_ms = wk_wire_unix_ms(s->finished_ms, pg->o->wall_offset_ms);
  t->age_ms = s->accepted_ms && pg->o->now_ms > s->accepted_ms
                  ? (uint64_t)(pg->o->now_ms - s->accepted_ms)
                  : 0;
  t->calls_total = s->calls.calls_total;
  t->calls_done = s->calls.calls_succeeded + s->calls.calls_failed;
  t->calls_failed = s->calls.calls_failed;
  t->failure_code = (Worker__V1__FailureCode)r->failure_code;
  if (e->n_labels) {
    if (pg->n_labels + e->n_labels > pg->cap_labels) {
      /* grown before any pointer into it is taken: pointers are set at the end */
      pg->cap_labels = (pg->n_labels + e->n_labels) * 2;
      pg->labels = wk_xrealloc(pg->labels, pg->cap_labels * sizeof *pg->labels);
    }
    for (size_t i = 0; i < e->n_labels; i++) {
      Worker__V1__TaskSummary__LabelsEntry *l = &pg->labels[pg->n_labels + i];
      worker__v1__task_summary__labels_entry__init(l);
      l->key = (char *)(uintptr_t)e->labels[i].key;
      l->value = (char *)(uintptr_t)e->labels[i].value;
    }
    pg->n_labels += e->n_labels;
  }
  t->n_labels = e->n_labels; /* the pointers follow once every label is in place */
  pg->n++;
  return true;
}

void wk_orch__handle_list_tasks(wk_orch *o, wk_rpc *rpc) {
  const Worker__V1__ListTasksRequest *req = wk_rpc_request(rpc);
  uint64_t before = 0;
  (void)wk_validate_page_token(req->page_token, &before); /* validated before it came here */
  list_page pg = {.o = o, .req = req};
  pg.max = req->page_size ? req->page_size : WK_LIST_PAGE_DEFAULT;
  if (pg.max > WK_LIST_PAGE_MAX) pg.max = WK_LIST_PAGE_MAX;
  pg.items = wk_xcalloc(pg.max, sizeof *pg.items);
  pg.ptrs = wk_xcalloc(pg.max, sizeof *pg.ptrs);
  uint64_t next = 0;
  wk_task_book_walk(o->book, before, LIST_EXAMINE_MAX, list_visit, &pg, &next);
  pg.label_ptrs = wk_xcalloc(pg.n_labels ? pg.n_labels : 1, sizeof *pg.label_ptrs);
  size_t at = 0;
  for (size_t i = 0; i < pg.n; i++) {
    pg.ptrs[i] = &pg.items[i];
    pg.items[i].labels = pg.items[i].n_labels ? &pg.label_ptrs[at] : NULL;
    for (size_t j = 0; j < pg.items[i].n_labels; j++, at++) pg.label_ptrs[at] = &pg.labels[at];
  }
  char token[24] = "";
  if (next) snprintf(token, sizeof token, "s%" PRIu64, next);
  Worker__V1__ListTasksResponse resp = WORKER__V1__LIST_TASKS_RESPONSE__INIT;
  resp.tasks = pg.ptrs;
  resp.n_tasks = pg.n;
  resp.next_page_token = token;
  resp.live = wk_core_live_tasks(o->core);
  resp.retained = wk_core_retained_count(o->core);
  wk_orch__reply_packed(rpc, &resp.base);
  free(pg.label_ptrs);
  free(pg.labels);
  free(pg.ptrs);
  free(pg.items);
}

/* ---- GetTaskLogs ---------------------------------------------------------------------- */

void wk_orch__handle_task_logs(wk_orch *o, wk_rpc *rpc) {
  const Worker__V1__GetTaskLogsRequest *req = wk_rpc_request(rpc);
  const wk_task_result *r;
  const wk_task_entry *e = wk_task_book_find(o->book, req->task_id);
  if (wk_core_get_result(o->core, req->task_id, strlen(req->task_id), &r) != WK_OK || !e) {
    char msg[512];
    wk_rpc_fail(rpc, GRPC_STATUS_NOT_FOUND,
                wk_wire_error_message(WK_ERR_NOT_FOUND, req->task_id, msg, sizeof msg));
    return;
  }
  Worker__V1__GetTaskLogsResponse resp = WORKER__V1__GET_TASK_LOGS_RESPONSE__INIT;
  resp.task_id = (char *)(uintptr_t)req->task_id;
  resp.dropped_bytes = e->log_dropped_bytes;
  resp.state = (Worker__V1__TaskState)wk_wire_task_state(r->state);
  wk_buf b = {0};
  size_t n = worker__v1__get_task_logs_response__get_packed_size(&resp);
  worker__v1__get_task_logs_response__pack(&resp, wk_buf_reserve(&b, n));
  b.len = n;
  /* the CallLog records are kept encoded as this message's field 2 */
  (void)wk_task_book_logs(o->book, req->task_id, req->one_call, req->call, &b);
  wk_rpc_reply(rpc, b.data, b.len);
  wk_buf_free(&b);
}

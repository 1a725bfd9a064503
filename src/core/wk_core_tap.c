/* wk_core_tap.c: the input boundary's vocabulary and its replay step
 * (wk_core_apply_input). The boundary itself wraps the entry points in wk_core.c. */
#include "core/wk_core_tap.h"

#include <string.h>

#include "core/wk_core_int.h"

const char *wk_core_input_kind_name(wk_core_input_kind k) {
  switch (k) {
    case WK_INPUT_SET_READY: return "set_ready";
    case WK_INPUT_SET_DRAINING: return "set_draining";
    case WK_INPUT_SET_PAUSED: return "set_paused";
    case WK_INPUT_REQUEST_SLOT: return "request_slot";
    case WK_INPUT_SUBMIT: return "submit";
    case WK_INPUT_ACTIVATION_PREPARED: return "activation_prepared";
    case WK_INPUT_ACTIVATION_FAILED: return "activation_failed";
    case WK_INPUT_PHASE_FINISHED: return "phase_finished";
    case WK_INPUT_CALL_PROGRESS: return "call_progress";
    case WK_INPUT_TASK_TIMED_OUT: return "task_timed_out";
    case WK_INPUT_ABORT: return "abort";
    case WK_INPUT_WATCH_ATTACHED: return "watch_attached";
    case WK_INPUT_WATCH_DETACHED: return "watch_detached";
    case WK_INPUT_WATCH_DISCONNECTED: return "watch_disconnected";
    case WK_INPUT_WATCH_GRACE_EXPIRED: return "watch_grace_expired";
    case WK_INPUT_SLOT_LEASE_EXPIRED: return "slot_lease_expired";
    case WK_INPUT_PURGE: return "purge";
  }
  return "unknown";
}

const wk_core_config *wk_core_get_config(const wk_core *core) { return &core->cfg; }

void wk_core_apply_input(wk_core *core, const wk_core_input *in, void *adapter_ctx,
                         wk_core_applied *res) {
  memset(res, 0, sizeof *res);
  wk_core_output *o = &res->out;
  const char *id = in->task_id;
  size_t len = in->task_id_len;
  switch (in->kind) {
    case WK_INPUT_SET_READY: wk_core_set_ready(core, in->flag); return;
    case WK_INPUT_SET_DRAINING: wk_core_set_draining(core, in->flag); return;
    case WK_INPUT_SET_PAUSED: wk_core_set_admission_paused(core, in->message); return;
    case WK_INPUT_REQUEST_SLOT:
      wk_core_handle_request_slot(core, id, len, in->ttl_ms, in->now_ms, &res->slot);
      o->err = res->slot.err;
      o->slot = &res->slot;
      return;
    case WK_INPUT_SUBMIT:
      if (!in->submit) break;
      wk_core_handle_submit(core, in->submit, adapter_ctx, in->now_ms, &res->submit);
      o->err = res->submit.err;
      o->submit = &res->submit;
      return;
    case WK_INPUT_CALL_PROGRESS:
      if (!in->stats) break;
      o->err = wk_core_handle_call_progress(core, id, len, in->stats);
      return;
    case WK_INPUT_WATCH_ATTACHED:
      o->err = wk_core_handle_watch_attached(core, id, len, in->now_ms);
      return;
    case WK_INPUT_WATCH_DETACHED:
      o->err = wk_core_handle_watch_detached(core, id, len, in->now_ms);
      return;
    case WK_INPUT_WATCH_DISCONNECTED:
      o->err = wk_core_handle_watch_disconnected(core, id, len, in->now_ms);
      return;
    case WK_INPUT_PURGE: o->purged = wk_core_purge_expired_results(core, in->now_ms); return;
    case WK_INPUT_ACTIVATION_PREPARED:
      wk_core_handle_activation_prepared(core, id, len, in->slot_id, in->code_epoch, in->now_ms,
                                         &res->transition);
      break;
    case WK_INPUT_ACTIVATION_FAILED:
      wk_core_handle_activation_failed(core, id, len, in->code, in->message, in->now_ms,
                                       &res->transition);
      break;
    case WK_INPUT_PHASE_FINISHED:
      if (!in->outcome) {
        o->err = WK_ERR_INVALID_ARGUMENT;
        return;
      }
      wk_core_handle_phase_finished(core, id, len, in->phase, in->outcome, in->now_ms,
                                    &res->transition);
      break;
    case WK_INPUT_TASK_TIMED_OUT:
      wk_core_handle_task_timed_out(core, id, len, in->now_ms, &res->transition);
      break;
    case WK_INPUT_ABORT:
      wk_core_handle_abort(core, id, len, in->code, in->message, in->now_ms, &res->transition);
      break;
    case WK_INPUT_WATCH_GRACE_EXPIRED:
      wk_core_handle_watch_grace_expired(core, id, len, in->now_ms, &res->transition);
      break;
    case WK_INPUT_SLOT_LEASE_EXPIRED:
      wk_core_handle_slot_lease_expired(core, in->slot_id, in->now_ms, &res->transition);
      break;
    default: o->err = WK_ERR_INVALID_ARGUMENT; return;
  }
  if (in->kind == WK_INPUT_SUBMIT || in->kind == WK_INPUT_CALL_PROGRESS) {
    o->err = WK_ERR_INVALID_ARGUMENT; /* missing submit or stats */
    return;
  }
  o->err = res->transition.err;
  o->transition = &res->transition;
}

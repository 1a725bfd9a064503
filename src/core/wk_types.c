#include "core/wk_types.h"

const char *wk_err_name(wk_err err) {
  switch (err) {
    case WK_OK: return "OK";
    case WK_ERR_INVALID_ARGUMENT: return "INVALID_ARGUMENT";
    case WK_ERR_NO_SLOT: return "NO_SLOT";
    case WK_ERR_UNAVAILABLE: return "UNAVAILABLE";
    case WK_ERR_INVALID_SLOT: return "INVALID_SLOT";
    case WK_ERR_NOT_FOUND: return "NOT_FOUND";
    case WK_ERR_SLOT_UNCERTAIN: return "SLOT_UNCERTAIN";
    case WK_ERR_CONFLICT: return "CONFLICT";
    case WK_ERR_STALE: return "STALE";
    case WK_ERR_PAUSED: return "PAUSED";
  }
  return "UNKNOWN";
}

const char *wk_slot_state_name(wk_slot_state s) {
  switch (s) {
    case WK_SLOT_FREE: return "FREE";
    case WK_SLOT_ALLOCATED: return "ALLOCATED";
    case WK_SLOT_RUNNING: return "RUNNING";
  }
  return "UNKNOWN";
}

const char *wk_task_state_name(wk_task_state s) {
  switch (s) {
    case WK_TASK_PREPARING: return "PREPARING";
    case WK_TASK_RUNNING: return "RUNNING";
    case WK_TASK_SUCCEEDED: return "SUCCEEDED";
    case WK_TASK_FAILED: return "FAILED";
    case WK_TASK_CANCELLED: return "CANCELLED";
  }
  return "UNKNOWN";
}

bool wk_task_state_terminal(wk_task_state s) {
  return s == WK_TASK_SUCCEEDED || s == WK_TASK_FAILED || s == WK_TASK_CANCELLED;
}

const char *wk_phase_name(wk_phase p) {
  switch (p) {
    case WK_PHASE_PREPARING: return "PREPARING";
    case WK_PHASE_BUILDER: return "BUILDER";
    case WK_PHASE_CALLS: return "CALLS";
    case WK_PHASE_WRITER: return "WRITER";
    case WK_PHASE_DONE: return "DONE";
  }
  return "UNKNOWN";
}

const char *wk_failure_code_name(wk_failure_code c) {
  switch (c) {
    case WK_FAIL_NONE: return "NONE";
    case WK_FAIL_ACTIVATION_FAILED: return "ACTIVATION_FAILED";
    case WK_FAIL_IO_SCOPE_FAILED: return "IO_SCOPE_FAILED";
    case WK_FAIL_SLOT_LOST: return "SLOT_LOST";
    case WK_FAIL_BUILDER_NOT_FOUND: return "BUILDER_NOT_FOUND";
    case WK_FAIL_BUILDER_FAILED: return "BUILDER_FAILED";
    case WK_FAIL_CALL_FAILED: return "CALL_FAILED";
    case WK_FAIL_PLUGIN_NOT_FOUND: return "PLUGIN_NOT_FOUND";
    case WK_FAIL_PLUGIN_FAILED: return "PLUGIN_FAILED";
    case WK_FAIL_TASK_TIMEOUT: return "TASK_TIMEOUT";
    case WK_FAIL_OWNER_LOST: return "OWNER_LOST";
    case WK_FAIL_CANCELLED: return "CANCELLED";
    case WK_FAIL_WORKER_SHUTDOWN: return "WORKER_SHUTDOWN";
  }
  return "UNKNOWN";
}

bool wk_failure_code_valid(int c) { return c >= 0 && c < WK_FAIL_COUNT; }

bool wk_task_id_valid(const char *id, size_t len) {
  if (!id || len == 0 || len > WK_TASK_ID_MAX) return false;
  for (size_t i = 0; i < len; i++) {
    unsigned char ch = (unsigned char)id[i];
    if (ch < 0x21 || ch > 0x7e) return false;
  }
  return true;
}

/* wk_deploy.h: the worker's side of fleet deploys, the DeployCode and SetCurrentEpoch
 * RPCs (issue 15 §1, README "Deploying code to a worker over gRPC").
 *
 * The gate, on the loop thread: deploy_enabled (off: UNIMPLEMENTED, saying how to turn
 * it on), then deploy_allowed_clients (PERMISSION_DENIED naming the client). The token
 * was checked by the gRPC server before the rpc got here. Then the rpc waits in a FIFO
 * (at most WK_DEPLOY_QUEUE_MAX; more: UNAVAILABLE) and the operations run one at a time
 * on the libuv threadpool, never on the loop: the file list checked against
 * deploy_max_files, deploy_max_bytes and the path rules, the files written to a
 * staging directory and digested again (a mismatch: INVALID_ARGUMENT with both
 * digests), the code check of `workerctl deploy` (compile + import, as the executor
 * user), then the publish (wk_code_store_publish_files). Answers, a log line each
 * (code_deployed, code_deploy_refused, code_current_set) and on_changed follow on the
 * loop. One at a time means a second deploy waits for the first (of any function).
 *
 * Status codes: INVALID_ARGUMENT (the request: files, paths, limits, digest mismatch,
 * a code check that failed), FAILED_PRECONDITION (the epoch holds another digest on
 * this worker; SetCurrentEpoch's digest differs), NOT_FOUND (SetCurrentEpoch: no such
 * function or epoch here), INTERNAL (the disk), UNAVAILABLE (queue full, shutting down). */
#ifndef WK_DEPLOY_H
#define WK_DEPLOY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "adapters/wk_grpc_server.h"
#include "app/wk_deploy_acl.h"

#define WK_DEPLOY_QUEUE_MAX 16u /* deploy rpcs waiting behind the one running */

/* ---- the handler ------------------------------------------------------------------- */

typedef struct wk_deploy_config {
  bool enabled;
  const char *allowed_clients; /* deploy_allowed_clients */
  const char *code_root;       /* absolute */
  uint64_t max_bytes;
  uint32_t max_files;
  /* the code check, as wk_code_check (strings copied) */
  const char *python, *script, *python_path;
  const char *const *executor_env; /* NAME=VALUE entries added (NULL-terminated; may be NULL) */
  int64_t check_timeout_ms;
  uint32_t uid, gid; /* the executor user (0 = the worker's own) */
  /* Called on the loop after each operation that changed the code store (a new epoch,
   * CURRENT moved); NULL = none. */
  void (*on_changed)(void *ud, const char *function);
  void *on_changed_ud;
} wk_deploy_config;

typedef struct wk_deploy wk_deploy;

/** Creates the handler on `loop` (copies what cfg points at). Returns NULL with a reason
 * in err when deploy_allowed_clients does not parse. */
wk_deploy *wk_deploy_create(uv_loop_t *loop, const wk_deploy_config *cfg, char *err,
                            size_t err_len);

/** Handles one DeployCode or SetCurrentEpoch rpc (loop thread); takes the sink's
 * reference and releases it once answered. */
void wk_deploy_handle(void *d, wk_rpc *rpc);

/** Answers the waiting rpcs UNAVAILABLE and frees the handler once the operation running
 * (if any) has ended. Loop thread. NULL is a no-op. */
void wk_deploy_close(wk_deploy *d);

#endif

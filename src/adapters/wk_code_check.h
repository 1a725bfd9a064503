/* wk_code_check.h: the check code gets before it is published (`workerctl deploy` and
 * the worker's DeployCode): the executor program, in check mode, compiles every file
 * and imports the entry point, in a subprocess of its own process group, killed after
 * a timeout. One implementation for both, so a tree the CLI accepts is one the worker
 * accepts. */
#ifndef WK_CODE_CHECK_H
#define WK_CODE_CHECK_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define WK_CODE_CHECK_TIMEOUT_MS 30000 /* default bound of the check */

/* How code is checked. The strings are borrowed (they must outlive the check). */
typedef struct wk_code_check {
  const char *python;     /* the interpreter (an executable path) */
  const char *script;     /* the executor program: worker_executor.py */
  const char *entrypoint; /* module:attr that must load */
  int64_t timeout_ms;     /* the check is killed after this long */
  /* NULL: the caller's environment (workerctl). Else the whole environment of the
   * check, NULL-terminated "NAME=VALUE" entries (the worker: what executors get). */
  const char *const *env;
  uint32_t uid, gid; /* uid != 0: the check runs as uid:gid with no supplementary groups
                        (the worker's executor_user); 0 = the caller's own ids */
  /* A process that reaps children it does not know (the worker, adapters/wk_reaper.h)
   * learns of the check's: before_fork right before fork(), after_fork with the pid (or
   * -1) right after it, reaped once waited for. NULL = none (workerctl). */
  void (*before_fork)(void);
  void (*after_fork)(pid_t pid);
  void (*reaped)(pid_t pid);
} wk_code_check;

/** A wk_code_check_fn (wk_code_store.h; ud: a wk_code_check): runs `python -B script
 * --check-code DIR --entrypoint EP` in its own process group with stdout and stderr
 * captured, PYTHONDONTWRITEBYTECODE=1, killed (the whole group) after timeout_ms. 0 when
 * it exits 0; otherwise -1 with why in err (the tail of its output, the timeout, or
 * why it could not run). Blocks the calling thread for as long as the check runs. */
int wk_code_check_run(void *ud, const char *dir, char *err, size_t err_len);

#endif

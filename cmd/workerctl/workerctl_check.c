/* workerctl_check.c: the check `workerctl deploy` runs on staged code before it is
 * published: the worker's own executor program, in check mode, in a subprocess
 * (src/adapters/wk_code_check.c, shared with the worker's DeployCode). Here: where the
 * interpreter and the program come from. */
#define _GNU_SOURCE /* readlink */

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "workerctl.h"

#ifndef WK_PYTHON_DIR
#define WK_PYTHON_DIR "python"
#endif
#define INSTALLED_SCRIPT "share/worker/python/worker_executor.py"

/* PREFIX/share/worker/python/worker_executor.py when this program is PREFIX/bin/workerctl
 * and that file exists; else the source tree's. */
static const char *default_script(char *buf, size_t len) {
  char exe[4096];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n > 0) {
    exe[n] = '\0';
    char *slash = strrchr(exe, '/');
    if (slash) *slash = '\0'; /* PREFIX/bin */
    slash = strrchr(exe, '/');
    if (slash) {
      slash[1] = '\0'; /* PREFIX/ */
      int w = snprintf(buf, len, "%s" INSTALLED_SCRIPT, exe);
      if (w > 0 && (size_t)w < len && access(buf, R_OK) == 0) return buf;
    }
  }
  return WK_PYTHON_DIR "/worker_executor.py";
}

int ctl_check_from_args(ctl_args *a, ctl_check *c) {
  static char script_buf[4096];
  const char *env;
  c->python = a->set[F_PYTHON]                            ? a->val[F_PYTHON]
              : ((env = getenv("WORKER_PYTHON")) && *env) ? env
                                                          : "/usr/bin/python3";
  c->script = a->set[F_EXECUTOR_SCRIPT] ? a->val[F_EXECUTOR_SCRIPT]
              : ((env = getenv("WORKER_EXECUTOR_SCRIPT")) && *env)
                  ? env
                  : default_script(script_buf, sizeof script_buf);
  c->entrypoint = a->set[F_ENTRYPOINT] ? a->val[F_ENTRYPOINT] : "main:handler";
  c->timeout_ms = CTL_CHECK_TIMEOUT_MS;
  c->env = NULL; /* workerctl's own environment */
  c->before_fork = NULL;
  c->after_fork = c->reaped = NULL;
  c->uid = c->gid = 0;
  if (a->set[F_CHECK_TIMEOUT_MS]) {
    uint64_t v = 0;
    if (!ctl_parse_u64(a->val[F_CHECK_TIMEOUT_MS], 1, 3600000, &v))
      return ctl_usage_error(a, "--check-timeout-ms must be 1..3600000, got '%s'",
                             a->val[F_CHECK_TIMEOUT_MS]);
    c->timeout_ms = (int64_t)v;
  }
  if (access(c->script, R_OK) != 0) {
    return ctl_usage_error(a,
                           "the executor program %s cannot be read (%s): pass --executor-script "
                           "PATH or set WORKER_EXECUTOR_SCRIPT, or deploy with --no-check",
                           c->script, strerror(errno));
  }
  return 0;
}

int ctl_check_code(void *ud, const char *dir, char *err, size_t err_len) {
  return wk_code_check_run(ud, dir, err, err_len);
}

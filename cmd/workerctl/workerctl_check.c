/* workerctl_check.c: the check `workerctl deploy` runs on staged code before it is
 * published: the worker's own executor program, in check mode, in a subprocess. */
#define _GNU_SOURCE /* pipe2 */

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "workerctl.h"

#ifndef WK_PYTHON_DIR
#define WK_PYTHON_DIR "python"
#endif
#define INSTALLED_SCRIPT "share/worker/python/worker_executor.py"
#define OUTPUT_KEPT 2048u /* bytes of the check's output kept for the message */

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

static int64_t mono_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The last line of text in buf (without trailing blanks), at most OUTPUT_KEPT bytes. */
static const char *last_lines(char *buf, size_t n) {
  while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == ' ' || buf[n - 1] == '\r')) n--;
  buf[n] = '\0';
  char *nl = strrchr(buf, '\n');
  return nl ? nl + 1 : buf;
}

int ctl_check_code(void *ud, const char *dir, char *err, size_t err_len) {
  const ctl_check *c = ud;
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    snprintf(err, err_len, "cannot check the code: pipe: %s", strerror(errno));
    return -1;
  }
  pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    snprintf(err, err_len, "cannot check the code: fork: %s", strerror(errno));
    return -1;
  }
  if (pid == 0) {
    (void)setpgid(0, 0); /* the check and whatever the code starts: killed together */
    dup2(fds[1], STDOUT_FILENO);
    dup2(fds[1], STDERR_FILENO);
    int null = open("/dev/null", O_RDONLY);
    if (null >= 0) dup2(null, STDIN_FILENO);
    setenv("PYTHONDONTWRITEBYTECODE", "1", 1); /* nothing lands in the staged copy */
    /* execv takes char *const[]: the strings are not written */
    char *argv[] = {(char *)(uintptr_t)c->python,     (char *)(uintptr_t) "-B",
                    (char *)(uintptr_t)c->script,     (char *)(uintptr_t) "--check-code",
                    (char *)(uintptr_t)dir,           (char *)(uintptr_t) "--entrypoint",
                    (char *)(uintptr_t)c->entrypoint, NULL};
    execv(c->python, argv);
    fprintf(stderr, "cannot run %s: %s\n", c->python, strerror(errno));
    _exit(127);
  }
  (void)setpgid(pid, pid);
  close(fds[1]);
  char out[OUTPUT_KEPT + 1];
  size_t n = 0;
  bool timed_out = false;
  int64_t deadline = mono_ms() + c->timeout_ms;
  for (;;) {
    int64_t left = deadline - mono_ms();
    if (left <= 0) {
      timed_out = true;
      break;
    }
    struct pollfd p = {.fd = fds[0], .events = POLLIN};
    int r = poll(&p, 1, (int)(left > 1000 ? 1000 : left));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) continue;
    char chunk[512];
    ssize_t got = read(fds[0], chunk, sizeof chunk);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break; /* EOF: the check (and anything it started) closed its output */
    for (ssize_t i = 0; i < got; i++) { /* keep the tail */
      if (n == OUTPUT_KEPT) {
        memmove(out, out + OUTPUT_KEPT / 2, OUTPUT_KEPT / 2);
        n = OUTPUT_KEPT / 2;
      }
      out[n++] = chunk[i];
    }
  }
  close(fds[0]);
  if (timed_out) kill(-pid, SIGKILL);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!timed_out) kill(-pid, SIGKILL); /* anything the import left running */
  if (timed_out) {
    snprintf(err, err_len,
             "the check did not finish within %lld ms (does importing %s block?): killed; "
             "raise --check-timeout-ms if it is only slow",
             (long long)c->timeout_ms, c->entrypoint);
    return -1;
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return 0;
  const char *why = last_lines(out, n);
  if (WIFEXITED(status)) {
    snprintf(err, err_len, "the code was refused (check exit %d): %s", WEXITSTATUS(status),
             *why ? why : "no output");
  } else {
    snprintf(err, err_len, "the check was killed by signal %d: %s",
             WIFSIGNALED(status) ? WTERMSIG(status) : 0, *why ? why : "no output");
  }
  return -1;
}

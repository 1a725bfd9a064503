/* wk_code_check.c: the check code gets before it is published (see wk_code_check.h);
 * moved here from workerctl so the worker's DeployCode runs the same one. */
#define _GNU_SOURCE /* pipe2, setgroups, environ */

#include "adapters/wk_code_check.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define OUTPUT_KEPT 2048u /* bytes of the check's output kept for the message */

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

int wk_code_check_run(void *ud, const char *dir, char *err, size_t err_len) {
  const wk_code_check *c = ud;
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    snprintf(err, err_len, "cannot check the code: pipe: %s", strerror(errno));
    return -1;
  }
  if (c->before_fork) c->before_fork();
  pid_t pid = fork();
  if (pid != 0 && c->after_fork) c->after_fork(pid);
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
    if (c->uid != 0 &&
        (setgroups(0, NULL) != 0 || setgid((gid_t)c->gid) != 0 || setuid((uid_t)c->uid) != 0)) {
      fprintf(stderr, "cannot switch to uid %u: %s\n", c->uid, strerror(errno));
      _exit(126);
    }
    if (c->env) environ = (char **)(uintptr_t)c->env; /* only execv reads it from here */
    setenv("PYTHONDONTWRITEBYTECODE", "1", 1);        /* nothing lands in the staged copy */
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
  if (c->reaped) c->reaped(pid);
  if (!timed_out) kill(-pid, SIGKILL); /* anything the import left running */
  if (timed_out) {
    snprintf(err, err_len,
             "the check did not finish within %lld ms (does importing %s block?): killed; "
             "raise the check timeout (workerctl --check-timeout-ms, the worker's "
             "deploy_check_timeout_ms) if it is only slow",
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

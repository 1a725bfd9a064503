/* bench_executor_floor.c: the "executor floor", the rate at which one Python executor
 * (python/worker_executor.py) turns no-op CALL frames into RESULT frames.
 *
 * The program plays the Worker: it spawns one executor on a Unix-domain socket, encodes
 * N no-op CALLs (`def handler(args, ctx): return None`) into one buffer up front, and
 * feeds them with a pipeline of at most DEPTH calls in flight (a call is in flight from
 * its first byte written until its RESULT is decoded), writing as many frames per
 * write() as the window allows. It reports calls/s, microseconds per call, the
 * executor's CPU time per call (user + system, from /proc: steadier than the wall clock
 * on a busy machine), and how many RESULTs arrived per read() (1.0 means the executor
 * writes one frame per syscall).
 *
 *   bench_executor_floor [-n CALLS] [-d DEPTH] [-p PYTHON] [-s EXECUTOR_SCRIPT]
 *
 * Defaults: 20000 calls, depth 64, /usr/bin/python3 (or $WK_TEST_PYTHON), the source
 * tree's python/worker_executor.py. Build a Release tree for stable numbers.
 *
 * tests/integration/test_executor_floor.c includes this file with
 * WK_FLOOR_NO_MAIN defined and calls wk_floor_run().
 */
#ifndef _XOPEN_SOURCE
#define _XOPEN_SOURCE 700
#endif

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "adapters/wk_frame.h"

#ifndef WK_SOURCE_DIR
#error "WK_SOURCE_DIR must name the repository root"
#endif

extern char **environ;

#define FLOOR_IO_TIMEOUT_MS 20000

typedef struct wk_floor_result {
  unsigned calls;         /* RESULTs received (== calls sent) */
  unsigned depth;         /* pipeline depth used */
  double seconds;         /* from the first CALL byte written to the last RESULT decoded */
  double calls_per_s;     /* calls / seconds */
  double us_per_call;     /* 1e6 / calls_per_s */
  unsigned reads;         /* recv() calls that returned data */
  unsigned writes;        /* send() calls that wrote data */
  unsigned errors;        /* RESULTs with a status other than OK */
  double cpu_us_per_call; /* executor user + system CPU per call (0 when /proc is missing) */
  char error[256];        /* why wk_floor_run failed (it returned false) */
} wk_floor_result;

static double floor_now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The process's user + system CPU in seconds (/proc/PID/stat), or -1. */
static double floor_proc_cpu_s(pid_t pid) {
  char path[64], buf[1024];
  snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = '\0';
  const char *p = strrchr(buf, ')'); /* the command name may hold spaces */
  if (!p) return -1;
  unsigned long utime = 0, stime = 0;
  /* after ")": state ppid pgrp session tty_nr tpgid flags minflt cminflt majflt cmajflt utime stime */
  if (sscanf(p + 1, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &utime, &stime) != 2)
    return -1;
  long hz = sysconf(_SC_CLK_TCK);
  return hz > 0 ? (double)(utime + stime) / (double)hz : -1;
}

static int floor_rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
  (void)st;
  (void)ftw;
  return flag == FTW_DP ? rmdir(path) : unlink(path);
}

static bool floor_fail(wk_floor_result *r, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static bool floor_fail(wk_floor_result *r, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(r->error, sizeof r->error, fmt, ap);
  va_end(ap);
  return false;
}

/* Receives into `rbuf` (blocking up to the timeout); false on EOF, error or timeout. */
static bool floor_recv(int fd, wk_frame_buf *rbuf, unsigned *reads) {
  struct pollfd pfd = {fd, POLLIN, 0};
  int pr = poll(&pfd, 1, FLOOR_IO_TIMEOUT_MS);
  if (pr != 1) return false;
  uint8_t *dst = wk_frame_buf_reserve(rbuf, 256 * 1024);
  ssize_t n = recv(fd, dst, 256 * 1024, 0);
  if (n <= 0) return false;
  wk_frame_buf_commit(rbuf, (size_t)n);
  if (reads) (*reads)++;
  return true;
}

/* Runs the executor floor: returns true and fills *r, or false with r->error. */
static bool wk_floor_run(const char *python, const char *script, unsigned n_calls, unsigned depth,
                         wk_floor_result *r) {
  memset(r, 0, sizeof *r);
  r->depth = depth;
  if (n_calls == 0 || depth == 0) return floor_fail(r, "calls and depth must be positive");
  bool ok = false;
  int fd = -1;
  pid_t pid = -1;
  size_t *offs = NULL;
  wk_frame_buf calls, rbuf;
  wk_frame_buf_init(&calls, NULL);
  wk_frame_buf_init(&rbuf, NULL);

  char dir[64] = "/tmp/wk-floor-XXXXXX";
  char code_dir[128], main_py[160];
  if (!mkdtemp(dir)) return floor_fail(r, "mkdtemp: %s", strerror(errno));
  snprintf(code_dir, sizeof code_dir, "%s/noop", dir);
  snprintf(main_py, sizeof main_py, "%s/main.py", code_dir);
  if (mkdir(code_dir, 0700) != 0) {
    floor_fail(r, "mkdir %s: %s", code_dir, strerror(errno));
    goto out;
  }
  FILE *f = fopen(main_py, "w");
  if (!f) {
    floor_fail(r, "fopen %s: %s", main_py, strerror(errno));
    goto out;
  }
  fputs("def handler(args, ctx):\n    return None\n", f);
  fclose(f);

  /* the executor's channel, as the pool makes it: a socket pair, its end at fd 3 */
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
    floor_fail(r, "socketpair: %s", strerror(errno));
    goto out;
  }
  fd = sv[0];
  char *argv[] = {(char *)(uintptr_t)python, (char *)(uintptr_t)script,
                  (char *)(uintptr_t) "--channel-fd", (char *)(uintptr_t) "3", NULL};
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, sv[1], 3);
  int err = posix_spawn(&pid, python, &fa, NULL, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  close(sv[1]);
  if (err != 0) {
    pid = -1;
    floor_fail(r, "posix_spawn %s: %s", python, strerror(err));
    goto out;
  }

  /* HELLO, then one warm-up call (imports the function) outside the measurement */
  wk_frame fr;
  size_t used = 0;
  for (;;) {
    wk_frame_rc rc = wk_frame_decode(wk_frame_buf_bytes(&rbuf), wk_frame_buf_size(&rbuf),
                                     WK_FRAME_MAX_DEFAULT, &fr, &used);
    if (rc == WK_FRAME_OK) break;
    if (rc != WK_FRAME_NEED_MORE || !floor_recv(fd, &rbuf, NULL)) {
      floor_fail(r, "no HELLO from the executor");
      goto out;
    }
  }
  wk_frame_buf_consume(&rbuf, used);
  if (fr.type != WK_FRAME_HELLO) {
    floor_fail(r, "first frame was %s", wk_frame_type_name(fr.type));
    goto out;
  }

  /* every CALL, encoded up front; offs[i] = where call i starts (offs[n] = the end) */
  offs = calloc((size_t)n_calls + 2, sizeof *offs);
  if (!offs) abort();
  wk_frame c;
  memset(&c, 0, sizeof c);
  c.type = WK_FRAME_CALL;
  c.call.task_id = wk_frame_bytes_cstr("floor");
  c.call.function = wk_frame_bytes_cstr("noop");
  c.call.epoch = 1;
  c.call.code_dir = wk_frame_bytes_cstr(code_dir);
  c.call.content_type = WK_FRAME_CONTENT_JSON;
  c.call.scratch_dir = wk_frame_bytes_cstr(dir);
  c.call.args = wk_frame_bytes_cstr("null");
  for (unsigned i = 0; i <= n_calls; i++) { /* call 0 is the warm-up */
    offs[i] = wk_frame_buf_size(&calls);
    c.call.call_id = i + 1u;
    c.call.call_index = i;
    if (wk_frame_encode(&calls, &c, WK_FRAME_MAX_DEFAULT) != WK_FRAME_OK) abort();
  }
  offs[n_calls + 1] = wk_frame_buf_size(&calls);
  const uint8_t *cb = wk_frame_buf_bytes(&calls);

  /* warm-up */
  if (send(fd, cb, offs[1], MSG_NOSIGNAL) != (ssize_t)offs[1]) {
    floor_fail(r, "send: %s", strerror(errno));
    goto out;
  }
  for (;;) {
    wk_frame_rc rc = wk_frame_decode(wk_frame_buf_bytes(&rbuf), wk_frame_buf_size(&rbuf),
                                     WK_FRAME_MAX_DEFAULT, &fr, &used);
    if (rc == WK_FRAME_OK) break;
    if (rc != WK_FRAME_NEED_MORE || !floor_recv(fd, &rbuf, NULL)) {
      floor_fail(r, "no RESULT for the warm-up call");
      goto out;
    }
  }
  wk_frame_buf_consume(&rbuf, used);
  if (fr.type != WK_FRAME_RESULT || fr.result.status != WK_FRAME_STATUS_OK) {
    floor_fail(r, "warm-up call failed: %.*s", (int)fr.result.error_message.len,
               (const char *)fr.result.error_message.ptr);
    goto out;
  }

  if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) != 0) abort();
  size_t wpos = offs[1]; /* next byte to write */
  unsigned done = 0;     /* RESULTs decoded */
  double cpu0 = floor_proc_cpu_s(pid);
  double t0 = floor_now_s();
  while (done < n_calls) {
    unsigned window_end = done + depth < n_calls ? done + depth : n_calls;
    size_t wlimit = offs[window_end + 1]; /* bytes allowed on the wire */
    struct pollfd pfd = {fd, (short)(POLLIN | (wpos < wlimit ? POLLOUT : 0)), 0};
    int pr = poll(&pfd, 1, FLOOR_IO_TIMEOUT_MS);
    if (pr < 0 && errno == EINTR) continue;
    if (pr != 1) {
      floor_fail(r, "timed out with %u of %u RESULTs", done, n_calls);
      goto out;
    }
    if ((pfd.revents & POLLOUT) && wpos < wlimit) {
      ssize_t w = send(fd, cb + wpos, wlimit - wpos, MSG_NOSIGNAL);
      if (w > 0) {
        wpos += (size_t)w;
        r->writes++;
      } else if (w < 0 && errno != EAGAIN && errno != EINTR) {
        floor_fail(r, "send: %s", strerror(errno));
        goto out;
      }
    }
    if (pfd.revents & (POLLIN | POLLHUP | POLLERR)) {
      uint8_t *dst = wk_frame_buf_reserve(&rbuf, 256 * 1024);
      ssize_t n = recv(fd, dst, 256 * 1024, 0);
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
        floor_fail(r, "the executor closed the socket after %u RESULTs", done);
        goto out;
      }
      if (n > 0) {
        wk_frame_buf_commit(&rbuf, (size_t)n);
        r->reads++;
      }
      for (;;) {
        wk_frame_rc rc = wk_frame_decode(wk_frame_buf_bytes(&rbuf), wk_frame_buf_size(&rbuf),
                                         WK_FRAME_MAX_DEFAULT, &fr, &used);
        if (rc == WK_FRAME_NEED_MORE) break;
        if (rc != WK_FRAME_OK || fr.type != WK_FRAME_RESULT) {
          floor_fail(r, "unexpected frame from the executor (%s)", wk_frame_rc_name(rc));
          goto out;
        }
        wk_frame_buf_consume(&rbuf, used);
        if (fr.result.status != WK_FRAME_STATUS_OK) r->errors++;
        done++;
      }
    }
  }
  r->seconds = floor_now_s() - t0;
  double cpu1 = floor_proc_cpu_s(pid);
  r->cpu_us_per_call = cpu0 >= 0 && cpu1 >= 0 ? (cpu1 - cpu0) * 1e6 / (double)done : 0;
  r->calls = done;
  r->calls_per_s = r->seconds > 0 ? (double)done / r->seconds : 0;
  r->us_per_call = r->calls_per_s > 0 ? 1e6 / r->calls_per_s : 0;
  ok = true;

out:
  if (fd >= 0) {
    static const uint8_t shutdown_frame[] = {1, 0, 0, 0, WK_FRAME_SHUTDOWN};
    (void)send(fd, shutdown_frame, sizeof shutdown_frame, MSG_NOSIGNAL);
  }
  if (pid > 0) {
    int st = 0;
    double deadline = floor_now_s() + 5.0;
    while (waitpid(pid, &st, WNOHANG) == 0) {
      if (floor_now_s() > deadline) {
        kill(pid, SIGKILL);
        (void)waitpid(pid, &st, 0);
        break;
      }
      struct timespec ts = {0, 5 * 1000 * 1000};
      nanosleep(&ts, NULL);
    }
  }
  if (fd >= 0) close(fd);
  (void)nftw(dir, floor_rm_entry, 16, FTW_DEPTH | FTW_PHYS);
  free(offs);
  wk_frame_buf_free(&calls);
  wk_frame_buf_free(&rbuf);
  return ok;
}

static void wk_floor_print(FILE *out, const wk_floor_result *r) {
  fprintf(out,
          "executor floor: %u no-op calls, pipeline depth %u: %.0f calls/s (%.1f us/call), "
          "%.2f s; executor CPU %.1f us/call; %u reads (%.1f RESULTs per read), %u writes\n",
          r->calls, r->depth, r->calls_per_s, r->us_per_call, r->seconds, r->cpu_us_per_call,
          r->reads, r->reads ? (double)r->calls / r->reads : 0.0, r->writes);
}

#ifndef WK_FLOOR_NO_MAIN
int main(int argc, char **argv) {
  signal(SIGPIPE, SIG_IGN);
  unsigned n = 20000;
  unsigned depth = 64;
  const char *python = getenv("WK_TEST_PYTHON");
  if (!python || !*python) python = "/usr/bin/python3";
  const char *script = WK_SOURCE_DIR "/python/worker_executor.py";
  int opt;
  while ((opt = getopt(argc, argv, "n:d:p:s:")) != -1) {
    switch (opt) {
      case 'n': n = (unsigned)strtoul(optarg, NULL, 10); break;
      case 'd': depth = (unsigned)strtoul(optarg, NULL, 10); break;
      case 'p': python = optarg; break;
      case 's': script = optarg; break;
      default:
        fprintf(stderr, "usage: %s [-n CALLS] [-d DEPTH] [-p PYTHON] [-s EXECUTOR_SCRIPT]\n",
                argv[0]);
        return 2;
    }
  }
  wk_floor_result r;
  if (!wk_floor_run(python, script, n, depth, &r)) {
    fprintf(stderr, "bench_executor_floor: %s\n", r.error);
    return 1;
  }
  wk_floor_print(stdout, &r);
  if (r.errors) {
    fprintf(stderr, "bench_executor_floor: %u calls failed\n", r.errors);
    return 1;
  }
  return 0;
}
#endif

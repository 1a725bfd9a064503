/* executor_fixture.h: what the executor integration tests share: a temporary
 * directory with a listening Unix socket, a real executor process connected to it,
 * framed I/O with timeouts, and function code written on the fly. Included by
 * test_executor_roundtrip.c and test_executor_features.c. */
#ifndef EXECUTOR_FIXTURE_H
#define EXECUTOR_FIXTURE_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <ftw.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
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

#define IO_TIMEOUT_MS 10000
#define MAX_FRAME WK_FRAME_MAX_DEFAULT
#define MAX_BLOCKS 1024 /* copies a test keeps (mini worker) */

typedef struct fixture {
  char dir[64];      /* mkdtemp, 0700 */
  char fn_root[128]; /* dir/fn: function code, fn_root/<name>/<epoch>/main.py */
  char scratch[128]; /* dir/scratch */
  int fd;            /* the executor's connection */
  pid_t pid;
  bool reaped;
  int exit_status; /* waitpid status once reaped */
  wk_frame_buf rbuf;
  wk_frame_buf wbuf;
  uint64_t next_call_id;
  void *blocks[MAX_BLOCKS]; /* heap copies freed at teardown */
  size_t n_blocks;
} fixture;

/* ---- small helpers ---------------------------------------------------------------- */

static inline int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static inline int remaining_ms(int64_t deadline) {
  int64_t left = deadline - now_ms();
  return left < 0 ? 0 : (int)left;
}

static inline void write_file(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  assert_int_equal(fputs(text, f) >= 0, 1);
  assert_int_equal(fclose(f), 0);
}

static inline void mkdir_p(const char *path) {
  char tmp[256];
  size_t n = strlen(path);
  assert_true(n < sizeof tmp);
  memcpy(tmp, path, n + 1);
  for (char *p = tmp + 1; *p; p++) {
    if (*p != '/') continue;
    *p = '\0';
    if (mkdir(tmp, 0700) != 0) assert_int_equal(errno, EEXIST);
    *p = '/';
  }
  if (mkdir(tmp, 0700) != 0) assert_int_equal(errno, EEXIST);
}

/* Writes fn_root/<name>/<epoch>/<file> with `text`. */
static inline void write_function(const fixture *fx, const char *name, unsigned epoch,
                                  const char *file, const char *text) {
  char dir[256];
  char path[320];
  snprintf(dir, sizeof dir, "%s/%s/%u", fx->fn_root, name, epoch);
  mkdir_p(dir);
  snprintf(path, sizeof path, "%s/%s", dir, file);
  write_file(path, text);
}

static inline int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
  (void)st;
  (void)ftw;
  return flag == FTW_DP ? rmdir(path) : unlink(path);
}

/* ---- the executor process ------------------------------------------------------------ */

static inline const char *python_path(void) {
  const char *p = getenv("WK_TEST_PYTHON");
  return (p && *p) ? p : "/usr/bin/python3";
}

/* Waits up to `timeout_ms` for the child to exit; true when it did. */
static inline bool wait_child(fixture *fx, int timeout_ms) {
  if (fx->reaped) return true;
  int64_t deadline = now_ms() + timeout_ms;
  for (;;) {
    int st = 0;
    pid_t r = waitpid(fx->pid, &st, WNOHANG);
    if (r == fx->pid) {
      fx->reaped = true;
      fx->exit_status = st;
      return true;
    }
    assert_int_equal(r, 0);
    if (now_ms() >= deadline) return false;
    struct timespec ts = {0, 5 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
}

static inline void write_all(fixture *fx, const uint8_t *p, size_t n) {
  int64_t deadline = now_ms() + IO_TIMEOUT_MS;
  while (n > 0) {
    struct pollfd pfd = {fx->fd, POLLOUT, 0};
    int pr = poll(&pfd, 1, remaining_ms(deadline));
    if (pr < 0 && errno == EINTR) continue;
    assert_true(pr == 1); /* else: timed out writing to the executor */
    ssize_t w = send(fx->fd, p, n, MSG_NOSIGNAL);
    if (w < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    assert_true(w > 0);
    p += w;
    n -= (size_t)w;
  }
}

/* Sends (and clears) what was encoded into wbuf, in one write where the kernel allows. */
static inline void flush(fixture *fx) {
  write_all(fx, wk_frame_buf_bytes(&fx->wbuf), wk_frame_buf_size(&fx->wbuf));
  wk_frame_buf_clear(&fx->wbuf);
}

static inline void queue_frame(fixture *fx, const wk_frame *f) {
  assert_int_equal(wk_frame_encode(&fx->wbuf, f, MAX_FRAME), WK_FRAME_OK);
}

/* Receives the next frame. Its views point into rbuf and stay valid until the next
 * recv_frame (which may reserve, moving the buffer). */
static inline void recv_frame(fixture *fx, wk_frame *f) {
  int64_t deadline = now_ms() + IO_TIMEOUT_MS;
  for (;;) {
    size_t size = 0;
    wk_frame_rc rc = wk_frame_decode(wk_frame_buf_bytes(&fx->rbuf), wk_frame_buf_size(&fx->rbuf),
                                     MAX_FRAME, f, &size);
    if (rc == WK_FRAME_OK) {
      wk_frame_buf_consume(&fx->rbuf, size);
      return;
    }
    if (rc != WK_FRAME_NEED_MORE) fail_msg("bad frame from the executor: %s", wk_frame_rc_name(rc));
    struct pollfd pfd = {fx->fd, POLLIN, 0};
    int pr = poll(&pfd, 1, remaining_ms(deadline));
    if (pr < 0 && errno == EINTR) continue;
    if (pr == 0) fail_msg("timed out after %d ms waiting for a frame", IO_TIMEOUT_MS);
    assert_int_equal(pr, 1);
    size_t want = size > wk_frame_buf_size(&fx->rbuf) ? size - wk_frame_buf_size(&fx->rbuf) : 0;
    if (want < 65536) want = 65536;
    uint8_t *dst = wk_frame_buf_reserve(&fx->rbuf, want);
    ssize_t r = recv(fx->fd, dst, want, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r == 0) fail_msg("executor closed the socket while a frame was expected");
    assert_true(r > 0);
    wk_frame_buf_commit(&fx->rbuf, (size_t)r);
  }
}

/* True when the executor closes its side within the timeout, with no bytes first. */
static inline bool expect_eof(fixture *fx, int timeout_ms) {
  int64_t deadline = now_ms() + timeout_ms;
  for (;;) {
    struct pollfd pfd = {fx->fd, POLLIN, 0};
    int pr = poll(&pfd, 1, remaining_ms(deadline));
    if (pr == 0) return false;
    if (pr < 0 && errno == EINTR) continue;
    uint8_t b[64];
    ssize_t r = recv(fx->fd, b, sizeof b, 0);
    if (r < 0 && errno == EINTR) continue;
    return r <= 0;
  }
}

/* ---- starting and stopping an executor -------------------------------------------- */

/* Starts an executor with `extra` flags (NULL-terminated, may be NULL). */
static inline int setup_with(void **state, const char *const *extra) {
  fixture *fx = calloc(1, sizeof *fx);
  assert_non_null(fx);
  fx->fd = -1;
  fx->next_call_id = 1;
  wk_frame_buf_init(&fx->rbuf, NULL);
  wk_frame_buf_init(&fx->wbuf, NULL);

  snprintf(fx->dir, sizeof fx->dir, "/tmp/wk-exec-XXXXXX");
  assert_non_null(mkdtemp(fx->dir)); /* mode 0700 */
  struct stat st;
  assert_int_equal(stat(fx->dir, &st), 0);
  assert_int_equal(st.st_mode & 0777, 0700);
  snprintf(fx->fn_root, sizeof fx->fn_root, "%s/fn", fx->dir);
  snprintf(fx->scratch, sizeof fx->scratch, "%s/scratch", fx->dir);
  mkdir_p(fx->fn_root);
  mkdir_p(fx->scratch);

  /* the executor's channel, as the pool makes it: a socket pair, its end at fd 3 */
  int sv[2];
  assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);

  char script[256];
  snprintf(script, sizeof script, "%s/python/worker_executor.py", WK_SOURCE_DIR);
  char *argv[32] = {(char *)(uintptr_t)python_path(), script, (char *)(uintptr_t) "--channel-fd",
                    (char *)(uintptr_t) "3", NULL};
  size_t argc = 4;
  for (size_t i = 0; extra && extra[i]; i++) {
    assert_true(argc + 1 < sizeof argv / sizeof argv[0]);
    argv[argc++] = (char *)(uintptr_t)extra[i];
  }
  argv[argc] = NULL;
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, sv[1], 3);
  int err = posix_spawn(&fx->pid, argv[0], &fa, NULL, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  close(sv[1]);
  if (err != 0) fail_msg("posix_spawn %s: %s", argv[0], strerror(err));
  fx->fd = sv[0];

  wk_frame f;
  recv_frame(fx, &f);
  assert_int_equal(f.type, WK_FRAME_HELLO);
  assert_int_equal(f.hello.version, WK_FRAME_VERSION);
  assert_int_equal(f.hello.pid, (uint32_t)fx->pid);
  *state = fx;
  return 0;
}

static inline int teardown(void **state) {
  fixture *fx = *state;
  if (!fx) return 0;
  if (!fx->reaped) {
    if (fx->fd >= 0) {
      static const uint8_t shutdown_frame[] = {1, 0, 0, 0, WK_FRAME_SHUTDOWN};
      (void)send(fx->fd, shutdown_frame, sizeof shutdown_frame, MSG_NOSIGNAL | MSG_DONTWAIT);
    }
    if (!wait_child(fx, 3000)) {
      kill(fx->pid, SIGKILL);
      (void)wait_child(fx, 3000);
    }
  }
  if (fx->fd >= 0) close(fx->fd);
  (void)nftw(fx->dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
  wk_frame_buf_free(&fx->rbuf);
  wk_frame_buf_free(&fx->wbuf);
  for (size_t i = 0; i < fx->n_blocks; i++) free(fx->blocks[i]);
  free(fx);
  *state = NULL;
  return 0;
}

static inline void recv_result(fixture *fx, uint64_t call_id, wk_frame *f) {
  recv_frame(fx, f);
  assert_int_equal(f->type, WK_FRAME_RESULT);
  assert_true(f->result.call_id == call_id);
}

static inline bool bytes_contain(wk_frame_bytes b, const char *needle) {
  size_t n = strlen(needle);
  if (n > b.len) return false;
  for (size_t i = 0; i + n <= b.len; i++) {
    if (memcmp(b.ptr + i, needle, n) == 0) return true;
  }
  return false;
}

static inline void assert_bytes_str(wk_frame_bytes b, const char *s) {
  if (!wk_frame_bytes_eq_cstr(b, s)) {
    fail_msg("got \"%.*s\", want \"%s\"", (int)b.len, (const char *)b.ptr, s);
  }
}

/* ---- building calls ---------------------------------------------------------------- */

typedef struct call_spec {
  const char *function;
  unsigned epoch;
  const char *entrypoint; /* NULL: empty (the executor's default main:handler) */
  wk_frame_content content_type;
  const uint8_t *args;
  size_t args_len;
  uint32_t call_index;
  uint32_t deadline_ms;
} call_spec;

/* Encodes a CALL into wbuf (not sent yet); returns its call_id. */
static inline uint64_t queue_call(fixture *fx, const call_spec *cs) {
  char code_dir[256];
  snprintf(code_dir, sizeof code_dir, "%s/%s/%u", fx->fn_root, cs->function, cs->epoch);
  wk_frame f;
  memset(&f, 0, sizeof f);
  f.type = WK_FRAME_CALL;
  f.call.call_id = fx->next_call_id++;
  f.call.task_id = wk_frame_bytes_cstr("task-it");
  f.call.function = wk_frame_bytes_cstr(cs->function);
  f.call.epoch = cs->epoch;
  f.call.code_dir = wk_frame_bytes_cstr(code_dir);
  f.call.entrypoint = wk_frame_bytes_cstr(cs->entrypoint);
  f.call.content_type = cs->content_type;
  f.call.call_index = cs->call_index;
  f.call.deadline_ms = cs->deadline_ms;
  f.call.scratch_dir = wk_frame_bytes_cstr(fx->scratch);
  f.call.traceparent =
      wk_frame_bytes_cstr("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
  f.call.args.ptr = cs->args;
  f.call.args.len = (uint32_t)cs->args_len;
  queue_frame(fx, &f);
  return f.call.call_id;
}

static inline uint64_t queue_json_call(fixture *fx, const char *function, const char *json,
                                       uint32_t index) {
  call_spec cs = {function,     1,     NULL, WK_FRAME_CONTENT_JSON, (const uint8_t *)json,
                  strlen(json), index, 30000};
  return queue_call(fx, &cs);
}

static inline void queue_u64_frame(fixture *fx, wk_frame_type type, uint64_t v) {
  wk_frame f;
  memset(&f, 0, sizeof f);
  f.type = type;
  if (type == WK_FRAME_CANCEL) {
    f.cancel.call_id = v;
  } else {
    f.ping.nonce = v;
  }
  queue_frame(fx, &f);
}

#endif

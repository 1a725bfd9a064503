/* Unit test of an executor's output pipes (src/adapters/wk_executor_output.c) over a
 * real libuv loop and socket pairs: the object outlives end-of-file on both pipes
 * until wk_exec_output_finish, because the pool still reads it when the exit is seen
 * (an executor's pipes often end before its SIGCHLD is handled). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <uv.h>

#include "adapters/wk_executor_output.h"

static int closed_calls;

static void on_closed(void *arg) {
  (void)arg;
  closed_calls++;
}

/* Both pipes end (the executor and every descendant closed them) before the pool has
 * seen the exit: the output is not freed, its tail is still there, and it closes once,
 * when finished. The old code freed it at the second end-of-file (the pool then read
 * freed memory and closed a closing handle: an abort at the worker's stop). */
static void test_output_lives_until_finish(void **state) {
  (void)state;
  uv_loop_t loop;
  assert_int_equal(uv_loop_init(&loop), 0);
  closed_calls = 0;
  wk_exec_output *o =
      wk_exec_output_new(&loop, NULL, NULL, (wk_exec_output_hooks){.closed = on_closed});
  int writers[2];
  for (int fd = 1; fd <= 2; fd++) {
    int sv[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    assert_int_equal(uv_pipe_open((uv_pipe_t *)wk_exec_output_pipe(o, fd), sv[0]), 0);
    writers[fd - 1] = sv[1];
  }
  static const char last[] = "Traceback: the last words\n";
  assert_int_equal(write(writers[1], last, sizeof last - 1), (ssize_t)(sizeof last - 1));
  close(writers[0]);
  close(writers[1]);
  wk_exec_output_start(o, 4242);
  for (int i = 0; i < 50; i++) uv_run(&loop, UV_RUN_NOWAIT); /* both ends of file are read */
  assert_int_equal(closed_calls, 0);
  uint32_t len = 0;
  const char *tail = wk_exec_output_tail(o, &len);
  assert_true(len >= sizeof last - 1);
  assert_memory_equal(tail + len - (sizeof last - 1), last, sizeof last - 1);
  wk_exec_output_finish(o);
  uv_run(&loop, UV_RUN_DEFAULT);
  assert_int_equal(closed_calls, 1);
  wk_exec_output_free(o); /* the owner's, after hooks.closed */
  assert_int_equal(uv_loop_close(&loop), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_output_lives_until_finish),
  };
  return cmocka_run_group_tests_name("executor_output", tests, NULL, NULL);
}

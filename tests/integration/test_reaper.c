/* test_reaper.c: the worker's subreaper (src/adapters/wk_reaper.c) with real processes.
 *
 * This test process becomes a child subreaper, then makes what an executor leaves
 * behind: an orphan (a grandchild whose parent exited, handed to this process), a child
 * forked from another thread (its parent is that thread), and a registered child that
 * must survive. A sweep must kill and reap the first two and leave the registered one
 * and the one from before wk_reaper_start alone; both ways of listing children are run:
 * the threads' /proc/self/task/<tid>/children files and the walk of /proc. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "adapters/wk_reaper.h"

/* What every process the test makes runs: waits to be killed, or ends by itself after
 * half a minute (a failed assertion skips the test's own cleanup). */
static void sleep_until_killed(void) {
  alarm(30);
  for (;;) pause();
}

/* A child that waits to be killed. */
static pid_t fork_sleeper(void) {
  pid_t pid = fork();
  if (pid == 0) sleep_until_killed();
  assert_true(pid > 0);
  return pid;
}

/* Makes an orphan: a registered child forks a sleeper, tells its pid and exits; the
 * sleeper is then this process's child (the subreaper). */
static pid_t make_orphan(void) {
  int fds[2];
  assert_int_equal(pipe(fds), 0);
  wk_reaper_fork_begin();
  pid_t parent = fork();
  if (parent == 0) {
    pid_t g = fork();
    if (g == 0) sleep_until_killed();
    ssize_t w = write(fds[1], &g, sizeof g);
    _exit(w == (ssize_t)sizeof g ? 0 : 1);
  }
  wk_reaper_fork_end(parent);
  assert_true(parent > 0);
  pid_t orphan = 0;
  assert_int_equal(read(fds[0], &orphan, sizeof orphan), (ssize_t)sizeof orphan);
  close(fds[0]);
  close(fds[1]);
  int st;
  assert_int_equal(waitpid(parent, &st, 0), parent);
  wk_reaper_disown(parent);
  assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  return orphan;
}

/* Whether `pid` is still this process's child (alive, or dead and not reaped). */
static bool is_child(pid_t pid) {
  siginfo_t si = {0};
  return waitid(P_PID, (id_t)pid, &si, WEXITED | WNOHANG | WNOWAIT) == 0;
}

typedef struct forker {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  pid_t child;
  bool done;
} forker;

/* A thread that forks a child (whose parent is then this thread) and stays alive until
 * told: the sweep must find children of threads other than the main one. */
static void *forking_thread(void *arg) {
  forker *f = arg;
  pthread_mutex_lock(&f->mu);
  f->child = fork_sleeper();
  pthread_cond_broadcast(&f->cv);
  while (!f->done) pthread_cond_wait(&f->cv, &f->mu);
  pthread_mutex_unlock(&f->mu);
  return NULL;
}

static void sweep_ends_orphans(bool walk_proc, pid_t before) {
  wk_reaper__walk_proc(walk_proc);
  forker f = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, false};
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, forking_thread, &f), 0);
  pthread_mutex_lock(&f.mu);
  while (f.child == 0) pthread_cond_wait(&f.cv, &f.mu);
  pthread_mutex_unlock(&f.mu);
  pid_t orphan = make_orphan();
  wk_reaper_fork_begin();
  pid_t kept = fork_sleeper();
  wk_reaper_fork_end(kept);
  assert_true(is_child(orphan) && is_child(f.child) && is_child(kept));

  unsigned n = wk_reaper_sweep(true);

  assert_int_equal(n, 2);         /* processes, however many looks it took them to die */
  assert_false(is_child(orphan)); /* killed and reaped */
  assert_false(is_child(f.child));
  assert_true(is_child(kept) && is_child(before)); /* registered; from before the start */
  assert_int_equal(kill(kept, 0), 0);
  assert_int_equal(wk_reaper_sweep(true), 0); /* nothing left to end */

  pthread_mutex_lock(&f.mu);
  f.done = true;
  pthread_cond_broadcast(&f.cv);
  pthread_mutex_unlock(&f.mu);
  pthread_join(t, NULL);
  kill(kept, SIGKILL);
  assert_int_equal(waitpid(kept, NULL, 0), kept);
  wk_reaper_disown(kept);
}

static void test_sweep_by_children_files_and_by_proc_walk(void **state) {
  (void)state;
  pid_t before = fork_sleeper(); /* a child the process had before becoming subreaper */
  char err[256];
  assert_int_equal(wk_reaper_start(err, sizeof err), 0);
  sweep_ends_orphans(false, before);
  sweep_ends_orphans(true, before);
  kill(before, SIGKILL);
  assert_int_equal(waitpid(before, NULL, 0), before);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_sweep_by_children_files_and_by_proc_walk),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

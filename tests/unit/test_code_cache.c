/* test_code_cache.c: unit tests of the CURRENT cache (src/app/wk_code_cache.c) over a
 * real code store in a temporary directory: a lookup after a deploy, a rollback or a
 * removal sees it at once, with no event loop running (a resolve drains inotify; the
 * memory-only lookup sees what the last wk_code_cache_sync drained, or drains first
 * after wk_code_cache_sync_lazily). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <poll.h>

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "adapters/wk_code_store.h"
#include "app/wk_code_cache.h"

typedef struct fx {
  char dir[256], root[300], src[300];
  wk_code_cache *cache;
} fx;

static int rm_entry(const char *p, const struct stat *st, int flag, struct FTW *ftw) {
  (void)st, (void)flag, (void)ftw;
  (void)chmod(p, 0700);
  return remove(p);
}

static void write_src(fx *f, const char *text) {
  char p[400];
  snprintf(p, sizeof p, "%s/main.py", f->src);
  (void)chmod(p, 0644);
  FILE *o = fopen(p, "w");
  assert_non_null(o);
  fputs(text, o);
  fclose(o);
}

static int setup(void **state) {
  fx *f = calloc(1, sizeof *f);
  snprintf(f->dir, sizeof f->dir, "/tmp/wk-code-cache-XXXXXX");
  assert_non_null(mkdtemp(f->dir));
  snprintf(f->root, sizeof f->root, "%s/root", f->dir);
  snprintf(f->src, sizeof f->src, "%s/src", f->dir);
  assert_int_equal(mkdir(f->root, 0755), 0);
  assert_int_equal(mkdir(f->src, 0755), 0);
  f->cache = wk_code_cache_create(f->root);
  *state = f;
  return 0;
}

static int teardown(void **state) {
  fx *f = *state;
  wk_code_cache_destroy(f->cache);
  nftw(f->dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
  free(f);
  return 0;
}

static uint64_t deploy(fx *f, const char *fn, const char *text) {
  write_src(f, text);
  uint64_t epoch = 0;
  char err[512];
  assert_int_equal(wk_code_store_deploy(f->root, fn, f->src, &epoch, err, sizeof err), 0);
  return epoch;
}

/* The epoch the cache resolves for `fn` (CURRENT), checking the path too. */
static uint64_t current(fx *f, const char *fn) {
  uint64_t epoch = 0;
  char path[1024], err[512];
  assert_int_equal(
      wk_code_cache_resolve(f->cache, fn, 0, &epoch, path, sizeof path, err, sizeof err), 0);
  char want[1024];
  snprintf(want, sizeof want, "%s/%s/%llu", f->root, fn, (unsigned long long)epoch);
  assert_string_equal(path, want);
  return epoch;
}

static void test_hits_until_a_deploy_then_the_new_epoch_at_once(void **state) {
  fx *f = *state;
  assert_true(wk_code_cache_get_stats(f->cache).watching);
  assert_int_equal(deploy(f, "fn", "v = 1\n"), 1);
  assert_int_equal(current(f, "fn"), 1);
  for (int i = 0; i < 5; i++) assert_int_equal(current(f, "fn"), 1);
  wk_code_cache_stats s = wk_code_cache_get_stats(f->cache);
  assert_int_equal(s.misses, 1);
  assert_int_equal(s.hits, 5);
  /* a deploy right before the lookup: the new epoch, never the cached one */
  for (uint64_t want = 2; want <= 6; want++) {
    char text[32];
    snprintf(text, sizeof text, "v = %llu\n", (unsigned long long)want);
    assert_int_equal(deploy(f, "fn", text), want);
    assert_int_equal(current(f, "fn"), want);
  }
  assert_true(wk_code_cache_get_stats(f->cache).invalidations >= 5);
}

static void test_rollback_and_another_function(void **state) {
  fx *f = *state;
  deploy(f, "a", "v = 1\n");
  deploy(f, "a", "v = 2\n");
  deploy(f, "b", "w = 1\n");
  assert_int_equal(current(f, "a"), 2);
  assert_int_equal(current(f, "b"), 1);
  uint64_t now = 0;
  char err[512];
  assert_int_equal(wk_code_store_set_current(f->root, "a", 1, &now, err, sizeof err), 0);
  assert_int_equal(current(f, "a"), 1);
  assert_int_equal(current(f, "b"), 1);
  /* CURRENT rewritten in place by hand */
  char p[400];
  snprintf(p, sizeof p, "%s/a/CURRENT", f->root);
  FILE *o = fopen(p, "w");
  assert_non_null(o);
  fputs("2\n", o);
  fclose(o);
  assert_int_equal(current(f, "a"), 2);
  /* a requested epoch is not CURRENT: read from the store */
  uint64_t epoch = 0;
  char path[1024];
  assert_int_equal(
      wk_code_cache_resolve(f->cache, "a", 1, &epoch, path, sizeof path, err, sizeof err), 0);
  assert_int_equal(epoch, 1);
}

static void test_removed_function_is_an_error_then_redeployed(void **state) {
  fx *f = *state;
  deploy(f, "gone", "v = 1\n");
  assert_int_equal(current(f, "gone"), 1);
  char p[400];
  snprintf(p, sizeof p, "%s/gone", f->root);
  nftw(p, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
  uint64_t epoch = 0;
  char path[1024], err[512];
  assert_int_equal(
      wk_code_cache_resolve(f->cache, "gone", 0, &epoch, path, sizeof path, err, sizeof err), -1);
  assert_non_null(strstr(err, "not deployed"));
  assert_int_equal(deploy(f, "gone", "v = 2\n"), 1); /* a fresh function starts at 1 again */
  assert_int_equal(current(f, "gone"), 1);
  assert_int_equal(deploy(f, "gone", "v = 3\n"), 2);
  assert_int_equal(current(f, "gone"), 2);
}

/* A task's end asks for a prune only when one may remove something. */
static void test_prune_due_only_after_a_change_or_an_old_epoch(void **state) {
  fx *f = *state;
  deploy(f, "p", "v = 1\n");
  assert_int_equal(current(f, "p"), 1);
  assert_true(wk_code_cache_prune_due(f->cache, "p", 1)); /* never pruned by this process */
  assert_false(wk_code_cache_prune_due(f->cache, "p", 1));
  assert_false(wk_code_cache_prune_due(f->cache, "p", 1));
  deploy(f, "p", "v = 2\n");
  /* the due check makes no system call: before a drain it knows nothing of the
   * deploy; the orchestrator drains as soon as inotify's descriptor is readable */
  assert_false(wk_code_cache_prune_due(f->cache, "p", 1));
  struct pollfd pfd = {.fd = wk_code_cache_fd(f->cache), .events = POLLIN};
  assert_int_equal(poll(&pfd, 1, 10000), 1); /* readable: what the loop waits for */
  wk_code_cache_sync(f->cache);
  assert_true(wk_code_cache_prune_due(f->cache, "p", 1));
  assert_int_equal(current(f, "p"), 2);
  assert_false(wk_code_cache_prune_due(f->cache, "p", 2));
  assert_true(wk_code_cache_prune_due(f->cache, "p", 1)); /* a task that ran an old epoch */
  assert_true(wk_code_cache_prune_due(f->cache, "unknown", 1));
}

static void test_not_deployed_and_bad_names(void **state) {
  fx *f = *state;
  uint64_t epoch = 0;
  char path[1024], err[512];
  assert_int_equal(
      wk_code_cache_resolve(f->cache, "nope", 0, &epoch, path, sizeof path, err, sizeof err), -1);
  assert_non_null(strstr(err, "not deployed"));
  assert_int_equal(
      wk_code_cache_resolve(f->cache, "../x", 0, &epoch, path, sizeof path, err, sizeof err), -1);
  deploy(f, "nope", "v = 1\n");
  assert_int_equal(current(f, "nope"), 1);
}

/* The memory-only lookup (activation on the loop): false until a resolve read the disk,
 * then the cached epoch, and false again after a deploy once a sync drained it (the
 * caller then resolves from the disk, off the loop); never for a pinned epoch. The
 * lookup itself makes no system call: before the sync it still answers the old epoch,
 * which is why the orchestrator syncs before each batch of requests. */
static void test_lookup_from_memory_only(void **state) {
  fx *f = *state;
  uint64_t epoch = 0;
  char path[1024];
  deploy(f, "fn", "v = 1\n");
  assert_false(wk_code_cache_lookup(f->cache, "fn", 0, &epoch, path, sizeof path));
  assert_int_equal(wk_code_cache_get_stats(f->cache).misses, 0); /* nothing read */
  assert_int_equal(current(f, "fn"), 1);
  assert_true(wk_code_cache_lookup(f->cache, "fn", 0, &epoch, path, sizeof path));
  assert_int_equal(epoch, 1);
  char want[1024];
  snprintf(want, sizeof want, "%s/fn/1", f->root);
  assert_string_equal(path, want);
  assert_false(wk_code_cache_lookup(f->cache, "fn", 0, &epoch, path, 4)); /* too long */
  assert_false(wk_code_cache_lookup(f->cache, "fn", 1, &epoch, path, sizeof path));
  deploy(f, "fn", "v = 2\n");
  assert_true(wk_code_cache_lookup(f->cache, "fn", 0, &epoch, path, sizeof path));
  assert_int_equal(epoch, 1); /* not drained yet */
  wk_code_cache_sync(f->cache);
  assert_false(wk_code_cache_lookup(f->cache, "fn", 0, &epoch, path, sizeof path));
  assert_int_equal(current(f, "fn"), 2);
  assert_true(wk_code_cache_lookup(f->cache, "fn", 0, &epoch, path, sizeof path));
  assert_int_equal(epoch, 2);
  assert_false(wk_code_cache_lookup(f->cache, "other", 0, &epoch, path, sizeof path));
}

/* The orchestrator marks each batch of requests with wk_code_cache_sync_lazily: the
 * batch's first lookup drains inotify before it answers, so a deploy that finished
 * before the requests came is seen, while a batch that looks nothing up reads nothing. */
static void test_lazy_sync_drains_at_the_next_lookup(void **state) {
  fx *f = *state;
  uint64_t epoch = 0;
  char path[1024];
  deploy(f, "fn", "v = 1\n");
  assert_int_equal(current(f, "fn"), 1);
  deploy(f, "fn", "v = 2\n");
  assert_true(wk_code_cache_lookup(f->cache, "fn", 0, &epoch, path, sizeof path));
  assert_int_equal(epoch, 1); /* not drained, not due: the old answer */
  wk_code_cache_sync_lazily(f->cache);
  /* due: the lookup drains first, sees the deploy, and leaves it to the disk */
  assert_false(wk_code_cache_lookup(f->cache, "fn", 0, &epoch, path, sizeof path));
  assert_int_equal(current(f, "fn"), 2);
  assert_true(wk_code_cache_lookup(f->cache, "fn", 0, &epoch, path, sizeof path));
  assert_int_equal(epoch, 2);
  /* the drain is done once: a deploy after it is not seen until the next mark */
  deploy(f, "fn", "v = 3\n");
  assert_true(wk_code_cache_lookup(f->cache, "fn", 0, &epoch, path, sizeof path));
  assert_int_equal(epoch, 2);
  wk_code_cache_sync_lazily(f->cache);
  assert_false(wk_code_cache_lookup(f->cache, "fn", 0, &epoch, path, sizeof path));
  assert_int_equal(current(f, "fn"), 3);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_hits_until_a_deploy_then_the_new_epoch_at_once, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_rollback_and_another_function, setup, teardown),
      cmocka_unit_test_setup_teardown(test_removed_function_is_an_error_then_redeployed, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_prune_due_only_after_a_change_or_an_old_epoch, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_not_deployed_and_bad_names, setup, teardown),
      cmocka_unit_test_setup_teardown(test_lookup_from_memory_only, setup, teardown),
      cmocka_unit_test_setup_teardown(test_lazy_sync_drains_at_the_next_lookup, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

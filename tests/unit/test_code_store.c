/* test_code_store.c: unit tests of the function code store (src/adapters/wk_code_store.c).
 *
 * Every test gets a fresh temporary directory holding `root/` (the code root) and
 * `src/` (a source tree to deploy), removed afterwards. */
#define _GNU_SOURCE /* mkdtemp, nftw, symlink */

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "adapters/wk_code_store.h"

typedef struct fx {
  char dir[256];
  char root[300];
  char src[300];
} fx;

/* ---- file helpers ----------------------------------------------------------------- */

static void mkdirs(const char *path) {
  char p[1024];
  snprintf(p, sizeof p, "%s", path);
  for (char *s = p + 1; *s; s++) {
    if (*s == '/') {
      *s = '\0';
      (void)mkdir(p, 0755);
      *s = '/';
    }
  }
  (void)mkdir(p, 0755);
}

static void put(const char *dir, const char *rel, const char *content) {
  char p[1024];
  snprintf(p, sizeof p, "%s/%s", dir, rel);
  char parent[1024];
  snprintf(parent, sizeof parent, "%s", p);
  char *slash = strrchr(parent, '/');
  assert_non_null(slash);
  *slash = '\0';
  mkdirs(parent);
  (void)chmod(p, 0644);
  FILE *f = fopen(p, "w");
  assert_non_null(f);
  assert_int_equal(fputs(content, f) >= 0, 1);
  assert_int_equal(fclose(f), 0);
}

/* Contents of dir/rel into buf ("" when missing); returns false when missing. */
static bool get(const char *dir, const char *rel, char *buf, size_t len) {
  char p[1024];
  snprintf(p, sizeof p, "%s/%s", dir, rel);
  buf[0] = '\0';
  FILE *f = fopen(p, "r");
  if (!f) return false;
  size_t n = fread(buf, 1, len - 1, f);
  buf[n] = '\0';
  fclose(f);
  return true;
}

static bool exists(const char *dir, const char *rel) {
  char p[1024];
  snprintf(p, sizeof p, "%s/%s", dir, rel);
  struct stat st;
  return lstat(p, &st) == 0;
}

/* Number of entries in dir whose name starts with prefix. */
static int count_prefix(const char *dir, const char *prefix) {
  char cmd[1200];
  snprintf(cmd, sizeof cmd, "ls -A '%s' 2>/dev/null | grep -c '^%s' || true", dir, prefix);
  FILE *p = popen(cmd, "r");
  assert_non_null(p);
  int n = 0;
  if (fscanf(p, "%d", &n) != 1) n = 0;
  pclose(p);
  return n;
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
  (void)st;
  (void)flag;
  (void)ftw;
  (void)remove(path);
  return 0;
}

/* ---- fixture --------------------------------------------------------------------- */

static int setup(void **state) {
  fx *f = calloc(1, sizeof *f);
  if (!f) return -1;
  const char *tmp = getenv("TMPDIR");
  snprintf(f->dir, sizeof f->dir, "%s/wk_code_store_XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(f->dir)) return -1;
  snprintf(f->root, sizeof f->root, "%s/root", f->dir);
  snprintf(f->src, sizeof f->src, "%s/src", f->dir);
  mkdirs(f->src);
  *state = f;
  return 0;
}

static int teardown(void **state) {
  fx *f = *state;
  (void)nftw(f->dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
  free(f);
  return 0;
}

static uint64_t deploy_ok(const fx *f, const char *fn) {
  uint64_t epoch = 0;
  char err[512] = "";
  int rc = wk_code_store_deploy(f->root, fn, f->src, &epoch, err, sizeof err);
  if (rc != 0) fail_msg("deploy failed: %s", err);
  return epoch;
}

/* ---- tests ---------------------------------------------------------------------- */

static void test_valid_function_names(void **state) {
  (void)state;
  assert_true(wk_code_store_valid_function_name("a"));
  assert_true(wk_code_store_valid_function_name("echo"));
  assert_true(wk_code_store_valid_function_name("My_fn-2.v3"));
  assert_true(wk_code_store_valid_function_name("a..b"));
  char name[WK_CODE_STORE_NAME_MAX + 2];
  memset(name, 'x', WK_CODE_STORE_NAME_MAX);
  name[WK_CODE_STORE_NAME_MAX] = '\0';
  assert_true(wk_code_store_valid_function_name(name));
  name[WK_CODE_STORE_NAME_MAX] = 'x';
  name[WK_CODE_STORE_NAME_MAX + 1] = '\0';
  assert_false(wk_code_store_valid_function_name(name)); /* 129 bytes */

  assert_false(wk_code_store_valid_function_name(NULL));
  assert_false(wk_code_store_valid_function_name(""));
  assert_false(wk_code_store_valid_function_name("."));
  assert_false(wk_code_store_valid_function_name(".."));
  assert_false(wk_code_store_valid_function_name(".hidden"));
  assert_false(wk_code_store_valid_function_name("a/b"));
  assert_false(wk_code_store_valid_function_name("../etc"));
  assert_false(wk_code_store_valid_function_name("a b"));
  assert_false(wk_code_store_valid_function_name("caf\xc3\xa9"));
  assert_false(wk_code_store_valid_function_name("tab\there"));
}

static void test_invalid_name_is_refused_everywhere(void **state) {
  fx *f = *state;
  char err[512], path[512];
  uint64_t epoch = 0;
  put(f->src, "main.py", "x = 1\n");
  assert_int_equal(wk_code_store_deploy(f->root, "../evil", f->src, &epoch, err, sizeof err), -1);
  assert_non_null(strstr(err, "invalid function name"));
  assert_false(exists(f->dir, "root"));
  assert_int_equal(
      wk_code_store_resolve(f->root, ".x", 0, &epoch, path, sizeof path, err, sizeof err), -1);
  assert_non_null(strstr(err, "invalid function name '.x'"));
  size_t n;
  assert_int_equal(wk_code_store_list(f->root, "a/b", NULL, 0, &n, NULL, err, sizeof err), -1);
}

static void test_deploy_twice_keeps_old_epoch(void **state) {
  fx *f = *state;
  char buf[256], path[512], err[512];
  uint64_t epoch = 0;

  put(f->src, "main.py", "def handler(args, ctx):\n    return 1\n");
  put(f->src, "lib/util.py", "VERSION = 1\n");
  assert_int_equal(deploy_ok(f, "echo"), 1);
  assert_true(get(f->root, "echo/CURRENT", buf, sizeof buf));
  assert_string_equal(buf, "1\n");

  put(f->src, "main.py", "def handler(args, ctx):\n    return 2\n");
  put(f->src, "lib/util.py", "VERSION = 2\n");
  assert_int_equal(deploy_ok(f, "echo"), 2);
  assert_true(get(f->root, "echo/CURRENT", buf, sizeof buf));
  assert_string_equal(buf, "2\n");

  /* CURRENT resolves to the new epoch */
  assert_int_equal(
      wk_code_store_resolve(f->root, "echo", 0, &epoch, path, sizeof path, err, sizeof err), 0);
  assert_int_equal(epoch, 2);
  char want[512];
  snprintf(want, sizeof want, "%s/echo/2", f->root);
  assert_string_equal(path, want);
  assert_true(get(path, "lib/util.py", buf, sizeof buf));
  assert_string_equal(buf, "VERSION = 2\n");

  /* a task pinned to epoch 1 still sees epoch 1's code, untouched */
  assert_int_equal(
      wk_code_store_resolve(f->root, "echo", 1, &epoch, path, sizeof path, err, sizeof err), 0);
  assert_int_equal(epoch, 1);
  snprintf(want, sizeof want, "%s/echo/1", f->root);
  assert_string_equal(path, want);
  assert_true(get(path, "main.py", buf, sizeof buf));
  assert_string_equal(buf, "def handler(args, ctx):\n    return 1\n");
  assert_true(get(path, "lib/util.py", buf, sizeof buf));
  assert_string_equal(buf, "VERSION = 1\n");

  /* published files are read-only; nothing is left staged */
  struct stat st;
  char p[600];
  snprintf(p, sizeof p, "%s/main.py", path);
  assert_int_equal(stat(p, &st), 0);
  assert_int_equal(st.st_mode & 0222, 0);
  snprintf(p, sizeof p, "%s/echo", f->root);
  assert_int_equal(count_prefix(p, ".staging"), 0);
  assert_int_equal(count_prefix(p, "CURRENT.tmp"), 0);

  uint64_t list[8];
  size_t n = 0;
  uint64_t cur = 0;
  assert_int_equal(wk_code_store_list(f->root, "echo", list, 8, &n, &cur, err, sizeof err), 0);
  assert_int_equal(n, 2);
  assert_int_equal(list[0], 1);
  assert_int_equal(list[1], 2);
  assert_int_equal(cur, 2);
}

static void test_missing_function(void **state) {
  fx *f = *state;
  char path[512], err[512];
  uint64_t epoch = 0;
  mkdirs(f->root);
  assert_int_equal(
      wk_code_store_resolve(f->root, "nope", 0, &epoch, path, sizeof path, err, sizeof err), -1);
  assert_non_null(strstr(err, "function 'nope' is not deployed"));
  assert_non_null(strstr(err, "workerctl deploy"));
  assert_int_equal(
      wk_code_store_resolve(f->root, "nope", 3, &epoch, path, sizeof path, err, sizeof err), -1);
  assert_non_null(strstr(err, "not deployed"));

  size_t n = 9;
  uint64_t cur = 9;
  assert_int_equal(wk_code_store_list(f->root, "nope", NULL, 0, &n, &cur, err, sizeof err), 0);
  assert_int_equal(n, 0);
  assert_int_equal(cur, 0);

  /* a function directory without CURRENT */
  mkdirs(f->root);
  char d[600];
  snprintf(d, sizeof d, "%s/half/1", f->root);
  mkdirs(d);
  assert_int_equal(
      wk_code_store_resolve(f->root, "half", 0, &epoch, path, sizeof path, err, sizeof err), -1);
  assert_non_null(strstr(err, "function 'half' has no CURRENT epoch"));
  assert_non_null(strstr(err, "deploy it with workerctl deploy"));
  /* but its epoch can still be pinned */
  assert_int_equal(
      wk_code_store_resolve(f->root, "half", 1, &epoch, path, sizeof path, err, sizeof err), 0);
  assert_int_equal(epoch, 1);
}

static void test_missing_epoch(void **state) {
  fx *f = *state;
  char path[512] = "unchanged", err[512];
  uint64_t epoch = 42;
  put(f->src, "main.py", "x = 1\n");
  deploy_ok(f, "fn");
  put(f->src, "main.py", "x = 2\n"); /* new content: a new epoch */
  deploy_ok(f, "fn");
  assert_int_equal(
      wk_code_store_resolve(f->root, "fn", 7, &epoch, path, sizeof path, err, sizeof err), -1);
  assert_non_null(strstr(err, "epoch 7 of 'fn' does not exist"));
  assert_non_null(strstr(err, "highest published epoch is 2"));
  assert_int_equal(epoch, 42); /* outputs untouched on failure */
}

static void test_corrupted_current(void **state) {
  fx *f = *state;
  char path[512], err[512], dir[600];
  uint64_t epoch = 0;
  put(f->src, "main.py", "x = 1\n");
  deploy_ok(f, "fn");
  snprintf(dir, sizeof dir, "%s/fn", f->root);

  static const char *const bad[] = {"",      "\n",    "abc\n", "0\n",
                                    "01\n",  "1 2\n", "1\n\n", "-1\n",
                                    "1.0\n", " 1\n",  "1\r\n", "99999999999999999999999\n"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    put(dir, "CURRENT", bad[i]);
    err[0] = '\0';
    int rc = wk_code_store_resolve(f->root, "fn", 0, &epoch, path, sizeof path, err, sizeof err);
    if (rc != -1) fail_msg("CURRENT \"%s\" was accepted", bad[i]);
    if (!strstr(err, "malformed CURRENT")) fail_msg("CURRENT \"%s\": %s", bad[i], err);
  }
  /* a newline-less CURRENT written by hand is fine */
  put(dir, "CURRENT", "1");
  assert_int_equal(
      wk_code_store_resolve(f->root, "fn", 0, &epoch, path, sizeof path, err, sizeof err), 0);
  assert_int_equal(epoch, 1);

  /* CURRENT naming an epoch that is not there */
  put(dir, "CURRENT", "5\n");
  assert_int_equal(
      wk_code_store_resolve(f->root, "fn", 0, &epoch, path, sizeof path, err, sizeof err), -1);
  assert_non_null(strstr(err, "CURRENT of 'fn' names epoch 5"));

  /* a malformed CURRENT does not stop the next deploy, which repairs it */
  put(dir, "CURRENT", "garbage");
  put(f->src, "main.py", "x = 2\n");
  assert_int_equal(deploy_ok(f, "fn"), 2);
  assert_int_equal(
      wk_code_store_resolve(f->root, "fn", 0, &epoch, path, sizeof path, err, sizeof err), 0);
  assert_int_equal(epoch, 2);
}

static void test_deploy_missing_source_changes_nothing(void **state) {
  fx *f = *state;
  char err[512], missing[600], buf[64];
  uint64_t epoch = 77;
  snprintf(missing, sizeof missing, "%s/does-not-exist", f->dir);

  /* into an empty place: nothing at all is created */
  assert_int_equal(wk_code_store_deploy(f->root, "fn", missing, &epoch, err, sizeof err), -1);
  assert_non_null(strstr(err, "does-not-exist"));
  assert_false(exists(f->dir, "root"));
  assert_int_equal(epoch, 77);

  /* over an existing function: CURRENT and epochs unchanged, nothing staged */
  put(f->src, "main.py", "x = 1\n");
  deploy_ok(f, "fn");
  assert_int_equal(wk_code_store_deploy(f->root, "fn", missing, &epoch, err, sizeof err), -1);
  assert_true(get(f->root, "fn/CURRENT", buf, sizeof buf));
  assert_string_equal(buf, "1\n");
  assert_false(exists(f->root, "fn/2"));
  char d[600];
  snprintf(d, sizeof d, "%s/fn", f->root);
  assert_int_equal(count_prefix(d, ".staging"), 0);

  /* a file is not a source directory */
  char file[600];
  snprintf(file, sizeof file, "%s/main.py", f->src);
  assert_int_equal(wk_code_store_deploy(f->root, "fn", file, &epoch, err, sizeof err), -1);
  assert_non_null(strstr(err, "not a directory"));
  assert_false(exists(f->root, "fn/2"));
}

static void test_deploy_copies_tree_skips_pycache(void **state) {
  fx *f = *state;
  char buf[256], path[512], err[512];
  uint64_t epoch = 0;
  put(f->src, "main.py", "import pkg.mod\n");
  put(f->src, "pkg/__init__.py", "");
  put(f->src, "pkg/mod.py", "Y = 2\n");
  put(f->src, "pkg/deep/er/data.json", "{\"k\": 1}\n");
  put(f->src, "__pycache__/main.cpython-311.pyc", "junk");
  put(f->src, "pkg/__pycache__/mod.cpython-311.pyc", "junk");
  char exe[600];
  snprintf(exe, sizeof exe, "%s/run.sh", f->src);
  put(f->src, "run.sh", "#!/bin/sh\n");
  assert_int_equal(chmod(exe, 0755), 0);
  char empty[600];
  snprintf(empty, sizeof empty, "%s/empty", f->src);
  mkdirs(empty);

  assert_int_equal(deploy_ok(f, "tree"), 1);
  assert_int_equal(
      wk_code_store_resolve(f->root, "tree", 0, &epoch, path, sizeof path, err, sizeof err), 0);
  assert_true(get(path, "main.py", buf, sizeof buf));
  assert_string_equal(buf, "import pkg.mod\n");
  assert_true(get(path, "pkg/__init__.py", buf, sizeof buf));
  assert_string_equal(buf, "");
  assert_true(get(path, "pkg/deep/er/data.json", buf, sizeof buf));
  assert_string_equal(buf, "{\"k\": 1}\n");
  assert_true(exists(path, "empty"));
  assert_false(exists(path, "__pycache__"));
  assert_false(exists(path, "pkg/__pycache__"));
  struct stat st;
  char p[600];
  snprintf(p, sizeof p, "%s/run.sh", path);
  assert_int_equal(stat(p, &st), 0);
  assert_int_equal(st.st_mode & 0777, 0555); /* executable kept, write bits dropped */
}

static void test_deploy_symlinks(void **state) {
  fx *f = *state;
  char buf[256], path[512], err[512], link[600], d[600];
  uint64_t epoch = 0;
  put(f->src, "main.py", "x = 1\n");
  put(f->src, "real/conf.txt", "inside\n");
  deploy_ok(f, "ln"); /* epoch 1 */

  /* a link inside the tree is copied as what it points at */
  snprintf(link, sizeof link, "%s/alias.txt", f->src);
  assert_int_equal(symlink("real/conf.txt", link), 0);
  assert_int_equal(deploy_ok(f, "ln"), 2);
  assert_int_equal(
      wk_code_store_resolve(f->root, "ln", 2, &epoch, path, sizeof path, err, sizeof err), 0);
  assert_true(get(path, "alias.txt", buf, sizeof buf));
  assert_string_equal(buf, "inside\n");
  struct stat st;
  char p[600];
  snprintf(p, sizeof p, "%s/alias.txt", path);
  assert_int_equal(lstat(p, &st), 0);
  assert_true(S_ISREG(st.st_mode));

  /* a link escaping the tree is refused, and nothing changes */
  put(f->dir, "secret.txt", "secret\n");
  snprintf(link, sizeof link, "%s/real/escape.txt", f->src);
  assert_int_equal(symlink("../../secret.txt", link), 0);
  assert_int_equal(wk_code_store_deploy(f->root, "ln", f->src, &epoch, err, sizeof err), -1);
  assert_non_null(strstr(err, "points outside the source directory"));
  assert_non_null(strstr(err, "real/escape.txt"));
  assert_true(get(f->root, "ln/CURRENT", buf, sizeof buf));
  assert_string_equal(buf, "2\n");
  assert_false(exists(f->root, "ln/3"));
  snprintf(d, sizeof d, "%s/ln", f->root);
  assert_int_equal(count_prefix(d, ".staging"), 0);
  assert_int_equal(unlink(link), 0);

  /* a dangling link is refused */
  assert_int_equal(symlink("nowhere.txt", link), 0);
  assert_int_equal(wk_code_store_deploy(f->root, "ln", f->src, &epoch, err, sizeof err), -1);
  assert_non_null(strstr(err, "cannot be followed"));
  assert_int_equal(unlink(link), 0);

  /* a link to an ancestor loops until the depth bound */
  snprintf(link, sizeof link, "%s/real/loop", f->src);
  assert_int_equal(symlink("..", link), 0);
  assert_int_equal(wk_code_store_deploy(f->root, "ln", f->src, &epoch, err, sizeof err), -1);
  assert_non_null(strstr(err, "deep"));
  assert_int_equal(count_prefix(d, ".staging"), 0);
  assert_false(exists(f->root, "ln/3"));

  /* a failed first deploy of a new function leaves no function directory */
  assert_int_equal(wk_code_store_deploy(f->root, "fresh", f->src, &epoch, err, sizeof err), -1);
  assert_false(exists(f->root, "fresh"));
}

static void test_deploy_numbers_above_existing(void **state) {
  fx *f = *state;
  char d[600], buf[64];
  put(f->src, "main.py", "x = 1\n");
  snprintf(d, sizeof d, "%s/fn/5", f->root);
  mkdirs(d); /* e.g. restored by hand */
  snprintf(d, sizeof d, "%s/fn/.staging-9-1", f->root);
  mkdirs(d); /* a crashed deploy's leftovers are not epochs */
  snprintf(d, sizeof d, "%s/fn/007", f->root);
  mkdirs(d); /* not a canonical epoch name */
  assert_int_equal(deploy_ok(f, "fn"), 6);
  assert_true(get(f->root, "fn/CURRENT", buf, sizeof buf));
  assert_string_equal(buf, "6\n");

  uint64_t list[8], cur = 0;
  size_t n = 0;
  char err[256];
  assert_int_equal(wk_code_store_list(f->root, "fn", list, 1, &n, &cur, err, sizeof err), 0);
  assert_int_equal(n, 2); /* total, though only one fitted */
  assert_int_equal(list[0], 5);
  assert_int_equal(cur, 6);
}

static void test_deploy_refuses_source_containing_root(void **state) {
  fx *f = *state;
  char err[512], root[600];
  uint64_t epoch = 0;
  put(f->src, "main.py", "x = 1\n");
  snprintf(root, sizeof root, "%s/store", f->src);
  assert_int_equal(wk_code_store_deploy(root, "fn", f->src, &epoch, err, sizeof err), -1);
  assert_non_null(strstr(err, "outside the code root"));
  assert_false(exists(root, "fn"));
}

static void test_resolve_small_buffer(void **state) {
  fx *f = *state;
  char path[8], err[512];
  uint64_t epoch = 0;
  put(f->src, "main.py", "x = 1\n");
  deploy_ok(f, "fn");
  assert_int_equal(
      wk_code_store_resolve(f->root, "fn", 0, &epoch, path, sizeof path, err, sizeof err), -1);
  assert_non_null(strstr(err, "longer than"));
}

static void test_concurrent_deploys_take_distinct_epochs(void **state) {
  fx *f = *state;
  enum { PROCS = 4, EACH = 5 };
  put(f->src, "main.py", "x = 1\n");
  pid_t pids[PROCS];
  for (int i = 0; i < PROCS; i++) {
    pids[i] = fork();
    assert_true(pids[i] >= 0);
    if (pids[i] == 0) {
      char src[400], text[64];
      snprintf(src, sizeof src, "%s-%d", f->src, i);
      for (int k = 0; k < EACH; k++) {
        uint64_t e = 0;
        char err[256];
        snprintf(text, sizeof text, "x = %d\n", i * EACH + k); /* new content each time */
        put(src, "main.py", text);
        if (wk_code_store_deploy(f->root, "race", src, &e, err, sizeof err) != 0) _exit(1);
      }
      _exit(0);
    }
  }
  for (int i = 0; i < PROCS; i++) {
    int status = 0;
    assert_int_equal(waitpid(pids[i], &status, 0), pids[i]);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
  }
  uint64_t list[64], cur = 0;
  size_t n = 0;
  char err[256];
  assert_int_equal(wk_code_store_list(f->root, "race", list, 64, &n, &cur, err, sizeof err), 0);
  assert_int_equal(n, PROCS * EACH);
  for (size_t i = 0; i < n; i++) assert_int_equal(list[i], i + 1);
  assert_int_equal(cur, PROCS * EACH);
}

/* ---- digests, checked deploys, rollback, pins and removal ----------------------------- */

static uint64_t deploy_r(fx *f, const char *fn, const wk_code_deploy_opts *o,
                         wk_code_deploy_result *r) {
  char err[512];
  if (wk_code_store_deploy_opts(f->root, fn, f->src, o, r, err, sizeof err) != 0)
    fail_msg("deploy failed: %s", err);
  return r->epoch;
}

static void test_identical_content_is_the_same_epoch_with_one_digest(void **state) {
  fx *f = *state;
  wk_code_deploy_result a, b, c, d;
  put(f->src, "main.py", "x = 1\n");
  put(f->src, "lib/util.py", "y = 1\n");
  assert_int_equal(deploy_r(f, "fn", NULL, &a), 1);
  assert_false(a.reused);
  assert_int_equal(strlen(a.digest), WK_CODE_STORE_DIGEST_HEX);
  put(f->src, "main.py", "x = 2\n");
  assert_int_equal(deploy_r(f, "fn", NULL, &b), 2);
  assert_string_not_equal(a.digest, b.digest);
  /* the first content again: epoch 1 is CURRENT again, no epoch 3 */
  put(f->src, "main.py", "x = 1\n");
  assert_int_equal(deploy_r(f, "fn", NULL, &c), 1);
  assert_true(c.reused);
  assert_string_equal(c.digest, a.digest);
  uint64_t list[8], cur = 0;
  size_t n = 0;
  char err[256], hex[WK_CODE_STORE_DIGEST_HEX + 1];
  assert_int_equal(wk_code_store_list(f->root, "fn", list, 8, &n, &cur, err, sizeof err), 0);
  assert_int_equal(n, 2);
  assert_int_equal(cur, 1);
  assert_int_equal(wk_code_store_digest(f->root, "fn", 2, hex), 0);
  assert_string_equal(hex, b.digest);
  /* the digest covers names and the executable bit, not only the bytes */
  char p[700];
  snprintf(p, sizeof p, "%s/main.py", f->src);
  assert_int_equal(chmod(p, 0755), 0);
  assert_int_equal(deploy_r(f, "fn", NULL, &d), 3);
  assert_string_not_equal(d.digest, a.digest);
}

static int refuse(void *ud, const char *staged, char *err, size_t err_len) {
  int *calls = ud;
  (*calls)++;
  char p[700];
  snprintf(p, sizeof p, "%s/main.py", staged);
  assert_int_equal(access(p, R_OK), 0); /* the check sees the staged copy */
  snprintf(err, err_len, "main.py does not compile");
  return -1;
}

static void test_a_failed_check_changes_nothing(void **state) {
  fx *f = *state;
  wk_code_deploy_result r;
  put(f->src, "main.py", "x = 1\n");
  assert_int_equal(deploy_r(f, "fn", NULL, &r), 1);
  put(f->src, "main.py", "def broken(:\n");
  int calls = 0;
  wk_code_deploy_opts o = {.check = refuse, .check_ud = &calls};
  char err[256];
  assert_int_equal(wk_code_store_deploy_opts(f->root, "fn", f->src, &o, &r, err, sizeof err), -1);
  assert_int_equal(calls, 1);
  assert_string_equal(err, "main.py does not compile");
  uint64_t list[8], cur = 0;
  size_t n = 0;
  assert_int_equal(wk_code_store_list(f->root, "fn", list, 8, &n, &cur, err, sizeof err), 0);
  assert_int_equal(n, 1);
  assert_int_equal(cur, 1);
  char dir[600];
  snprintf(dir, sizeof dir, "%s/fn", f->root);
  assert_false(exists(dir, ".staging-2-0") || exists(dir, "2"));
}

static void test_rollback_moves_current(void **state) {
  fx *f = *state;
  char err[256], text[32];
  for (int i = 1; i <= 3; i++) {
    snprintf(text, sizeof text, "x = %d\n", i);
    put(f->src, "main.py", text);
    deploy_ok(f, "fn");
  }
  uint64_t now = 0;
  assert_int_equal(wk_code_store_set_current(f->root, "fn", 0, &now, err, sizeof err), 0);
  assert_int_equal(now, 2);
  assert_int_equal(wk_code_store_set_current(f->root, "fn", 0, &now, err, sizeof err), 0);
  assert_int_equal(now, 1);
  assert_int_equal(wk_code_store_set_current(f->root, "fn", 0, &now, err, sizeof err), -1);
  assert_non_null(strstr(err, "no published epoch below CURRENT (1)"));
  assert_int_equal(wk_code_store_set_current(f->root, "fn", 9, &now, err, sizeof err), -1);
  assert_non_null(strstr(err, "epoch 9 of 'fn' is not published"));
  assert_int_equal(wk_code_store_set_current(f->root, "fn", 3, &now, err, sizeof err), 0);
  assert_int_equal(now, 3);
  uint64_t epoch = 0;
  char path[512];
  assert_int_equal(
      wk_code_store_resolve(f->root, "fn", 0, &epoch, path, sizeof path, err, sizeof err), 0);
  assert_int_equal(epoch, 3);
  assert_int_equal(wk_code_store_set_current(f->root, "nope", 1, &now, err, sizeof err), -1);
  assert_non_null(strstr(err, "not deployed"));
}

static void test_prune_keeps_the_newest_current_and_pinned(void **state) {
  fx *f = *state;
  char err[256], text[32];
  for (int i = 1; i <= 8; i++) {
    snprintf(text, sizeof text, "x = %d\n", i);
    put(f->src, "main.py", text);
    deploy_ok(f, "fn");
  }
  uint64_t now = 0;
  assert_int_equal(wk_code_store_set_current(f->root, "fn", 2, &now, err, sizeof err), 0);
  wk_code_pins *pins = wk_code_pins_create();
  wk_code_pins_pin(pins, "fn", 4);
  wk_code_pins_pin(pins, "fn", 4);
  wk_code_pins_unpin(pins, "fn", 4);
  assert_int_equal(wk_code_pins_count(pins, "fn", 4), 1);
  wk_code_pins_pin(pins, "other", 1); /* another function's pin protects nothing here */
  uint64_t removed[16];
  size_t n = 0;
  assert_int_equal(wk_code_store_prune(f->root, "fn", 3, pins, removed, 16, &n, err, sizeof err),
                   0);
  /* kept: 6 7 8 (newest 3), 2 (CURRENT), 4 (pinned); removed: 1 3 5 */
  assert_int_equal(n, 3);
  assert_int_equal(removed[0], 1);
  assert_int_equal(removed[1], 3);
  assert_int_equal(removed[2], 5);
  uint64_t list[16], cur = 0;
  size_t count = 0;
  assert_int_equal(wk_code_store_list(f->root, "fn", list, 16, &count, &cur, err, sizeof err), 0);
  assert_int_equal(count, 5);
  const uint64_t want[] = {2, 4, 6, 7, 8};
  for (size_t i = 0; i < 5; i++) assert_int_equal(list[i], want[i]);
  char dir[600], hex[WK_CODE_STORE_DIGEST_HEX + 1];
  snprintf(dir, sizeof dir, "%s/fn", f->root);
  assert_false(exists(dir, "1.sha256"));
  assert_int_equal(wk_code_store_digest(f->root, "fn", 4, hex), 0);
  /* a hold keeps every epoch of the function; once released and unpinned, 4 goes */
  wk_code_pins_hold(pins, "fn");
  assert_int_equal(wk_code_store_set_current(f->root, "fn", 8, &now, err, sizeof err), 0);
  assert_int_equal(wk_code_store_prune(f->root, "fn", 3, pins, removed, 16, &n, err, sizeof err),
                   0);
  assert_int_equal(n, 0);
  wk_code_pins_release(pins, "fn");
  wk_code_pins_unpin(pins, "fn", 4);
  assert_int_equal(wk_code_store_prune(f->root, "fn", 3, pins, removed, 16, &n, err, sizeof err),
                   0);
  assert_int_equal(n, 2); /* 2 and 4 */
  assert_int_equal(wk_code_store_list(f->root, "fn", list, 16, &count, &cur, err, sizeof err), 0);
  assert_int_equal(count, 3);
  assert_int_equal(list[0], 6);
  /* the next deploy still takes a new number */
  put(f->src, "main.py", "x = 9\n");
  assert_int_equal(deploy_ok(f, "fn"), 9);
  /* keep 0 removes nothing; an undeployed function is no error */
  assert_int_equal(wk_code_store_prune(f->root, "fn", 0, pins, removed, 16, &n, err, sizeof err),
                   0);
  assert_int_equal(n, 0);
  assert_int_equal(wk_code_store_prune(f->root, "ghost", 1, pins, removed, 16, &n, err, sizeof err),
                   0);
  wk_code_pins_destroy(pins);
}

/* ---- deploys from a list of files ------------------------------------------------ */

#define FILE_OF(p, c) \
  { .path = (p), .content = (const uint8_t *)(c), .len = sizeof(c) - 1 }

static int pub(fx *f, const char *fn, const wk_code_file *files, size_t n, uint64_t epoch,
               const char *digest, bool make_current, wk_code_publish_result *r, char *err,
               size_t err_len) {
  wk_code_publish_opts o = {
      .epoch = epoch, .digest = digest, .make_current = make_current, .max_files = 100};
  return wk_code_store_publish_files(f->root, fn, files, n, &o, r, err, err_len);
}

static void digest_of(const wk_code_file *files, size_t n, char *hex) {
  char err[256];
  assert_int_equal(wk_code_store_digest_files(files, n, hex, err, sizeof err), 0);
}

static void test_files_digest_matches_a_deployed_tree(void **state) {
  fx *f = *state;
  /* names chosen so the walk's order differs from a plain sort of the paths */
  put(f->src, "main.py", "x = 1\n");
  put(f->src, "a/b.py", "b\n");
  put(f->src, "a.txt", "t\n");
  put(f->src, "a-b/c/d.py", "d\n");
  put(f->src, "run.sh", "#!/bin/sh\n");
  char p[700];
  snprintf(p, sizeof p, "%s/run.sh", f->src);
  assert_int_equal(chmod(p, 0755), 0);
  wk_code_deploy_result r;
  assert_int_equal(deploy_r(f, "fn", NULL, &r), 1);
  wk_code_file files[] = {FILE_OF("run.sh", "#!/bin/sh\n"), FILE_OF("a.txt", "t\n"),
                          FILE_OF("main.py", "x = 1\n"), FILE_OF("a-b/c/d.py", "d\n"),
                          FILE_OF("a/b.py", "b\n")};
  files[0].executable = true;
  char hex[WK_CODE_STORE_DIGEST_HEX + 1];
  digest_of(files, 5, hex);
  assert_string_equal(hex, r.digest);
  files[0].executable = false; /* the bit counts */
  digest_of(files, 5, hex);
  assert_string_not_equal(hex, r.digest);
}

static void test_publish_files_at_a_given_epoch(void **state) {
  fx *f = *state;
  wk_code_file v1[] = {FILE_OF("main.py", "def handler(a, c):\n    return 1\n"),
                       FILE_OF("lib/u.py", "u = 1\n")};
  wk_code_file v2[] = {FILE_OF("main.py", "def handler(a, c):\n    return 2\n")};
  char d1[WK_CODE_STORE_DIGEST_HEX + 1], d2[WK_CODE_STORE_DIGEST_HEX + 1], err[1024];
  digest_of(v1, 2, d1);
  digest_of(v2, 1, d2);
  wk_code_publish_result r;
  /* epoch 7 is free: published there, CURRENT untouched (none yet) */
  assert_int_equal(pub(f, "fn", v1, 2, 7, d1, false, &r, err, sizeof err), WK_CODE_STORE_OK);
  assert_int_equal(r.epoch, 7);
  assert_false(r.reused);
  assert_int_equal(r.current, 0);
  assert_int_equal(r.previous, 0);
  char dir[600], buf[128], hex[WK_CODE_STORE_DIGEST_HEX + 1];
  snprintf(dir, sizeof dir, "%s/fn", f->root);
  assert_false(exists(dir, "CURRENT"));
  assert_true(get(dir, "7/lib/u.py", buf, sizeof buf));
  assert_string_equal(buf, "u = 1\n");
  assert_int_equal(wk_code_store_digest(f->root, "fn", 7, hex), 0);
  assert_string_equal(hex, d1);
  struct stat st;
  char p[700];
  snprintf(p, sizeof p, "%s/7/main.py", dir);
  assert_int_equal(stat(p, &st), 0);
  assert_int_equal(st.st_mode & 0777, 0444); /* read-only */
  /* the same again: reused, nothing copied; make_current moves CURRENT */
  assert_int_equal(pub(f, "fn", v1, 2, 7, d1, true, &r, err, sizeof err), WK_CODE_STORE_OK);
  assert_true(r.reused);
  assert_int_equal(r.current, 7);
  assert_int_equal(count_prefix(dir, ".staging"), 0);
  /* other content under 7: refused, naming both digests; nothing changes */
  assert_int_equal(pub(f, "fn", v2, 1, 7, d2, true, &r, err, sizeof err), WK_CODE_STORE_E_CONFLICT);
  assert_non_null(strstr(err, "got epoch 7 of 'fn' from another deploy"));
  assert_non_null(strstr(err, d1));
  assert_non_null(strstr(err, d2));
  assert_true(get(dir, "7/main.py", buf, sizeof buf));
  assert_non_null(strstr(buf, "return 1"));
  /* the same digest under a free epoch 9: published there too */
  assert_int_equal(pub(f, "fn", v1, 2, 9, d1, false, &r, err, sizeof err), WK_CODE_STORE_OK);
  assert_int_equal(r.epoch, 9);
  assert_false(r.reused);
  assert_int_equal(r.current, 7); /* not asked to move */
  /* epoch 0: the next local epoch (above 9), or the one with this digest */
  assert_int_equal(pub(f, "fn", v2, 1, 0, d2, true, &r, err, sizeof err), WK_CODE_STORE_OK);
  assert_int_equal(r.epoch, 10);
  assert_int_equal(r.previous, 7);
  assert_int_equal(r.current, 10);
  assert_int_equal(pub(f, "fn", v2, 1, 0, d2, false, &r, err, sizeof err), WK_CODE_STORE_OK);
  assert_int_equal(r.epoch, 10);
  assert_true(r.reused);
  /* an epoch from a local deploy (no digest recorded) is a conflict too */
  char legacy[700];
  snprintf(legacy, sizeof legacy, "%s/fn/10.sha256", f->root);
  assert_int_equal(unlink(legacy), 0);
  assert_int_equal(pub(f, "fn", v2, 1, 10, d2, false, &r, err, sizeof err),
                   WK_CODE_STORE_E_CONFLICT);
  assert_non_null(strstr(err, "not recorded"));
}

static void test_publish_files_refusals_change_nothing(void **state) {
  fx *f = *state;
  wk_code_file good[] = {FILE_OF("main.py", "x = 1\n")};
  char dg[WK_CODE_STORE_DIGEST_HEX + 1], err[1024];
  digest_of(good, 1, dg);
  wk_code_publish_result r;
  char dir[600];
  snprintf(dir, sizeof dir, "%s/fn", f->root);
  /* a wrong digest: nothing created at all, both digests named */
  char wrong[WK_CODE_STORE_DIGEST_HEX + 1];
  memset(wrong, 'a', WK_CODE_STORE_DIGEST_HEX);
  wrong[WK_CODE_STORE_DIGEST_HEX] = '\0';
  assert_int_equal(pub(f, "fn", good, 1, 3, wrong, true, &r, err, sizeof err),
                   WK_CODE_STORE_E_DIGEST);
  assert_non_null(strstr(err, wrong));
  assert_non_null(strstr(err, dg));
  assert_false(exists(f->dir, "root"));
  assert_int_equal(pub(f, "fn", good, 1, 3, "", true, &r, err, sizeof err),
                   WK_CODE_STORE_E_INVALID);
  /* bad paths */
  const char *bad[] = {"../x", "/abs",   "a//b",          "a/./b", "a/",
                       ".",    "a/../b", "__pycache__/x", "a\nb",  ""};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    wk_code_file fl[] = {FILE_OF("main.py", "x = 1\n"), {.path = bad[i]}};
    assert_int_equal(pub(f, "fn", fl, 2, 3, dg, true, &r, err, sizeof err),
                     WK_CODE_STORE_E_INVALID);
    assert_non_null(strstr(err, "files[1].path"));
  }
  char deep[200] = "";
  for (int i = 0; i < 33; i++) strcat(deep, i ? "/d" : "d");
  wk_code_file fd[] = {{.path = deep}};
  assert_int_equal(pub(f, "fn", fd, 1, 3, dg, true, &r, err, sizeof err), WK_CODE_STORE_E_INVALID);
  assert_non_null(strstr(err, "components"));
  char longp[WK_CODE_STORE_PATH_MAX + 2];
  memset(longp, 'x', sizeof longp - 1);
  longp[sizeof longp - 1] = '\0';
  wk_code_file fl2[] = {{.path = longp}};
  assert_int_equal(pub(f, "fn", fl2, 1, 3, dg, true, &r, err, sizeof err), WK_CODE_STORE_E_INVALID);
  /* duplicates, a file that is another's directory, too many, too big, none */
  wk_code_file dup[] = {FILE_OF("a.py", "1"), FILE_OF("b.py", "2"), FILE_OF("a.py", "3")};
  assert_int_equal(pub(f, "fn", dup, 3, 3, dg, true, &r, err, sizeof err), WK_CODE_STORE_E_INVALID);
  assert_non_null(strstr(err, "listed twice"));
  wk_code_file both[] = {FILE_OF("a", "1"), FILE_OF("a-b", "2"), FILE_OF("a/b.py", "3")};
  assert_int_equal(pub(f, "fn", both, 3, 3, dg, true, &r, err, sizeof err),
                   WK_CODE_STORE_E_INVALID);
  assert_non_null(strstr(err, "both a file and a directory"));
  assert_int_equal(wk_code_store_check_files(dup, 3, 2, 0, err, sizeof err), -1);
  assert_non_null(strstr(err, "more than the 2 allowed"));
  assert_int_equal(wk_code_store_check_files(good, 1, 0, 5, err, sizeof err), -1);
  assert_non_null(strstr(err, "exceed 5 bytes"));
  assert_int_equal(wk_code_store_check_files(good, 0, 0, 0, err, sizeof err), -1);
  assert_false(exists(f->dir, "root"));
  /* a failed check: no epoch, no digest file, no staging, no function directory */
  int calls = 0;
  wk_code_publish_opts o = {
      .epoch = 3, .digest = dg, .make_current = true, .check = refuse, .check_ud = &calls};
  assert_int_equal(wk_code_store_publish_files(f->root, "fn", good, 1, &o, &r, err, sizeof err),
                   WK_CODE_STORE_E_CHECK);
  assert_int_equal(calls, 1);
  assert_false(exists(dir, ""));
  /* with an existing function: CURRENT and the epochs stay */
  assert_int_equal(pub(f, "fn", good, 1, 2, dg, true, &r, err, sizeof err), WK_CODE_STORE_OK);
  wk_code_file other[] = {FILE_OF("main.py", "x = 2\n")};
  char d2[WK_CODE_STORE_DIGEST_HEX + 1];
  digest_of(other, 1, d2);
  o.digest = d2;
  assert_int_equal(wk_code_store_publish_files(f->root, "fn", other, 1, &o, &r, err, sizeof err),
                   WK_CODE_STORE_E_CHECK);
  assert_false(exists(dir, "3"));
  assert_false(exists(dir, "3.sha256"));
  assert_int_equal(count_prefix(dir, ".staging"), 0);
  char buf[32];
  assert_true(get(dir, "CURRENT", buf, sizeof buf));
  assert_string_equal(buf, "2\n");
}

static void test_set_current_with_digest(void **state) {
  fx *f = *state;
  wk_code_file v1[] = {FILE_OF("main.py", "x = 1\n")};
  wk_code_file v2[] = {FILE_OF("main.py", "x = 2\n")};
  char d1[WK_CODE_STORE_DIGEST_HEX + 1], d2[WK_CODE_STORE_DIGEST_HEX + 1], err[1024];
  digest_of(v1, 1, d1);
  digest_of(v2, 1, d2);
  wk_code_publish_result r;
  assert_int_equal(pub(f, "fn", v1, 1, 4, d1, true, &r, err, sizeof err), WK_CODE_STORE_OK);
  assert_int_equal(pub(f, "fn", v2, 1, 5, d2, false, &r, err, sizeof err), WK_CODE_STORE_OK);
  uint64_t now = 0, prev = 0;
  assert_int_equal(
      wk_code_store_set_current_digest(f->root, "fn", 5, d1, &now, &prev, err, sizeof err),
      WK_CODE_STORE_E_CONFLICT);
  assert_non_null(strstr(err, d2));
  assert_int_equal(
      wk_code_store_set_current_digest(f->root, "fn", 6, NULL, &now, &prev, err, sizeof err),
      WK_CODE_STORE_E_NOT_FOUND);
  assert_int_equal(
      wk_code_store_set_current_digest(f->root, "nope", 5, NULL, &now, &prev, err, sizeof err),
      WK_CODE_STORE_E_NOT_FOUND);
  assert_int_equal(
      wk_code_store_set_current_digest(f->root, "fn", 5, d2, &now, &prev, err, sizeof err),
      WK_CODE_STORE_OK);
  assert_int_equal(now, 5);
  assert_int_equal(prev, 4);
  char **names = NULL;
  size_t n = 0;
  assert_int_equal(wk_code_store_functions(f->root, &names, &n, err, sizeof err), 0);
  assert_int_equal(n, 1);
  assert_string_equal(names[0], "fn");
  free(names[0]);
  free(names);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_valid_function_names),
      cmocka_unit_test_setup_teardown(test_invalid_name_is_refused_everywhere, setup, teardown),
      cmocka_unit_test_setup_teardown(test_deploy_twice_keeps_old_epoch, setup, teardown),
      cmocka_unit_test_setup_teardown(test_missing_function, setup, teardown),
      cmocka_unit_test_setup_teardown(test_missing_epoch, setup, teardown),
      cmocka_unit_test_setup_teardown(test_corrupted_current, setup, teardown),
      cmocka_unit_test_setup_teardown(test_deploy_missing_source_changes_nothing, setup, teardown),
      cmocka_unit_test_setup_teardown(test_deploy_copies_tree_skips_pycache, setup, teardown),
      cmocka_unit_test_setup_teardown(test_deploy_symlinks, setup, teardown),
      cmocka_unit_test_setup_teardown(test_deploy_numbers_above_existing, setup, teardown),
      cmocka_unit_test_setup_teardown(test_deploy_refuses_source_containing_root, setup, teardown),
      cmocka_unit_test_setup_teardown(test_resolve_small_buffer, setup, teardown),
      cmocka_unit_test_setup_teardown(test_concurrent_deploys_take_distinct_epochs, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_identical_content_is_the_same_epoch_with_one_digest,
                                      setup, teardown),
      cmocka_unit_test_setup_teardown(test_a_failed_check_changes_nothing, setup, teardown),
      cmocka_unit_test_setup_teardown(test_rollback_moves_current, setup, teardown),
      cmocka_unit_test_setup_teardown(test_prune_keeps_the_newest_current_and_pinned, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_files_digest_matches_a_deployed_tree, setup, teardown),
      cmocka_unit_test_setup_teardown(test_publish_files_at_a_given_epoch, setup, teardown),
      cmocka_unit_test_setup_teardown(test_publish_files_refusals_change_nothing, setup, teardown),
      cmocka_unit_test_setup_teardown(test_set_current_with_digest, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

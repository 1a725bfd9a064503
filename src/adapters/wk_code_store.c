/* wk_code_store.c: the function code store (see wk_code_store.h). */
#define _GNU_SOURCE /* renameat2, RENAME_NOREPLACE, nftw, flock */

#include "lib/wk_assert.h"
#include "lib/wk_err.h"
#include "adapters/wk_code_store.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>

#include "lib/wk_alloc.h"
#include "lib/wk_str.h"

#define CS_PATH_MAX 4096u                   /* bytes of any path we build */
#define CS_EPOCH_MAX 1000000000000000000ull /* 10^18: 18 digits, far from overflow */
#define CS_CURRENT_MAX 32u                  /* bytes of a well-formed CURRENT, generously */
#define CS_COPY_BUF (64u * 1024u)
#define CS_CURRENT "CURRENT"
#define CS_LOCK ".deploy.lock"
#define CS_DIGEST_SUFFIX ".sha256"
_Static_assert(WK_CODE_STORE_PATH_MAX == 1024u && WK_CODE_STORE_MAX_DEPTH == 32u,
               "path_problem's messages name these numbers");

/* ---- errors ------------------------------------------------------------------ */

/* "a/b" into out; false when it does not fit. */
static bool join(char *out, size_t out_len, const char *a, const char *b) {
  int n = snprintf(out, out_len, "%s/%s", a, b);
  return n >= 0 && (size_t)n < out_len;
}

/* ---- names and epochs ------------------------------------------------------------ */

bool wk_code_store_valid_function_name(const char *name) {
  if (!name || name[0] == '\0' || name[0] == '.') return false;
  size_t n = 0;
  for (const char *p = name; *p; p++, n++) {
    char c = *p;
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '.' || c == '-';
    if (!ok || n >= WK_CODE_STORE_NAME_MAX) return false;
  }
  return n >= 1 && n <= WK_CODE_STORE_NAME_MAX;
}

static void name_err(const char *function, char *err, size_t err_len) {
  if (!function) {
    wk_errf(err, err_len, "no function name given");
    return;
  }
  size_t n = strlen(function);
  if (n > WK_CODE_STORE_NAME_MAX) {
    wk_errf(err, err_len,
            "invalid function name (%zu bytes): use 1..%u characters of [A-Za-z0-9_.-]", n,
            WK_CODE_STORE_NAME_MAX);
    return;
  }
  wk_errf(err, err_len,
          "invalid function name '%s': use 1..%u characters of [A-Za-z0-9_.-], not "
          "starting with '.'",
          function, WK_CODE_STORE_NAME_MAX);
}

/* A canonical epoch: decimal digits, no leading zero, 1..10^18. */
static bool parse_epoch(const char *s, size_t n, uint64_t *out) {
  if (n == 0 || n > 19 || s[0] == '0') return false;
  uint64_t v = 0;
  for (size_t i = 0; i < n; i++) {
    if (s[i] < '0' || s[i] > '9') return false;
    v = v * 10u + (uint64_t)(s[i] - '0');
    if (v > CS_EPOCH_MAX) return false;
  }
  *out = v;
  return true;
}

/* Printable rendering of up to `n` bytes (for error messages). */
static void escape_preview(const char *s, size_t n, char *out, size_t out_len) {
  size_t o = 0;
  for (size_t i = 0; i < n && o + 5 < out_len; i++) {
    unsigned char c = (unsigned char)s[i];
    if (c == '\n') {
      out[o++] = '\\';
      out[o++] = 'n';
    } else if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\') {
      out[o++] = (char)c;
    } else {
      int w = snprintf(out + o, out_len - o, "\\x%02x", c);
      if (w < 0) break;
      o += (size_t)w;
    }
  }
  if (out_len > 0) out[o < out_len ? o : out_len - 1] = '\0';
}

enum { CUR_OK = 0, CUR_MISSING = 1, CUR_MALFORMED = 2, CUR_IO = 3 };

/* Reads fn_dir/CURRENT. Writes a description of what is wrong to err unless CUR_OK. */
static int read_current(const char *fn_dir, const char *function, uint64_t *epoch, char *err,
                        size_t err_len) {
  char path[CS_PATH_MAX];
  if (!join(path, sizeof path, fn_dir, CS_CURRENT)) {
    wk_errf(err, err_len, "path too long: %s/%s", fn_dir, CS_CURRENT);
    return CUR_IO;
  }
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) {
      wk_errf(err, err_len,
              "function '%s' has no CURRENT epoch (%s is missing): deploy it with workerctl "
              "deploy",
              function, path);
      return CUR_MISSING;
    }
    wk_errf(err, err_len, "cannot read %s: %s", path, strerror(errno));
    return CUR_IO;
  }
  char buf[CS_CURRENT_MAX + 1];
  size_t len = 0;
  for (;;) {
    ssize_t r = read(fd, buf + len, sizeof buf - len);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      int e = errno;
      close(fd);
      wk_errf(err, err_len, "cannot read %s: %s", path, strerror(e));
      return CUR_IO;
    }
    if (r == 0) break;
    len += (size_t)r;
    if (len == sizeof buf) break;
  }
  close(fd);
  size_t digits = len;
  if (digits > 0 && buf[digits - 1] == '\n') digits--;
  if (len <= CS_CURRENT_MAX && parse_epoch(buf, digits, epoch)) return CUR_OK;
  char shown[4 * CS_CURRENT_MAX + 8];
  escape_preview(buf, len > CS_CURRENT_MAX ? CS_CURRENT_MAX : len, shown, sizeof shown);
  wk_errf(err, err_len,
          "function '%s' has a malformed CURRENT (%s holds \"%s\"%s; expected a positive "
          "decimal epoch and a newline): deploy again with workerctl deploy, or write the "
          "epoch to use into it",
          function, path, shown, len > CS_CURRENT_MAX ? "..." : "");
  return CUR_MALFORMED;
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return (x > y) - (x < y);
}

/* Published epochs under fn_dir: the highest to *highest, and all of them (sorted,
 * malloc'd) to *list when list is not NULL. A missing fn_dir has none. */
static int scan_epochs(const char *fn_dir, uint64_t *highest, uint64_t **list, size_t *count,
                       char *err, size_t err_len) {
  *highest = 0;
  *count = 0;
  if (list) *list = NULL;
  DIR *d = opendir(fn_dir);
  if (!d) {
    if (errno == ENOENT) return 0;
    wk_errf(err, err_len, "cannot list %s: %s", fn_dir, strerror(errno));
    return -1;
  }
  uint64_t *arr = NULL;
  size_t cap = 0;
  struct dirent *de;
  errno = 0;
  while ((de = readdir(d)) != NULL) {
    uint64_t e;
    if (!parse_epoch(de->d_name, strlen(de->d_name), &e)) continue;
    if (de->d_type != DT_DIR) {
      char p[CS_PATH_MAX];
      struct stat st;
      if (de->d_type != DT_UNKNOWN || !join(p, sizeof p, fn_dir, de->d_name) || stat(p, &st) != 0 ||
          !S_ISDIR(st.st_mode))
        continue;
    }
    if (e > *highest) *highest = e;
    if (list) {
      if (*count == cap) {
        size_t ncap = cap ? cap * 2 : 16;
        uint64_t *n = wk_xrealloc(arr, ncap * sizeof *arr);
        arr = n;
        cap = ncap;
      }
      arr[*count] = e;
    }
    (*count)++;
  }
  int rerr = errno;
  closedir(d);
  if (rerr != 0) {
    free(arr);
    wk_errf(err, err_len, "cannot list %s: %s", fn_dir, strerror(rerr));
    return -1;
  }
  if (list) {
    if (arr) qsort(arr, *count, sizeof *arr, cmp_u64);
    *list = arr;
  }
  return 0;
}

/* ---- resolve ----------------------------------------------------------------------- */

static bool is_dir(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

int wk_code_store_resolve(const char *root, const char *function, uint64_t requested_epoch,
                          uint64_t *epoch, char *path, size_t path_len, char *err, size_t err_len) {
  WK_ASSERT(epoch && path && path_len > 0);
  WK_ASSERT(err || err_len == 0);
  if (!wk_code_store_valid_function_name(function)) {
    name_err(function, err, err_len);
    return -1;
  }
  if (!root || !*root) {
    wk_errf(err, err_len, "no code root configured");
    return -1;
  }
  char fn_dir[CS_PATH_MAX];
  if (!join(fn_dir, sizeof fn_dir, root, function)) {
    wk_errf(err, err_len, "code root path too long: %s", root);
    return -1;
  }
  struct stat st;
  if (stat(fn_dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
    if (!is_dir(root)) {
      wk_errf(err, err_len, "code root %s does not exist or is not a directory", root);
    } else {
      wk_errf(err, err_len,
              "function '%s' is not deployed (no directory %s): deploy it with workerctl "
              "deploy --code-root %s %s DIR",
              function, fn_dir, root, function);
    }
    return -1;
  }

  uint64_t e = requested_epoch;
  bool from_current = (requested_epoch == 0);
  if (from_current && read_current(fn_dir, function, &e, err, err_len) != CUR_OK) return -1;

  char num[24];
  snprintf(num, sizeof num, "%" PRIu64, e);
  char dir[CS_PATH_MAX];
  if (!join(dir, sizeof dir, fn_dir, num)) {
    wk_errf(err, err_len, "code root path too long: %s", root);
    return -1;
  }
  if (!is_dir(dir)) {
    uint64_t highest = 0;
    size_t n = 0;
    char scan_err[8];
    (void)scan_epochs(fn_dir, &highest, NULL, &n, scan_err, sizeof scan_err);
    if (from_current) {
      wk_errf(err, err_len,
              "CURRENT of '%s' names epoch %" PRIu64
              " but %s does not exist: deploy again "
              "with workerctl deploy, or write an existing epoch into %s/%s",
              function, e, dir, fn_dir, CS_CURRENT);
    } else if (highest > 0) {
      wk_errf(err, err_len,
              "epoch %" PRIu64
              " of '%s' does not exist (the highest published epoch is "
              "%" PRIu64 ")",
              e, function, highest);
    } else {
      wk_errf(err, err_len, "epoch %" PRIu64 " of '%s' does not exist (no epoch is published)", e,
              function);
    }
    return -1;
  }
  int w = snprintf(path, path_len, "%s", dir);
  if (w < 0 || (size_t)w >= path_len) {
    wk_errf(err, err_len, "code path %s is longer than the %zu bytes available", dir, path_len);
    return -1;
  }
  *epoch = e;
  return 0;
}

/* ---- list -------------------------------------------------------------------------- */

int wk_code_store_list(const char *root, const char *function, uint64_t *epochs, size_t cap,
                       size_t *count, uint64_t *current, char *err, size_t err_len) {
  WK_ASSERT(count && (epochs || cap == 0));
  WK_ASSERT(err || err_len == 0);
  *count = 0;
  if (current) *current = 0;
  if (!wk_code_store_valid_function_name(function)) {
    name_err(function, err, err_len);
    return -1;
  }
  char fn_dir[CS_PATH_MAX];
  if (!root || !join(fn_dir, sizeof fn_dir, root, function)) {
    wk_errf(err, err_len, "code root missing or path too long");
    return -1;
  }
  uint64_t highest = 0, *all = NULL;
  if (scan_epochs(fn_dir, &highest, &all, count, err, err_len) != 0) return -1;
  for (size_t i = 0; i < *count && i < cap; i++) epochs[i] = all[i];
  free(all);
  if (current) {
    uint64_t c = 0;
    char ignored[8];
    if (read_current(fn_dir, function, &c, ignored, sizeof ignored) == CUR_OK) *current = c;
  }
  return 0;
}

/* ---- deploy: copying --------------------------------------------------------------- */

typedef struct copy_ctx {
  const char *src_root; /* realpath of the source directory */
  size_t src_root_len;
  size_t entries; /* files and directories copied so far */
  char *buf;      /* CS_COPY_BUF bytes */
  char *err;
  size_t err_len;
} copy_ctx;

/* Path of `p` relative to the source root, for messages. */
static const char *rel(const copy_ctx *cx, const char *p) {
  if (strncmp(p, cx->src_root, cx->src_root_len) == 0 && p[cx->src_root_len] == '/')
    return p + cx->src_root_len + 1;
  return p;
}

static int fsync_path(const char *path, int flags) {
  int fd = open(path, flags | O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  int rc = fsync(fd);
  int e = errno;
  close(fd);
  errno = e;
  return rc;
}

static int write_all(int fd, const char *p, size_t n) {
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) return -1;
    p += w;
    n -= (size_t)w;
  }
  return 0;
}

static int copy_file(copy_ctx *cx, const char *src, const char *dst) {
  int in = open(src, O_RDONLY | O_CLOEXEC);
  if (in < 0) {
    wk_errf(cx->err, cx->err_len, "cannot read '%s': %s", rel(cx, src), strerror(errno));
    return -1;
  }
  struct stat st;
  if (fstat(in, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(in);
    wk_errf(cx->err, cx->err_len, "'%s' changed while being copied", rel(cx, src));
    return -1;
  }
  int out = open(dst, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (out < 0) {
    int e = errno;
    close(in);
    wk_errf(cx->err, cx->err_len, "cannot create %s: %s", dst, strerror(e));
    return -1;
  }
  int rc = 0;
  for (;;) {
    ssize_t r = read(in, cx->buf, CS_COPY_BUF);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      wk_errf(cx->err, cx->err_len, "cannot read '%s': %s", rel(cx, src), strerror(errno));
      rc = -1;
      break;
    }
    if (r == 0) break;
    if (write_all(out, cx->buf, (size_t)r) != 0) {
      wk_errf(cx->err, cx->err_len, "cannot write %s: %s", dst, strerror(errno));
      rc = -1;
      break;
    }
  }
  /* Read-only copies: an epoch is never modified once published. */
  mode_t mode = (st.st_mode & 0555) | 0444;
  if (rc == 0 && (fchmod(out, mode) != 0 || fsync(out) != 0)) {
    wk_errf(cx->err, cx->err_len, "cannot sync %s: %s", dst, strerror(errno));
    rc = -1;
  }
  close(in);
  if (close(out) != 0 && rc == 0) {
    wk_errf(cx->err, cx->err_len, "cannot write %s: %s", dst, strerror(errno));
    rc = -1;
  }
  return rc;
}

/* Copies the contents of directory src into the existing directory dst. */
static int copy_tree(copy_ctx *cx, const char *src, const char *dst, unsigned depth) {
  DIR *d = opendir(src);
  if (!d) {
    wk_errf(cx->err, cx->err_len, "cannot read directory '%s': %s", rel(cx, src), strerror(errno));
    return -1;
  }
  int rc = 0;
  struct dirent *de;
  for (errno = 0; rc == 0 && (de = readdir(d)) != NULL; errno = 0) {
    const char *name = de->d_name;
    if (strcmp(name, ".") == 0 || strcmp(name, "..") == 0) continue;
    char sp[CS_PATH_MAX], dp[CS_PATH_MAX];
    if (!join(sp, sizeof sp, src, name) || !join(dp, sizeof dp, dst, name)) {
      wk_errf(cx->err, cx->err_len, "path too long under '%s'", rel(cx, src));
      rc = -1;
      break;
    }
    struct stat st;
    if (lstat(sp, &st) != 0) {
      wk_errf(cx->err, cx->err_len, "cannot stat '%s': %s", rel(cx, sp), strerror(errno));
      rc = -1;
      break;
    }
    if (S_ISLNK(st.st_mode)) {
      char target[PATH_MAX];
      if (!realpath(sp, target)) {
        wk_errf(cx->err, cx->err_len, "symlink '%s' cannot be followed (%s): refusing to deploy",
                rel(cx, sp), strerror(errno));
        rc = -1;
        break;
      }
      bool inside = strncmp(target, cx->src_root, cx->src_root_len) == 0 &&
                    (target[cx->src_root_len] == '/' || target[cx->src_root_len] == '\0');
      if (!inside) {
        wk_errf(cx->err, cx->err_len,
                "symlink '%s' points outside the source directory (to %s): refusing to deploy",
                rel(cx, sp), target);
        rc = -1;
        break;
      }
      if (stat(sp, &st) != 0) {
        wk_errf(cx->err, cx->err_len, "cannot stat '%s': %s", rel(cx, sp), strerror(errno));
        rc = -1;
        break;
      }
    }
    if (S_ISDIR(st.st_mode) && strcmp(name, "__pycache__") == 0) continue;
    if (++cx->entries > WK_CODE_STORE_MAX_FILES) {
      wk_errf(cx->err, cx->err_len, "source holds more than %u files and directories",
              WK_CODE_STORE_MAX_FILES);
      rc = -1;
      break;
    }
    if (S_ISDIR(st.st_mode)) {
      if (depth + 1 > WK_CODE_STORE_MAX_DEPTH) {
        wk_errf(cx->err, cx->err_len,
                "'%s' is nested more than %u directories deep (a symlink loop?)", rel(cx, sp),
                WK_CODE_STORE_MAX_DEPTH);
        rc = -1;
        break;
      }
      if (mkdir(dp, 0755) != 0) {
        wk_errf(cx->err, cx->err_len, "cannot create %s: %s", dp, strerror(errno));
        rc = -1;
        break;
      }
      rc = copy_tree(cx, sp, dp, depth + 1);
    } else if (S_ISREG(st.st_mode)) {
      rc = copy_file(cx, sp, dp);
    } else {
      wk_errf(cx->err, cx->err_len,
              "'%s' is not a regular file or directory (fifo, socket or device): refusing "
              "to deploy",
              rel(cx, sp));
      rc = -1;
    }
  }
  if (rc == 0 && errno != 0) {
    wk_errf(cx->err, cx->err_len, "cannot read directory '%s': %s", rel(cx, src), strerror(errno));
    rc = -1;
  }
  closedir(d);
  if (rc == 0 && fsync_path(dst, O_DIRECTORY) != 0) {
    wk_errf(cx->err, cx->err_len, "cannot sync %s: %s", dst, strerror(errno));
    rc = -1;
  }
  return rc;
}

/* Copies the whole source tree (src_real, a realpath) into the existing directory dst
 * with the deploy's rules; buf is CS_COPY_BUF bytes of scratch. */
static int copy_source(const char *src_real, const char *dst, char *buf, char *err,
                       size_t err_len) {
  copy_ctx cx = {.src_root = src_real,
                 .src_root_len = strlen(src_real),
                 .entries = 0,
                 .buf = buf,
                 .err = err,
                 .err_len = err_len};
  return copy_tree(&cx, src_real, dst, 0);
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
  (void)st;
  (void)flag;
  (void)ftw;
  (void)remove(path);
  return 0;
}

/* Removes a tree (best effort; never follows symlinks). */
static void rm_tree(const char *path) { (void)nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS); }

/* mkdir -p for the code root. */
static int mkdir_p(const char *path, char *err, size_t err_len) {
  char p[CS_PATH_MAX];
  int n = snprintf(p, sizeof p, "%s", path);
  if (n < 0 || (size_t)n >= sizeof p) {
    wk_errf(err, err_len, "code root path too long: %s", path);
    return -1;
  }
  for (char *s = p + 1; *s; s++) {
    if (*s != '/') continue;
    *s = '\0';
    if (mkdir(p, 0755) != 0 && errno != EEXIST) {
      wk_errf(err, err_len, "cannot create %s: %s", p, strerror(errno));
      return -1;
    }
    *s = '/';
  }
  if (mkdir(p, 0755) != 0 && errno != EEXIST) {
    wk_errf(err, err_len, "cannot create code root %s: %s", p, strerror(errno));
    return -1;
  }
  if (!is_dir(p)) {
    wk_errf(err, err_len, "code root %s is not a directory", p);
    return -1;
  }
  return 0;
}

/* mkdir -p root, then root/function: *created when this call made the latter. */
static int make_fn_dir(const char *root, const char *fn_dir, bool *created, char *err,
                       size_t err_len) {
  *created = false;
  if (mkdir_p(root, err, err_len) != 0) return -1;
  if (mkdir(fn_dir, 0755) == 0) {
    *created = true;
  } else if (errno != EEXIST || !is_dir(fn_dir)) {
    wk_errf(err, err_len, "cannot create %s: %s", fn_dir,
            errno == EEXIST ? "exists and is not a directory" : strerror(errno));
    return -1;
  }
  return 0;
}

/* The highest published epoch and CURRENT (when readable) of fn_dir; under the lock. */
static int locked_state(const char *fn_dir, const char *function, uint64_t *highest, uint64_t *cur,
                        bool *have_current, char *err, size_t err_len) {
  size_t n = 0;
  if (scan_epochs(fn_dir, highest, NULL, &n, err, err_len) != 0) return -1;
  char ignored[8];
  *have_current = read_current(fn_dir, function, cur, ignored, sizeof ignored) == CUR_OK;
  return 0;
}

/* ---- deploy: publishing ------------------------------------------------------------ */

/* rename(from, to) that never replaces an existing `to` (EEXIST / ENOTEMPTY then). */
static int rename_noreplace(const char *from, const char *to) {
  int rc = renameat2(AT_FDCWD, from, AT_FDCWD, to, RENAME_NOREPLACE);
  if (rc != 0 && (errno == EINVAL || errno == ENOSYS)) {
    /* No RENAME_NOREPLACE on this file system. Check, then rename(), which refuses a
     * non-empty target; epochs are published under the deploy lock, so only a
     * deployer ignoring the lock could race between the two. */
    if (is_dir(to)) {
      errno = EEXIST;
      return -1;
    }
    rc = rename(from, to);
  }
  return rc;
}

/* Moves staging to fn_dir/<epoch>, trying the next epochs when one is taken. */
static int publish(const char *staging, const char *fn_dir, const char *function, uint64_t *epoch,
                   char *err, size_t err_len) {
  for (unsigned attempt = 0; attempt < WK_CODE_STORE_DEPLOY_RETRIES; attempt++) {
    char num[24], target[CS_PATH_MAX];
    snprintf(num, sizeof num, "%" PRIu64, *epoch);
    if (!join(target, sizeof target, fn_dir, num)) {
      wk_errf(err, err_len, "code root path too long: %s", fn_dir);
      return -1;
    }
    int rc = rename_noreplace(staging, target);
    if (rc == 0) {
      if (fsync_path(fn_dir, O_DIRECTORY) != 0) {
        wk_errf(err, err_len, "epoch %" PRIu64 " of '%s' published but %s cannot be synced: %s",
                *epoch, function, fn_dir, strerror(errno));
        return -1;
      }
      return 0;
    }
    if (errno != EEXIST && errno != ENOTEMPTY) {
      wk_errf(err, err_len, "cannot publish %s as %s: %s", staging, target, strerror(errno));
      return -1;
    }
    (*epoch)++; /* another deploy took this epoch */
  }
  wk_errf(err, err_len,
          "could not publish '%s': %u epochs in a row were taken by other deploys; retry", function,
          WK_CODE_STORE_DEPLOY_RETRIES);
  return -1;
}

/* Writes CURRENT.tmp-<pid> and renames it over CURRENT. */
static int switch_current(const char *fn_dir, const char *function, uint64_t epoch, char *err,
                          size_t err_len) {
  char tmp[CS_PATH_MAX], cur[CS_PATH_MAX], name[48], text[24];
  snprintf(name, sizeof name, "%s.tmp-%ld", CS_CURRENT, (long)getpid());
  if (!join(tmp, sizeof tmp, fn_dir, name) || !join(cur, sizeof cur, fn_dir, CS_CURRENT)) {
    wk_errf(err, err_len, "code root path too long: %s", fn_dir);
    return -1;
  }
  int n = snprintf(text, sizeof text, "%" PRIu64 "\n", epoch);
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) goto fail;
  if (write_all(fd, text, (size_t)n) != 0 || fsync(fd) != 0) {
    int e = errno;
    close(fd);
    errno = e;
    goto fail;
  }
  if (close(fd) != 0 || rename(tmp, cur) != 0) goto fail;
  if (fsync_path(fn_dir, O_DIRECTORY) != 0) goto fail;
  return 0;
fail:;
  int e = errno;
  (void)unlink(tmp);
  wk_errf(err, err_len,
          "CURRENT of '%s' could not be switched to epoch %" PRIu64
          " (%s: %s); the epoch can still be pinned by number",
          function, epoch, cur, strerror(e));
  return -1;
}

/* ---- locking -------------------------------------------------------------------- */

/* Takes the deploy lock of fn_dir (creating the lock file); returns its fd or -1. */
static int lock_function(const char *fn_dir, char *err, size_t err_len) {
  char lock_path[CS_PATH_MAX];
  if (!join(lock_path, sizeof lock_path, fn_dir, CS_LOCK)) {
    wk_errf(err, err_len, "code root path too long: %s", fn_dir);
    return -1;
  }
  int fd = open(lock_path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    wk_errf(err, err_len, "cannot open %s: %s", lock_path, strerror(errno));
    return -1;
  }
  while (flock(fd, LOCK_EX) != 0) {
    if (errno != EINTR) {
      wk_errf(err, err_len, "cannot lock %s: %s", lock_path, strerror(errno));
      close(fd);
      return -1;
    }
  }
  return fd;
}

/* fn_dir for a valid function name under a non-empty root, or -1 with err. */
static int function_dir(const char *root, const char *function, char *fn_dir, size_t len, char *err,
                        size_t err_len) {
  if (!wk_code_store_valid_function_name(function)) {
    name_err(function, err, err_len);
    return -1;
  }
  if (!root || !*root) {
    wk_errf(err, err_len, "no code root given");
    return -1;
  }
  if (!join(fn_dir, len, root, function)) {
    wk_errf(err, err_len, "code root path too long: %s", root);
    return -1;
  }
  return 0;
}

/* ---- digests ------------------------------------------------------------------- */

static int by_name(const struct dirent **a, const struct dirent **b) {
  return strcmp((*a)->d_name, (*b)->d_name);
}

static int not_dots(const struct dirent *d) {
  return strcmp(d->d_name, ".") != 0 && strcmp(d->d_name, "..") != 0;
}

/* Feeds the tree `dir` (its path relative to the epoch is `rel`, "" at the top) into md
 * in name order: "D rel\0" per directory, "F rel\0x|- size\0content" per file. */
static int digest_tree(EVP_MD_CTX *md, const char *dir, const char *rel, unsigned depth, char *buf,
                       char *err, size_t err_len) {
  struct dirent **names = NULL;
  int n = scandir(dir, &names, not_dots, by_name);
  if (n < 0) {
    wk_errf(err, err_len, "cannot read directory %s: %s", dir, strerror(errno));
    return -1;
  }
  int rc = 0;
  for (int i = 0; i < n; i++) {
    char path[CS_PATH_MAX], sub[CS_PATH_MAX];
    const char *name = names[i]->d_name;
    int w = rel[0] ? snprintf(sub, sizeof sub, "%s/%s", rel, name)
                   : snprintf(sub, sizeof sub, "%s", name);
    struct stat st;
    if (rc != 0) continue; /* free the rest */
    if (w < 0 || (size_t)w >= sizeof sub || !join(path, sizeof path, dir, name) ||
        lstat(path, &st) != 0) {
      wk_errf(err, err_len, "cannot digest %s/%s", dir, name);
      rc = -1;
      continue;
    }
    if (S_ISDIR(st.st_mode) && depth < WK_CODE_STORE_MAX_DEPTH) {
      EVP_DigestUpdate(md, "D ", 2);
      EVP_DigestUpdate(md, sub, strlen(sub) + 1);
      rc = digest_tree(md, path, sub, depth + 1, buf, err, err_len);
      continue;
    }
    int fd = S_ISREG(st.st_mode) ? open(path, O_RDONLY | O_CLOEXEC) : -1;
    if (fd < 0) {
      wk_errf(err, err_len, "cannot digest %s: not a readable regular file", path);
      rc = -1;
      continue;
    }
    char head[48];
    int hn = snprintf(head, sizeof head, "%c %lld", (st.st_mode & 0111) ? 'x' : '-',
                      (long long)st.st_size);
    EVP_DigestUpdate(md, "F ", 2);
    EVP_DigestUpdate(md, sub, strlen(sub) + 1);
    EVP_DigestUpdate(md, head, (size_t)hn + 1);
    for (;;) {
      ssize_t r = read(fd, buf, CS_COPY_BUF);
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) {
        wk_errf(err, err_len, "cannot read %s: %s", path, strerror(errno));
        rc = -1;
      }
      if (r <= 0) break;
      EVP_DigestUpdate(md, buf, (size_t)r);
    }
    close(fd);
  }
  for (int i = 0; i < n; i++) free(names[i]);
  free(names);
  return rc;
}

/* The sha256 of the tree `dir` as hex into out (WK_CODE_STORE_DIGEST_HEX + 1 bytes). */
static int digest_dir(const char *dir, char *buf, char *out, char *err, size_t err_len) {
  EVP_MD_CTX *md = EVP_MD_CTX_new();
  if (!md || EVP_DigestInit_ex(md, EVP_sha256(), NULL) != 1) {
    EVP_MD_CTX_free(md);
    wk_errf(err, err_len, "sha256 is not available from libcrypto");
    return -1;
  }
  int rc = digest_tree(md, dir, "", 0, buf, err, err_len);
  unsigned char d[EVP_MAX_MD_SIZE];
  unsigned int dn = 0;
  if (rc == 0 && EVP_DigestFinal_ex(md, d, &dn) != 1) rc = -1;
  EVP_MD_CTX_free(md);
  if (rc != 0) return -1;
  WK_ASSERT(dn * 2 == WK_CODE_STORE_DIGEST_HEX);
  for (unsigned i = 0; i < dn; i++) snprintf(out + 2 * i, 3, "%02x", d[i]);
  return 0;
}

static bool digest_path(const char *fn_dir, uint64_t epoch, char *out, size_t len) {
  int n = snprintf(out, len, "%s/%" PRIu64 CS_DIGEST_SUFFIX, fn_dir, epoch);
  return n >= 0 && (size_t)n < len;
}

static int read_digest(const char *fn_dir, uint64_t epoch, char *hex) {
  char p[CS_PATH_MAX];
  if (!digest_path(fn_dir, epoch, p, sizeof p)) return -1;
  FILE *f = fopen(p, "re");
  if (!f) return -1;
  char line[WK_CODE_STORE_DIGEST_HEX + 4];
  bool ok = fgets(line, sizeof line, f) != NULL && strlen(line) >= WK_CODE_STORE_DIGEST_HEX;
  fclose(f);
  if (!ok) return -1;
  for (unsigned i = 0; i < WK_CODE_STORE_DIGEST_HEX; i++) {
    char c = line[i];
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return -1;
  }
  memcpy(hex, line, WK_CODE_STORE_DIGEST_HEX);
  hex[WK_CODE_STORE_DIGEST_HEX] = '\0';
  return 0;
}

static int write_digest(const char *fn_dir, uint64_t epoch, const char *hex, char *err,
                        size_t err_len) {
  char p[CS_PATH_MAX], tmp[CS_PATH_MAX + 32];
  if (!digest_path(fn_dir, epoch, p, sizeof p)) {
    wk_errf(err, err_len, "code root path too long: %s", fn_dir);
    return -1;
  }
  snprintf(tmp, sizeof tmp, "%s.tmp-%ld", p, (long)getpid());
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0444);
  char line[WK_CODE_STORE_DIGEST_HEX + 2];
  int n = snprintf(line, sizeof line, "%s\n", hex);
  bool ok = fd >= 0 && write_all(fd, line, (size_t)n) == 0 && fsync(fd) == 0;
  int e = errno;
  if (fd >= 0 && close(fd) != 0) ok = false;
  if (ok && rename(tmp, p) != 0) {
    e = errno;
    ok = false;
  }
  if (!ok) {
    (void)unlink(tmp);
    wk_errf(err, err_len, "cannot write %s: %s", p, strerror(e));
    return -1;
  }
  return 0;
}

int wk_code_store_digest(const char *root, const char *function, uint64_t epoch, char *hex) {
  char fn_dir[CS_PATH_MAX];
  hex[0] = '\0';
  if (function_dir(root, function, fn_dir, sizeof fn_dir, NULL, 0) != 0) return -1;
  return read_digest(fn_dir, epoch, hex);
}

/* The published epoch whose recorded digest is `hex`, or 0. */
static uint64_t epoch_with_digest(const char *fn_dir, const char *hex) {
  uint64_t highest = 0, *all = NULL, found = 0;
  size_t n = 0;
  char ignored[8];
  if (scan_epochs(fn_dir, &highest, &all, &n, ignored, sizeof ignored) != 0) return 0;
  for (size_t i = n; i-- > 0 && !found;) {
    char d[WK_CODE_STORE_DIGEST_HEX + 1];
    if (read_digest(fn_dir, all[i], d) == 0 && strcmp(d, hex) == 0) found = all[i];
  }
  free(all);
  return found;
}

/* ---- deploy ----------------------------------------------------------------------- */

/* Checks src_dir before anything is created; its real path into src_real. */
static int check_source(const char *src_dir, char *src_real, char *err, size_t err_len) {
  if (!src_dir || !*src_dir) {
    wk_errf(err, err_len, "no source directory given");
    return -1;
  }
  struct stat st;
  if (stat(src_dir, &st) != 0) {
    wk_errf(err, err_len, "source directory %s: %s", src_dir, strerror(errno));
    return -1;
  }
  if (!S_ISDIR(st.st_mode)) {
    wk_errf(err, err_len, "source %s is not a directory", src_dir);
    return -1;
  }
  if (!realpath(src_dir, src_real)) {
    wk_errf(err, err_len, "source directory %s: %s", src_dir, strerror(errno));
    return -1;
  }
  if (access(src_real, R_OK | X_OK) != 0) {
    wk_errf(err, err_len, "source directory %s is not readable: %s", src_dir, strerror(errno));
    return -1;
  }
  return 0;
}

int wk_code_store_deploy(const char *root, const char *function, const char *src_dir,
                         uint64_t *epoch, char *err, size_t err_len) {
  WK_ASSERT(epoch);
  wk_code_deploy_result r;
  if (wk_code_store_deploy_opts(root, function, src_dir, NULL, &r, err, err_len) != 0) return -1;
  *epoch = r.epoch;
  return 0;
}

int wk_code_store_deploy_opts(const char *root, const char *function, const char *src_dir,
                              const wk_code_deploy_opts *opts, wk_code_deploy_result *out,
                              char *err, size_t err_len) {
  WK_ASSERT(out);
  WK_ASSERT(err || err_len == 0);
  memset(out, 0, sizeof *out);
  char fn_dir[CS_PATH_MAX], lock_path[CS_PATH_MAX];
  if (function_dir(root, function, fn_dir, sizeof fn_dir, err, err_len) != 0) return -1;
  /* Check the source first: a deploy of a missing directory changes nothing at all. */
  char src_real[PATH_MAX];
  if (check_source(src_dir, src_real, err, err_len) != 0) return -1;
  if (!join(lock_path, sizeof lock_path, fn_dir, CS_LOCK)) {
    wk_errf(err, err_len, "code root path too long: %s", root);
    return -1;
  }
  bool created_fn = false;
  if (make_fn_dir(root, fn_dir, &created_fn, err, err_len) != 0) return -1;

  int rc = -1;
  char staging[CS_PATH_MAX] = "";
  char *buf = NULL;
  int lock_fd = -1;
  /* The staging directory must not land inside the tree being copied. */
  char fn_real[PATH_MAX];
  size_t src_len = strlen(src_real);
  if (!realpath(fn_dir, fn_real)) {
    wk_errf(err, err_len, "cannot resolve %s: %s", fn_dir, strerror(errno));
    goto out;
  }
  if (strncmp(fn_real, src_real, src_len) == 0 &&
      (fn_real[src_len] == '/' || fn_real[src_len] == '\0' || src_len == 1)) {
    wk_errf(err, err_len,
            "source directory %s contains the code store's directory %s: deploy from a "
            "directory outside the code root",
            src_dir, fn_dir);
    goto out;
  }
  lock_fd = lock_function(fn_dir, err, err_len);
  if (lock_fd < 0) goto out;

  /* Under the lock: the next epoch is above every published one and above CURRENT. */
  uint64_t highest = 0, cur = 0;
  bool have_current = false;
  if (locked_state(fn_dir, function, &highest, &cur, &have_current, err, err_len) != 0) goto out;
  if (have_current && cur > highest) highest = cur;
  if (highest >= CS_EPOCH_MAX) {
    wk_errf(err, err_len, "function '%s' has run out of epochs", function);
    goto out;
  }
  uint64_t e = highest + 1;

  char sname[64];
  snprintf(sname, sizeof sname, ".staging-%" PRIu64 "-%ld", e, (long)getpid());
  if (!join(staging, sizeof staging, fn_dir, sname)) {
    wk_errf(err, err_len, "code root path too long: %s", root);
    staging[0] = '\0';
    goto out;
  }
  rm_tree(staging); /* left over by a crashed deploy of a process with our pid */
  if (mkdir(staging, 0755) != 0) {
    wk_errf(err, err_len, "cannot create %s: %s", staging, strerror(errno));
    staging[0] = '\0';
    goto out;
  }
  buf = wk_xmalloc(CS_COPY_BUF);
  if (copy_source(src_real, staging, buf, err, err_len) != 0) goto out;
  if (digest_dir(staging, buf, out->digest, err, err_len) != 0) goto out;
  if (opts && opts->check && opts->check(opts->check_ud, staging, err, err_len) != 0) goto out;
  uint64_t same = epoch_with_digest(fn_dir, out->digest);
  if (same) { /* this content is published already: make that epoch CURRENT */
    created_fn = false;
    if ((!have_current || cur != same) && switch_current(fn_dir, function, same, err, err_len) != 0)
      goto out;
    out->epoch = same;
    out->reused = true;
    rc = 0;
    goto out;
  }
  if (publish(staging, fn_dir, function, &e, err, err_len) != 0) goto out;
  staging[0] = '\0'; /* it is the epoch now */
  WK_ASSERT(e > highest);
  created_fn = false; /* the function holds a published epoch: never remove it */
  if (write_digest(fn_dir, e, out->digest, err, err_len) != 0) goto out;
  if (switch_current(fn_dir, function, e, err, err_len) != 0) goto out;
  out->epoch = e;
  rc = 0;
out:
  free(buf);
  if (staging[0]) rm_tree(staging);
  if (rc != 0 && created_fn) {
    (void)unlink(lock_path);
    (void)rmdir(fn_dir);
  }
  if (lock_fd >= 0) close(lock_fd); /* releases the flock */
  return rc;
}

/* ---- rollback ---------------------------------------------------------------------- */

int wk_code_store_set_current(const char *root, const char *function, uint64_t epoch, uint64_t *now,
                              char *err, size_t err_len) {
  WK_ASSERT(now);
  return wk_code_store_set_current_digest(root, function, epoch, NULL, now, NULL, err, err_len) ==
                 WK_CODE_STORE_OK
             ? 0
             : -1;
}

/* ---- pins ------------------------------------------------------------------------- */

typedef struct pin_entry {
  char function[WK_CODE_STORE_NAME_MAX + 1];
  uint64_t epoch; /* 0: the holds of the function */
  uint32_t count;
} pin_entry;

struct wk_code_pins {
  pthread_mutex_t mu;
  pin_entry *items;
  size_t n, cap;
};

wk_code_pins *wk_code_pins_create(void) {
  wk_code_pins *p = wk_xcalloc(1, sizeof *p);
  pthread_mutex_init(&p->mu, NULL);
  return p;
}

void wk_code_pins_destroy(wk_code_pins *p) {
  if (!p) return;
  pthread_mutex_destroy(&p->mu);
  free(p->items);
  free(p);
}

/* The entry of (function, epoch); with create, made when missing. Under p->mu. */
static pin_entry *pin_find(wk_code_pins *p, const char *function, uint64_t epoch, bool create) {
  for (size_t i = 0; i < p->n; i++) {
    if (p->items[i].epoch == epoch && strcmp(p->items[i].function, function) == 0)
      return &p->items[i];
  }
  if (!create) return NULL;
  if (p->n == p->cap) {
    p->cap = p->cap ? p->cap * 2 : 16;
    p->items = wk_xrealloc(p->items, p->cap * sizeof *p->items);
  }
  pin_entry *e = &p->items[p->n++];
  wk_str_copy(e->function, sizeof e->function, function);
  e->epoch = epoch;
  e->count = 0;
  return e;
}

static void pin_add(wk_code_pins *p, const char *function, uint64_t epoch, int delta) {
  pthread_mutex_lock(&p->mu);
  pin_entry *e = pin_find(p, function, epoch, delta > 0);
  WK_ASSERT(e || delta < 0);
  if (e) {
    WK_ASSERT(delta > 0 || e->count > 0); /* as many unpins as pins */
    e->count = (uint32_t)((int64_t)e->count + delta);
    if (e->count == 0) *e = p->items[--p->n]; /* unordered: the last one fills the gap */
  }
  pthread_mutex_unlock(&p->mu);
}

void wk_code_pins_hold(wk_code_pins *p, const char *function) { pin_add(p, function, 0, 1); }
void wk_code_pins_release(wk_code_pins *p, const char *function) { pin_add(p, function, 0, -1); }

void wk_code_pins_pin(wk_code_pins *p, const char *function, uint64_t epoch) {
  WK_ASSERT(epoch > 0);
  pin_add(p, function, epoch, 1);
}

void wk_code_pins_unpin(wk_code_pins *p, const char *function, uint64_t epoch) {
  WK_ASSERT(epoch > 0);
  pin_add(p, function, epoch, -1);
}

uint32_t wk_code_pins_count(wk_code_pins *p, const char *function, uint64_t epoch) {
  pthread_mutex_lock(&p->mu);
  const pin_entry *e = pin_find(p, function, epoch, false);
  uint32_t n = e ? e->count : 0;
  pthread_mutex_unlock(&p->mu);
  return n;
}

/* ---- removal of old epochs ---------------------------------------------------------- */

/* Renames fn_dir/<epoch> to `gone` unless pins hold the function or pin the epoch:
 * decided and done under the pins' mutex. */
static bool take_epoch(wk_code_pins *pins, const char *fn_dir, const char *function, uint64_t epoch,
                       const char *gone) {
  char dir[CS_PATH_MAX];
  if (snprintf(dir, sizeof dir, "%s/%" PRIu64, fn_dir, epoch) >= (int)sizeof dir) return false;
  if (pins) pthread_mutex_lock(&pins->mu);
  bool busy =
      pins && (pin_find(pins, function, 0, false) || pin_find(pins, function, epoch, false));
  bool taken = !busy && rename(dir, gone) == 0;
  if (pins) pthread_mutex_unlock(&pins->mu);
  return taken;
}

int wk_code_store_prune(const char *root, const char *function, uint32_t keep, wk_code_pins *pins,
                        uint64_t *removed, size_t cap, size_t *n_removed, char *err,
                        size_t err_len) {
  WK_ASSERT(n_removed && (removed || cap == 0));
  *n_removed = 0;
  char fn_dir[CS_PATH_MAX];
  if (function_dir(root, function, fn_dir, sizeof fn_dir, err, err_len) != 0) return -1;
  if (keep == 0 || !is_dir(fn_dir)) return 0;
  int lock_fd = lock_function(fn_dir, err, err_len);
  if (lock_fd < 0) return -1;
  uint64_t highest = 0, *all = NULL, cur = 0;
  size_t n = 0;
  int rc = scan_epochs(fn_dir, &highest, &all, &n, err, err_len);
  char ignored[8];
  /* without a readable CURRENT nothing is removed: which epoch is live is unknown */
  if (rc == 0 && read_current(fn_dir, function, &cur, ignored, sizeof ignored) == CUR_OK) {
    for (size_t i = 0; n > keep && i < n - keep; i++) {
      if (all[i] == cur) continue;
      char gone[CS_PATH_MAX], digest[CS_PATH_MAX];
      int w = snprintf(gone, sizeof gone, "%s/.removing-%" PRIu64 "-%ld", fn_dir, all[i],
                       (long)getpid());
      if (w < 0 || (size_t)w >= sizeof gone) break;
      if (!take_epoch(pins, fn_dir, function, all[i], gone)) continue;
      rm_tree(gone);
      if (digest_path(fn_dir, all[i], digest, sizeof digest)) (void)unlink(digest);
      if (*n_removed < cap) removed[*n_removed] = all[i];
      (*n_removed)++;
    }
  }
  free(all);
  close(lock_fd);
  return rc;
}

/* ---- deploys from a list of files -------------------------------------------------- */

/* A printable excerpt of a path for messages (at most 80 bytes of it). */
static void path_excerpt(const char *p, char *out, size_t len) {
  size_t n = strlen(p);
  escape_preview(p, n > 80 ? 80 : n, out, len);
  if (n > 80 && strlen(out) + 4 < len) strcat(out, "...");
}

/* Why `p` is not a usable relative file path, or NULL when it is. */
static const char *path_problem(const char *p) {
  size_t n = strlen(p);
  if (n == 0) return "is empty";
  if (n > WK_CODE_STORE_PATH_MAX)
    return "is longer than "
           "1024"
           " bytes";
  if (p[0] == '/')
    return "is absolute (starts with '/'): paths are relative to the function's tree";
  unsigned parts = 0;
  for (const char *c = p;;) {
    const char *end = strchr(c, '/');
    size_t len = end ? (size_t)(end - c) : strlen(c);
    if (len == 0) return "has an empty component ('//' or a trailing '/')";
    if ((len == 1 && c[0] == '.') || (len == 2 && c[0] == '.' && c[1] == '.'))
      return "has a '.' or '..' component";
    if (len == 11 && memcmp(c, "__pycache__", 11) == 0)
      return "is under __pycache__ (leave compiled files out: the store never publishes them)";
    for (size_t i = 0; i < len; i++) {
      unsigned char ch = (unsigned char)c[i];
      if (ch < 0x20 || ch == 0x7f) return "holds a control character";
    }
    if (++parts > WK_CODE_STORE_MAX_DEPTH)
      return "has more than "
             "32"
             " components";
    if (!end) break;
    c = end + 1;
  }
  return NULL;
}

/* Traversal order of the digest: component by component, each compared as strcmp
 * does (so '/' sorts below every byte a name can hold). */
static int tree_order(const char *a, const char *b) {
  for (;; a++, b++) {
    unsigned char x = (unsigned char)*a, y = (unsigned char)*b;
    if (x == '/') x = 1;
    if (y == '/') y = 1;
    if (x != y || x == 0) return (x > y) - (x < y);
  }
}

static int by_path_ptr(const void *a, const void *b) {
  const wk_code_file *x = *(const wk_code_file *const *)a, *y = *(const wk_code_file *const *)b;
  return tree_order(x->path, y->path);
}

/* The files in the digest's traversal order (malloc'd array of pointers). */
static const wk_code_file **sorted_files(const wk_code_file *files, size_t n) {
  const wk_code_file **v = wk_xcalloc(n ? n : 1, sizeof *v);
  for (size_t i = 0; i < n; i++) v[i] = &files[i];
  qsort(v, n, sizeof *v, by_path_ptr);
  return v;
}

/* Whether the first `len` bytes of p name a file of the sorted list (tree order). */
static bool is_listed(const wk_code_file **v, size_t n, const char *p, size_t len) {
  char key[WK_CODE_STORE_PATH_MAX + 1];
  memcpy(key, p, len);
  key[len] = '\0';
  size_t lo = 0, hi = n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    int c = tree_order(v[mid]->path, key);
    if (c == 0) return true;
    if (c < 0) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return false;
}

int wk_code_store_check_files(const wk_code_file *files, size_t n, size_t max_files,
                              uint64_t max_bytes, char *err, size_t err_len) {
  WK_ASSERT(files || n == 0);
  if (n == 0) {
    wk_errf(err, err_len, "no files: a deploy needs at least one (e.g. main.py)");
    return -1;
  }
  if (max_files && n > max_files) {
    wk_errf(err, err_len, "%zu files, more than the %zu allowed", n, max_files);
    return -1;
  }
  uint64_t total = 0;
  for (size_t i = 0; i < n; i++) {
    char shown[400];
    const char *p = files[i].path ? files[i].path : "";
    const char *why = path_problem(p);
    if (why) {
      path_excerpt(p, shown, sizeof shown);
      wk_errf(err, err_len, "files[%zu].path \"%s\" %s", i, shown, why);
      return -1;
    }
    if (files[i].len > 0 && !files[i].content) {
      wk_errf(err, err_len, "files[%zu] has no content", i);
      return -1;
    }
    total += files[i].len;
    if (max_bytes && total > max_bytes) {
      wk_errf(err, err_len, "the files' contents exceed %" PRIu64 " bytes (at files[%zu])",
              max_bytes, i);
      return -1;
    }
  }
  const wk_code_file **v = sorted_files(files, n);
  int rc = 0;
  for (size_t i = 0; i < n && rc == 0; i++) {
    char shown[400];
    if (i > 0 && strcmp(v[i]->path, v[i - 1]->path) == 0) {
      path_excerpt(v[i]->path, shown, sizeof shown);
      wk_errf(err, err_len, "path \"%s\" is listed twice", shown);
      rc = -1;
      break;
    }
    for (const char *s = strchr(v[i]->path, '/'); s; s = strchr(s + 1, '/')) {
      if (is_listed(v, n, v[i]->path, (size_t)(s - v[i]->path))) {
        path_excerpt(v[i]->path, shown, sizeof shown);
        wk_errf(err, err_len,
                "path \"%s\" lies under \"%.*s\", which is listed as a file: a path cannot be "
                "both a file and a directory",
                shown, (int)(s - v[i]->path), v[i]->path);
        rc = -1;
        break;
      }
    }
  }
  free(v);
  return rc;
}

/* Feeds one file the way digest_tree does: "F rel\0x|- size\0content". */
static void digest_one_file(EVP_MD_CTX *md, const wk_code_file *f) {
  char head[48];
  int hn = snprintf(head, sizeof head, "%c %lld", f->executable ? 'x' : '-', (long long)f->len);
  EVP_DigestUpdate(md, "F ", 2);
  EVP_DigestUpdate(md, f->path, strlen(f->path) + 1);
  EVP_DigestUpdate(md, head, (size_t)hn + 1);
  if (f->len) EVP_DigestUpdate(md, f->content, f->len);
}

int wk_code_store_digest_files(const wk_code_file *files, size_t n, char *hex, char *err,
                               size_t err_len) {
  WK_ASSERT(hex && (files || n == 0));
  EVP_MD_CTX *md = EVP_MD_CTX_new();
  if (!md || EVP_DigestInit_ex(md, EVP_sha256(), NULL) != 1) {
    EVP_MD_CTX_free(md);
    wk_errf(err, err_len, "sha256 is not available from libcrypto");
    return -1;
  }
  const wk_code_file **v = sorted_files(files, n);
  for (size_t i = 0; i < n; i++) {
    const char *p = v[i]->path, *prev = i > 0 ? v[i - 1]->path : NULL;
    /* each directory once, as the walk enters it: "D rel\0" */
    for (const char *s = strchr(p, '/'); s; s = strchr(s + 1, '/')) {
      size_t len = (size_t)(s - p);
      if (prev && strncmp(prev, p, len) == 0 && prev[len] == '/') continue; /* entered */
      EVP_DigestUpdate(md, "D ", 2);
      EVP_DigestUpdate(md, p, len);
      EVP_DigestUpdate(md, "", 1);
    }
    digest_one_file(md, v[i]);
  }
  free(v);
  unsigned char d[EVP_MAX_MD_SIZE];
  unsigned int dn = 0;
  int ok = EVP_DigestFinal_ex(md, d, &dn);
  EVP_MD_CTX_free(md);
  if (ok != 1) {
    wk_errf(err, err_len, "sha256 failed");
    return -1;
  }
  WK_ASSERT(dn * 2 == WK_CODE_STORE_DIGEST_HEX);
  for (unsigned i = 0; i < dn; i++) snprintf(hex + 2 * i, 3, "%02x", d[i]);
  return 0;
}

static bool valid_hex_digest(const char *s) {
  if (!s || strlen(s) != WK_CODE_STORE_DIGEST_HEX) return false;
  for (const char *c = s; *c; c++)
    if (!((*c >= '0' && *c <= '9') || (*c >= 'a' && *c <= 'f'))) return false;
  return true;
}

static _Thread_local int fsync_dirs_failed; /* nftw's callback has no context */

static int fsync_dir_one(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
  (void)st;
  (void)ftw;
  if (flag == FTW_DP && fsync_path(path, O_DIRECTORY) != 0) fsync_dirs_failed = errno;
  return 0;
}

/* Writes the files under `staging` (directories 0755, files fsynced, read-only), then
 * syncs every directory. */
static int write_files(const char *staging, const wk_code_file *files, size_t n, char *err,
                       size_t err_len) {
  for (size_t i = 0; i < n; i++) {
    char path[CS_PATH_MAX];
    if (!join(path, sizeof path, staging, files[i].path)) {
      wk_errf(err, err_len, "path too long under %s", staging);
      return -1;
    }
    size_t base = strlen(staging) + 1;
    for (char *s = strchr(path + base, '/'); s; s = strchr(s + 1, '/')) {
      *s = '\0';
      int rc = mkdir(path, 0755);
      int e = errno;
      *s = '/';
      if (rc != 0 && e != EEXIST) {
        wk_errf(err, err_len, "cannot create a directory for %s: %s", path, strerror(e));
        return -1;
      }
    }
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) {
      wk_errf(err, err_len, "cannot create %s: %s", path, strerror(errno));
      return -1;
    }
    bool ok =
        (files[i].len == 0 || write_all(fd, (const char *)files[i].content, files[i].len) == 0) &&
        fchmod(fd, files[i].executable ? 0555 : 0444) == 0 && fsync(fd) == 0;
    int e = errno;
    if (close(fd) != 0 && ok) {
      ok = false;
      e = errno;
    }
    if (!ok) {
      wk_errf(err, err_len, "cannot write %s: %s", path, strerror(e));
      return -1;
    }
  }
  fsync_dirs_failed = 0;
  (void)nftw(staging, fsync_dir_one, 16, FTW_DEPTH | FTW_PHYS);
  if (fsync_dirs_failed) {
    wk_errf(err, err_len, "cannot sync the directories under %s: %s", staging,
            strerror(fsync_dirs_failed));
    return -1;
  }
  return 0;
}

static bool epoch_published(const char *fn_dir, uint64_t e) {
  char dir[CS_PATH_MAX];
  int w = snprintf(dir, sizeof dir, "%s/%" PRIu64, fn_dir, e);
  return w > 0 && (size_t)w < sizeof dir && is_dir(dir);
}

static atomic_uint staging_seq; /* staging names unique among this process's threads */

int wk_code_store_publish_files(const char *root, const char *function, const wk_code_file *files,
                                size_t n, const wk_code_publish_opts *opts,
                                wk_code_publish_result *out, char *err, size_t err_len) {
  WK_ASSERT(opts && out && (files || n == 0));
  WK_ASSERT(err || err_len == 0);
  memset(out, 0, sizeof *out);
  char fn_dir[CS_PATH_MAX], lock_path[CS_PATH_MAX];
  if (function_dir(root, function, fn_dir, sizeof fn_dir, err, err_len) != 0)
    return WK_CODE_STORE_E_INVALID;
  if (!valid_hex_digest(opts->digest)) {
    wk_errf(err, err_len,
            "digest must be the 64 lowercase hex characters of the files' sha256 by the code "
            "store's rule (workerctl deploy prints it)");
    return WK_CODE_STORE_E_INVALID;
  }
  if (opts->epoch >= CS_EPOCH_MAX) {
    wk_errf(err, err_len, "epoch %" PRIu64 " is out of range (1..%llu, or 0 for the next)",
            opts->epoch, CS_EPOCH_MAX - 1);
    return WK_CODE_STORE_E_INVALID;
  }
  if (wk_code_store_check_files(files, n, opts->max_files, opts->max_bytes, err, err_len) != 0)
    return WK_CODE_STORE_E_INVALID;
  /* the digest first, from memory: a mismatch creates nothing at all */
  if (wk_code_store_digest_files(files, n, out->digest, err, err_len) != 0)
    return WK_CODE_STORE_E_IO;
  if (strcmp(out->digest, opts->digest) != 0) {
    wk_errf(err, err_len,
            "digest mismatch: the request names %s but the files digest to %s (sha256 over the "
            "sorted paths, executable bits and contents): send the digest of exactly these files",
            opts->digest, out->digest);
    return WK_CODE_STORE_E_DIGEST;
  }
  if (!join(lock_path, sizeof lock_path, fn_dir, CS_LOCK)) {
    wk_errf(err, err_len, "code root path too long: %s", root);
    return WK_CODE_STORE_E_INVALID;
  }
  bool created_fn = false;
  if (make_fn_dir(root, fn_dir, &created_fn, err, err_len) != 0) return WK_CODE_STORE_E_IO;
  int rc = WK_CODE_STORE_E_IO;
  char staging[CS_PATH_MAX] = "";
  char digest_file[CS_PATH_MAX] = "";
  int lock_fd = lock_function(fn_dir, err, err_len);
  if (lock_fd < 0) goto out;

  uint64_t highest = 0, cur = 0;
  bool have_current = false;
  if (locked_state(fn_dir, function, &highest, &cur, &have_current, err, err_len) != 0) goto out;
  out->previous = out->current = have_current ? cur : 0;
  uint64_t e = opts->epoch;
  bool reuse = false;
  if (e == 0) {
    e = epoch_with_digest(fn_dir, out->digest);
    reuse = e != 0;
    if (!reuse) {
      uint64_t top = have_current && cur > highest ? cur : highest;
      if (top + 1 >= CS_EPOCH_MAX) {
        wk_errf(err, err_len, "function '%s' has run out of epochs", function);
        goto out;
      }
      e = top + 1;
    }
  } else if (epoch_published(fn_dir, e)) {
    char had[WK_CODE_STORE_DIGEST_HEX + 1];
    bool recorded = read_digest(fn_dir, e, had) == 0;
    if (!recorded || strcmp(had, out->digest) != 0) {
      wk_errf(err, err_len,
              "this code root got epoch %" PRIu64
              " of '%s' from another deploy (digest %s); "
              "this deploy's digest is %s: deploy under a new epoch, or remove %s/%" PRIu64
              " if nothing needs it",
              e, function, recorded ? had : "not recorded", out->digest, fn_dir, e);
      rc = WK_CODE_STORE_E_CONFLICT;
      goto out;
    }
    reuse = true;
  }
  if (!reuse) {
    char sname[80];
    snprintf(sname, sizeof sname, ".staging-%" PRIu64 "-%ld-%u", e, (long)getpid(),
             atomic_fetch_add(&staging_seq, 1u));
    if (!join(staging, sizeof staging, fn_dir, sname)) {
      wk_errf(err, err_len, "code root path too long: %s", root);
      staging[0] = '\0';
      goto out;
    }
    if (mkdir(staging, 0755) != 0) {
      wk_errf(err, err_len, "cannot create %s: %s", staging, strerror(errno));
      staging[0] = '\0';
      goto out;
    }
    if (write_files(staging, files, n, err, err_len) != 0) goto out;
    char buf_digest[WK_CODE_STORE_DIGEST_HEX + 1];
    char *buf = wk_xmalloc(CS_COPY_BUF);
    int drc = digest_dir(staging, buf, buf_digest, err, err_len);
    free(buf);
    if (drc != 0) goto out;
    if (strcmp(buf_digest, out->digest) != 0) { /* what was written is not what was sent */
      wk_errf(err, err_len, "the files written to %s digest to %s, not %s: check the disk", staging,
              buf_digest, out->digest);
      goto out;
    }
    if (opts->check && opts->check(opts->check_ud, staging, err, err_len) != 0) {
      rc = WK_CODE_STORE_E_CHECK;
      goto out;
    }
    /* the digest first: an epoch is never seen without its digest */
    if (!digest_path(fn_dir, e, digest_file, sizeof digest_file) ||
        write_digest(fn_dir, e, out->digest, err, err_len) != 0) {
      digest_file[0] = '\0';
      goto out;
    }
    char target[CS_PATH_MAX], num[24];
    snprintf(num, sizeof num, "%" PRIu64, e);
    if (!join(target, sizeof target, fn_dir, num)) {
      wk_errf(err, err_len, "code root path too long: %s", root);
      goto out;
    }
    if (rename_noreplace(staging, target) != 0) {
      wk_errf(err, err_len, "cannot publish %s as %s: %s", staging, target,
              errno == EEXIST || errno == ENOTEMPTY
                  ? "the epoch was published meanwhile by a deploy that ignores the lock"
                  : strerror(errno));
      goto out;
    }
    staging[0] = '\0';
    digest_file[0] = '\0'; /* it belongs to the epoch now */
    created_fn = false;
    if (fsync_path(fn_dir, O_DIRECTORY) != 0) {
      wk_errf(err, err_len, "epoch %" PRIu64 " of '%s' published but %s cannot be synced: %s", e,
              function, fn_dir, strerror(errno));
      goto out;
    }
  }
  created_fn = false;
  out->epoch = e;
  out->reused = reuse;
  if (opts->make_current && (!have_current || cur != e)) {
    if (switch_current(fn_dir, function, e, err, err_len) != 0) goto out;
  }
  if (opts->make_current) out->current = e;
  rc = WK_CODE_STORE_OK;
out:
  if (staging[0]) rm_tree(staging);
  if (digest_file[0]) (void)unlink(digest_file);
  if (rc != WK_CODE_STORE_OK && created_fn) {
    (void)unlink(lock_path);
    (void)rmdir(fn_dir);
  }
  if (lock_fd >= 0) close(lock_fd);
  return rc;
}

int wk_code_store_set_current_digest(const char *root, const char *function, uint64_t epoch,
                                     const char *digest, uint64_t *now, uint64_t *previous,
                                     char *err, size_t err_len) {
  WK_ASSERT(now);
  *now = 0;
  if (previous) *previous = 0;
  char fn_dir[CS_PATH_MAX];
  if (function_dir(root, function, fn_dir, sizeof fn_dir, err, err_len) != 0)
    return WK_CODE_STORE_E_INVALID;
  bool check_digest = digest && digest[0];
  if (check_digest && !valid_hex_digest(digest)) {
    wk_errf(err, err_len, "digest must be empty or 64 lowercase hex characters");
    return WK_CODE_STORE_E_INVALID;
  }
  if (!is_dir(fn_dir)) {
    wk_errf(err, err_len, "function '%s' is not deployed (no directory %s)", function, fn_dir);
    return WK_CODE_STORE_E_NOT_FOUND;
  }
  int lock_fd = lock_function(fn_dir, err, err_len);
  if (lock_fd < 0) return WK_CODE_STORE_E_IO;
  int rc = WK_CODE_STORE_E_IO;
  uint64_t highest = 0, *all = NULL, cur = 0;
  size_t n = 0;
  if (scan_epochs(fn_dir, &highest, &all, &n, err, err_len) != 0) goto out;
  char cur_err[256];
  bool have_current = read_current(fn_dir, function, &cur, cur_err, sizeof cur_err) == CUR_OK;
  if (previous) *previous = have_current ? cur : 0;
  if (epoch == 0) {
    if (!have_current) {
      wk_errf(err, err_len, "%s; name the epoch to make CURRENT", cur_err);
      rc = WK_CODE_STORE_E_NOT_FOUND;
      goto out;
    }
    for (size_t i = 0; i < n; i++) {
      if (all[i] < cur) epoch = all[i]; /* sorted: the last one below CURRENT */
    }
    if (epoch == 0) {
      wk_errf(err, err_len,
              "function '%s' has no published epoch below CURRENT (%" PRIu64 ") to roll back to",
              function, cur);
      rc = WK_CODE_STORE_E_NOT_FOUND;
      goto out;
    }
  }
  bool published = false;
  for (size_t i = 0; i < n; i++) published = published || all[i] == epoch;
  if (!published) {
    wk_errf(err, err_len,
            "epoch %" PRIu64 " of '%s' is not published (epochs: %zu, highest %" PRIu64 ")", epoch,
            function, n, highest);
    rc = WK_CODE_STORE_E_NOT_FOUND;
    goto out;
  }
  if (check_digest) {
    char had[WK_CODE_STORE_DIGEST_HEX + 1];
    bool recorded = read_digest(fn_dir, epoch, had) == 0;
    if (!recorded || strcmp(had, digest) != 0) {
      wk_errf(err, err_len,
              "epoch %" PRIu64 " of '%s' holds digest %s here, not %s: CURRENT not moved", epoch,
              function, recorded ? had : "(not recorded)", digest);
      rc = WK_CODE_STORE_E_CONFLICT;
      goto out;
    }
  }
  if ((!have_current || cur != epoch) && switch_current(fn_dir, function, epoch, err, err_len) != 0)
    goto out;
  *now = epoch;
  rc = WK_CODE_STORE_OK;
out:
  free(all);
  close(lock_fd);
  return rc;
}

static int cmp_str_ptr(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

int wk_code_store_functions(const char *root, char ***names, size_t *count, char *err,
                            size_t err_len) {
  WK_ASSERT(names && count);
  *names = NULL;
  *count = 0;
  DIR *d = opendir(root ? root : "");
  if (!d) {
    if (errno == ENOENT) return 0;
    wk_errf(err, err_len, "cannot list %s: %s", root ? root : "(no code root)", strerror(errno));
    return -1;
  }
  char **v = NULL;
  size_t cap = 0;
  struct dirent *de;
  while ((de = readdir(d)) != NULL) {
    if (!wk_code_store_valid_function_name(de->d_name)) continue;
    char p[CS_PATH_MAX];
    if (!join(p, sizeof p, root, de->d_name) || !is_dir(p)) continue;
    if (*count == cap) {
      cap = cap ? cap * 2 : 16;
      v = wk_xrealloc(v, cap * sizeof *v);
    }
    v[(*count)++] = wk_xstrdup(de->d_name);
  }
  closedir(d);
  if (v) qsort(v, *count, sizeof *v, cmp_str_ptr);
  *names = v;
  return 0;
}

/* ---- reading a tree into a file list (workerctl deploy --fleet) ------------------------ */

typedef struct read_ctx {
  const char *top; /* the staged copy */
  size_t top_len;
  wk_code_file *files;
  size_t n, cap;
  char *err;
  size_t err_len;
} read_ctx;

/* Reads one staged file (a regular file: the copy holds nothing else) into the list. */
static int read_one(read_ctx *rx, const char *path, const struct stat *st) {
  const char *relp = path + rx->top_len + 1;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    wk_errf(rx->err, rx->err_len, "cannot read '%s': %s", relp, strerror(errno));
    return -1;
  }
  size_t len = (size_t)st->st_size, got = 0;
  uint8_t *buf = wk_xmalloc(len ? len : 1);
  while (got < len) {
    ssize_t r = read(fd, buf + got, len - got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    got += (size_t)r;
  }
  close(fd);
  if (got != len) {
    free(buf);
    wk_errf(rx->err, rx->err_len, "cannot read '%s'", relp);
    return -1;
  }
  if (rx->n == rx->cap) {
    rx->cap = rx->cap ? rx->cap * 2 : 16;
    rx->files = wk_xrealloc(rx->files, rx->cap * sizeof *rx->files);
  }
  rx->files[rx->n++] = (wk_code_file){.path = wk_xstrdup(relp),
                                      .content = buf,
                                      .len = len,
                                      .executable = (st->st_mode & 0100) != 0};
  return 0;
}

/* Walks the staged copy (directories and regular files only) in name order. */
static int read_staged(read_ctx *rx, const char *dir, unsigned depth) {
  struct dirent **names = NULL;
  int n = scandir(dir, &names, not_dots, by_name);
  if (n < 0) {
    wk_errf(rx->err, rx->err_len, "cannot read directory %s: %s", dir, strerror(errno));
    return -1;
  }
  int rc = 0;
  for (int i = 0; i < n; i++) {
    char path[CS_PATH_MAX];
    struct stat st;
    if (rc == 0 && (!join(path, sizeof path, dir, names[i]->d_name) || lstat(path, &st) != 0)) {
      wk_errf(rx->err, rx->err_len, "cannot read %s/%s", dir, names[i]->d_name);
      rc = -1;
    }
    if (rc == 0 && S_ISDIR(st.st_mode) && depth < WK_CODE_STORE_MAX_DEPTH) {
      rc = read_staged(rx, path, depth + 1);
    } else if (rc == 0) {
      rc = S_ISREG(st.st_mode) ? read_one(rx, path, &st) : -1;
      if (rc != 0 && !S_ISREG(st.st_mode))
        wk_errf(rx->err, rx->err_len, "%s: not a regular file", path);
    }
    free(names[i]);
  }
  free(names);
  return rc;
}

void wk_code_store_files_free(wk_code_file *files, size_t n) {
  for (size_t i = 0; files && i < n; i++) {
    free((char *)(uintptr_t)files[i].path);
    free((uint8_t *)(uintptr_t)files[i].content);
  }
  free(files);
}

int wk_code_store_read_tree(const char *src_dir, wk_code_file **files, size_t *n, char *err,
                            size_t err_len) {
  *files = NULL;
  *n = 0;
  char src_real[PATH_MAX];
  if (check_source(src_dir, src_real, err, err_len) != 0) return -1;
  const char *tmp = getenv("TMPDIR");
  char staging[CS_PATH_MAX];
  int w = snprintf(staging, sizeof staging, "%s/wk-deploy-XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (w < 0 || (size_t)w >= sizeof staging || !mkdtemp(staging)) {
    wk_errf(err, err_len, "cannot create a temporary directory for the copy: %s",
            w < 0 || (size_t)w >= sizeof staging ? "path too long" : strerror(errno));
    return -1;
  }
  char *buf = wk_xmalloc(CS_COPY_BUF);
  int rc = copy_source(src_real, staging, buf, err, err_len);
  read_ctx rx = {.top = staging, .top_len = strlen(staging), .err = err, .err_len = err_len};
  if (rc == 0) rc = read_staged(&rx, staging, 0);
  if (rc == 0 && rx.n == 0) {
    wk_errf(err, err_len, "source directory %s holds no file", src_dir);
    rc = -1;
  }
  free(buf);
  rm_tree(staging);
  if (rc != 0) {
    wk_code_store_files_free(rx.files, rx.n);
    return -1;
  }
  *files = rx.files;
  *n = rx.n;
  return 0;
}

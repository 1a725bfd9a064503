/* wk_writer_file.c: the "file" writer. One JSON-lines file per task in output_dir,
 * written as a hidden temporary file in the same directory, fsync'ed, moved to its
 * final name without replacing anything (atomic on one filesystem) and the directory
 * fsync'ed: a reader of the directory sees either no file or the whole file, never
 * half of it, and no task's file is ever replaced by another's.
 *
 * The final name is the `name` option, or the task id percent-encoded plus ".jsonl":
 * '%' → %25, '/' → %2F and a leading '.' → %2E, every other byte as it is (task ids are
 * printable ASCII). The encoding is reversible, so two task ids never share a file
 * ("team/a" → team%2Fa.jsonl, "team_a" → team_a.jsonl). */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "plugins/wk_writers_int.h"
#include "lib/wk_alloc.h"

#define NAME_MAX_BYTES 200    /* of the name option (the temporary adds 12 + 1) */
#define ENCODED_MAX_BYTES 240 /* of a name made from a task id: 240 + 13 < NAME_MAX (255) */
#define FLUSH_BYTES 65536

static const char *err_text(int e, char *buf, size_t n) { return strerror_r(e, buf, n); }

static const char *dir_of(const wk_writer_settings *s) {
  return s && s->output_dir ? s->output_dir : "";
}

static int file_validate(const wk_writer_settings *s, char *err, size_t len) {
  const char *dir = dir_of(s);
  char eb[128];
  if (!dir[0]) return wk_werr(err, len, "file: output_dir is not set");
  struct stat st;
  if (stat(dir, &st) != 0) {
    return wk_werr(err, len, "file: output_dir %s: %s", dir, err_text(errno, eb, sizeof eb));
  }
  if (!S_ISDIR(st.st_mode)) return wk_werr(err, len, "file: output_dir %s: not a directory", dir);
  /* Writable for real (access() says yes to root on a read-only mount): a probe file. */
  size_t n = strlen(dir) + sizeof "/.wk-probe-XXXXXX";
  char *probe = wk_xmalloc(n);
  snprintf(probe, n, "%s/.wk-probe-XXXXXX", dir);
  int fd = mkostemp(probe, O_CLOEXEC);
  if (fd < 0) {
    int e = errno;
    free(probe);
    return wk_werr(err, len, "file: output_dir %s is not writable: %s", dir,
                   err_text(e, eb, sizeof eb));
  }
  close(fd);
  unlink(probe);
  free(probe);
  return 0;
}

static int check_name(const char *name, char *err, size_t len) {
  size_t n = strlen(name);
  if (n == 0 || n > NAME_MAX_BYTES) {
    return wk_werr(err, len, "file: option name must be 1..%d bytes, got %zu", NAME_MAX_BYTES, n);
  }
  if (name[0] == '.') return wk_werr(err, len, "file: option name must not start with '.'");
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)name[i];
    if (c == '/' || c < 0x20 || c == 0x7f) {
      return wk_werr(err, len,
                     "file: option name must be one file name (no '/' or control characters)");
    }
  }
  return 0;
}

static int file_check_options(const wk_writer_option *options, size_t n, char *err, size_t len) {
  if (wk_check_option_keys("file", options, n, "name", err, len) != 0) return -1;
  const char *name = wk_option_get(options, n, "name");
  return name ? check_name(name, err, len) : 0;
}

/* The final file name: the name option, or the task id percent-encoded + ".jsonl". */
static int final_name(const wk_writer_task *t, char *out, size_t n, char *err, size_t len) {
  const char *opt = wk_option_get(t->options, t->n_options, "name");
  if (opt) {
    snprintf(out, n, "%s", opt);
    return 0;
  }
  const char *id = t->task_id ? t->task_id : "";
  if (!id[0]) return wk_werr(err, len, "file: the task has no id");
  size_t w = 0;
  for (size_t i = 0; id[i]; i++) {
    unsigned char c = (unsigned char)id[i];
    bool escape = c == '%' || c == '/' || (i == 0 && c == '.');
    if (w + (escape ? 3 : 1) + sizeof ".jsonl" > n) {
      return wk_werr(err, len,
                     "file: the task id is too long for a file name once '%%' and '/' are "
                     "encoded (at most %d bytes); give the task the result_handler option name",
                     ENCODED_MAX_BYTES);
    }
    if (escape) {
      w += (size_t)snprintf(out + w, n - w, "%%%02X", c);
    } else {
      out[w++] = (char)c;
    }
  }
  memcpy(out + w, ".jsonl", sizeof ".jsonl");
  return 0;
}

/* Moves tmp to path unless path exists (then errno EEXIST): renameat2's
 * RENAME_NOREPLACE, or link + unlink where the filesystem lacks it. Atomic either way. */
static int move_no_replace(const char *tmp, const char *path) {
  if (renameat2(AT_FDCWD, tmp, AT_FDCWD, path, RENAME_NOREPLACE) == 0) return 0;
  if (errno != EINVAL && errno != ENOSYS) return -1;
  if (link(tmp, path) != 0) return -1;
  unlink(tmp);
  return 0;
}

static int write_all(int fd, const uint8_t *p, size_t n) {
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    p += w;
    n -= (size_t)w;
  }
  return 0;
}

static int file_write(const wk_writer *w, const wk_writer_task *t, wk_buf *plugin_results,
                      char *err, size_t len) {
  (void)w;
  if (file_check_options(t->options, t->n_options, err, len) != 0) return -1;
  const char *dir = dir_of(t->settings);
  if (!dir[0]) return wk_werr(err, len, "file: output_dir is not set");
  char name[ENCODED_MAX_BYTES + 1];
  if (final_name(t, name, sizeof name, err, len) != 0) return -1;

  size_t plen = strlen(dir) + 1 + strlen(name) + 1;
  size_t tlen = strlen(dir) + 2 + strlen(name) + sizeof ".tmp-XXXXXX";
  char *path = wk_xmalloc(plen), *tmp = wk_xmalloc(tlen);
  snprintf(path, plen, "%s/%s", dir, name);
  snprintf(tmp, tlen, "%s/.%s.tmp-XXXXXX", dir, name);

  char eb[128];
  int rc = -1;
  wk_buf rec = {0}, chunk = {0};
  uint64_t records = 0, bytes = 0;
  int fd = mkostemp(tmp, O_CLOEXEC);
  if (fd < 0) {
    wk_werr(err, len, "file %s: cannot create a temporary file: %s", path,
            err_text(errno, eb, sizeof eb));
    goto out;
  }

  wk_output_iter it;
  wk_output_iter_init(&it, t);
  uint32_t index;
  int more;
  while ((more = wk_output_iter_next(&it, &rec, &index, err, len)) == 1) {
    wk_buf_append(&chunk, rec.data, rec.len);
    wk_buf_append(&chunk, "\n", 1);
    records++;
    bytes += rec.len;
    if (chunk.len >= FLUSH_BYTES) {
      if (write_all(fd, chunk.data, chunk.len) != 0) goto io_error;
      wk_buf_clear(&chunk);
    }
  }
  if (more < 0) goto fail; /* err says what */
  if (write_all(fd, chunk.data, chunk.len) != 0) goto io_error;
  if (fchmod(fd, 0644) != 0 || fsync(fd) != 0) goto io_error;
  int cfd = fd;
  fd = -1;
  if (close(cfd) != 0) goto io_error;
  if (move_no_replace(tmp, path) != 0) {
    if (errno != EEXIST) goto io_error;
    wk_werr(err, len,
            "file %s exists already: the writer never replaces a file (another task's output, "
            "or an earlier run of this task id); remove it or choose another name",
            path);
    goto fail;
  }
  tmp[0] = '\0'; /* nothing to remove from now on */
  int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) goto io_error;
  int sync_rc = fsync(dfd), sync_errno = errno;
  close(dfd);
  if (sync_rc != 0 && sync_errno != EINVAL) { /* some filesystems cannot sync a directory */
    errno = sync_errno;
    goto io_error;
  }
  wk_put_plugin_result(plugin_results, "file", path, records, bytes);
  rc = 0;
  goto out;

io_error:
  wk_werr(err, len, "file %s: %s", path, err_text(errno, eb, sizeof eb));
fail:
  if (fd >= 0) close(fd);
  if (tmp[0]) unlink(tmp);
out:
  wk_buf_free(&rec);
  wk_buf_free(&chunk);
  free(path);
  free(tmp);
  return rc;
}

const wk_writer wk_writer_file = {
    .name = "file",
    .setting = "output_dir",
    .validate = file_validate,
    .check_options = file_check_options,
    .write = file_write,
};

/* wk_output_spool.c: see wk_output_spool.h. Each record in the file is a 4-byte
 * little-endian length, then the encoded output record. */
#include "app/wk_output_spool.h"

#include <errno.h>
#include <stdarg.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lib/wk_alloc.h"
#include "lib/wk_assert.h"
#include "lib/wk_err.h"

#define NO_OUTPUT UINT64_MAX
#define HEADER 4u

struct wk_output_spool {
  int fd;
  bool failed; /* a write failed: the file no longer matches the offsets */
  char path[PATH_MAX];
  uint64_t *offsets; /* per call: where its record starts, or NO_OUTPUT */
  uint64_t calls, count, bytes;
  uint64_t end; /* the file's length once the buffer is written */
  uint8_t *wbuf;
  size_t wlen;
  /* the reader: a window of the file, [rstart, rstart + rlen) */
  uint8_t *rbuf;
  size_t rcap, rlen;
  uint64_t rstart;
  uint64_t next_index;
};

/* wk_errf, returning -1. */
__attribute__((format(printf, 3, 4))) static int fail(char *err, size_t err_len, const char *fmt,
                                                      ...) {
  va_list ap;
  va_start(ap, fmt);
  wk_verrf(err, err_len, fmt, ap);
  va_end(ap);
  return -1;
}

wk_output_spool *wk_output_spool_create(const char *path, char *err, size_t err_len) {
  int fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    wk_errf(err, err_len, "cannot create the outputs spool %s: %s", path, strerror(errno));
    return NULL;
  }
  wk_output_spool *s = wk_xcalloc(1, sizeof *s);
  s->fd = fd;
  snprintf(s->path, sizeof s->path, "%s", path);
  return s;
}

void wk_output_spool_set_calls(wk_output_spool *s, uint64_t calls) {
  WK_ASSERT(!s->offsets && s->count == 0);
  s->calls = calls;
  s->offsets = wk_xcalloc(calls ? calls : 1, sizeof *s->offsets);
  for (uint64_t i = 0; i < calls; i++) s->offsets[i] = NO_OUTPUT;
}

static int write_all(wk_output_spool *s, const uint8_t *p, size_t n, char *err, size_t err_len) {
  while (n > 0) {
    ssize_t w = write(s->fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      s->failed = true;
      return fail(err, err_len, "cannot write the outputs spool %s: %s", s->path,
                  w < 0 ? strerror(errno) : "no progress");
    }
    p += w;
    n -= (size_t)w;
  }
  return 0;
}

static int flush(wk_output_spool *s, char *err, size_t err_len) {
  if (s->wlen == 0) return 0;
  int rc = write_all(s, s->wbuf, s->wlen, err, err_len);
  s->wlen = 0;
  return rc;
}

/* Appends n bytes: through the buffer, or straight to the file when larger. */
static int append(wk_output_spool *s, const uint8_t *p, size_t n, char *err, size_t err_len) {
  if (s->wlen + n > WK_OUTPUT_SPOOL_BUFFER && flush(s, err, err_len) != 0) return -1;
  if (n > WK_OUTPUT_SPOOL_BUFFER) return write_all(s, p, n, err, err_len);
  if (!s->wbuf) s->wbuf = wk_xmalloc(WK_OUTPUT_SPOOL_BUFFER);
  memcpy(s->wbuf + s->wlen, p, n);
  s->wlen += n;
  return 0;
}

int wk_output_spool_put(wk_output_spool *s, uint64_t index, const uint8_t *rec, size_t n, char *err,
                        size_t err_len) {
  WK_ASSERT(index < s->calls);
  WK_ASSERT(s->offsets[index] == NO_OUTPUT); /* one output per call */
  if (s->failed) return fail(err, err_len, "the outputs spool %s failed before", s->path);
  if (n > UINT32_MAX) {
    return fail(err, err_len, "call %llu's output (%zu bytes) is too large to spool",
                (unsigned long long)index, n);
  }
  uint8_t header[HEADER] = {(uint8_t)n, (uint8_t)(n >> 8), (uint8_t)(n >> 16), (uint8_t)(n >> 24)};
  uint64_t at = s->end;
  if (append(s, header, HEADER, err, err_len) != 0 || append(s, rec, n, err, err_len) != 0)
    return -1;
  s->end += HEADER + n;
  s->count++;
  s->offsets[index] = at;
  s->bytes += n;
  return 0;
}

int wk_output_spool_finish(wk_output_spool *s, char *err, size_t err_len) {
  if (s->failed) return fail(err, err_len, "the outputs spool %s failed before", s->path);
  int rc = flush(s, err, err_len);
  free(s->wbuf);
  s->wbuf = NULL;
  return rc;
}

/* Makes the reader's window hold the file's bytes [off, off + need). */
static int window(wk_output_spool *s, uint64_t off, size_t need, char *err, size_t err_len) {
  if (off >= s->rstart && off + need <= s->rstart + s->rlen) return 0;
  if (need > s->rcap) {
    s->rcap = need > WK_OUTPUT_SPOOL_BUFFER ? need : WK_OUTPUT_SPOOL_BUFFER;
    free(s->rbuf);
    s->rbuf = wk_xmalloc(s->rcap);
  }
  s->rstart = off;
  s->rlen = 0;
  while (s->rlen < s->rcap) {
    ssize_t r = pread(s->fd, s->rbuf + s->rlen, s->rcap - s->rlen, (off_t)(off + s->rlen));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      return fail(err, err_len, "cannot read the outputs spool %s: %s", s->path, strerror(errno));
    }
    if (r == 0) break;
    s->rlen += (size_t)r;
  }
  if (s->rlen < need) {
    return fail(err, err_len, "the outputs spool %s is truncated at byte %llu", s->path,
                (unsigned long long)(off + s->rlen));
  }
  return 0;
}

static int source_next(void *ud, const uint8_t **data, size_t *len, char *err, size_t err_len) {
  wk_output_spool *s = ud;
  while (s->next_index < s->calls && s->offsets[s->next_index] == NO_OUTPUT) s->next_index++;
  if (s->next_index >= s->calls) return 0;
  uint64_t off = s->offsets[s->next_index++];
  if (window(s, off, HEADER, err, err_len) != 0) return -1;
  const uint8_t *h = s->rbuf + (off - s->rstart);
  size_t n = (size_t)h[0] | (size_t)h[1] << 8 | (size_t)h[2] << 16 | (size_t)h[3] << 24;
  if (window(s, off, HEADER + n, err, err_len) != 0) return -1;
  *data = s->rbuf + (off - s->rstart) + HEADER;
  *len = n;
  return 1;
}

wk_output_source wk_output_spool_source(wk_output_spool *s) {
  s->next_index = 0;
  return (wk_output_source){.next = source_next, .ud = s};
}

uint64_t wk_output_spool_count(const wk_output_spool *s) { return s->count; }

uint64_t wk_output_spool_bytes(const wk_output_spool *s) { return s->bytes; }

void wk_output_spool_destroy(wk_output_spool *s) {
  if (!s) return;
  close(s->fd);
  unlink(s->path);
  free(s->offsets);
  free(s->wbuf);
  free(s->rbuf);
  free(s);
}

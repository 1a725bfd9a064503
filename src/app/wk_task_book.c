/* wk_task_book.c: see wk_task_book.h. */
#include "app/wk_task_book.h"

#include <stdlib.h>
#include <string.h>

#include "lib/wk_alloc.h"
#include "lib/wk_buf.h"
#include "lib/wk_assert.h"
#include "lib/wk_hash.h"

/* Where one record sits in its task's log buffer. */
typedef struct log_rec {
  uint32_t index;
  size_t off, len;
} log_rec;

/* A log this short (one call's record with little or no output, the common case) is
 * kept in the entry itself. */
#define LOG_INLINE 32u

/* One entry: a single allocation holding the node, then its labels (e.labels), then
 * the strings of the id, function, builder and labels. */
typedef struct node {
  wk_task_entry e;
  struct node *next; /* in the bucket */
  uint64_t hash;
  size_t pos; /* in b->order */
  /* CallLog records, encoded as GetTaskLogsResponse field 2: in log_inline while they
   * fit (log_inline_len bytes), else in `log` */
  wk_buf log;
  uint8_t log_inline[LOG_INLINE];
  uint8_t log_inline_len;
  log_rec *recs; /* &rec_one while there is one */
  size_t n_recs, cap_recs;
  log_rec rec_one;
} node;

/* Admission order: removed entries leave a NULL behind until the next compaction. */
typedef struct slot {
  uint64_t seq;
  node *n;
} slot;

struct wk_task_book {
  wk_task_book_limits lim;
  node **buckets;
  size_t n_buckets, count;
  slot *order;
  size_t n_order, cap_order;
  size_t evict_pos; /* order positions below it hold no log */
  uint64_t next_seq;
  uint64_t log_bytes;
};

static uint64_t id_hash(const char *id) { return wk_hash64(id, strlen(id), 0x7a5cu); }

wk_task_book *wk_task_book_create(const wk_task_book_limits *limits) {
  wk_task_book *b = wk_xcalloc(1, sizeof *b);
  b->lim = *limits;
  b->n_buckets = 256; /* a power of two, doubled as the book grows */
  b->buckets = wk_xcalloc(b->n_buckets, sizeof *b->buckets);
  b->next_seq = 1;
  return b;
}

static void free_log(wk_task_book *b, node *n) {
  b->log_bytes -= n->e.log_bytes;
  n->e.log_dropped_bytes += n->e.log_bytes;
  n->e.log_bytes = 0;
  wk_buf_free(&n->log);
  n->log_inline_len = 0;
  if (n->recs != &n->rec_one) free(n->recs);
  n->recs = NULL;
  n->n_recs = n->cap_recs = 0;
}

static void free_node(wk_task_book *b, node *n) {
  free_log(b, n);
  free(n); /* the labels and strings are in the same block */
}

void wk_task_book_destroy(wk_task_book *b) {
  if (!b) return;
  for (size_t i = 0; i < b->n_order; i++) {
    if (b->order[i].n) free_node(b, b->order[i].n);
  }
  free(b->order);
  free(b->buckets);
  free(b);
}

/* The bucket of hash h among n (a power of two) buckets. */
static inline size_t bucket_of(uint64_t h, size_t n) { return (size_t)(h & (n - 1)); }

static node *find_node(const wk_task_book *b, const char *id, uint64_t h) {
  for (node *n = b->buckets[bucket_of(h, b->n_buckets)]; n; n = n->next) {
    if (n->hash == h && strcmp(n->e.task_id, id) == 0) return n;
  }
  return NULL;
}

static void grow_buckets(wk_task_book *b) {
  size_t nb = b->n_buckets * 2;
  node **nbk = wk_xcalloc(nb, sizeof *nbk);
  for (size_t i = 0; i < b->n_buckets; i++) {
    for (node *n = b->buckets[i], *next; n; n = next) {
      next = n->next;
      n->next = nbk[bucket_of(n->hash, nb)];
      nbk[bucket_of(n->hash, nb)] = n;
    }
  }
  free(b->buckets);
  b->buckets = nbk;
  b->n_buckets = nb;
}

/* Drops the NULL slots when they are most of the order (amortised O(1) per removal). */
static void compact(wk_task_book *b) {
  if (b->n_order < 64 || b->count * 2 > b->n_order) return;
  size_t w = 0;
  size_t evict = 0;
  for (size_t r = 0; r < b->n_order; r++) {
    if (r == b->evict_pos) evict = w;
    if (!b->order[r].n) continue;
    b->order[w] = b->order[r];
    b->order[w].n->pos = w;
    w++;
  }
  b->evict_pos = b->evict_pos >= b->n_order ? w : evict;
  b->n_order = w;
}

/* Copies s (NULL: "") to *at, moving *at past its NUL; returns the copy. */
static char *put_str(char **at, const char *s) {
  size_t len = s ? strlen(s) : 0;
  char *d = *at;
  if (len) memcpy(d, s, len);
  d[len] = '\0';
  *at += len + 1;
  return d;
}

const wk_task_entry *wk_task_book_add(wk_task_book *b, const char *task_id, const char *function,
                                      const char *builder, const wk_option *labels,
                                      size_t n_labels) {
  uint64_t h = id_hash(task_id);
  node *n = find_node(b, task_id, h);
  if (n) return &n->e;
  /* at most one entry per bucket on average: every entry a lookup walks past is a
   * cache miss in a book of 100,000 tasks */
  if (b->count + 1 > b->n_buckets) grow_buckets(b);
  function = function ? function : "";
  builder = builder ? builder : "";
  size_t bytes = sizeof *n + n_labels * sizeof *n->e.labels + strlen(task_id) + 1 +
                 strlen(function) + 1 + strlen(builder) + 1;
  for (size_t i = 0; i < n_labels; i++) {
    bytes += (labels[i].key ? strlen(labels[i].key) : 0) + 1;
    bytes += (labels[i].value ? strlen(labels[i].value) : 0) + 1;
  }
  n = wk_xcalloc(1, bytes);
  n->hash = h;
  n->e.seq = b->next_seq++;
  n->e.labels = (wk_option *)(n + 1);
  char *at = (char *)(n->e.labels + n_labels);
  n->e.task_id = put_str(&at, task_id);
  n->e.function = put_str(&at, function);
  n->e.builder = put_str(&at, builder);
  for (size_t i = 0; i < n_labels; i++) {
    n->e.labels[i].key = put_str(&at, labels[i].key);
    n->e.labels[i].value = put_str(&at, labels[i].value);
  }
  WK_ASSERT((size_t)(at - (char *)n) == bytes);
  n->e.n_labels = n_labels;
  n->next = b->buckets[bucket_of(h, b->n_buckets)];
  b->buckets[bucket_of(h, b->n_buckets)] = n;
  if (b->n_order == b->cap_order) {
    b->cap_order = b->cap_order ? b->cap_order * 2 : 64;
    b->order = wk_xrealloc(b->order, b->cap_order * sizeof *b->order);
  }
  n->pos = b->n_order;
  b->order[b->n_order++] = (slot){n->e.seq, n};
  b->count++;
  return &n->e;
}

const wk_task_entry *wk_task_book_find(const wk_task_book *b, const char *task_id) {
  node *n = find_node(b, task_id, id_hash(task_id));
  return n ? &n->e : NULL;
}

void wk_task_book_remove(wk_task_book *b, const char *task_id) {
  uint64_t h = id_hash(task_id);
  for (node **pp = &b->buckets[bucket_of(h, b->n_buckets)]; *pp; pp = &(*pp)->next) {
    node *n = *pp;
    if (n->hash != h || strcmp(n->e.task_id, task_id) != 0) continue;
    *pp = n->next;
    b->order[n->pos].n = NULL;
    b->count--;
    free_node(b, n);
    compact(b);
    return;
  }
}

size_t wk_task_book_count(const wk_task_book *b) { return b->count; }

uint64_t wk_task_book_log_bytes(const wk_task_book *b) { return b->log_bytes; }

/* ---- captured output ------------------------------------------------------------- */

static size_t put_bytes_field(uint8_t *p, uint32_t field, const uint8_t *bytes, size_t len) {
  if (len == 0) return 0;
  size_t n = wk_varint_put(p, ((uint64_t)field << 3) | 2u);
  n += wk_varint_put(p + n, len);
  memcpy(p + n, bytes, len);
  return n + len;
}

/* The task's log records. */
static const uint8_t *log_data(const node *n) {
  return n->log_inline_len ? n->log_inline : n->log.data;
}

/* Room for `rec` more bytes at the end of the task's log. */
static uint8_t *log_room(node *n, size_t rec) {
  if (n->log_inline_len == 0 && n->log.len == 0 && rec <= sizeof n->log_inline)
    return n->log_inline;  /* the first record, and a short one */
  if (n->log_inline_len) { /* it grows past the entry: moved out */
    wk_buf_append(&n->log, n->log_inline, n->log_inline_len);
    n->log_inline_len = 0;
  }
  return wk_buf_reserve(&n->log, rec);
}

static void log_wrote(node *n, uint8_t *at, size_t rec) {
  if (at == n->log_inline) {
    n->log_inline_len = (uint8_t)rec;
  } else {
    n->log.len += rec;
  }
}

static size_t varint_len(uint64_t v) {
  size_t n = 1;
  while (v >= 0x80) {
    v >>= 7;
    n++;
  }
  return n;
}

/* Evicts the logs of the oldest tasks (never `keep`'s) until `need` more bytes fit. */
static void evict_for(wk_task_book *b, uint64_t need, const node *keep) {
  while (b->log_bytes + need > b->lim.total_log_max_bytes && b->evict_pos < b->n_order) {
    node *n = b->order[b->evict_pos].n;
    if (n == keep) break; /* the newest logs left are this task's own */
    if (n) free_log(b, n);
    b->evict_pos++;
  }
}

void wk_task_book_log(wk_task_book *b, const char *task_id, uint32_t index, uint32_t attempt,
                      const uint8_t *out, size_t out_len, const uint8_t *err, size_t err_len) {
  node *n = find_node(b, task_id, id_hash(task_id));
  if (!n) return;
  /* the CallLog message: index, attempt, stdout, stderr */
  size_t body = 1 + varint_len(index) + 1 + varint_len(attempt);
  if (out_len) body += 1 + varint_len(out_len) + out_len;
  if (err_len) body += 1 + varint_len(err_len) + err_len;
  uint64_t rec = 1 + varint_len(body) + body;
  if (n->e.log_bytes + rec > b->lim.task_log_max_bytes || rec > b->lim.total_log_max_bytes) {
    n->e.log_dropped_bytes += out_len + err_len;
    return;
  }
  evict_for(b, rec, n);
  if (b->log_bytes + rec > b->lim.total_log_max_bytes) {
    n->e.log_dropped_bytes += out_len + err_len;
    return;
  }
  if (n->pos < b->evict_pos) b->evict_pos = n->pos; /* its log is the oldest kept now */
  size_t off = n->log_inline_len + n->log.len;
  uint8_t *p = log_room(n, (size_t)rec);
  size_t w = wk_varint_put(p, (2u << 3) | 2u);
  w += wk_varint_put(p + w, body);
  w += wk_varint_put(p + w, 1u << 3);
  w += wk_varint_put(p + w, index);
  w += wk_varint_put(p + w, 2u << 3);
  w += wk_varint_put(p + w, attempt);
  w += put_bytes_field(p + w, 3, out, out_len);
  w += put_bytes_field(p + w, 4, err, err_len);
  WK_ASSERT(w == rec);
  log_wrote(n, p, w);
  if (n->n_recs == 0) {
    n->recs = &n->rec_one;
    n->cap_recs = 1;
  } else if (n->n_recs == n->cap_recs) {
    n->cap_recs = n->cap_recs == 1 ? 8 : n->cap_recs * 2;
    if (n->recs == &n->rec_one) {
      n->recs = wk_xmalloc(n->cap_recs * sizeof *n->recs);
      n->recs[0] = n->rec_one;
    } else {
      n->recs = wk_xrealloc(n->recs, n->cap_recs * sizeof *n->recs);
    }
  }
  n->recs[n->n_recs++] = (log_rec){index, off, (size_t)rec};
  n->e.log_bytes += rec;
  b->log_bytes += rec;
}

bool wk_task_book_logs(const wk_task_book *b, const char *task_id, bool one_call, uint32_t call,
                       wk_buf *out) {
  const node *n = find_node(b, task_id, id_hash(task_id));
  if (!n) return false;
  for (size_t i = 0; i < n->n_recs; i++) {
    const log_rec *r = &n->recs[i];
    if (one_call && r->index != call) continue;
    wk_buf_append(out, log_data(n) + r->off, r->len);
  }
  return true;
}

/* ---- listing ------------------------------------------------------------------------ */

/* The first order position whose seq is >= seq (n_order when none). */
static size_t lower_bound(const wk_task_book *b, uint64_t seq) {
  size_t lo = 0, hi = b->n_order;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (b->order[mid].seq < seq) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return lo;
}

void wk_task_book_walk(const wk_task_book *b, uint64_t before, size_t max_examined,
                       wk_task_book_visit_fn visit, void *ud, uint64_t *next) {
  size_t pos = before == 0 ? b->n_order : lower_bound(b, before);
  size_t examined = 0;
  *next = 0;
  while (pos > 0) {
    const slot *s = &b->order[pos - 1];
    if (examined == max_examined) {
      *next = s->seq + 1; /* this one is the next page's first */
      return;
    }
    examined++;
    if (s->n && !visit(ud, &s->n->e)) {
      *next = s->seq + 1;
      return;
    }
    pos--;
  }
}

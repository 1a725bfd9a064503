/* wk_builders.c: the built-in call builders and their registry.
 *   single  the task's args are the one call's args
 *   map     a JSON array (or, with option items=FIELD, an object whose FIELD holds
 *           it): one call per item, outputs in item order
 *   range   streaming: {"start","stop","step","chunk"} → one call per chunk of the
 *           range, args {"start":a,"stop":b,"step":s}, produced lazily */
#include "plugins/wk_builders.h"

#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "lib/wk_alloc.h"

void wk_call_list_free(wk_call_list *list) {
  if (list->items != &list->one) free(list->items);
  free(list->storage);
  memset(list, 0, sizeof *list);
}

void wk_call_list_move(wk_call_list *dst, wk_call_list *src) {
  *dst = *src;
  if (src->items == &src->one) dst->items = &dst->one;
  memset(src, 0, sizeof *src);
}

static const char *const no_options[] = {NULL};
static const char *const map_options[] = {"items", NULL};

/* "the <name> builder: unknown option ..." for a key not in `known`. */
static int check_options(const char *name, const char *const *known, const wk_option *options,
                         size_t n, char *err, size_t err_len) {
  if (n == 0) return 0; /* the common case: no options, no message to prepare */
  char owner[64];
  snprintf(owner, sizeof owner, "the %s builder", name);
  return wk_option_check_keys(owner, options, n, known, err, err_len);
}

int wk_builder_check_options(const wk_builder *b, const wk_option *options, size_t n, char *err,
                             size_t err_len) {
  return check_options(b->name, b->options, options, n, err, err_len);
}

static int build_single(const wk_builder_input *in, wk_call_list *out, char *err, size_t err_len) {
  if (check_options("single", no_options, in->options, in->n_options, err, err_len) != 0) return -1;
  out->count = 1;
  out->items = &out->one;
  out->items[0].args = in->args;
  out->items[0].len = in->args_len;
  return 0;
}

static const char *json_kind(const json_t *v) {
  switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a number";
    case JSON_TRUE:
    case JSON_FALSE: return "a boolean";
    case JSON_NULL: return "null";
  }
  return "a value";
}

static json_t *parse_json_args(const wk_builder_input *in, const char *builder, char *err,
                               size_t err_len) {
  if (!in->json) {
    snprintf(err, err_len, "the %s builder needs JSON args (content_type JSON), got bytes",
             builder);
    return NULL;
  }
  json_error_t je;
  json_t *v = json_loadb((const char *)in->args, in->args_len, JSON_DECODE_ANY, &je);
  if (!v) {
    snprintf(err, err_len, "the %s builder's args are not valid JSON: %s at line %d, column %d",
             builder, je.text, je.line, je.column);
  }
  return v;
}

/* The array of items: the args, or with option items=FIELD the args object's FIELD.
 * NULL with err set when it is not there. */
static json_t *map_items(json_t *args, const wk_builder_input *in, char *err, size_t err_len) {
  const char *field = wk_option_get(in->options, in->n_options, "items");
  json_t *arr = args;
  if (field) {
    if (!json_is_object(args)) {
      snprintf(err, err_len, "the map builder's option items=%.64s needs a JSON object, got %s",
               field, json_kind(args));
      return NULL;
    }
    arr = json_object_get(args, field);
    if (!arr) {
      snprintf(err, err_len, "the map builder's option items=%.64s names no field of the args",
               field);
      return NULL;
    }
  }
  if (!json_is_array(arr)) {
    snprintf(err, err_len, "the map builder needs a JSON array of items%s%.64s, got %s",
             field ? " in field " : "", field ? field : "", json_kind(arr));
    return NULL;
  }
  return arr;
}

static int build_map(const wk_builder_input *in, wk_call_list *out, char *err, size_t err_len) {
  if (check_options("map", map_options, in->options, in->n_options, err, err_len) != 0) return -1;
  json_t *root = parse_json_args(in, "map", err, err_len);
  if (!root) return -1;
  json_t *arr = map_items(root, in, err, err_len);
  if (!arr) {
    json_decref(root);
    return -1;
  }
  size_t n = json_array_size(arr);
  if (n > in->max_calls) {
    snprintf(err, err_len, "the map has %zu items, more than the limit of %u calls per task", n,
             in->max_calls);
    json_decref(root);
    return -1;
  }
  /* One pass: every item's compact encoding goes into one block sized from the input
   * (the items' encodings are about as long as their text in it), grown when an item
   * does not fit (then only that item is encoded again). Measuring every item first
   * and then writing it encoded each item twice: ~1,100 instructions per item. */
  out->count = (uint32_t)n;
  out->items = wk_xcalloc(n ? n : 1, sizeof *out->items);
  size_t cap = in->args_len + 64, at = 0;
  uint8_t *storage = wk_xmalloc(cap);
  for (size_t i = 0; i < n; i++) {
    const json_t *item = json_array_get(arr, i);
    size_t len = json_dumpb(item, (char *)storage + at, cap - at, JSON_COMPACT | JSON_ENCODE_ANY);
    if (len > cap - at) {
      cap = 2 * cap > at + len ? 2 * cap : at + len;
      storage = wk_xrealloc(storage, cap);
      len = json_dumpb(item, (char *)storage + at, cap - at, JSON_COMPACT | JSON_ENCODE_ANY);
    }
    out->items[i].len = len;
    at += len;
  }
  out->storage = storage;
  at = 0; /* the block moved while it grew: the items point into it only now */
  for (size_t i = 0; i < n; i++) {
    out->items[i].args = storage + at;
    at += out->items[i].len;
  }
  json_decref(root);
  return 0;
}

static int get_int(json_t *obj, const char *key, int64_t dflt, int64_t *v, char *err,
                   size_t err_len) {
  json_t *x = json_object_get(obj, key);
  if (!x) {
    *v = dflt;
    return 0;
  }
  if (!json_is_integer(x)) {
    snprintf(err, err_len, "the range builder's \"%s\" must be an integer, got %s", key,
             json_kind(x));
    return -1;
  }
  *v = json_integer_value(x);
  return 0;
}

static int range_open(const wk_builder_input *in, wk_stream_state *st, char *err, size_t err_len) {
  if (check_options("range", no_options, in->options, in->n_options, err, err_len) != 0) return -1;
  json_t *obj = parse_json_args(in, "range", err, err_len);
  if (!obj) return -1;
  int rc = -1;
  if (!json_is_object(obj)) {
    snprintf(err, err_len,
             "the range builder needs an object {\"start\",\"stop\",\"step\",\"chunk\"}, got %s",
             json_kind(obj));
    goto out;
  }
  const char *key;
  json_t *val;
  json_object_foreach(obj, key, val) {
    if (strcmp(key, "start") && strcmp(key, "stop") && strcmp(key, "step") &&
        strcmp(key, "chunk")) {
      snprintf(err, err_len,
               "the range builder does not know the field \"%s\" (start, stop, step, chunk)", key);
      goto out;
    }
  }
  if (!json_object_get(obj, "stop")) {
    snprintf(err, err_len, "the range builder needs \"stop\"");
    goto out;
  }
  int64_t start, stop, step, chunk;
  if (get_int(obj, "start", 0, &start, err, err_len) ||
      get_int(obj, "stop", 0, &stop, err, err_len) ||
      get_int(obj, "step", 1, &step, err, err_len) ||
      get_int(obj, "chunk", 1, &chunk, err, err_len)) {
    goto out;
  }
  if (step <= 0) {
    snprintf(err, err_len, "the range builder's \"step\" must be positive, got %" PRId64, step);
    goto out;
  }
  if (chunk <= 0 || chunk > 1000000000) {
    snprintf(err, err_len,
             "the range builder's \"chunk\" must be between 1 and 1000000000, got %" PRId64, chunk);
    goto out;
  }
  if (start < -(INT64_C(1) << 60) || stop > (INT64_C(1) << 60) || step > (INT64_C(1) << 40)) {
    snprintf(err, err_len,
             "the range builder's start/stop must lie within +-2^60 and step below 2^40");
    goto out;
  }
  /* checked arithmetic: every product and sum of client numbers (see range_args) */
  uint64_t items = 0;
  if (stop > start) {
    uint64_t diff = (uint64_t)stop - (uint64_t)start; /* exact: < 2^64 */
    items = diff / (uint64_t)step + (diff % (uint64_t)step != 0);
  }
  uint64_t calls = items / (uint64_t)chunk + (items % (uint64_t)chunk != 0);
  if (calls > in->max_calls) {
    snprintf(err, err_len,
             "the range makes %" PRIu64
             " calls, more than the limit of %u calls per task; use a larger chunk",
             calls, in->max_calls);
    goto out;
  }
  *st =
      (wk_stream_state){.start = start, .stop = stop, .step = step, .chunk = chunk, .total = calls};
  rc = 0;
out:
  json_decref(obj);
  return rc;
}

/* The bounds of chunk `index`: [a, b) with a = start + index*chunk*step and b =
 * min(a + chunk*step, stop). Checked: chunk*step alone may exceed int64 (chunk 1e9,
 * step 2^40-1); index*chunk*step < stop - start + step never does for index < total,
 * but is checked all the same, and a span past int64 means "up to stop". */
static bool range_bounds(const wk_stream_state *st, uint64_t index, int64_t *a, int64_t *b) {
  if (index >= st->total || index > INT64_MAX) return false;
  int64_t first, offset, span, end;
  if (__builtin_mul_overflow((int64_t)index, st->chunk, &first) ||
      __builtin_mul_overflow(first, st->step, &offset) ||
      __builtin_add_overflow(st->start, offset, a) || *a >= st->stop) {
    return false;
  }
  bool capped = __builtin_mul_overflow(st->chunk, st->step, &span) ||
                __builtin_add_overflow(*a, span, &end) || end > st->stop;
  *b = capped ? st->stop : end;
  return true;
}

static size_t range_args(const wk_stream_state *st, uint64_t index, char *buf, size_t buf_len) {
  int64_t a, b;
  if (!range_bounds(st, index, &a, &b)) return 0;
  int n =
      snprintf(buf, buf_len, "{\"start\":%" PRId64 ",\"stop\":%" PRId64 ",\"step\":%" PRId64 "}", a,
               b, st->step);
  return n > 0 && (size_t)n < buf_len ? (size_t)n : 0;
}

static const wk_builder builtin[] = {
    {"single", no_options, build_single, NULL, NULL, true},
    {"map", map_options, build_map, NULL, NULL, false},
    {"range", no_options, NULL, range_open, range_args, false},
};

const wk_builder *wk_builder_find_builtin(const char *name) {
  for (size_t i = 0; i < sizeof builtin / sizeof builtin[0]; i++) {
    if (strcmp(builtin[i].name, name) == 0) return &builtin[i];
  }
  return NULL;
}

int wk_builder_registry_add(wk_builder_registry *reg, const char *name) {
  const wk_builder *b = wk_builder_find_builtin(name);
  if (!b || reg->count >= WK_BUILDERS_MAX) return -1;
  if (wk_builder_registry_find(reg, name)) return 0;
  reg->items[reg->count++] = b;
  return 0;
}

const wk_builder *wk_builder_registry_find(const wk_builder_registry *reg, const char *name) {
  if (!name || !name[0]) name = "single";
  for (uint32_t i = 0; i < reg->count; i++) {
    if (strcmp(reg->items[i]->name, name) == 0) return reg->items[i];
  }
  return NULL;
}

const char *wk_builder_registry_names(const wk_builder_registry *reg, char *buf, size_t len) {
  size_t used = 0;
  buf[0] = '\0';
  for (uint32_t i = 0; i < reg->count && used < len; i++) {
    int n = snprintf(buf + used, len - used, "%s%s", i ? ", " : "", reg->items[i]->name);
    if (n < 0) break;
    used += (size_t)n;
  }
  return buf;
}

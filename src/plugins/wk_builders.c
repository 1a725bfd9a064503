#include "plugins/wk_builders.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void wk_call_list_free(wk_call_list *list) {
  free(list->items);
  free(list->storage);
  memset(list, 0, sizeof *list);
}

/* single: the task's args are the one call's args */
static int build_single(const wk_builder_input *in, wk_call_list *out, char *err, size_t err_len) {
  (void)err;
  (void)err_len;
  out->count = 1;
  out->items = calloc(1, sizeof *out->items);
  if (!out->items) abort();
  out->items[0].args = in->args;
  out->items[0].len = in->args_len;
  return 0;
}

static const wk_builder builtin[] = {
    {"single", build_single},
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

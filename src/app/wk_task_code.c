/* wk_task_code.c: see wk_task_code.h. */
#include "app/wk_task_code.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "adapters/wk_code_store.h"
#include "app/wk_code_cache.h"
#include "lib/wk_alloc.h"
#include "lib/wk_assert.h"
#include "lib/wk_err.h"

/* Appends a target; the caller checked the bound. `code_dir` is copied, or borrowed
 * when `borrow` (a buffer that outlives the target). */
static uint32_t add_target(wk_rt_code *code, const char *function, size_t len, uint64_t epoch,
                           char *code_dir, bool borrow) {
  WK_ASSERT(code->count < WK_TASK_CODE_TARGETS_MAX);
  WK_ASSERT(len <= WK_FUNCTION_NAME_MAX);
  if (code->count == code->cap) {
    if (code->cap == 0) { /* the task's own function: in the record */
      code->items = &code->first;
      code->cap = 1;
    } else if (code->items == &code->first) {
      code->cap = 4;
      code->items = wk_xmalloc(code->cap * sizeof *code->items);
      code->items[0] = code->first;
    } else {
      code->cap *= 2;
      code->items = wk_xrealloc(code->items, code->cap * sizeof *code->items);
    }
  }
  wk_rt_target *t = &code->items[code->count];
  memcpy(t->function, function, len);
  t->function[len] = '\0';
  t->epoch = epoch;
  t->code_dir = borrow ? code_dir : wk_xstrdup(code_dir);
  t->code_dir_owned = !borrow;
  return code->count++;
}

int wk_task_code_resolve(const wk_task_code_env *env, const char *function,
                         uint64_t requested_epoch, uint64_t *epoch, char *path, size_t path_len,
                         char *err, size_t err_len) {
  if (env->cache)
    return wk_code_cache_resolve(env->cache, function, requested_epoch, epoch, path, path_len, err,
                                 err_len);
  return wk_code_store_resolve(env->code_root, function, requested_epoch, epoch, path, path_len,
                               err, err_len);
}

bool wk_task_code_lookup(const wk_task_code_env *env, const char *function,
                         uint64_t requested_epoch, uint64_t *epoch, char *path, size_t path_len) {
  return env->cache != NULL &&
         wk_code_cache_lookup(env->cache, function, requested_epoch, epoch, path, path_len);
}

void wk_task_code_adopt(wk_task_rt *rt, const wk_task_code_env *env) {
  WK_ASSERT(rt->code.count == 0);
  WK_ASSERT(!rt->code.unpinned);
  WK_ASSERT(rt->act.rc == 0 && rt->act.epoch > 0);
  /* act.code_dir is not written again after activation and lives as long as rt */
  (void)add_target(&rt->code, rt->req.function, strlen(rt->req.function), rt->act.epoch,
                   rt->act.code_dir, true);
  if (env->pins) wk_code_pins_pin(env->pins, rt->req.function, rt->act.epoch);
}

void wk_task_code_unpin(wk_task_rt *rt, const wk_task_code_env *env,
                        void (*on_function)(void *ud, const char *function, uint64_t epoch),
                        void *ud) {
  if (rt->code.unpinned) return;
  rt->code.unpinned = true;
  for (uint32_t i = 0; i < rt->code.count; i++) {
    const wk_rt_target *t = &rt->code.items[i];
    if (env->pins) wk_code_pins_unpin(env->pins, t->function, t->epoch);
    if (on_function) on_function(ud, t->function, t->epoch);
  }
}

int wk_task_code_target(wk_task_rt *rt, const wk_task_code_env *env, const char *function,
                        size_t len, uint32_t *index, const char **type, char *err, size_t err_len) {
  wk_rt_code *code = &rt->code;
  for (uint32_t i = 0; i < code->count; i++) {
    if (strlen(code->items[i].function) == len &&
        memcmp(code->items[i].function, function, len) == 0) {
      *index = i;
      return 0;
    }
  }
  *type = WK_TASK_CODE_NOT_FOUND;
  char name[WK_FUNCTION_NAME_MAX + 1];
  if (len > WK_FUNCTION_NAME_MAX || memchr(function, '\0', len)) {
    wk_errf(err, err_len,
            "invalid function name (%zu bytes): use 1..%u characters of [A-Za-z0-9_.-]", len,
            WK_FUNCTION_NAME_MAX);
    return -1;
  }
  memcpy(name, function, len);
  name[len] = '\0';
  if (!wk_code_store_valid_function_name(name)) {
    wk_errf(err, err_len,
            "invalid function name '%s': use 1..%u characters of [A-Za-z0-9_.-], not starting "
            "with '.'",
            name, WK_FUNCTION_NAME_MAX);
    return -1;
  }
  if (code->unpinned) {
    *type = WK_TASK_CODE_REFUSED;
    wk_errf(err, err_len, "the task is over: no subcall to '%s' starts", name);
    return -1;
  }
  if (code->count >= WK_TASK_CODE_TARGETS_MAX) {
    *type = WK_TASK_CODE_REFUSED;
    wk_errf(err, err_len, "a task's calls may run at most %u distinct functions; '%s' is one more",
            WK_TASK_CODE_TARGETS_MAX, name);
    return -1;
  }
  /* held while resolving: no epoch of it goes before the one resolved is pinned */
  if (env->pins) wk_code_pins_hold(env->pins, name);
  uint64_t epoch = 0;
  char dir[PATH_MAX];
  int rc = wk_task_code_resolve(env, name, 0, &epoch, dir, sizeof dir, err, err_len);
  if (rc == 0) {
    *index = add_target(code, name, len, epoch, dir, false);
    if (env->pins) wk_code_pins_pin(env->pins, name, epoch);
  }
  if (env->pins) wk_code_pins_release(env->pins, name);
  return rc;
}

void wk_task_code_free(wk_task_rt *rt) {
  for (uint32_t i = 0; i < rt->code.count; i++) {
    if (rt->code.items[i].code_dir_owned) free(rt->code.items[i].code_dir);
  }
  if (rt->code.items != &rt->code.first) free(rt->code.items);
  rt->code = (wk_rt_code){0};
}

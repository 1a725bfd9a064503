/* wk_task_code.h: the code a task runs, pinned for the task's life.
 *
 * Target 0 is the task's own function at the epoch activation resolved. Every other
 * function a call of the task reaches by subcall (ctx.call / ctx.map) is resolved in
 * the code store at the first subcall that names it (every subcall passes the AuditGate,
 * audit_allow / audit_deny, with its entry point, in the calls driver), and kept as a
 * target: every later subcall of the task to
 * that function runs the same epoch, whatever is deployed meanwhile. A function that
 * cannot be resolved or is refused is not kept (the next subcall tries again).
 * Runs on the loop thread; the `code` part of wk_task_rt is written here only. */
#ifndef WK_TASK_CODE_H
#define WK_TASK_CODE_H

#include <stddef.h>
#include <stdint.h>

#include "app/wk_task_runtime.h"

#define WK_TASK_CODE_DEFAULT_ENTRYPOINT "main:handler"

/* Typed subcall errors (a worker.SubcallError's `type` in the calling function). */
#define WK_TASK_CODE_NOT_FOUND "FunctionNotFound" /* not deployed, bad name, epoch missing */
#define WK_TASK_CODE_DENIED "FunctionDenied"      /* refused by audit_allow / audit_deny */
#define WK_TASK_CODE_REFUSED "SubcallRefused"     /* a limit of this worker */

/* Where targets are resolved and which functions may run. Strings are borrowed and
 * outlive every task. */
typedef struct wk_code_pins wk_code_pins;
typedef struct wk_code_cache wk_code_cache;
typedef struct wk_task_code_env {
  const char *code_root;
  wk_code_cache *cache; /* CURRENT from memory (wk_code_cache.h); NULL: read from disk */
  wk_code_pins *pins;   /* every target is pinned here until wk_task_code_unpin (may be NULL) */
  const char *audit_allow, *audit_deny;
} wk_task_code_env;

/** wk_task_code_resolve answered from memory only (wk_code_cache_lookup): true with
 * *epoch and `path` on a cache hit; false (nothing resolved, no disk read) without a
 * cache or when only the disk can answer. Thread-safe. */
bool wk_task_code_lookup(const wk_task_code_env *env, const char *function,
                         uint64_t requested_epoch, uint64_t *epoch, char *path, size_t path_len);

/** Resolves `function` at `requested_epoch` (0: CURRENT) in env's code root, through its
 * cache when it has one: wk_code_store_resolve's results and errors. Thread-safe. */
int wk_task_code_resolve(const wk_task_code_env *env, const char *function,
                         uint64_t requested_epoch, uint64_t *epoch, char *path, size_t path_len,
                         char *err, size_t err_len);

/** Makes the activation's epoch and code directory (rt->act) target 0 and pins it in
 * env->pins. Call once, on the loop thread, when activation succeeded (the function
 * was held since before activation resolved it: wk_code_pins_hold). */
void wk_task_code_adopt(wk_task_rt *rt, const wk_task_code_env *env);

/** Unpins every target of the task (it is terminal); no target is added afterwards.
 * Calls on_function(ud, name, epoch) once per target, e.g. to remove epochs no longer
 * pinned (may be NULL). Idempotent. */
void wk_task_code_unpin(wk_task_rt *rt, const wk_task_code_env *env,
                        void (*on_function)(void *ud, const char *function, uint64_t epoch),
                        void *ud);

/** The target index of `function` (`len` bytes, not NUL-terminated) for a subcall of
 * `rt`: an existing target, else a new one resolved at CURRENT of the code store.
 * Returns 0 with *index set; or -1 with *type one of the WK_TASK_CODE_* names and a
 * reason in err: the name is invalid or not deployed, its CURRENT names no published
 * epoch, the task is over, or it holds WK_TASK_CODE_TARGETS_MAX targets. */
int wk_task_code_target(wk_task_rt *rt, const wk_task_code_env *env, const char *function,
                        size_t len, uint32_t *index, const char **type, char *err, size_t err_len);

/** Frees the targets (the runtime's final unref calls it). */
void wk_task_code_free(wk_task_rt *rt);

#endif

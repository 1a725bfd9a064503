/* wk_executor_user.h: which account executors run as (the executor_user setting).
 *
 * A worker started as root runs its executors as another account, so a function cannot
 * signal, trace or read the worker: `executor_user` names it (an account name or a
 * numeric uid; empty = `nobody`). Its primary group becomes the executors' group and
 * supplementary groups are dropped (libuv's UV_PROCESS_SETUID/SETGID). `root` (or 0)
 * keeps executors as root, a deliberate opt-out. A worker started as another user
 * cannot switch users: there executor_user must be empty or name that same user. */
#ifndef WK_EXECUTOR_USER_H
#define WK_EXECUTOR_USER_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/** Resolves `spec` (executor_user) for a worker whose effective uid is `self_euid`.
 * On success returns 0 and sets *uid and *gid to the executors' ids, or both to 0 when
 * executors keep the worker's own user (an unprivileged worker, or executor_user
 * naming root): as in wk_pool_config, uid 0 means "no switch". Returns -1 with the reason in `err` when the account does not exist, or
 * when an unprivileged worker is asked for another user. Reads the user database
 * (getpwnam/getpwuid). */
int wk_executor_user_resolve(const char *spec, uid_t self_euid, uint32_t *uid, uint32_t *gid,
                             char *err, size_t len);

#endif

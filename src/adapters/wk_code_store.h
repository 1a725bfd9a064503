/* wk_code_store.h: the function code store, a directory tree of immutable epochs.
 *
 * Layout under a code root (DESIGN.md §5):
 *
 *   code_root/<function>/<epoch>/      one published epoch (epoch = 1, 2, ...)
 *   code_root/<function>/CURRENT       the current epoch as decimal + "\n"
 *   code_root/<function>/.deploy.lock  serialises deploys of one function (flock)
 *   code_root/<function>/.staging-*    a deploy in progress (never resolved)
 *
 * An epoch directory is published by one rename() of a fully written and fsynced
 * staging directory, and never modified afterwards (its files are made read-only), so
 * a task that pinned an epoch keeps reading the same code whatever is deployed later.
 * CURRENT is switched by writing a temporary file and rename()-ing it over CURRENT: a
 * reader sees the old or the new epoch, never a half-written one.
 *
 * Errors: every function that can fail returns 0 or -1 and writes one line a person
 * can act on into `err` (NUL-terminated, truncated to err_len; err may be NULL when
 * err_len is 0). Thread-safe: no global state; concurrent deploys of one function
 * (threads or processes) are serialised by the lock file and never take one epoch
 * twice. */
#ifndef WK_CODE_STORE_H
#define WK_CODE_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define WK_CODE_STORE_NAME_MAX 128u      /* bytes of a function name */
#define WK_CODE_STORE_MAX_DEPTH 32u      /* directory levels copied by a deploy */
#define WK_CODE_STORE_MAX_FILES 100000u  /* files and directories copied by a deploy */
#define WK_CODE_STORE_DEPLOY_RETRIES 16u /* epochs tried when another deploy takes ours */

/** True when `name` is a usable function name: 1..128 bytes of [A-Za-z0-9_.-], not
 * starting with '.'. Such a name is one path component that cannot escape the root
 * and never collides with CURRENT's siblings (.staging-*, .deploy.lock). */
bool wk_code_store_valid_function_name(const char *name);

/** Resolves the code directory of `function`. requested_epoch 0 means the epoch named
 * by CURRENT; any other value must be a published epoch. On success writes the epoch
 * to *epoch and "code_root/function/epoch" to path (NUL-terminated) and returns 0.
 * Errors (-1): invalid function name; function not deployed; no CURRENT; CURRENT
 * malformed (not a positive decimal epoch and a newline) or naming a missing epoch;
 * requested epoch not published; path longer than path_len; I/O error. */
int wk_code_store_resolve(const char *root, const char *function, uint64_t requested_epoch,
                          uint64_t *epoch, char *path, size_t path_len, char *err, size_t err_len);

/** Publishes the contents of src_dir as the next epoch of `function` (highest
 * existing epoch + 1) and makes it CURRENT. Copies regular files and directories
 * recursively (skipping __pycache__ directories), follows a symbolic link only when
 * it points inside src_dir, and refuses links leading outside it, dangling links and
 * other file types (fifos, sockets, devices). Files are fsynced and made read-only;
 * the epoch appears by one rename and CURRENT switches atomically. Creates code_root
 * and code_root/function when missing. On success writes the epoch to *epoch and
 * returns 0. On failure (-1) leaves no staging directory behind and changes neither
 * CURRENT nor any published epoch; when src_dir is missing or not a directory nothing
 * at all is created. */
int wk_code_store_deploy(const char *root, const char *function, const char *src_dir,
                         uint64_t *epoch, char *err, size_t err_len);

/** Lists the published epochs of `function` in ascending order: writes up to `cap` of
 * them to epochs (may be NULL when cap is 0), the total number to *count, and the
 * epoch CURRENT names to *current (0 when CURRENT is missing or malformed). A
 * function that was never deployed has 0 epochs (not an error). Errors (-1): invalid
 * function name; I/O error reading the directory. */
int wk_code_store_list(const char *root, const char *function, uint64_t *epochs, size_t cap,
                       size_t *count, uint64_t *current, char *err, size_t err_len);

#endif

/* wk_executor_env.h: the environment functions get beyond the executor's own.
 *
 * Executors start with a scrubbed environment (PATH, LANG, HOME and the executor's own
 * PYTHON* variables: see wk_executor_pool.c). The `executor_env` setting adds to it:
 * a comma-separated list whose items are either NAME (passed through from the
 * worker's environment when set there, else left out) or NAME=VALUE (set). NAME is
 * [A-Za-z_][A-Za-z0-9_]*; a VALUE cannot hold a comma. PATH and LANG may be replaced;
 * the variables the executor itself needs (HOME, PYTHONPATH, PYTHONDONTWRITEBYTECODE,
 * PYTHONUNBUFFERED) may not. Secrets the worker read from its environment are gone
 * from it by then (wk_config_scrub_secret_env), so passing them through yields nothing. */
#ifndef WK_EXECUTOR_ENV_H
#define WK_EXECUTOR_ENV_H

#include <stddef.h>

/** Checks an executor_env value. Returns 0, or -1 with the first problem in `err`
 * (naming the item). */
int wk_executor_env_check(const char *spec, char *err, size_t len);

/** Builds the NAME=VALUE entries `spec` asks for, reading pass-through names from the
 * environment now. Returns a NULL-terminated array the caller frees with
 * wk_executor_env_free (never NULL), or NULL with the problem in `err` when `spec` is
 * invalid. */
char **wk_executor_env_build(const char *spec, char *err, size_t len);

/** Frees what wk_executor_env_build returned (NULL is fine). */
void wk_executor_env_free(char **env);

#endif

/* wk_builders.h: call builders, turning a task's args into its calls, and the
 * registry of those a Profile enables. A builder not in the registry is
 * BUILDER_NOT_FOUND. Builders are pure functions of their input (no I/O, no globals:
 * any thread may run any builder).
 *
 * Options (FunctionCallConfig.options, `workerctl submit --option K=V`): each builder
 * lists the keys it takes in `options`; any other key is refused, at submission
 * (INVALID_ARGUMENT, by the orchestrator through wk_builder_check_options) and again
 * by the builder itself (BUILDER_FAILED).
 *   single  none
 *   map     items=FIELD: the args are a JSON object and its field FIELD holds the
 *           array (the other fields are ignored); without it the args are the array
 *   range   none (its parameters are its args) */
#ifndef WK_BUILDERS_H
#define WK_BUILDERS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lib/wk_options.h"

/* One call's args: a view into the task's args or into the list's own storage. */
typedef struct wk_call_item {
  const uint8_t *args;
  size_t len;
} wk_call_item;

/* The calls a builder produced. Owned by the caller; free with wk_call_list_free. */
typedef struct wk_call_list {
  uint32_t count;
  wk_call_item *items; /* &one for the single builder's one call (no allocation), else owned */
  uint8_t *storage;    /* bytes the items point into, when not the task's args */
  wk_call_item one;
} wk_call_list;

/** Frees what the list holds and zeroes it. */
void wk_call_list_free(wk_call_list *list);

/** Moves the list in `src` to `dst` (which holds none), leaving `src` empty: a list is
 * moved with this, never copied (items may point into the list itself). */
void wk_call_list_move(wk_call_list *dst, wk_call_list *src);

typedef struct wk_builder_input {
  const uint8_t *args;
  size_t args_len;
  bool json; /* content type of args */
  uint32_t max_calls;
  const wk_option *options; /* FunctionCallConfig.options (borrowed); n_options entries */
  size_t n_options;
} wk_builder_input;

/* Builds the whole call list. Returns 0, or -1 with a message saying what was wrong
 * and where (BUILDER_FAILED). */
typedef int (*wk_builder_fn)(const wk_builder_input *in, wk_call_list *out, char *err,
                             size_t err_len);

/* A streaming builder produces calls lazily: open checks the input and sizes the
 * stream (total calls); args writes the args of call `index` (< total) into buf and
 * returns their length (0 if buf is too small). Any index can be produced again (for
 * a retry) from the small state alone: nothing is materialised. */
typedef struct wk_stream_state {
  int64_t start, stop, step, chunk;
  uint64_t total;
} wk_stream_state;

typedef int (*wk_stream_open_fn)(const wk_builder_input *in, wk_stream_state *st, char *err,
                                 size_t err_len);
typedef size_t (*wk_stream_args_fn)(const wk_stream_state *st, uint64_t index, char *buf,
                                    size_t buf_len);

typedef struct wk_builder {
  const char *name;
  const char *const *options;    /* the option keys it takes, NULL-terminated */
  wk_builder_fn build;           /* list builders */
  wk_stream_open_fn stream_open; /* streaming builders */
  wk_stream_args_fn stream_args;
  bool cheap; /* build takes constant time (no parsing, no copy): it runs on the loop */
} wk_builder;

#define WK_STREAM_ARGS_MAX 128 /* bytes of one streamed call's args */

/** The builder named `name` among those compiled in ("single", "map", "range"), or NULL. */
const wk_builder *wk_builder_find_builtin(const char *name);

/** Checks `n` options against those builder b takes. Returns 0, or -1 with
 * "the map builder: unknown option 'k' (known: items)" in err. */
int wk_builder_check_options(const wk_builder *b, const wk_option *options, size_t n, char *err,
                             size_t err_len);

#define WK_BUILDERS_MAX 16

/* The builders a Profile enables. */
typedef struct wk_builder_registry {
  const wk_builder *items[WK_BUILDERS_MAX];
  uint32_t count;
} wk_builder_registry;

/** Adds the builtin builder `name`. Returns 0, or -1 when no such builder exists or
 * the registry is full. */
int wk_builder_registry_add(wk_builder_registry *reg, const char *name);

/** The enabled builder called `name` ("" means "single"), or NULL. */
const wk_builder *wk_builder_registry_find(const wk_builder_registry *reg, const char *name);

/** Comma-separated names of the enabled builders, into buf (for error messages). */
const char *wk_builder_registry_names(const wk_builder_registry *reg, char *buf, size_t len);

#endif

/* wk_options.h: a plugin's options, the key/value map a request gives a call builder
 * (FunctionCallConfig.options) or a writer (ResultHandler.options): lookup and the
 * check that every key is one the plugin knows. */
#ifndef WK_OPTIONS_H
#define WK_OPTIONS_H

#include <stddef.h>

/* One option; the strings are borrowed. */
typedef struct wk_option {
  const char *key;
  const char *value;
} wk_option;

/** The value of `key` among the n options (the last one wins, as in a protobuf map),
 * "" for a NULL value, or NULL when absent. */
const char *wk_option_get(const wk_option *options, size_t n, const char *key);

/** Checks that every key is one of `known` (NULL-terminated; NULL or empty = the
 * plugin takes none). Returns 0, or -1 with "<owner>: unknown option 'k' (known:
 * a, b)" in err ("known: none"); the key is cut to 64 bytes and its control
 * characters shown as '?'. */
int wk_option_check_keys(const char *owner, const wk_option *options, size_t n,
                         const char *const *known, char *err, size_t len);

#endif

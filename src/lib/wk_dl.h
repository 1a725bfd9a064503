/* wk_dl.h: opening an optional shared library on first use (dlopen) instead of at
 * start-up.
 *
 * The worker links libcurl (etcd), libmicrohttpd (metrics) and libpq (the postgres
 * writer) for features that are off by default. Linked normally, the dynamic loader
 * maps them and their dependencies (GnuTLS, Kerberos, LDAP, ...) and runs their
 * initialisers in every process: ~4.5 MB of the idle worker's RSS. A module that uses
 * such a library lists the functions it calls once, and calls them through a table
 * that wk_dl_load fills when the feature is first used:
 *
 *   #define CURL_FNS(X) X(curl_easy_init) X(curl_easy_cleanup)
 *   static struct { CURL_FNS(WK_DL_FIELD) } curl_fns;
 *   static const char *const curl_names[] = {CURL_FNS(WK_DL_NAME)};
 *   static wk_dl_lib curl_lib = WK_DL_LIB("libcurl.so.4", curl_names, curl_fns);
 *   #define curl_easy_init (curl_fns.curl_easy_init)   (one line per function)
 *
 * The compiler still checks every call against the library's own header (each field
 * has the type of the function it replaces). */
#ifndef WK_DL_H
#define WK_DL_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>

/** A field of a table of functions: a pointer of the type of the function `name`. */
#define WK_DL_FIELD(name) __typeof__(name) *name;
/** An entry of a table of symbol names: the function's name as a string. */
#define WK_DL_NAME(name) #name,

typedef struct wk_dl_lib {
  const char *soname;       /* e.g. "libcurl.so.4": what the build linked against */
  const char *const *names; /* the symbols, in the order of the table's fields */
  size_t n;
  void *fns;       /* the table: n function pointers, filled by wk_dl_load */
  size_t fns_size; /* sizeof the table (n function pointers) */
  pthread_mutex_t mu;
  int state;     /* 0 not tried, 1 loaded, -1 failed (under mu) */
  char why[256]; /* the failure, repeated to later callers */
} wk_dl_lib;

/** A wk_dl_lib for `soname` whose functions `names` (an array) fill `table` (a struct
 * of WK_DL_FIELDs in the same order). A static initialiser. */
#define WK_DL_LIB(soname_, names_, table_)                                             \
  {                                                                                    \
    .soname = (soname_), .names = (names_), .n = sizeof(names_) / sizeof((names_)[0]), \
    .fns = &(table_), .fns_size = sizeof(table_), .mu = PTHREAD_MUTEX_INITIALIZER      \
  }

/** Opens lib->soname (once; later calls answer from the first) and fills its table.
 * Returns true when every function was found. On failure (the library is not
 * installed, or lacks a function) returns false with the reason in err; the table
 * stays unfilled and the library is not kept open. Thread-safe. */
bool wk_dl_load(wk_dl_lib *lib, char *err, size_t err_len);

#endif

/* wk_code_store.h: the function code store, a directory tree of immutable epochs.
 *
 * Layout under a code root (DESIGN.md §5):
 *
 *   code_root/<function>/<epoch>/      one published epoch (epoch = 1, 2, ...)
 *   code_root/<function>/CURRENT       the current epoch as decimal + "\n"
 *   code_root/<function>/<epoch>.sha256  the epoch's content digest, hex + "\n"
 *   code_root/<function>/.deploy.lock  serialises deploys of one function (flock)
 *   code_root/<function>/.staging-*    a deploy in progress (never resolved)
 *   code_root/<function>/.removing-*   an epoch being removed (never resolved)
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
#define WK_CODE_STORE_DIGEST_HEX 64u     /* hex characters of a sha256 digest */

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

/* ---- digests, checked deploys, rollback ----------------------------------------- */

/** Checks a staged copy of the code before it is published (e.g. that it compiles and
 * its entry point imports). Returns 0 to go on, or -1 with the reason in err. */
typedef int (*wk_code_check_fn)(void *ud, const char *staged_dir, char *err, size_t err_len);

typedef struct wk_code_deploy_opts {
  wk_code_check_fn check; /* NULL: no check */
  void *check_ud;
} wk_code_deploy_opts;

typedef struct wk_code_deploy_result {
  uint64_t epoch;                            /* the epoch now CURRENT */
  char digest[WK_CODE_STORE_DIGEST_HEX + 1]; /* its sha256, hex */
  bool reused;                               /* the content was already that epoch's */
} wk_code_deploy_result;

/** wk_code_store_deploy with a check and the content digest. The source is copied to
 * a staging directory, digested (sha256 over the sorted relative paths, the executable
 * bits and the contents: the same tree gives the same digest wherever it comes from),
 * then checked with opts->check (may be NULL); a check failure leaves everything as it
 * was. When an existing epoch has the same digest, no epoch is added: CURRENT moves to
 * that epoch and out->reused is true. Otherwise the next epoch is published with its
 * digest file. Errors as wk_code_store_deploy, plus the check's. */
int wk_code_store_deploy_opts(const char *root, const char *function, const char *src_dir,
                              const wk_code_deploy_opts *opts, wk_code_deploy_result *out,
                              char *err, size_t err_len);

/** The recorded digest of an epoch into hex (WK_CODE_STORE_DIGEST_HEX + 1 bytes): 0,
 * or -1 when none is recorded (an epoch deployed before digests existed) or on error. */
int wk_code_store_digest(const char *root, const char *function, uint64_t epoch, char *hex);

/** Moves CURRENT of `function` to `epoch` (rollback, or forward again), under the deploy
 * lock. epoch 0 means the highest published epoch below CURRENT. Writes the epoch now
 * CURRENT to *now. Errors (-1): invalid name; not deployed; the epoch is not published;
 * epoch 0 with no epoch below CURRENT; I/O error. */
int wk_code_store_set_current(const char *root, const char *function, uint64_t epoch, uint64_t *now,
                              char *err, size_t err_len);

/* ---- deploys from a list of files (the DeployCode RPC) ------------------------- */

#define WK_CODE_STORE_PATH_MAX 1024u /* bytes of one file path in a deployed tree */

/** One file of a tree handed over as a list: directories are implied by the paths and
 * there are no links. `path` is relative and '/'-separated (wk_code_store_check_files). */
typedef struct wk_code_file {
  const char *path;       /* NUL-terminated */
  const uint8_t *content; /* may be NULL when len is 0 */
  size_t len;
  bool executable; /* published as 0555 rather than 0444 */
} wk_code_file;

/** Checks a file list before anything touches the disk: 1..max_files files whose
 * contents add up to at most max_bytes (0 = no bound of that kind); each path 1..
 * WK_CODE_STORE_PATH_MAX bytes, relative (no leading '/'), without an empty, "." or
 * ".." component (so no "a//b", no trailing '/'), without control characters, at most
 * WK_CODE_STORE_MAX_DEPTH components, none named __pycache__ (the store never
 * publishes one); no path twice, and no path that is also another's directory ("a"
 * and "a/b"). Pure (no I/O). Returns 0, or -1 with the first problem in err, naming
 * the file by its index and a printable excerpt of its path. */
int wk_code_store_check_files(const wk_code_file *files, size_t n, size_t max_files,
                              uint64_t max_bytes, char *err, size_t err_len);

/** The digest wk_code_store_deploy_opts would record for the tree these files make
 * (the same rule: the same files give the same hex wherever they come from), into hex
 * (WK_CODE_STORE_DIGEST_HEX + 1 bytes). The list must pass wk_code_store_check_files.
 * Pure computation. Returns 0, or -1 when sha256 is unavailable. */
int wk_code_store_digest_files(const wk_code_file *files, size_t n, char *hex, char *err,
                               size_t err_len);

/** Reads the tree src_dir into a file list by the rules of wk_code_store_deploy (the
 * same walker: regular files and directories, __pycache__ skipped, a symbolic link
 * followed only when it stays inside src_dir; other links and file types refused), for
 * `workerctl deploy --fleet`. Directories travel implied by the files' paths, so an
 * empty directory is not part of the list (nor of its digest). *files gets a malloc'd
 * array of *n files whose paths and contents are malloc'd (free with
 * wk_code_store_files_free). The tree is copied to a private temporary directory first
 * ($TMPDIR, else /tmp) and read from there, so a file changing meanwhile cannot make
 * the list disagree with itself. Returns 0, or -1 with the first problem in err. */
int wk_code_store_read_tree(const char *src_dir, wk_code_file **files, size_t *n, char *err,
                            size_t err_len);

/** Frees a list from wk_code_store_read_tree (NULL is fine). */
void wk_code_store_files_free(wk_code_file *files, size_t n);

/* Why a publish failed (wk_code_store_publish_files and wk_code_store_set_current_digest
 * return one of these; 0 = success). */
typedef enum wk_code_store_rc {
  WK_CODE_STORE_OK = 0,
  WK_CODE_STORE_E_IO = -1,       /* the disk: cannot write, sync, lock, rename */
  WK_CODE_STORE_E_INVALID = -2,  /* the request: bad name, file list, epoch or digest text */
  WK_CODE_STORE_E_DIGEST = -3,   /* the files do not have the digest the caller named */
  WK_CODE_STORE_E_CONFLICT = -4, /* the epoch is published with another (or no) digest */
  WK_CODE_STORE_E_CHECK = -5,    /* the code check refused the code */
  WK_CODE_STORE_E_NOT_FOUND = -6 /* set_current: function or epoch not published */
} wk_code_store_rc;

typedef struct wk_code_publish_opts {
  uint64_t epoch;     /* publish under this epoch; 0 = the next local epoch */
  const char *digest; /* the digest the caller computed (64 lowercase hex); required */
  bool make_current;  /* move CURRENT to the epoch once it is published (or reused) */
  size_t max_files;   /* wk_code_store_check_files bounds (0 = none) */
  uint64_t max_bytes;
  wk_code_check_fn check; /* NULL: no check */
  void *check_ud;
} wk_code_publish_opts;

typedef struct wk_code_publish_result {
  uint64_t epoch;                            /* the epoch that holds the files */
  char digest[WK_CODE_STORE_DIGEST_HEX + 1]; /* its digest */
  bool reused;       /* that epoch already held this digest: nothing was copied */
  uint64_t current;  /* CURRENT after the call (0 = none) */
  uint64_t previous; /* CURRENT before the call (0 = none) */
} wk_code_publish_result;

/** Publishes `files` as an epoch of `function`, under the deploy lock, by the rules of
 * wk_code_store_deploy_opts (a staging directory, files fsynced and read-only, one
 * rename). With opts->epoch E > 0:
 *   - E published with the same digest: reused (nothing copied or checked again);
 *   - E published with another digest, or with none recorded: refused
 *     (WK_CODE_STORE_E_CONFLICT, naming both digests);
 *   - E free: published as E, even when the same digest is also another epoch here.
 * With epoch 0: the epoch that already has this digest is reused, else the next local
 * epoch is published. The files are written to staging and digested again: a digest
 * other than opts->digest is WK_CODE_STORE_E_DIGEST (both in the message). Then the
 * check runs on the staged copy (WK_CODE_STORE_E_CHECK). CURRENT moves only with
 * make_current. On any failure nothing is left behind: no staging directory, no new
 * epoch, CURRENT unchanged (a new function directory is removed again). Creates the
 * code root when missing. Returns a wk_code_store_rc with one line in err. */
int wk_code_store_publish_files(const char *root, const char *function, const wk_code_file *files,
                                size_t n, const wk_code_publish_opts *opts,
                                wk_code_publish_result *out, char *err, size_t err_len);

/** wk_code_store_set_current, with the epoch's recorded digest checked first when
 * `digest` is not NULL or "" (a mismatch, or no digest recorded, is
 * WK_CODE_STORE_E_CONFLICT), and CURRENT before the call written to *previous (0 =
 * none; previous may be NULL). A function or epoch that is not published is
 * WK_CODE_STORE_E_NOT_FOUND. Returns a wk_code_store_rc with one line in err. */
int wk_code_store_set_current_digest(const char *root, const char *function, uint64_t epoch,
                                     const char *digest, uint64_t *now, uint64_t *previous,
                                     char *err, size_t err_len);

/** The functions that have a directory under `root` (valid names only), sorted, as a
 * malloc'd array of malloc'd strings (free each, then the array; *names is NULL when
 * there are none). A missing root has none. Returns 0, or -1 with err on an I/O error. */
int wk_code_store_functions(const char *root, char ***names, size_t *count, char *err,
                            size_t err_len);

/* ---- pins and removal of old epochs -------------------------------------------- */

/** What a process pins: epochs of functions that tasks run, and functions being
 * resolved right now (a hold: none of their epochs may go). Thread-safe (a mutex). */
typedef struct wk_code_pins wk_code_pins;

/** Creates an empty pin table (never NULL: aborts on OOM); destroy frees it. */
wk_code_pins *wk_code_pins_create(void);
void wk_code_pins_destroy(wk_code_pins *p);

/** Holds / releases every epoch of `function` (while resolving which one to pin). */
void wk_code_pins_hold(wk_code_pins *p, const char *function);
void wk_code_pins_release(wk_code_pins *p, const char *function);

/** Pins / unpins one epoch (reference counted: as many unpins as pins). */
void wk_code_pins_pin(wk_code_pins *p, const char *function, uint64_t epoch);
void wk_code_pins_unpin(wk_code_pins *p, const char *function, uint64_t epoch);

/** Pins of `function` at `epoch` now (0 = the holds of the function). */
uint32_t wk_code_pins_count(wk_code_pins *p, const char *function, uint64_t epoch);

/** Removes old epochs of `function`: every published epoch except the `keep` highest,
 * CURRENT, and those `pins` pins or holds (pins may be NULL), under the deploy lock.
 * keep 0 removes nothing. Each epoch leaves by one rename (decided under the pins'
 * mutex, so a pin taken before it is honoured and one taken after finds the epoch
 * gone), then its tree and digest are deleted. Writes the epochs removed (up to `cap`)
 * to removed and their number to *n_removed. Errors (-1): invalid name; I/O error
 * (epochs removed before it stay removed). A function that is not deployed is not an
 * error. */
int wk_code_store_prune(const char *root, const char *function, uint32_t keep, wk_code_pins *pins,
                        uint64_t *removed, size_t cap, size_t *n_removed, char *err,
                        size_t err_len);

#endif

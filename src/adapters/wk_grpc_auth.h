/* wk_grpc_auth.h: the gRPC server's security, apart from its call handling:
 *   - the bearer token: every call must carry "authorization: Bearer <token>" when the
 *     server has one (wk_grpc_server.h describes the contract);
 *   - the request metadata the sink may read (a copy without "authorization");
 *   - the TLS settings: checked, their PEM files read (wk_pem.h), and turned into gRPC
 *     server credentials.
 * Used by wk_grpc_server.c only; part of the wk_grpc_server library. */
#ifndef WK_GRPC_AUTH_H
#define WK_GRPC_AUTH_H

#include <stdbool.h>
#include <stddef.h>

#include <grpc/grpc.h>
#include <grpc/grpc_security.h>

#include "adapters/wk_grpc_server.h"

/* ---- the bearer token ---------------------------------------------------------- */

/** True when no token is required (token NULL), or one "authorization" entry of md is
 * "Bearer <token>" (the scheme in any case, as RFC 6750 allows; token[0..token_len)
 * compared in time that depends on its length only). */
bool wk_grpc_auth_token_ok(const char *token, size_t token_len, const grpc_metadata_array *md);

/* ---- request metadata ------------------------------------------------------------ */

typedef struct wk_grpc_auth_md_entry {
  const char *key; /* NUL-terminated, in the owner's blob */
  size_t key_len;
  const char *value; /* NUL-terminated, in the owner's blob */
  size_t value_len;
} wk_grpc_auth_md_entry;

/* A copy of a call's metadata; zeroed means empty. */
typedef struct wk_grpc_auth_md {
  wk_grpc_auth_md_entry *entries;
  size_t count;
  char *blob; /* every key and value, each NUL-terminated (in the block of `entries`) */
} wk_grpc_auth_md;

/** Copies md into *out (which it overwrites), leaving out every "authorization" entry: the
 * token never reaches the sink. The caller frees *out with wk_grpc_auth_md_free. Aborts
 * when out of memory. */
void wk_grpc_auth_md_copy(wk_grpc_auth_md *out, const grpc_metadata_array *md);

/** Looks `key` up in m (ASCII case-insensitive; the first match). When found, copies its
 * value into buf (truncated to buf_len - 1 bytes, NUL-terminated; buf may be NULL) and
 * returns true; false when absent or key is NULL. */
bool wk_grpc_auth_md_get(const wk_grpc_auth_md *m, const char *key, char *buf, size_t buf_len);

/** Frees what wk_grpc_auth_md_copy allocated and zeroes *m. */
void wk_grpc_auth_md_free(wk_grpc_auth_md *m);

/* ---- the client's certificate ---------------------------------------------------- */

/** The names in the call's verified client certificate (mutual TLS): the subject common
 * name and every subject alternative name, '\n'-separated, malloc'd (free it); NULL
 * when the peer is not authenticated by a certificate. */
char *wk_grpc_auth_peer_identities(grpc_call *call);

/* ---- TLS ------------------------------------------------------------------------- */

/* The TLS files' PEM text, read at start (NULL: not configured). */
typedef struct wk_grpc_auth_tls {
  char *cert;
  char *key;
  char *client_ca;
} wk_grpc_auth_tls;

/** Checks the security settings of cfg (TLS files paired, the client CA only with TLS, the
 * token's length and characters) and reads its TLS files into *t. Returns 0 (free *t with
 * wk_grpc_auth_tls_free), or -1 with a reason in err and nothing to free. */
int wk_grpc_auth_load(const wk_grpc_server_config *cfg, wk_grpc_auth_tls *t, char *err,
                      size_t err_len);

/** The port's credentials from t: TLS (mutual when t->client_ca is set) or plaintext when
 * t->cert is NULL. gRPC copies the PEM text; the caller releases the result with
 * grpc_server_credentials_release. NULL when gRPC refuses the settings. */
grpc_server_credentials *wk_grpc_auth_credentials(const wk_grpc_auth_tls *t);

/** Wipes and frees the PEM text in *t (it holds a private key) and zeroes it. */
void wk_grpc_auth_tls_free(wk_grpc_auth_tls *t);

#endif

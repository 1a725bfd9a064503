/* wk_pem.h: reading and checking the PEM files of TLS (no OpenSSL).
 *
 * Shared by the gRPC server (wk_grpc_server.c: certificate, key, client CA) and the
 * gRPC client (wk_grpc_client.c: CA, client certificate and key), which both hand the
 * PEM text to gRPC core. gRPC would only notice a broken file when it builds its TLS
 * context, with a log line and no reason; these checks find the common mistakes
 * first, with a message naming the file:
 *   - the file cannot be read, is empty, larger than WK_PEM_MAX_BYTES, or binary;
 *   - no "-----BEGIN CERTIFICATE-----" block (certificates), or not exactly one
 *     private key block (keys; encrypted keys are refused: gRPC cannot ask for a
 *     passphrase);
 *   - a block without its END line, whose body is not base64, or whose decoded body is
 *     not one DER SEQUENCE of exactly the decoded length.
 * What they cannot see (a key that does not belong to the certificate, an expired
 * certificate) is left to gRPC and OpenSSL. Blocks of other types (e.g. "EC
 * PARAMETERS" before an EC key) and text outside blocks are ignored, as OpenSSL does.
 *
 * The code is in wk_pem.c (target wk_pem). */
#ifndef WK_PEM_H
#define WK_PEM_H

#include <stdbool.h>
#include <stddef.h>

#define WK_PEM_MAX_BYTES ((size_t)1 << 20) /* a CA bundle is well below 1 MiB */

typedef enum wk_pem_kind {
  WK_PEM_CERTIFICATES, /* one or more CERTIFICATE blocks (a chain, or CA bundle) */
  WK_PEM_PRIVATE_KEY,  /* exactly one PRIVATE KEY / RSA PRIVATE KEY / EC PRIVATE KEY */
} wk_pem_kind;

/** Frees PEM text read by wk_pem_read, wiping it first (it may be a private key); NULL is
 * a no-op. Also used for other secrets held as C strings (tokens). */
void wk_pem_free(char *pem);

/** Checks the NUL-terminated PEM text `pem` for `kind`. Returns true, or false with a
 * reason (naming `what`, e.g. "tls_cert_file /a/b.pem") in err. */
bool wk_pem_check(const char *pem, wk_pem_kind kind, const char *what, char *err, size_t err_len);

/** Reads the PEM file at path and checks it (wk_pem_check). Returns the text
 * (NUL-terminated; the caller frees it with wk_pem_free), or NULL with a reason in err
 * (cannot open or read, empty, larger than WK_PEM_MAX_BYTES, binary, or the check's).
 * `what` names the setting in messages ("tls_key_file", "--tls-ca"). */
char *wk_pem_read(const char *path, wk_pem_kind kind, const char *what, char *err, size_t err_len);

#endif

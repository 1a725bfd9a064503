/* wk_grpc_auth.c: the gRPC server's security: the bearer token, the request metadata the
 * sink may read, and the TLS files and credentials. See wk_grpc_auth.h. */
#include "adapters/wk_grpc_auth.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <grpc/grpc_security.h>
#include <grpc/slice.h>

#include "adapters/wk_pem.h"
#include "lib/wk_alloc.h"
#include "lib/wk_assert.h"
#include "lib/wk_ct.h"
#include "lib/wk_err.h"

static bool setting_on(const char *v) { return v != NULL && v[0] != '\0'; }

/* ---- the bearer token ---------------------------------------------------------- */

static bool ascii_equal_nocase(const uint8_t *a, const char *b, size_t n) {
  for (size_t i = 0; i < n; i++) {
    unsigned char x = a[i];
    unsigned char y = (unsigned char)b[i];
    if (x >= 'A' && x <= 'Z') x = (unsigned char)(x - 'A' + 'a');
    if (y >= 'A' && y <= 'Z') y = (unsigned char)(y - 'A' + 'a');
    if (x != y) return false;
  }
  return true;
}

static bool is_authorization_key(const grpc_slice *key) {
  static const char name[] = "authorization";
  return GRPC_SLICE_LENGTH(*key) == sizeof name - 1 &&
         ascii_equal_nocase(GRPC_SLICE_START_PTR(*key), name, sizeof name - 1);
}

bool wk_grpc_auth_token_ok(const char *token, size_t token_len, const grpc_metadata_array *md) {
  static const char scheme[] = "bearer ";
  if (token == NULL) return true;
  bool ok = false;
  for (size_t i = 0; i < md->count; i++) {
    if (!is_authorization_key(&md->metadata[i].key)) continue;
    const grpc_slice *v = &md->metadata[i].value;
    size_t n = GRPC_SLICE_LENGTH(*v);
    const uint8_t *p = GRPC_SLICE_START_PTR(*v);
    if (n < sizeof scheme - 1 || !ascii_equal_nocase(p, scheme, sizeof scheme - 1)) continue;
    const uint8_t *got = p + (sizeof scheme - 1);
    if (wk_ct_equal(token, token_len, got, n - (sizeof scheme - 1))) ok = true;
  }
  return ok;
}

/* ---- request metadata ---------------------------------------------------------- */

void wk_grpc_auth_md_copy(wk_grpc_auth_md *out, const grpc_metadata_array *md) {
  memset(out, 0, sizeof *out);
  size_t total = 0;
  size_t kept = 0;
  for (size_t i = 0; i < md->count; i++) {
    if (is_authorization_key(&md->metadata[i].key)) continue;
    total += GRPC_SLICE_LENGTH(md->metadata[i].key) + 1;
    total += GRPC_SLICE_LENGTH(md->metadata[i].value) + 1;
    kept++;
  }
  if (kept == 0) return;
  /* one block (two RPCs per task copy their metadata): the entries, then the blob */
  out->entries = wk_xcalloc(1, kept * sizeof *out->entries + total);
  out->blob = (char *)(out->entries + kept);
  char *p = out->blob;
  size_t at = 0;
  for (size_t i = 0; i < md->count; i++) {
    if (is_authorization_key(&md->metadata[i].key)) continue;
    const grpc_slice *k = &md->metadata[i].key;
    const grpc_slice *v = &md->metadata[i].value;
    wk_grpc_auth_md_entry *e = &out->entries[at++];
    e->key_len = GRPC_SLICE_LENGTH(*k);
    memcpy(p, GRPC_SLICE_START_PTR(*k), e->key_len);
    e->key = p;
    p += e->key_len + 1;
    e->value_len = GRPC_SLICE_LENGTH(*v);
    memcpy(p, GRPC_SLICE_START_PTR(*v), e->value_len);
    e->value = p;
    p += e->value_len + 1;
  }
  out->count = kept;
  WK_ASSERT(at == kept);
  WK_ASSERT(p == out->blob + total);
}

bool wk_grpc_auth_md_get(const wk_grpc_auth_md *m, const char *key, char *buf, size_t buf_len) {
  if (key == NULL) return false;
  size_t key_len = strlen(key);
  for (size_t i = 0; i < m->count; i++) {
    const wk_grpc_auth_md_entry *e = &m->entries[i];
    if (e->key_len != key_len || !ascii_equal_nocase((const uint8_t *)e->key, key, key_len)) {
      continue;
    }
    if (buf != NULL && buf_len > 0) {
      size_t n = e->value_len < buf_len - 1 ? e->value_len : buf_len - 1;
      memcpy(buf, e->value, n);
      buf[n] = '\0';
    }
    return true;
  }
  return false;
}

void wk_grpc_auth_md_free(wk_grpc_auth_md *m) {
  free(m->entries); /* the blob is in the same block */
  memset(m, 0, sizeof *m);
}

/* ---- TLS ------------------------------------------------------------------------ */

void wk_grpc_auth_tls_free(wk_grpc_auth_tls *t) {
  wk_pem_free(t->cert);
  wk_pem_free(t->key);
  wk_pem_free(t->client_ca);
  memset(t, 0, sizeof *t);
}

int wk_grpc_auth_load(const wk_grpc_server_config *cfg, wk_grpc_auth_tls *t, char *err,
                      size_t err_len) {
  memset(t, 0, sizeof *t);
  bool cert = setting_on(cfg->tls_cert_file);
  bool key = setting_on(cfg->tls_key_file);
  bool ca = setting_on(cfg->tls_client_ca_file);
  if (cert != key) {
    wk_errf(err, err_len,
            "grpc server: TLS needs both tls_cert_file and tls_key_file (only %s is set)",
            cert ? "tls_cert_file" : "tls_key_file");
    return -1;
  }
  if (ca && !cert) {
    wk_errf(err, err_len,
            "grpc server: tls_client_ca_file (mutual TLS) needs tls_cert_file and "
            "tls_key_file too");
    return -1;
  }
  if (setting_on(cfg->auth_token)) {
    size_t n = strnlen(cfg->auth_token, WK_GRPC_AUTH_TOKEN_MAX + 1);
    if (n > WK_GRPC_AUTH_TOKEN_MAX) {
      wk_errf(err, err_len, "grpc server: auth_token is longer than %u characters",
              WK_GRPC_AUTH_TOKEN_MAX);
      return -1;
    }
    for (size_t i = 0; i < n; i++) {
      unsigned char c = (unsigned char)cfg->auth_token[i];
      if (c <= 0x20 || c >= 0x7f) {
        wk_errf(err, err_len,
                "grpc server: auth_token must be printable ASCII without spaces (character "
                "%zu is not)",
                i + 1);
        return -1;
      }
    }
  }
  if (!cert) return 0;
  char why[1400];
  t->cert = wk_pem_read(cfg->tls_cert_file, WK_PEM_CERTIFICATES, "tls_cert_file", why, sizeof why);
  if (t->cert != NULL) {
    t->key = wk_pem_read(cfg->tls_key_file, WK_PEM_PRIVATE_KEY, "tls_key_file", why, sizeof why);
  }
  if (t->key != NULL && ca) {
    t->client_ca = wk_pem_read(cfg->tls_client_ca_file, WK_PEM_CERTIFICATES, "tls_client_ca_file",
                               why, sizeof why);
  }
  if (t->cert == NULL || t->key == NULL || (ca && t->client_ca == NULL)) {
    wk_grpc_auth_tls_free(t);
    wk_errf(err, err_len, "grpc server: %s", why);
    return -1;
  }
  return 0;
}

grpc_server_credentials *wk_grpc_auth_credentials(const wk_grpc_auth_tls *t) {
  if (t->cert == NULL) return grpc_insecure_server_credentials_create();
  grpc_ssl_pem_key_cert_pair pair = {.private_key = t->key, .cert_chain = t->cert};
  /* gRPC copies the PEM text */
  grpc_ssl_server_certificate_config *cc =
      grpc_ssl_server_certificate_config_create(t->client_ca, &pair, 1);
  if (cc == NULL) return NULL;
  grpc_ssl_server_credentials_options *opts =
      grpc_ssl_server_credentials_create_options_using_config(
          t->client_ca != NULL ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
                               : GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE,
          cc);
  if (opts == NULL) return NULL;
  return grpc_ssl_server_credentials_create_with_options(opts);
}

/* ---- the client's certificate ---------------------------------------------------- */

char *wk_grpc_auth_peer_identities(grpc_call *call) {
  grpc_auth_context *ctx = grpc_call_auth_context(call);
  if (ctx == NULL) return NULL;
  char *out = NULL;
  size_t len = 0;
  if (grpc_auth_context_peer_is_authenticated(ctx)) {
    const char *kinds[] = {GRPC_X509_CN_PROPERTY_NAME, GRPC_X509_SAN_PROPERTY_NAME};
    for (size_t k = 0; k < sizeof kinds / sizeof *kinds; k++) {
      grpc_auth_property_iterator it = grpc_auth_context_find_properties_by_name(ctx, kinds[k]);
      const grpc_auth_property *p;
      while ((p = grpc_auth_property_iterator_next(&it)) != NULL) {
        if (p->value == NULL || p->value_length == 0 || memchr(p->value, '\n', p->value_length) ||
            memchr(p->value, '\0', p->value_length))
          continue;
        out = wk_xrealloc(out, len + p->value_length + 2);
        if (len > 0) out[len++] = '\n';
        memcpy(out + len, p->value, p->value_length);
        len += p->value_length;
        out[len] = '\0';
      }
    }
  }
  grpc_auth_context_release(ctx);
  return out;
}

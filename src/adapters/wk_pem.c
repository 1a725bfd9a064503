/* wk_pem.c: reading and checking the PEM files of TLS. See wk_pem.h. */
#include "adapters/wk_pem.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/wk_alloc.h"
#include "lib/wk_base64.h"
#include "lib/wk_err.h"

void wk_pem_free(char *pem) {
  if (pem == NULL) return;
  volatile char *p = pem;
  while (*p != '\0') *p++ = '\0';
  free(pem);
}

/* Checks the base64 body [p, end) of one block: it decodes (whitespace ignored, at most
 * two '=' and only at the end) to one DER SEQUENCE of exactly the decoded length. */
static bool body_ok(const char *p, const char *end, const char **why) {
  unsigned char head[6]; /* the first decoded bytes: tag and length */
  size_t decoded = 0;
  wk_base64_rc rc =
      wk_base64_decode(p, (size_t)(end - p), WK_BASE64_SKIP_SPACE | WK_BASE64_PAD_MAX_2, head,
                       sizeof head, &decoded);
  if (rc == WK_BASE64_E_CHAR) {
    *why = "its body is not base64";
    return false;
  }
  if (rc != WK_BASE64_OK) {
    *why = "its body is not base64 (bad length or padding)";
    return false;
  }
  if (decoded < 2 || head[0] != 0x30) {
    *why = "its body is not DER (no ASN.1 SEQUENCE)";
    return false;
  }
  size_t len = 0;
  size_t hdr = 2;
  if (head[1] < 0x80) {
    len = head[1];
  } else {
    size_t n = head[1] & 0x7fu;
    if (n == 0 || n > 4 || decoded < 2 + n) {
      *why = "its body is not DER (bad length)";
      return false;
    }
    for (size_t i = 0; i < n; i++) len = (len << 8) | (size_t)head[2 + i];
    hdr += n;
  }
  if (hdr + len != decoded) {
    *why = "its body is truncated or has bytes after the DER value";
    return false;
  }
  return true;
}

/* True when [p, end) contains the string s. */
static bool contains(const char *p, const char *end, const char *s) {
  size_t n = strlen(s);
  for (; p + n <= end; p++) {
    if (memcmp(p, s, n) == 0) return true;
  }
  return false;
}

bool wk_pem_check(const char *pem, wk_pem_kind kind, const char *what, char *err, size_t err_len) {
  static const char begin[] = "-----BEGIN ";
  static const char end_mark[] = "-----END ";
  static const char dashes[] = "-----";
  size_t certs = 0;
  size_t keys = 0;
  const char *p = pem;
  for (;;) {
    const char *b = strstr(p, begin);
    if (b == NULL) break;
    const char *label = b + sizeof begin - 1;
    const char *label_end = strstr(label, dashes);
    const char *eol = strchr(label, '\n');
    if (label_end == NULL || (eol != NULL && eol < label_end)) {
      wk_errf(err, err_len, "%s: a malformed -----BEGIN line", what);
      return false;
    }
    size_t label_len = (size_t)(label_end - label);
    const char *body = label_end + sizeof dashes - 1;
    /* the END line with the same label */
    const char *e = strstr(body, end_mark);
    if (e == NULL || strncmp(e + sizeof end_mark - 1, label, label_len) != 0 ||
        strncmp(e + sizeof end_mark - 1 + label_len, dashes, sizeof dashes - 1) != 0) {
      wk_errf(err, err_len, "%s: the PEM block \"%.*s\" has no matching -----END line", what,
              (int)(label_len > 64 ? 64 : label_len), label);
      return false;
    }
    bool is_cert = label_len == 11 && memcmp(label, "CERTIFICATE", 11) == 0;
    bool is_key = (label_len == 11 && memcmp(label, "PRIVATE KEY", 11) == 0) ||
                  (label_len == 15 && memcmp(label, "RSA PRIVATE KEY", 15) == 0) ||
                  (label_len == 14 && memcmp(label, "EC PRIVATE KEY", 14) == 0);
    bool is_encrypted = label_len == 21 && memcmp(label, "ENCRYPTED PRIVATE KEY", 21) == 0;
    if (kind == WK_PEM_PRIVATE_KEY && is_encrypted) {
      wk_errf(err, err_len,
              "%s: the private key is encrypted; give an unencrypted key (e.g. "
              "`openssl pkey -in KEY -out PLAIN`)",
              what);
      return false;
    }
    if (kind == WK_PEM_PRIVATE_KEY && is_key && contains(body, e, "Proc-Type:")) {
      wk_errf(err, err_len, "%s: the private key is encrypted (Proc-Type header)", what);
      return false;
    }
    bool wanted = kind == WK_PEM_CERTIFICATES ? is_cert : is_key;
    if (wanted) {
      const char *why = "";
      if (!body_ok(body, e, &why)) {
        wk_errf(err, err_len, "%s: PEM block %zu (%.*s): %s", what,
                (kind == WK_PEM_CERTIFICATES ? certs : keys) + 1, (int)label_len, label, why);
        return false;
      }
      if (is_cert) certs++;
      if (is_key) keys++;
    }
    p = e + sizeof end_mark - 1 + label_len + sizeof dashes - 1;
  }
  if (kind == WK_PEM_CERTIFICATES && certs == 0) {
    wk_errf(err, err_len, "%s: not a PEM certificate file (no -----BEGIN CERTIFICATE----- block)",
            what);
    return false;
  }
  if (kind == WK_PEM_PRIVATE_KEY && keys != 1) {
    wk_errf(err, err_len,
            keys == 0 ? "%s: not a PEM private key file (no -----BEGIN PRIVATE KEY----- "
                        "block)"
                      : "%s: more than one private key in the file",
            what);
    return false;
  }
  return true;
}

char *wk_pem_read(const char *path, wk_pem_kind kind, const char *what, char *err, size_t err_len) {
  char name[1200];
  (void)snprintf(name, sizeof name, "%s %.1024s", what, path);
  FILE *f = fopen(path, "rb");
  if (f == NULL) {
    wk_errf(err, err_len, "%s: cannot open: %s", name, strerror(errno));
    return NULL;
  }
  char *buf = wk_xmalloc(WK_PEM_MAX_BYTES + 1);
  size_t n = fread(buf, 1, WK_PEM_MAX_BYTES + 1, f);
  int read_error = ferror(f);
  int saved = errno;
  (void)fclose(f);
  if (read_error) {
    wk_errf(err, err_len, "%s: cannot read: %s", name, strerror(saved));
    free(buf);
    return NULL;
  }
  if (n > WK_PEM_MAX_BYTES) {
    wk_errf(err, err_len, "%s: larger than %zu bytes: not a PEM file", name, WK_PEM_MAX_BYTES);
    memset(buf, 0, WK_PEM_MAX_BYTES + 1);
    free(buf);
    return NULL;
  }
  buf[n] = '\0';
  if (n == 0) {
    wk_errf(err, err_len, "%s: the file is empty", name);
    free(buf);
    return NULL;
  }
  if (memchr(buf, '\0', n) != NULL) {
    wk_errf(err, err_len,
            "%s: a binary file (DER?); PEM text is needed (`openssl x509 -inform der -in "
            "FILE` converts a certificate)",
            name);
    memset(buf, 0, n);
    free(buf);
    return NULL;
  }
  if (!wk_pem_check(buf, kind, name, err, err_len)) {
    wk_pem_free(buf);
    return NULL;
  }
  return buf;
}

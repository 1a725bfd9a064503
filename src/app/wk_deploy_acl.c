/* wk_deploy_acl.c: deploy_allowed_clients (see wk_deploy_acl.h). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* inet_pton (the app defines it for every file; the fuzz target not) */
#endif
#include "app/wk_deploy_acl.h"

#include <arpa/inet.h>
#include <stdlib.h>
#include <string.h>

#include "lib/wk_err.h"

/* ---- deploy_allowed_clients ------------------------------------------------------ */

/* Text as an address: IPv4 into its v4-mapped IPv6 form. */
static bool parse_addr(const char *s, uint8_t out[16], bool *v4) {
  struct in_addr a4;
  struct in6_addr a6;
  if (inet_pton(AF_INET, s, &a4) == 1) {
    memset(out, 0, 10);
    out[10] = out[11] = 0xff;
    memcpy(out + 12, &a4, 4);
    *v4 = true;
    return true;
  }
  if (inet_pton(AF_INET6, s, &a6) == 1) {
    memcpy(out, &a6, 16);
    *v4 = false;
    return true;
  }
  return false;
}

static int parse_item(const char *item, wk_deploy_acl_entry *e, char *err, size_t err_len) {
  memset(e, 0, sizeof *e);
  char buf[WK_DEPLOY_ACL_NAME_MAX + 1];
  size_t n = strlen(item);
  if (n > WK_DEPLOY_ACL_NAME_MAX) {
    wk_errf(err, err_len, "deploy_allowed_clients: an item is longer than %u bytes",
            WK_DEPLOY_ACL_NAME_MAX);
    return -1;
  }
  memcpy(buf, item, n + 1);
  char *slash = strchr(buf, '/');
  if (slash) *slash = '\0';
  bool v4 = false;
  if (parse_addr(buf, e->addr, &v4)) {
    unsigned max = v4 ? 32u : 128u, prefix = max;
    if (slash) {
      char *end = NULL;
      unsigned long p = strtoul(slash + 1, &end, 10);
      if (slash[1] < '0' || slash[1] > '9' || *end != '\0' || p > max) {
        wk_errf(err, err_len,
                "deploy_allowed_clients: '%s' is not a network: the prefix after '/' must be "
                "0..%u",
                item, max);
        return -1;
      }
      prefix = (unsigned)p;
    }
    e->is_net = true;
    e->prefix = v4 ? prefix + 96u : prefix;
    return 0;
  }
  for (const char *c = item; *c; c++) {
    if ((unsigned char)*c <= 0x20 || (unsigned char)*c >= 0x7f) {
      wk_errf(err, err_len,
              "deploy_allowed_clients: '%s' is neither an IP address, a network (addr/prefix) "
              "nor a certificate name (printable, no blanks)",
              item);
      return -1;
    }
  }
  if (slash) {
    wk_errf(err, err_len,
            "deploy_allowed_clients: '%s' is not a network (the part before '/' is not an IP "
            "address)",
            item);
    return -1;
  }
  memcpy(e->name, item, n + 1);
  return 0;
}

int wk_deploy_acl_parse(const char *spec, wk_deploy_acl *acl, char *err, size_t err_len) {
  memset(acl, 0, sizeof *acl);
  const char *p = spec ? spec : "";
  while (*p) {
    while (*p == ' ' || *p == '\t' || *p == ',') p++;
    if (!*p) break;
    const char *end = strchr(p, ',');
    size_t len = end ? (size_t)(end - p) : strlen(p);
    while (len > 0 && (p[len - 1] == ' ' || p[len - 1] == '\t')) len--;
    if (acl->n == WK_DEPLOY_ACL_MAX) {
      wk_errf(err, err_len, "deploy_allowed_clients: more than %u items", WK_DEPLOY_ACL_MAX);
      return -1;
    }
    char item[WK_DEPLOY_ACL_NAME_MAX + 2];
    if (len > WK_DEPLOY_ACL_NAME_MAX) len = WK_DEPLOY_ACL_NAME_MAX + 1; /* refused below */
    memcpy(item, p, len);
    item[len] = '\0';
    if (parse_item(item, &acl->entries[acl->n], err, err_len) != 0) return -1;
    acl->n++;
    p += end ? (size_t)(end - p) : strlen(p);
  }
  return 0;
}

/* The address in gRPC's peer string ("ipv4:1.2.3.4:5", "ipv6:[::1]:5"). */
static bool peer_addr(const char *peer, uint8_t out[16]) {
  char host[64];
  const char *h;
  size_t n;
  bool v4 = false;
  if (strncmp(peer, "ipv4:", 5) == 0) {
    h = peer + 5;
    const char *colon = strrchr(h, ':');
    n = colon ? (size_t)(colon - h) : strlen(h);
  } else if (strncmp(peer, "ipv6:[", 6) == 0) {
    h = peer + 6;
    const char *close = strchr(h, ']');
    if (!close) return false;
    n = (size_t)(close - h);
    const char *zone = memchr(h, '%', n); /* fe80::1%eth0 */
    if (zone) n = (size_t)(zone - h);
  } else {
    return false;
  }
  if (n == 0 || n >= sizeof host) return false;
  memcpy(host, h, n);
  host[n] = '\0';
  return parse_addr(host, out, &v4);
}

static bool in_net(const uint8_t a[16], const wk_deploy_acl_entry *e) {
  unsigned bits = e->prefix;
  for (unsigned i = 0; i < 16 && bits > 0; i++) {
    unsigned take = bits >= 8 ? 8 : bits;
    uint8_t mask = (uint8_t)(0xffu << (8 - take));
    if ((a[i] & mask) != (e->addr[i] & mask)) return false;
    bits -= take;
  }
  return true;
}

static bool has_identity(const char *identities, const char *name) {
  size_t n = strlen(name);
  for (const char *p = identities; p && *p;) {
    const char *nl = strchr(p, '\n');
    size_t len = nl ? (size_t)(nl - p) : strlen(p);
    if (len == n && memcmp(p, name, n) == 0) return true;
    if (!nl) break;
    p = nl + 1;
  }
  return false;
}

bool wk_deploy_acl_allows(const wk_deploy_acl *acl, const char *peer, const char *identities) {
  if (acl->n == 0) return true;
  uint8_t a[16];
  bool have_addr = peer && peer_addr(peer, a);
  for (size_t i = 0; i < acl->n; i++) {
    const wk_deploy_acl_entry *e = &acl->entries[i];
    if (e->is_net ? (have_addr && in_net(a, e)) : has_identity(identities, e->name)) return true;
  }
  return false;
}

/* wk_deploy_acl.h: deploy_allowed_clients, who may call DeployCode and SetCurrentEpoch
 * (app/wk_deploy.h): peer addresses, networks and client certificate names. Pure (no
 * I/O): the settings check and the deploy handler share it. */
#ifndef WK_DEPLOY_ACL_H
#define WK_DEPLOY_ACL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define WK_DEPLOY_ACL_MAX 64u /* entries of deploy_allowed_clients */
#define WK_DEPLOY_ACL_NAME_MAX 256u

/* ---- deploy_allowed_clients ------------------------------------------------------ */

typedef struct wk_deploy_acl_entry {
  bool is_net;      /* an address or network; else a certificate name */
  uint8_t addr[16]; /* IPv6, or IPv4 as ::ffff:a.b.c.d */
  unsigned prefix;  /* bits that must match (of 128) */
  char name[WK_DEPLOY_ACL_NAME_MAX + 1];
} wk_deploy_acl_entry;

typedef struct wk_deploy_acl {
  wk_deploy_acl_entry entries[WK_DEPLOY_ACL_MAX];
  size_t n; /* 0 = any client */
} wk_deploy_acl;

/** Parses deploy_allowed_clients: items separated by commas (blanks around them ignored),
 * each an IPv4 or IPv6 address, a CIDR network (addr/prefix), or else a certificate
 * name (1..256 printable characters, no blank). Returns 0, or -1 with the item at fault
 * in err. Pure. */
int wk_deploy_acl_parse(const char *spec, wk_deploy_acl *acl, char *err, size_t err_len);

/** Whether a client may deploy: the ACL is empty, or the peer's address (as gRPC
 * reports it: "ipv4:1.2.3.4:5", "ipv6:[::1]:5") lies in one of its networks, or one of
 * `identities` ('\n'-separated certificate names, wk_rpc_peer_identities) equals one of
 * its names. Pure. */
bool wk_deploy_acl_allows(const wk_deploy_acl *acl, const char *peer, const char *identities);

#endif

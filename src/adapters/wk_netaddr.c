/* wk_netaddr.c: see wk_netaddr.h. */
#define _GNU_SOURCE

#include "adapters/wk_netaddr.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

bool wk_netaddr_split(const char *addr, char *host, size_t host_len, char *port, size_t port_len) {
  const char *colon;
  const char *h = addr;
  size_t hl;
  if (addr[0] == '[') {
    const char *close = strchr(addr, ']');
    if (close == NULL || close[1] != ':') return false;
    h = addr + 1;
    hl = (size_t)(close - h);
    colon = close + 1;
  } else {
    colon = strrchr(addr, ':');
    if (colon == NULL || memchr(addr, ':', (size_t)(colon - addr)) != NULL) return false;
    hl = (size_t)(colon - addr);
  }
  size_t pl = strlen(colon + 1);
  if (hl >= host_len || pl == 0 || pl > 5 || pl >= port_len) return false;
  if (strspn(colon + 1, "0123456789") != pl || atol(colon + 1) > 65535) return false;
  memcpy(host, h, hl);
  host[hl] = '\0';
  memcpy(port, colon + 1, pl + 1);
  return true;
}

bool wk_netaddr_is_wildcard(const char *host, size_t host_len) {
  char h[64];
  if (host_len == 0) return true;
  if (host_len >= 2 && host[0] == '[' && host[host_len - 1] == ']') {
    host++;
    host_len -= 2;
  }
  if (host_len >= sizeof h) return false;
  memcpy(h, host, host_len);
  h[host_len] = '\0';
  struct in_addr a4;
  struct in6_addr a6;
  if (inet_pton(AF_INET, h, &a4) == 1) return a4.s_addr == htonl(INADDR_ANY);
  if (inet_pton(AF_INET6, h, &a6) == 1) return IN6_IS_ADDR_UNSPECIFIED(&a6);
  return false;
}

/* The source address the kernel picks for the default IPv4 route; false without one. */
static bool default_route_v4(char *out, size_t len) {
  int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  struct sockaddr_in dst = {.sin_family = AF_INET, .sin_port = htons(9)};
  inet_pton(AF_INET, "192.0.2.1", &dst.sin_addr); /* TEST-NET-1: routed, never reached */
  struct sockaddr_in src;
  socklen_t slen = sizeof src;
  bool ok = connect(fd, (struct sockaddr *)&dst, sizeof dst) == 0 &&
            getsockname(fd, (struct sockaddr *)&src, &slen) == 0 &&
            src.sin_addr.s_addr != htonl(INADDR_ANY) && (ntohl(src.sin_addr.s_addr) >> 24) != 127 &&
            inet_ntop(AF_INET, &src.sin_addr, out, (socklen_t)len) != NULL;
  close(fd);
  return ok;
}

/* The first address of `family` on an interface that is up and not loopback (IPv6:
 * not link-local, which needs a scope to dial). */
static bool interface_addr(int family, char *out, size_t len, char *ifname, size_t ifname_len) {
  struct ifaddrs *all = NULL;
  if (getifaddrs(&all) != 0) return false;
  bool found = false;
  for (struct ifaddrs *i = all; i && !found; i = i->ifa_next) {
    if (!i->ifa_addr || i->ifa_addr->sa_family != family) continue;
    if (!(i->ifa_flags & IFF_UP) || (i->ifa_flags & IFF_LOOPBACK)) continue;
    char text[INET6_ADDRSTRLEN];
    if (family == AF_INET) {
      const struct sockaddr_in *s = (const struct sockaddr_in *)(const void *)i->ifa_addr;
      if ((ntohl(s->sin_addr.s_addr) >> 24) == 127) continue;
      if (!inet_ntop(AF_INET, &s->sin_addr, text, sizeof text)) continue;
      snprintf(out, len, "%s", text);
    } else {
      const struct sockaddr_in6 *s = (const struct sockaddr_in6 *)(const void *)i->ifa_addr;
      if (IN6_IS_ADDR_LINKLOCAL(&s->sin6_addr) || IN6_IS_ADDR_LOOPBACK(&s->sin6_addr)) continue;
      if (!inet_ntop(AF_INET6, &s->sin6_addr, text, sizeof text)) continue;
      snprintf(out, len, "[%s]", text);
    }
    snprintf(ifname, ifname_len, "%s", i->ifa_name);
    found = true;
  }
  freeifaddrs(all);
  return found;
}

void wk_netaddr_primary(char *out, size_t len, const char **how) {
  static char how_buf[IF_NAMESIZE + 32];
  char ifname[IF_NAMESIZE + 1] = "";
  if (default_route_v4(out, len)) {
    *how = "default route";
  } else if (interface_addr(AF_INET, out, len, ifname, sizeof ifname) ||
             interface_addr(AF_INET6, out, len, ifname, sizeof ifname)) {
    snprintf(how_buf, sizeof how_buf, "interface %s", ifname);
    *how = how_buf;
  } else {
    snprintf(out, len, "127.0.0.1");
    *how = "loopback only";
  }
}

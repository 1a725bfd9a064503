/* wk_netaddr.h: host:port addresses: splitting one, and the address a worker
 * listening on a wildcard (0.0.0.0, [::]) tells others to dial, when advertise_addr
 * does not say. */
#ifndef WK_NETADDR_H
#define WK_NETADDR_H

#include <stdbool.h>
#include <stddef.h>

/** Splits "host:port", "[v6]:port" or ":port" into host (without brackets; empty for
 * ":port") and port, copied into the buffers given. False, writing nothing useful, when
 * addr has another form: no port, a port that is not a number up to 65535, a bare IPv6
 * address (it needs brackets), a part too long for its buffer. */
bool wk_netaddr_split(const char *addr, char *host, size_t host_len, char *port, size_t port_len);

/** True when host (as in listen_addr: "0.0.0.0", "[::]", "::", or empty) names every
 * local address rather than one. */
bool wk_netaddr_is_wildcard(const char *host, size_t host_len);

/** Finds this host's primary routable address, as text fit for "HOST:PORT" (an IPv6
 * address in brackets), into out: the source address of the default IPv4 route (a UDP
 * socket connected to 192.0.2.1, TEST-NET-1; nothing is sent), else the first IPv4
 * address of an interface that is up and not loopback, else the same for IPv6 (global
 * addresses only), else "127.0.0.1". *how names the way it was found ("default route",
 * "interface NAME", "loopback only"; static storage or out-of-band buffer owned by the
 * function, valid until the next call). Never fails. */
void wk_netaddr_primary(char *out, size_t len, const char **how);

#endif

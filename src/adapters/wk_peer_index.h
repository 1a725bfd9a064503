/* wk_peer_index.h: accepted connections by their peer address. A gRPC call knows its
 * connection only by gRPC's peer string ("ipv4:127.0.0.1:50123"); the listener, which
 * accepted the socket, files its descriptor here under the same address, so the server
 * can find the socket a call's answers go out on (to cork it while it starts a burst of
 * answers, wk_grpc_server.c "Corking").
 *
 * A key is an address and a port, IPv4 as an IPv4-mapped IPv6 address: gRPC names a
 * mapped peer of a dual-stack socket "ipv4:", and both spellings meet on one key.
 *
 * The index is a plain table (no lock, no threads): its owner locks around it. */
#ifndef WK_PEER_INDEX_H
#define WK_PEER_INDEX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

typedef struct wk_peer_key {
  uint8_t addr[16]; /* IPv6, or IPv4 mapped (::ffff:a.b.c.d) */
  uint16_t port;    /* host order */
} wk_peer_key;

/** The key of an AF_INET or AF_INET6 address (as getpeername gives it). False for any
 * other family or a length too short for its family. */
bool wk_peer_key_from_sockaddr(const struct sockaddr *sa, socklen_t len, wk_peer_key *out);

/** The key of a gRPC peer string: "ipv4:ADDR:PORT", "ipv6:[ADDR]:PORT" or
 * "ipv6:%5BADDR%5D:PORT" (the URI form gRPC 1.51 writes). False for anything else
 * ("unix:...", a name, a missing or out-of-range port, trailing bytes). */
bool wk_peer_key_from_uri(const char *peer, wk_peer_key *out);

typedef struct wk_peer_index wk_peer_index;

/** An empty index. Never NULL (allocation failure aborts, as wk_xmalloc). */
wk_peer_index *wk_peer_index_new(void);

/** Frees the index. NULL is a no-op. */
void wk_peer_index_free(wk_peer_index *ix);

/** Files fd under key, replacing what was filed under the same key (a peer address
 * names one live connection at a time). Grows as needed. */
void wk_peer_index_put(wk_peer_index *ix, const wk_peer_key *key, int fd);

/** The descriptor filed under key, or -1. */
int wk_peer_index_find(const wk_peer_index *ix, const wk_peer_key *key);

/** Forgets every entry (the listener then refiles what is still open). A small table's
 * memory is kept; a big one's is given back. */
void wk_peer_index_clear(wk_peer_index *ix);

/** How many entries are filed. */
size_t wk_peer_index_count(const wk_peer_index *ix);

#endif

/* wk_grpc_listener.h: the gRPC server's TCP listener, accepted by the worker itself.
 *
 * Why. gRPC core's own listener (1.51) stops for good after one accept() failure
 * other than EAGAIN (EMFILE, ENFILE, ENOBUFS: grpc/grpc#20418, #16058, #31080): the
 * port stays bound, connections pile up in the backlog and are never accepted, while
 * calls on connections already open still work. So the worker binds and accepts
 * itself, on one thread, and hands each connected socket to gRPC through gRPC core's
 * external-connection handler (the port "external:NAME", what grpc++'s
 * ExternalConnectionAcceptor is built on). That handler runs gRPC's usual handshake,
 * TLS included, so plaintext and TLS ports take the same path.
 * (grpc_server_add_channel_from_fd of grpc/grpc_posix.h takes only insecure
 * credentials in 1.51: it logs "Failed to create channel due to invalid creds" for
 * any other.)
 *
 * What the accept thread does:
 *   - max_connections: a connection beyond it is accepted and closed at once (the
 *     client sees the connection closed: UNAVAILABLE), and counted.
 *   - Out of file descriptors (EMFILE, ENFILE, ENOBUFS, ENOMEM from accept): the
 *     listener is "blocked". It closes its reserve descriptor, accepts and closes the
 *     connections waiting in the backlog (so clients are told at once instead of
 *     hanging), re-opens the reserve, and then checks every BACKOFF_MS whether a
 *     descriptor can be opened again; once one can, it accepts again.
 *   - Open connections are counted by remembering each handed-over socket's
 *     descriptor and inode; one whose descriptor no longer names that socket was
 *     closed by gRPC (checked when the cap is reached, and every second).
 *   - Each open connection is filed by its peer address (wk_peer_index.h), so the
 *     server can find the socket of a call's connection.
 *
 * Threads: the listener's own thread accepts; the stats are read from any thread. */
#ifndef WK_GRPC_LISTENER_H
#define WK_GRPC_LISTENER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <grpc/grpc.h>

typedef struct wk_grpc_listener wk_grpc_listener;

/* Counters since start; `open` and `accept_blocked` are the current state. */
typedef struct wk_grpc_conn_stats {
  uint64_t accepted;                /* connections handed to gRPC */
  uint64_t refused_max_connections; /* closed at once: max_connections were open */
  uint64_t refused_fd_limit;        /* closed at once: the worker was out of descriptors */
  uint64_t sends_corked;            /* answers started while their connection was corked
                                       (the server's, wk_grpc_server_conn_stats) */
  uint32_t open;                    /* handed over and not yet closed (at most 1 s old) */
  uint32_t max_connections;         /* the cap (0: none) */
  bool accept_blocked;              /* out of descriptors: no connection can be accepted */
} wk_grpc_conn_stats;

/** True when listen_addr is one this listener serves (host:port, [v6]:port); false
 * for the others (unix:PATH), which gRPC's own listener keeps. */
bool wk_grpc_listener_handles(const char *listen_addr);

/** Binds and listens on listen_addr ("host:port", "[v6]:port"; port 0 picks a free
 * one; a wildcard host binds IPv6 and IPv4; a name binds every address it resolves
 * to). Writes the bound port to *port. Accepts nothing before wk_grpc_listener_start.
 * Returns the listener, or NULL with a reason in err (not host:port, address in use,
 * not local). */
wk_grpc_listener *wk_grpc_listener_open(const char *listen_addr, int *port, char *err,
                                        size_t err_len);

/** The channel argument to pass to grpc_server_create: it lets gRPC give the listener
 * its connection handler when the port wk_grpc_listener_port_name() is added. The
 * argument points into l (valid until wk_grpc_listener_close). */
grpc_arg wk_grpc_listener_channel_arg(wk_grpc_listener *l);

/** The port name to give grpc_server_add_http2_port ("external:wk-listener-..."). */
const char *wk_grpc_listener_port_name(const wk_grpc_listener *l);

/** True once gRPC has handed over its connection handler (the port was added with
 * credentials it accepted). */
bool wk_grpc_listener_attached(const wk_grpc_listener *l);

/** Starts the accept thread; call after grpc_server_start. max_connections 0 = no cap.
 * Returns 0, or -1 with a reason in err (not attached). */
int wk_grpc_listener_start(wk_grpc_listener *l, uint32_t max_connections, char *err,
                           size_t err_len);

/** Stops accepting and joins the thread (connections handed over stay gRPC's). Call
 * before the gRPC server shuts down: gRPC frees the handler then. Idempotent. */
void wk_grpc_listener_stop(wk_grpc_listener *l);

/** Stops (if started), closes the listening sockets and frees l. NULL is a no-op. */
void wk_grpc_listener_close(wk_grpc_listener *l);

/** The descriptor of the open connection whose peer gRPC names `peer` (as
 * grpc_call_get_peer gives it), or -1 (not one of ours, or closed and forgotten). Any
 * thread. The descriptor is gRPC's: it may be closed, even reused, by the time the
 * caller uses it (the listener forgets a closed one within a second), so the caller
 * must only do what is harmless to any socket (set TCP_CORK and clear it again). */
int wk_grpc_listener_peer_fd(wk_grpc_listener *l, const char *peer);

/** The counters and state; any thread. */
void wk_grpc_listener_stats(const wk_grpc_listener *l, wk_grpc_conn_stats *out);

#endif

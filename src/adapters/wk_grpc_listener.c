/* wk_grpc_listener.c: the worker's own accept loop for the gRPC port. See
 * wk_grpc_listener.h for why and what.
 *
 * The hand-over. gRPC core 1.51 adds a port named "external:NAME" when the server's
 * channel arguments hold a pointer argument of that name: it writes a
 * grpc_core::TcpServerFdHandler* through that pointer (chttp2_server.cc,
 * Chttp2ServerListener::CreateWithAcceptor). The handler is a C++ object with one
 * method, Handle(int listener_fd, int fd, grpc_byte_buffer *pending_read), which wraps
 * the socket in a gRPC endpoint and runs the port's handshakers (TLS when the port's
 * credentials say so) exactly as for a connection gRPC accepted itself
 * (tcp_server_posix.cc, ExternalConnectionHandler). The class is
 *     class TcpServerFdHandler {
 *      public:
 *       virtual ~TcpServerFdHandler() = default;
 *       virtual void Handle(int listener_fd, int fd, grpc_byte_buffer* pending_read) = 0;
 *     };
 * so under the Itanium C++ ABI (GCC and Clang on Linux) the object starts with its
 * vtable pointer, whose slots are the complete destructor, the deleting destructor and
 * Handle: Handle is slot 2, called with the object as its first argument. The
 * e2e tests run every connection through it. gRPC deletes the handler when the
 * server shuts down, so the accept thread is joined before that. */
#define _GNU_SOURCE /* accept4, pthread_setname_np */
#include "adapters/wk_grpc_listener.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "adapters/wk_netaddr.h"
#include "adapters/wk_peer_index.h"
#include "lib/wk_alloc.h"
#include "lib/wk_err.h"
#include "lib/wk_log.h"

enum {
  MAX_LISTEN_FDS = 8,    /* addresses one name may bind */
  ACCEPT_BATCH = 64,     /* accepts per wake-up per socket */
  BACKOFF_MS = 50,       /* out of descriptors: check again this often */
  PRUNE_EVERY_MS = 1000, /* open connections re-counted at least this often */
  PRUNE_AT_CAP_MS = 20,  /* ... and at most this often when the cap is reached */
  PORT_NAME_MAX = 64,
};

typedef struct tracked_conn {
  int fd;
  dev_t dev;
  ino_t ino;
  wk_peer_key peer;
  bool has_peer; /* getpeername answered with an IP address */
} tracked_conn;

struct wk_grpc_listener {
  int fds[MAX_LISTEN_FDS];
  int nfds;
  int wake_fd;    /* eventfd: stop() wakes the thread */
  int reserve_fd; /* /dev/null, given up to accept while out of descriptors */
  char port_name[PORT_NAME_MAX];
  void *handler; /* grpc_core::TcpServerFdHandler*, written by gRPC */
  uint32_t max_connections;
  pthread_t thread;
  bool started;
  atomic_bool stopping;

  /* The open connections by peer address (wk_grpc_listener_peer_fd): written by the
   * accept thread, read by the server's CQ thread, under peers_mu. */
  pthread_mutex_t peers_mu;
  wk_peer_index *peers;

  /* accept thread only */
  tracked_conn *conns;
  size_t nconns;
  size_t cap_conns;
  int64_t pruned_ms;

  /* read from any thread */
  atomic_uint_fast64_t accepted;
  atomic_uint_fast64_t refused_max;
  atomic_uint_fast64_t refused_fd;
  atomic_uint open;
  atomic_bool blocked;
};

/* ---- time ---------------------------------------------------------------------- */

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- binding ------------------------------------------------------------------- */

bool wk_grpc_listener_handles(const char *listen_addr) {
  return listen_addr != NULL && strncmp(listen_addr, "unix:", 5) != 0 &&
         strncmp(listen_addr, "unix-abstract:", 14) != 0 && strchr(listen_addr, ':') != NULL;
}

/* A listening socket on sa; -1 with errno set on failure. */
static int listen_on(const struct sockaddr *sa, socklen_t len, bool dualstack) {
  int fd = socket(sa->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  int one = 1;
  int zero = 0;
  (void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one); /* inherited */
  if (sa->sa_family == AF_INET6) {
    (void)setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, dualstack ? &zero : &one, sizeof one);
  }
  if (bind(fd, sa, len) != 0 || listen(fd, SOMAXCONN) != 0) {
    int e = errno;
    close(fd);
    errno = e;
    return -1;
  }
  return fd;
}

static int bound_port(int fd) {
  struct sockaddr_storage ss;
  socklen_t len = sizeof ss;
  if (getsockname(fd, (struct sockaddr *)&ss, &len) != 0) return -1;
  if (ss.ss_family == AF_INET) return ntohs(((struct sockaddr_in *)&ss)->sin_port);
  if (ss.ss_family == AF_INET6) return ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
  return -1;
}

static void set_port(struct sockaddr *sa, int port) {
  if (sa->sa_family == AF_INET) ((struct sockaddr_in *)sa)->sin_port = htons((uint16_t)port);
  if (sa->sa_family == AF_INET6) ((struct sockaddr_in6 *)sa)->sin6_port = htons((uint16_t)port);
}

static int bind_wildcard(wk_grpc_listener *l, int port) {
  struct sockaddr_in6 any6;
  memset(&any6, 0, sizeof any6);
  any6.sin6_family = AF_INET6;
  any6.sin6_addr = in6addr_any;
  any6.sin6_port = htons((uint16_t)port);
  int fd = listen_on((struct sockaddr *)&any6, sizeof any6, true);
  if (fd < 0 && errno != EAFNOSUPPORT && errno != EADDRNOTAVAIL) return -1;
  if (fd < 0) { /* no IPv6 here: IPv4 only */
    struct sockaddr_in any4;
    memset(&any4, 0, sizeof any4);
    any4.sin_family = AF_INET;
    any4.sin_addr.s_addr = htonl(INADDR_ANY);
    any4.sin_port = htons((uint16_t)port);
    fd = listen_on((struct sockaddr *)&any4, sizeof any4, false);
    if (fd < 0) return -1;
  }
  l->fds[l->nfds++] = fd;
  return 0;
}

/* Binds every address host resolves to (the same port for all); 0 when at least one
 * bound. */
static int bind_resolved(wk_grpc_listener *l, const char *host, const char *port, char *err,
                         size_t err_len, const char *addr) {
  struct addrinfo hints;
  memset(&hints, 0, sizeof hints);
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  struct addrinfo *res = NULL;
  int rc = getaddrinfo(host, port, &hints, &res);
  if (rc != 0) {
    wk_errf(err, err_len, "cannot listen on %s: %s", addr, gai_strerror(rc));
    return -1;
  }
  int first_errno = 0;
  int chosen = atoi(port);
  for (struct addrinfo *ai = res; ai != NULL && l->nfds < MAX_LISTEN_FDS; ai = ai->ai_next) {
    if (ai->ai_family != AF_INET && ai->ai_family != AF_INET6) continue;
    struct sockaddr_storage ss;
    memcpy(&ss, ai->ai_addr, ai->ai_addrlen);
    if (chosen > 0) set_port((struct sockaddr *)&ss, chosen);
    int fd = listen_on((struct sockaddr *)&ss, ai->ai_addrlen, false);
    if (fd < 0) {
      if (first_errno == 0) first_errno = errno;
      continue;
    }
    if (chosen == 0) chosen = bound_port(fd); /* port 0: the others take the same one */
    l->fds[l->nfds++] = fd;
  }
  freeaddrinfo(res);
  if (l->nfds == 0) {
    wk_errf(err, err_len, "cannot listen on %s (%s: address in use, not local, or not host:port)",
            addr, strerror(first_errno != 0 ? first_errno : EADDRNOTAVAIL));
    return -1;
  }
  return 0;
}

wk_grpc_listener *wk_grpc_listener_open(const char *listen_addr, int *port, char *err,
                                        size_t err_len) {
  char host[256];
  char portstr[16];
  if (!wk_netaddr_split(listen_addr, host, sizeof host, portstr, sizeof portstr)) {
    wk_errf(err, err_len, "cannot listen on %s (not host:port)", listen_addr);
    return NULL;
  }
  wk_grpc_listener *l = wk_xcalloc(1, sizeof *l);
  l->wake_fd = -1;
  l->reserve_fd = -1;
  atomic_init(&l->stopping, false);
  atomic_init(&l->accepted, 0);
  atomic_init(&l->refused_max, 0);
  atomic_init(&l->refused_fd, 0);
  atomic_init(&l->open, 0);
  atomic_init(&l->blocked, false);
  if (pthread_mutex_init(&l->peers_mu, NULL) != 0) abort();
  l->peers = wk_peer_index_new();
  snprintf(l->port_name, sizeof l->port_name, "external:wk-listener-%p", (void *)l);
  int rc;
  if (wk_netaddr_is_wildcard(host, strlen(host))) {
    rc = bind_wildcard(l, atoi(portstr));
    if (rc != 0) {
      wk_errf(err, err_len, "cannot listen on %s (%s: address in use, or not host:port)",
              listen_addr, strerror(errno));
    }
  } else {
    rc = bind_resolved(l, host, portstr, err, err_len, listen_addr);
  }
  if (rc == 0) {
    l->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    l->reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (l->wake_fd < 0 || l->reserve_fd < 0) {
      wk_errf(err, err_len, "cannot listen on %s: %s", listen_addr, strerror(errno));
      rc = -1;
    }
  }
  if (rc != 0) {
    wk_grpc_listener_close(l);
    return NULL;
  }
  if (port != NULL) *port = bound_port(l->fds[0]);
  return l;
}

/* ---- the gRPC side ------------------------------------------------------------- */

static void *arg_copy(void *p) { return p; }
static void arg_destroy(void *p) { (void)p; }
static int arg_cmp(void *a, void *b) { return a < b ? -1 : (a > b ? 1 : 0); }
static const grpc_arg_pointer_vtable k_arg_vtable = {arg_copy, arg_destroy, arg_cmp};

grpc_arg wk_grpc_listener_channel_arg(wk_grpc_listener *l) {
  grpc_arg a;
  memset(&a, 0, sizeof a);
  a.type = GRPC_ARG_POINTER;
  a.key = l->port_name;
  a.value.pointer.p = &l->handler;
  a.value.pointer.vtable = &k_arg_vtable;
  return a;
}

const char *wk_grpc_listener_port_name(const wk_grpc_listener *l) { return l->port_name; }

bool wk_grpc_listener_attached(const wk_grpc_listener *l) { return l->handler != NULL; }

typedef void (*handle_fn)(void *self, int listener_fd, int fd, grpc_byte_buffer *pending_read);

/* TcpServerFdHandler::Handle (see the top of this file): gRPC owns fd from here. */
static void hand_to_grpc(wk_grpc_listener *l, int listen_fd, int fd) {
  void **vtable = *(void ***)l->handler;
  handle_fn handle;
  memcpy(&handle, &vtable[2], sizeof handle);
  handle(l->handler, listen_fd, fd, NULL);
}

/* ---- counting connections ------------------------------------------------------ */

static void track(wk_grpc_listener *l, int fd) {
  struct stat st;
  if (fstat(fd, &st) != 0) return; /* cannot happen on a socket we hold */
  if (l->nconns == l->cap_conns) {
    l->cap_conns = l->cap_conns ? l->cap_conns * 2 : 64;
    l->conns = wk_xrealloc(l->conns, l->cap_conns * sizeof *l->conns);
  }
  tracked_conn c = {.fd = fd, .dev = st.st_dev, .ino = st.st_ino};
  struct sockaddr_storage ss;
  socklen_t len = sizeof ss;
  if (getpeername(fd, (struct sockaddr *)&ss, &len) == 0) {
    c.has_peer = wk_peer_key_from_sockaddr((struct sockaddr *)&ss, len, &c.peer);
  }
  l->conns[l->nconns++] = c;
  atomic_store(&l->open, (unsigned)l->nconns);
  if (c.has_peer) {
    pthread_mutex_lock(&l->peers_mu);
    wk_peer_index_put(l->peers, &c.peer, fd);
    pthread_mutex_unlock(&l->peers_mu);
  }
}

/* Forgets connections gRPC has closed: their descriptor is closed or names another
 * file now (socket inodes are not reused while a socket lives). */
static void prune(wk_grpc_listener *l, int64_t now) {
  l->pruned_ms = now;
  size_t keep = 0;
  for (size_t i = 0; i < l->nconns; i++) {
    struct stat st;
    tracked_conn *c = &l->conns[i];
    if (fstat(c->fd, &st) == 0 && st.st_dev == c->dev && st.st_ino == c->ino) {
      l->conns[keep++] = *c;
    }
  }
  /* a descriptor gRPC closed and this thread reused is listed twice: the older entry
   * names the old inode and goes here */
  l->nconns = keep;
  atomic_store(&l->open, (unsigned)l->nconns);
  pthread_mutex_lock(&l->peers_mu);
  wk_peer_index_clear(l->peers);
  for (size_t i = 0; i < l->nconns; i++) {
    if (l->conns[i].has_peer) wk_peer_index_put(l->peers, &l->conns[i].peer, l->conns[i].fd);
  }
  pthread_mutex_unlock(&l->peers_mu);
}

/* ---- descriptors running out --------------------------------------------------- */

static bool out_of_fds(int e) { return e == EMFILE || e == ENFILE || e == ENOBUFS || e == ENOMEM; }

/* Whether a descriptor can be had again: the reserve back, and one more beyond it. */
static bool fds_available(wk_grpc_listener *l) {
  if (l->reserve_fd < 0) {
    l->reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (l->reserve_fd < 0) return false;
  }
  int probe = open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (probe < 0) return false;
  close(probe);
  return true;
}

/* accept() failed for want of descriptors: give up the reserve to accept and close
 * what waits in the backlog (those clients see the connection closed rather than a
 * hang), and take the reserve back if it can be had. */
static void drain_backlog(wk_grpc_listener *l, int listen_fd, int e) {
  if (!atomic_exchange(&l->blocked, true)) {
    wk_log(WK_LOG_ERROR, "accept_blocked",
           "out of file descriptors (%s): connections are refused until one is free; %u "
           "open",
           strerror(e), (unsigned)l->nconns);
  }
  if (l->reserve_fd >= 0) {
    close(l->reserve_fd);
    l->reserve_fd = -1;
  }
  for (;;) {
    int fd = accept4(listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      break;
    }
    close(fd);
    atomic_fetch_add(&l->refused_fd, 1);
  }
  l->reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
}

/* ---- the accept thread ----------------------------------------------------------- */

/* Accepts what waits on listen_fd; false when out of descriptors. */
static bool accept_some(wk_grpc_listener *l, int listen_fd) {
  for (int i = 0; i < ACCEPT_BATCH; i++) {
    int fd = accept4(listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      int e = errno;
      if (e == EINTR || e == ECONNABORTED || e == EPROTO || e == EPERM) continue;
      if (e == EAGAIN) return true; /* EWOULDBLOCK on Linux */
      if (out_of_fds(e)) {
        drain_backlog(l, listen_fd, e);
        return false;
      }
      wk_log(WK_LOG_ERROR, "accept_failed", "accept failed: %s", strerror(e));
      return true;
    }
    if (l->max_connections > 0 && l->nconns >= l->max_connections) {
      int64_t now = now_ms();
      if (now - l->pruned_ms >= PRUNE_AT_CAP_MS) prune(l, now);
      if (l->nconns >= l->max_connections) {
        close(fd); /* the client sees the connection closed: UNAVAILABLE */
        atomic_fetch_add(&l->refused_max, 1);
        continue;
      }
    }
    if (atomic_exchange(&l->blocked, false)) {
      wk_log(WK_LOG_INFO, "accept_resumed", "accepting connections again; %u open",
             (unsigned)l->nconns);
    }
    int one = 1;
    (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    track(l, fd);
    atomic_fetch_add(&l->accepted, 1);
    hand_to_grpc(l, listen_fd, fd);
  }
  return true;
}

static void *accept_main(void *arg) {
  wk_grpc_listener *l = arg;
  (void)pthread_setname_np(pthread_self(), "wk-grpc-accept");
  struct pollfd pfds[MAX_LISTEN_FDS + 1];
  int64_t backoff_until = 0;
  while (!atomic_load(&l->stopping)) {
    int64_t now = now_ms();
    bool blocked = atomic_load(&l->blocked);
    if (blocked && now >= backoff_until) {
      if (fds_available(l)) {
        atomic_store(&l->blocked, false);
        wk_log(WK_LOG_INFO, "accept_resumed",
               "file descriptors available again: accepting; %u connections open",
               (unsigned)l->nconns);
        blocked = false;
      } else {
        /* still out: tell whoever waits in the backlog at once, then wait again */
        for (int i = 0; i < l->nfds; i++) drain_backlog(l, l->fds[i], EMFILE);
        backoff_until = now + BACKOFF_MS;
      }
    }
    if (now - l->pruned_ms >= PRUNE_EVERY_MS) prune(l, now);
    int n = 0;
    pfds[n++] = (struct pollfd){.fd = l->wake_fd, .events = POLLIN};
    if (!blocked) {
      for (int i = 0; i < l->nfds; i++)
        pfds[n++] = (struct pollfd){.fd = l->fds[i], .events = POLLIN};
    }
    int timeout = blocked ? BACKOFF_MS : PRUNE_EVERY_MS;
    int rc = poll(pfds, (nfds_t)n, timeout);
    if (rc <= 0) continue;
    for (int i = 1; i < n; i++) {
      if ((pfds[i].revents & (POLLIN | POLLERR | POLLHUP)) == 0) continue;
      if (!accept_some(l, pfds[i].fd)) {
        backoff_until = now_ms() + BACKOFF_MS;
        break;
      }
    }
  }
  return NULL;
}

int wk_grpc_listener_start(wk_grpc_listener *l, uint32_t max_connections, char *err,
                           size_t err_len) {
  if (l->handler == NULL) {
    wk_errf(err, err_len, "grpc listener: gRPC gave no connection handler for %s", l->port_name);
    return -1;
  }
  l->max_connections = max_connections;
  l->pruned_ms = now_ms();
  if (pthread_create(&l->thread, NULL, accept_main, l) != 0) abort();
  l->started = true;
  return 0;
}

void wk_grpc_listener_stop(wk_grpc_listener *l) {
  if (l == NULL || !l->started) return;
  atomic_store(&l->stopping, true);
  uint64_t one = 1;
  ssize_t w = write(l->wake_fd, &one, sizeof one);
  (void)w; /* an eventfd write fails only when its counter would overflow */
  if (pthread_join(l->thread, NULL) != 0) abort();
  l->started = false;
}

void wk_grpc_listener_close(wk_grpc_listener *l) {
  if (l == NULL) return;
  wk_grpc_listener_stop(l);
  for (int i = 0; i < l->nfds; i++) close(l->fds[i]);
  if (l->wake_fd >= 0) close(l->wake_fd);
  if (l->reserve_fd >= 0) close(l->reserve_fd);
  free(l->conns);
  wk_peer_index_free(l->peers);
  pthread_mutex_destroy(&l->peers_mu);
  free(l);
}

void wk_grpc_listener_stats(const wk_grpc_listener *l, wk_grpc_conn_stats *out) {
  wk_grpc_listener *m = (wk_grpc_listener *)(uintptr_t)l; /* atomics only */
  *out = (wk_grpc_conn_stats){
      .accepted = atomic_load(&m->accepted),
      .refused_max_connections = atomic_load(&m->refused_max),
      .refused_fd_limit = atomic_load(&m->refused_fd),
      .open = atomic_load(&m->open),
      .max_connections = l->max_connections,
      .accept_blocked = atomic_load(&m->blocked),
  };
}

int wk_grpc_listener_peer_fd(wk_grpc_listener *l, const char *peer) {
  wk_peer_key key;
  if (l == NULL || !wk_peer_key_from_uri(peer, &key)) return -1;
  pthread_mutex_lock(&l->peers_mu);
  int fd = wk_peer_index_find(l->peers, &key);
  pthread_mutex_unlock(&l->peers_mu);
  return fd;
}

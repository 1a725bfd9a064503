/* wk_sdnotify.c: sd_notify for the worker (see wk_sdnotify.h).
 *
 * systemd's notification protocol (sd_notify(3), "the protocol is stable"): one
 * AF_UNIX datagram of VAR=VALUE lines to the socket NOTIFY_SOCKET names, a path, or
 * an abstract name written with a leading '@'. Done here rather than by linking
 * libsystemd, whose loading (and that of libgcrypt, liblz4, liblzma, libzstd, libcap
 * under it) cost every worker ~0.7 MB of RSS for these few lines. */
#define _GNU_SOURCE
#include "adapters/wk_sdnotify.h"

#include <errno.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "lib/wk_log.h"

bool wk_sdnotify_supported(void) { return true; }

/* A decimal number with nothing after it (no sign, no spaces); false otherwise. */
static bool parse_u64(const char *s, uint64_t *out) {
  if (!s || *s < '0' || *s > '9') return false;
  errno = 0;
  char *end = NULL;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno != 0 || *end != '\0') return false;
  *out = (uint64_t)v;
  return true;
}

/* libsystemd's sd_watchdog_enabled(0, &usec): WATCHDOG_USEC, a positive number, which
 * applies only when WATCHDOG_PID is unset or names this process. 0: no watchdog. */
static uint64_t watchdog_usec(void) {
  uint64_t usec = 0, pid = 0;
  if (!parse_u64(getenv("WATCHDOG_USEC"), &usec) || usec == 0) return 0;
  const char *p = getenv("WATCHDOG_PID");
  if (p && (!parse_u64(p, &pid) || pid != (uint64_t)getpid())) return 0;
  return usec;
}

uint64_t wk_sdnotify_start(void) {
  const char *socket_name = getenv("NOTIFY_SOCKET");
  if (!socket_name || !*socket_name) return 0;
  uint64_t usec = watchdog_usec();
  wk_log_json(WK_LOG_INFO, "sdnotify_on",
              json_pack("{s:s,s:I,s:s}", "notify_socket", socket_name, "watchdog_usec",
                        (json_int_t)usec, "msg",
                        usec ? "notifying the service manager; watchdog pings every half of "
                               "watchdog_usec"
                             : "notifying the service manager (no watchdog for this process)"));
  return usec;
}

/* Sends one datagram; 1 when sent, 0 without NOTIFY_SOCKET, else -errno. */
static int notify(const char *state) {
  const char *name = getenv("NOTIFY_SOCKET");
  if (!name || !*name) return 0;
  struct sockaddr_un sa;
  memset(&sa, 0, sizeof sa);
  sa.sun_family = AF_UNIX;
  size_t n = strlen(name);
  if (name[0] != '/' && name[0] != '@') return -EAFNOSUPPORT;
  if (n > sizeof sa.sun_path || (name[0] == '/' && n == sizeof sa.sun_path)) return -EINVAL;
  memcpy(sa.sun_path, name, n);
  if (name[0] == '@') sa.sun_path[0] = '\0'; /* abstract: no NUL at the end either */
  socklen_t sa_len =
      (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n + (name[0] == '/' ? 1u : 0u));
  int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -errno;
  ssize_t sent = sendto(fd, state, strlen(state), MSG_NOSIGNAL, (struct sockaddr *)&sa, sa_len);
  int rc = sent < 0 ? -errno : 1;
  close(fd);
  return rc;
}

int wk_sdnotify(const char *state) {
  int rc = notify(state);
  if (rc < 0) {
    static _Atomic int last_logged = 0; /* one line per errno value in a row */
    if (atomic_exchange(&last_logged, rc) != rc) {
      wk_log(WK_LOG_WARN, "sdnotify_failed", "sd_notify: %s", strerror(-rc));
    }
  }
  return rc;
}

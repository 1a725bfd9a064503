/* wk_sdnotify.c: sd_notify for the worker (see wk_sdnotify.h). */
#include "adapters/wk_sdnotify.h"

#include <inttypes.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "lib/wk_log.h"

#ifdef WK_HAVE_LIBSYSTEMD
#include <systemd/sd-daemon.h>
#endif

bool wk_sdnotify_supported(void) {
#ifdef WK_HAVE_LIBSYSTEMD
  return true;
#else
  return false;
#endif
}

uint64_t wk_sdnotify_start(void) {
  const char *socket = getenv("NOTIFY_SOCKET");
  if (!socket || !*socket) return 0;
#ifdef WK_HAVE_LIBSYSTEMD
  uint64_t usec = 0;
  int on = sd_watchdog_enabled(0, &usec);
  if (on <= 0) usec = 0;
  wk_log_json(
      WK_LOG_INFO, "sdnotify_on",
      json_pack("{s:s,s:I,s:s}", "notify_socket", socket, "watchdog_usec", (json_int_t)usec, "msg",
                usec ? "notifying the service manager; watchdog pings every half of "
                       "watchdog_usec"
                     : "notifying the service manager (no watchdog for this process)"));
  return usec;
#else
  wk_log_json(WK_LOG_WARN, "sdnotify_unavailable",
              json_pack("{s:s,s:s}", "notify_socket", socket, "msg",
                        "NOTIFY_SOCKET is set but this build has no libsystemd: the service "
                        "manager gets no READY=1 (a Type=notify unit times out starting); "
                        "rebuild with libsystemd-dev installed, or use Type=exec"));
  return 0;
#endif
}

int wk_sdnotify(const char *state) {
#ifdef WK_HAVE_LIBSYSTEMD
  int rc = sd_notify(0, state);
  if (rc < 0) {
    static _Atomic int last_logged = 0; /* one line per errno value in a row */
    if (atomic_exchange(&last_logged, rc) != rc) {
      wk_log(WK_LOG_WARN, "sdnotify_failed", "sd_notify: %s", strerror(-rc));
    }
  }
  return rc;
#else
  (void)state;
  return 0;
#endif
}

/* wk_sdnotify.h: telling a service manager (systemd's Type=notify) how the worker is
 * doing, through libsystemd's sd_notify when the build has it.
 *
 * The messages the worker sends (README "Running under a supervisor"):
 *   READY=1     the gRPC port serves (health SERVING) and the etcd registration was started
 *   STOPPING=1  a drain began (SIGTERM/SIGINT)
 *   WATCHDOG=1  from the event loop, every half of WATCHDOG_USEC, while the loop turns
 *   STATUS=...  one line for `systemctl status`
 *
 * Without NOTIFY_SOCKET in the environment (not started by systemd) every call is a
 * no-op. A build without libsystemd (its pkg-config module absent at configure time)
 * sends nothing; wk_sdnotify_start then logs once that NOTIFY_SOCKET is ignored.
 * Thread-safe (sd_notify opens its own socket per call); the environment is left as it
 * is (executors get a scrubbed environment of their own, so they never see it). */
#ifndef WK_SDNOTIFY_H
#define WK_SDNOTIFY_H

#include <stdbool.h>
#include <stdint.h>

/** True when this build was linked with libsystemd (it can notify). */
bool wk_sdnotify_supported(void);

/** Reads the service manager's settings once, at start-up, and logs what applies when
 * NOTIFY_SOCKET is set: `sdnotify_on` (with the watchdog interval) or, in a build
 * without libsystemd, `sdnotify_unavailable`. Returns the watchdog timeout in
 * microseconds the manager expects pings within, under libsystemd's rules
 * (sd_watchdog_enabled: WATCHDOG_USEC, applying only when WATCHDOG_PID is unset or
 * names this process), or 0: no watchdog. Never fails. */
uint64_t wk_sdnotify_start(void);

/** Sends `state` (newline-separated VAR=VALUE lines, e.g. "READY=1\nSTATUS=serving").
 * Returns > 0 when sent, 0 when there is no one to tell (no NOTIFY_SOCKET, or no
 * libsystemd in this build), or a negative errno when sending failed (logged once per
 * errno value, never fatal). */
int wk_sdnotify(const char *state);

#endif

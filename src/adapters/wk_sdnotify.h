/* wk_sdnotify.h: telling a service manager (systemd's Type=notify) how the worker is
 * doing, by systemd's notification protocol (sd_notify(3); without libsystemd).
 *
 * The messages the worker sends (README "Running under a supervisor"):
 *   READY=1     the gRPC port serves (health SERVING) and the etcd registration was started
 *   STOPPING=1  a drain began (SIGTERM/SIGINT)
 *   WATCHDOG=1  from the event loop, every half of WATCHDOG_USEC, while the loop turns
 *   STATUS=...  one line for `systemctl status`
 *
 * Without NOTIFY_SOCKET in the environment (not started by systemd) every call is a
 * no-op. Thread-safe (each message opens its own socket); the environment is left as it
 * is (executors get a scrubbed environment of their own, so they never see it). */
#ifndef WK_SDNOTIFY_H
#define WK_SDNOTIFY_H

#include <stdbool.h>
#include <stdint.h>

/** True: every build can notify (kept for callers of the time builds without
 * libsystemd could not). */
bool wk_sdnotify_supported(void);

/** Reads the service manager's settings once, at start-up, and logs `sdnotify_on`
 * (with the watchdog interval) when NOTIFY_SOCKET is set. Returns the watchdog timeout in
 * microseconds the manager expects pings within, under libsystemd's rules
 * (sd_watchdog_enabled: WATCHDOG_USEC, applying only when WATCHDOG_PID is unset or
 * names this process), or 0: no watchdog. Never fails. */
uint64_t wk_sdnotify_start(void);

/** Sends `state` (newline-separated VAR=VALUE lines, e.g. "READY=1\nSTATUS=serving").
 * Returns > 0 when sent, 0 when there is no one to tell (no NOTIFY_SOCKET), or a negative errno when sending failed (logged once per
 * errno value, never fatal). */
int wk_sdnotify(const char *state);

#endif

/* wk_app.h: the Worker's single wiring and start-up / shutdown sequence. The
 * configuration (wk_app_config) is read and checked by app/wk_config.h; the entry
 * points reach this through wk_main (app/wk_main.h). */
#ifndef WK_APP_H
#define WK_APP_H

#include "app/wk_config.h"
#include "app/wk_profile.h"

/** Runs the worker until SIGINT/SIGTERM: start-up, serve, drain, shutdown, wired as
 * the Profile says. cfg must be valid (wk_config_validate; checked again here) and,
 * with profile, outlive the call. Returns the process exit code: 0 after a clean
 * stop, 2 for a configuration start-up refuses (a writer backend, metrics_addr,
 * code_root, the shadow target), 1 when start-up fails otherwise (the scratch
 * directory, the executors, binding listen_addr). */
int wk_app_run(const wk_app_config *cfg, const wk_profile *profile);

#endif

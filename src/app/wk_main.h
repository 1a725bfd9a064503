/* wk_main.h: the one call of an entry point (cmd/worker, cmd/bundle_worker). It
 * depends on the Profile, the configuration and the app, and none of them on it:
 * main -> {profile, config, app}. */
#ifndef WK_MAIN_H
#define WK_MAIN_H

#include "app/wk_profile.h"

/** The whole program: reads the configuration (defaults, the Profile's tuning, the
 * file, the environment, the flags), validates it and the Profile, and runs the
 * worker until it is stopped (or prints --help / --print-config). Returns the process
 * exit code (2 for a bad configuration or Profile, 0 after a clean stop). */
int wk_main(const wk_profile *profile, int argc, char **argv);

#endif

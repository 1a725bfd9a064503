/* profile.h: the bundle Profile the `bundle_worker` entry point declares (also read
 * by the unit test of Profile validation). */
#ifndef WK_CMD_BUNDLE_WORKER_PROFILE_H
#define WK_CMD_BUNDLE_WORKER_PROFILE_H

#include "app/wk_profile.h"

/** Profile "bundle": the same daemon, registered under /bundle-workers/, builders
 * single and map, the file writer, and more executors kept warm by default (4 to 8). */
extern const wk_profile wk_bundle_profile;

#endif

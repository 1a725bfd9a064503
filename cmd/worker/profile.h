/* profile.h: the block Profile the `worker` entry point declares (also read by the
 * unit test of Profile validation). */
#ifndef WK_CMD_WORKER_PROFILE_H
#define WK_CMD_WORKER_PROFILE_H

#include "app/wk_profile.h"

/** Profile "block": service "worker", prefix /workers/, builders single, map and
 * range, writers file, redis and postgres, the built-in defaults unchanged. */
extern const wk_profile wk_block_profile;

#endif

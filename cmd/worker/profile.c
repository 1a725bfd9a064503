/* profile.c: the block Profile, what the `worker` entry point declares. */
#include "cmd/worker/profile.h"

const wk_profile wk_block_profile = {
    .deployment = WK_DEPLOYMENT_BLOCK,
    .service = "worker",
    .registry_prefix = "/workers/",
    .usage_service = "",
    .builders = {"single", "map", "range"},
    .plugins = {"file", "redis", "postgres"},
};

/* worker: the Worker daemon, Profile "block". An entry point only declares its
 * Profile; wk_main reads the configuration and runs the one wiring and
 * start-up / shutdown sequence. */
#include "app/wk_main.h"

static const wk_profile block_profile = {
    .deployment = WK_DEPLOYMENT_BLOCK,
    .service = "worker",
    .registry_prefix = "/workers/",
    .usage_service = "",
    .builders = {"single", "map", "range"},
    .plugins = {"file", "redis", "postgres"},
};

int main(int argc, char **argv) { return wk_main(&block_profile, argc, argv); }

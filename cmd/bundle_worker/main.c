/* bundle_worker: the Worker bundled with its functions, Profile "bundle": the same
 * daemon, registered under its own prefix, with more executors kept warm by default. */
#include "app/wk_main.h"

static void tune_bundle(wk_app_config *cfg) {
  cfg->executors = 4;
  cfg->executors_max = 8;
}

static const wk_profile bundle_profile = {
    .deployment = WK_DEPLOYMENT_BUNDLE,
    .service = "bundle-worker",
    .registry_prefix = "/bundle-workers/",
    .usage_service = "",
    .builders = {"single", "map"},
    .plugins = {"file"},
    .tune_defaults = tune_bundle,
};

int main(int argc, char **argv) { return wk_main(&bundle_profile, argc, argv); }

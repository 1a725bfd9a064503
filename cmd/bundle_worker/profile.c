/* profile.c: the bundle Profile, what the `bundle_worker` entry point declares. */
#include "cmd/bundle_worker/profile.h"

static void tune_bundle(wk_app_config *cfg) {
  cfg->executors = 4;
  cfg->executors_max = 8;
}

const wk_profile wk_bundle_profile = {
    .deployment = WK_DEPLOYMENT_BUNDLE,
    .service = "bundle-worker",
    .registry_prefix = "/bundle-workers/",
    .usage_service = "",
    .builders = {"single", "map"},
    .plugins = {"file"},
    .tune_defaults = tune_bundle,
};

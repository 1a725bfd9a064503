/* bundle_worker: the Worker bundled with its functions, Profile "bundle" (profile.c):
 * the same daemon, registered under its own prefix, with more executors kept warm by
 * default. */
#include "app/wk_main.h"
#include "cmd/bundle_worker/profile.h"

int main(int argc, char **argv) { return wk_main(&wk_bundle_profile, argc, argv); }

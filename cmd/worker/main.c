/* worker: the Worker daemon, Profile "block" (profile.c). An entry point only
 * declares its Profile; wk_main reads the configuration and runs the one wiring and
 * start-up / shutdown sequence. */
#include "app/wk_main.h"
#include "cmd/worker/profile.h"

int main(int argc, char **argv) { return wk_main(&wk_block_profile, argc, argv); }

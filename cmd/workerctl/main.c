/* workerctl: the Worker's client CLI (see `workerctl --help`).
 *
 *   workerctl [--addr HOST:PORT] [--json] [--deadline-ms N] COMMAND ...
 *
 * Commands talk to one worker over gRPC (slot, submit, get, watch, cancel, health),
 * work on a local code store (deploy, epochs), or read the etcd registry (workers).
 * The exit code tells a script what happened: 0 ok, 1 task failed, 2 usage, 3 error
 * status, 4 unreachable. */
#include <stdio.h>

#include "workerctl.h"

int main(int argc, char **argv) {
  ctl_args a;
  int rc = ctl_parse(argc, argv, &a);
  if (rc != 0) {
    ctl_args_free(&a);
    return rc > 0 ? CTL_EXIT_OK : CTL_EXIT_USAGE;
  }
  rc = a.cmd->run(&a);
  ctl_args_free(&a);
  if (fflush(stdout) != 0 && rc == CTL_EXIT_OK) rc = CTL_EXIT_TASK_FAILED;
  return rc;
}

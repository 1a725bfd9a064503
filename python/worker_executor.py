#!/usr/bin/env python3
"""worker_executor.py: starts the Python executor of the Worker (the package wk_executor
beside this file; see its __init__.py and docs/specs/executor-protocol.md).

    python3 worker_executor.py --channel-fd FD [--max-frame BYTES] [--capture-max BYTES]
                               [--pycache-prefix DIR] [--max-nesting N]
                               [--rlimit-as-mb N] [--rlimit-nofile N] [--rlimit-cpu-s N]
    python3 worker_executor.py --check-code DIR [--entrypoint MOD:ATTR]   (deploy check)

This path is the `executor_script` setting's default: keep it.
"""

import sys


def _check_only(argv):
    """(DIR, ENTRYPOINT) when argv is the deploy check exactly as the Worker and
    workerctl run it (`--check-code DIR --entrypoint M:A`), else None."""
    if len(argv) == 4 and argv[0] == "--check-code" and argv[2] == "--entrypoint":
        return argv[1], argv[3]
    return None


if __name__ == "__main__":
    # python/wk_executor/, next to this file (sys.path[0]). The deploy check imports only
    # what it runs (wk_executor.check): the executor's own modules (argparse, socket,
    # threading, ...) were two thirds of a check's time, and every deploy waits for it.
    check_args = _check_only(sys.argv[1:])
    if check_args is not None:
        from wk_executor import check
        sys.exit(check.main(*check_args))
    from wk_executor.cli import main
    sys.exit(main())

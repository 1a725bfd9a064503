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

from wk_executor.cli import main  # python/wk_executor/, next to this file (sys.path[0])

if __name__ == "__main__":
    sys.exit(main())

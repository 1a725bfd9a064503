"""Shared by the test_pyclient_* files: worker_client imported from the source tree
(python/worker_client/src), and the functions those tests deploy."""

import os
import sys

from conftest import ROOT

sys.path.insert(0, os.path.join(ROOT, "python", "worker_client", "src"))

import worker_client  # noqa: E402,F401

PYCLIENT_FUNCTIONS = {
    "square": "def handler(args, ctx):\n    return args * args\n",
    "chunksum": ("def handler(args, ctx):\n"
                 "    return sum(range(args['start'], args['stop'], args['step']))\n"),
    "flaky": ("import worker\n"
              "def handler(args, ctx):\n"
              "    if args.get('fail') and args['fail'] == ctx.call_index:\n"
              "        raise ValueError('item %d refused' % ctx.call_index)\n"
              "    return args['v'] if isinstance(args, dict) and 'v' in args else args\n"),
    "gate": ("import os, time\n"
             "def handler(args, ctx):\n"
             "    while not os.path.exists(args['gate']):\n"
             "        time.sleep(0.02)\n"
             "    return args['i']\n"),
    "rawbytes": "def handler(args, ctx):\n    return bytes(reversed(args))\n",
}


def deploy_all(w):
    """Deploys conftest's FUNCTIONS and PYCLIENT_FUNCTIONS on worker w."""
    from conftest import FUNCTIONS
    for name in FUNCTIONS:
        w.deploy(name)
    for name, src in PYCLIENT_FUNCTIONS.items():
        w.deploy(name, src)

#!/usr/bin/env python3
"""worker_client quick start: submit tasks to a Worker from Python.

    pip install ./python/worker_client          # needs grpcio and protobuf
    worker --listen 127.0.0.1:7070 --code-root ./code &
    workerctl deploy --code-root ./code hello examples/hello
    python3 examples/client_quickstart.py 127.0.0.1:7070

The address may also come from $WORKERCTL_ADDR, or Client(etcd="http://...") picks a
worker registered in etcd, as workerctl does.
"""

import concurrent.futures
import sys

from worker_client import Client, TaskFailed


def main(addr):
    with Client(addr) as client:
        # one task: a concurrent.futures.Future
        fut = client.submit("hello", {"name": "Ada"})
        print(fut.result(timeout=60)["greeting"])             # Hello, Ada!

        # many tasks in flight at once, collected as they finish
        names = ["Grace", "Edsger", "Barbara"]
        futs = {client.submit("hello", {"name": n}): n for n in names}
        for f in concurrent.futures.as_completed(futs, timeout=60):
            print(futs[f], "->", f.result()["greeting"])

        # one map task: a call per item, the values in item order, with a progress bar
        greetings = client.map("hello", [{"name": n} for n in names], progress=True)
        print([g["greeting"] for g in greetings.result(timeout=60)])

        # a failure carries the call's remote traceback
        try:
            client.submit("hello", {"name": "Ada"}, epoch=999).result(timeout=60)
        except TaskFailed as e:
            print("failed as expected:", e.failure_code)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else None)

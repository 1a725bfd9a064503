#!/usr/bin/env python3
"""bench_calls: call execution figures on one real worker, measured in one run.

    /usr/bin/python3 bench/bench_calls.py [--build build/release] [--executors 2]

Prints:
  - the executor floor: one executor fed no-op CALL frames from memory (no worker),
    from bench_executor_floor;
  - calls/s of one 100,000-item no-op map task through the worker, and its ratio to
    floor x executors (target >= 0.7);
  - no-op tasks/s end to end with 64 tasks in flight (submit + watch to terminal);
  - the worker's peak RSS during a 10-million `range` task (chunk 1000: 10,000 calls).
The machine has 2 cores: the worker, its executors and this client share them."""

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "e2e"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build", "release"))
    ap.add_argument("--executors", type=int, default=2)
    ap.add_argument("--map-items", type=int, default=100000)
    args = ap.parse_args()
    os.environ["WK_BUILD_DIR"] = os.path.abspath(args.build)
    from conftest import Worker, pb, pb_grpc  # noqa: E402 (after WK_BUILD_DIR is set)
    import grpc

    floor_out = subprocess.run([os.path.join(args.build, "bench", "bench_executor_floor")],
                               capture_output=True, text=True, timeout=300).stdout
    m = re.search(r"([0-9.]+) calls/s", floor_out)
    floor = float(m.group(1)) if m else float("nan")
    print("executor floor (1 executor, frames from memory): %.0f calls/s" % floor)

    tmp = tempfile.mkdtemp(prefix="bench-calls-")
    w = Worker(tmp, extra_args=["--executors-max", str(args.executors), "--pipeline-depth", "64",
                                "--task-slots", "128", "--max-message-bytes", str(64 << 20)],
               executors=args.executors)
    try:
        w.wait_serving()
        w.deploy("noop", "def handler(args, ctx):\n    return None\n")
        w.deploy("sumrange", "def handler(args, ctx):\n    return sum(range(args['start'], args['stop'], args['step']))\n")

        # warm-up
        w.submit("warm", "noop", list(range(2000)), builder="map")
        w.wait_terminal("warm", timeout=120)

        items = args.map_items
        t0 = time.monotonic()
        w.submit("map", "noop", list(range(items)), builder="map", timeout_ms=3600000)
        r = w.wait_terminal("map", timeout=900)
        dt = time.monotonic() - t0
        assert r.state == pb.TASK_STATE_SUCCEEDED, r.failure_message
        calls_ms = r.statistic.calls_ms or dt * 1000
        rate = items / (calls_ms / 1000.0)
        target = 0.7 * floor * args.executors
        print("map task: %d no-op calls in %.2f s (calls phase %.0f ms): %.0f calls/s" % (items, dt, calls_ms, rate))
        print("  ratio to floor x executors (%d x %.0f): %.2f   target >= 0.70: %s" %
              (args.executors, floor, rate / (floor * args.executors),
               "PASS" if rate >= target else "MISS"))

        # no-op tasks/s with 64 in flight
        done = [0]
        stop = time.monotonic() + 5
        lock = threading.Lock()

        def client(k):
            ch = grpc.insecure_channel(w.addr)
            stub = pb_grpc.WorkerServiceStub(ch)
            n = 0
            while time.monotonic() < stop:
                tid = "t-%d-%d" % (k, n)
                fn = pb.FunctionCallConfig(name="noop", args=b"null")
                stub.SubmitTask(pb.SubmitTaskRequest(task_id=tid, function=fn), timeout=30)
                for ev in stub.WatchTasks(pb.WatchTasksRequest(task_ids=[tid]), timeout=60):
                    pass
                n += 1
            with lock:
                done[0] += n
            ch.close()

        t0 = time.monotonic()
        threads = [threading.Thread(target=client, args=(k,)) for k in range(64)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        dt = time.monotonic() - t0
        print("no-op tasks end to end, 64 in flight: %d tasks in %.1f s: %.0f tasks/s" % (done[0], dt, done[0] / dt))

        # memory during a 10-million range
        rss0 = rss_kb(w.proc.pid)
        peak = rss0
        w.submit("range", "sumrange", {"start": 0, "stop": 10000000, "chunk": 1000}, builder="range",
                 timeout_ms=3600000)
        t0 = time.monotonic()
        while True:
            peak = max(peak, rss_kb(w.proc.pid))
            r = w.stub.GetTaskResult(pb.GetTaskResultRequest(task_id="range"))
            if r.state in (pb.TASK_STATE_SUCCEEDED, pb.TASK_STATE_FAILED):
                break
            time.sleep(0.02)
        dt = time.monotonic() - t0
        ok = r.state == pb.TASK_STATE_SUCCEEDED and sum(json.loads(o.value) for o in r.outputs) == sum(range(10000000))
        print("range of 10,000,000 (10,000 calls of 1,000): %s in %.1f s; worker RSS %d KiB before, peak %d KiB"
              % ("correct" if ok else "WRONG", dt, rss0, peak))
    finally:
        w.stop()


def rss_kb(pid):
    for line in open("/proc/%d/status" % pid):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


if __name__ == "__main__":
    main()

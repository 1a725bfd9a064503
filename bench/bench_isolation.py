#!/usr/bin/env python3
"""bench_isolation: the cost of executor_isolation=function against shared.

    /usr/bin/python3 bench/bench_isolation.py [--build build/release] [--executors 2]
                                              [--functions 1,2,3,4] [--seconds 5]
                                              [--clients 8] [--call-ms 0] [--reps 3]

For each mode (function, shared) and each number of functions F in --functions, one
real worker with exactly --executors executors (executors_max = executors) runs
single-call tasks for --seconds: --clients client threads each submit a task, watch it
to its end and submit the next, the tasks' functions taken in turn (f0, f1, ..., so
the functions interleave on the executors). Every function sleeps --call-ms ms and
returns. Printed per run: tasks/s, the median and 99th percentile of a task's latency
(SubmitTask to its terminal event), and how many executors were recycled to make room
for another function (executor_isolation=function only); the modes alternate --reps
times and the medians close the output. Everything shares the machine's cores
(printed) with this client."""

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "e2e"))


def run(mode, n_functions, args, Worker, pb, pb_grpc, grpc):
    tmp = tempfile.mkdtemp(prefix="bench-isolation-")
    w = Worker(tmp, extra_args=["--executor-isolation", mode, "--executors-max", str(args.executors),
                                "--task-slots", str(max(64, args.clients * 2))],
               executors=args.executors)
    try:
        w.wait_serving()
        src = ("import time\n"
               "def handler(args, ctx):\n"
               "    if %r:\n"
               "        time.sleep(%r)\n"
               "    return None\n" % (args.call_ms > 0, args.call_ms / 1000.0))
        names = ["f%d" % i for i in range(n_functions)]
        for n in names:
            w.deploy(n, src)
        lat = []
        lock = threading.Lock()
        turn = [0]
        stop = [0.0]

        def client(k, phase):
            ch = grpc.insecure_channel(w.addr)
            stub = pb_grpc.WorkerServiceStub(ch)
            n = 0
            mine = []
            while time.monotonic() < stop[0]:
                with lock:
                    fn_name = names[turn[0] % len(names)]
                    turn[0] += 1
                tid = "%s-%d-%d" % (phase, k, n)
                fn = pb.FunctionCallConfig(name=fn_name, args=b"null")
                t0 = time.monotonic()
                stub.SubmitTask(pb.SubmitTaskRequest(task_id=tid, function=fn), timeout=60)
                for ev in stub.WatchTasks(pb.WatchTasksRequest(task_ids=[tid]), timeout=120):
                    pass
                mine.append(time.monotonic() - t0)
                n += 1
            with lock:
                lat.extend(mine)
            ch.close()

        # a warm-up second (every function run once at least), then the measured run
        for phase, seconds in (("warm", 1.0), ("run", args.seconds)):
            lat.clear()
            recycled0 = len([e for e in w.events("executor_recycled")
                             if e.get("reason") == "executor_isolation"])
            stop[0] = time.monotonic() + seconds
            t0 = time.monotonic()
            threads = [threading.Thread(target=client, args=(k, phase)) for k in range(args.clients)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            dt = time.monotonic() - t0
        recycled = len([e for e in w.events("executor_recycled")
                        if e.get("reason") == "executor_isolation"]) - recycled0
        lat.sort()
        p99 = lat[min(len(lat) - 1, int(len(lat) * 0.99))] if lat else 0
        fig = (len(lat) / dt, statistics.median(lat) * 1000 if lat else 0, p99 * 1000, recycled)
        print("  %-8s %d function(s): %6.0f tasks/s  p50 %7.2f ms  p99 %7.2f ms  recycled %d  (%d tasks in %.1f s)"
              % ((mode, n_functions) + fig[:3] + (recycled, len(lat), dt)), flush=True)
        return fig
    finally:
        w.stop()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build", "release"))
    ap.add_argument("--executors", type=int, default=2)
    ap.add_argument("--functions", default="1,2,3,4")
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--call-ms", type=float, default=0.0)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    os.environ["WK_BUILD_DIR"] = os.path.abspath(args.build)
    import grpc  # noqa: E402
    from conftest import Worker, pb, pb_grpc  # noqa: E402 (after WK_BUILD_DIR is set)

    print("cores: %d; executors: %d (max = min); clients: %d; call: %.1f ms; %.0f s per run"
          % (os.cpu_count(), args.executors, args.clients, args.call_ms, args.seconds), flush=True)
    summary = []
    for n in [int(x) for x in args.functions.split(",")]:
        figs = {"shared": [], "function": []}
        for _ in range(args.reps):  # the modes alternate: the machine's speed drifts
            for mode in ("shared", "function"):
                figs[mode].append(run(mode, n, args, Worker, pb, pb_grpc, grpc))
        for mode in ("shared", "function"):
            med = [statistics.median(f[i] for f in figs[mode]) for i in range(4)]
            summary.append("%-8s %d function(s): median of %d: %6.0f tasks/s  p50 %7.2f ms  "
                           "p99 %7.2f ms  recycled %.0f" % ((mode, n, args.reps) + tuple(med)))
    print("\n".join(summary))


if __name__ == "__main__":
    main()

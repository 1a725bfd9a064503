#!/usr/bin/env python3
"""bench_calls: call execution figures on one real worker, measured in one run.

    /usr/bin/python3 bench/bench_calls.py [--build build/release] [--executors 2]
                                          [--map-executors 1,2] [--reps 3]

Prints:
  - the executor floor: one executor fed no-op CALL frames from memory (no worker),
    from bench_executor_floor (pipeline depth 64, as many calls as the map task);
  - for each executor count in --map-executors (one worker each, pipeline depth 64 at
    most): calls/s of one 100,000-item no-op map task through the worker, the CPU time
    per call of the worker and of the executors, and the ratio to floor x executors
    (target >= 0.7). The runs go in rounds: floor, a map per executor count, floor,
    ...; each map run is compared with the mean of the floor runs around it (a shared
    virtual machine's speed drifts by a third within a minute), and the ratio printed
    against the target is the median over the --reps rounds;
  - with --executors executors: no-op tasks/s end to end with 64 tasks in flight
    (submit + watch to terminal), and the worker's peak RSS during a 10-million `range`
    task (chunk 1000: 10,000 calls).
Everything shares the machine's cores (printed): the worker, its executors and this
client. With as many executors as cores, the executors and the worker oversubscribe the
machine; the 1-executor ratio shows the pipeline without that contention."""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "e2e"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build", "release"))
    ap.add_argument("--executors", type=int, default=2,
                    help="executors of the worker for the tasks/s and range figures")
    ap.add_argument("--map-executors", default="1,2",
                    help="executor counts to measure the map task with (comma-separated)")
    ap.add_argument("--map-items", type=int, default=100000)
    ap.add_argument("--reps", type=int, default=3, help="rounds (one map run per executor count each)")
    args = ap.parse_args()
    os.environ["WK_BUILD_DIR"] = os.path.abspath(args.build)
    from conftest import Worker, temp_dir, pb, pb_grpc  # noqa: E402 (after WK_BUILD_DIR is set)
    import grpc

    cores = os.cpu_count() or 0
    print("machine: %d cores (os.cpu_count), shared by the worker, its executors and this client" % cores)
    floors = []

    def measure_floor():
        busy0, t0 = machine_busy_s(), os.times()
        w0 = time.monotonic()
        out = subprocess.run([os.path.join(args.build, "bench", "bench_executor_floor"),
                              "-n", str(args.map_items), "-d", "64"],
                             capture_output=True, text=True, timeout=300).stdout
        m = re.search(r"([0-9.]+) calls/s", out)
        t1, dt = os.times(), time.monotonic() - w0
        ours = sum(t1[:4]) - sum(t0[:4])  # this client, and the bench and its executor (waited for)
        other = (machine_busy_s() - busy0) - ours
        floors.append(float(m.group(1)) if m else float("nan"))
        print("executor floor run %d (1 executor, %d calls from memory, depth 64): %.0f calls/s; "
              "other processes used %.0f%% of a core meanwhile"
              % (len(floors), args.map_items, floors[-1], max(other, 0.0) * 100 / dt))

    def start_worker(executors):
        tmp = temp_dir("bench-calls-")
        w = Worker(tmp, extra_args=["--executors-max", str(executors), "--pipeline-depth", "64",
                                    "--task-slots", "128", "--max-message-bytes", str(64 << 20)],
                   executors=executors, keep_logs=False)
        try:
            w.wait_serving()
            w.deploy("noop", "def handler(args, ctx):\n    return None\n")
            w.deploy("sumrange", "def handler(args, ctx):\n    return sum(range(args['start'], args['stop'], args['step']))\n")
            # warm-up
            w.submit("warm", "noop", list(range(2000)), builder="map")
            w.wait_terminal("warm", timeout=120)
        except BaseException:
            w.stop()
            raise
        return w

    # Rounds: a floor run, then one map run per executor count, ..., and a last floor
    # run. Each map run is compared with the mean of the floor runs around it (this VM's
    # speed drifts by a third within a minute), and the figure is the median of the
    # rounds' ratios.
    items = args.map_items
    counts = [int(x) for x in args.map_executors.split(",") if x.strip()]
    workers = {}
    rates = {n: [] for n in counts}
    try:
        for n_exec in counts:
            workers[n_exec] = start_worker(n_exec)
        for rep in range(max(args.reps, 1)):
            measure_floor()
            for n_exec in counts:
                w = workers[n_exec]
                pids = [w.proc.pid] + child_pids(w.proc.pid)
                cpu0 = [cpu_s(p) for p in pids]
                busy0, self0 = machine_busy_s(), self_cpu_s()
                t0 = time.monotonic()
                tid = "map-%d-%d" % (n_exec, rep)
                w.submit(tid, "noop", list(range(items)), builder="map", timeout_ms=3600000)
                r = w.wait_terminal(tid, timeout=900)
                dt = time.monotonic() - t0
                cpu1 = [cpu_s(p) for p in pids]
                other = (machine_busy_s() - busy0) - (self_cpu_s() - self0) - sum(b - a for a, b in zip(cpu0, cpu1))
                assert r.state == pb.TASK_STATE_SUCCEEDED, r.failure_message
                calls_ms = r.statistic.calls_ms or dt * 1000
                rate = items / (calls_ms / 1000.0)
                rates[n_exec].append((rep, rate))
                used = [(b - a) * 1e6 / items for a, b in zip(cpu0, cpu1)]
                print("map task, %d executor(s), round %d: %d no-op calls in %.2f s (calls phase %.0f ms): "
                      "%.0f calls/s; CPU per call (whole task, submit to result): worker %.1f us, "
                      "executors %s us; other processes used %.0f%% of a core meanwhile"
                      % (n_exec, rep + 1, items, dt, calls_ms, rate, used[0],
                         " + ".join("%.1f" % u for u in used[1:]) or "?", max(other, 0.0) * 100 / dt))
        measure_floor()
    finally:
        for w in workers.values():
            w.stop()
    print("executor floor runs: %s calls/s" % ", ".join("%.0f" % f for f in floors))
    for n_exec in counts:
        ratios = []
        for rep, rate in rates[n_exec]:
            around = (floors[rep] + floors[rep + 1]) / 2.0
            ratios.append(rate / (around * n_exec))
        ratio = statistics.median(ratios)
        print("map task, %d executor(s) on %d cores: median %.0f calls/s; ratio to floor x executors "
              "per round (map / (executors x mean of the floor runs around it)): %s; median %.2f   "
              "target >= 0.70: %s"
              % (n_exec, cores, statistics.median(r for _, r in rates[n_exec]),
                 ", ".join("%.2f" % x for x in ratios), ratio, "PASS" if ratio >= 0.7 else "MISS"))

    w = start_worker(args.executors)
    try:

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


def cpu_s(pid):
    """User + system CPU seconds of process `pid` (/proc/PID/stat), 0 when gone."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            s = f.read()
    except OSError:
        return 0.0
    fields = s[s.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / float(os.sysconf("SC_CLK_TCK"))


def machine_busy_s():
    """CPU seconds the whole machine spent busy (/proc/stat: all but idle and iowait)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:9]]
    return (sum(v) - v[3] - v[4]) / float(os.sysconf("SC_CLK_TCK"))


def self_cpu_s():
    """This client's own CPU seconds."""
    t = os.times()
    return t.user + t.system


def child_pids(pid):
    """The direct children of `pid` (the executors of a worker)."""
    out = []
    try:
        tasks = os.listdir("/proc/%d/task" % pid)
    except OSError:
        return out
    for t in tasks:
        try:
            with open("/proc/%d/task/%s/children" % (pid, t)) as f:
                out += [int(x) for x in f.read().split()]
        except OSError:
            pass
    return sorted(set(out))


def rss_kb(pid):
    for line in open("/proc/%d/status" % pid):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""bench_hotpath: the per-task path of one real worker (issue 12), with a grpc.aio client.

    /usr/bin/python3 bench/bench_hotpath.py [--build build/release] [--tasks 20000]
                                            [--inflight 256] [--batch 16] [--reps 3]
                                            [--only noop,sleep,echo]

Prints, with 2 executors (the worker's defaults otherwise, task_slots raised to fit):
  - noop: --tasks separate no-op tasks, --inflight in flight, submitted in batches of
    --batch that share one WatchTasks stream: tasks/s, and the CPU time per task of the
    worker (user + system of the C process, /proc/PID/stat), of its executors and of this
    client, so the reader sees which side bounds the rate. Repeated --reps times.
  - sleep: 200 tasks of a 10 ms call (time.sleep) on 2 executors, all submitted at once
    and watched on one stream:
    the wall time against the ideal 200 x 10 ms / 2 = 1.00 s, as a ratio (target >= 0.97).
  - echo: 2,000 tasks echoing 64 KiB of bytes content (CONTENT_TYPE_BYTES), 32 in flight,
    outputs checked: MB/s in + out (target >= 300).
The machine is shared: CPU per task is the figure to compare between builds, not the rate."""

import argparse
import asyncio
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "e2e"))
sys.path.insert(0, os.path.join(ROOT, "bench"))

from bench_calls import cpu_s, child_pids, self_cpu_s  # noqa: E402


def switches(pid):
    """Voluntary and involuntary context switches of every thread of `pid` so far."""
    v = [0, 0]
    try:
        tids = os.listdir("/proc/%d/task" % pid)
    except OSError:
        return v
    for t in tids:
        try:
            with open("/proc/%d/task/%s/status" % (pid, t)) as f:
                for line in f:
                    if line.startswith("voluntary_ctxt_switches:"):
                        v[0] += int(line.split()[1])
                    elif line.startswith("nonvoluntary_ctxt_switches:"):
                        v[1] += int(line.split()[1])
        except OSError:
            pass
    return v


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build", "release"))
    ap.add_argument("--tasks", type=int, default=20000)
    ap.add_argument("--inflight", type=int, default=256)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--only", default="noop,sleep,echo")
    ap.add_argument("--executors", type=int, default=2)
    ap.add_argument("--scratch-root", default="",
                    help="the worker's scratch_root (e.g. /dev/shm: no ext4 mkdir/rmdir cost per task)")
    ap.add_argument("--perf", default="", help="perf record -g the worker into this file during the noop reps")
    ap.add_argument("--perf-echo", default="", help="perf record -g the worker into this file during the echo reps")
    args = ap.parse_args()
    os.environ["WK_BUILD_DIR"] = os.path.abspath(args.build)
    from conftest import Worker, temp_dir, pb, pb_grpc  # noqa: E402 (after WK_BUILD_DIR is set)
    import grpc

    only = set(args.only.split(","))
    tmp = temp_dir("bench-hotpath-")
    w = Worker(tmp, extra_args=["--task-slots", "1024", "--max-message-bytes", str(16 << 20),
                                "--executors-max", str(args.executors)]
               + (["--scratch-root", args.scratch_root] if args.scratch_root else []),
               executors=args.executors, keep_logs=False)
    TERMINAL = (pb.TASK_STATE_SUCCEEDED, pb.TASK_STATE_FAILED, pb.TASK_STATE_CANCELLED)
    try:
        w.wait_serving()
        w.deploy("noop", "def handler(args, ctx):\n    return None\n")
        w.deploy("sleep10", "import time\ndef handler(args, ctx):\n    time.sleep(0.01)\n")
        w.deploy("echo", "def handler(args, ctx):\n    return args\n")

        async def run_batch(stub, prefix, ids, fn, check):
            """Submits ids, watches them on one stream until each is terminal."""
            await asyncio.gather(*(stub.SubmitTask(pb.SubmitTaskRequest(task_id=prefix + tid, function=fn),
                                                   timeout=60) for tid in ids))
            left = set(prefix + t for t in ids)
            async for ev in stub.WatchTasks(pb.WatchTasksRequest(task_ids=sorted(left)), timeout=120):
                if ev.result.state in TERMINAL:
                    if ev.result.state != pb.TASK_STATE_SUCCEEDED:
                        raise RuntimeError("%s: %s" % (ev.result.task_id, ev.result.failure_message))
                    if check:
                        check(ev.result)
                    left.discard(ev.result.task_id)
                    if not left:
                        break

        async def drive(prefix, n, inflight, batch, fn, check=None, channels=4):
            chans = [grpc.aio.insecure_channel(w.addr) for _ in range(channels)]
            stubs = [pb_grpc.WorkerServiceStub(c) for c in chans]
            sem = asyncio.Semaphore(max(1, inflight // batch))
            ids = ["%d" % i for i in range(n)]

            async def one(k, chunk):
                async with sem:
                    await run_batch(stubs[k % len(stubs)], prefix, chunk, fn, check)

            await asyncio.gather(*(one(k, ids[i:i + batch])
                                   for k, i in enumerate(range(0, n, batch))))
            for c in chans:
                await c.close()

        def measured(label, coro_fn, n):
            pids = [w.proc.pid] + child_pids(w.proc.pid)
            sw0 = switches(w.proc.pid)
            cpu0 = [cpu_s(p) for p in pids]
            me0 = self_cpu_s()
            t0 = time.monotonic()
            asyncio.run(coro_fn())
            dt = time.monotonic() - t0
            cpu1 = [cpu_s(p) for p in pids]
            me = self_cpu_s() - me0
            used = [(b - a) * 1e6 / n for a, b in zip(cpu0, cpu1)]
            sw = [(b - a) / n for a, b in zip(sw0, switches(w.proc.pid))]
            print("%s: %d tasks in %.2f s: %.0f tasks/s; CPU per task: worker %.1f us, executors %s us, "
                  "client %.1f us; worker context switches per task: %.1f voluntary (a thread "
                  "waited: hand-offs), %.1f involuntary"
                  % (label, n, dt, n / dt, used[0], " + ".join("%.1f" % u for u in used[1:]),
                     me * 1e6 / n, sw[0], sw[1]))
            sys.stdout.flush()
            return dt, used[0]

        if "noop" in only:
            fn = pb.FunctionCallConfig(name="noop", args=b"null")
            measured("noop warm-up", lambda: drive("warm-", 2000, args.inflight, args.batch, fn), 2000)
            worker_us = []
            perf = None
            if args.perf:
                import subprocess
                perf = subprocess.Popen(["perf", "record", "-g", "-o", args.perf, "-p", str(w.proc.pid)],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                time.sleep(0.5)
            for rep in range(args.reps):
                _, us = measured("noop rep %d (%d in flight, watch streams of %d)" % (rep + 1, args.inflight, args.batch),
                                 lambda: drive("n%d-" % rep, args.tasks, args.inflight, args.batch, fn),
                                 args.tasks)
                worker_us.append(us)
            if perf:
                import signal
                perf.send_signal(signal.SIGINT)
                perf.wait()
            print("noop: worker CPU per task %s us (target <= 40)" % ", ".join("%.1f" % u for u in worker_us))

        if "sleep" in only:
            fn = pb.FunctionCallConfig(name="sleep10", args=b"null")
            ratios = []
            measured("sleep warm-up", lambda: drive("sw-", 20, 20, 1, fn, channels=1), 20)
            for rep in range(args.reps):
                dt, _ = measured("sleep 10 ms rep %d" % (rep + 1),
                                 lambda: drive("s%d-" % rep, 200, 200, 200, fn, channels=1), 200)
                ideal = 200 * 0.010 / args.executors
                ratios.append(ideal / dt)
            print("200 x 10 ms on %d executors: ratio to ideal %s (target >= 0.97)"
                  % (args.executors, ", ".join("%.3f" % r for r in ratios)))

        if "echo" in only:
            payload = os.urandom(64 << 10)
            fn = pb.FunctionCallConfig(name="echo", args=payload, content_type=pb.CONTENT_TYPE_BYTES)

            def check(r):
                if len(r.outputs) != 1 or r.outputs[0].value != payload:
                    raise RuntimeError("echo output differs")

            measured("echo warm-up", lambda: drive("ew-", 200, 32, 4, fn, check), 200)
            perf = None
            if args.perf_echo:
                import subprocess
                perf = subprocess.Popen(["perf", "record", "-g", "-o", args.perf_echo, "-p", str(w.proc.pid)],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                time.sleep(0.5)
            for rep in range(args.reps):
                dt, _ = measured("echo 64 KiB rep %d" % (rep + 1),
                                 lambda: drive("e%d-" % rep, 2000, 32, 4, fn, check), 2000)
                print("echo: %.0f MB/s in + out (target >= 300)" % (2000 * 2 * len(payload) / dt / 1e6))
            if perf:
                import signal
                perf.send_signal(signal.SIGINT)
                perf.wait()
    finally:
        w.stop()


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""bench_tasks_aio: separate no-op tasks/s from a Python grpc.aio client (issue 12).

    /usr/bin/python3 bench/bench_tasks_aio.py [--build build/release] [--reps 5]
        [--tasks 5000] [--inflight 256] [--batch 32] [--no-slot] [--no-batch-events]
        [--library [--sequential 500]] [--smoke]

The same workload as `wk_loadgen --mode throughput`, from Python (Debian's
python3-grpcio, grpc.aio, one channel): --inflight tasks in flight as --inflight/--batch
coroutines, each admitting a batch of --batch tasks (RequestTaskSlot + SubmitTask per
task, concurrently) and then reading that batch's results from one shared WatchTasks
stream until the worker ends it after the last TERMINAL event. Starts its own worker
like bench_tasks.py (2 executors, `noop` deployed with `workerctl deploy`).

--library measures the project's client library instead of bare stubs:
worker_client.AsyncClient, each rep's --tasks submitted at once (`client.submit`, its
own bounds on submits in flight and its shared WatchTasks streams) and gathered: what a
Python program using the library pays per task; then --sequential no-op tasks one at a
time (submit, await the result, next), printing the p50/p90/p99 of that latency.

Prints per repetition tasks/s and the CPU time per task of this client (user + system,
every thread of the process, os.times), of the worker process and of its executors
(/proc/PID/stat), so readers see which side bounds the rate."""

import argparse
import asyncio
import os
import statistics
import sys
import time

import grpc

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))

from bench_calls import child_pids, self_cpu_s  # noqa: E402
from bench_calls import cpu_s as proc_cpu_s  # noqa: E402
from bench_tasks import loadavg, start_worker  # noqa: E402


def children_cpu(pid):
    """{child pid: CPU seconds} of pid's direct children (the executors)."""
    return {c: proc_cpu_s(c) for c in child_pids(pid)}


class Run(object):
    def __init__(self, stub, pb, args, prefix):
        self.stub, self.pb, self.args, self.prefix = stub, pb, args, prefix
        self.next = 0
        self.end = 0
        self.ok = 0
        self.failed = []

    async def admit(self, tid):
        pb = self.pb
        slot_id = 0
        if not self.args.no_slot:
            r = await self.stub.RequestTaskSlot(pb.RequestTaskSlotRequest(task_id=tid), timeout=60)
            slot_id = r.slot_id
        fn = pb.FunctionCallConfig(name="noop", args=b"{}")
        await self.stub.SubmitTask(pb.SubmitTaskRequest(task_id=tid, slot_id=slot_id, function=fn),
                                   timeout=60)

    async def lane(self):
        pb = self.pb
        while self.next < self.end:
            n = min(self.args.batch, self.end - self.next)
            ids = ["%s-%d" % (self.prefix, self.next + i) for i in range(n)]
            self.next += n
            await asyncio.gather(*(self.admit(t) for t in ids))
            seen = 0
            req = pb.WatchTasksRequest(task_ids=ids, batch_events=not self.args.no_batch_events)
            async for msg in self.stub.WatchTasks(req):
                for ev in (msg, *msg.more):
                    if ev.kind == pb.TaskEvent.KIND_TERMINAL:
                        seen += 1
                        if ev.result.state == pb.TASK_STATE_SUCCEEDED:
                            self.ok += 1
                        elif len(self.failed) < 3:
                            self.failed.append((ev.task_id, ev.result.failure_message))
            if seen != n and len(self.failed) < 3:
                self.failed.append(("batch", "the stream ended after %d of %d TERMINAL events" % (seen, n)))

    async def run(self, n):
        self.end = self.next + n
        lanes = max(1, self.args.inflight // self.args.batch)
        await asyncio.gather(*(self.lane() for _ in range(lanes)))


class LibraryRun(object):
    """The same counts as Run, through worker_client.AsyncClient."""

    def __init__(self, client):
        self.client = client
        self.ok = 0
        self.failed = []

    async def run(self, n):
        futures = [self.client.submit("noop", {}) for _ in range(n)]
        for f, r in zip(futures, await asyncio.gather(*futures, return_exceptions=True)):
            if isinstance(r, BaseException):
                if len(self.failed) < 3:
                    self.failed.append((f.task_id, repr(r)))
            else:
                self.ok += 1


async def bench(w, args):
    from conftest import pb, pb_grpc  # noqa: E402 (start_worker set WK_BUILD_DIR)
    if args.library:
        sys.path.insert(0, os.path.join(ROOT, "python", "worker_client", "src"))
        import worker_client  # noqa: E402
        async with worker_client.AsyncClient(w.addr) as client:
            run = LibraryRun(client)
            await run.run(args.inflight)  # warm-up
            run.ok = 0
            print("worker_client.AsyncClient: %d tasks x %d reps, each rep submitted at once "
                  "and gathered (SubmitTask each, the library's shared WatchTasks streams)"
                  % (args.tasks, args.reps))
            rc = await measure(w, args, run)
            return await sequential(client, args.sequential) or rc
    async with grpc.aio.insecure_channel(w.addr) as ch:
        stub = pb_grpc.WorkerServiceStub(ch)
        run = Run(stub, pb, args, "aio%d" % os.getpid())
        await run.run(args.inflight)  # warm-up
        run.ok = 0
        print("grpc.aio client: %d tasks x %d reps, %d in flight, %d per WatchTasks stream, %s"
              % (args.tasks, args.reps, args.inflight, args.batch,
                 "SubmitTask each" if args.no_slot else "RequestTaskSlot + SubmitTask each"))
        return await measure(w, args, run)


async def measure(w, args, run):
    """Runs args.reps reps of args.tasks tasks with run; prints the figures; 0 when
    every task succeeded."""
    pid = w.proc.pid
    print("   %4s %8s %8s %9s %13s %13s %15s" % ("rep", "tasks", "wall s", "tasks/s", "client us/t",
                                               "worker us/t", "executors us/t"))
    rates, tot = [], [0.0, 0.0, 0.0, 0.0]
    for rep in range(args.reps):
        c0, w0, x0, t0 = self_cpu_s(), proc_cpu_s(pid), children_cpu(pid), time.monotonic()
        ok0 = run.ok
        await run.run(args.tasks)
        dt = time.monotonic() - t0
        c1, w1, x1 = self_cpu_s(), proc_cpu_s(pid), children_cpu(pid)
        xs = sum(v - x0.get(k, 0.0) for k, v in x1.items())
        rates.append((run.ok - ok0) / dt)
        per = [(c1 - c0) * 1e6 / args.tasks, (w1 - w0) * 1e6 / args.tasks, xs * 1e6 / args.tasks]
        for i, v in enumerate((c1 - c0, w1 - w0, xs, dt)):
            tot[i] += v
        print("   %4d %8d %8.3f %9.0f %13.1f %13.1f %15.1f" % (rep + 1, args.tasks, dt, rates[-1], *per),
              flush=True)
    n = args.tasks * args.reps
    print("   tasks/s: median %.0f, min %.0f, max %.0f; last/first %.2f"
          % (statistics.median(rates), min(rates), max(rates), rates[-1] / rates[0] if rates[0] else 0))
    print("   CPU per task over all reps: client %.1f us, worker %.1f us, executors %.1f us"
          % (tot[0] * 1e6 / n, tot[1] * 1e6 / n, tot[2] * 1e6 / n))
    shares = {"the client": tot[0] / tot[3], "the worker": tot[1] / tot[3], "the executors": tot[2] / tot[3]}
    who = max(shares, key=shares.get)
    print("   cores busy: client %.2f, worker %.2f, executors %.2f of %d; bound: %s"
          % (shares["the client"], shares["the worker"], shares["the executors"], os.cpu_count() or 0,
             who + (" (the client is single-threaded Python: one core is its ceiling)"
                    if who == "the client" else "")))
    print("   tasks: %d of %d succeeded" % (run.ok, n))
    if run.failed:
        print("   first failures: %s" % run.failed)
    return 0 if run.ok == n and not run.failed else 1


async def sequential(client, n):
    """n no-op tasks one after another through client (submit, await the value);
    prints the latency percentiles; 0 when all succeeded."""
    if n <= 0:
        return 0
    lat = []
    for _ in range(n):
        t0 = time.perf_counter()
        await client.submit("noop", {})
        lat.append(time.perf_counter() - t0)
    lat.sort()

    def pct(p):
        return lat[min(len(lat) - 1, int(len(lat) * p))] * 1e6

    print("sequential: %d no-op tasks one at a time (submit, await the result): "
          "p50 %.0f us, p90 %.0f us, p99 %.0f us" % (n, pct(0.5), pct(0.9), pct(0.99)))
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build", "release"))
    ap.add_argument("--executors", type=int, default=2)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--tasks", type=int, default=5000)
    ap.add_argument("--inflight", type=int, default=256)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--no-slot", action="store_true")
    ap.add_argument("--no-batch-events", action="store_true",
                    help="one event per WatchTasks message (batch_events off)")
    ap.add_argument("--library", action="store_true",
                    help="through worker_client.AsyncClient instead of bare stubs")
    ap.add_argument("--sequential", type=int, default=500,
                    help="with --library: tasks run one at a time after the reps (0: none)")
    ap.add_argument("--smoke", action="store_true", help="tiny counts (ctest)")
    args = ap.parse_args()
    if args.smoke:
        args.reps, args.tasks, args.inflight, args.batch = 2, 100, 32, 8
        args.sequential = min(args.sequential, 20)
    print("bench_tasks_aio: %d cores, load average %s" % (os.cpu_count() or 0, loadavg()), flush=True)
    w = start_worker(os.path.abspath(args.build), args.executors)
    try:
        rc = asyncio.run(bench(w, args))
    finally:
        stop = w.stop()
    print("worker stopped (exit %s); load average %s" % (stop, loadavg()))
    return rc or (1 if stop != 0 else 0)


if __name__ == "__main__":
    sys.exit(main())

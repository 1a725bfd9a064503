#!/usr/bin/env python3
"""bench_memory: the worker's memory under issue 12's loads, driven by wk_loadgen.

    /usr/bin/python3 bench/bench_memory.py [--build build/release] [--parts all]
        [--tasks 1000000] [--retained 100000] [--result-bytes 1024]
        [--streams 10000] [--connections 10] [--smoke]

Parts (--parts, comma-separated; each starts its own worker with 2 executors):
  idle       RSS of the worker and of each executor, idle, default settings (after the
             deploys and 2 s of rest; then again after a few tasks ran).
  tasks      --tasks no-op tasks pipelined (256 in flight over shared WatchTasks
             streams), the worker's RSS every tenth of them; flat means the samples after
             the first (the warm-up: retention filling to max_retained_results) stay
             within 10% of each other.
  retained   the worker keeps --retained results (--max-retained-results) of
             --result-bytes each (echo of bytes args), and --max-retained-bytes is what
             --retained such results hold (measured, printed), so the count and the byte
             bound meet: RSS every tenth of 2 x --retained tasks; prints the cost per
             retained result (RSS growth over the first --retained / --retained) and
             whether RSS stays flat (within 10%) once retention is full.
  watch      --streams idle WatchTasks streams over --connections connections on one
             running task, opened, held and cancelled 3 times: RSS per stream, and
             whether RSS with them open in the third cycle is within 10% of the first; the
             RSS before the streams, with them open, and after they were cancelled
             (the worker gives the freed memory back after a mass close).
--smoke runs every part with tiny counts (ctest bench.smoke_memory): it checks that
each completes, never the figures."""

import argparse
import os
import re
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))

from bench_calls import child_pids as children, rss_kb  # noqa: E402
from bench_tasks import loadavg, start_worker  # noqa: E402


def run_loadgen(build, w, *args):
    """Runs wk_loadgen, echoes and returns (exit status, output)."""
    cmd = [os.path.join(build, "bench", "wk_loadgen"), "--target", w.addr,
           "--worker-pid", str(w.proc.pid)] + [str(a) for a in args]
    print("$ wk_loadgen " + " ".join(cmd[5:]), flush=True)
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    out = []
    for line in p.stdout:  # as it comes: the RSS samples of a long run show progress
        out.append(line)
        sys.stdout.write(line)
        sys.stdout.flush()
    rc = p.wait()
    if rc != 0:
        print("wk_loadgen failed: %s (the figures above are incomplete)"
              % ("killed by signal %d" % -rc if rc < 0 else "exit status %d" % rc), flush=True)
    return rc, "".join(out)


def rss_samples(out):
    return [(int(n), int(k)) for n, k in re.findall(r"after\s+(\d+) tasks: worker RSS\s+(\d+) KiB", out)]


def flat(samples, skip=1):
    """max/min of the RSS samples after the first `skip` (the warm-up)."""
    vals = [k for _, k in samples[skip:]]
    if len(vals) < 2:
        return None
    return max(vals) / float(min(vals))


def verdict(ok):
    return "PASS" if ok else "MISS"


def part_idle(build, args):
    w = start_worker(build, 2)
    try:
        time.sleep(2)
        execs = children(w.proc.pid)
        print("idle, default settings, after the deploys: worker %d KiB; executors %s KiB"
              % (rss_kb(w.proc.pid), ", ".join(str(rss_kb(p)) for p in execs) or "none yet"))
        rc, _ = run_loadgen(build, w, "--mode", "throughput", "--tasks", 64, "--reps", 1,
                            "--inflight", 16, "--batch", 8, "--warmup", 0)
        time.sleep(2)
        wk = rss_kb(w.proc.pid)
        ex = [rss_kb(p) for p in children(w.proc.pid)]
        print("idle after 64 no-op tasks: worker %d KiB (target <= 20 MB: %s); executors %s KiB "
              "(target <= 15 MB each: %s)"
              % (wk, verdict(wk <= 20 * 1024), ", ".join(str(x) for x in ex),
                 verdict(bool(ex) and max(ex) <= 15 * 1024)))
        return rc
    finally:
        w.stop()


def part_tasks(build, args):
    w = start_worker(build, 2)
    try:
        every = max(args.tasks // 10, 1)
        rc, out = run_loadgen(build, w, "--mode", "throughput", "--tasks", args.tasks, "--reps", 1,
                              "--inflight", 256, "--batch", 32, "--no-slot", "--rss-every", every)
        s = rss_samples(out)
        f = flat(s)
        if f is not None:
            print("tasks: worker RSS over %d no-op tasks: first sample %d KiB (after %d), last "
                  "%d KiB (after %d); samples after the first: max/min %.3f (target <= 1.10: %s)"
                  % (args.tasks, s[0][1], s[0][0], s[-1][1], s[-1][0], f, verdict(f <= 1.10)))
        return rc
    finally:
        w.stop()


def part_retained(build, args):
    # What one retained result of --result-bytes holds, as the worker counts it, is not
    # visible from outside: measure it with a small byte bound first (results kept =
    # bound / per-result bytes), then size the real bound for --retained results.
    n = args.retained
    probe_bound = max(256 << 10, min(4 << 20, n * args.result_bytes // 4))
    w = start_worker(build, 2, ["--max-retained-results", str(max(n, 100000)),
                                "--max-retained-bytes", str(probe_bound)])
    try:
        probe = max(2 * probe_bound // max(args.result_bytes, 1), 64)
        rc, _ = run_loadgen(build, w, "--mode", "echo", "--tasks", probe, "--reps", 1,
                            "--payload", args.result_bytes, "--inflight", 64, "--batch", 16,
                            "--warmup", 0, "--id-prefix", "probe")
        kept = retained_count(w, "probe", probe)
    finally:
        w.stop()
    if rc != 0 or kept <= 0:
        print("retained: the probe failed (exit %d, %d kept)" % (rc, kept))
        return 1
    per = probe_bound / float(kept)
    bound = int(per * n) + 1
    print("retained: a %d-byte result holds %.0f bytes as the worker counts them (%d kept under "
          "a %d-byte bound); --max-retained-bytes %d for %d results"
          % (args.result_bytes, per, kept, probe_bound, bound, n))
    w = start_worker(build, 2, ["--max-retained-results", str(n), "--max-retained-bytes", str(bound)])
    try:
        time.sleep(1)
        base = rss_kb(w.proc.pid)
        every = max(n // 10, 1)
        rc, out = run_loadgen(build, w, "--mode", "echo", "--tasks", 2 * n, "--reps", 1,
                              "--payload", args.result_bytes, "--inflight", 64, "--batch", 16,
                              "--rss-every", every, "--warmup", 0)
        s = rss_samples(out)
        at_n = [k for t, k in s if t >= n]
        if at_n:
            cost = (at_n[0] - base) * 1024.0 / n
            tail = [k for t, k in s if t >= n]
            f = max(tail) / float(min(tail)) if len(tail) > 1 else 1.0
            print("retained: RSS %d KiB before, %d KiB at %d results: %.0f bytes per retained "
                  "%d-byte result; once full, RSS max/min %.3f over the next %d tasks "
                  "(target <= 1.10: %s)"
                  % (base, at_n[0], n, cost, args.result_bytes, f, n, verdict(f <= 1.10)))
        return rc
    finally:
        w.stop()


def retained_count(w, prefix, total):
    """How many of tasks <prefix>-0 .. -(total-1) the worker still retains: retention
    drops the oldest first, so a binary search for the first one still there."""
    from conftest import pb  # noqa: E402
    import grpc

    def there(i):
        try:
            w.stub.GetTaskResult(pb.GetTaskResultRequest(task_id="%s-%d" % (prefix, i)), timeout=5)
            return True
        except grpc.RpcError:
            return False

    if not there(total - 1):
        return 0
    lo, hi = 0, total - 1
    while lo < hi:
        mid = (lo + hi) // 2
        if there(mid):
            hi = mid
        else:
            lo = mid + 1
    return total - lo


def part_watch(build, args):
    w = start_worker(build, 2)
    try:
        rc, out = run_loadgen(build, w, "--mode", "watch-idle", "--streams", args.streams,
                              "--connections", args.connections, "--cycles", 3, "--hold-ms", 1000)
        time.sleep(2)
        later = rss_kb(w.proc.pid)
        rows = re.findall(r"^\s+(\d+)\s+[\d.]+\s+\d+\s+\d+\s+(\d+)\s+(\d+)\s+(-?\d+)", out, re.M)
        before = re.search(r"worker RSS before: (\d+) KiB", out)
        if len(rows) >= 2:
            # flatness with the streams open: after a close the worker gives the freed
            # memory back (malloc_trim, at the next tick or two), so the reading 1 s after
            # a close says when that ran, not whether memory climbs from cycle to cycle
            first_open, last_open = int(rows[0][1]), int(rows[-1][1])
            r = last_open / float(first_open) if first_open else 0
            print("watch: %s bytes per idle stream (cycle 1); RSS with the streams open, cycle %d / "
                  "cycle 1: %.3f (target <= 1.10: %s)" % (rows[0][3], len(rows), r, verdict(r <= 1.10)))
        if rows and before:
            b = int(before.group(1))
            print("watch: worker RSS %d KiB before the streams, %d KiB with %s open, %s KiB 1 s after "
                  "each cycle's close, %d KiB 3 s after the last (%.2f x before)" % (
                      b, max(int(x[1]) for x in rows), args.streams,
                      " / ".join(x[2] for x in rows), later, later / float(b)))
        return rc
    finally:
        w.stop()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build", "release"))
    ap.add_argument("--parts", default="idle,tasks,retained,watch")
    ap.add_argument("--tasks", type=int, default=1000000)
    ap.add_argument("--retained", type=int, default=100000)
    ap.add_argument("--result-bytes", type=int, default=1024)
    ap.add_argument("--streams", type=int, default=10000)
    ap.add_argument("--connections", type=int, default=10)
    ap.add_argument("--smoke", action="store_true")
    args = ap.parse_args()
    if args.smoke:
        # the default's 10 connections: a generator's per-connection state is checked too
        args.tasks, args.retained, args.streams, args.connections = 2000, 500, 50, 10
    build = os.path.abspath(args.build)
    print("bench_memory: %d cores, load average %s" % (os.cpu_count() or 0, loadavg()), flush=True)
    parts = {"idle": part_idle, "tasks": part_tasks, "retained": part_retained, "watch": part_watch}
    rc = 0
    for p in [x.strip() for x in args.parts.split(",") if x.strip()]:
        print(flush=True)
        rc = parts[p](build, args) or rc
    print("\nload average at the end %s" % loadavg())
    return rc


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""bench_tasks: the per-task figures of issue 12, measured by the C load generator.

    /usr/bin/python3 bench/bench_tasks.py [--build build/release]
        [--modes throughput,submit-only,unary,roundtrip,sleep,echo]
        [--reps 5] [--tasks 20000] [--inflight 256] [--batch 32] [--no-slot]
        [--rt-tasks 2000] [--sleep-tasks 200] [--echo-tasks 2000] [--echo-bytes 65536]
        [--executors 2] [--full-channel] [--no-cork] [--smoke]

Starts one real worker of the build (127.0.0.1, a free port, --executors N fixed, a
temporary code root) with three functions deployed by `workerctl deploy`:
  noop        def handler(args, ctx): return None
  sleep       time.sleep(args)            (args: seconds as JSON)
  echo_bytes  return args                 (bytes content in, bytes out)
then runs bench/wk_loadgen (built with the tree: `cmake --build B --target wk_loadgen`)
against it in each mode of --modes (comma-separated) and prints its figures:
  throughput   separate no-op tasks, each RequestTaskSlot + SubmitTask (a coordinator
               that reserves first), --inflight in flight, --batch per WatchTasks stream
  submit-only  the same with SubmitTask alone: the core reserves the slot inline (the
               design's "SubmitTask carries no slotId"), i.e. issue 12's end-to-end
               path (submit, activation, one call, terminal event), one RPC less
  unary        Health.Check calls, --inflight in flight: the worker's CPU per bare unary
               RPC, the gRPC floor under every task; after submit-only, the worker's
               CPU per task above that floor is printed (what the Worker itself adds)
  roundtrip, sleep, echo   see wk_loadgen's usage (sleep after an unmeasured burst of
               20 that moves both executors to the sleep function; then the machine's
               floor for it, 100 bare 10 ms time.sleep calls, and the worker's fraction
               of that floor: the VM's timer latency moves both figures)
--full-channel gives the generator gRPC's whole client channel (as workerctl's) instead
of connections of its own: what the generator saves shows beside the worker's figures.
--no-cork: the generator sends each call on its own instead of corking its connections
while the completions that are ready run (see wk_loadgen.c).
--smoke runs every mode with tiny counts (the ctest bench.smoke); figures from it mean
nothing. Exit status: that of the first failing mode.

Every figure is from the machine it runs on: the worker, its executors and the load
generator share its cores. The worker logs at its default level (info) into a file in
its temporary directory that this process does not read (it read and parsed each
record as it came: ~23 us of CPU per task on the same cores, about what the load
generator spends). The CPU time per task (from /proc/PID/stat) says more than
the rates when other processes are busy."""

import argparse
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "e2e"))

FUNCTIONS = {
    "noop": "def handler(args, ctx):\n    return None\n",
    "sleep": "import time\n\ndef handler(args, ctx):\n    time.sleep(args)\n",
    "echo_bytes": "def handler(args, ctx):\n    return args\n",
    # --smoke: the tasks with an odd number fail, so event messages mix outcomes
    "fail_odd": ("def handler(args, ctx):\n"
                 "    if int(ctx.task_id.rsplit('-', 1)[1]) % 2:\n"
                 "        raise ValueError('odd task')\n"),
}


def smoke_failures(build, w):
    """The generator counts a task only when it SUCCEEDED, and reports the others: 20
    tasks of which the 10 odd ones fail, their events batched on shared streams. 0
    when it said exactly that."""
    cmd = [os.path.join(build, "bench", "wk_loadgen"), "--target", w.addr, "--mode",
           "throughput", "--function", "fail_odd", "--tasks", "20", "--reps", "1",
           "--inflight", "20", "--batch", "10", "--warmup", "0", "--no-slot"]
    print("$ " + " ".join(cmd[1:]) + "   (10 of the 20 must be reported failed)", flush=True)
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    print(p.stdout, end="", flush=True)
    ok = (p.returncode != 0 and "tasks: 10 of 20 succeeded" in p.stdout
          and "task ended FAILED" in p.stdout and "ValueError: odd task" in p.stdout)
    print("failed tasks reported: %s" % ("PASS" if ok else "FAIL"), flush=True)
    return 0 if ok else 1


def start_worker(build, executors, extra=()):
    """A started, SERVING worker (conftest.Worker) with FUNCTIONS deployed."""
    os.environ["WK_BUILD_DIR"] = os.path.abspath(build)
    from conftest import Worker, temp_dir  # noqa: E402 (after WK_BUILD_DIR is set)
    tmp = temp_dir("bench-tasks-")
    w = Worker(tmp, extra_args=["--executors-max", str(executors), "--task-slots", "4096"]
               + list(extra), executors=executors, keep_logs=False)
    try:
        w.wait_serving()
        for name, src in FUNCTIONS.items():
            w.deploy(name, src)
    except BaseException:
        w.stop()
        raise
    return w


LOADGEN_EXTRA = []  # arguments every wk_loadgen run gets (main: --full-channel)


def loadgen_out(build, w, *args, timeout=3600):
    """Runs wk_loadgen against worker w, echoing its output; returns its exit status and
    its output."""
    cmd = [os.path.join(build, "bench", "wk_loadgen"), "--target", w.addr,
           "--worker-pid", str(w.proc.pid)] + [str(a) for a in args] + LOADGEN_EXTRA
    print("$ " + " ".join(cmd[1:]), flush=True)
    p = subprocess.run(cmd, timeout=timeout, stdout=subprocess.PIPE, text=True)
    print(p.stdout, end="", flush=True)
    if p.returncode != 0:
        print("wk_loadgen exited %d" % p.returncode, flush=True)
    return p.returncode, p.stdout


def loadgen(build, w, *args, timeout=3600):
    """loadgen_out's exit status alone."""
    return loadgen_out(build, w, *args, timeout=timeout)[0]


def worker_us(output):
    """The worker's CPU per task (or per call) over all reps in wk_loadgen's output, or
    None."""
    m = re.search(r"CPU per (?:task|call) over all reps: worker ([0-9.]+) us", output)
    return float(m.group(1)) if m else None


# The machine's own floor for the sleep mode: one Python process (the executors'
# interpreter and timer slack) sleeping SLEEP_FLOOR_N x 10 ms back to back, nothing else.
# Each sleep overshoots by the VM's timer wake-up latency (~0.1 ms here in its quiet
# minutes, several times that in its busy ones), which no executor can beat.
SLEEP_FLOOR_N = 100
SLEEP_FLOOR = """
import ctypes, time
ctypes.CDLL(None).prctl(29, 1000, 0, 0, 0)  # PR_SET_TIMERSLACK: executor_timer_slack_ns
t = time.perf_counter()
for _ in range(%d):
    time.sleep(0.01)
print(%d * 0.01 / (time.perf_counter() - t))
""" % (SLEEP_FLOOR_N, SLEEP_FLOOR_N)


def sleep_floor():
    """The fraction of ideal a bare loop of 10 ms time.sleep calls reaches on this
    machine now (in /usr/bin/python3, the executors' interpreter here), or None when it
    could not be measured."""
    p = subprocess.run(["/usr/bin/python3", "-c", SLEEP_FLOOR], stdout=subprocess.PIPE,
                       text=True, timeout=60)
    try:
        return float(p.stdout)
    except ValueError:
        return None


def verdicts(out):
    """The lines of wk_loadgen's output that give a target's verdict (PASS or MISS), and
    the stability figure the machine's speed cancels out of."""
    return [line.strip() for line in out.splitlines()
            if ("target" in line and ("PASS" in line or "MISS" in line))
            or "speed cancels out" in line]


def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build", "release"))
    ap.add_argument("--modes", default="throughput,submit-only,unary,roundtrip,sleep,echo")
    ap.add_argument("--executors", type=int, default=2)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--tasks", type=int, default=20000, help="throughput: tasks per rep")
    ap.add_argument("--inflight", type=int, default=256)
    ap.add_argument("--batch", type=int, default=32, help="tasks per WatchTasks stream")
    ap.add_argument("--no-slot", action="store_true", help="SubmitTask without RequestTaskSlot")
    ap.add_argument("--rt-tasks", type=int, default=2000)
    ap.add_argument("--sleep-tasks", type=int, default=200)
    ap.add_argument("--echo-tasks", type=int, default=2000)
    ap.add_argument("--echo-bytes", type=int, default=65536)
    ap.add_argument("--smoke", action="store_true", help="every mode with tiny counts")
    ap.add_argument("--full-channel", action="store_true",
                    help="the generator on gRPC's whole client channel (as workerctl)")
    ap.add_argument("--no-cork", action="store_true",
                    help="the generator sends each call on its own (no TCP_CORK)")
    args = ap.parse_args()
    if args.full_channel:
        LOADGEN_EXTRA.append("--full-channel")
    if args.no_cork:
        LOADGEN_EXTRA.append("--no-cork")
    if args.smoke:
        args.reps, args.tasks, args.inflight, args.batch = 2, 200, 32, 8
        args.rt_tasks, args.sleep_tasks, args.echo_tasks = 20, 10, 20
    build = os.path.abspath(args.build)
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    cache = os.path.join(build, "CMakeCache.txt")
    btype = "?"
    if os.path.exists(cache):
        for line in open(cache):
            if line.startswith("CMAKE_BUILD_TYPE:"):
                btype = line.split("=", 1)[1].strip()
    print("bench_tasks: build %s (%s), %d executors, %d cores on this machine, load average %s"
          % (build, btype or "no build type", args.executors, os.cpu_count() or 0, loadavg()),
          flush=True)
    w = start_worker(build, args.executors)
    rc = 0
    summary = []  # (mode, its verdict lines), printed together at the end
    try:
        # warm-up: the executors import the functions, the connection comes up
        print("(warm-up, not measured: its verdicts mean nothing)", flush=True)
        loadgen(build, w, "--mode", "throughput", "--tasks", 200, "--reps", 1, "--inflight", 32,
                "--batch", 8)
        slot = ["--no-slot"] if args.no_slot else []
        per_task = None  # the worker's CPU per submit-only task
        for m in modes:
            print(flush=True)
            extra = []  # this mode's lines for the summary besides the generator's verdicts
            if m in ("throughput", "submit-only"):
                flow = ["--no-slot"] if m == "submit-only" else slot
                r, out = loadgen_out(build, w, "--mode", "throughput", "--tasks", args.tasks,
                                     "--reps", args.reps, "--inflight", args.inflight,
                                     "--batch", args.batch, *flow)
                if m == "submit-only":
                    per_task = worker_us(out)
            elif m == "unary":
                r, out = loadgen_out(build, w, "--mode", "unary", "--tasks", args.tasks,
                                     "--reps", args.reps, "--inflight", args.inflight)
                floor = worker_us(out)
                if per_task and floor:  # none from a run too short for /proc's ticks
                    print("   worker CPU per submit-only task %.1f us = the gRPC floor %.1f us "
                          "(one unary RPC) + %.1f us the Worker adds (%.0f%% of the task)"
                          % (per_task, floor, per_task - floor,
                             100.0 * (per_task - floor) / per_task), flush=True)
            elif m == "roundtrip":
                r, out = loadgen_out(build, w, "--mode", "roundtrip", "--tasks", args.rt_tasks)
            elif m == "sleep":
                # executor_isolation=function: the executors still serve the function of
                # the mode before; switching both to `sleep` costs an executor start
                # (bench_isolation.py measures that), which is not the per-task path
                print("(warm-up, not measured: both executors take up the sleep function)",
                      flush=True)
                loadgen(build, w, "--mode", "sleep", "--tasks", 20, "--executors", args.executors,
                        "--task-ms", 10, "--args", "0.01", "--batch", 10)
                print(flush=True)
                r, out = loadgen_out(build, w, "--mode", "sleep", "--tasks", args.sleep_tasks,
                                     "--executors", args.executors, "--task-ms", 10, "--args",
                                     "0.01", "--batch", 25)
                got = re.search(r"fraction of ideal ([0-9.]+)", out)
                floor = sleep_floor()
                if got and floor:
                    line = ("the machine's floor now: %d x time.sleep(0.01) alone in one Python "
                            "process reach %.3f of ideal; the worker reached %.3f of that floor"
                            % (SLEEP_FLOOR_N, floor, float(got.group(1)) / floor))
                    print("   " + line, flush=True)
                    extra.append(line)
            elif m == "echo":
                r, out = loadgen_out(build, w, "--mode", "echo", "--tasks", args.echo_tasks,
                                     "--reps", min(args.reps, 3), "--payload", args.echo_bytes,
                                     "--inflight", 64, "--batch", 16, *slot)
            else:
                print("unknown mode %r" % m)
                r, out = 2, ""
            summary.append((m, verdicts(out) + extra))
            rc = rc or r
        if args.smoke:  # (tiny counts: verdicts that mean nothing, so no summary)
            print(flush=True)
            rc = rc or smoke_failures(build, w)
        else:
            print("\nsummary: every target's verdict above, by mode (the CPU target is for a "
                  "submit-only task; slot + submit pays a second RPC)", flush=True)
            for m, lines in summary:
                for line in lines or ["(no target)"]:
                    print("   %-12s %s" % (m, line), flush=True)
    finally:
        stop = w.stop()
        print("\nworker stopped (exit %s); load average %s" % (stop, loadavg()), flush=True)
        if stop != 0:
            rc = rc or 1
    return rc


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""bench_instructions: the worker's instructions per no-op task, counted by callgrind.

    /usr/bin/python3 bench/bench_instructions.py [--build build/release] [--tasks 3000]
        [--drift N] [-- WK_LOADGEN_ARGS...]      e.g. -- --no-slot, -- --no-batch-events

CPU time per task moves with whatever else runs on the machine; the count of
instructions the worker executes does not. This runs the worker of the build under
valgrind --tool=callgrind (every thread of it; its executors are not traced) twice, with
--tasks and with 2 x --tasks no-op tasks of `wk_loadgen --mode throughput` (256 in
flight, 32 per WatchTasks stream, RequestTaskSlot + SubmitTask each unless --no-slot),
and prints the difference divided by --tasks: the instructions one more task costs,
with start-up, deploys and shutdown taken out. It also prints the functions of the
worker's own code (and the libraries) with the most instructions per task in the
larger run. Slow (valgrind runs the worker ~50 x slower): ~2 minutes for 3,000 tasks.
The figure moves by a few percent between runs (how events happen to batch under
valgrind's serialised threads), far less than CPU time on a busy machine.

--drift N answers "does the worker slow itself down?" without the machine's noise: one
worker under callgrind serves --tasks tasks to warm up, then --tasks counted tasks
(callgrind_control zeroes the counts before and dumps them after), then N more, then
--tasks counted again; it prints the instructions per task of the two counted batches
and their ratio (the issue's stability target: within 10%). Retention fills (10,000
results by default) and evicts in between, as in bench_tasks.py's five repetitions."""

import argparse
import glob
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
sys.path.insert(0, os.path.join(ROOT, "tests", "e2e"))


def annotate(out):
    """(total instructions, callgrind_annotate's text) of a callgrind output file."""
    ann = subprocess.run(["callgrind_annotate", out], capture_output=True, text=True,
                         check=True).stdout
    for line in ann.splitlines():
        if "PROGRAM TOTALS" in line:
            return int(line.split()[0].replace(",", "")), ann
    raise SystemExit("callgrind_annotate printed no totals")


def serve(build, loadgen_args, out, steps):
    """Starts the worker of the build under callgrind (output file `out`), deploys the
    bench functions and runs steps(worker, load) with load(n) serving n no-op tasks
    through wk_loadgen; stops the worker after."""
    os.environ["WK_BUILD_DIR"] = os.path.abspath(build)
    import bench_tasks  # noqa: E402 (FUNCTIONS and the deploy)
    from conftest import Worker, temp_dir  # noqa: E402
    tmp = temp_dir("bench-instr-")
    w = Worker(tmp, extra_args=["--executors-max", "2", "--task-slots", "4096"], executors=2,
               wrapper=["valgrind", "--tool=callgrind", "--callgrind-out-file=" + out],
               start_timeout=300, keep_logs=False)

    def load(tasks):
        cmd = [os.path.join(build, "bench", "wk_loadgen"), "--target", w.addr, "--mode",
               "throughput", "--tasks", str(tasks), "--reps", "1", "--inflight", "256",
               "--batch", "32", "--warmup", "0"] + loadgen_args
        p = subprocess.run(cmd, stdout=subprocess.DEVNULL, timeout=7200)
        if p.returncode != 0:
            raise SystemExit("wk_loadgen exited %d" % p.returncode)
    try:
        w.wait_serving(300)
        for name, src in bench_tasks.FUNCTIONS.items():
            w.deploy(name, src)
        steps(w, load)
    finally:
        w.stop(timeout=600)


def run_once(build, tasks, loadgen_args, out):
    """Total instructions of one worker run serving `tasks` no-op tasks."""
    serve(build, loadgen_args, out, lambda w, load: load(tasks))
    return annotate(out)


def drift(build, tasks, fill, loadgen_args, out):
    """Instructions per task of `tasks` tasks counted after `tasks` of warm-up, and of
    `tasks` counted after `fill` more."""
    def ctl(w, flag):
        p = subprocess.run(["callgrind_control", flag, str(w.proc.pid)], capture_output=True,
                           text=True, timeout=600)
        if p.returncode != 0:
            raise SystemExit("callgrind_control %s failed: %s" % (flag, p.stdout + p.stderr))

    def steps(w, load):
        load(tasks)
        for n in (fill, 0):
            ctl(w, "--zero")
            load(tasks)
            ctl(w, "--dump")
            if n:
                load(n)
    serve(build, loadgen_args, out, steps)
    dumps = sorted((p for p in glob.glob(out + ".*") if p.rsplit(".", 1)[1].isdigit()),
                   key=lambda p: int(p.rsplit(".", 1)[1]))
    if len(dumps) < 2:
        raise SystemExit("callgrind wrote %d dumps, not 2" % len(dumps))
    return [annotate(p)[0] / tasks for p in dumps[:2]]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build", "release"))
    ap.add_argument("--tasks", type=int, default=3000)
    ap.add_argument("--top", type=int, default=15, help="functions listed")
    ap.add_argument("--drift", type=int, default=0, metavar="N",
                    help="instead: per task at the start and after N more tasks")
    ap.add_argument("loadgen_args", nargs="*", help="after --: passed to wk_loadgen")
    a = ap.parse_args()
    if a.drift:
        with tempfile.TemporaryDirectory(prefix="bench-instr-out-") as d:
            first, later = drift(a.build, a.tasks, a.drift, a.loadgen_args,
                                 os.path.join(d, "drift"))
        print("bench_instructions --drift: build %s, %d tasks counted, then %d more, then %d "
              "counted again%s" % (a.build, a.tasks, a.drift, a.tasks,
                                   (" (wk_loadgen " + " ".join(a.loadgen_args) + ")")
                                   if a.loadgen_args else ""))
        ratio = later / first
        print("   worker instructions per task: first %.0f, after %d more tasks %.0f; "
              "later/first %.3f (target within 10%%: %s)" % (
                  first, a.drift, later, ratio, "PASS" if abs(ratio - 1) <= 0.10 else "MISS"))
        return
    with tempfile.TemporaryDirectory(prefix="bench-instr-out-") as d:
        small, _ = run_once(a.build, a.tasks, a.loadgen_args, os.path.join(d, "small"))
        big, ann = run_once(a.build, 2 * a.tasks, a.loadgen_args, os.path.join(d, "big"))
    per_task = (big - small) / a.tasks
    print("bench_instructions: build %s, %d and %d no-op tasks%s" % (
        a.build, a.tasks, 2 * a.tasks, (" (wk_loadgen " + " ".join(a.loadgen_args) + ")")
        if a.loadgen_args else ""))
    print("   worker instructions per task: %.0f (runs: %d and %d instructions in all)" % (
        per_task, small, big))
    print("   most instructions per task in the larger run (self cost):")
    shown = 0
    for line in ann.splitlines():
        m = re.match(r"\s*([\d,]+) \(\s*[\d.]+%\)\s+(\S.*)$", line)
        if not m or "PROGRAM TOTALS" in line:
            continue
        where = m.group(2).split(" [")[0]
        name = where.split(":", 1)[1] if ":" in where else where  # file:function
        lib = m.group(2).rsplit("[", 1)[-1].rstrip("]").rsplit("/", 1)[-1] if "[" in m.group(2) \
            else ""
        print("   %10.0f  %s  (%s)" % (int(m.group(1).replace(",", "")) / (2 * a.tasks),
                                      name[:70], lib))
        shown += 1
        if shown >= a.top:
            break


if __name__ == "__main__":
    main()

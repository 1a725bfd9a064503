#!/usr/bin/env python3
"""bench_outputs: the worker's memory while a task's outputs go to the file writer.

    /usr/bin/python3 bench/bench_outputs.py [--build build/release] [--calls 1000000]
                                            [--output-bytes 1024] [--executors 2]

One real worker (its Python executors, the file writer into a temporary directory)
runs one `range` task of --calls calls (chunk 1), each returning a string of
--output-bytes characters, with result_handler file. The outputs are spooled to a file
beside the task's scratch directory as they arrive and the writer reads that spool, so
the worker's memory stays flat: printed are its RSS before the task, its peak RSS (VmHWM)
over the task, the time of the calls and of the whole task, the spool and output sizes.
For comparison, holding the outputs in memory (and copying them for the writer, as
before the spool) would take some three times calls x output bytes."""

import argparse
import os
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "e2e"))


def status_kb(pid, key):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build", "release"))
    ap.add_argument("--calls", type=int, default=1000000)
    ap.add_argument("--output-bytes", type=int, default=1024)
    ap.add_argument("--executors", type=int, default=2)
    args = ap.parse_args()
    os.environ["WK_BUILD_DIR"] = os.path.abspath(args.build)
    from conftest import Worker, temp_dir, pb  # noqa: E402 (after WK_BUILD_DIR is set)

    tmp = temp_dir("bench-outputs-")
    out = os.path.join(tmp, "out")
    scratch = os.path.join(tmp, "scratch")
    os.makedirs(out)
    os.makedirs(scratch)
    w = Worker(tmp, extra_args=["--output-dir", out, "--scratch-root", scratch, "--pipeline-depth", "64",
                                "--max-calls-per-task", str(max(args.calls, 1)),
                                "--default-timeout-ms", "3600000"],
               executors=args.executors, keep_logs=False)
    try:
        w.wait_serving()
        w.deploy("sized", "def handler(args, ctx):\n    return 'x' * %d\n" % args.output_bytes)
        w.submit("warm", "sized", {"start": 0, "stop": 2000, "chunk": 1}, builder="range",
                 result_handler=pb.ResultHandler(type="file"))
        w.wait_terminal("warm", timeout=120)
        rss0 = status_kb(w.proc.pid, "VmRSS")
        hwm0 = status_kb(w.proc.pid, "VmHWM")
        peak_spool = [0]
        stop = threading.Event()

        def watch_spool():  # the spool file beside the scratch directory, as it grows
            while not stop.is_set():
                for f in os.listdir(scratch):
                    if f.endswith(".outputs"):
                        try:
                            peak_spool[0] = max(peak_spool[0], os.path.getsize(os.path.join(scratch, f)))
                        except OSError:
                            pass
                time.sleep(0.5)

        watcher = threading.Thread(target=watch_spool, daemon=True)
        watcher.start()
        t0 = time.monotonic()
        w.submit("big", "sized", {"start": 0, "stop": args.calls, "chunk": 1}, builder="range",
                 result_handler=pb.ResultHandler(type="file"), timeout_ms=3600000)
        r = w.wait_terminal("big", timeout=3600)
        dt = time.monotonic() - t0
        stop.set()
        watcher.join()
        hwm = status_kb(w.proc.pid, "VmHWM")
        ok = r.state == pb.TASK_STATE_SUCCEEDED and r.plugin_results and \
            r.plugin_results[0].records == args.calls and len(r.outputs) == 0
        st = r.statistic
        size = os.path.getsize(r.plugin_results[0].location) if r.plugin_results else 0
        print("machine: %d cores; worker with %d executors, file writer"
              % (os.cpu_count() or 0, args.executors))
        print("task: %d calls x %d-byte outputs, %s in %.1f s (calls %.1f s: %.0f calls/s; "
              "writer %.1f s)" % (args.calls, args.output_bytes,
                                  "SUCCEEDED" if ok else "WRONG: %s" % r.failure_message, dt,
                                  st.calls_ms / 1000.0, args.calls / max(st.calls_ms / 1000.0, 1e-9),
                                  st.writer_ms / 1000.0))
        print("outputs: spool file %.0f MiB at its largest, output file %.0f MiB, TaskResult %d bytes"
              % (peak_spool[0] / 1048576.0, size / 1048576.0, r.ByteSize()))
        print("worker RSS: %.1f MiB before the task (peak %.1f MiB so far), peak %.1f MiB during it "
              "(outputs held in memory: some %.0f MiB)"
              % (rss0 / 1024.0, hwm0 / 1024.0, hwm / 1024.0,
                 3 * args.calls * (args.output_bytes + 8) / 1048576.0))
    finally:
        w.stop()


if __name__ == "__main__":
    main()

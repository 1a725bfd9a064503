#!/usr/bin/env python3
"""Idle memory of a worker with default settings and of its executors (issue 12: worker
alone <= 20 MB RSS idle, an idle executor <= 15 MB; printed in MiB, 1 MiB = 1.049 MB).
A benchmark: it prints figures and asserts nothing.

    python3 bench/bench_idle_memory.py [--build DIR] [--settle S] [--python PY] [-- ARGS...]

Starts `worker` (default settings; a fresh code root; extra ARGS after `--`), waits
--settle seconds, and prints VmRSS (and its anonymous / file-backed parts) of the worker
and of each executor from /proc/PID/status. Then it runs one no-op task and prints the
figures again ("after one task": an executor that has loaded code and run a call).
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def status(pid):
    """{'VmRSS': kB, 'RssAnon': kB, 'RssFile': kB, 'Threads': n} of `pid`."""
    out = {}
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "RssAnon", "RssFile", "RssShmem", "Threads"):
                out[key] = int(value.split()[0])
    return out


def children(pid):
    r = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True)
    return [int(x) for x in r.stdout.split()]


def show(label, pid):
    s = status(pid)
    print("  %-22s pid %-7d RSS %6.1f MiB  (anon %5.1f, file %5.1f)  threads %d" % (
        label, pid, s["VmRSS"] / 1024, s.get("RssAnon", 0) / 1024, s.get("RssFile", 0) / 1024,
        s.get("Threads", 0)))
    return s["VmRSS"]


def report(title, worker_pid):
    print(title)
    w = show("worker", worker_pid)
    execs = [show("executor", c) for c in children(worker_pid)]
    if execs:
        print("  worker %.1f MiB; executors: %s MiB (mean %.1f); worker + executors %.1f MiB" % (
            w / 1024, ", ".join("%.1f" % (e / 1024) for e in execs),
            sum(execs) / len(execs) / 1024, (w + sum(execs)) / 1024))


def run_noop(build, code_root, addr):
    """Deploys and runs one no-op task with the grpc Python client of the e2e tests."""
    sys.path.insert(0, os.path.join(ROOT, "tests", "e2e"))
    os.environ.setdefault("WK_BUILD_DIR", build)
    from conftest import pb, pb_grpc  # generated stubs (protoc), as the e2e tests use
    import grpc
    src = tempfile.mkdtemp(prefix="wk-bench-src-")
    with open(os.path.join(src, "main.py"), "w") as f:
        f.write("def handler(args, ctx):\n    return None\n")
    subprocess.run([os.path.join(build, "workerctl"), "deploy", "--code-root", code_root,
                    "noop", src], check=True, capture_output=True)
    shutil.rmtree(src, ignore_errors=True)
    with grpc.insecure_channel(addr) as ch:
        stub = pb_grpc.WorkerServiceStub(ch)
        fn = pb.FunctionCallConfig(name="noop", args=b"{}")
        stub.SubmitTask(pb.SubmitTaskRequest(task_id="idle-bench-1", function=fn), timeout=10)
        deadline = time.time() + 30
        while time.time() < deadline:
            r = stub.GetTaskResult(pb.GetTaskResultRequest(task_id="idle-bench-1"), timeout=5)
            if r.state == pb.TASK_STATE_SUCCEEDED:
                return
            time.sleep(0.05)
    raise SystemExit("the no-op task did not succeed")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build", "release"))
    ap.add_argument("--settle", type=float, default=3.0, help="seconds after start")
    ap.add_argument("--python", default="/usr/bin/python3")
    ap.add_argument("args", nargs="*", help="extra worker arguments (after --)")
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="wk-bench-idle-")
    code_root = os.path.join(tmp, "code")
    os.makedirs(code_root)
    args = [os.path.join(a.build, "worker"), "--listen", "127.0.0.1:0", "--code-root", code_root,
            "--python", a.python] + a.args
    if os.geteuid() == 0 and not any(x.startswith("--executor-user") for x in a.args):
        args += ["--executor-user", "root"]  # tmp dirs are root's 0700 (as the e2e tests)
    p = subprocess.Popen(args, stderr=subprocess.PIPE, text=True)
    try:
        port = None
        for line in p.stderr:
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if rec.get("event") == "worker_listening":
                port = rec["port"]
                break
        if port is None:
            raise SystemExit("the worker did not start")
        # keep draining its log so it never blocks on a full pipe
        import threading
        threading.Thread(target=lambda: [None for _ in p.stderr], daemon=True).start()
        time.sleep(a.settle)
        print("worker %s, python %s, settings: defaults%s" % (
            args[0], a.python, (" + " + " ".join(a.args)) if a.args else ""))
        report("idle after start (%.0f s):" % a.settle, p.pid)
        run_noop(a.build, code_root, "127.0.0.1:%d" % port)
        time.sleep(1.0)
        report("idle after one no-op task:", p.pid)
    finally:
        p.terminate()
        try:
            p.wait(20)
        except subprocess.TimeoutExpired:
            p.kill()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()

"""The per-task file system path (issue 12): a task's scratch directory is made only
when its function uses ctx.scratch_dir (executor-protocol.md §5.1), and removed only
then."""

import os

from conftest import output_json, pb
from etcd_fixture import wait_for


def run(w, task_id, function, args=None, timeout=60):
    w.submit(task_id, function, args or {})
    r = w.wait_terminal(task_id, timeout=timeout)
    assert r.state == pb.TASK_STATE_SUCCEEDED, (r.failure_code, r.failure_message)
    return r


def test_a_noop_task_makes_no_scratch_directory(worker_factory, tmp_path):
    """Before, every task's activation made (and its end removed) a directory under the
    scratch root, which changed the root's mtime; now nothing touches the root."""
    root = tmp_path / "scratch"
    root.mkdir()
    w = worker_factory("--scratch-root", str(root), executors=1)
    w.wait_serving()
    w.deploy("noop")
    run(w, "warm", "noop")
    before = os.stat(str(root)).st_mtime_ns
    os.utime(str(root), ns=(before - 10**9, before - 10**9))  # any change shows
    before = os.stat(str(root)).st_mtime_ns
    for i in range(20):
        run(w, "noop-%d" % i, "noop")
    assert os.listdir(str(root)) == []
    assert os.stat(str(root)).st_mtime_ns == before, "a no-op task created or removed an entry"


# The parent writes a file into its scratch directory from a thread it starts, then a
# child call (same task, maybe another executor) reads it back: one directory per task.
SHARED = ("import os, threading\n"
          "def handler(args, ctx):\n"
          "    if args.get('child'):\n"
          "        with open(os.path.join(ctx.scratch_dir, 'note')) as f:\n"
          "            return {'read': f.read(), 'dir': ctx.scratch_dir}\n"
          "    got = {}\n"
          "    def work():\n"
          "        got['dir'] = ctx.scratch_dir\n"
          "        with open(os.path.join(got['dir'], 'note'), 'w') as f:\n"
          "            f.write(args['text'])\n"
          "    t = threading.Thread(target=work)\n"
          "    t.start()\n"
          "    t.join()\n"
          "    child = ctx.call(None, {'child': True})\n"
          "    return {'dir': got['dir'], 'main_dir': ctx.scratch_dir, 'child': child}\n")


def test_scratch_dir_made_on_first_use_from_a_thread_and_shared_by_the_tasks_calls(
        worker_factory, tmp_path):
    root = tmp_path / "scratch"
    root.mkdir()
    w = worker_factory("--scratch-root", str(root), executors=2)
    w.wait_serving()
    w.deploy("shared", SHARED)
    out = output_json(run(w, "shared-1", "shared", {"text": "hello"}))
    assert out["dir"] == out["main_dir"] == out["child"]["dir"]
    assert out["child"]["read"] == "hello"
    assert os.path.dirname(out["dir"]) == str(root)
    # made for the task, so removed with it
    assert wait_for(lambda: os.listdir(str(root)) == [], timeout=10), os.listdir(str(root))


# ---- CURRENT from memory (wk_code_cache.c) ------------------------------------------

def versioned(v):
    return ("V = %d\n"
            "def handler(args, ctx):\n"
            "    return {'v': V, 'epoch': ctx.epoch}\n" % v)


def test_a_task_submitted_right_after_a_deploy_runs_the_new_epoch(worker_factory):
    """The worker caches CURRENT per function; a deploy (or rollback) must reach the
    very next task, with no wait: every submit follows its deploy at once."""
    w = worker_factory(executors=1)
    w.wait_serving()
    w.deploy("ver", versioned(1))
    for i in range(3):  # cached now: these are hits
        assert output_json(run(w, "ver-warm-%d" % i, "ver")) == {"v": 1, "epoch": 1}
    for v in range(2, 7):
        w.deploy("ver", versioned(v))
        out = output_json(run(w, "ver-%d" % v, "ver"))
        assert out == {"v": v, "epoch": v}, out
    # a rollback with workerctl reaches the next task too
    import subprocess
    from conftest import WORKERCTL
    subprocess.run([WORKERCTL, "rollback", "--code-root", w.code_root, "ver"], check=True,
                   capture_output=True)
    assert output_json(run(w, "ver-back", "ver")) == {"v": 5, "epoch": 5}


# ---- no filesystem system call on a no-op task's path --------------------------------

def strace_ok():
    import shutil
    import subprocess
    if not shutil.which("strace"):
        return False
    r = subprocess.run(["strace", "-qq", "-e", "trace=none", "true"], capture_output=True)
    return r.returncode == 0


def file_syscalls(path):
    """[(syscall, line)] of a strace -f -o file (each line "PID syscall(args) = rc"). A call
    another thread interrupted is written in two parts, "PID name(args <unfinished ...>" and
    later "PID <... name resumed>rest"; the parts are joined into one line, so every call is
    judged on its whole arguments (the AT_EMPTY_PATH flag of an fstat of an open descriptor
    may sit in either part)."""
    import re
    calls, pending = [], {}
    with open(path) as f:
        for line in f:
            line = line.rstrip("\n")
            m = re.match(r"^(\d+)\s+<\.\.\. ([a-z0-9_]+) resumed>(.*)$", line)
            if m:
                head = pending.pop(m.group(1), None)
                if head is None:
                    head = "%s %s(?" % (m.group(1), m.group(2))
                line = head + m.group(3)
            elif line.endswith("<unfinished ...>"):
                pid = line.split(None, 1)[0]
                pending[pid] = line[:-len("<unfinished ...>")].rstrip()
                continue
            m = re.match(r"^\d+\s+([a-z0-9_]+)\(", line)
            if m:
                calls.append((m.group(1), line))
    calls.extend((re.match(r"^\d+\s+([a-z0-9_]+)", l).group(1), l) for l in pending.values())
    return calls


def test_noop_tasks_make_no_filesystem_call_in_the_worker(worker_factory, tmp_path):
    """strace -f attached to the warmed-up worker (all its threads; the executors started
    before are not followed) while no-op tasks run: no mkdir/rmdir/unlink/open/stat of any
    file. Periodic work of the worker (reading /proc for memory figures and executor
    liveness) is not the task path and is left out by its /proc paths. Before, every task
    made and removed a scratch directory, read the code store's CURRENT and ran a prune
    pass (lock file, directory scan)."""
    import signal
    import subprocess
    import time
    assert strace_ok(), "strace cannot attach here (scripts/deps.sh installs it; ptrace must be allowed)"
    w = worker_factory(executors=1)
    w.wait_serving()
    w.deploy("noop")
    for i in range(5):  # warm up: the cache holds CURRENT, the executor loaded the code
        run(w, "warm-%d" % i, "noop")
    out = str(tmp_path / "strace.txt")
    tracer = subprocess.Popen(["strace", "-f", "-qq", "-e", "trace=%file", "-o", out,
                               "-p", str(w.proc.pid)], stderr=subprocess.PIPE)
    try:
        time.sleep(1.0)  # attached to every thread
        n = 50
        for i in range(n):
            run(w, "noop-%d" % i, "noop")
        time.sleep(0.3)
    finally:
        tracer.send_signal(signal.SIGINT)
        tracer.wait(10)
    calls = file_syscalls(out)
    # left out: /proc (the pool's periodic scan of processes, memory figures) and fstat
    # of an open descriptor (AT_EMPTY_PATH: no path is looked up; gRPC's and opendir's)
    on_path = [(name, line) for name, line in calls
               if '"/proc"' not in line and '"/proc/' not in line and "AT_EMPTY_PATH" not in line]
    # left out once each: abseil's lazy, once-per-process look at the machine, made the
    # first time one of gRPC's absl::Mutex is contended, whenever load makes that happen:
    # it counts the CPUs (Mutex::Lock -> NumCPUs -> get_nprocs reads
    # /sys/devices/system/cpu/online; seen on gRPC's event_engine thread) and reads the
    # nominal CPU frequency for its cycle clock (absl/base/internal/sysinfo.cc, in
    # libabsl_base: /sys/devices/system/cpu/cpu0/tsc_freq_khz; seen once under ASan). A
    # read per task would show here 50 times.
    for path in ("/sys/devices/system/cpu/online", "/sys/devices/system/cpu/cpu0/tsc_freq_khz"):
        once = [c for c in on_path if '"%s"' % path in c[1]]
        if len(once) == 1:
            on_path.remove(once[0])
    assert on_path == [], "filesystem calls while %d no-op tasks ran:\n%s" % (
        n, "\n".join(line for _, line in on_path[:40]))

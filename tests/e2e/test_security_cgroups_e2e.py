"""End-to-end: per-executor control groups bound what a function can take (memory,
processes), an OOM kill is the call's MemoryLimit error, and the worker stops admitting
new tasks under memory pressure (issue 11, section 3; docs/security.md).

These tests need a host that lets the worker create control groups (root with cgroup v1
memory + pids, or a delegated cgroup v2 group): on a host without them they FAIL (the
worker refuses to start with a limit it cannot enforce), they never skip."""

import errno
import os
import re
import subprocess
import time

import grpc

from conftest import WORKER, output_json, pb

MIB = 1024 * 1024

HOG = ("def handler(args, ctx):\n"
       "    chunks = []\n"
       "    for _ in range(args['mib']):\n"
       "        chunks.append(bytearray(b'x') * (1024 * 1024))  # touched: really resident\n"
       "    return len(chunks)\n")

FORK_BOMB = ("import errno, os, time\n"
             "def handler(args, ctx):\n"
             "    pids, failures, codes = [], 0, set()\n"
             "    for _ in range(args['forks']):\n"
             "        try:\n"
             "            pid = os.fork()\n"
             "        except OSError as e:\n"
             "            failures += 1\n"
             "            codes.add(e.errno)\n"
             "            continue\n"
             "        if pid == 0:\n"
             "            time.sleep(300)\n"
             "            os._exit(0)\n"
             "        pids.append(pid)\n"
             "    return {'forked': len(pids), 'failed': failures, 'errnos': sorted(codes),\n"
             "            'pids': pids}\n")

ECHO = "def handler(args, ctx):\n    return args\n"


def group_dirs(w):
    """The worker's control-group directories, from its start-up line."""
    lines = w.events("executor_cgroups")
    assert lines, "no executor_cgroups line: %s" % w.logs[-10:]
    mech = lines[0]["mechanism"]
    assert mech.startswith("cgroup v"), "control groups are not in use: %s" % mech
    return [d for d in re.findall(r"(/[^\s,()]+)", mech) if d.startswith("/")]


def executor_groups(w):
    found = []
    for d in group_dirs(w):
        found += [os.path.join(d, e) for e in os.listdir(d) if re.fullmatch(r"e\d+", e)]
    return found


def alive(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().split(") ")[-1][0] != "Z"
    except FileNotFoundError:
        return False


def test_the_start_line_names_the_mechanism_and_each_executor_has_its_group(worker_factory):
    w = worker_factory("--executor-memory-max", "96MiB", "--executor-pids-max", "64",
                       "--executors", "2")
    w.wait_serving()
    dirs = group_dirs(w)
    groups = executor_groups(w)
    assert groups, "no executor group under %s" % dirs
    for g in groups:
        with open(os.path.join(g, "cgroup.procs")) as f:
            procs = [int(p) for p in f.read().split()]
        if os.path.exists(os.path.join(g, "memory.limit_in_bytes")):
            with open(os.path.join(g, "memory.limit_in_bytes")) as f:
                assert int(f.read()) == 96 * MIB
        if os.path.exists(os.path.join(g, "pids.max")):
            with open(os.path.join(g, "pids.max")) as f:
                assert f.read().strip() == "64"
        assert len(procs) == 1, (g, procs)  # its executor, moved in before any call
    w.stop()
    for d in dirs:
        assert not os.path.exists(d), "the worker's group %s outlived it" % d


def test_a_function_over_executor_memory_max_gets_memory_limit(worker_factory):
    w = worker_factory("--executor-memory-max", "128MiB", "--executors", "2")
    w.wait_serving()
    w.deploy("hog", HOG)
    w.deploy("echo", ECHO)
    w.submit("t-ok-before", "echo", {"n": 1})
    w.submit("t-hog", "hog", {"mib": 1024})
    r = w.wait_terminal("t-hog", timeout=60)
    assert r.state == pb.TASK_STATE_FAILED
    assert r.failure_code == pb.FAILURE_CODE_CALL_FAILED
    err = r.outputs[0].error
    assert err.type == "MemoryLimit", (err, r.failure_message)
    assert "executor_memory_max" in err.message and str(128 * MIB) in err.message, err.message
    assert "MemoryLimit" in r.failure_message
    assert w.events("executor_memory_limit"), w.logs[-10:]
    # the worker and the other tasks are fine
    assert w.wait_terminal("t-ok-before").state == pb.TASK_STATE_SUCCEEDED
    for i in range(6):
        w.submit("t-ok-%d" % i, "echo", {"i": i})
    for i in range(6):
        r = w.wait_terminal("t-ok-%d" % i)
        assert r.state == pb.TASK_STATE_SUCCEEDED, r.failure_message
        assert output_json(r) == {"i": i}
    # a retried call meets the same limit: still MemoryLimit, the worker still serves
    w.submit("t-hog-retried", "hog", {"mib": 1024},
             call_retry_policy=pb.CallRetryPolicy(max_attempts=2, retry_on_executor_lost=True))
    r = w.wait_terminal("t-hog-retried", timeout=60)
    assert r.state == pb.TASK_STATE_FAILED and r.outputs[0].error.type == "MemoryLimit", r
    # a function under the limit runs
    w.submit("t-small", "hog", {"mib": 16})
    r = w.wait_terminal("t-small", timeout=60)
    assert r.state == pb.TASK_STATE_SUCCEEDED, r.failure_message
    # the killed executors' groups are gone: one group per running executor
    deadline = time.time() + 10
    while time.time() < deadline and len(executor_groups(w)) > 2:
        time.sleep(0.1)
    assert len(executor_groups(w)) <= 2, executor_groups(w)


def test_a_fork_bomb_is_bounded_by_executor_pids_max(worker_factory):
    w = worker_factory("--executor-pids-max", "50", "--executors", "1")
    w.wait_serving()
    w.deploy("bomb", FORK_BOMB)
    w.deploy("echo", ECHO)
    w.submit("t-bomb", "bomb", {"forks": 10000})
    r = w.wait_terminal("t-bomb", timeout=120)
    assert r.state == pb.TASK_STATE_SUCCEEDED, r.failure_message
    got = output_json(r)
    assert 0 < got["forked"] < 50, got["forked"]
    assert got["failed"] == 10000 - got["forked"]
    assert got["errnos"] == [errno.EAGAIN], got["errnos"]
    # the control group refused them (not RLIMIT_NPROC, which root's executors ignore)
    refused = 0
    for g in executor_groups(w):
        if os.path.exists(os.path.join(g, "pids.events")):
            with open(os.path.join(g, "pids.events")) as f:
                refused += int(re.search(r"max (\d+)", f.read()).group(1))
    assert refused > 0, "no fork was refused by pids.max"
    # the worker still serves
    w.submit("t-after", "echo", {"x": 1})
    assert w.wait_terminal("t-after").state == pb.TASK_STATE_SUCCEEDED
    dirs = group_dirs(w)
    assert w.stop() == 0
    deadline = time.time() + 10
    while time.time() < deadline and any(alive(p) for p in got["pids"]):
        time.sleep(0.1)
    assert not [p for p in got["pids"] if alive(p)], "the bomb's processes outlived the worker"
    for d in dirs:
        assert not os.path.exists(d), d


def test_stale_groups_of_a_dead_worker_are_removed_at_start(worker_factory):
    w = worker_factory("--executor-memory-max", "64MiB", "--executor-pids-max", "64")
    w.wait_serving()
    parents = [os.path.dirname(d) for d in group_dirs(w)]
    assert w.stop() == 0
    # what a worker that crashed leaves: its directory, a group, a process inside
    stale = [os.path.join(p, "wk-999999999-1") for p in parents]
    sleeper = subprocess.Popen(["sleep", "300"])
    try:
        for d in stale:
            os.makedirs(os.path.join(d, "e1"))
            with open(os.path.join(d, "e1", "cgroup.procs"), "w") as f:
                f.write(str(sleeper.pid))
        w2 = worker_factory("--executor-memory-max", "64MiB", "--executor-pids-max", "64")
        w2.wait_serving()
        for d in stale:
            assert not os.path.exists(d), "stale group %s left in place" % d
        assert sleeper.wait(10) == -9  # what was left in it was killed
    finally:
        if sleeper.poll() is None:
            sleeper.kill()
            sleeper.wait()
        for d in stale:
            for sub in (os.path.join(d, "e1"), d):
                if os.path.exists(sub):
                    os.rmdir(sub)


def test_a_limit_the_host_cannot_enforce_is_a_start_up_error(tmp_path):
    # a host without control groups: the worker in a mount namespace with none mounted
    code = tmp_path / "code"
    code.mkdir()
    script = ("umount -l /sys/fs/cgroup 2>/dev/null; "
              "for m in $(awk '$3 ~ /^cgroup/ {print $2}' /proc/mounts); do umount -l $m; done; "
              'exec "$@"')
    p = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", script,
                        "sh", WORKER, "--listen", "127.0.0.1:0", "--code-root", str(code),
                        "--executor-memory-max", "64MiB"],
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 2, (p.returncode, p.stderr[-2000:])
    assert "executor_memory_max" in p.stderr and "control groups" in p.stderr, p.stderr[-2000:]
    # without a limit the same host is fine, and the start line says nothing is in use
    p = subprocess.Popen(["unshare", "--mount", "--propagation", "private", "sh", "-c", script,
                          "sh", WORKER, "--listen", "127.0.0.1:0", "--code-root", str(code)],
                         stderr=subprocess.PIPE, text=True)
    try:
        line = ""
        deadline = time.time() + 20
        while time.time() < deadline and "executor_cgroups" not in line:
            line = p.stderr.readline()
        assert '"mechanism":"none: executor_memory_max and executor_pids_max are not set"' in line
    finally:
        p.terminate()
        p.wait(30)


def test_memory_pressure_pauses_admission(worker_factory):
    with open("/proc/meminfo") as f:
        total = int(re.search(r"MemTotal:\s+(\d+) kB", f.read()).group(1)) * 1024
    # a floor above all the memory there is: always under pressure
    w = worker_factory("--admission-memory-floor", "%dMiB" % (total // MIB + 1024))
    w.wait_serving()
    w.deploy("echo", ECHO)
    deadline = time.time() + 10
    while time.time() < deadline and not w.events("admission_paused"):
        time.sleep(0.05)
    assert w.events("admission_paused"), w.logs[-10:]
    for call in (lambda: w.stub.RequestTaskSlot(pb.RequestTaskSlotRequest(task_id="t-p1"),
                                                timeout=10),
                 lambda: w.submit("t-p2", "echo", {})):
        try:
            call()
            raise AssertionError("admitted under memory pressure")
        except grpc.RpcError as e:
            assert e.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, e
            assert "memory" in e.details() and "admission_memory_floor" in e.details(), e.details()
    # a percentage floor of the same kind, and floor 0: normal
    w2 = worker_factory("--admission-memory-floor", "0")
    w2.wait_serving()
    w2.deploy("echo", ECHO)
    w2.submit("t-n", "echo", {"a": 1})
    assert w2.wait_terminal("t-n").state == pb.TASK_STATE_SUCCEEDED
    assert not w2.events("admission_paused")


def test_a_bad_memory_floor_is_refused(tmp_path):
    code = tmp_path / "code"
    code.mkdir()
    for bad in ("100%", "0%", "ten", "5%%"):
        p = subprocess.run([WORKER, "--listen", "127.0.0.1:0", "--code-root", str(code),
                            "--admission-memory-floor", bad],
                           capture_output=True, text=True, timeout=30)
        assert p.returncode == 2 and "admission_memory_floor" in p.stderr, (bad, p.stderr)

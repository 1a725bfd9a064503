"""End-to-end attacks on the executors' processes (issue 11: "what a function starts ends
with it", executor_user, non-dumpable executors, the poison pill). See docs/security.md.

Most attacks need the worker to run as root (its executors then run as `nobody`), as
the tests do here; without root they are skipped where root is what they test."""

import json
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time

import pytest

from conftest import WORKER, Worker, pb


def need_root():
    if os.geteuid() != 0:
        pytest.skip("executor_user switches users only under a root worker")


@pytest.fixture
def open_tmp():
    """A directory `nobody` can read (pytest's own are root's, 0700)."""
    d = tempfile.mkdtemp(prefix="wk-procs-")
    os.chmod(d, 0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def start(tmp, *extra, executors=2):
    """A worker with the default executor_user (nobody under root)."""
    w = Worker(os.path.join(tmp, "w"), extra_args=("--executor-user", "") + extra,
               executors=executors)
    os.chmod(w.tmp, 0o755)
    os.chmod(w.code_root, 0o755)
    return w


def run(w, task_id, function, args=None, timeout=60, **kw):
    w.submit(task_id, function, args or {}, **kw)
    return w.wait_terminal(task_id, timeout)


def output(r):
    assert r.state == pb.TASK_STATE_SUCCEEDED, r
    return json.loads(r.outputs[0].value)


WHO = ("import os\n"
       "def handler(args, ctx):\n"
       "    out = {'uid': os.getuid(), 'euid': os.geteuid(), 'gid': os.getgid(),\n"
       "           'groups': os.getgroups()}\n"
       "    try:\n"
       "        os.kill(args['worker'], 0)\n"
       "        out['signal'] = 'delivered'\n"
       "    except OSError as e:\n"
       "        out['signal'] = type(e).__name__\n"
       "    with open(os.path.join(os.environ['HOME'], 'probe'), 'w') as f:\n"
       "        f.write('home is writable')\n"
       "    return out\n")


def test_executors_run_as_nobody_and_cannot_signal_the_worker(open_tmp):
    need_root()
    nobody = pwd.getpwnam("nobody")
    w = start(open_tmp)
    try:
        w.deploy("who", WHO)
        w.wait_serving()
        out = output(run(w, "who", "who", {"worker": w.proc.pid}))
        assert out["uid"] == out["euid"] == nobody.pw_uid, out
        assert out["gid"] == nobody.pw_gid and out["groups"] == [], out
        assert out["signal"] == "PermissionError", out
    finally:
        assert w.stop() == 0, w.logs[-20:]


def test_a_code_root_closed_to_the_executor_user_is_named(tmp_path):
    """pytest's directories are root's, 0700: executors as nobody cannot reach the code
    there, and the call's error says so (not "not a directory")."""
    need_root()
    w = Worker(str(tmp_path / "w"), extra_args=("--executor-user", ""))
    try:
        w.deploy("echo")
        w.wait_serving()
        r = run(w, "t", "echo")
        assert r.state == pb.TASK_STATE_FAILED, r
        err = r.outputs[0].error
        assert err.type == "FunctionLoadError", err
        assert "the executor's user (uid %d) cannot reach it" % pwd.getpwnam("nobody").pw_uid \
            in err.message, err
        assert "executor_user" in err.message, err
    finally:
        assert w.stop() == 0, w.logs[-20:]


def test_an_unprivileged_worker_refuses_another_executor_user(tmp_path):
    if os.geteuid() == 0:
        if not shutil.which("setpriv"):
            pytest.skip("no setpriv to drop to nobody")
        wrapper = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
        other = "root"
    else:
        wrapper, other = [], "root"
    code = tempfile.mkdtemp(prefix="wk-procs-code-")
    os.chmod(code, 0o755)
    try:
        p = subprocess.run(wrapper + [WORKER, "--listen", "127.0.0.1:0", "--code-root", code,
                                      "--executor-user", other],
                           capture_output=True, text=True, timeout=30)
    finally:
        shutil.rmtree(code, ignore_errors=True)
    assert p.returncode == 2, p
    assert "executor_user 'root' (uid 0): the worker runs as uid" in p.stderr, p.stderr
    assert "not root" in p.stderr, p.stderr


# ---- what a function starts ends with it ------------------------------------------

# Starts processes every way a function might, and reports them as (pid, start time):
# a detached session (Popen start_new_session), `sleep 300 &` from a shell (an orphan
# at once), and `forks` bare forks (every other one in a session of its own). With
# `blind`, it first switches off its executor's own clean-up (user code runs inside the
# executor and can patch it), so only the worker's mechanisms remain. `then`: "return",
# "sleep" (until cancelled or killed) or "die" (SIGKILL its own executor).
SPAWNER = r'''
import json, os, subprocess, time

def start_time(pid):
    with open('/proc/%d/stat' % pid) as f:
        return f.read().rsplit(')', 1)[1].split()[19]

def handler(args, ctx):
    if args.get('blind'):
        import wk_executor.runner
        wk_executor.runner.end_descendants = lambda: 0
        try:
            import wk_executor.procs
            wk_executor.procs.end_descendants = lambda: 0
        except ImportError:  # an executor without it
            pass
    pids = [subprocess.Popen(['sleep', '300'], start_new_session=True).pid]
    sh = subprocess.run('sleep 300 >/dev/null 2>&1 & echo $!', shell=True,
                        capture_output=True, text=True)
    pids.append(int(sh.stdout))
    for i in range(args.get('forks', 0)):
        pid = os.fork()
        if pid == 0:
            try:
                if i % 2:
                    os.setsid()
                time.sleep(300)
            finally:
                os._exit(0)
        pids.append(pid)
    procs = [[pid, start_time(pid)] for pid in pids]
    tmp = args['dir'] + '/pids.tmp'
    with open(tmp, 'w') as f:
        json.dump(procs, f)
    os.rename(tmp, args['dir'] + '/pids.json')
    if args['then'] == 'sleep':
        time.sleep(300)
    elif args['then'] == 'die':
        os.kill(os.getpid(), 9)
    return procs
'''


def survivors(procs):
    """The processes of `procs` ([pid, start time]) that still exist (zombies count: an
    unreaped process is not gone)."""
    left = []
    for pid, started in procs:
        try:
            with open("/proc/%d/stat" % pid) as f:
                stat = f.read()
        except OSError:
            continue
        if stat.rsplit(")", 1)[1].split()[19] == started:
            left.append(pid)
    return left


def wait_gone(procs, timeout=15):
    deadline = time.time() + timeout
    while time.time() < deadline:
        left = survivors(procs)
        if not left:
            return []
        time.sleep(0.1)
    return survivors(procs)


def spawn_dir(open_tmp, name):
    d = os.path.join(open_tmp, name)
    os.mkdir(d)
    os.chmod(d, 0o777)
    return d


def read_pids(d, timeout=30):
    path = os.path.join(d, "pids.json")
    deadline = time.time() + timeout
    while not os.path.exists(path):
        assert time.time() < deadline, "the function never reported its processes"
        time.sleep(0.05)
    with open(path) as f:
        return json.load(f)


def test_what_a_call_starts_ends_with_the_call(open_tmp):
    w = start(open_tmp)
    try:
        w.deploy("spawner", SPAWNER)
        w.wait_serving()
        d = spawn_dir(open_tmp, "call")
        procs = output(run(w, "t", "spawner", {"dir": d, "then": "return", "forks": 200}))
        assert len(procs) == 202, procs
        # ended before the RESULT went out: nothing to wait for
        assert survivors(procs) == [], survivors(procs)
        # the executor is still the same and serves the next call
        d2 = spawn_dir(open_tmp, "again")
        assert len(output(run(w, "t2", "spawner", {"dir": d2, "then": "return"}))) == 2
    finally:
        assert w.stop() == 0, w.logs[-20:]


def test_a_cancelled_call_takes_its_processes_along(open_tmp):
    w = start(open_tmp, "--cancel-grace-ms", "300")
    try:
        w.deploy("spawner", SPAWNER)
        w.wait_serving()
        d = spawn_dir(open_tmp, "cancel")
        w.submit("t", "spawner", {"dir": d, "then": "sleep", "forks": 200, "blind": True})
        procs = read_pids(d)
        assert survivors(procs) != []  # the attack is live
        w.stub.CancelTask(pb.CancelTaskRequest(task_id="t", reason="test"), timeout=10)
        assert w.wait_terminal("t").state == pb.TASK_STATE_CANCELLED
        assert wait_gone(procs) == []
    finally:
        assert w.stop() == 0, w.logs[-20:]


def test_a_recycled_executor_takes_its_processes_along(open_tmp):
    w = start(open_tmp, "--max-calls-per-executor", "1")
    try:
        w.deploy("spawner", SPAWNER)
        w.wait_serving()
        d = spawn_dir(open_tmp, "recycle")
        procs = output(run(w, "t", "spawner", {"dir": d, "then": "return", "forks": 200,
                                               "blind": True}))
        assert wait_gone(procs) == []
        assert w.events("executor_recycled"), w.logs[-20:]
    finally:
        assert w.stop() == 0, w.logs[-20:]


def test_an_executor_killed_under_a_call_takes_its_processes_along(open_tmp):
    w = start(open_tmp)
    try:
        w.deploy("spawner", SPAWNER)
        w.wait_serving()
        d = spawn_dir(open_tmp, "die")
        r = run(w, "t", "spawner", {"dir": d, "then": "die", "forks": 200, "blind": True})
        assert r.state == pb.TASK_STATE_FAILED, r
        assert wait_gone(read_pids(d)) == []
    finally:
        assert w.stop() == 0, w.logs[-20:]


def test_worker_sigterm_ends_every_process_functions_started(open_tmp):
    w = start(open_tmp)
    stopped = False
    try:
        w.deploy("spawner", SPAWNER)
        w.wait_serving()
        d = spawn_dir(open_tmp, "term")
        procs = output(run(w, "t", "spawner", {"dir": d, "then": "return", "forks": 200,
                                               "blind": True}))
        # the executor's clean-up was switched off: they run after the call...
        assert survivors(procs) != []
        assert w.stop() == 0, w.logs[-20:]
        stopped = True
        # ...and the worker's exit took them all (it has exited: no waiting)
        assert survivors(procs) == [], survivors(procs)
    finally:
        if not stopped:
            w.kill()


# ---- executors cannot read or trace each other --------------------------------------

SIBLING = r'''
import ctypes, os, time

def sibling():
    me, parent = os.getpid(), os.getppid()
    for _ in range(100):
        for name in os.listdir('/proc'):
            if not name.isdigit() or int(name) == me:
                continue
            try:
                with open('/proc/%s/cmdline' % name, 'rb') as f:
                    cmd = f.read()
                with open('/proc/%s/stat' % name) as f:
                    ppid = int(f.read().rsplit(')', 1)[1].split()[1])
            except OSError:
                continue
            if b'worker_executor.py' in cmd and ppid == parent:
                return int(name)
        time.sleep(0.05)
    raise RuntimeError('no sibling executor')

def handler(args, ctx):
    pid = sibling()
    out = {'sibling': pid, 'same_user': os.stat('/proc/%d' % pid).st_uid == os.getuid()}
    for name in ('environ', 'mem', 'maps'):
        try:
            with open('/proc/%d/%s' % (pid, name), 'rb') as f:
                f.read(4096)
            out[name] = 'read'
        except OSError as e:
            out[name] = type(e).__name__
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.ptrace(16, pid, None, None) == 0:  # PTRACE_ATTACH
        libc.ptrace(17, pid, None, None)       # PTRACE_DETACH: leave it running
        out['ptrace'] = 'attached'
    else:
        out['ptrace'] = os.strerror(ctypes.get_errno())
    return out
'''


def test_an_executor_cannot_read_or_trace_its_sibling(open_tmp):
    w = start(open_tmp)  # two executors, the same user (nobody under root)
    try:
        w.deploy("sibling", SIBLING)
        w.wait_serving()
        out = output(run(w, "t", "sibling"))
        assert out["same_user"], out  # the attack is meaningful: one user for both
        assert out["environ"] == "PermissionError", out
        assert out["mem"] == "PermissionError", out
        assert out["maps"] == "PermissionError", out
        assert out["ptrace"] == os.strerror(1), out  # EPERM
    finally:
        assert w.stop() == 0, w.logs[-20:]


# ---- the poison pill ------------------------------------------------------------------

KILLER = "import os\ndef handler(args, ctx):\n    os.kill(os.getpid(), 9)\n"


def test_a_call_that_kills_its_executor_fails_for_good(tmp_path):
    w = Worker(str(tmp_path / "w"))
    try:
        w.deploy("killer", KILLER)
        w.deploy("echo")
        w.wait_serving()
        policy = pb.CallRetryPolicy(max_attempts=3, retry_on_executor_lost=True)
        r = run(w, "t", "killer", call_retry_policy=policy)
        assert r.state == pb.TASK_STATE_FAILED, r
        assert r.failure_code == pb.FAILURE_CODE_CALL_FAILED, r
        err = r.outputs[0].error
        assert err.type == "ExecutorLost", err
        assert not err.retryable, err  # for good: no client sends it again either
        assert "attempt 3 of 3" in err.message and "fails for good" in err.message, err
        assert "signal 9" in err.message, err
        assert "fails for good" in r.failure_message, r.failure_message
        assert r.statistic.calls_retried == 2, r.statistic
        # three executors died, no more: the worker tried it max_attempts times and stopped
        time.sleep(0.5)
        assert len(w.events("executor_exited")) == 3, w.events("executor_exited")
        # the pool is whole again
        assert run(w, "t2", "echo").state == pb.TASK_STATE_SUCCEEDED
        # without retry_on_executor_lost the loss is a single attempt's, and retryable
        r = run(w, "t3", "killer", call_retry_policy=pb.CallRetryPolicy(max_attempts=3))
        assert r.state == pb.TASK_STATE_FAILED and r.outputs[0].error.retryable, r
    finally:
        assert w.stop() == 0, w.logs[-20:]

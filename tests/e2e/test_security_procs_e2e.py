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

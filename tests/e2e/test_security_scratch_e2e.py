"""End-to-end attacks of docs/security.md, "Tasks do not see each other's files or state"
(issue 11 §5): a task's scratch directory is private and a dead worker's leftovers go
away at the next start; with executor_isolation=function a function's globals, hooks
and threads never see another function's calls."""

import os
import shutil
import stat
import tempfile
import time

import pytest

from conftest import Worker, output_json, pb
from etcd_fixture import wait_for


# Installs, on its first call, a profiler and a wrapped json.loads that keep every
# argument any later call in this executor is given; any call returns what was kept.
SPY = (
    "import builtins, json, os, sys, threading\n"
    "def _keep(x):\n"
    "    builtins._wk_seen = getattr(builtins, '_wk_seen', []) + [repr(x)[:200]]\n"
    "def _prof(frame, event, arg):\n"
    "    if event == 'call' and frame.f_code.co_name == 'handler':\n"
    "        _keep(frame.f_locals.get('args'))\n"
    "def handler(args, ctx):\n"
    "    if not getattr(builtins, '_wk_spy', False):\n"
    "        builtins._wk_spy = True\n"
    "        sys.setprofile(_prof)\n"
    "        threading.setprofile(_prof)\n"
    "        real = json.loads\n"
    "        json.loads = lambda s, *a, **k: (_keep(s), real(s, *a, **k))[1]\n"
    "    return {'pid': os.getpid(), 'seen': list(getattr(builtins, '_wk_seen', []))}\n")

VICTIM = ("import os\n"
          "def handler(args, ctx):\n"
          "    return {'pid': os.getpid(), 'got': args['secret']}\n")


def run(w, task_id, function, args):
    w.submit(task_id, function, args)
    r = w.wait_terminal(task_id, timeout=60)
    assert r.state == pb.TASK_STATE_SUCCEEDED, (r.failure_code, r.failure_message)
    return output_json(r)


def spy_then_victims(w, rounds=3):
    """spy installs its hooks, victims run with secrets, spy reports what it saw."""
    w.deploy("spy", SPY)
    w.deploy("victim", VICTIM)
    secrets, spy_pids, victim_pids = [], set(), set()
    for i in range(rounds):
        spy_pids.add(run(w, "spy-%d" % i, "spy", {"i": i})["pid"])
        secret = "victim-secret-%d-%s" % (i, os.urandom(4).hex())
        secrets.append(secret)
        out = run(w, "victim-%d" % i, "victim", {"secret": secret})
        assert out["got"] == secret
        victim_pids.add(out["pid"])
    report = run(w, "spy-report", "spy", {})
    spy_pids.add(report["pid"])
    seen = "\n".join(report["seen"])
    return [s for s in secrets if s in seen], spy_pids, victim_pids


def test_function_isolation_hooks_never_see_another_functions_arguments(worker_factory):
    """One executor at most: every victim call needs the spy's executor recycled first."""
    w = worker_factory("--executor-isolation", "function", "--executors-max", "1", executors=1)
    w.wait_serving()
    stolen, spy_pids, victim_pids = spy_then_victims(w)
    assert stolen == []
    assert not spy_pids & victim_pids, (spy_pids, victim_pids)
    recycled = [e for e in w.events("executor_recycled") if e.get("reason") == "executor_isolation"]
    assert recycled, "the one executor was never recycled between functions"


def test_shared_executors_let_a_hook_capture_another_functions_arguments(worker_factory):
    """executor_isolation=shared (documented): the spy sees every victim's secret."""
    w = worker_factory("--executor-isolation", "shared", "--executors-max", "1", executors=1)
    w.wait_serving()
    stolen, spy_pids, victim_pids = spy_then_victims(w)
    assert len(stolen) == 3, stolen
    assert spy_pids == victim_pids


INTERLEAVED = ("import os, time\n"
               "def handler(args, ctx):\n"
               "    time.sleep(args.get('sleep', 0))\n"
               "    return {'pid': os.getpid(), 'fn': ctx.function}\n")


def test_three_functions_interleaved_on_two_executors_never_share_one(worker_factory):
    w = worker_factory("--executor-isolation", "function", "--executors-max", "2", executors=2)
    w.wait_serving()
    names = ["f0", "f1", "f2"]
    for n in names:
        w.deploy(n, INTERLEAVED)
    for i in range(12):
        n = names[i % 3]
        w.submit("il-%d" % i, n, {"sleep": 0.05 * (i % 2)})
    pids = {}
    for i in range(12):
        r = w.wait_terminal("il-%d" % i, timeout=60)
        assert r.state == pb.TASK_STATE_SUCCEEDED, (r.failure_code, r.failure_message)
        out = output_json(r)
        pids.setdefault(out["fn"], set()).add(out["pid"])
    for a in names:
        for b in names:
            if a < b:
                assert not pids[a] & pids[b], pids


CALLER = ("import os\n"
          "def handler(args, ctx):\n"
          "    child = ctx.call('victim', {'secret': args['secret']})\n"
          "    return {'pid': os.getpid(), 'child_pid': child['pid']}\n")


def test_a_call_waiting_on_another_functions_child_gets_it_run_with_one_executor(worker_factory):
    """executors_max 1, isolation: the parent holds the executor while it waits, so the
    child (another function) needs an executor beyond the maximum; no deadlock."""
    w = worker_factory("--executor-isolation", "function", "--executors-max", "1", executors=1)
    w.wait_serving()
    w.deploy("caller", CALLER)
    w.deploy("victim", VICTIM)
    out = run(w, "nested-1", "caller", {"secret": "s"})
    assert out["pid"] != out["child_pid"]


# ---- scratch directories ------------------------------------------------------------

SCRATCH_INFO = ("import os, stat\n"
                "def handler(args, ctx):\n"
                "    root = os.path.dirname(ctx.scratch_dir)\n"
                "    return {'dir': ctx.scratch_dir, 'mode': stat.S_IMODE(os.stat(ctx.scratch_dir).st_mode),\n"
                "            'root_mode': stat.S_IMODE(os.stat(root).st_mode)}\n")


def test_scratch_dirs_are_0700_under_a_root_no_other_user_can_list(worker_factory, tmp_path):
    w = worker_factory(executors=1)
    w.wait_serving()
    w.deploy("info", SCRATCH_INFO)
    out = run(w, "info-1", "info", {})
    assert out["mode"] == 0o700
    assert out["root_mode"] == 0o711
    name = os.path.basename(out["dir"])
    assert name.startswith("wk-") and ".info-1." in name
    assert len(name.rsplit(".", 1)[1]) == 24  # 96 random bits: not guessable
    # a configured root the worker owns loses its group/other read bits
    root = tmp_path / "root"
    root.mkdir()
    os.chmod(str(root), 0o755)
    w2 = worker_factory("--scratch-root", str(root), executors=1)
    w2.wait_serving()
    assert stat.S_IMODE(os.stat(str(root)).st_mode) == 0o711
    assert w2.events("scratch_root_mode_tightened")


# Holds its task until the file args['release'] exists (or args['seconds'] pass).
HOLD_UNTIL_RELEASED = ("    deadline = time.monotonic() + args['seconds']\n"
                       "    while time.monotonic() < deadline and not os.path.exists(args['release']):\n"
                       "        time.sleep(0.02)\n")

SLEEP_IN_SCRATCH = ("import os, time\n"
                    "def handler(args, ctx):\n"
                    "    with open(os.path.join(ctx.scratch_dir, 'mine'), 'w') as f:\n"
                    "        f.write('x')\n"
                    + HOLD_UNTIL_RELEASED +
                    "    return {}\n")


def tagged(d, pid):
    return sorted(n for n in os.listdir(d) if n.startswith("wk-%x-" % pid))


def test_a_killed_workers_leftovers_are_removed_at_the_next_start(tmp_path):
    """kill -9 leaves the scratch root, the executors' directory and the running task's
    scratch directory (default root under $TMPDIR, and a configured scratch_root); the
    next worker removes them, and leaves a live worker's and foreign entries alone."""
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    shared = tmp_path / "shared"
    shared.mkdir()
    env = dict(os.environ, TMPDIR=str(tmpdir))
    (tmpdir / "wk-scratch-abcdef").mkdir()  # an older worker's name: never guessed at
    (tmpdir / "notes.txt").write_text("")
    workers = []

    def start(name, *extra):
        w = Worker(str(tmp_path / name), extra_args=extra, executors=1, env=env)
        workers.append(w)
        w.wait_serving()
        w.deploy("hold", SLEEP_IN_SCRATCH)
        return w

    try:
        live = start("live", "--scratch-root", str(shared))  # shares both directories
        dead = start("dead")                                 # default root under $TMPDIR
        dead2 = start("dead2", "--scratch-root", str(shared))
        release = str(tmp_path / "release")
        for w, t in ((live, "live-1"), (dead, "dead-1"), (dead2, "dead-2")):
            w.submit(t, "hold", {"seconds": 60, "release": release})
        root = wait_for(lambda: [n for n in tagged(str(tmpdir), dead.proc.pid) if ".scratch." in n])
        assert root, os.listdir(str(tmpdir))
        assert wait_for(lambda: any(".dead-1." in n for n in os.listdir(str(tmpdir / root[0]))),
                        timeout=20)
        assert wait_for(lambda: any(".dead-2." in n for n in tagged(str(shared), dead2.proc.pid)),
                        timeout=20)
        assert wait_for(lambda: any(".live-1." in n for n in tagged(str(shared), live.proc.pid)),
                        timeout=20)
        left = tagged(str(tmpdir), dead.proc.pid)
        assert any(".exec." in n for n in left), left
        live_shared = tagged(str(shared), live.proc.pid)
        live_tmp = tagged(str(tmpdir), live.proc.pid)
        for w in (dead, dead2):
            w.kill()  # SIGKILL: nothing is cleaned up
        assert tagged(str(tmpdir), dead.proc.pid) == left
        assert tagged(str(shared), dead2.proc.pid)
        after = start("after", "--scratch-root", str(shared))
        assert tagged(str(tmpdir), dead.proc.pid) == []
        assert tagged(str(shared), dead2.proc.pid) == []
        removed = after.events("stale_dirs_removed")
        assert sum(e["count"] for e in removed) >= 3, removed
        # the live worker's entries and foreign ones stay; its task still finishes
        assert tagged(str(shared), live.proc.pid) == live_shared
        assert tagged(str(tmpdir), live.proc.pid) == live_tmp
        assert (tmpdir / "wk-scratch-abcdef").is_dir() and (tmpdir / "notes.txt").exists()
        open(release, "w").close()
        r = live.wait_terminal("live-1", timeout=40)
        assert r.state == pb.TASK_STATE_SUCCEEDED, (r.failure_code, r.failure_message)
    finally:
        for w in workers:
            w.kill()


# ---- one task cannot read another's scratch files --------------------------------------

# Writes a secret into its scratch directory, keeps the file open, and waits.
HOLDER = ("import os, time\n"
          "def handler(args, ctx):\n"
          "    f = open(os.path.join(ctx.scratch_dir, 'secret.txt'), 'w')\n"
          "    f.write(args['secret'])\n"
          "    f.flush()\n"
          + HOLD_UNTIL_RELEASED +
          "    f.close()\n"
          "    return {}\n")

# Looks for another task's scratch files every way a function can: listing the scratch
# root, the other task's name without its random part, and every process's open files,
# working directory, environment and command line under /proc.
SNOOPER = (
    "import ctypes, glob, os\n"
    "def handler(args, ctx):\n"
    "    root = os.path.dirname(ctx.scratch_dir)\n"
    "    found, tried = [], {}\n"
    "    def read(path, route):\n"
    "        try:\n"
    "            with open(path) as f:\n"
    "                found.append([route, f.read()])\n"
    "        except OSError as e:\n"
    "            tried[path] = type(e).__name__\n"
    "    try:\n"
    "        for name in os.listdir(root):\n"
    "            read(os.path.join(root, name, 'secret.txt'), 'listdir')\n"
    "    except OSError as e:\n"
    "        tried['listdir'] = type(e).__name__\n"
    "    for path in glob.glob(os.path.join(root, '*' + args['victim'] + '*', 'secret.txt')):\n"
    "        read(path, 'glob')\n"
    "    for pid in os.listdir('/proc'):\n"
    "        if not pid.isdigit() or int(pid) == os.getpid():\n"
    "            continue\n"
    "        for fd in glob.glob('/proc/%s/fd/*' % pid) + ['/proc/%s/cwd' % pid]:\n"
    "            try:\n"
    "                target = os.readlink(fd)\n"
    "            except OSError:\n"
    "                continue\n"
    "            if 'secret.txt' in target or args['victim'] in target:\n"
    "                read(os.path.join(fd, 'secret.txt') if fd.endswith('cwd') else fd, 'proc')\n"
    "        for what in ('environ', 'cmdline'):\n"
    "            try:\n"
    "                with open('/proc/%s/%s' % (pid, what), 'rb') as f:\n"
    "                    if args['victim'].encode() in f.read():\n"
    "                        found.append(['proc', '%s names the victim' % what])\n"
    "            except OSError:\n"
    "                pass\n"
    "    dumpable = ctypes.CDLL(None, use_errno=True).prctl(3, 0, 0, 0, 0)  # PR_GET_DUMPABLE\n"
    "    return {'found': found, 'tried': tried, 'uid': os.getuid(), 'dumpable': dumpable}\n")


def open_dir():
    """A directory executors under another user can read (pytest's own are root's, 0700)."""
    d = tempfile.mkdtemp(prefix="wk-scratch-test-")
    os.chmod(d, 0o755)
    return d


def snoop_while_held(w, secret):
    w.deploy("holder", HOLDER)
    w.deploy("snooper", SNOOPER)
    release = os.path.join(w.tmp, "release-victim")  # a directory the executors can search
    w.submit("victim-task", "holder", {"secret": secret, "seconds": 60, "release": release})
    # the victim's file exists before the snooper looks (its directory is named after it)
    time.sleep(1.5)
    out = run(w, "snooper-task", "snooper", {"victim": "victim-task"})
    open(release, "w").close()
    r = w.wait_terminal("victim-task", timeout=60)
    assert r.state == pb.TASK_STATE_SUCCEEDED, (r.failure_code, r.failure_message)
    return out


def test_a_task_cannot_read_files_another_task_keeps_in_its_scratch_dir():
    """Root worker, executors as `nobody` (executor_user's default): the snooper runs as
    the same executor user as the victim, and finds nothing: the scratch root is not
    listable by it, the directory name holds 96 random bits, and executors are
    non-dumpable, so /proc shows no other executor's open files (before they were, the
    victim's open file showed in its /proc/<pid>/fd)."""
    if os.geteuid() != 0:
        pytest.skip("executors run as another user only under a root worker")
    d = open_dir()
    try:
        w = Worker(os.path.join(d, "w"), extra_args=("--executor-user", "", "--executors-max", "2"),
                   executors=2)
        os.chmod(w.tmp, 0o755)
        os.chmod(w.code_root, 0o755)
        try:
            w.wait_serving()
            secret = "scratch-secret-" + os.urandom(8).hex()
            out = snoop_while_held(w, secret)
            assert out["uid"] == 65534, out
            assert out["tried"].get("listdir") == "PermissionError", out
            # neither listing nor guessing the name reaches the victim's directory, and
            # /proc of a non-dumpable executor (its open files) is root's
            assert out["dumpable"] == 0, out
            assert out["found"] == [], out
        finally:
            w.stop()
    finally:
        shutil.rmtree(d, ignore_errors=True)


def test_without_another_executor_user_a_task_reads_another_tasks_scratch_files():
    """Documented limit: executors that run as the worker's own user (a worker started as
    `nobody`, as here) own the scratch root; a function lists it and reads any task's
    files. Only executor_user gives tasks privacy from each other."""
    if os.geteuid() == 0 and not shutil.which("setpriv"):
        pytest.skip("running as root without setpriv to drop to nobody")
    wrapper = ("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups") \
        if os.geteuid() == 0 else ()
    d = open_dir()
    os.chmod(d, 0o777)
    try:
        env = dict(os.environ, TMPDIR=d)
        w = Worker(os.path.join(d, "w"), extra_args=("--executors-max", "2"), executors=2,
                   wrapper=wrapper, env=env)
        os.chmod(w.code_root, 0o777)
        try:
            w.wait_serving()
            secret = "scratch-secret-" + os.urandom(8).hex()
            out = snoop_while_held(w, secret)
            assert ["listdir", secret] in out["found"], out
        finally:
            w.stop()
    finally:
        shutil.rmtree(d, ignore_errors=True)

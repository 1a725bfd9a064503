"""End-to-end code epochs: deploy checks the code before CURRENT moves, records a
digest and reuses the epoch of identical content, rollback moves CURRENT back, and the
worker removes old epochs beyond code_epochs_kept once no task (nor any subcall of a
task) pins them."""

import json
import os
import subprocess
import time

from conftest import WORKERCTL, pb

VERSION = "def handler(args, ctx):\n    return {'version': %d, 'epoch': ctx.epoch}\n"
# Waits for a file before returning (a task that pins its epoch while the test deploys).
WAITER = ("import os, time\n"
          "def handler(args, ctx):\n"
          "    open(args['ready'], 'w').close()\n"
          "    deadline = time.time() + 30\n"
          "    while not os.path.exists(args['go']) and time.time() < deadline:\n"
          "        time.sleep(0.02)\n"
          "    return {'epoch': ctx.epoch}\n")
# Calls `leaf` once, waits (in a child of `waiter`) for a file, then calls `leaf` again.
CALLER = ("def handler(args, ctx):\n"
          "    first = ctx.call('leaf', None)\n"
          "    ctx.call('waiter', args)\n"
          "    return [first, ctx.call('leaf', None)]\n")


def ctl(*args, src=None):
    return subprocess.run([WORKERCTL] + list(args), capture_output=True, text=True, timeout=60)


def write_src(tmp_path, name, files):
    src = tmp_path / name
    src.mkdir()
    for rel, text in files.items():
        (src / rel).write_text(text)
    return str(src)


def epochs(code_root, fn):
    out = ctl("epochs", "--json", "--code-root", code_root, fn)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def wait_for(path, timeout=20):
    deadline = time.time() + timeout
    while not os.path.exists(path) and time.time() < deadline:
        time.sleep(0.02)
    assert os.path.exists(path), "never appeared: " + path


def wait_epochs(code_root, fn, want, timeout=20):
    deadline = time.time() + timeout
    while time.time() < deadline:
        got = epochs(code_root, fn)["epochs"]
        if got == want:
            return
        time.sleep(0.05)
    assert got == want, "epochs of %s: %s, expected %s" % (fn, got, want)


def run(w, task_id, fn, args=None):
    w.submit(task_id, fn, args)
    r = w.wait_terminal(task_id, timeout=60)
    assert r.state == pb.TASK_STATE_SUCCEEDED, r.failure_message
    return json.loads(r.outputs[0].value)


def test_deploy_refuses_code_that_does_not_compile_or_import(tmp_path):
    root = str(tmp_path / "code")
    good = write_src(tmp_path, "good", {"main.py": VERSION % 1})
    out = ctl("deploy", "--code-root", root, "fn", good)
    assert out.returncode == 0 and out.stdout == "1\n", out.stderr
    cases = [
        ({"main.py": VERSION % 2, "lib.py": "def broken(:\n"}, "lib.py does not compile"),
        ({"main.py": "import no_such_module_here\n" + VERSION % 2},
         "No module named 'no_such_module_here'"),
        ({"main.py": "raise RuntimeError('config missing')\n"}, "RuntimeError: config missing"),
        ({"main.py": "import sys\nsys.exit(3)\n"}, "SystemExit"),
        ({"main.py": "handler = 42\n"}, "not callable"),
        ({"other.py": VERSION % 2}, "No module named"),  # no main.py: main:handler cannot load
    ]
    for i, (files, why) in enumerate(cases):
        src = write_src(tmp_path, "bad%d" % i, files)
        out = ctl("deploy", "--code-root", root, "fn", src)
        assert out.returncode == 1, (files, out.stdout, out.stderr)
        assert why in out.stderr, (files, out.stderr)
        assert out.stdout == ""
        e = epochs(root, "fn")
        assert e["epochs"] == [1] and e["current"] == 1, e  # CURRENT never moved
    # the entry point to check is a flag; --no-check publishes without one
    src = write_src(tmp_path, "other", {"other.py": VERSION % 3})
    out = ctl("deploy", "--code-root", root, "--entrypoint", "other:handler", "fn", src)
    assert out.returncode == 0 and out.stdout == "2\n", out.stderr
    src = write_src(tmp_path, "unchecked", {"main.py": "def broken(:\n"})
    out = ctl("deploy", "--code-root", root, "--no-check", "fn", src)
    assert out.returncode == 0 and out.stdout == "3\n", out.stderr
    assert not [n for n in os.listdir(os.path.join(root, "fn")) if n.startswith(".staging")]


def test_deploy_check_has_a_timeout_and_uses_the_given_python(tmp_path):
    root = str(tmp_path / "code")
    slow = write_src(tmp_path, "slow", {"main.py": "import time\ntime.sleep(30)\n" + VERSION % 1})
    t0 = time.time()
    out = ctl("deploy", "--code-root", root, "--check-timeout-ms", "700", "fn", slow)
    assert out.returncode == 1 and "did not finish within 700 ms" in out.stderr, out.stderr
    assert time.time() - t0 < 15
    assert epochs(root, "fn")["epochs"] == []
    good = write_src(tmp_path, "good", {"main.py": VERSION % 1})
    out = ctl("deploy", "--code-root", root, "--python", "/bin/false", "fn", good)
    assert out.returncode == 1 and "check exit 1" in out.stderr, out.stderr
    out = ctl("deploy", "--code-root", root, "--python", "/no/such/python", "fn", good)
    assert out.returncode == 1 and "cannot run /no/such/python" in out.stderr, out.stderr


def test_identical_content_reuses_its_epoch_and_digests_are_shown(tmp_path):
    root = str(tmp_path / "code")
    v1 = write_src(tmp_path, "v1", {"main.py": VERSION % 1, "util.py": "X = 1\n"})
    v2 = write_src(tmp_path, "v2", {"main.py": VERSION % 2, "util.py": "X = 1\n"})
    v1_again = write_src(tmp_path, "v1b", {"main.py": VERSION % 1, "util.py": "X = 1\n"})
    first = json.loads(ctl("deploy", "--json", "--code-root", root, "fn", v1).stdout)
    second = json.loads(ctl("deploy", "--json", "--code-root", root, "fn", v2).stdout)
    again = json.loads(ctl("deploy", "--json", "--code-root", root, "fn", v1_again).stdout)
    assert (first["epoch"], second["epoch"], again["epoch"]) == (1, 2, 1)
    assert again["reused"] is True and first["reused"] is False
    assert again["sha256"] == first["sha256"] != second["sha256"]
    assert len(first["sha256"]) == 64
    e = epochs(root, "fn")
    assert e["epochs"] == [1, 2] and e["current"] == 1
    assert e["sha256"] == {"1": first["sha256"], "2": second["sha256"]}
    text = ctl("epochs", "--code-root", root, "fn").stdout
    assert "fn 1 sha256:%s CURRENT" % first["sha256"] in text
    out = ctl("deploy", "--code-root", root, "fn", v2)
    assert out.stdout == "2\n" and "sha256:" + second["sha256"] in out.stderr


def test_rollback_moves_current_back_for_new_tasks(worker_factory, tmp_path):
    w = worker_factory()
    w.wait_serving()
    for v in (1, 2, 3):
        w.deploy("fn", VERSION % v)
    assert run(w, "before", "fn") == {"version": 3, "epoch": 3}
    out = ctl("rollback", "--code-root", w.code_root, "fn")
    assert out.returncode == 0 and out.stdout == "2\n", out.stderr
    assert run(w, "rolled-back", "fn") == {"version": 2, "epoch": 2}
    out = ctl("rollback", "--code-root", w.code_root, "fn", "1")
    assert out.returncode == 0 and out.stdout == "1\n", out.stderr
    assert run(w, "rolled-back-more", "fn") == {"version": 1, "epoch": 1}
    out = ctl("rollback", "--code-root", w.code_root, "fn")
    assert out.returncode == 1 and "no published epoch below CURRENT" in out.stderr
    out = ctl("rollback", "--code-root", w.code_root, "fn", "7")
    assert out.returncode == 1 and "epoch 7 of 'fn' is not published" in out.stderr
    out = ctl("rollback", "--code-root", w.code_root, "fn", "3")
    assert out.returncode == 0 and run(w, "forward", "fn") == {"version": 3, "epoch": 3}


def test_old_epochs_go_once_no_task_pins_them(worker_factory, tmp_path):
    # depth 1: the other task's call never queues behind the waiting one on its executor
    w = worker_factory("--code-epochs-kept", "2", "--pipeline-depth", "1")
    w.wait_serving()
    w.deploy("waiter", WAITER)
    ready, go = str(tmp_path / "ready"), str(tmp_path / "go")
    w.submit("long", "waiter", {"ready": ready, "go": go})
    wait_for(ready)  # the task runs epoch 1 and pins it
    for v in (2, 3, 4, 5):
        w.deploy("waiter", WAITER + "# version %d\n" % v)
    # another task of the function ends: epochs beyond the newest 2 go, but not 1
    done = str(tmp_path / "done")
    open(done, "w").close()
    assert run(w, "quick", "waiter", {"ready": done, "go": done}) == {"epoch": 5}
    wait_epochs(w.code_root, "waiter", [1, 4, 5])
    open(go, "w").close()
    r = w.wait_terminal("long")
    assert r.state == pb.TASK_STATE_SUCCEEDED and json.loads(r.outputs[0].value) == {"epoch": 1}
    wait_epochs(w.code_root, "waiter", [4, 5])  # its last pin gone
    assert not os.path.exists(os.path.join(w.code_root, "waiter", "1.sha256"))
    removed = [e for e in w.events("code_epochs_removed") if e["function"] == "waiter"]
    assert sorted(x for e in removed for x in e["epochs"]) == [1, 2, 3]


def test_a_subcall_target_stays_pinned_until_the_task_ends(worker_factory, tmp_path):
    w = worker_factory("--code-epochs-kept", "1", "--pipeline-depth", "1")
    w.wait_serving()
    w.deploy("waiter", WAITER)
    w.deploy("leaf", VERSION % 1)
    w.deploy("caller", CALLER)
    ready, go = str(tmp_path / "ready"), str(tmp_path / "go")
    w.submit("pinning", "caller", {"ready": ready, "go": go})
    wait_for(ready)  # leaf@1 pinned by the task's first subcall
    for v in (2, 3):
        w.deploy("leaf", VERSION % v)
    assert run(w, "leaf-now", "leaf") == {"version": 3, "epoch": 3}
    wait_epochs(w.code_root, "leaf", [1, 3])  # 2 went; 1 stays for the running task
    open(go, "w").close()
    r = w.wait_terminal("pinning")
    assert r.state == pb.TASK_STATE_SUCCEEDED, r.failure_message
    assert json.loads(r.outputs[0].value) == [{"version": 1, "epoch": 1}] * 2
    wait_epochs(w.code_root, "leaf", [3])


def test_zero_keeps_every_epoch(worker_factory):
    w = worker_factory("--code-epochs-kept", "0")
    w.wait_serving()
    for v in range(1, 5):
        w.deploy("fn", VERSION % v)
    assert run(w, "t", "fn")["version"] == 4
    time.sleep(0.5)
    assert epochs(w.code_root, "fn")["epochs"] == [1, 2, 3, 4]


def test_a_deploy_while_the_only_task_runs_prunes_its_epoch_when_it_ends(worker_factory, tmp_path):
    """The worker learns of a deploy from inotify as it happens, not only when the next
    request comes: the task's end, with no request after the deploy, removes the epoch
    it pinned (the prune check at a task's end makes no system call of its own)."""
    w = worker_factory("--code-epochs-kept", "1")
    w.wait_serving()
    w.deploy("waiter", WAITER)
    done = str(tmp_path / "done")
    open(done, "w").close()
    # a first task's end checks the function once (never checked by this worker yet)
    assert run(w, "first", "waiter", {"ready": done, "go": done}) == {"epoch": 1}
    ready, go = str(tmp_path / "ready"), str(tmp_path / "go")
    w.submit("alone", "waiter", {"ready": ready, "go": go})
    wait_for(ready)  # epoch 1 pinned
    w.deploy("waiter", WAITER + "# version 2\n")
    time.sleep(0.5)  # the loop drains inotify on its own, long before the task ends
    open(go, "w").close()
    wait_epochs(w.code_root, "waiter", [2])  # no request since the deploy
    r = w.wait_terminal("alone")
    assert r.state == pb.TASK_STATE_SUCCEEDED and json.loads(r.outputs[0].value) == {"epoch": 1}

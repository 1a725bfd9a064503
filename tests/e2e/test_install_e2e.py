"""`cmake --install`: the installed worker, bundle_worker and workerctl run a task from a
directory outside the source tree, with the executor and Python packages installed
beside them (PREFIX/share/worker/python), not the source tree's."""

import compileall
import json
import os
import shutil
import subprocess

from conftest import BUILD, ROOT, Worker


def _install(prefix):
    # a source tree that has run Python holds __pycache__: none of it is installed
    compileall.compile_dir(os.path.join(ROOT, "python"), quiet=1)
    out = subprocess.run(["cmake", "--install", BUILD, "--prefix", prefix],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


def _children(pid):
    kids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % entry) as f:
                stat = f.read()
            with open("/proc/%s/cmdline" % entry, "rb") as f:
                cmdline = f.read().split(b"\0")
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            kids.append([a.decode() for a in cmdline if a])
    return kids


def test_install_layout(tmp_path):
    prefix = str(tmp_path / "prefix")
    _install(prefix)
    for name in ("worker", "bundle_worker", "workerctl"):
        assert os.access(os.path.join(prefix, "bin", name), os.X_OK), name
    py = os.path.join(prefix, "share", "worker", "python")
    for rel in ("worker_executor.py", "wk_executor/__init__.py", "wk_executor/runner.py",
                "worker/__init__.py"):
        assert os.path.isfile(os.path.join(py, rel)), rel
    stray = [os.path.join(d, n) for d, dirs, files in os.walk(prefix)
             for n in dirs + files if n == "__pycache__" or n.endswith(".pyc")]
    assert stray == []


def test_installed_worker_runs_hello_outside_the_source_tree(tmp_path):
    prefix = str(tmp_path / "prefix")
    _install(prefix)
    py = os.path.join(prefix, "share", "worker", "python")
    away = tmp_path / "elsewhere"
    away.mkdir()
    hello = str(away / "hello")
    shutil.copytree(os.path.join(ROOT, "examples", "hello"), hello)

    for name in ("worker", "bundle_worker"):
        out = subprocess.run([os.path.join(prefix, "bin", name), "--print-config", "--json",
                              "--code-root", str(away)],
                             cwd=str(away), capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
        cfg = json.loads(out.stdout)
        assert cfg["executor_script"]["value"] == os.path.join(py, "worker_executor.py"), name
        assert cfg["python_path"]["value"] == py, name

    w = Worker(str(away / "w"), executors=1, binary=os.path.join(prefix, "bin", "worker"),
               cwd=str(away))
    try:
        w.wait_serving()
        ctl = os.path.join(prefix, "bin", "workerctl")
        dep = subprocess.run([ctl, "deploy", "--code-root", w.code_root, "hello", hello],
                             cwd=str(away), capture_output=True, text=True)
        assert dep.returncode == 0, dep.stderr
        sub = subprocess.run([ctl, "--addr", w.addr, "--json", "submit", "hello",
                              '{"name": "Ada"}', "--task-id", "installed-1", "--watch"],
                             cwd=str(away), capture_output=True, text=True, timeout=60)
        assert sub.returncode == 0, sub.stdout + sub.stderr
        assert '"SUCCEEDED"' in sub.stdout, sub.stdout
        assert "Hello, Ada!" in sub.stdout, sub.stdout
        # the executors run the installed executor with the installed packages
        executors = [c for c in _children(w.proc.pid) if any(a.endswith(".py") for a in c)]
        assert executors, _children(w.proc.pid)
        for argv in executors:
            assert os.path.join(py, "worker_executor.py") in argv, argv
    finally:
        rc = w.stop()
    assert rc == 0, w.logs[-20:]

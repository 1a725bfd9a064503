"""The README's quick start works exactly as typed (issue 13 §4): the first ```sh block
under "## Using it" is taken from README.md and run by bash -e in a copy of the parts of
the tree it names (examples/, and build/release as a link to this build), so the README
and this test cannot drift apart. The one change: the port 7070 becomes a free one."""

import os
import re
import shutil
import socket
import subprocess
import time

from conftest import BUILD, ROOT


def quickstart():
    text = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    section = text.index("\n## Using it\n")
    m = re.compile(r"```sh\n(.*?)```", re.S).search(text, section)
    assert m, "no ```sh block under ## Using it"
    return m.group(1)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def worker_pids(port):
    out = subprocess.run(["pgrep", "-f", "worker --listen 127.0.0.1:%d " % port],
                         capture_output=True, text=True)
    return [int(p) for p in out.stdout.split()]


def test_readme_quickstart_runs_as_typed(tmp_path):
    script = quickstart()
    assert "7070" in script and "workerctl deploy" in script and "worker --listen" in script
    # Deploy comes before the worker's start: the code root exists when it starts.
    assert script.index("workerctl deploy") < script.index("worker --listen")
    port = free_port()
    script = script.replace("127.0.0.1:7070", "127.0.0.1:%d" % port)
    assert "7070" not in script
    work = tmp_path / "clone"
    work.mkdir()
    shutil.copytree(os.path.join(ROOT, "examples"), work / "examples")
    (work / "build").mkdir()
    os.symlink(BUILD, work / "build" / "release")
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("WORKERCTL_") and not k.startswith("WORKER_")}
    if os.geteuid() == 0:
        # Run as root, the worker would start executors as nobody, who cannot enter
        # pytest's 0700 temporary directory (conftest's Worker does the same).
        env["WORKER_EXECUTOR_USER"] = "root"
    try:
        out = subprocess.run(["bash", "-e", "-c", script], cwd=work, env=env,
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, (out.returncode, out.stdout, out.stderr,
                                     (work / "worker.log").read_text()[-3000:])
        lines = out.stdout.splitlines()
        assert lines[0] == "1", out.stdout  # the epoch deploy printed
        assert "SERVING" in lines
        assert "task hello-1 SUCCEEDED epoch 1" in out.stdout
        assert '"greeting":"Hello, Ada!"' in out.stdout
        assert "TERMINAL task hello-1 SUCCEEDED" in out.stdout
        assert "task hello-2 CANCELLED" in out.stdout
        assert (work / "code" / "hello" / "1").is_dir()
        # `kill %1` stopped the worker: it drains and exits.
        deadline = time.time() + 30
        while worker_pids(port) and time.time() < deadline:
            time.sleep(0.1)
        assert not worker_pids(port)
        assert "worker_stopping" in (work / "worker.log").read_text()
    finally:
        for pid in worker_pids(port):
            os.kill(pid, 9)

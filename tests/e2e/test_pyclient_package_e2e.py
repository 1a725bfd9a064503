"""worker_client as a user gets it: `pip install ./python/worker_client` into a fresh
virtual environment (Debian's grpcio and protobuf through --system-site-packages, no
index: nothing is downloaded), then the README's example script, run from outside the
source tree against a real worker running examples/hello."""

import os
import shutil
import subprocess

from conftest import ROOT

EXAMPLE = os.path.join(ROOT, "examples", "client_quickstart.py")


def test_the_readme_quotes_the_example():
    readme = open(os.path.join(ROOT, "README.md")).read()
    section = readme.split("### From Python: worker_client", 1)[1]
    quoted = section.split("```python\n", 1)[1].split("```", 1)[0]
    example = [ln.strip() for ln in open(EXAMPLE).read().splitlines()]
    at = 0
    for line in quoted.splitlines():  # every quoted line, in order, is the example's
        line = line.strip()
        assert line in example[at:], "README line not in the example (in order): %r" % line
        at = example.index(line, at) + 1 if line else at


def test_pip_install_and_the_readme_example(worker_factory, tmp_path):
    # a copy: pip builds in the source directory, which must stay clean
    src = tmp_path / "worker_client"
    shutil.copytree(os.path.join(ROOT, "python", "worker_client"), src,
                    ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    venv = tmp_path / "venv"
    subprocess.run(["/usr/bin/python3", "-m", "venv", "--system-site-packages", str(venv)],
                   check=True)
    py = str(venv / "bin" / "python")
    out = subprocess.run([py, "-m", "pip", "install", "--no-index", "--no-build-isolation", str(src)],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    where = subprocess.run([py, "-c", "import worker_client, worker_client._proto.worker_pb2 as p; "
                            "print(worker_client.__file__)"], capture_output=True, text=True,
                           cwd=str(tmp_path), check=True).stdout
    assert where.startswith(str(venv)), where

    w = worker_factory()
    w.wait_serving()
    w.deploy("hello", open(os.path.join(ROOT, "examples", "hello", "main.py")).read())
    env = dict(os.environ, PYTHONPATH="")
    run = subprocess.run([py, EXAMPLE, w.addr], capture_output=True, text=True, timeout=300,
                         cwd=str(tmp_path), env=env)
    assert run.returncode == 0, run.stdout + run.stderr
    lines = run.stdout.splitlines()
    assert lines[0] == "Hello, Ada!"
    assert sorted(lines[1:4]) == ["Barbara -> Hello, Barbara!", "Edsger -> Hello, Edsger!",
                                  "Grace -> Hello, Grace!"]
    assert lines[4] == "['Hello, Grace!', 'Hello, Edsger!', 'Hello, Barbara!']"
    assert lines[5] == "failed as expected: ACTIVATION_FAILED"
    assert "3/3" in run.stderr  # the progress bar (tqdm's or the plain one) on stderr
    # and with the address from $WORKERCTL_ADDR, as workerctl takes it
    env["WORKERCTL_ADDR"] = w.addr
    run = subprocess.run([py, EXAMPLE], capture_output=True, text=True, timeout=300,
                         cwd=str(tmp_path), env=env)
    assert run.returncode == 0 and run.stdout.startswith("Hello, Ada!\n"), run.stderr

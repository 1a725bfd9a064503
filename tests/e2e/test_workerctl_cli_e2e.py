"""workerctl made pleasant (issue 13 §4): --version on every program, --call-timeout-ms,
the one rule for the target of every command, and big results on a terminal.

Real worker processes (conftest's Worker), a real etcd (etcd_fixture) where the rule
reaches for it; workerctl is run as a subprocess, on a pseudo-terminal where what a
person sees is tested."""

import json
import os
import re
import shutil
import subprocess
import tarfile
import io

import pytest

from conftest import BUILD, ROOT, WORKER, WORKERCTL, pb

BUNDLE_WORKER = os.path.join(BUILD, "bundle_worker")


def ctl(*args, env=None, check=None, timeout=60, input=None):
    """Runs workerctl with none of the WORKERCTL_* target variables (nor proxies) from
    the test's environment, plus `env`."""
    e = {k: v for k, v in os.environ.items()
         if k not in ("WORKERCTL_ADDR", "WORKERCTL_ETCD") and not k.lower().endswith("_proxy")}
    e.update(env or {})
    out = subprocess.run([WORKERCTL] + list(args), capture_output=True, text=True, env=e,
                         timeout=timeout, input=input)
    if check is not None:
        assert out.returncode == check, (out.returncode, out.stdout, out.stderr)
    return out


def git_head():
    out = subprocess.run(["git", "-C", ROOT, "rev-parse", "HEAD"], capture_output=True,
                         text=True)
    return out.stdout.strip() if out.returncode == 0 else None


# ---- --version ------------------------------------------------------------------------


@pytest.mark.parametrize("binary", [WORKER, BUNDLE_WORKER, WORKERCTL])
def test_version_names_the_program_and_the_commit(binary):
    out = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    name = os.path.basename(binary)
    m = re.match(r"^%s (\d+\.\d+\.\d+) \(commit ([0-9a-f]{40}(-dirty)?|unknown)" % name,
                 out.stdout)
    assert m, out.stdout
    head = git_head()
    if head:  # built from this checkout: the commit is its HEAD
        assert m.group(2).startswith(head), (out.stdout, head)
    assert out.stderr == ""


def test_version_from_a_tarball_without_git(tmp_path):
    """`git archive` fills cmake/commit.txt in (export-subst): the build script reads
    the commit from it when there is no .git."""
    head = git_head()
    if not head:
        pytest.skip("not a git checkout")
    tar = subprocess.run(["git", "-C", ROOT, "archive", "HEAD", "cmake/"], capture_output=True,
                         check=True).stdout
    tarfile.open(fileobj=io.BytesIO(tar)).extractall(tmp_path)
    assert not (tmp_path / ".git").exists()
    out_c = tmp_path / "wk_version.c"
    subprocess.run(["cmake", "-DSRC=%s" % tmp_path, "-DOUT=%s" % out_c, "-DVERSION=9.8.7", "-P",
                    str(tmp_path / "cmake" / "version_gen.cmake")], check=True)
    text = out_c.read_text()
    assert 'wk_version[] = "9.8.7"' in text
    assert 'wk_git_commit[] = "%s"' % head in text, text
    # Neither git nor a filled-in commit.txt: "unknown", and the build still works.
    (tmp_path / "cmake" / "commit.txt").write_text("$Format:%H$\n")
    subprocess.run(["cmake", "-DSRC=%s" % tmp_path, "-DOUT=%s" % out_c, "-DVERSION=9.8.7", "-P",
                    str(tmp_path / "cmake" / "version_gen.cmake")], check=True)
    assert 'wk_git_commit[] = "unknown"' in out_c.read_text()


def test_help_names_the_program_and_version():
    out = subprocess.run([BUNDLE_WORKER, "--help"], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0
    assert out.stdout.startswith("usage: bundle_worker ")
    assert "--version" in out.stdout
    assert "--version" in ctl("--help", check=0).stdout


# ---- submit --call-timeout-ms ------------------------------------------------------------


def test_call_timeout_bounds_each_call(worker):
    worker.deploy("sleeper", "import time\n\ndef handler(args, ctx):\n"
                             "    time.sleep(args['s'])\n    return args['s']\n")
    out = ctl("--addr", worker.addr, "--json", "submit", "sleeper", '{"s": 30}',
              "--call-timeout-ms", "300", "--watch", check=1, timeout=60)
    doc = json.loads(out.stdout.strip().splitlines()[-1])
    assert doc["state"] == "FAILED", doc
    assert doc["outputs"][0]["error"]["type"] == "DeadlineExceeded", doc["outputs"][0]
    # Without it the same call finishes.
    out = ctl("--addr", worker.addr, "--json", "submit", "sleeper", '{"s": 0.5}', "--watch",
              check=0)
    assert json.loads(out.stdout.strip().splitlines()[-1])["state"] == "SUCCEEDED"
    ctl("--addr", worker.addr, "submit", "sleeper", "{}", "--call-timeout-ms", "0", check=2)
    ctl("--addr", worker.addr, "submit", "sleeper", "{}", "--call-timeout-ms", "x", check=2)


# ---- health --wait-ms -------------------------------------------------------------------


def test_health_wait_ms_waits_for_a_worker_that_is_not_up(tmp_path):
    import socket as _s
    s = _s.socket()
    s.bind(("127.0.0.1", 0))
    addr = "127.0.0.1:%d" % s.getsockname()[1]
    s.close()
    out = ctl("--addr", addr, "health", "--wait-ms", "600", check=4)
    assert "cannot reach the worker at " + addr in out.stderr
    ctl("--addr", addr, "health", "--wait-ms", "soon", check=2)

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
    if git_head():  # built from this checkout: a commit of it (HEAD when built)
        commit = m.group(2).replace("-dirty", "")
        known = subprocess.run(["git", "-C", ROOT, "cat-file", "-e", commit + "^{commit}"])
        assert known.returncode == 0, (out.stdout, "not a commit of this checkout")
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


# ---- the target rule ----------------------------------------------------------------------
#   --addr, then --etcd/--prefix, then $WORKERCTL_ADDR, then $WORKERCTL_ETCD, then
#   127.0.0.1:7070 (workerctl_target.c)

from etcd_fixture import Etcd, wait_for  # noqa: E402


@pytest.fixture(scope="module")
def etcd():
    e = Etcd()
    yield e
    e.stop()


def dead_addr():
    import socket as _s
    s = _s.socket()
    s.bind(("127.0.0.1", 0))
    addr = "127.0.0.1:%d" % s.getsockname()[1]
    s.close()
    return addr


_PREFIXES = __import__("itertools").count()


@pytest.fixture
def two(worker_factory, etcd):
    """Two workers registered by themselves in a real etcd under a prefix of their own
    (the module's etcd is shared), `echo` deployed on both; a task t-on-b on the second."""
    prefix = "/cli-%d-%d/" % (os.getpid(), next(_PREFIXES))
    ws = []
    for _ in range(2):
        w = worker_factory("--etcd-endpoints", etcd.url, "--registry-prefix", prefix,
                           "--heartbeat-interval-ms", "200", executors=1)
        w.wait_serving()
        w.deploy("echo")
        ws.append(w)
    assert wait_for(lambda: len(etcd.range_prefix(prefix)) == 2)
    ws[1].submit("t-on-b", "echo", {"x": 1})
    ws[1].wait_terminal("t-on-b")
    return ws[0], ws[1], prefix


def test_addr_beats_everything(two, etcd):
    a, b, prefix = two
    env = {"WORKERCTL_ADDR": dead_addr(), "WORKERCTL_ETCD": etcd.url}
    out = ctl("--addr", b.addr, "--json", "get", "t-on-b", env=env, check=0)
    doc = json.loads(out.stdout)
    assert doc["state"] == "SUCCEEDED" and "worker" not in doc
    # --addr with --etcd (or --prefix) on the command line is a usage error
    ctl("--addr", b.addr, "--etcd", etcd.url, "get", "t-on-b", check=2)
    ctl("--addr", b.addr, "get", "t-on-b", "--prefix", prefix, check=2)


def test_etcd_flag_beats_the_addr_variable(two, etcd):
    a, b, prefix = two
    dead = dead_addr()
    out = ctl("--etcd", etcd.url, "--prefix", prefix, "--json", "get", "t-on-b",
              env={"WORKERCTL_ADDR": dead}, check=0)
    doc = json.loads(out.stdout)
    assert doc["worker"] == b.addr and doc["state"] == "SUCCEEDED"
    # --prefix alone takes the endpoints from $WORKERCTL_ETCD ...
    out = ctl("--prefix", prefix, "--json", "get", "t-on-b",
              env={"WORKERCTL_ADDR": dead, "WORKERCTL_ETCD": etcd.url}, check=0)
    assert json.loads(out.stdout)["worker"] == b.addr
    # ... and without any endpoints it is a usage error
    out = ctl("--prefix", prefix, "get", "t-on-b", check=2)
    assert "--prefix needs the etcd endpoints" in out.stderr


def test_addr_variable_beats_the_etcd_variable(two, etcd):
    a, b, prefix = two
    # $WORKERCTL_ADDR names a, which does not know the task: NOT_FOUND from a alone,
    # although etcd would have found it on b.
    out = ctl("get", "t-on-b", env={"WORKERCTL_ADDR": a.addr, "WORKERCTL_ETCD": etcd.url},
              check=3)
    assert out.stderr.startswith("workerctl: NOT_FOUND"), out.stderr
    dead = dead_addr()
    out = ctl("--deadline-ms", "2000", "get", "t-on-b",
              env={"WORKERCTL_ADDR": dead, "WORKERCTL_ETCD": etcd.url}, check=4)
    assert "cannot reach the worker at %s ($WORKERCTL_ADDR)" % dead in out.stderr, out.stderr


def test_etcd_variable_finds_the_task_for_every_command(two, etcd):
    a, b, prefix = two
    env = {"WORKERCTL_ETCD": etcd.url}
    p = ("--prefix", prefix)
    out = ctl(*p, "--json", "get", "t-on-b", env=env, check=0)
    assert json.loads(out.stdout)["worker"] == b.addr
    out = ctl(*p, "watch", "t-on-b", env=env, check=0)
    assert "TERMINAL task t-on-b SUCCEEDED" in out.stdout
    # submit picks a worker; get, watch and cancel find the task wherever it went
    out = ctl(*p, "--json", "submit", "echo", '{"n": 2}', "--task-id", "t-new", env=env, check=0)
    where = json.loads(out.stdout)["worker"]
    assert where in (a.addr, b.addr)
    out = ctl(*p, "--json", "watch", "t-new", env=env, check=0)
    assert json.loads(out.stdout.splitlines()[-1])["kind"] == "TERMINAL"
    out = ctl(*p, "--json", "cancel", "t-new", env=env, check=0)
    assert json.loads(out.stdout)["worker"] == where
    # tasks on two workers cannot share one stream: said, with the way out
    if where != b.addr:
        out = ctl(*p, "watch", "t-new", "t-on-b", env=env, check=2)
        assert "watch them apart" in out.stderr
    # slot names the worker it reserved on
    out = ctl(*p, "slot", "t-slot", env=env, check=0)
    assert re.search(r"^on worker 127\.0\.0\.1:\d+ \(submit there with --addr", out.stdout, re.M)
    # health asks every registered worker
    out = ctl(*p, "health", env=env, check=0)
    assert sorted(out.stdout.split()) == sorted([a.addr, "SERVING", b.addr, "SERVING"])


def test_etcd_errors_name_every_worker_tried(two, etcd):
    a, b, prefix = two
    env = {"WORKERCTL_ETCD": etcd.url}
    out = ctl("--prefix", prefix, "get", "nobody-has-it", env=env, check=3)
    assert "none of the 2 workers registered under %s in etcd %s has it" % (prefix, etcd.url) \
        in out.stderr, out.stderr
    assert "%s (NOT_FOUND)" % a.addr in out.stderr and "%s (NOT_FOUND)" % b.addr in out.stderr
    # a registered worker that is gone is skipped, and named
    dead = dead_addr()
    etcd.put(prefix + dead, {"address": dead, "task_slots": 1, "free_slots": 1, "reserved_slots": 0,
                             "running_tasks": 0, "ready": True, "draining": False,
                             "updated_unix_ms": 1})
    out = ctl("--deadline-ms", "2000", "--prefix", prefix, "--json", "get", "t-on-b", env=env,
              check=0)
    assert json.loads(out.stdout)["worker"] == b.addr
    out = ctl("--deadline-ms", "2000", "--prefix", prefix, "get", "nobody-has-it", env=env,
              check=3)
    assert "%s (UNAVAILABLE)" % dead in out.stderr, out.stderr
    # nothing registered under the prefix
    out = ctl("--prefix", "/nothing-here/", "get", "t-on-b", env=env, check=4)
    assert "no worker registered under /nothing-here/ in etcd %s" % etcd.url in out.stderr


def test_the_default_is_named_when_it_does_not_answer():
    import socket as _s
    try:
        _s.create_connection(("127.0.0.1", 7070), timeout=0.2).close()
        pytest.skip("something listens on 127.0.0.1:7070")
    except OSError:
        pass
    out = ctl("--deadline-ms", "2000", "get", "x", check=4)
    assert ("cannot reach the worker at 127.0.0.1:7070 (the default; none of --addr, --etcd, "
            "$WORKERCTL_ADDR, $WORKERCTL_ETCD is set)") in out.stderr, out.stderr
    # submit follows the same rule: no etcd is asked unless one is given
    out = ctl("--deadline-ms", "2000", "submit", "echo", "{}", check=4)
    assert "127.0.0.1:7070 (the default" in out.stderr and "etcd" not in out.stderr.split(")")[1]


# ---- big results: a summary and the first outputs on a terminal ------------------------------


def ctl_tty(*args, timeout=60):
    """Runs workerctl with its stdout on a pseudo-terminal; returns (exit code, text)."""
    import pty
    import select
    master, slave = pty.openpty()
    e = {k: v for k, v in os.environ.items() if not k.startswith("WORKERCTL_")}
    p = subprocess.Popen([WORKERCTL] + list(args), stdout=slave, stderr=subprocess.PIPE,
                         env=e)
    os.close(slave)
    chunks = []
    while True:
        r, _, _ = select.select([master], [], [], timeout)
        if not r:
            p.kill()
            raise AssertionError("workerctl said nothing for %d s" % timeout)
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: the terminal's other side is closed
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    rc = p.wait(timeout)
    return rc, b"".join(chunks).decode().replace("\r\n", "\n")


@pytest.fixture
def big(worker):
    """A map task of 50 calls, finished."""
    worker.submit("big-1", "echo", list(range(50)), builder="map")
    worker.wait_terminal("big-1")
    return worker


def output_lines(text):
    return [l for l in text.splitlines() if l.startswith("  output[")]


def test_terminal_shows_a_summary_and_the_first_outputs(big):
    rc, text = ctl_tty("--addr", big.addr, "get", "big-1")
    assert rc == 0, text
    assert text.splitlines()[0].startswith("task big-1 SUCCEEDED")
    assert "calls: 50 total, 50 succeeded" in text
    assert len(output_lines(text)) == 10
    assert ("  ... 40 more outputs not shown (50 outputs in all: 50 values, 0 errors); "
            "--outputs N or --all shows more, --json all of it") in text
    rc, text = ctl_tty("--addr", big.addr, "get", "big-1", "--outputs", "3")
    assert len(output_lines(text)) == 3 and "47 more outputs not shown" in text
    rc, text = ctl_tty("--addr", big.addr, "get", "big-1", "--all")
    assert len(output_lines(text)) == 50 and "not shown" not in text
    rc, text = ctl_tty("--addr", big.addr, "get", "big-1", "--quiet")
    assert text == "SUCCEEDED\n"


def test_pipes_get_everything_and_json_stays_whole(big):
    out = ctl("--addr", big.addr, "get", "big-1", check=0)
    assert len(output_lines(out.stdout)) == 50 and "not shown" not in out.stdout
    out = ctl("--addr", big.addr, "get", "big-1", "--outputs", "5", check=0)
    assert len(output_lines(out.stdout)) == 5 and "45 more outputs not shown" in out.stdout
    out = ctl("--addr", big.addr, "--json", "get", "big-1", check=0)
    assert len(out.stdout.splitlines()) == 1 and len(json.loads(out.stdout)["outputs"]) == 50
    ctl("--addr", big.addr, "get", "big-1", "--json", "--quiet", check=2)
    ctl("--addr", big.addr, "get", "big-1", "--all", "--outputs", "2", check=2)
    ctl("--addr", big.addr, "get", "big-1", "--outputs", "many", check=2)


def test_quiet_for_scripts(worker):
    out = ctl("--addr", worker.addr, "submit", "echo", "{}", "--task-id", "q-1", "--quiet",
              check=0)
    assert out.stdout == "q-1\n"
    out = ctl("--addr", worker.addr, "submit", "echo", "{}", "--task-id", "q-2", "--watch",
              "--quiet", check=0)
    assert out.stdout == "SUCCEEDED\n"
    out = ctl("--addr", worker.addr, "submit", "boom", "{}", "--task-id", "q-3", "--watch",
              "--quiet", check=1)
    assert out.stdout == "FAILED\n"
    out = ctl("--addr", worker.addr, "watch", "q-1", "q-3", "--quiet", check=1)
    assert sorted(out.stdout.splitlines()) == ["q-1 SUCCEEDED", "q-3 FAILED"]

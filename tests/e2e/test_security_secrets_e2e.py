"""End-to-end: the worker's secrets stay with the worker (issue 11, part 2).

A function runs as the same user as the worker (the tests drop to `nobody` when they
run as root, since root may read any process's /proc files) and tries to read the
worker's environment and memory through /proc/<worker pid>/."""

import json
import os
import shutil
import subprocess
import tempfile
import time

import grpc
import pytest

from conftest import WORKER, Worker, health_pb2, pb

TOKEN = "tok-" + "7f3a9c" * 6

SNOOP = (
    "import os\n"
    "def handler(args, ctx):\n"
    "    pid = os.getppid()\n"
    "    out = {'uid': os.getuid(), 'worker_uid': os.stat('/proc/%d' % pid).st_uid}\n"
    "    for name in ('environ', 'mem'):\n"
    "        try:\n"
    "            with open('/proc/%d/%s' % (pid, name), 'rb') as f:\n"
    "                out[name] = f.read(1 << 20).decode('latin-1') if name == 'environ' else 'opened'\n"
    "        except OSError as e:\n"
    "            out[name] = 'denied: %s' % type(e).__name__\n"
    "    return out\n")


def same_user_wrapper():
    """Runs the worker as `nobody` when the tests run as root (root's CAP_SYS_PTRACE reads
    any process's environ, so only an unprivileged user shows what the worker guards)."""
    if os.geteuid() != 0:
        return ()
    if not shutil.which("setpriv"):
        pytest.skip("running as root without setpriv to drop to nobody")
    return ("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups")


@pytest.fixture
def shared_tmp():
    d = tempfile.mkdtemp(prefix="wk-secrets-")
    os.chmod(d, 0o777)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def authed_worker(tmp, env_extra, extra_args=()):
    env = {k: v for k, v in os.environ.items() if not k.startswith("WORKER_")}
    env.update(env_extra)
    w = Worker(tmp, extra_args=extra_args, env=env, wrapper=same_user_wrapper())
    os.chmod(w.code_root, 0o777)
    return w


def run_call(w, function, md, task_id="t1"):
    deadline = time.time() + 20
    while True:
        try:
            if w.health.Check(health_pb2.HealthCheckRequest(), timeout=2, metadata=md).status == \
                    health_pb2.HealthCheckResponse.SERVING:
                break
        except Exception:
            if time.time() > deadline:
                raise
        time.sleep(0.05)
    fn = pb.FunctionCallConfig(name=function, args=b"{}")
    w.stub.SubmitTask(pb.SubmitTaskRequest(task_id=task_id, function=fn), timeout=10, metadata=md)
    deadline = time.time() + 30
    while time.time() < deadline:
        r = w.stub.GetTaskResult(pb.GetTaskResultRequest(task_id=task_id), timeout=5, metadata=md)
        if r.state in (pb.TASK_STATE_SUCCEEDED, pb.TASK_STATE_FAILED, pb.TASK_STATE_CANCELLED):
            return r
        time.sleep(0.02)
    raise AssertionError("task %s did not finish" % task_id)


def test_function_cannot_read_worker_environ_or_memory(shared_tmp):
    w = authed_worker(os.path.join(shared_tmp, "w"), {"WORKER_AUTH_TOKEN": TOKEN})
    try:
        w.deploy("snoop", SNOOP)
        md = [("authorization", "Bearer " + TOKEN)]
        r = run_call(w, "snoop", md)
        assert r.state == pb.TASK_STATE_SUCCEEDED, r
        out = json.loads(r.outputs[0].value)
        # the attack is meaningful: the function runs as the worker's own user
        assert out["uid"] == out["worker_uid"], out
        assert TOKEN not in out["environ"], "the function read the worker's token"
        assert out["environ"] in ("", "denied: PermissionError"), out
        assert out["mem"] == "denied: PermissionError", out
        # executors still start and serve calls after the worker turned non-dumpable
        r2 = run_call(w, "snoop", md, task_id="t2")
        assert r2.state == pb.TASK_STATE_SUCCEEDED, r2
    finally:
        assert w.stop() == 0, w.logs[-20:]


ECHO = "def handler(args, ctx):\n    return {'ok': True}\n"


def clean_env(**extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("WORKER_")}
    env.update(extra)
    return env


def test_auth_token_file(tmp_path):
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    token_file.chmod(0o600)
    w = Worker(str(tmp_path / "w"), extra_args=("--auth-token-file", str(token_file)),
               env=clean_env())
    try:
        w.deploy("echo", ECHO)
        # the file's token, without its newline, is the bearer token
        r = run_call(w, "echo", [("authorization", "Bearer " + TOKEN)])
        assert r.state == pb.TASK_STATE_SUCCEEDED, r
        with pytest.raises(grpc.RpcError) as e:
            w.stub.GetTaskResult(pb.GetTaskResultRequest(task_id="t1"), timeout=5,
                                 metadata=[("authorization", "Bearer " + TOKEN + "x")])
        assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED
    finally:
        assert w.stop() == 0, w.logs[-20:]


def test_auth_token_and_auth_token_file_exclude_each_other(tmp_path):
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    out = subprocess.run([WORKER, "--print-config", "--code-root", str(tmp_path),
                          "--auth-token-file", str(token_file)],
                         capture_output=True, text=True, timeout=30,
                         env=clean_env(WORKER_AUTH_TOKEN="other"))
    assert out.returncode == 2, out
    assert "auth_token (env WORKER_AUTH_TOKEN) and auth_token_file (flag --auth-token-file)" \
        in out.stderr, out.stderr
    assert TOKEN not in out.stdout + out.stderr and "other" not in out.stdout + out.stderr


def test_secrets_leave_the_worker_environment(tmp_path):
    """The worker drops WORKER_AUTH_TOKEN from its environment once read: its
    /proc/<pid>/environ (readable by root only, the worker being non-dumpable) and its
    executors' environment no longer hold it."""
    if os.geteuid() != 0:
        pytest.skip("only root may read a non-dumpable worker's /proc/<pid>/environ")
    w = Worker(str(tmp_path / "w"), env=clean_env(WORKER_AUTH_TOKEN=TOKEN))
    try:
        w.deploy("env", "import os\ndef handler(args, ctx):\n    return dict(os.environ)\n")
        r = run_call(w, "env", [("authorization", "Bearer " + TOKEN)])
        assert r.state == pb.TASK_STATE_SUCCEEDED, r
        executor_env = json.loads(r.outputs[0].value)
        assert not any(TOKEN in v or k.startswith("WORKER_") for k, v in executor_env.items()), \
            executor_env
        with open("/proc/%d/environ" % w.proc.pid, "rb") as f:
            environ = f.read()
        assert TOKEN.encode() not in environ and b"WORKER_AUTH_TOKEN" not in environ
        assert b"PATH=" in environ  # the rest of the environment is untouched
    finally:
        assert w.stop() == 0, w.logs[-20:]


def test_print_config_masks_every_secret(tmp_path):
    """--print-config (text and JSON) never shows the token, the DSN's password or Redis
    credentials, whether they come from flags, the environment or the token file."""
    dsn_pw, redis_pw = "pg-Pa55-" + "9" * 8, "rd-Pa55-" + "8" * 8
    dsn = "host=127.0.0.1 user=w password=%s dbname=out" % dsn_pw
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    cases = [
        (["--auth-token", TOKEN, "--postgres-dsn", dsn,
          "--redis-addr", "redis://default:%s@127.0.0.1:6379" % redis_pw], {}),
        (["--auth-token-file", str(token_file)],
         {"WORKER_POSTGRES_DSN": "postgresql://w:%s@127.0.0.1/out" % dsn_pw}),
    ]
    for args, env in cases:
        for fmt in ([], ["--json"]):
            out = subprocess.run([WORKER, "--print-config", "--code-root", str(tmp_path)] + fmt +
                                 args, capture_output=True, text=True, timeout=30,
                                 env=clean_env(**env))
            shown = out.stdout + out.stderr
            assert out.stdout, out
            for secret in (TOKEN, dsn_pw, redis_pw):
                assert secret not in shown, (args, fmt, shown)
            if fmt:
                doc = json.loads(out.stdout)
                assert doc["auth_token"]["value"] == "***", doc["auth_token"]
                assert "password=***" in doc["postgres_dsn"]["value"] or \
                    "w:***@" in doc["postgres_dsn"]["value"], doc["postgres_dsn"]
            else:
                line = [l for l in out.stdout.splitlines() if l.startswith("auth_token ")][0]
                assert " *** " in line, line
    # unset secrets show as unset, not as "***"
    out = subprocess.run([WORKER, "--print-config", "--json", "--code-root", str(tmp_path)],
                         capture_output=True, text=True, timeout=30, env=clean_env())
    assert json.loads(out.stdout)["auth_token"]["value"] == ""


def test_secret_flags_leave_the_command_line(tmp_path):
    """/proc/<pid>/cmdline is world-readable whatever the dumpable flag: the values of
    secret flags are overwritten once read; the worker still uses the token."""
    w = Worker(str(tmp_path / "w"), env=clean_env(), extra_args=("--auth-token", TOKEN))
    try:
        with open("/proc/%d/cmdline" % w.proc.pid, "rb") as f:
            cmdline = f.read()
        assert TOKEN.encode() not in cmdline, cmdline
        assert b"--auth-token\0" + b"*" * len(TOKEN) + b"\0" in cmdline, cmdline
        w.deploy("echo", ECHO)
        r = run_call(w, "echo", [("authorization", "Bearer " + TOKEN)])
        assert r.state == pb.TASK_STATE_SUCCEEDED, r
    finally:
        assert w.stop() == 0, w.logs[-20:]

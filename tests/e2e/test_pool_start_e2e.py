"""End-to-end: a worker whose executors cannot start says so (issue 10, §8).

The interpreter is a wrapper script that fails (a line on stderr, exit 1) while a flag
file exists and runs the real python3 otherwise. While executors cannot start, health
is NOT_SERVING, the etcd record says ready: false, and a task fails fast with a failure
naming the interpreter and the tail of its stderr; once the flag goes, the worker
recovers by itself."""

import time

from conftest import health_pb2, pb
from etcd_fixture import Etcd

NOOP = "def handler(args, ctx):\n    return 'ok'\n"
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


def make_python(tmp_path, broken):
    flag = tmp_path / "broken"
    if broken:
        flag.write_text("1")
    py = tmp_path / "flaky-python"
    py.write_text("#!/bin/sh\n"
                  "if [ -e %s ]; then\n"
                  "  echo 'flaky-python: the interpreter is broken on purpose' >&2\n"
                  "  exit 1\n"
                  "fi\n"
                  "exec /usr/bin/python3 \"$@\"\n" % flag)
    py.chmod(0o755)
    return str(py), flag


def health(w):
    return w.health.Check(health_pb2.HealthCheckRequest(), timeout=5).status


def wait_for(pred, timeout, what):
    deadline = time.time() + timeout
    while time.time() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(0.05)
    raise AssertionError("timed out waiting for " + what)


def test_broken_interpreter_is_not_serving_fails_fast_and_recovers(worker_factory, tmp_path):
    py, flag = make_python(tmp_path, broken=True)
    w = worker_factory("--executors-max", "2", executors=1, python=py)
    unavailable = wait_for(lambda: w.events("executors_unavailable"), 20, "executors_unavailable")
    assert py in unavailable[0]["msg"]
    assert "broken on purpose" in unavailable[0]["msg"]
    assert not w.events("worker_ready"), "worker_ready with no executor"
    wait_for(lambda: health(w) == NOT_SERVING, 10, "NOT_SERVING")

    w.deploy("noop", NOOP)
    t0 = time.time()
    w.submit("doomed", "noop", {})
    r = w.wait_terminal("doomed", timeout=10)
    assert time.time() - t0 < 5, "the task did not fail fast"
    assert r.state == pb.TASK_STATE_FAILED
    assert py in r.failure_message and "broken on purpose" in r.failure_message, r.failure_message
    print(r.failure_message)
    assert health(w) == NOT_SERVING

    flag.unlink()  # the interpreter works again: the worker recovers by itself
    wait_for(lambda: health(w) == SERVING, 20, "SERVING again")
    assert w.events("executors_available")
    w.submit("after", "noop", {})
    r = w.wait_terminal("after", timeout=20)
    assert r.state == pb.TASK_STATE_SUCCEEDED


def test_bin_false_says_not_ready_in_etcd(worker_factory):
    """`--python /bin/false`: the registration says ready: false, health NOT_SERVING."""
    etcd = Etcd()
    try:
        w = worker_factory("--etcd-endpoints", etcd.url, "--etcd-lease-ttl-s", "2",
                           "--heartbeat-interval-ms", "200", executors=1, python="/bin/false")
        got = wait_for(lambda: w.events("executors_unavailable"), 20, "executors_unavailable")
        assert "/bin/false" in got[0]["msg"]
        assert health(w) == NOT_SERVING
        key = "/workers/" + w.addr
        value = wait_for(lambda: etcd.range_prefix("/workers/").get(key), 20, "the etcd record")
        assert value[0]["ready"] is False, value
    finally:
        etcd.stop()

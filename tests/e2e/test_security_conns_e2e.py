"""Attacks on the gRPC port's connections and request sizes (issue 11 §6, docs/security.md
"Connections and request sizes"): file descriptors exhausted by idle connections,
more connections than max_connections, and oversized requests, against the real worker
and workerctl."""

import json
import os
import re
import resource
import socket
import subprocess
import time
import urllib.request

import grpc
import pytest

from conftest import WORKERCTL, HealthStub, health_pb2, pb
from etcd_fixture import Etcd, free_port, wait_for

_HTTP = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def nofile(soft, hard):
    """A preexec_fn: the worker starts with this NOFILE limit (it raises soft to hard)."""
    def apply():
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    return apply


def start(worker_factory, *extra, limit=None):
    """A worker started under `limit` (soft, hard): subprocess.Popen gets a preexec_fn."""
    if limit is None:
        w = worker_factory(*extra)
    else:
        real = subprocess.Popen

        def popen(*a, **kw):
            kw["preexec_fn"] = nofile(*limit)
            return real(*a, **kw)
        subprocess.Popen = popen
        try:
            w = worker_factory(*extra)
        finally:
            subprocess.Popen = real
    w.wait_serving()
    return w


def fresh_health(addr):
    """A channel of its own (no subchannel shared with earlier channels of the test,
    so no reconnect backoff carried over) and its health stub."""
    ch = grpc.insecure_channel(addr, options=[("grpc.use_local_subchannel_pool", 1)])
    return ch, HealthStub(ch)


def health_of(stub, timeout=5):
    return stub.Check(health_pb2.HealthCheckRequest(), timeout=timeout).status


def wait_until(pred, timeout=15):
    assert wait_for(pred, timeout=timeout, step=0.02), "condition not met within %ss" % timeout


def served_within(addr, bound):
    """Seconds until a new client's Health.Check succeeds; fails past `bound`."""
    t0 = time.monotonic()
    while True:
        ch, stub = fresh_health(addr)
        try:
            health_of(stub, timeout=bound)
            return time.monotonic() - t0
        except grpc.RpcError:
            pass
        finally:
            ch.close()
        assert time.monotonic() - t0 < bound, "no new client served within %ss" % bound
        time.sleep(0.01)


def metric(port, name, labels=""):
    with _HTTP.open("http://127.0.0.1:%d/metrics" % port, timeout=5) as r:
        text = r.read().decode()
    m = re.search(r"^%s%s (\S+)$" % (re.escape(name), re.escape(labels)), text, re.M)
    return float(m.group(1)) if m else 0.0


def idle_connections(port, n):
    """n TCP connections that send nothing (each holds one descriptor in the worker)."""
    return [socket.create_connection(("127.0.0.1", port)) for _ in range(n)]


def worker_fds(w):
    return len(os.listdir("/proc/%d/fd" % w.proc.pid))


# ---- file descriptors -------------------------------------------------------------------


def test_soft_nofile_limit_is_raised_to_the_hard_one(worker_factory):
    w = start(worker_factory, limit=(256, 2048))
    ev = w.events("nofile_limit")
    assert ev and ev[0]["soft_before"] == 256 and ev[0]["soft"] == 2048, ev
    with open("/proc/%d/limits" % w.proc.pid) as f:
        line = [l for l in f if l.startswith("Max open files")][0]
    assert line.split()[3:5] == ["2048", "2048"], line
    # max_connections 0: the limit less a quarter
    assert w.events("worker_listening")[0]["max_connections"] == 2048 - 512


def test_exhausted_descriptors_report_not_serving_and_accepting_resumes(worker_factory):
    # The cap out of the way: descriptors run out first (256 for the whole worker).
    metrics_port = free_port()
    w = start(worker_factory, "--max-connections", "100000", "--metrics-addr",
              "127.0.0.1:%d" % metrics_port, limit=(256, 256))
    held_ch, held = fresh_health(w.addr)  # a connection opened before the attack
    assert health_of(held) == health_pb2.HealthCheckResponse.SERVING
    idle = idle_connections(w.port, 300)  # more than the worker has descriptors
    try:
        # the worker stays up, says it cannot accept, and keeps serving open connections
        wait_until(lambda: w.events("accept_blocked"))
        wait_until(lambda: health_of(held) == health_pb2.HealthCheckResponse.NOT_SERVING)
        assert worker_fds(w) <= 256
        # a new client is told at once (connection closed), not left hanging
        ch, stub = fresh_health(w.addr)
        t0 = time.monotonic()
        with pytest.raises(grpc.RpcError) as e:
            health_of(stub, timeout=20)
        ch.close()
        assert e.value.code() == grpc.StatusCode.UNAVAILABLE, e.value
        assert time.monotonic() - t0 < 10
    finally:
        for s in idle:
            s.close()
    # the pressure ends: a new client is served within a second, health SERVING again
    assert served_within(w.addr, 1.0) < 1.0
    wait_until(lambda: health_of(held) == health_pb2.HealthCheckResponse.SERVING)
    assert w.events("accept_resumed")
    wait_until(lambda: metric(metrics_port, "worker_connections_refused_total",
                              '{reason="fd_limit"}') >= 1)
    wait_until(lambda: metric(metrics_port, "worker_accept_blocked") == 0)  # sampled: lags
    # and it keeps working: a task runs
    w.deploy("echo")
    w.submit("after-emfile", "echo", {"x": 1})
    assert w.wait_terminal("after-emfile").state == pb.TASK_STATE_SUCCEEDED
    held_ch.close()


def test_max_connections_refuses_the_excess_and_counts_it(worker_factory):
    metrics_port = free_port()
    w = start(worker_factory, "--max-connections", "5", "--metrics-addr",
              "127.0.0.1:%d" % metrics_port)
    # w.channel is one connection (wait_serving used it); four idle ones fill the cap
    idle = idle_connections(w.port, 4)
    try:
        wait_until(lambda: metric(metrics_port, "worker_connections_open") == 5)
        ch, stub = fresh_health(w.addr)
        with pytest.raises(grpc.RpcError) as e:
            health_of(stub, timeout=20)
        ch.close()
        assert e.value.code() == grpc.StatusCode.UNAVAILABLE, e.value
        wait_until(lambda: metric(metrics_port, "worker_connections_refused_total",
                                  '{reason="max_connections"}') >= 1)
        # connections already open are served, and health stays SERVING (a cap is no fault)
        assert health_of(w.health) == health_pb2.HealthCheckResponse.SERVING
    finally:
        for s in idle:
            s.close()
    assert served_within(w.addr, 1.0) < 1.0


# ---- oversized requests ------------------------------------------------------------------


def big_submit(task_id, size):
    return pb.SubmitTaskRequest(task_id=task_id, function=pb.FunctionCallConfig(
        name="echo", args=json.dumps({"pad": "x" * size}).encode()))


def test_oversized_submit_is_invalid_argument_naming_max_message_bytes(worker_factory):
    w = start(worker_factory, "--max-message-bytes", "64KiB")
    w.deploy("echo")
    req = big_submit("big", 100000)
    with pytest.raises(grpc.RpcError) as e:
        w.stub.SubmitTask(req, timeout=10)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT, e.value
    assert ("request message is %d bytes, above max_message_bytes (65536 bytes)"
            % req.ByteSize()) in e.value.details()
    # nothing was admitted, and a request under the limit goes through
    with pytest.raises(grpc.RpcError) as e:
        w.stub.GetTaskResult(pb.GetTaskResultRequest(task_id="big"), timeout=10)
    assert e.value.code() == grpc.StatusCode.NOT_FOUND
    w.submit("small", "echo", {"x": 1})
    assert w.wait_terminal("small").state == pb.TASK_STATE_SUCCEEDED


@pytest.fixture
def etcd():
    e = Etcd()
    yield e
    e.stop()


def test_workerctl_does_not_fail_over_on_a_request_too_large(etcd, worker_factory, tmp_path):
    mports = [free_port(), free_port()]
    workers = [start(worker_factory, "--max-message-bytes", "64KiB", "--metrics-addr",
                     "127.0.0.1:%d" % p) for p in mports]
    for w in workers:
        w.deploy("echo")
        etcd.put("/workers/" + w.addr, {
            "address": w.addr, "task_slots": 4, "reserved_slots": 0, "running_tasks": 0,
            "free_slots": 4, "ready": True, "draining": False, "deployment": "e2e",
            "service": "worker", "version": "0.1.0",
            "updated_unix_ms": int(time.time() * 1000)})
    args = tmp_path / "args.json"
    args.write_text(json.dumps({"pad": "x" * 100000}))
    env = {k: v for k, v in os.environ.items()
           if k not in ("WORKERCTL_ADDR", "WORKERCTL_ETCD") and not k.lower().endswith("_proxy")}
    out = subprocess.run([WORKERCTL, "submit", "echo", "--args-file", str(args), "--task-id",
                          "too-big", "--etcd", etcd.url, "--prefix", "/workers/"],
                         capture_output=True, text=True, env=env, timeout=60)
    assert out.returncode == 3, (out.returncode, out.stdout, out.stderr)
    assert "INVALID_ARGUMENT" in out.stderr and "max_message_bytes" in out.stderr, out.stderr
    assert "trying" not in out.stderr, out.stderr  # one attempt: no failover line
    # exactly one worker was asked, and it answered INVALID_ARGUMENT
    asked = [metric(p, "worker_rpcs_total", '{method="SubmitTask",code="INVALID_ARGUMENT"}')
             for p in mports]
    assert sorted(asked) == [0, 1], asked

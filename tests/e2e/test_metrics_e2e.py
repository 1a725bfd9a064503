"""The worker's Prometheus endpoint (metrics_addr), scraped with a real HTTP client
(urllib) and parsed with the Prometheus project's own parser (Debian's
python3-prometheus-client): every family the README lists is there and counts what
really happened: RPCs by method and code, tasks by terminal state and failure code,
phase durations, calls and retries, executor starts and kills by reason, slots by
state, etcd heartbeat outcomes, shadow outcomes."""

import urllib.error
import urllib.request

import grpc
import pytest
from prometheus_client.parser import text_string_to_metric_families

from conftest import pb
from etcd_fixture import Etcd, free_port, wait_for

# Spins until killed; {"warm": true} returns at once (it binds an executor to spin).
SPIN = "def handler(args, ctx):\n    while not args.get('warm'):\n        pass\n"
FLAKY = ("import os, worker\n"
         "def handler(args, ctx):\n"
         "    path = os.path.join(args['dir'], 'attempts')\n"
         "    with open(path, 'a') as f:\n"
         "        f.write('x')\n"
         "    if os.path.getsize(path) < 3:\n"
         "        raise worker.Retryable('not yet')\n"
         "    return os.path.getsize(path)\n")


def metrics_url(w):
    ev = w.events("metrics_listening")
    assert ev, "no metrics_listening line: %s" % w.logs[-5:]
    return "http://127.0.0.1:%d/metrics" % ev[0]["port"]


def scrape(w):
    """{(name, frozenset(labels.items())): value} of one scrape, and the content type."""
    with urllib.request.urlopen(metrics_url(w), timeout=5) as resp:
        assert resp.status == 200
        ctype = resp.headers["Content-Type"]
        text = resp.read().decode("utf-8")
    samples = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            samples[(s.name, frozenset(s.labels.items()))] = s.value
    return samples, ctype, text


def value(samples, name, **labels):
    return samples.get((name, frozenset(labels.items())), 0.0)


@pytest.fixture
def etcd():
    e = Etcd()
    yield e
    e.stop()


def test_every_family_counts_what_happened(worker_factory, etcd, tmp_path):
    w = worker_factory("--metrics-addr", "127.0.0.1:0", "--task-slots", "8",
                       "--etcd-endpoints", etcd.url, "--etcd-lease-ttl-s", "2",
                       "--heartbeat-interval-ms", "200",
                       "--shadow-target-addr", "127.0.0.1:%d" % free_port(),
                       "--cancel-grace-ms", "300", executors=1)
    w.wait_serving()
    w.deploy("echo")
    w.deploy("boom")
    w.deploy("spin", SPIN)
    w.deploy("flaky", FLAKY)

    w.submit("ok-1", "echo", {"a": 1})
    w.submit("ok-2", "echo", [1, 2, 3], builder="map")
    w.submit("bad", "boom", {})
    w.submit("flaky", "flaky", {"dir": str(tmp_path)},
             call_retry_policy=pb.CallRetryPolicy(max_attempts=3, initial_backoff_ms=1, max_backoff_ms=5))
    for t in ("ok-1", "ok-2", "bad", "flaky"):
        w.wait_terminal(t)
    # alone on the one executor: calls queued behind it would be lost with it. Its
    # executor is ready first: the 300 ms run from the call's SEND, and an executor the
    # call waits to start for (one per function) could eat them on a busy machine
    w.submit("spin-warm", "spin", {"warm": True})
    assert w.wait_terminal("spin-warm").state == pb.TASK_STATE_SUCCEEDED
    w.submit("spin", "spin", {}, call_timeout_ms=300)
    w.wait_terminal("spin")
    with pytest.raises(grpc.RpcError) as e:
        w.stub.GetTaskResult(pb.GetTaskResultRequest(task_id="never-submitted"), timeout=5)
    assert e.value.code() == grpc.StatusCode.NOT_FOUND
    slot = w.stub.RequestTaskSlot(pb.RequestTaskSlotRequest(task_id="reserved-1", ttl_ms=60000), timeout=5)
    assert slot.slot_id

    def settled():
        s, _, _ = scrape(w)
        # the sampled families lag by at most 250 ms: wait until they show the end state
        if value(s, "worker_slots", state="reserved") != 1:
            return None
        if value(s, "worker_executor_kills_total", reason="wedged") < 1:
            return None
        if value(s, "worker_etcd_puts_total", outcome="ok") < 1:
            return None
        if value(s, "worker_shadow_requests_total", outcome="failed") + \
                value(s, "worker_shadow_requests_total", outcome="dropped") < 1:
            return None
        return s
    s = wait_for(settled, timeout=20)
    assert s, scrape(w)[2]
    _, ctype, text = scrape(w)
    assert ctype.startswith("text/plain; version=0.0.4")

    # RPCs by method and code
    assert value(s, "worker_rpcs_total", method="SubmitTask", code="OK") == 6
    assert value(s, "worker_rpcs_total", method="GetTaskResult", code="NOT_FOUND") == 1
    assert value(s, "worker_rpcs_total", method="RequestTaskSlot", code="OK") == 1
    assert value(s, "worker_rpcs_total", method="GetTaskResult", code="OK") >= 6
    # tasks by terminal state and failure code
    assert value(s, "worker_tasks_finished_total", state="SUCCEEDED", failure_code="NONE") == 4
    assert value(s, "worker_tasks_finished_total", state="FAILED", failure_code="CALL_FAILED") == 2
    # phase durations: every task ran builder and calls; the histogram is consistent
    assert value(s, "worker_phase_duration_ms_count", phase="calls") == 6
    assert value(s, "worker_phase_duration_ms_count", phase="builder") == 6
    assert value(s, "worker_phase_duration_ms_count", phase="task") == 6
    assert value(s, "worker_phase_duration_ms_bucket", phase="task", le="+Inf") == 6
    assert value(s, "worker_phase_duration_ms_sum", phase="task") > 0
    # calls and retries: echo 1 + map 3 + flaky 1 + spin-warm 1 succeeded; boom and spin
    # failed
    assert value(s, "worker_calls_total", outcome="succeeded") == 6
    assert value(s, "worker_calls_total", outcome="failed") == 2
    assert value(s, "worker_call_retries_total") == 2
    assert value(s, "worker_call_cpu_seconds_total") > 0
    # executors: the spinning one was killed as wedged and replaced
    assert value(s, "worker_executor_kills_total", reason="wedged") == 1
    assert value(s, "worker_executor_starts_total") >= 2
    # slots by state: 8 slots, one reserved above, none running
    assert value(s, "worker_task_slots") == 8
    assert value(s, "worker_slots", state="running") == 0
    assert value(s, "worker_slots", state="free") == 7
    assert value(s, "worker_ready") == 1 and value(s, "worker_draining") == 0
    # etcd heartbeat outcomes
    assert value(s, "worker_etcd_registered") == 1
    assert value(s, "worker_etcd_puts_total", outcome="failed") == 0
    # the shadow target is down: offered submissions failed or were dropped, never mirrored
    assert value(s, "worker_shadow_requests_total", outcome="mirrored") == 0
    # every family has its HELP and TYPE
    for family in ("worker_rpcs_total", "worker_tasks_finished_total", "worker_phase_duration_ms",
                   "worker_slots", "worker_executor_kills_total", "worker_etcd_puts_total",
                   "worker_shadow_requests_total"):
        assert "# HELP %s " % family in text and "# TYPE %s " % family in text

    assert w.stop() == 0


def test_a_stream_the_client_cancels_counts_as_cancelled(worker_factory):
    w = worker_factory("--metrics-addr", "127.0.0.1:0")
    w.wait_serving()
    w.deploy("sleepy")
    w.submit("long", "sleepy", {"seconds": 1})
    stream = w.stub.WatchTasks(pb.WatchTasksRequest(task_ids=["long"]), timeout=30)
    assert next(stream) is not None  # the snapshot: the stream is open on the worker
    stream.cancel()
    s = wait_for(lambda: (lambda s: s if value(s, "worker_rpcs_total", method="WatchTasks",
                                                code="CANCELLED") == 1 else None)(scrape(w)[0]),
                 timeout=10)
    assert s, scrape(w)[2]
    assert value(s, "worker_rpcs_total", method="WatchTasks", code="OK") == 0
    assert w.wait_terminal("long").state == pb.TASK_STATE_SUCCEEDED
    assert w.stop() == 0


def test_other_paths_and_methods(worker_factory):
    w = worker_factory("--metrics-addr", "127.0.0.1:0")
    w.wait_serving()
    base = metrics_url(w).rsplit("/", 1)[0]
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(base + "/nothing", timeout=5)
    assert e.value.code == 404
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(urllib.request.Request(metrics_url(w), data=b"x", method="POST"), timeout=5)
    assert e.value.code == 405
    assert w.stop() == 0


def test_no_metrics_addr_no_endpoint(worker_factory):
    w = worker_factory()
    w.wait_serving()
    assert not w.events("metrics_listening")
    assert w.stop() == 0


@pytest.mark.parametrize("addr,words", [
    ("127.0.0.1:99999", "99999"),
    ("not an address", "not an address"),
])
def test_bad_metrics_addr_stops_the_start(tmp_path, addr, words):
    import subprocess
    from conftest import WORKER
    p = subprocess.run([WORKER, "--listen", "127.0.0.1:0", "--code-root", str(tmp_path),
                        "--metrics-addr", addr], capture_output=True, text=True, timeout=30)
    assert p.returncode == 2, p.stderr
    assert "metrics_addr" in p.stderr and words in p.stderr, p.stderr


def test_port_in_use_stops_the_start(tmp_path):
    import socket
    import subprocess
    from conftest import WORKER
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(1)
    port = s.getsockname()[1]
    try:
        p = subprocess.run([WORKER, "--listen", "127.0.0.1:0", "--code-root", str(tmp_path),
                            "--metrics-addr", "127.0.0.1:%d" % port],
                           capture_output=True, text=True, timeout=30)
    finally:
        s.close()
    assert p.returncode == 2, p.stderr
    assert "metrics_addr" in p.stderr and str(port) in p.stderr, p.stderr

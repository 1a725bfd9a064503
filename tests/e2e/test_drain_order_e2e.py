"""Clients see a drain before the worker refuses (issue 15 §2): on SIGTERM the worker
first publishes `draining: true` to etcd and turns health NOT_SERVING, and only then
refuses new slots and submits, bounded by drain_publish_timeout_ms when etcd is slow.

The order is checked causally, not by clocks: a client that submits continuously, on its
first refusal, reads the worker's etcd key and asks Health.Check. Since the worker
refuses only after etcd acknowledged the draining put, that read (linearizable, made
after the refusal arrived) must already see `draining: true`, and health must already
say NOT_SERVING. On the old code the refusal came 5-43 ms before the put, so the read
saw `draining: false`. An etcd watch on the key gives the figure printed (how long
before or after the first refusal a watcher saw the draining record)."""

import base64
import http.client
import json
import re
import signal
import threading
import time
import urllib.request

import grpc

from conftest import health_pb2, pb, pb_grpc, HealthStub
from etcd_fixture import Etcd, etcd, wait_for  # noqa: F401 (etcd: a fixture)

PREFIX = "/workers/"


def b64(s):
    return base64.b64encode(s.encode()).decode()


def etcd_get(url, key):
    """(value dict or None, mod_revision, store revision) of `key`, read now."""
    req = urllib.request.Request(url + "/v3/kv/range", data=json.dumps({"key": b64(key)}).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=5) as r:
        out = json.loads(r.read())
    rev = int(out["header"]["revision"])
    kvs = out.get("kvs", [])
    if not kvs:
        return None, 0, rev
    return json.loads(base64.b64decode(kvs[0]["value"])), int(kvs[0]["mod_revision"]), rev


class KeyWatcher(object):
    """An etcd watch (the v3 JSON gateway's streaming /v3/watch) on one key: records the
    monotonic time and mod_revision of the first put whose value says draining."""

    def __init__(self, url, key):
        self.host, self.port = url[len("http://"):].split(":")
        self.key = key
        self.draining_seen = None  # (time.monotonic(), mod_revision)
        self.ready = threading.Event()
        self.conn = http.client.HTTPConnection(self.host, int(self.port), timeout=60)
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        assert self.ready.wait(10), "the etcd watch did not start"

    def _run(self):
        body = json.dumps({"create_request": {"key": b64(self.key)}})
        self.conn.request("POST", "/v3/watch", body=body,
                          headers={"Content-Type": "application/json"})
        resp = self.conn.getresponse()
        try:
            while True:
                line = resp.readline()
                if not line:
                    return
                msg = json.loads(line).get("result", {})
                if msg.get("created"):
                    self.ready.set()
                for ev in msg.get("events", []):
                    kv = ev.get("kv", {})
                    if ev.get("type", "PUT") != "PUT" or "value" not in kv:
                        continue
                    value = json.loads(base64.b64decode(kv["value"]))
                    if value.get("draining") and self.draining_seen is None:
                        self.draining_seen = (time.monotonic(), int(kv["mod_revision"]))
        except (OSError, ValueError, AttributeError):  # closed by close() (http.client
            return                                     # raises AttributeError then)

    def close(self):
        try:
            self.conn.sock and self.conn.sock.shutdown(2)
        except OSError:
            pass
        self.conn.close()


class Submitter(object):
    """Submits noop tasks back to back until refused UNAVAILABLE; at the first refusal
    reads the worker's etcd key (when etcd_url) and its health, in that order."""

    def __init__(self, addr, etcd_url=None, key=None):
        self.channel = grpc.insecure_channel(addr)
        self.stub = pb_grpc.WorkerServiceStub(self.channel)
        self.health = HealthStub(self.channel)
        self.etcd_url, self.key = etcd_url, key
        self.accepted = []
        self.refusal = None  # dict: at, message, etcd (value, mod_rev, rev), health
        self.errors = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        n = 0
        while not self.stop.is_set():
            n += 1
            tid = "order-%d" % n
            fn = pb.FunctionCallConfig(name="noop", args=b"{}")
            try:
                self.stub.SubmitTask(pb.SubmitTaskRequest(task_id=tid, function=fn), timeout=10)
                self.accepted.append(tid)
            except grpc.RpcError as e:
                if e.code() == grpc.StatusCode.RESOURCE_EXHAUSTED:
                    time.sleep(0.002)  # every slot busy: not a drain refusal
                    continue
                if e.code() != grpc.StatusCode.UNAVAILABLE:
                    self.errors.append((tid, e.code(), e.details()))
                    return
                at = time.monotonic()
                record = etcd_get(self.etcd_url, self.key) if self.etcd_url else None
                try:
                    h = self.health.Check(health_pb2.HealthCheckRequest(), timeout=5).status
                except grpc.RpcError as he:
                    h = he.code()
                self.refusal = {"at": at, "message": e.details(), "etcd": record, "health": h,
                                "task_id": tid}
                return

    def join(self, timeout):
        self.thread.join(timeout)
        self.stop.set()
        self.channel.close()


def start_worker(worker_factory, etcd, *extra):
    w = worker_factory("--etcd-endpoints", etcd.url, "--heartbeat-interval-ms", "1000", *extra,
                       executors=2)
    w.wait_serving()
    w.deploy("noop")
    w.deploy("sleepy")
    key = PREFIX + w.addr
    assert wait_for(lambda: key in etcd.range_prefix(PREFIX), timeout=15), w.logs[-10:]
    return w, key


class Watched(object):
    """Submits a sleepy task and watches it to its end (the watch keeps the worker's
    flush waiting for it); .state is its terminal state."""

    def __init__(self, w, task_id, seconds):
        fn = pb.FunctionCallConfig(name="sleepy", args=('{"seconds": %s}' % seconds).encode())
        deadline = time.monotonic() + 30
        while True:
            try:
                w.stub.SubmitTask(pb.SubmitTaskRequest(task_id=task_id, function=fn), timeout=5)
                break
            except grpc.RpcError as e:
                # every slot busy with a Submitter's no-op tasks (a slow machine runs them
                # slower than it admits them): not a refusal, so wait for one, as it does
                if e.code() != grpc.StatusCode.RESOURCE_EXHAUSTED or time.monotonic() > deadline:
                    raise
                time.sleep(0.01)
        self.state = None
        self.stream = w.stub.WatchTasks(pb.WatchTasksRequest(task_ids=[task_id]), timeout=60)
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        try:
            for ev in self.stream:
                if ev.kind == pb.TaskEvent.KIND_TERMINAL:
                    self.state = ev.result.state
        except grpc.RpcError:
            pass


def test_etcd_says_draining_before_the_first_refusal(worker_factory, etcd):
    w, key = start_worker(worker_factory, etcd)
    watcher = KeyWatcher(etcd.url, key)
    sub = Submitter(w.addr, etcd.url, key)
    try:
        assert wait_for(lambda: len(sub.accepted) >= 20, timeout=20), sub.errors
        long_task = Watched(w, "long", 3)  # keeps the worker draining (and its port open)
        t_signal = time.monotonic()
        w.proc.send_signal(signal.SIGTERM)
        sub.join(30)
        assert not sub.errors, sub.errors
        r = sub.refusal
        assert r is not None, "never refused"
        value, mod_rev, _ = r["etcd"]
        seen = wait_for(lambda: watcher.draining_seen, timeout=5)
        print("first refusal %.1f ms after SIGTERM; an etcd watcher saw draining %s; the record "
              "read after the refusal: draining=%s mod_revision=%d" %
              ((r["at"] - t_signal) * 1000,
               "%+.1f ms after the refusal" % ((seen[0] - r["at"]) * 1000) if seen else "never",
               value and value.get("draining"), mod_rev))
        # the refusal is the drain's (not a full table)
        assert "draining" in r["message"], r["message"]
        # etcd already said draining when the first refusal was sent ...
        assert value is not None and value["draining"] is True, (value, w.logs[-10:])
        # ... and so did health
        assert r["health"] == health_pb2.HealthCheckResponse.NOT_SERVING, r["health"]
        # the worker logged the put it waited for: that revision, before the refusal
        published = w.events("drain_published")
        assert published, w.logs[-15:]
        assert 0 < published[0]["revision"] <= mod_rev, (published[0], mod_rev)
        assert w.proc.wait(30) == 0, w.logs[-10:]
        long_task.thread.join(10)
        assert long_task.state == pb.TASK_STATE_SUCCEEDED
    finally:
        sub.stop.set()
        watcher.close()


def test_frozen_etcd_bounds_the_wait_and_work_accepted_meanwhile_is_drained(worker_factory):
    """etcd frozen (SIGSTOP): the draining put is never acknowledged. The worker keeps
    accepting (health NOT_SERVING, the worker_draining gauge 1 already) for
    drain_publish_timeout_ms, then refuses; a task accepted in that window runs to
    SUCCEEDED, and the worker exits 0."""
    etcd = Etcd()
    try:
        w, key = start_worker(worker_factory, etcd, "--drain-publish-timeout-ms", "8000",
                              "--metrics-addr", "127.0.0.1:0")
        etcd.proc.send_signal(signal.SIGSTOP)
        t0 = time.monotonic()
        w.proc.send_signal(signal.SIGTERM)
        assert wait_for(lambda: not_serving(w), timeout=10)
        assert wait_for(lambda: draining_gauge(w) == 1.0, timeout=3), draining_gauge(w)
        # within the window: not yet refusing (8 s is generous against a busy machine)
        try:
            in_window = Watched(w, "in-window", 10)  # outlasts the window: still draining
        except grpc.RpcError as e:
            with open("/proc/%d/stat" % etcd.proc.pid) as f:
                etcd_state = f.read().rsplit(")", 1)[1].split()[0]
            raise AssertionError("refused %.2f s after SIGTERM (etcd state %s): %s; %s" % (
                time.monotonic() - t0, etcd_state, e.details(),
                [r for r in w.logs if r.get("event") not in ("task_finished", "audit")][-10:]))
        refused_at = None
        deadline = time.monotonic() + 20
        n = 0
        while time.monotonic() < deadline:
            n += 1
            try:
                w.submit("probe-%d" % n, "noop")
            except grpc.RpcError as e:
                assert e.code() == grpc.StatusCode.UNAVAILABLE and "draining" in e.details(), e
                refused_at = time.monotonic()
                break
            time.sleep(0.05)
        assert refused_at is not None, "never started refusing"
        print("refusing %.2f s after SIGTERM with etcd frozen (drain_publish_timeout_ms 8000)" %
              (refused_at - t0))
        assert refused_at - t0 < 8.0 + 10.0  # the bound, and a margin for a loaded machine
        assert w.events("drain_publish_timeout"), w.logs[-10:]
        assert not w.events("drain_published")
        etcd.proc.send_signal(signal.SIGCONT)
        assert w.proc.wait(30) == 0, w.logs[-10:]
        in_window.thread.join(10)
        assert in_window.state == pb.TASK_STATE_SUCCEEDED, w.logs[-10:]
    finally:
        if etcd.proc.poll() is None:
            etcd.proc.send_signal(signal.SIGCONT)
        etcd.stop()


def draining_gauge(w):
    port = w.events("metrics_listening")[0]["port"]
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=5) as r:
        text = r.read().decode()
    m = re.search(r"^worker_draining(?:\{[^}]*\})? (\S+)$", text, re.M)
    return float(m.group(1)) if m else None


def not_serving(w):
    try:
        r = w.health.Check(health_pb2.HealthCheckRequest(), timeout=2)
    except grpc.RpcError:
        return False
    return r.status == health_pb2.HealthCheckResponse.NOT_SERVING


def test_without_etcd_health_goes_first_and_refusal_follows_at_once(worker_factory):
    w = worker_factory(executors=2)
    w.wait_serving()
    w.deploy("noop")
    w.deploy("sleepy")
    sub = Submitter(w.addr)
    assert wait_for(lambda: len(sub.accepted) >= 5, timeout=20), sub.errors
    long_task = Watched(w, "long", 3)  # keeps the worker draining (and its port open)
    w.proc.send_signal(signal.SIGTERM)
    sub.join(30)
    assert not sub.errors, sub.errors
    assert sub.refusal is not None and "draining" in sub.refusal["message"]
    assert sub.refusal["health"] == health_pb2.HealthCheckResponse.NOT_SERVING
    assert not w.events("drain_publish_timeout") and not w.events("drain_published")
    assert w.proc.wait(30) == 0
    long_task.thread.join(10)
    assert long_task.state == pb.TASK_STATE_SUCCEEDED


def test_drain_publish_timeout_is_a_setting(tmp_path):
    import subprocess
    from conftest import WORKER
    out = subprocess.run([WORKER, "--print-config", "--json", "--drain-publish-timeout-ms", "0",
                          "--code-root", str(tmp_path)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    cfg = json.loads(out.stdout)
    assert "drain_publish_timeout_ms" in json.dumps(cfg), out.stdout

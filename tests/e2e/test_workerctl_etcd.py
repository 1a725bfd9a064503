"""End-to-end: `workerctl submit` without --addr picks a worker from the etcd registry.

A real etcd (/usr/bin/etcd on loopback, free ports, a temporary data dir) and real
workers (conftest's Worker). The registrations are put into etcd by the test itself
through etcd's v3 JSON gateway, with the fields src/adapters/wk_etcd.c's
wk_etcd_worker_parse reads, so a test decides what the registry claims (free slots,
draining, ...) independently of what the worker really is: a worker started with
--task-slots 1 whose slot is taken answers RESOURCE_EXHAUSTED whatever it claims.

WK_TEST_ETCD overrides the etcd binary."""

import base64
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request

import grpc
import pytest

from conftest import WORKERCTL, pb

ETCD = os.environ.get("WK_TEST_ETCD") or "/usr/bin/etcd"
PREFIX = "/workers/"

# No proxy for loopback requests, whatever the environment says.
_HTTP = urllib.request.build_opener(urllib.request.ProxyHandler({}))


# ---- a real etcd -------------------------------------------------------------------


def _free_ports(n):
    socks, ports = [], []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
        ports.append(s.getsockname()[1])
    for s in socks:
        s.close()
    return ports


def _b64(text):
    return base64.b64encode(text.encode() if isinstance(text, str) else text).decode()


class Etcd(object):
    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="wk-etcd-e2e-")
        client_port, peer_port = _free_ports(2)
        self.endpoint = "http://127.0.0.1:%d" % client_port
        peer = "http://127.0.0.1:%d" % peer_port
        self.log = open(os.path.join(self.dir, "etcd.log"), "wb")
        self.proc = subprocess.Popen(
            [ETCD, "--name", "default", "--data-dir", os.path.join(self.dir, "data"),
             "--listen-client-urls", self.endpoint, "--advertise-client-urls", self.endpoint,
             "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
             "--initial-cluster", "default=" + peer,
             "--heartbeat-interval=10", "--election-timeout=100"],
            stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 15
        while True:
            try:
                self.call("/v3/kv/range", {"key": _b64("/probe")})
                break
            except (OSError, urllib.error.URLError):
                if self.proc.poll() is not None or time.time() > deadline:
                    self.stop()
                    raise RuntimeError("etcd did not start; see %s" % self.log.name)
                time.sleep(0.05)

    def call(self, path, body):
        req = urllib.request.Request(self.endpoint + path, data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        with _HTTP.open(req, timeout=5) as r:
            return json.loads(r.read().decode())

    def put(self, key, value):
        self.call("/v3/kv/put", {"key": _b64(key), "value": _b64(value)})

    def wipe(self):
        """Deletes every key (key "\\0" with range_end "\\0": the whole keyspace)."""
        self.call("/v3/kv/deleterange", {"key": _b64(b"\0"), "range_end": _b64(b"\0")})

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture(scope="module")
def etcd_server():
    e = Etcd()
    yield e
    e.stop()


@pytest.fixture
def etcd(etcd_server):
    etcd_server.wipe()
    yield etcd_server
    etcd_server.wipe()


def register(etcd, address, free_slots=4, task_slots=None, running_tasks=0, reserved_slots=0,
             ready=True, draining=False, prefix=PREFIX, **extra):
    """Puts a worker's heartbeat as the EtcdPublisher would (the fields
    wk_etcd_worker_parse reads), without a lease."""
    value = {
        "address": address,
        "task_slots": task_slots if task_slots is not None else max(free_slots, 1),
        "reserved_slots": reserved_slots,
        "running_tasks": running_tasks,
        "free_slots": free_slots,
        "ready": ready,
        "draining": draining,
        "deployment": "e2e",
        "service": "worker",
        "version": "0.1.0",
        "updated_unix_ms": int(time.time() * 1000),
    }
    value.update(extra)
    etcd.put(prefix + address, json.dumps(value))


# ---- workers ----------------------------------------------------------------------------


@pytest.fixture
def full(worker_factory):
    """A worker with one task slot, taken: SubmitTask answers RESOURCE_EXHAUSTED."""
    w = worker_factory("--task-slots", "1", executors=1)
    w.wait_serving()
    w.deploy("echo")
    w.stub.RequestTaskSlot(pb.RequestTaskSlotRequest(task_id="hog", ttl_ms=600000), timeout=10)
    with pytest.raises(grpc.RpcError) as e:
        w.stub.RequestTaskSlot(pb.RequestTaskSlotRequest(task_id="probe"), timeout=10)
    assert e.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    return w


@pytest.fixture
def free(worker_factory):
    w = worker_factory(executors=1)
    w.wait_serving()
    w.deploy("echo")
    w.deploy("sleepy")
    return w


def dead_address():
    (port,) = _free_ports(1)
    return "127.0.0.1:%d" % port


def ctl(*args, env=None, check=None, timeout=60):
    """Runs workerctl with neither WORKERCTL_ADDR nor WORKERCTL_ETCD (nor proxies)
    from the test's environment, plus `env`."""
    e = {k: v for k, v in os.environ.items()
         if k not in ("WORKERCTL_ADDR", "WORKERCTL_ETCD") and not k.lower().endswith("_proxy")}
    e.update(env or {})
    out = subprocess.run([WORKERCTL] + list(args), capture_output=True, text=True, env=e,
                         timeout=timeout)
    if check is not None:
        assert out.returncode == check, (out.returncode, out.stdout, out.stderr)
    return out


def task_on(worker, task_id):
    """The task's state on that worker, or None when the worker does not know it."""
    try:
        r = worker.stub.GetTaskResult(pb.GetTaskResultRequest(task_id=task_id), timeout=10)
        return r.state
    except grpc.RpcError as e:
        assert e.code() == grpc.StatusCode.NOT_FOUND, e
        return None


def last_json(text):
    return json.loads(text.strip().splitlines()[-1])


# ---- tests -----------------------------------------------------------------------------------


def test_submit_without_addr_lands_on_the_registered_worker(etcd, free):
    register(etcd, free.addr)
    out = ctl("submit", "echo", '{"hi": 1}', "--task-id", "e-1", "--etcd", etcd.endpoint,
              "--watch", check=0)
    lines = out.stdout.splitlines()
    assert lines[0].startswith("submitted task e-1 slot ") and lines[0].endswith(
        " on worker " + free.addr), out.stdout
    assert "SUCCEEDED" in out.stdout and '"hi"' in out.stdout
    assert "trying" not in out.stderr, out.stderr
    assert free.wait_terminal("e-1").state == pb.TASK_STATE_SUCCEEDED

    # Endpoints from $WORKERCTL_ETCD; --json names the worker.
    out = ctl("--json", "submit", "echo", "{}", "--task-id", "e-2",
              env={"WORKERCTL_ETCD": etcd.endpoint}, check=0)
    doc = last_json(out.stdout)
    assert doc["worker"] == free.addr and doc["task_id"] == "e-2" and not doc["duplicate"]
    assert free.wait_terminal("e-2").state == pb.TASK_STATE_SUCCEEDED

    # --json --watch: the result names the worker too.
    out = ctl("--json", "submit", "echo", "[1]", "--task-id", "e-3", "--watch",
              env={"WORKERCTL_ETCD": etcd.endpoint}, check=0)
    doc = last_json(out.stdout)
    assert doc["worker"] == free.addr and doc["state"] == "SUCCEEDED", doc
    assert doc["outputs"][0]["value"]["echo"] == [1]


def test_full_worker_is_skipped_after_resource_exhausted(etcd, full, free):
    # The full worker claims the most free slots, so it is the best candidate.
    register(etcd, full.addr, free_slots=8)
    register(etcd, free.addr, free_slots=1)
    out = ctl("submit", "sleepy", '{"seconds": 0.2}', "--task-id", "s-1", "--etcd",
              etcd.endpoint, "--watch", check=0)
    assert ("workerctl: %s answered RESOURCE_EXHAUSTED; trying %s" % (full.addr, free.addr)
            in out.stderr.splitlines()), out.stderr
    assert "on worker " + free.addr in out.stdout and "SUCCEEDED" in out.stdout, out.stdout
    assert task_on(free, "s-1") == pb.TASK_STATE_SUCCEEDED
    assert task_on(full, "s-1") is None

    # Same in --json: one JSON line on stdout, the skip on stderr.
    out = ctl("--json", "submit", "echo", "{}", "--task-id", "s-2", "--etcd", etcd.endpoint,
              check=0)
    assert len(out.stdout.strip().splitlines()) == 1
    assert last_json(out.stdout)["worker"] == free.addr
    assert "answered RESOURCE_EXHAUSTED; trying " + free.addr in out.stderr


def test_every_candidate_refusing_is_the_last_answer(etcd, full):
    register(etcd, full.addr, free_slots=3)
    out = ctl("submit", "echo", "{}", "--etcd", etcd.endpoint, check=3)
    assert "RESOURCE_EXHAUSTED" in out.stderr and "trying" not in out.stderr, out.stderr
    out = ctl("--json", "submit", "echo", "{}", "--etcd", etcd.endpoint, check=3)
    err = last_json(out.stdout)["error"]
    assert err["code"] == "RESOURCE_EXHAUSTED" and err["worker"] == full.addr, err


def test_draining_worker_is_never_chosen(etcd, full, free):
    # The free worker would take the task, but its registration says draining (with
    # the most free slots); the only other candidate is full.
    register(etcd, free.addr, free_slots=100, draining=True)
    register(etcd, full.addr, free_slots=1)
    for i in range(5):  # ties are spread at random: several tries, never the draining one
        out = ctl("submit", "echo", "{}", "--task-id", "d-%d" % i, "--etcd", etcd.endpoint,
                  check=3)
        assert free.addr not in out.stdout + out.stderr, out.stderr
        assert "RESOURCE_EXHAUSTED" in out.stderr
        assert task_on(free, "d-%d" % i) is None
    # Not ready and no free slot are not chosen either: nothing left.
    etcd.wipe()
    register(etcd, free.addr, free_slots=100, draining=True)
    register(etcd, "127.0.0.1:1", free_slots=5, ready=False)
    register(etcd, "127.0.0.1:2", free_slots=0, task_slots=4, running_tasks=4)
    out = ctl("submit", "echo", "{}", "--etcd", etcd.endpoint, check=4)
    assert "no ready worker with free slots registered under /workers/" in out.stderr


def test_no_candidate_is_exit_4(etcd, free):
    msg = ("workerctl: no ready worker with free slots registered under /workers/ in etcd %s"
           % etcd.endpoint)
    out = ctl("submit", "echo", "{}", "--etcd", etcd.endpoint, check=4)
    assert out.stderr.startswith(msg), out.stderr
    assert out.stdout == ""
    out = ctl("--json", "submit", "echo", "{}", env={"WORKERCTL_ETCD": etcd.endpoint}, check=4)
    err = last_json(out.stdout)["error"]
    assert err["code"] == "NO_WORKER" and err["message"].startswith(msg[len("workerctl: "):])
    # Registered under another prefix only: not found under /workers/, found under it.
    register(etcd, free.addr, prefix="/elsewhere/")
    ctl("submit", "echo", "{}", "--etcd", etcd.endpoint, check=4)
    out = ctl("submit", "echo", "{}", "--etcd", etcd.endpoint, "--prefix", "/elsewhere/",
              check=0)
    assert "on worker " + free.addr in out.stdout
    # An unreachable etcd is exit 4 too, and says so.
    out = ctl("--deadline-ms", "1000", "submit", "echo", "{}", "--etcd", "http://" + dead_address(),
              check=4)
    assert "cannot reach etcd" in out.stderr, out.stderr


def test_unreachable_candidates_are_skipped_within_the_bound(etcd, free):
    dead = dead_address()
    register(etcd, dead, free_slots=50)
    register(etcd, free.addr, free_slots=1)
    out = ctl("submit", "echo", "{}", "--task-id", "u-1", "--etcd", etcd.endpoint, check=0)
    assert "workerctl: cannot reach %s (UNAVAILABLE); trying %s" % (dead, free.addr) in out.stderr
    assert task_on(free, "u-1") is not None

    # Ten dead candidates ahead of the live one: at most 8 are tried.
    etcd.wipe()
    deads = [dead_address() for _ in range(10)]
    for d in deads:
        register(etcd, d, free_slots=50)
    register(etcd, free.addr, free_slots=1)
    out = ctl("submit", "echo", "{}", "--task-id", "u-2", "--etcd", etcd.endpoint, check=4)
    skips = [l for l in out.stderr.splitlines() if "; trying " in l]
    assert len(skips) == 7, out.stderr
    assert "none of the 8 workers tried took the task" in out.stderr
    assert "stopped at the limit of 8 tries" in out.stderr
    assert free.addr not in out.stderr and task_on(free, "u-2") is None


def test_explicit_addr_keeps_todays_behaviour(etcd, full, free):
    register(etcd, free.addr)
    env = {"WORKERCTL_ETCD": etcd.endpoint}
    out = ctl("--addr", full.addr, "submit", "echo", "{}", env=env, check=3)
    assert out.stderr.startswith("workerctl: RESOURCE_EXHAUSTED: "), out.stderr
    assert "trying" not in out.stderr
    out = ctl("--addr", free.addr, "submit", "echo", "{}", "--task-id", "x-1", env=env, check=0)
    assert out.stdout.startswith("submitted task x-1 slot ") and "worker" not in out.stdout
    out = ctl("--addr", free.addr, "--json", "submit", "echo", "{}", "--task-id", "x-2", env=env,
              check=0)
    assert "worker" not in last_json(out.stdout)
    # $WORKERCTL_ADDR counts as --addr.
    out = ctl("submit", "echo", "{}", env=dict(env, WORKERCTL_ADDR=full.addr), check=3)
    assert "RESOURCE_EXHAUSTED" in out.stderr and free.addr not in out.stderr
    # ... unless --etcd or --prefix ask for etcd explicitly.
    out = ctl("submit", "echo", "{}", "--etcd", etcd.endpoint,
              env={"WORKERCTL_ADDR": full.addr}, check=0)
    assert "on worker " + free.addr in out.stdout
    # --addr with --etcd, or a slot id without --addr, make no sense.
    ctl("--addr", free.addr, "submit", "echo", "{}", "--etcd", etcd.endpoint, check=2)
    ctl("submit", "echo", "{}", "--slot-id", "1", "--etcd", etcd.endpoint, check=2)
    # Every command follows the same rule (issue 13 §4): with $WORKERCTL_ETCD, get finds
    # the task on the registered worker that holds it (it used to ask 127.0.0.1:7070).
    out = ctl("--deadline-ms", "1000", "--json", "get", "x-1", env=env, check=0)
    assert last_json(out.stdout)["worker"] == free.addr


def test_workers_lists_the_registrations(etcd, full, free):
    register(etcd, full.addr, free_slots=8)
    register(etcd, free.addr, free_slots=1, running_tasks=2, task_slots=3)
    register(etcd, "127.0.0.1:3", free_slots=5, draining=True)
    out = ctl("workers", "--etcd", etcd.endpoint, check=0)
    rows = {l.split()[0]: l.split() for l in out.stdout.splitlines()[1:]}
    assert rows[full.addr][1:3] == ["ready", "8/8"], out.stdout
    assert rows[free.addr][1:4] == ["ready", "1/3", "2"], out.stdout
    assert rows["127.0.0.1:3"][1] == "draining"
    out = ctl("--json", "workers", env={"WORKERCTL_ETCD": etcd.endpoint}, check=0)
    docs = {d["address"]: d for d in map(json.loads, out.stdout.splitlines())}
    assert set(docs) == {full.addr, free.addr, "127.0.0.1:3"}
    assert docs["127.0.0.1:3"]["state"] == "draining" and docs[free.addr]["valid"]

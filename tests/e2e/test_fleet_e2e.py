"""One fleet (issue 15 §4): one real etcd, several real workers on this machine.

- A fleet deploy while tasks run: running tasks keep their epoch; new tasks get the new
  one on every worker; identical content deployed again keeps its epoch; a task pinned
  to an epoch only lands on workers that hold it; a deploy that fails on one worker moves
  CURRENT nowhere.
- A rolling restart under load (SIGTERM one worker at a time, restart it) while clients
  submit continuously: no task is lost.
- A kill -9, after which each client wastes at most one attempt on the dead worker.

workerctl deploy --fleet is the real command; tasks are submitted by the Python client
(worker_client) with etcd discovery and by direct gRPC to each worker."""

import json
import os
import signal
import subprocess
import threading
import time

import pytest

from conftest import WORKERCTL, Worker, pb
from etcd_fixture import Etcd, wait_for
from pyclient_support import deploy_all

import worker_client as wc

PREFIX = "/workers/"


def ver_source(v, extra=""):
    return ("import time\n"
            "def handler(args, ctx):\n"
            "    time.sleep((args or {}).get('s', 0))\n"
            "    return {'v': %r, 'epoch': ctx.epoch}\n%s" % (v, extra))


def ctl(*args, check=None, timeout=120):
    p = subprocess.run([WORKERCTL] + list(args), capture_output=True, text=True, timeout=timeout,
                       env=dict(os.environ, WORKERCTL_STATE_DIR=""))
    if check is not None:
        assert p.returncode == check, (p.returncode, p.stdout, p.stderr)
    return p


def write_tree(path, files):
    os.makedirs(path, exist_ok=True)
    for rel, text in files.items():
        full = os.path.join(path, rel)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        with open(full, "w") as f:
            f.write(text)
    return path


class Fleet(object):
    """One etcd and workers registered in it, with DeployCode enabled."""

    def __init__(self, tmp):
        self.tmp = tmp
        self.etcd = Etcd()
        self.workers = []

    def start(self, *extra, deploy=True, name=None, prefix=PREFIX):
        args = ["--etcd-endpoints", self.etcd.url, "--heartbeat-interval-ms", "200",
                "--etcd-lease-ttl-s", "30"]
        if deploy:
            args += ["--deploy-enabled", "true"]
        w = Worker(os.path.join(self.tmp, name or "w%d" % len(self.workers)),
                   extra_args=args + list(extra))
        w.wait_serving()
        self.workers.append(w)
        assert wait_for(lambda: prefix + w.addr in self.etcd.range_prefix(prefix), timeout=10)
        return w

    def record(self, w):
        return self.etcd.range_prefix(PREFIX).get(PREFIX + w.addr, ({}, 0))[0]

    def deploy(self, fn, src, *extra, check=0):
        return ctl("deploy", "--fleet", "--etcd", self.etcd.url, *extra, fn, src, check=check)

    def close(self):
        for w in self.workers:
            if w.proc.poll() is None:
                w.stop()
        self.etcd.stop()


@pytest.fixture
def fleet(tmp_path):
    f = Fleet(str(tmp_path))
    yield f
    f.close()


def current(w, fn):
    out = ctl("epochs", "--json", "--code-root", w.code_root, fn, check=0)
    return json.loads(out.stdout)["current"]


def run(w, task_id, fn, args=None, epoch=None):
    kw = {} if epoch is None else {"epoch": epoch}
    w.submit(task_id, fn, args, **kw)
    return w


def value(w, task_id):
    r = w.wait_terminal(task_id, timeout=60)
    assert r.state == pb.TASK_STATE_SUCCEEDED, r
    return json.loads(r.outputs[0].value)


def test_fleet_deploy_while_tasks_run(fleet, tmp_path):
    ws = [fleet.start() for _ in range(3)]
    v1 = write_tree(str(tmp_path / "v1"), {"main.py": ver_source(1)})
    v2 = write_tree(str(tmp_path / "v2"), {"main.py": ver_source(2), "pkg/data.txt": "x\n"})
    out = fleet.deploy("ver", v1)
    e1 = int(out.stdout)
    assert "CURRENT of ver is epoch %d on every worker (3)" % e1 in out.stderr, out.stderr
    assert all(current(w, "ver") == e1 for w in ws)

    # tasks running on every worker while the next deploy happens
    for i, w in enumerate(ws):
        run(w, "long-%d" % i, "ver", {"s": 2})
    out = fleet.deploy("ver", v2, "--parallel", "2")
    e2 = int(out.stdout)
    assert e2 > e1
    for i, w in enumerate(ws):
        assert current(w, "ver") == e2
        assert value(w, "long-%d" % i) == {"v": 1, "epoch": e1}  # kept its epoch
        run(w, "new-%d" % i, "ver")
        assert value(w, "new-%d" % i) == {"v": 2, "epoch": e2}  # the new one everywhere

    # identical content again: the same epoch (fleet-wide), CURRENT back to it
    out = fleet.deploy("ver", v1, "--json")
    j = json.loads(out.stdout)
    assert j["epoch"] == e1 and j["epoch_existed"] and j["current_moved"]
    assert all(x["ok"] and x["reused"] for x in j["workers"])
    assert all(current(w, "ver") == e1 for w in ws)
    assert int(fleet.deploy("ver", v2).stdout) == e2

    # an epoch only two workers hold: pinned tasks land only there
    v3 = write_tree(str(tmp_path / "v3"), {"main.py": ver_source(3)})
    holders = ws[:2]
    out = fleet.deploy("ver", v3, "--addr", ",".join(w.addr for w in holders))
    e3 = int(out.stdout)
    assert current(ws[2], "ver") == e2
    assert wait_for(lambda: all(
        any(e["epoch"] == e3 for e in fleet.record(w).get("code", {}).get("ver", {}).get(
            "epochs", [])) for w in holders), timeout=10)
    with wc.Client(etcd=fleet.etcd.url, discovery_ttl=0) as c:
        fs = [c.submit("ver", None, epoch=e3) for _ in range(9)]
        assert [f.result(60) for f in fs] == [{"v": 3, "epoch": e3}] * 9
        assert {f.address for f in fs} <= {w.addr for w in holders}
        assert c.stats()["failovers"] == 0
    for i in range(3):
        out = ctl("--json", "submit", "ver", "null", "--epoch", str(e3), "--etcd",
                  fleet.etcd.url, check=0)
        assert json.loads(out.stdout.splitlines()[-1])["worker"] in {w.addr for w in holders}

    # a deploy that fails on one worker (DeployCode not enabled there) moves CURRENT nowhere
    off = fleet.start(deploy=False, name="off")
    v4 = write_tree(str(tmp_path / "v4"), {"main.py": ver_source(4)})
    before = {w.addr: current(w, "ver") for w in ws}
    out = fleet.deploy("ver", v4, check=1)
    assert out.stdout == ""
    assert "CURRENT of ver moved nowhere" in out.stderr and off.addr in out.stderr, out.stderr
    assert {w.addr: current(w, "ver") for w in ws} == before
    # code that does not import fails on every worker, and nothing moves either
    bad = write_tree(str(tmp_path / "bad"), {"main.py": "def handler(:\n"})
    out = fleet.deploy("ver", bad, "--addr", ",".join(w.addr for w in ws), check=1)
    assert {w.addr: current(w, "ver") for w in ws} == before


def test_rolling_deploy_stops_at_the_first_failure(fleet, tmp_path):
    ws = [fleet.start() for _ in range(2)]
    off = fleet.start(deploy=False, name="off")
    v1 = write_tree(str(tmp_path / "v1"), {"main.py": ver_source(1)})
    order = [ws[0].addr, off.addr, ws[1].addr]
    out = fleet.deploy("ver", v1, "--rolling", "--addr", ",".join(order), "--json", check=1)
    j = json.loads(out.stdout)
    assert [x["ok"] for x in j["workers"]] == [True, False, False]
    assert [x["tried"] for x in j["workers"]] == [True, True, False]
    assert current(ws[0], "ver") == j["epoch"] and current(ws[1], "ver") == 0
    assert "stopped at the first failure" in out.stderr


def test_rolling_restart_under_load_and_kill9(fleet, tmp_path, monkeypatch):
    # Each time a worker refuses a client's reservation (draining, shutting down), the
    # registry is read right after the answer: a worker publishes draining (and etcd
    # acknowledges it) before it refuses, so that read must show the record draining or
    # gone. Were it still "ready, not draining", a client reading the registry then would
    # pick the worker and be refused: the client was refused on a fresh record.
    from worker_client import _engine
    seen = []
    reserve = _engine.Engine._reserve

    async def observed(self, conn, h):
        try:
            return await reserve(self, conn, h)
        except wc.WorkerUnavailable as e:
            if "not accepting tasks" in str(e) or "shutting down" in str(e):
                rec = fleet.etcd.range_prefix(PREFIX).get(PREFIX + conn.addr)
                seen.append((conn.addr, None if rec is None else rec[0]["draining"], str(e)))
            raise

    monkeypatch.setattr(_engine.Engine, "_reserve", observed)
    ws = [fleet.start("--task-slots", "16", "--drain-timeout-ms", "5000") for _ in range(3)]
    for w in ws:
        deploy_all(w)
    stop = threading.Event()
    results, errors = [], []
    clients = [wc.Client(etcd=fleet.etcd.url, discovery_ttl=0, slot_wait=5) for _ in range(2)]

    def load(c):
        i = 0
        while not stop.is_set():
            try:
                results.append(c.submit("square", i).result(60) == i * i)
            except wc.WorkerError as e:  # noqa: PERF203
                errors.append(e)
            i += 1

    threads = [threading.Thread(target=load, args=(c,)) for c in clients for _ in range(2)]
    for t in threads:
        t.start()
    try:
        time.sleep(1)
        for k in range(len(ws)):  # SIGTERM one worker at a time, then a new one in its place
            old = ws[k]
            assert old.stop(signal.SIGTERM) == 0
            fleet.workers.remove(old)
            # the same code root: a restart, not a new host
            ws[k] = fleet.start("--task-slots", "16", "--drain-timeout-ms", "5000",
                                name=os.path.basename(old.tmp))
            time.sleep(0.5)
        time.sleep(0.5)
    finally:
        stop.set()
        for t in threads:
            t.join(120)
    # no task lost, none failed: a worker that refused after giving a slot (draining) or
    # went away is left for the next one (nothing was admitted there)
    assert results and all(results), (len(results), results.count(False))
    assert errors == [], errors[:3]
    # a refusal came only from a record read before the drain was published
    assert all(draining is not False for _, draining, _ in seen), seen
    refused = [c.stats()["refused_by"] for c in clients]

    # kill -9: each client wastes at most one attempt on the dead worker
    dead = ws[0]
    dead.proc.send_signal(signal.SIGKILL)
    dead.proc.wait()
    for c in clients:
        before = c.stats()["refused_by"].get(dead.addr, 0)
        fs = [c.submit("square", i) for i in range(30)]
        assert [f.result(60) for f in fs] == [i * i for i in range(30)]
        assert c.stats()["refused_by"].get(dead.addr, 0) - before <= 1, c.stats()
    assert PREFIX + dead.addr in fleet.etcd.range_prefix(PREFIX)  # its record is stale
    for c in clients:
        c.close()
    print("refusals during the rolling restart:", refused, "refused reservations:", len(seen))

"""worker_client with etcd discovery: a real etcd (etcd_fixture) and real workers that
register themselves, or whose registration the test writes (so the registry can claim
free slots a worker does not have). Client(etcd=...) follows workerctl's rules: the
prefix (default /workers/), eligible workers best first, moving on at
RESOURCE_EXHAUSTED and UNAVAILABLE."""

import time

import grpc
import pytest

from conftest import pb
from etcd_fixture import etcd, free_port, wait_for  # noqa: F401 (etcd: a fixture)
from pyclient_support import deploy_all

import worker_client as wc

PREFIX = "/workers/"


def registered(worker_factory, etcd, *extra):
    w = worker_factory("--etcd-endpoints", etcd.url, "--heartbeat-interval-ms", "200", *extra)
    w.wait_serving()
    deploy_all(w)
    assert wait_for(lambda: PREFIX + w.addr in etcd.range_prefix(PREFIX), timeout=10)
    return w


def fake_record(etcd, key, addr, free, **kw):
    value = {"address": addr, "task_slots": free, "reserved_slots": 0, "running_tasks": 0,
             "free_slots": free, "ready": True, "draining": False, "deployment": "block",
             "service": "worker", "version": "test", "updated_unix_ms": int(time.time() * 1000)}
    value.update(kw)
    etcd.put(key, value)


def test_failover_across_two_registered_workers(worker_factory, etcd):
    # a has more free slots, so it is every submit's first choice while registered
    a = registered(worker_factory, etcd, "--task-slots", "32", "--etcd-lease-ttl-s", "30")
    b = registered(worker_factory, etcd, "--task-slots", "8")
    with wc.Client(etcd=etcd.url, discovery_ttl=0, reconnect_time=2) as c:
        ws = {x.address: x for x in c.workers()}
        assert set(ws) == {a.addr, b.addr} and ws[a.addr].free_slots == 32
        assert all(x.eligible for x in ws.values())
        fs = [c.submit("square", i) for i in range(6)]
        assert [f.result(60) for f in fs] == [i * i for i in range(6)]
        assert {f.address for f in fs} == {a.addr}
        running = c.submit("sleepy", {"seconds": 60})
        assert wait_for(lambda: running.address is not None)
        assert running.address == a.addr
        # a dies; its key stays in etcd for its 30 s lease, still claiming 32 free slots
        a.kill()
        fs = [c.submit("square", i) for i in range(6)]
        assert [f.result(60) for f in fs] == [i * i for i in range(6)]
        assert {f.address for f in fs} == {b.addr}
        assert c.stats()["failovers"] >= 1
        assert PREFIX + a.addr in etcd.range_prefix(PREFIX)
        # the task a was running is lost with it: its future says so
        with pytest.raises(wc.WorkerUnavailable) as e:
            running.result(60)
        assert e.value.address == a.addr and e.value.task_id == running.task_id


def test_moves_on_at_resource_exhausted_and_keeps_the_prefix(worker_factory, etcd):
    # full: one slot, taken; the registry claims 100 free (it is the test's record)
    full = worker_factory("--task-slots", "1")
    spare = worker_factory("--task-slots", "4")
    for w in (full, spare):
        w.wait_serving()
        deploy_all(w)
    full.submit("hog", "sleepy", {"seconds": 60})
    prefix = "/pool-a/"
    fake_record(etcd, prefix + "full", full.addr, 100)
    fake_record(etcd, prefix + "spare", spare.addr, 2)
    fake_record(etcd, prefix + "draining", spare.addr, 500, draining=True)
    fake_record(etcd, PREFIX + "other", full.addr, 1000)  # another prefix: never seen
    etcd.put(prefix + "garbage", "not a heartbeat")
    with wc.Client(etcd=etcd.url, prefix=prefix) as c:
        f = c.submit("square", 9)
        assert f.result(60) == 81 and f.address == spare.addr
        listed = {x.key: x for x in c.workers()}
        assert set(listed) == {prefix + k for k in ("full", "spare", "draining", "garbage")}
        assert not listed[prefix + "garbage"].valid and not listed[prefix + "draining"].eligible
    # every worker full: NoSlot, naming how many were tried
    fake_record(etcd, prefix + "spare", full.addr, 2)
    with wc.Client(etcd=etcd.url, prefix=prefix) as c:
        with pytest.raises(wc.NoSlot) as e:
            c.submit("square", 1).result(60)
        assert e.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "none of the 1 workers tried" in str(e.value)
    full.stub.CancelTask(pb.CancelTaskRequest(task_id="hog"))


def test_no_worker_and_no_etcd(worker_factory, etcd):
    with wc.Client(etcd=etcd.url, prefix="/empty/") as c:
        with pytest.raises(wc.WorkerUnavailable) as e:
            c.submit("square", 1).result(30)
        assert "no ready worker with free slots registered under /empty/" in str(e.value)
        assert c.workers() == []
    dead = "http://127.0.0.1:%d" % free_port()
    with wc.Client(etcd=dead) as c:
        with pytest.raises(wc.WorkerUnavailable) as e:
            c.submit("square", 1).result(30)
        assert "cannot reach etcd" in str(e.value)
    # a dead endpoint first: the next one answers, as with workerctl's etcd client
    w = registered(worker_factory, etcd)
    with wc.Client(etcd=dead + "," + etcd.url) as c:
        assert c.submit("square", 5).result(60) == 25
    # every registered worker full (its record says so): NoSlot, not "no worker"
    fake_record(etcd, "/full/x", w.addr, 0)
    with wc.Client(etcd=etcd.url, prefix="/full/") as c:
        with pytest.raises(wc.NoSlot) as e:
            c.submit("square", 1).result(30)
        assert "out of slots" in str(e.value)
    with pytest.raises(ValueError):
        wc.Client(etcd="127.0.0.1:2379")
    with pytest.raises(ValueError):
        wc.Client(etcd=etcd.url, prefix="")

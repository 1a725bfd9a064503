"""Operating the Worker with a real etcd and three workers: registration and its
values, a killed worker's key expiring, etcd restarted and wiped, draining, and
SIGTERM under load losing no accepted task."""

import os
import signal
import threading
import time

import grpc
import pytest

from conftest import pb, pb_grpc
from etcd_fixture import etcd, wait_for  # noqa: F401 (etcd: a fixture)

PREFIX = "/workers/"


def start(worker_factory, etcd, *extra, **kw):
    w = worker_factory("--etcd-endpoints", etcd.url, "--etcd-lease-ttl-s", "2",
                       "--heartbeat-interval-ms", "200", *extra, **kw)
    w.wait_serving()
    return w


def test_three_workers_register_with_their_heartbeat(worker_factory, etcd):
    ws = [start(worker_factory, etcd, "--task-slots", str(4 + i)) for i in range(3)]
    kvs = wait_for(lambda: len(etcd.range_prefix(PREFIX)) == 3 and etcd.range_prefix(PREFIX))
    assert sorted(kvs) == sorted(PREFIX + w.addr for w in ws)
    for i, w in enumerate(ws):
        value, lease = kvs[PREFIX + w.addr]
        assert lease != 0 and 0 < etcd.lease_ttl(lease) <= 2
        assert value["address"] == w.addr and value["task_slots"] == 4 + i
        assert value["ready"] is True and value["draining"] is False
        assert value["free_slots"] == 4 + i and value["deployment"] == "block"
    # the value follows the slot table
    ws[0].stub.RequestTaskSlot(pb.RequestTaskSlotRequest(task_id="r1", ttl_ms=60000))
    key = PREFIX + ws[0].addr
    assert wait_for(lambda: etcd.range_prefix(PREFIX)[key][0]["reserved_slots"] == 1, timeout=5)


def test_killed_worker_key_gone_within_ttl(worker_factory, etcd):
    w = start(worker_factory, etcd)
    key = PREFIX + w.addr
    assert wait_for(lambda: key in etcd.range_prefix(PREFIX))
    w.proc.kill()
    w.proc.wait()
    t0 = time.time()
    assert wait_for(lambda: key not in etcd.range_prefix(PREFIX), timeout=4)
    assert time.time() - t0 <= 3.0  # TTL 2 s + 1 s


def test_etcd_restarted_and_wiped_reregisters(worker_factory, etcd):
    w = start(worker_factory, etcd)
    key = PREFIX + w.addr
    assert wait_for(lambda: key in etcd.range_prefix(PREFIX))
    etcd.kill()
    time.sleep(1)
    etcd.start()
    assert wait_for(lambda: key in etcd.range_prefix(PREFIX), timeout=10)
    etcd.wipe()
    etcd.start()
    assert wait_for(lambda: key in etcd.range_prefix(PREFIX), timeout=10)
    etcd.delete(key)  # removed by someone else: back at the next refresh
    assert wait_for(lambda: key in etcd.range_prefix(PREFIX), timeout=5)
    # the worker kept serving all along
    assert w.health.Check(__import__("conftest").health_pb2.HealthCheckRequest(), timeout=2).status == 1


def test_stand_alone_without_etcd_says_so_once(worker_factory):
    w = worker_factory()
    w.wait_serving()
    assert wait_for(lambda: w.events("registration_off"), timeout=5)
    time.sleep(0.3)
    assert len(w.events("registration_off")) == 1


def test_sigterm_under_load_loses_no_accepted_task(worker_factory, etcd):
    w = start(worker_factory, etcd, "--task-slots", "32", "--drain-timeout-ms", "1500")
    w.deploy("sleepy")
    key = PREFIX + w.addr
    assert wait_for(lambda: key in etcd.range_prefix(PREFIX))
    accepted, results, errors = [], {}, []
    lock = threading.Lock()
    stop = threading.Event()

    def client(k):
        ch = grpc.insecure_channel(w.addr)
        stub = pb_grpc.WorkerServiceStub(ch)
        n = 0
        while not stop.is_set():
            tid = "load-%d-%d" % (k, n)
            n += 1
            secs = 0.1 if n % 3 else 5
            fn = pb.FunctionCallConfig(name="sleepy", args=('{"seconds": %s}' % secs).encode())
            try:
                stub.SubmitTask(pb.SubmitTaskRequest(task_id=tid, function=fn), timeout=5)
            except grpc.RpcError as e:
                # refused (draining, or every slot busy): not accepted, nothing to check
                if e.code() not in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.RESOURCE_EXHAUSTED):
                    errors.append((tid, e.code()))
                continue
            with lock:
                accepted.append(tid)
            try:
                for ev in stub.WatchTasks(pb.WatchTasksRequest(task_ids=[tid]), timeout=30):
                    if ev.kind == pb.TaskEvent.KIND_TERMINAL:
                        with lock:
                            results[tid] = ev.result.state
            except grpc.RpcError as e:
                errors.append((tid, e.code()))
        ch.close()

    threads = [threading.Thread(target=client, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    time.sleep(1.5)
    w.proc.send_signal(signal.SIGTERM)
    # draining: the registration says so before the key goes
    time.sleep(0.3)
    kv = etcd.range_prefix(PREFIX).get(key)
    assert kv is None or kv[0]["draining"] is True
    assert w.proc.wait(30) == 0
    stop.set()
    for t in threads:
        t.join(30)
    assert accepted
    missing = [t for t in accepted if t not in results]
    assert not missing, "accepted tasks without a terminal event: %s (errors %s)" % (missing[:5], errors[:5])
    assert all(s in (pb.TASK_STATE_SUCCEEDED, pb.TASK_STATE_FAILED) for s in results.values())
    assert key not in etcd.range_prefix(PREFIX)  # deregistered


def test_shadow_traffic_reaches_the_target_without_its_result_handler(worker_factory, tmp_path):
    target = worker_factory()  # no writer configured: it would refuse a result handler
    target.wait_serving()
    target.deploy("echo")
    primary = worker_factory("--shadow-target-addr", target.addr, "--output-dir", str(tmp_path))
    primary.wait_serving()
    primary.deploy("echo")
    handler = pb.ResultHandler(type="file")
    primary.submit("shadowed", "echo", {"x": 1}, result_handler=handler)
    p = primary.wait_terminal("shadowed")
    assert p.state == pb.TASK_STATE_SUCCEEDED, p.failure_message
    assert [r.plugin for r in p.plugin_results] == ["file"]  # the primary kept its handler
    # the mirror arrived with the same task id, and ran without the handler
    t = wait_for(lambda: _result_or_none(target, "shadowed"), timeout=10)
    assert t is not None
    t = target.wait_terminal("shadowed")
    assert t.state == pb.TASK_STATE_SUCCEEDED and t.failure_code == 0


def _result_or_none(w, task_id):
    try:
        return w.stub.GetTaskResult(pb.GetTaskResultRequest(task_id=task_id), timeout=2)
    except grpc.RpcError:
        return None


def test_shadow_target_down_never_delays_or_fails_the_primary(worker_factory):
    from etcd_fixture import free_port
    # 50 submissions back to back: give them 64 slots, so that a slow machine where
    # the echo calls finish later than the submissions arrive still admits every one
    primary = worker_factory("--shadow-target-addr", "127.0.0.1:%d" % free_port(),
                             "--task-slots", "64")
    primary.wait_serving()
    primary.deploy("echo")
    t0 = time.time()
    for i in range(50):
        primary.submit("p-%d" % i, "echo", {"i": i})
    assert time.time() - t0 < 5
    for i in range(50):
        assert primary.wait_terminal("p-%d" % i).state == pb.TASK_STATE_SUCCEEDED
    assert primary.stop() == 0
    stopped = primary.events("shadow_stopped")
    assert stopped and stopped[0]["offered"] == 50
    assert stopped[0]["mirrored"] == 0 and stopped[0]["failed"] + stopped[0]["dropped"] + stopped[0].get("discarded", 0) >= 1

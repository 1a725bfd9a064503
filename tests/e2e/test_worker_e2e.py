"""End-to-end: the real worker binary, real Python executors, a real gRPC client."""

import json
import os
import signal
import stat
import subprocess
import threading
import time

import grpc
import pytest

from conftest import WORKERCTL, health_pb2, output_json, pb

TERMINAL = (pb.TASK_STATE_SUCCEEDED, pb.TASK_STATE_FAILED, pb.TASK_STATE_CANCELLED)


def code_of(exc_info):
    return exc_info.value.code()


# ---- each RPC, slots and submission ---------------------------------------------


def test_submit_without_slot_runs_the_function(worker):
    resp = worker.submit("t-plain", "echo", {"x": 1})
    assert resp.task_id == "t-plain" and resp.slot_id != 0 and not resp.duplicate
    assert resp.accepted_unix_ms > 1700000000000
    r = worker.wait_terminal("t-plain")
    assert r.state == pb.TASK_STATE_SUCCEEDED, r
    assert r.phase == pb.PHASE_DONE and r.code_epoch == 1
    assert output_json(r) == {"echo": {"x": 1}, "index": 0, "epoch": 1}
    assert r.statistic.calls_total == 1 and r.statistic.calls_succeeded == 1
    assert r.statistic.finished_unix_ms >= r.statistic.accepted_unix_ms
    deadline = time.time() + 5
    while not [e for e in worker.events("task_finished") if e["task_id"] == "t-plain"]:
        assert time.time() < deadline, "no task_finished log line"
        time.sleep(0.02)
    line = [e for e in worker.events("task_finished") if e["task_id"] == "t-plain"][0]
    assert line["state"] == "SUCCEEDED" and line["function"] == "echo"


def test_slot_reservation_then_submit(worker):
    slot = worker.stub.RequestTaskSlot(pb.RequestTaskSlotRequest(task_id="t-slot", ttl_ms=5000))
    assert slot.slot_id != 0
    assert slot.lease_expires_unix_ms > int(time.time() * 1000)
    again = worker.stub.RequestTaskSlot(pb.RequestTaskSlotRequest(task_id="t-slot", ttl_ms=5000))
    assert again.slot_id == slot.slot_id and again.lease_expires_unix_ms == slot.lease_expires_unix_ms
    resp = worker.submit("t-slot", "echo", {"y": 2}, slot_id=slot.slot_id)
    assert resp.slot_id == slot.slot_id
    assert worker.wait_terminal("t-slot").state == pb.TASK_STATE_SUCCEEDED


def test_duplicate_submit_runs_once(worker, tmp_path):
    path = str(tmp_path / "runs.txt")
    first = worker.submit("t-dup", "counter", {"path": path})
    second = worker.submit("t-dup", "counter", {"path": path})
    assert not first.duplicate and second.duplicate and second.slot_id == first.slot_id
    assert worker.wait_terminal("t-dup").state == pb.TASK_STATE_SUCCEEDED
    third = worker.submit("t-dup", "counter", {"path": path})
    assert third.duplicate and third.state == pb.TASK_STATE_SUCCEEDED
    slot = worker.stub.RequestTaskSlot(pb.RequestTaskSlotRequest(task_id="t-dup"))
    assert slot.state == pb.TASK_STATE_SUCCEEDED and slot.result.task_id == "t-dup"
    time.sleep(0.3)
    with open(path) as f:
        assert f.read().splitlines() == ["t-dup"]


def test_reused_id_with_another_request_is_already_exists(worker):
    worker.submit("t-reuse", "echo", {"a": 1})
    with pytest.raises(grpc.RpcError) as e:
        worker.submit("t-reuse", "echo", {"a": 2})
    assert code_of(e) == grpc.StatusCode.ALREADY_EXISTS
    assert "different request" in e.value.details()


# ---- the error mapping ------------------------------------------------------------


def test_invalid_argument(worker):
    with pytest.raises(grpc.RpcError) as e:
        worker.submit("bad id with spaces", "echo", {})
    assert code_of(e) == grpc.StatusCode.INVALID_ARGUMENT
    assert "task_id" in e.value.details()
    with pytest.raises(grpc.RpcError) as e:
        worker.stub.GetTaskResult(pb.GetTaskResultRequest(task_id="x" * 129))
    assert code_of(e) == grpc.StatusCode.INVALID_ARGUMENT


def test_no_slot_is_resource_exhausted(worker_factory):
    w = worker_factory("--task-slots", "1")
    w.wait_serving()
    w.stub.RequestTaskSlot(pb.RequestTaskSlotRequest(task_id="a", ttl_ms=60000))
    with pytest.raises(grpc.RpcError) as e:
        w.stub.RequestTaskSlot(pb.RequestTaskSlotRequest(task_id="b"))
    assert code_of(e) == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "slot" in e.value.details()


def test_foreign_slot_is_failed_precondition_and_lapsed_lease_is_aborted(worker):
    a = worker.stub.RequestTaskSlot(pb.RequestTaskSlotRequest(task_id="owner", ttl_ms=60000))
    with pytest.raises(grpc.RpcError) as e:
        worker.submit("thief", "echo", {}, slot_id=a.slot_id)
    assert code_of(e) == grpc.StatusCode.FAILED_PRECONDITION
    short = worker.stub.RequestTaskSlot(pb.RequestTaskSlotRequest(task_id="late", ttl_ms=100))
    time.sleep(0.8)  # past the lease and a timer tick
    with pytest.raises(grpc.RpcError) as e:
        worker.submit("late", "echo", {}, slot_id=short.slot_id)
    assert code_of(e) == grpc.StatusCode.ABORTED
    assert "lease" in e.value.details()


def test_not_found(worker):
    with pytest.raises(grpc.RpcError) as e:
        worker.stub.GetTaskResult(pb.GetTaskResultRequest(task_id="never-submitted"))
    assert code_of(e) == grpc.StatusCode.NOT_FOUND
    with pytest.raises(grpc.RpcError) as e:
        worker.stub.CancelTask(pb.CancelTaskRequest(task_id="never-submitted"))
    assert code_of(e) == grpc.StatusCode.NOT_FOUND


GATED = ("import os, time\n"
         "def handler(args, ctx):\n"
         "    deadline = time.time() + 60\n"
         "    while not os.path.exists(args['gate']) and time.time() < deadline:\n"
         "        time.sleep(0.01)\n"
         "    return 'through'\n")


def test_draining_is_unavailable(worker_factory):
    """While a task drains, new work is refused and health says NOT_SERVING; the task
    still finishes. The task waits for a file the test creates, so no timing decides."""
    w = worker_factory("--drain-timeout-ms", "60000")
    w.wait_serving()
    w.deploy("gated", GATED)
    gate = os.path.join(w.tmp, "gate-open")
    w.submit("t-drain", "gated", {"gate": gate})
    deadline = time.time() + 30
    while w.stub.GetTaskResult(pb.GetTaskResultRequest(task_id="t-drain")).phase != pb.PHASE_CALLS:
        assert time.time() < deadline, "the task never reached its calls"
        time.sleep(0.02)
    # The terminal result is read from a watch opened before the drain: after the task
    # ends the worker delivers it to watchers and then exits, so polling GetTaskResult
    # would race the exit.
    stream = w.stub.WatchTasks(pb.WatchTasksRequest(task_ids=["t-drain"]), timeout=60)
    w.proc.send_signal(signal.SIGTERM)
    deadline = time.time() + 30
    while w.health.Check(health_pb2.HealthCheckRequest(), timeout=5).status != \
            health_pb2.HealthCheckResponse.NOT_SERVING:
        assert time.time() < deadline, "health never said NOT_SERVING after SIGTERM"
        time.sleep(0.02)
    with pytest.raises(grpc.RpcError) as e:
        w.submit("t-after", "gated", {"gate": gate})
    assert code_of(e) == grpc.StatusCode.UNAVAILABLE
    open(gate, "w").close()
    terminal = [ev for ev in stream if ev.kind == pb.TaskEvent.KIND_TERMINAL]
    assert len(terminal) == 1
    assert terminal[0].result.state == pb.TASK_STATE_SUCCEEDED  # drained, not cut
    assert w.proc.wait(30) == 0


# ---- retention ---------------------------------------------------------------------


def test_terminal_result_retained_then_purged(worker_factory):
    w = worker_factory("--retention-ms", "1000")
    w.wait_serving()
    w.deploy("echo")
    w.submit("t-ret", "echo", {})
    r = w.wait_terminal("t-ret")
    assert r.state == pb.TASK_STATE_SUCCEEDED
    time.sleep(0.3)
    assert w.stub.GetTaskResult(pb.GetTaskResultRequest(task_id="t-ret")).state == pb.TASK_STATE_SUCCEEDED
    time.sleep(1.5)
    with pytest.raises(grpc.RpcError) as e:
        w.stub.GetTaskResult(pb.GetTaskResultRequest(task_id="t-ret"))
    assert code_of(e) == grpc.StatusCode.NOT_FOUND
    # after the purge the id is new again
    assert not w.submit("t-ret", "echo", {"again": True}).duplicate


# ---- watching ----------------------------------------------------------------------


def test_watch_snapshot_then_terminal(worker):
    worker.submit("t-watch", "sleepy", {"seconds": 0.5})
    events = list(worker.stub.WatchTasks(pb.WatchTasksRequest(task_ids=["t-watch"]), timeout=20))
    kinds = [e.kind for e in events]
    assert kinds[0] == pb.TaskEvent.KIND_SNAPSHOT
    assert kinds[-1] == pb.TaskEvent.KIND_TERMINAL
    assert all(k == pb.TaskEvent.KIND_PHASE_CHANGED for k in kinds[1:-1])
    assert events[-1].result.state == pb.TASK_STATE_SUCCEEDED
    phases = [e.result.phase for e in events]
    assert phases == sorted(phases), "phases never go backwards"


def test_one_stream_many_tasks_and_many_streams_one_task(worker):
    for t in ("m1", "m2"):
        worker.submit(t, "sleepy", {"seconds": 0.3})
    results = {}

    def watch(name, ids):
        results[name] = list(worker.stub.WatchTasks(pb.WatchTasksRequest(task_ids=ids), timeout=20))

    threads = [threading.Thread(target=watch, args=("both", ["m1", "m2"])),
               threading.Thread(target=watch, args=("m1a", ["m1"])),
               threading.Thread(target=watch, args=("m1b", ["m1"]))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    terminal = [e.task_id for e in results["both"] if e.kind == pb.TaskEvent.KIND_TERMINAL]
    assert sorted(terminal) == ["m1", "m2"]
    for name in ("m1a", "m1b"):
        assert results[name][-1].kind == pb.TaskEvent.KIND_TERMINAL


def test_watch_of_unknown_task_is_not_found(worker):
    with pytest.raises(grpc.RpcError) as e:
        list(worker.stub.WatchTasks(pb.WatchTasksRequest(task_ids=["nope"]), timeout=5))
    assert code_of(e) == grpc.StatusCode.NOT_FOUND


def test_watcher_disconnect_is_owner_lost_after_grace(worker_factory):
    w = worker_factory("--watch-grace-ms", "500")
    w.wait_serving()
    w.deploy("sleepy")
    w.submit("t-owner", "sleepy", {"seconds": 30})
    stream = w.stub.WatchTasks(pb.WatchTasksRequest(task_ids=["t-owner"]))
    assert next(stream).kind == pb.TaskEvent.KIND_SNAPSHOT
    stream.cancel()
    r = w.wait_terminal("t-owner", timeout=10)
    assert r.state == pb.TASK_STATE_FAILED and r.failure_code == pb.FAILURE_CODE_OWNER_LOST


def test_reattach_within_grace_keeps_the_task(worker_factory):
    w = worker_factory("--watch-grace-ms", "1500")
    w.wait_serving()
    w.deploy("sleepy")
    w.submit("t-keep", "sleepy", {"seconds": 2})
    stream = w.stub.WatchTasks(pb.WatchTasksRequest(task_ids=["t-keep"]))
    next(stream)
    stream.cancel()
    time.sleep(0.3)
    events = list(w.stub.WatchTasks(pb.WatchTasksRequest(task_ids=["t-keep"]), timeout=20))
    assert events[-1].result.state == pb.TASK_STATE_SUCCEEDED


# ---- cancel, timeout, failures -------------------------------------------------------


def test_cancel(worker):
    worker.submit("t-cancel", "sleepy", {"seconds": 30})
    time.sleep(0.3)
    r = worker.stub.CancelTask(pb.CancelTaskRequest(task_id="t-cancel", reason="changed my mind"))
    assert r.state == pb.TASK_STATE_CANCELLED and r.failure_code == pb.FAILURE_CODE_CANCELLED
    assert "changed my mind" in r.failure_message
    # the stuck executor is replaced; new work still runs
    worker.submit("t-after-cancel", "echo", {})
    assert worker.wait_terminal("t-after-cancel", timeout=20).state == pb.TASK_STATE_SUCCEEDED


def test_timeout(worker):
    worker.submit("t-timeout", "sleepy", {"seconds": 30}, timeout_ms=500)
    r = worker.wait_terminal("t-timeout", timeout=10)
    assert r.state == pb.TASK_STATE_FAILED and r.failure_code == pb.FAILURE_CODE_TASK_TIMEOUT, r.failure_message


def test_raising_function(worker):
    worker.submit("t-boom", "boom", {"why": "test"})
    r = worker.wait_terminal("t-boom")
    assert r.state == pb.TASK_STATE_FAILED and r.failure_code == pb.FAILURE_CODE_CALL_FAILED
    err = r.outputs[0].error
    assert err.type == "ValueError" and "boom" in err.message
    assert "Traceback" in err.traceback and "raise ValueError" in err.traceback
    assert "ValueError" in r.failure_message


def test_captured_output(worker):
    worker.submit("t-print", "printer", {"k": 1})
    r = worker.wait_terminal("t-print")
    assert r.state == pb.TASK_STATE_SUCCEEDED
    assert b"to stdout" in r.outputs[0].stdout and b"to stderr" in r.outputs[0].stderr


def test_unknown_function_and_builder(worker):
    worker.submit("t-nofn", "does-not-exist", {})
    r = worker.wait_terminal("t-nofn")
    assert r.failure_code == pb.FAILURE_CODE_ACTIVATION_FAILED and "does-not-exist" in r.failure_message
    worker.submit("t-nobuilder", "echo", {}, builder="nosuch")
    r = worker.wait_terminal("t-nobuilder")
    assert r.failure_code == pb.FAILURE_CODE_BUILDER_NOT_FOUND and "nosuch" in r.failure_message


def test_bytes_in_and_out(worker):
    worker.deploy("rev", "def handler(args, ctx):\n    return bytes(reversed(args))\n")
    fn = pb.FunctionCallConfig(name="rev", args=b"\x00\x01\x02", content_type=pb.CONTENT_TYPE_BYTES)
    worker.stub.SubmitTask(pb.SubmitTaskRequest(task_id="t-bytes", function=fn))
    r = worker.wait_terminal("t-bytes")
    assert r.outputs[0].value == b"\x02\x01\x00" and r.outputs[0].content_type == pb.CONTENT_TYPE_BYTES


# ---- code epochs -------------------------------------------------------------------------


def test_deploy_during_a_running_task_keeps_its_epoch(worker):
    src = ("import time\n"
           "VERSION = %d\n"
           "def handler(args, ctx):\n"
           "    time.sleep(args.get('seconds', 0))\n"
           "    return {'version': VERSION, 'epoch': ctx.epoch}\n")
    worker.deploy("versioned", src % 1)
    worker.submit("t-v1", "versioned", {"seconds": 1})
    time.sleep(0.4)
    worker.deploy("versioned", src % 2)
    r1 = worker.wait_terminal("t-v1")
    assert r1.code_epoch == 1 and output_json(r1) == {"version": 1, "epoch": 1}
    worker.submit("t-v2", "versioned", {})
    r2 = worker.wait_terminal("t-v2")
    assert r2.code_epoch == 2 and output_json(r2) == {"version": 2, "epoch": 2}
    worker.submit("t-pinned", "versioned", {}, epoch=1)
    assert output_json(worker.wait_terminal("t-pinned"))["version"] == 1


# ---- load and lifecycle -----------------------------------------------------------------


def test_64_concurrent_clients(worker_factory):
    w = worker_factory("--task-slots", "64", executors=4)
    w.wait_serving()
    w.deploy("echo")
    errors = []

    def client(i):
        ch = grpc.insecure_channel(w.addr)
        try:
            from conftest import pb_grpc
            stub = pb_grpc.WorkerServiceStub(ch)
            tid = "c-%d" % i
            fn = pb.FunctionCallConfig(name="echo", args=json.dumps({"i": i}).encode())
            stub.SubmitTask(pb.SubmitTaskRequest(task_id=tid, function=fn), timeout=20)
            events = list(stub.WatchTasks(pb.WatchTasksRequest(task_ids=[tid]), timeout=60))
            r = events[-1].result
            if r.state != pb.TASK_STATE_SUCCEEDED or json.loads(r.outputs[0].value)["echo"] != {"i": i}:
                errors.append((i, r))
        except Exception as e:  # noqa: BLE001 (collected and asserted below)
            errors.append((i, e))
        finally:
            ch.close()

    threads = [threading.Thread(target=client, args=(i,)) for i in range(64)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(90)
    assert not errors, errors[:3]


def test_health_not_serving_then_serving(worker_factory, tmp_path):
    slow = tmp_path / "slow-python"
    slow.write_text("#!/bin/sh\nsleep 1.5\nexec /usr/bin/python3 \"$@\"\n")
    slow.chmod(slow.stat().st_mode | stat.S_IEXEC)
    w = worker_factory(python=str(slow))
    seen = []
    for msg in w.health.Watch(health_pb2.HealthCheckRequest(), timeout=20):
        seen.append(msg.status)
        if msg.status == health_pb2.HealthCheckResponse.SERVING:
            break
    assert seen[0] == health_pb2.HealthCheckResponse.NOT_SERVING
    assert seen[-1] == health_pb2.HealthCheckResponse.SERVING


def test_unknown_method_is_unimplemented(worker):
    call = worker.channel.unary_unary("/worker.v1.WorkerService/NoSuchMethod")
    t = time.time()
    with pytest.raises(grpc.RpcError) as e:
        call(b"", timeout=5)
    assert code_of(e) == grpc.StatusCode.UNIMPLEMENTED and time.time() - t < 2


def test_sigterm_stops_cleanly(worker_factory):
    w = worker_factory()
    w.wait_serving()
    pids = []
    assert w.stop(signal.SIGINT) == 0
    assert w.events("worker_stopped")


# ---- workerctl ------------------------------------------------------------------------------


def ctl(worker, *args, check=None):
    out = subprocess.run([WORKERCTL, "--addr", worker.addr] + list(args), capture_output=True,
                         text=True, timeout=60)
    if check is not None:
        assert out.returncode == check, (out.returncode, out.stdout, out.stderr)
    return out


def test_workerctl_submit_watch_get_cancel(worker):
    out = ctl(worker, "submit", "echo", '{"hi": 1}', "--task-id", "ctl-1", "--watch", check=0)
    assert "SUCCEEDED" in out.stdout and '"hi"' in out.stdout
    out = ctl(worker, "--json", "get", "ctl-1", check=0)
    doc = json.loads(out.stdout.strip().splitlines()[-1])
    assert doc["state"] == "SUCCEEDED" and doc["outputs"][0]["value"]["echo"] == {"hi": 1}
    out = ctl(worker, "submit", "boom", "{}", "--task-id", "ctl-2", "--watch", check=1)
    assert "CALL_FAILED" in out.stdout + out.stderr
    ctl(worker, "get", "nope", check=3)
    ctl(worker, "submit", "echo", "{not json", check=2)
    ctl(worker, "submit", "sleepy", '{"seconds": 30}', "--task-id", "ctl-3", check=0)
    out = ctl(worker, "cancel", "ctl-3", "--reason", "test")
    assert out.returncode in (0, 1), out.stderr
    assert "CANCELLED" in out.stdout
    out = ctl(worker, "slot", "ctl-4", check=0)
    assert "slot" in out.stdout.lower()


def test_workerctl_unreachable_is_exit_4(tmp_path):
    out = subprocess.run([WORKERCTL, "--addr", "127.0.0.1:1", "--deadline-ms", "1000", "get", "x"],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 4, (out.stdout, out.stderr)

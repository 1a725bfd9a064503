"""The worker's whole end-to-end path under valgrind's memcheck: no invalid read or
write, no use of uninitialised memory, no definitely-lost block, from start-up to a
clean SIGTERM exit. Registered only in builds without sanitizers (valgrind cannot run
an ASan binary); the ASan+UBSan build runs every other e2e test instead."""

import re
import subprocess

import grpc

from conftest import WORKERCTL, pb

VALGRIND = ["valgrind", "--error-exitcode=99", "--leak-check=full",
            "--errors-for-leak-kinds=definite", "--show-leak-kinds=definite",
            "--num-callers=30"]


def test_e2e_path_is_valgrind_clean(worker_factory, tmp_path):
    log = str(tmp_path / "valgrind.log")
    w = worker_factory("--metrics-addr", "127.0.0.1:0", "--task-slots", "8", executors=1,
                       wrapper=VALGRIND + ["--log-file=" + log], start_timeout=120)
    w.wait_serving(timeout=120)
    w.deploy("echo")
    w.deploy("boom")
    ctl = [WORKERCTL, "--addr", w.addr, "--deadline-ms", "60000"]

    # workerctl: submit and watch to the end, a map task, get, a failing task
    out = subprocess.run(ctl + ["submit", "echo", '{"a": 1}', "--task-id", "vg-1", "--watch"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "SUCCEEDED" in out.stdout, out.stdout + out.stderr
    w.submit("vg-map", "echo", list(range(50)), builder="map")
    assert w.wait_terminal("vg-map", timeout=120).state == pb.TASK_STATE_SUCCEEDED
    w.submit("vg-boom", "boom", {})
    r = w.wait_terminal("vg-boom", timeout=120)
    assert r.state == pb.TASK_STATE_FAILED and r.failure_code == pb.FAILURE_CODE_CALL_FAILED
    out = subprocess.run(ctl + ["get", "vg-1"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr

    # refusals: an unknown task, a bad id, a slot, a cancel of a finished task
    try:
        w.stub.GetTaskResult(pb.GetTaskResultRequest(task_id="nope"), timeout=60)
        raise AssertionError("GetTaskResult of an unknown task answered OK")
    except grpc.RpcError as e:
        assert e.code() == grpc.StatusCode.NOT_FOUND
    try:
        w.submit("", "echo", {})
        raise AssertionError("an empty task id was accepted")
    except grpc.RpcError as e:
        assert e.code() == grpc.StatusCode.INVALID_ARGUMENT
    w.stub.RequestTaskSlot(pb.RequestTaskSlotRequest(task_id="vg-slot", ttl_ms=60000), timeout=60)
    w.stub.CancelTask(pb.CancelTaskRequest(task_id="vg-1"), timeout=60)

    # a watch stream left open at shutdown, answered by the drain
    stream = w.stub.WatchTasks(pb.WatchTasksRequest(task_ids=["vg-1", "vg-map"]), timeout=120)
    first = next(stream)
    assert first is not None

    # the metrics endpoint, scraped once
    import urllib.request
    port = w.events("metrics_listening")[0]["port"]
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=60) as resp:
        assert b"worker_rpcs_total" in resp.read()

    rc = w.stop(timeout=120)
    text = open(log).read()
    assert rc == 0, "exit %s (99: valgrind found errors)\n%s" % (rc, text[-6000:])
    summary = re.findall(r"ERROR SUMMARY: (\d+) errors", text)
    assert summary and summary[-1] == "0", text[-4000:]
    lost = re.findall(r"definitely lost: ([\d,]+) bytes", text)
    assert all(x == "0" for x in lost), text[-4000:]

"""Writer plugins through the real worker: outputs written by the file and redis
writers, PluginResults in the TaskResult, a backend that is down failing the task
PLUGIN_FAILED with its message, start-up validation, shadow traffic never written, a
writer the worker cannot run refused at submission."""

import json
import os
import socket
import subprocess
import time

import pytest

from conftest import WORKER, pb
from etcd_fixture import free_port, wait_for


@pytest.fixture
def redis():
    port = free_port()
    proc = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                             "--appendonly", "no"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def up():
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return True
        except OSError:
            return False

    assert wait_for(up, timeout=10)
    yield port
    proc.kill()
    proc.wait()


def redis_cli(port, *args):
    return subprocess.run(["redis-cli", "-p", str(port)] + list(args), capture_output=True, text=True,
                          check=True).stdout


def test_file_writer(worker_factory, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    w = worker_factory("--output-dir", str(out))
    w.wait_serving()
    w.deploy("echo")
    handler = pb.ResultHandler(type="file")
    w.submit("fw/1", "echo", {"a": 1}, result_handler=handler)
    r = w.wait_terminal("fw/1")
    assert r.state == pb.TASK_STATE_SUCCEEDED, r.failure_message
    assert len(r.plugin_results) == 1
    pr = r.plugin_results[0]
    assert pr.plugin == "file" and pr.records == 1 and os.path.exists(pr.location)
    assert os.listdir(str(out)) == ["fw%2F1.jsonl"]  # complete files only: no temp left behind
    rec = json.loads(open(pr.location).read().splitlines()[0])
    assert rec["task_id"] == "fw/1" and rec["index"] == 0 and rec["ok"] is True
    assert rec["value"]["echo"] == {"a": 1}


def test_redis_writer_and_backend_down(worker_factory, redis):
    w = worker_factory("--redis-addr", "127.0.0.1:%d" % redis)
    w.wait_serving()
    w.deploy("echo")
    handler = pb.ResultHandler(type="redis", options={"stream": "results"})
    w.submit("rw-1", "echo", [1, 2, 3], builder="map", result_handler=handler)
    r = w.wait_terminal("rw-1")
    assert r.state == pb.TASK_STATE_SUCCEEDED, r.failure_message
    assert r.plugin_results[0].location == "results" and r.plugin_results[0].records == 3
    assert redis_cli(redis, "XLEN", "results").strip() == "3"
    # the backend goes away: the next task fails PLUGIN_FAILED with redis's message
    subprocess.run(["redis-cli", "-p", str(redis), "SHUTDOWN", "NOSAVE"], capture_output=True)
    time.sleep(0.3)
    w.submit("rw-2", "echo", 1, result_handler=handler)
    r = w.wait_terminal("rw-2")
    assert r.state == pb.TASK_STATE_FAILED and r.failure_code == pb.FAILURE_CODE_PLUGIN_FAILED
    assert "redis" in r.failure_message and "127.0.0.1:%d" % redis in r.failure_message


def test_writer_backend_is_validated_at_start_up(tmp_path):
    code = tmp_path / "code"
    code.mkdir()
    out = subprocess.run([WORKER, "--listen", "127.0.0.1:0", "--code-root", str(code),
                          "--redis-addr", "127.0.0.1:%d" % free_port()],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "writer plugin redis" in out.stderr, out.stderr
    out = subprocess.run([WORKER, "--listen", "127.0.0.1:0", "--code-root", str(code),
                          "--output-dir", str(tmp_path / "missing")],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "writer plugin file" in out.stderr, out.stderr


def test_shadow_submissions_never_reach_a_writer(worker_factory, tmp_path):
    out = tmp_path / "shadow-out"
    out.mkdir()
    target = worker_factory("--output-dir", str(out))
    target.wait_serving()
    target.deploy("echo")
    primary_out = tmp_path / "primary-out"
    primary_out.mkdir()
    primary = worker_factory("--shadow-target-addr", target.addr, "--output-dir", str(primary_out))
    primary.wait_serving()
    primary.deploy("echo")
    primary.submit("sh-1", "echo", {}, result_handler=pb.ResultHandler(type="file"))
    primary.wait_terminal("sh-1")
    assert wait_for(lambda: _done(target, "sh-1"), timeout=10)
    assert target.wait_terminal("sh-1").state == pb.TASK_STATE_SUCCEEDED
    assert os.listdir(str(out)) == []


def _done(w, task_id):
    try:
        r = w.stub.GetTaskResult(pb.GetTaskResultRequest(task_id=task_id), timeout=2)
        return r.state in (pb.TASK_STATE_SUCCEEDED, pb.TASK_STATE_FAILED)
    except Exception:  # noqa: BLE001 (not there yet)
        return False


def _refused(w, task_id, handler, path):
    import grpc
    with pytest.raises(grpc.RpcError) as e:
        w.submit(task_id, "counter", {"path": path}, result_handler=handler)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    with pytest.raises(grpc.RpcError) as nf:
        w.stub.GetTaskResult(pb.GetTaskResultRequest(task_id=task_id), timeout=5)
    assert nf.value.code() == grpc.StatusCode.NOT_FOUND
    return e.value.details()


def test_a_writer_that_cannot_run_is_refused_before_any_call(worker_factory, tmp_path):
    """An unknown writer, a known one this worker has not configured, or options it does
    not take: INVALID_ARGUMENT at submission naming what to set, and no call runs (the
    old code ran every call, then failed PLUGIN_NOT_FOUND)."""
    ran = str(tmp_path / "ran.txt")
    w = worker_factory()  # no output_dir, redis_addr or postgres_dsn
    w.wait_serving()
    w.deploy("counter")
    msg = _refused(w, "nw-1", pb.ResultHandler(type="file"), ran)
    assert msg == ("result_handler.type: the file writer is not configured on this worker: it "
                   "needs the setting output_dir (in a profile that enables file); writers "
                   "available here: none"), msg
    msg = _refused(w, "nw-2", pb.ResultHandler(type="s3"), ran)
    assert msg == 'result_handler.type: no writer plugin named "s3" (known: file, redis, postgres)'
    out = subprocess.run([os.path.join(os.path.dirname(WORKER), "workerctl"), "--addr", w.addr,
                          "submit", "counter", json.dumps({"path": ran}), "--result-handler",
                          "redis"], capture_output=True, text=True, timeout=60)
    assert out.returncode != 0 and "needs the setting redis_addr" in out.stderr, out

    out_dir = tmp_path / "out"
    out_dir.mkdir()
    w2 = worker_factory("--output-dir", str(out_dir))
    w2.wait_serving()
    w2.deploy("counter")
    msg = _refused(w2, "nw-3", pb.ResultHandler(type="file", options={"nme": "x"}), ran)
    assert msg == "result_handler.options: file: unknown option 'nme' (known: name)", msg
    msg = _refused(w2, "nw-4", pb.ResultHandler(type="redis"), ran)
    assert msg.endswith("writers available here: file"), msg
    time.sleep(0.5)
    assert not os.path.exists(ran)  # no call ran

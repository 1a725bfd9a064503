"""Usage records and statistics on every terminal path through the real worker: a task
that ends while its calls run (TASK_TIMEOUT, CANCELLED, WORKER_SHUTDOWN, OWNER_LOST)
still reports the calls it ran, their CPU time and a calls phase that lasted >= 0 ms,
and its record keeps how each phase ended. A running map's GetTaskResult counts its
calls so far."""

import json
import os
import signal
import time

import grpc

from conftest import pb
from etcd_fixture import wait_for

# Quick calls (i < QUICK) burn a little CPU and note that they ran; the others then sleep
# long enough that the task is always ended from outside while they run.
BURN = ("import time\n"
        "def handler(args, ctx):\n"
        "    end = time.process_time() + 0.02\n"
        "    while time.process_time() < end:\n"
        "        pass\n"
        "    if args['i'] < args['quick']:\n"
        "        with open(args['marks'], 'a') as f:\n"
        "            f.write('%d\\n' % args['i'])\n"
        "    else:\n"
        "        time.sleep(60)\n"
        "    return args['i']\n")
QUICK = 4
CALLS = 8


def start(w, tmp_path, task_id, **kw):
    marks = tmp_path / ("%s.marks" % task_id)
    items = [{"i": i, "quick": QUICK, "marks": str(marks)} for i in range(CALLS)]
    w.submit(task_id, "burn", items, builder="map", **kw)

    def quick_done():
        return marks.exists() and len(marks.read_text().splitlines()) >= QUICK

    assert wait_for(quick_done, timeout=20), "the quick calls did not run"
    # their results reach the worker just after they note themselves
    time.sleep(0.5)


def usage_record(usage, task_id):
    def find():
        if not usage.exists():
            return None
        for line in usage.read_text().splitlines():
            rec = json.loads(line)
            if rec["task_id"] == task_id:
                return rec
        return None

    rec = wait_for(find, timeout=10)
    assert rec is not None, "no usage record for %s" % task_id
    return rec


def check_calls_phase_interrupted(rec, code):
    assert rec["calls_ms"] >= 0, rec
    assert rec["calls"] >= QUICK, rec
    assert rec["cpu_us"] > 0, rec
    assert rec["wall_ms"] >= rec["calls_ms"], rec
    phases = rec["phases"]
    assert phases["builder"]["outcome"] == "OK", rec
    assert phases["calls"]["outcome"] == code, rec
    assert phases["writer"]["outcome"] == "NOT_RUN", rec


def make_worker(worker_factory, tmp_path, *extra):
    usage = tmp_path / "usage.jsonl"
    w = worker_factory("--usage-log", str(usage), "--executors", str(CALLS), *extra)
    w.wait_serving()
    w.deploy("burn", BURN)
    return w, usage


def test_task_timeout_keeps_the_calls_it_ran(worker_factory, tmp_path):
    w, usage = make_worker(worker_factory, tmp_path)
    start(w, tmp_path, "timeout", timeout_ms=4000)
    r = w.wait_terminal("timeout", timeout=30)
    assert r.failure_code == pb.FAILURE_CODE_TASK_TIMEOUT
    assert r.statistic.calls_succeeded >= QUICK and r.statistic.executor_cpu_ms > 0, r.statistic
    check_calls_phase_interrupted(usage_record(usage, "timeout"), "TASK_TIMEOUT")


def test_cancelled_keeps_the_calls_it_ran(worker_factory, tmp_path):
    w, usage = make_worker(worker_factory, tmp_path)
    start(w, tmp_path, "cancel")
    w.stub.CancelTask(pb.CancelTaskRequest(task_id="cancel", reason="test"), timeout=10)
    r = w.wait_terminal("cancel")
    assert r.state == pb.TASK_STATE_CANCELLED
    assert r.statistic.calls_succeeded >= QUICK, r.statistic
    check_calls_phase_interrupted(usage_record(usage, "cancel"), "CANCELLED")


def test_worker_shutdown_keeps_the_calls_it_ran(worker_factory, tmp_path):
    w, usage = make_worker(worker_factory, tmp_path, "--drain-timeout-ms", "200")
    start(w, tmp_path, "shutdown")
    assert w.stop(signal.SIGTERM) == 0
    finished = [e for e in w.events("task_finished") if e["task_id"] == "shutdown"]
    assert finished and finished[0]["failure_code"] == "WORKER_SHUTDOWN", w.logs[-10:]
    check_calls_phase_interrupted(usage_record(usage, "shutdown"), "WORKER_SHUTDOWN")


def test_owner_lost_keeps_the_calls_it_ran(worker_factory, tmp_path):
    w, usage = make_worker(worker_factory, tmp_path, "--watch-grace-ms", "200")
    marks = tmp_path / "lost.marks"
    items = [{"i": i, "quick": QUICK, "marks": str(marks)} for i in range(CALLS)]
    w.submit("lost", "burn", items, builder="map")
    stream = w.stub.WatchTasks(pb.WatchTasksRequest(task_ids=["lost"]), timeout=60)
    first = next(stream)
    assert first.kind == pb.TaskEvent.KIND_SNAPSHOT
    assert wait_for(lambda: marks.exists() and len(marks.read_text().splitlines()) >= QUICK,
                    timeout=20)
    time.sleep(0.5)
    stream.cancel()
    r = w.wait_terminal("lost")
    assert r.failure_code == pb.FAILURE_CODE_OWNER_LOST
    check_calls_phase_interrupted(usage_record(usage, "lost"), "OWNER_LOST")


def test_running_map_shows_its_calls_so_far(worker_factory, tmp_path):
    w, usage = make_worker(worker_factory, tmp_path)
    start(w, tmp_path, "running")
    r = w.stub.GetTaskResult(pb.GetTaskResultRequest(task_id="running"), timeout=5)
    assert r.state == pb.TASK_STATE_RUNNING and r.phase == pb.PHASE_CALLS
    assert r.statistic.calls_total == CALLS, r.statistic
    assert r.statistic.calls_succeeded == QUICK and r.statistic.calls_failed == 0, r.statistic
    assert r.statistic.executor_cpu_ms > 0 and r.statistic.bytes_out > 0, r.statistic
    w.stub.CancelTask(pb.CancelTaskRequest(task_id="running"), timeout=10)
    w.wait_terminal("running")


def test_succeeded_record_keeps_each_phase(worker_factory, tmp_path):
    w, usage = make_worker(worker_factory, tmp_path)
    w.deploy("echo")
    w.submit("ok", "echo", {"x": 1})
    assert w.wait_terminal("ok").state == pb.TASK_STATE_SUCCEEDED
    rec = usage_record(usage, "ok")
    assert {k: v["outcome"] for k, v in rec["phases"].items()} == {
        "builder": "OK", "calls": "OK", "writer": "OK"}
    assert rec["calls"] == 1 and rec["calls_ms"] >= 0
    # the Profile's names (cmd/worker: block, "worker", no usage_service of its own)
    assert rec["deployment"] == "block" and rec["service"] == "worker"
    assert rec["usage_service"] == "worker"


def test_profile_names_reach_the_metrics(worker_factory):
    from test_metrics_e2e import scrape, value
    w = worker_factory("--metrics-addr", "127.0.0.1:0")
    w.wait_serving()
    samples, _, _ = scrape(w)
    assert value(samples, "worker_info", deployment="block", service="worker",
                 usage_service="worker") == 1, [k for k in samples if k[0] == "worker_info"]

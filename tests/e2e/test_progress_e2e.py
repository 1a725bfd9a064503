"""Progress, owners and observers (issue 13 §2, §3): live call counters in
GetTaskResult, PROGRESS events on WatchTasks, observer streams that never count for the
watch-disconnect grace, against the real worker."""

import os
import time

import grpc
import pytest

from conftest import pb

# Each call waits until its release file exists (at most 60 s): the test decides when
# calls finish, not a clock.
GATED = ("import os, time\n"
         "def handler(args, ctx):\n"
         "    deadline = time.time() + 60\n"
         "    while not os.path.exists(args['release']) and time.time() < deadline:\n"
         "        time.sleep(0.01)\n"
         "    return {'i': ctx.call_index}\n")


def wait_phase(w, task_id, phase, timeout=30):
    deadline = time.time() + timeout
    while time.time() < deadline:
        r = w.stub.GetTaskResult(pb.GetTaskResultRequest(task_id=task_id), timeout=5)
        if r.phase == phase:
            return r
        time.sleep(0.02)
    raise AssertionError("task %s never reached phase %s" % (task_id, phase))


@pytest.fixture
def gated(worker, tmp_path):
    worker.deploy("gated", GATED)
    return str(tmp_path / "release")


def submit_map(w, task_id, release, n):
    items = [{"release": release}] * n
    return w.submit(task_id, "gated", items, builder="map")


def test_running_map_counts_live(worker, gated):
    """A running map's GetTaskResult has its calls_total from the start of its calls
    and calls_done as they finish (before: calls_total 0 until the first call ended).
    The executors serve `gated` already (a first task ran on both), so no call comes
    back unstarted to report the counters early."""
    warm = gated + "-warm"
    open(warm, "w").close()
    submit_map(worker, "warm-1", warm, 4)
    assert worker.wait_terminal("warm-1").state == pb.TASK_STATE_SUCCEEDED
    submit_map(worker, "live-1", gated, 6)
    r = wait_phase(worker, "live-1", pb.PHASE_CALLS)
    time.sleep(0.2)  # the calls are sent; none can finish before the release file
    r = worker.stub.GetTaskResult(pb.GetTaskResultRequest(task_id="live-1"), timeout=5)
    assert r.state == pb.TASK_STATE_RUNNING
    assert r.statistic.calls_total == 6
    assert r.statistic.calls_done == 0
    open(gated, "w").close()
    r = worker.wait_terminal("live-1")
    assert r.state == pb.TASK_STATE_SUCCEEDED
    assert (r.statistic.calls_total, r.statistic.calls_done) == (6, 6)


def running_with_short_grace(worker_factory, task_id):
    """A worker with a 300 ms watch grace running task_id (two gated calls, nobody
    watching yet); returns the worker and the release file."""
    w = worker_factory("--watch-disconnect-grace-ms", "300")
    w.wait_serving()
    w.deploy("gated", GATED)
    release = os.path.join(w.tmp, "release")
    submit_map(w, task_id, release, 2)
    wait_phase(w, task_id, pb.PHASE_CALLS)
    return w, release


def test_observer_disconnect_does_not_cancel(worker_factory):
    w, release = running_with_short_grace(worker_factory, "obs-1")
    # an observer comes and goes (its stream broken), twice
    for _ in range(2):
        stream = w.stub.WatchTasks(pb.WatchTasksRequest(task_ids=["obs-1"], observe=True))
        first = next(stream)
        assert first.kind == pb.TaskEvent.KIND_SNAPSHOT
        stream.cancel()
    time.sleep(1.0)  # well past the 300 ms grace
    r = w.stub.GetTaskResult(pb.GetTaskResultRequest(task_id="obs-1"), timeout=5)
    assert r.state == pb.TASK_STATE_RUNNING, r
    open(release, "w").close()
    assert w.wait_terminal("obs-1").state == pb.TASK_STATE_SUCCEEDED


def test_owner_disconnect_cancels(worker_factory):
    w, release = running_with_short_grace(worker_factory, "own-1")
    # an observer stays attached the whole time: it does not keep the task alive
    observer = w.stub.WatchTasks(pb.WatchTasksRequest(task_ids=["own-1"], observe=True))
    assert next(observer).kind == pb.TaskEvent.KIND_SNAPSHOT
    owner = w.stub.WatchTasks(pb.WatchTasksRequest(task_ids=["own-1"]))
    assert next(owner).kind == pb.TaskEvent.KIND_SNAPSHOT
    owner.cancel()
    r = w.wait_terminal("own-1", timeout=30)
    assert r.state == pb.TASK_STATE_FAILED
    assert r.failure_code == pb.FAILURE_CODE_OWNER_LOST
    # the observer saw it end
    kinds = [e.kind for e in observer]
    assert kinds[-1] == pb.TaskEvent.KIND_TERMINAL
    open(release, "w").close()


def test_progress_events_bounded(worker):
    """A 3,000-call map sends PROGRESS events at most ~10 a second (plus the phase
    changes), never more than one per call, their counters only grow, and the last one
    before TERMINAL says every call is done."""
    n = 3000
    worker.submit("prog-1", "noop", [0] * n, builder="map")
    started = time.time()
    events = list(worker.stub.WatchTasks(pb.WatchTasksRequest(task_ids=["prog-1"]), timeout=120))
    elapsed = time.time() - started
    progress = [e.progress for e in events if e.kind == pb.TaskEvent.KIND_PROGRESS]
    assert events[-1].kind == pb.TaskEvent.KIND_TERMINAL
    assert events[-1].result.state == pb.TASK_STATE_SUCCEEDED
    assert progress, [e.kind for e in events]
    # bounded: 10 a second over the whole watch, plus the calls' start and end
    assert len(progress) <= 10 * elapsed + 3, (len(progress), elapsed)
    dones = [p.calls_done for p in progress]
    assert dones == sorted(dones)
    last = progress[-1]
    assert (last.calls_total, last.calls_done, last.calls_succeeded, last.total_known) == \
        (n, n, n, True)
    assert last.calls_started_unix_ms > 0
    # no event carries both a result and progress
    for e in events:
        assert (e.kind == pb.TaskEvent.KIND_PROGRESS) == e.HasField("progress")
        assert (e.kind == pb.TaskEvent.KIND_PROGRESS) != e.HasField("result")


# ---- ListTasks and GetTaskLogs ------------------------------------------------------------


def test_list_tasks_pages_and_filters(worker, gated):
    for i in range(5):
        worker.submit("ls-%d" % i, "echo", {"i": i}, labels={"team": "a" if i % 2 else "b"})
    for i in range(5):
        worker.wait_terminal("ls-%d" % i)
    submit_map(worker, "ls-live", gated, 2)
    wait_phase(worker, "ls-live", pb.PHASE_CALLS)
    seen, token, pages = [], "", 0
    while True:
        r = worker.stub.ListTasks(pb.ListTasksRequest(page_size=2, page_token=token), timeout=5)
        assert len(r.tasks) <= 2
        seen += [t.task_id for t in r.tasks]
        pages += 1
        token = r.next_page_token
        if not token:
            break
    assert seen == ["ls-live", "ls-4", "ls-3", "ls-2", "ls-1", "ls-0"]  # newest first
    assert pages >= 3
    assert r.live == 1 and r.retained == 5
    first = worker.stub.ListTasks(pb.ListTasksRequest(), timeout=5).tasks[0]
    assert (first.task_id, first.state, first.function, first.builder) == \
        ("ls-live", pb.TASK_STATE_RUNNING, "gated", "map")
    assert (first.calls_total, first.calls_done) == (2, 0)
    assert first.code_epoch == 1 and first.accepted_unix_ms > 0
    running = worker.stub.ListTasks(pb.ListTasksRequest(states=[pb.TASK_STATE_RUNNING]), timeout=5)
    assert [t.task_id for t in running.tasks] == ["ls-live"]
    team_a = worker.stub.ListTasks(pb.ListTasksRequest(labels={"team": "a"}), timeout=5)
    assert [t.task_id for t in team_a.tasks] == ["ls-3", "ls-1"]
    assert dict(team_a.tasks[0].labels) == {"team": "a"}
    for bad in (pb.ListTasksRequest(page_size=1001), pb.ListTasksRequest(page_token="zz")):
        with pytest.raises(grpc.RpcError) as e:
            worker.stub.ListTasks(bad, timeout=5)
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    open(gated, "w").close()


def test_task_logs(worker):
    worker.submit("log-1", "printer", ["a", "b", "c"], builder="map")
    assert worker.wait_terminal("log-1").state == pb.TASK_STATE_SUCCEEDED
    r = worker.stub.GetTaskLogs(pb.GetTaskLogsRequest(task_id="log-1"), timeout=5)
    assert r.state == pb.TASK_STATE_SUCCEEDED
    assert sorted(c.index for c in r.calls) == [0, 1, 2]
    by_index = {c.index: c for c in r.calls}
    assert b"to stdout b" in by_index[1].stdout
    assert b"to stderr" in by_index[1].stderr
    assert by_index[1].attempt == 1
    one = worker.stub.GetTaskLogs(pb.GetTaskLogsRequest(task_id="log-1", one_call=True, call=2),
                                  timeout=5)
    assert [c.index for c in one.calls] == [2]
    with pytest.raises(grpc.RpcError) as e:
        worker.stub.GetTaskLogs(pb.GetTaskLogsRequest(task_id="nope"), timeout=5)
    assert e.value.code() == grpc.StatusCode.NOT_FOUND


def test_task_logs_bounded(worker_factory):
    """task_log_max_bytes bounds what one task keeps; the rest is counted as dropped."""
    w = worker_factory("--task-log-max-bytes", "300")
    w.wait_serving()
    w.deploy("printer")
    w.submit("log-big", "printer", ["x" * 100] * 10, builder="map")
    assert w.wait_terminal("log-big").state == pb.TASK_STATE_SUCCEEDED
    r = w.stub.GetTaskLogs(pb.GetTaskLogsRequest(task_id="log-big"), timeout=5)
    kept = sum(len(c.stdout) + len(c.stderr) for c in r.calls)
    assert 0 < len(r.calls) < 10 and kept <= 300
    assert r.dropped_bytes > 0


FLAKY = ("import os, worker\n"
         "def handler(args, ctx):\n"
         "    marker = '%s-%d' % (args['marker'], ctx.call_index)\n"
         "    if args.get('flaky') and not os.path.exists(marker):\n"
         "        open(marker, 'w').close()\n"
         "        raise worker.Retryable('not yet: call %d' % ctx.call_index)\n"
         "    return ctx.call_index\n")


def test_retries_listed_in_result(worker, tmp_path):
    """Which calls were retried, and why, is in the result (issue 13 §6)."""
    worker.deploy("flaky", FLAKY)
    marker = str(tmp_path / "m")
    items = [{"marker": marker, "flaky": i in (1, 3)} for i in range(4)]
    worker.submit("retry-1", "flaky", items, builder="map",
                  call_retry_policy=pb.CallRetryPolicy(max_attempts=3, initial_backoff_ms=10))
    r = worker.wait_terminal("retry-1")
    assert r.state == pb.TASK_STATE_SUCCEEDED, r.failure_message
    assert r.statistic.calls_retried == 2
    assert sorted((x.index, x.attempt) for x in r.retries) == [(1, 1), (3, 1)]
    for x in r.retries:
        assert x.error_type == "Retryable"
        assert x.error_message == "not yet: call %d" % x.index
    assert len(r.outputs) == 4

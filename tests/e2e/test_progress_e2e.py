"""Progress, owners and observers (issue 13 §2, §3): live call counters in
GetTaskResult, PROGRESS events on WatchTasks, observer streams that never count for the
watch-disconnect grace, against the real worker."""

import json
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
        try:
            r = w.stub.GetTaskResult(pb.GetTaskResultRequest(task_id=task_id), timeout=5)
        except grpc.RpcError as e:  # not submitted yet (a workerctl started alongside)
            assert e.code() == grpc.StatusCode.NOT_FOUND, e
            time.sleep(0.02)
            continue
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
    events = list(worker.stub.WatchTasks(pb.WatchTasksRequest(task_ids=["prog-1"], progress=True),
                                         timeout=120))
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


def test_progress_only_when_asked(worker):
    """A watcher that does not ask for PROGRESS gets SNAPSHOT, PHASE_CHANGED, TERMINAL
    only, as before."""
    worker.submit("prog-2", "noop", [0] * 500, builder="map")
    kinds = [e.kind for e in worker.stub.WatchTasks(pb.WatchTasksRequest(task_ids=["prog-2"]),
                                                    timeout=60)]
    assert pb.TaskEvent.KIND_PROGRESS not in kinds
    assert kinds[0] == pb.TaskEvent.KIND_SNAPSHOT and kinds[-1] == pb.TaskEvent.KIND_TERMINAL


# ---- workerctl: progress bar, summarised lines, Ctrl-C, tasks, logs ----------------------

import pty  # noqa: E402
import re  # noqa: E402
import select  # noqa: E402
import signal  # noqa: E402
import subprocess  # noqa: E402

from conftest import WORKERCTL  # noqa: E402

NAP = "import time\ndef handler(args, ctx):\n    time.sleep(args)\n    return None\n"


def ctl(w, *args, **kw):
    return subprocess.run([WORKERCTL, "--addr", w.addr] + list(args), capture_output=True,
                          text=True, timeout=kw.pop("timeout", 120), **kw)


def run_in_pty(argv, timeout=120):
    """Runs argv with stdout and stderr on a terminal; returns (exit status, bytes shown)."""
    pid, fd = pty.fork()
    if pid == 0:
        os.environ["TERM"] = "xterm"
        os.execv(argv[0], argv)
    out = b""
    deadline = time.time() + timeout
    while time.time() < deadline:
        r, _, _ = select.select([fd], [], [], 1)
        if r:
            try:
                chunk = os.read(fd, 65536)
            except OSError:
                break
            if not chunk:
                break
            out += chunk
    _, status = os.waitpid(pid, 0)
    os.close(fd)
    return os.waitstatus_to_exitcode(status), out


def test_watch_draws_a_bar_on_a_terminal(worker):
    worker.deploy("nap", NAP)
    worker.submit("bar-1", "nap", [0.05] * 60, builder="map")
    rc, out = run_in_pty([WORKERCTL, "--addr", worker.addr, "watch", "bar-1"])
    assert rc == 0, out
    text = out.decode("utf-8", "replace")
    redraws = text.count("\r\x1b[K")
    assert redraws >= 2, text[-2000:]
    assert re.search(r"\[[#.]{24}\] \d+/60 calls", text), text[-2000:]
    assert "TERMINAL task bar-1 SUCCEEDED" in text
    # the bar is redrawn in place: it adds no lines of its own (the events' results do)
    lines = [x for x in text.split("\n") if not x.startswith("  output[")]
    assert len(lines) < 15, lines


def test_submit_watch_summarises_progress(worker):
    """A 20,000-call range: the progress is a handful of lines on stderr, never one a
    call; stdout holds the result only."""
    started = time.time()
    p = ctl(worker, "submit", "noop", '{"stop": 20000, "chunk": 1}', "--builder", "range",
            "--watch", "--task-id", "big-1", timeout=300)
    elapsed = time.time() - started
    assert p.returncode == 0, p.stderr[-2000:]
    progress = [line for line in p.stderr.splitlines() if line.startswith("PROGRESS task big-1")]
    assert len(progress) == len(p.stderr.splitlines())
    assert len(progress) <= elapsed / 5 + 2, (len(progress), elapsed)
    assert "PROGRESS" not in p.stdout
    lines = p.stdout.splitlines()
    others = [line for line in lines if not line.startswith("  output[")]
    assert len(others) <= 3, others
    assert "task big-1 SUCCEEDED" in p.stdout


def start_gated_worker(worker_factory, grace_ms):
    w = worker_factory("--watch-disconnect-grace-ms", str(grace_ms))
    w.wait_serving()
    w.deploy("gated", GATED)
    return w, os.path.join(w.tmp, "release")


def interrupt_submit_watch(w, task_id, release):
    """`submit --watch` of a gated task, interrupted (SIGINT) once its calls run;
    returns what it printed on stderr."""
    p = subprocess.Popen([WORKERCTL, "--addr", w.addr, "submit", "gated",
                          json.dumps([{"release": release}] * 2), "--builder", "map",
                          "--task-id", task_id, "--watch"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_phase(w, task_id, pb.PHASE_CALLS)
    time.sleep(0.3)  # its watch is attached (the SNAPSHOT came before the calls phase)
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=30)
    assert p.returncode == 130, (p.returncode, out, err)
    return err


def test_ctrl_c_of_submit_watch_says_owner_lost_and_how_to_reattach(worker_factory):
    w, release = start_gated_worker(worker_factory, 300)
    err = interrupt_submit_watch(w, "cc-1", release)
    assert "OWNER_LOST" in err and "grace of 0.3 s" in err, err
    assert "workerctl --addr %s watch --own cc-1" % w.addr in err, err
    r = w.wait_terminal("cc-1")
    assert (r.state, r.failure_code) == (pb.TASK_STATE_FAILED, pb.FAILURE_CODE_OWNER_LOST)
    open(release, "w").close()


def test_the_printed_command_reattaches_in_time(worker_factory):
    w, release = start_gated_worker(worker_factory, 3000)
    err = interrupt_submit_watch(w, "cc-2", release)
    command = err.split("To re-attach:\n", 1)[1].splitlines()[0].split()
    assert command[0] == "workerctl" and command[-3:] == ["watch", "--own", "cc-2"], err
    again = subprocess.Popen([WORKERCTL] + command[1:], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    time.sleep(4)  # past the 3 s grace: the owner is back, nothing is cancelled
    r = w.stub.GetTaskResult(pb.GetTaskResultRequest(task_id="cc-2"), timeout=5)
    assert r.state == pb.TASK_STATE_RUNNING, r
    open(release, "w").close()
    out, _ = again.communicate(timeout=60)
    assert again.returncode == 0
    assert "TERMINAL task cc-2 SUCCEEDED" in out


def test_ctrl_c_of_an_observer_leaves_the_task(worker_factory):
    w, release = start_gated_worker(worker_factory, 300)
    w.submit("cc-3", "gated", [{"release": release}] * 2, builder="map")
    wait_phase(w, "cc-3", pb.PHASE_CALLS)
    p = subprocess.Popen([WORKERCTL, "--addr", w.addr, "watch", "cc-3"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(0.5)
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=30)
    assert p.returncode == 130
    assert "observer" in err and "keeps running" in err, err
    time.sleep(1.0)  # well past the 300 ms grace
    r = w.stub.GetTaskResult(pb.GetTaskResultRequest(task_id="cc-3"), timeout=5)
    assert r.state == pb.TASK_STATE_RUNNING
    open(release, "w").close()
    assert w.wait_terminal("cc-3").state == pb.TASK_STATE_SUCCEEDED


def test_workerctl_tasks_and_logs(worker):
    worker.submit("cli-1", "printer", ["x", "y"], builder="map", labels={"team": "data"})
    worker.submit("cli-2", "boom", {"n": 1})
    worker.wait_terminal("cli-1")
    worker.wait_terminal("cli-2")
    p = ctl(worker, "tasks")
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert lines[0].split() == ["TASK", "STATE", "FUNCTION", "EPOCH", "AGE", "CALLS"]
    assert lines[1].split()[:3] == ["cli-2", "FAILED", "boom"]
    assert lines[2].split()[:3] == ["cli-1", "SUCCEEDED", "printer"]
    assert lines[2].split()[5] == "2/2"
    p = ctl(worker, "--json", "tasks", "--state", "succeeded", "--label", "team=data")
    rows = [json.loads(line) for line in p.stdout.splitlines()]
    assert [r["task_id"] for r in rows] == ["cli-1"]
    assert rows[0]["labels"] == {"team": "data"} and rows[0]["calls_done"] == 2
    assert ctl(worker, "tasks", "--state", "nope").returncode == 2
    p = ctl(worker, "logs", "cli-1", "--call", "1")
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines() == ["== call 1 (attempt 1) stdout ==", "to stdout y",
                                     "== call 1 (attempt 1) stderr ==", "to stderr"]
    p = ctl(worker, "--json", "logs", "cli-1")
    assert sorted(json.loads(line)["call"] for line in p.stdout.splitlines()) == [0, 1]
    p = ctl(worker, "logs", "no-such-task")
    assert p.returncode == 3 and "NOT_FOUND" in p.stderr


def test_get_shows_the_retry_story_and_counts_that_add_up(worker, tmp_path):
    worker.deploy("flaky", FLAKY)
    marker = str(tmp_path / "m")
    p = ctl(worker, "submit", "flaky", json.dumps([{"marker": marker, "flaky": True}]),
            "--builder", "map", "--retries", "2", "--watch", "--task-id", "story-1")
    assert p.returncode == 0, p.stderr
    assert "retried: call 0 after attempt 1: Retryable: not yet: call 0" in p.stdout, p.stdout
    # fail fast: the calls the policy stopped are "not run", not counted as fine
    p = ctl(worker, "submit", "boom", json.dumps([1, 2, 3, 4, 5, 6, 7, 8]), "--builder", "map",
            "--watch", "--task-id", "story-2")
    assert p.returncode == 1
    r = worker.wait_terminal("story-2")
    s = r.statistic
    not_run = s.calls_total - s.calls_succeeded - s.calls_failed
    assert "%d of 8 calls failed, %d succeeded" % (s.calls_failed, s.calls_succeeded) in \
        r.failure_message
    if not_run:
        assert "%d not run" % not_run in r.failure_message
        assert "%d not run" % not_run in p.stdout

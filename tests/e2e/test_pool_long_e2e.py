"""End-to-end: no call waits behind a long call while an executor is idle or the pool can
grow (issue 10, §11).

A call is sent to an executor only when that executor is expected to start it soon;
calls queued behind a call that turned out long are taken back (RECALL) and run on an
idle or new executor. The assertions are about the order of events, not timings."""

import signal
import time

from conftest import pb

SLEEP = "import time\ndef handler(args, ctx):\n    time.sleep(args)\n    return args\n"
LONG_S = 5.0  # room for a new executor to start on a loaded machine
SHORT_S = 0.2


def state(w, task_id):
    return w.stub.GetTaskResult(pb.GetTaskResultRequest(task_id=task_id), timeout=10).state


def wait_state(w, task_id, states, timeout):
    deadline = time.time() + timeout
    while time.time() < deadline:
        s = state(w, task_id)
        if s in states:
            return s
        time.sleep(0.02)
    raise AssertionError("task %s never reached %s (now %s)" % (task_id, states, s))


DONE = (pb.TASK_STATE_SUCCEEDED, pb.TASK_STATE_FAILED, pb.TASK_STATE_CANCELLED)


def test_short_call_after_a_long_one_does_not_wait_for_it(worker_factory):
    """One executor, up to four: a short call submitted right after a long one must not
    sit behind it; the pool grows and the short one ends while the long one runs."""
    w = worker_factory("--executors-max", "4", "--pipeline-depth", "64", executors=1)
    w.wait_serving()
    w.deploy("sleep", SLEEP)
    w.submit("long", "sleep", LONG_S)
    w.submit("short", "sleep", SHORT_S)
    assert wait_state(w, "short", DONE, LONG_S + 20) == pb.TASK_STATE_SUCCEEDED
    assert state(w, "long") == pb.TASK_STATE_RUNNING, "the short call waited for the long one"
    assert wait_state(w, "long", DONE, 30) == pb.TASK_STATE_SUCCEEDED


def test_short_call_runs_during_the_drain(worker_factory):
    """SIGTERM right after: the short task runs (on a new executor) during the drain and
    succeeds; only the long one is cut off (by a second signal, which ends the drain)."""
    long_s = 30
    w = worker_factory("--executors-max", "4", "--drain-timeout-ms", "25000", executors=1)
    w.wait_serving()
    w.deploy("sleep", SLEEP)
    w.submit("long", "sleep", long_s)
    w.submit("short", "sleep", SHORT_S)
    time.sleep(0.2)
    w.proc.send_signal(signal.SIGTERM)
    assert wait_state(w, "short", DONE, 20) == pb.TASK_STATE_SUCCEEDED
    r = w.stub.GetTaskResult(pb.GetTaskResultRequest(task_id="long"), timeout=10)
    assert r.state == pb.TASK_STATE_RUNNING
    assert w.stop() == 0  # the second signal: no more waiting for the long one
    ends = {e.get("task_id"): e for e in w.events("task_finished")}
    assert ends["long"].get("failure_code") == "WORKER_SHUTDOWN", ends.get("long")


def test_short_calls_beside_long_ones_across_tasks(worker_factory):
    """A mix: two tasks of 6 s calls and twenty tasks of 10 ms calls with executors 1..4.
    Every short task ends while both long ones still run."""
    w = worker_factory("--executors-max", "4", "--task-slots", "32", executors=1)
    w.wait_serving()
    w.deploy("sleep", SLEEP)
    w.submit("long-0", "sleep", 6.0)
    w.submit("long-1", "sleep", 6.0)
    shorts = ["short-%02d" % i for i in range(20)]
    for tid in shorts:
        w.submit(tid, "sleep", 0.01)
    for tid in shorts:
        assert wait_state(w, tid, DONE, 30) == pb.TASK_STATE_SUCCEEDED
    assert state(w, "long-0") == pb.TASK_STATE_RUNNING
    assert state(w, "long-1") == pb.TASK_STATE_RUNNING
    for tid in ("long-0", "long-1"):
        assert wait_state(w, tid, DONE, 30) == pb.TASK_STATE_SUCCEEDED


RESUMING = ("import os, time\n"
            "def handler(args, ctx):\n"
            "    if args.get('child'):\n"
            "        return 'child'\n"
            "    ctx.call('', {'child': True})\n"
            "    open(args['resumed'], 'w').close()\n"
            "    deadline = time.time() + 60\n"
            "    while not os.path.exists(args['gate']) and time.time() < deadline:\n"
            "        time.sleep(0.01)\n"
            "    return 'parent'\n")


def test_no_call_waits_behind_a_parent_resumed_after_its_subcalls(worker_factory):
    """A call that made a subcall and then runs on (a long time) is its executor's
    running call: nothing is queued behind it while other executors are idle."""
    w = worker_factory("--executors-max", "4", "--pipeline-depth", "64", executors=4)
    w.wait_serving()
    w.deploy("resuming", RESUMING)
    w.deploy("sleep", SLEEP)
    resumed = w.tmp + "/resumed"
    gate = w.tmp + "/gate"
    w.submit("parent", "resuming", {"resumed": resumed, "gate": gate})
    deadline = time.time() + 30
    while not __import__("os").path.exists(resumed):
        assert time.time() < deadline, "the parent never resumed after its subcall"
        time.sleep(0.01)
    time.sleep(0.1)  # the parent now runs on, past the pipeline's time budget
    try:
        for i in range(8):
            w.submit("short-%d" % i, "sleep", 0.01)
        for i in range(8):
            assert wait_state(w, "short-%d" % i, DONE, 30) == pb.TASK_STATE_SUCCEEDED
        assert state(w, "parent") == pb.TASK_STATE_RUNNING, "a short call waited for the parent"
    finally:
        open(gate, "w").close()
    assert wait_state(w, "parent", DONE, 30) == pb.TASK_STATE_SUCCEEDED

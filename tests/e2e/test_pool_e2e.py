"""End-to-end: one task's trouble never fails another task's call (issue 10, §10).

Thousands of no-op tasks (one call each, no retry policy) stream through a pool of two
executors while other tasks cancel sleeping calls (killed after the cancel grace), time
out sleeping calls (killed after the grace) and run calls that end their executor
(os._exit). Calls queued behind the doomed one have not started: the worker gives them
back and runs them elsewhere, so none of the no-op tasks may fail."""

import threading
import time

import pytest

from conftest import pb

NOOP_TASKS = 3000
OUTSTANDING = 48  # no-op tasks in flight at once
EXITER = "import os\ndef handler(args, ctx):\n    os._exit(3)\n"
SLEEPY = ("import time\n"
          "def handler(args, ctx):\n"
          "    time.sleep(args['seconds'])\n"
          "    return 'slept'\n")
NOOP = "def handler(args, ctx):\n    return None\n"


def terminal(w, task_id):
    r = w.stub.GetTaskResult(pb.GetTaskResultRequest(task_id=task_id), timeout=10)
    if r.state in (pb.TASK_STATE_SUCCEEDED, pb.TASK_STATE_FAILED, pb.TASK_STATE_CANCELLED):
        return r
    return None


def stream_noops(w, results, stop_flag):
    """Keeps OUTSTANDING no-op tasks in flight until NOOP_TASKS have ended."""
    next_id = 0
    live = []
    while next_id < NOOP_TASKS or live:
        while next_id < NOOP_TASKS and len(live) < OUTSTANDING:
            tid = "noop-%05d" % next_id
            w.submit(tid, "noop", {})
            live.append(tid)
            next_id += 1
        still = []
        for tid in live:
            r = terminal(w, tid)
            if r is None:
                still.append(tid)
            else:
                results[tid] = r
        live = still
        if live:
            time.sleep(0.005)
    stop_flag.set()


def test_trouble_on_shared_executors_fails_no_other_task(worker_factory):
    w = worker_factory("--executors-max", "2", "--task-slots", "128", "--cancel-grace-ms", "300",
                       executors=2)
    w.wait_serving()
    w.deploy("noop", NOOP)
    w.deploy("sleepy", SLEEPY)
    w.deploy("exiter", EXITER)

    results = {}
    done = threading.Event()
    streamer = threading.Thread(target=stream_noops, args=(w, results, done))
    t0 = time.time()
    streamer.start()
    troubled = {"cancel": [], "timeout": [], "exit": []}
    k = 0
    while not done.is_set() and k < 60:
        kind = ("cancel", "timeout", "exit")[k % 3]
        tid = "%s-%03d" % (kind, k)
        if kind == "cancel":
            w.submit(tid, "sleepy", {"seconds": 30})
            time.sleep(0.1)
            w.stub.CancelTask(pb.CancelTaskRequest(task_id=tid, reason="test"), timeout=10)
        elif kind == "timeout":
            w.submit(tid, "sleepy", {"seconds": 30}, call_timeout_ms=150)
        else:
            w.submit(tid, "exiter", {})
        troubled[kind].append(tid)
        k += 1
        time.sleep(0.1)
    streamer.join(120)
    elapsed = time.time() - t0
    assert not streamer.is_alive()

    failed = {tid: (r.failure_code, r.failure_message) for tid, r in results.items()
              if r.state != pb.TASK_STATE_SUCCEEDED}
    assert len(results) == NOOP_TASKS
    assert failed == {}, "%d no-op tasks failed, e.g. %s" % (len(failed), list(failed.items())[:3])

    for tid in troubled["cancel"]:
        assert w.wait_terminal(tid).state == pb.TASK_STATE_CANCELLED
    for tid in troubled["timeout"] + troubled["exit"]:
        assert w.wait_terminal(tid).state == pb.TASK_STATE_FAILED, tid
    # the trouble was real: executors were killed or died under the stream
    killed = w.events("executor_killed")
    exited = w.events("executor_exited")
    assert len(exited) >= len(troubled["exit"]) + 1, (len(exited), troubled)
    assert killed, "no executor was killed: the cancels and timeouts never escalated"
    print("%d no-op tasks in %.1f s beside %d troubled tasks; %d executor exits, %d kills"
          % (NOOP_TASKS, elapsed, k, len(exited), len(killed)))


FLAKY = ("import os, worker\n"
         "def handler(args, ctx):\n"
         "    if not os.path.exists(args['path']):\n"
         "        open(args['path'], 'w').close()\n"
         "        raise worker.Retryable('once')\n"
         "    return 'ok'\n")


def test_retry_without_backoff_and_given_back_calls_reuse_their_record(worker_factory, tmp_path):
    """A retry with initial_backoff_ms 0 is sent again while its first attempt's answer
    is being processed (the same call record): the worker must not trip over the
    attempt it replaces (it aborted on a WK_ASSERT)."""
    w = worker_factory(executors=1)
    w.wait_serving()
    w.deploy("flaky", FLAKY)
    retry = pb.CallRetryPolicy(max_attempts=3, initial_backoff_ms=0)
    for i in range(3):
        w.submit("flaky-%d" % i, "flaky", {"path": str(tmp_path / ("flag-%d" % i))},
                 call_retry_policy=retry)
    for i in range(3):
        r = w.wait_terminal("flaky-%d" % i, timeout=20)
        assert r.state == pb.TASK_STATE_SUCCEEDED, r.failure_message
    assert w.proc.poll() is None


CLOSER = ("import os\n"
          "def handler(args, ctx):\n"
          "    os.close(1)\n"
          "    os.close(2)\n"
          "    return os.getpid()\n")


def test_executor_that_closes_its_output_pipes_is_served_and_stopped(worker_factory):
    """A function closes fds 1 and 2: the worker's readers see EOF while the executor
    lives on. Its output object must stay valid until the executor is gone (it was freed
    at EOF, then used at the executor's exit: a use-after-free that aborted ASan workers
    and made the worker exit non-zero)."""
    w = worker_factory("--executors-max", "1", executors=1)
    w.wait_serving()
    w.deploy("closer", CLOSER)
    w.deploy("noop", NOOP)
    w.submit("close-1", "closer", {})
    r = w.wait_terminal("close-1")
    assert r.state == pb.TASK_STATE_SUCCEEDED, r
    time.sleep(0.2)  # let the loop see both EOFs before the executor goes
    for i in range(3):
        w.submit("after-%d" % i, "noop", {})
        assert w.wait_terminal("after-%d" % i).state == pb.TASK_STATE_SUCCEEDED
    rc = w.stop()
    assert rc == 0, "worker exited %s; logs: %s" % (rc, w.logs[-20:])


PID_AFTER_SLEEP = ("import os, time\n"
                   "def handler(args, ctx):\n"
                   "    time.sleep(args['seconds'])\n"
                   "    return os.getpid()\n")


def burst_of_b(w, n, seconds):
    """Submits n tasks of function b sleeping `seconds`, then waits for each: their
    outputs, in order (each must succeed)."""
    from conftest import output_json
    for i in range(n):
        w.submit("b-%d" % i, "b", {"seconds": seconds})
    out = []
    for i in range(n):
        r = w.wait_terminal("b-%d" % i, timeout=60)
        assert r.state == pb.TASK_STATE_SUCCEEDED, r.failure_message
        out.append(output_json(r))
    return out


def test_a_function_running_alone_gets_every_executor(worker_factory):
    """executor_isolation=function (the default), 2 executors: both serve function A;
    once A is idle, a burst of calls of function B runs on two executors, not only on
    the one recycled for B's first call (the executor still bound to A, idle, is
    recycled too once it has sat idle 250 ms with none of A's calls waiting). Before,
    B kept one executor and its calls ran one after another."""
    from conftest import output_json
    w = worker_factory("--executors-max", "2", executors=2)
    w.wait_serving()
    w.deploy("a", PID_AFTER_SLEEP)
    w.deploy("b", PID_AFTER_SLEEP)
    for i in range(4):  # both executors serve A
        w.submit("a-%d" % i, "a", {"seconds": 0.2})
    a_pids = {output_json(w.wait_terminal("a-%d" % i, timeout=20)) for i in range(4)}
    assert len(a_pids) == 2, a_pids
    time.sleep(0.5)  # A is idle
    b_pids = burst_of_b(w, 16, 0.15)
    assert not a_pids & set(b_pids)  # A's executors never ran B (isolation holds)
    assert len(set(b_pids)) == 2, b_pids
    rc = w.stop()
    assert rc == 0, "worker exited %s; logs: %s" % (rc, w.logs[-20:])


PID_AND_START = ("import os, time\n"
                 "def handler(args, ctx):\n"
                 "    start = time.time()\n"
                 "    time.sleep(args['seconds'])\n"
                 "    return [os.getpid(), start]\n")


def log_time(rec):
    """A worker log record's ts (ISO 8601, UTC, ms) in Unix seconds."""
    import datetime
    t = datetime.datetime.strptime(rec["ts"], "%Y-%m-%dT%H:%M:%S.%fZ")
    return t.replace(tzinfo=datetime.timezone.utc).timestamp()


def test_idle_executors_of_another_function_are_recycled_together(worker_factory):
    """executor_isolation=function, 3 executors, all serving function A (its calls short,
    so each executor takes many at once), A then idle: a burst of B's calls has every
    executor of A recycled at once, before the first replacement is up, not one after
    another (each waiting for the previous replacement's HELLO: a function taking over
    from an idle one got its executors one start apart; with 10 ms calls the second
    executor joined 0.2 s late)."""
    from conftest import output_json
    w = worker_factory("--executors-max", "3", "--task-slots", "256", executors=3)
    w.wait_serving()
    w.deploy("a", PID_AND_START)
    w.deploy("b", PID_AND_START)
    for i in range(3):  # every executor serves A
        w.submit("a-%d" % i, "a", {"seconds": 0.3})
    a_pids = {output_json(w.wait_terminal("a-%d" % i, timeout=20))[0] for i in range(3)}
    assert len(a_pids) == 3, a_pids
    for i in range(200):  # A's calls are short: each executor of A takes many at once
        w.submit("a-short-%d" % i, "a", {"seconds": 0})
    for i in range(200):
        assert w.wait_terminal("a-short-%d" % i).state == pb.TASK_STATE_SUCCEEDED
    time.sleep(1.0)  # A is idle, longer than any executor start
    # B's 12 calls reach the pool together: one task of the map builder (12 separate
    # tasks, submitted one by one, reached it over however long a busy machine took to
    # send them, and calls arriving after the first replacement was up rightly got
    # executors recycled then)
    w.submit("b-map", "b", [{"seconds": 0.2}] * 12, builder="map")
    r = w.wait_terminal("b-map", timeout=60)
    assert r.state == pb.TASK_STATE_SUCCEEDED, r.failure_message
    b = [output_json(r, i) for i in range(12)]
    assert not a_pids & {pid for pid, _ in b}  # isolation holds
    first_b_start = min(start for _, start in b)
    recycled = {e["pid"]: log_time(e) for e in w.events("executor_recycled")
                if e.get("reason") == "executor_isolation"}
    assert set(recycled) == a_pids, (recycled, a_pids)
    late = {pid: round(t - first_b_start, 3) for pid, t in recycled.items() if t > first_b_start}
    assert not late, "recycled after B's first call started (s after it): %s" % late
    rc = w.stop()
    assert rc == 0, "worker exited %s; logs: %s" % (rc, w.logs[-20:])

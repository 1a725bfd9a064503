"""How executors are scheduled (issue 12), seen by a function from inside its executor.

- executor_sched_batch: executors run under SCHED_BATCH, so their wake-ups do not
  preempt the worker's loop and completion-queue threads. The policy is set right after
  spawn, before the interpreter starts the executor's threads: every thread of the
  executor (the main thread that runs calls, the watchdog) and the processes a call
  starts have it. `--executor-sched-batch false` leaves the default (SCHED_OTHER).
- executor_timer_slack_ns: the kernel ends an executor's sleeps at most this late
  (1 us by default, Linux's own default is 50 us); inherited by what a call starts;
  0 leaves the worker's own."""

import os

from conftest import output_json, pb

SCHED_OTHER, SCHED_BATCH = 0, 3

POLICIES = ("import os, subprocess, sys\n"
            "def policy(path):\n"
            "    with open(path) as f:\n"
            "        return int(f.read().rsplit(')', 1)[1].split()[38])  # field 41: policy\n"
            "def handler(args, ctx):\n"
            "    import ctypes\n"
            "    slack = ctypes.CDLL(None).prctl(30, 0, 0, 0, 0)  # PR_GET_TIMERSLACK\n"
            "    child_slack = subprocess.run(['cat', '/proc/self/timerslack_ns'],\n"
            "                                 capture_output=True, text=True).stdout\n"
            "    threads = sorted(os.listdir('/proc/self/task'))\n"
            "    child = subprocess.run([sys.executable, '-c', 'import os; "
            "print(os.sched_getscheduler(0))'], capture_output=True, text=True)\n"
            "    return {'pid': os.getpid(), 'main': os.sched_getscheduler(0),\n"
            "            'threads': [policy('/proc/self/task/%s/stat' % t) for t in threads],\n"
            "            'child': int(child.stdout), 'slack': slack,\n"
            "            'child_slack': int(child_slack)}\n")


def policies(w, task_id):
    w.submit(task_id, "pol", {})
    r = w.wait_terminal(task_id, timeout=30)
    assert r.state == pb.TASK_STATE_SUCCEEDED, r.failure_message
    return output_json(r)


def test_executors_run_under_sched_batch_by_default(worker_factory):
    w = worker_factory()
    w.wait_serving()
    w.deploy("pol", POLICIES)
    seen = policies(w, "t1")
    assert seen["main"] == SCHED_BATCH, seen
    assert len(seen["threads"]) >= 2, seen  # the main thread and the watchdog
    assert set(seen["threads"]) == {SCHED_BATCH}, seen
    assert seen["child"] == SCHED_BATCH, seen
    assert seen["slack"] == 1000 and seen["child_slack"] == 1000, seen
    # the worker's own threads keep the default policy
    assert os.sched_getscheduler(w.proc.pid) == SCHED_OTHER
    assert not w.events("executor_sched_batch_failed")


def test_settings_off_leave_the_defaults(worker_factory):
    w = worker_factory("--executor-sched-batch", "false", "--executor-timer-slack-ns", "0")
    w.wait_serving()
    w.deploy("pol", POLICIES)
    seen = policies(w, "t1")
    assert seen["main"] == SCHED_OTHER, seen
    assert set(seen["threads"]) == {SCHED_OTHER}, seen
    assert seen["child"] == SCHED_OTHER, seen
    with open("/proc/self/timerslack_ns") as f:
        ours = int(f.read())  # what the worker inherited from this test (Linux: 50000)
    assert seen["slack"] == ours and seen["child_slack"] == ours, seen


def test_a_chosen_timer_slack(worker_factory):
    w = worker_factory("--executor-timer-slack-ns", "200000")
    w.wait_serving()
    w.deploy("pol", POLICIES)
    seen = policies(w, "t1")
    assert seen["slack"] == 200000 and seen["child_slack"] == 200000, seen

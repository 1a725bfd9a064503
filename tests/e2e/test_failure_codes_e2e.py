"""The failure codes only the core's unit tests and the simulation reached, now through
the real worker binary and real conditions:
  WORKER_SHUTDOWN  SIGTERM while a call runs past drain_timeout_ms
  SLOT_LOST        the slot's lease lapses while activation is stuck reading the code
                   store (CURRENT is a FIFO nobody writes yet: a hung filesystem)
  IO_SCOPE_FAILED  the scratch root is gone when a task needs its scratch directory
                   (its first use of ctx.scratch_dir; a task that never uses it does not fail)
Each time the worker keeps serving (or stops cleanly) afterwards."""

import os
import signal
import threading
import time

import grpc
from conftest import pb
from etcd_fixture import wait_for


def finished(w, task_id):
    return [r for r in w.events("task_finished") if r.get("task_id") == task_id]


def test_sigterm_past_the_drain_fails_the_running_task_worker_shutdown(worker_factory):
    w = worker_factory("--drain-timeout-ms", "500", executors=1)
    w.wait_serving()
    w.deploy("sleepy")
    w.submit("long-1", "sleepy", {"seconds": 60})
    assert wait_for(lambda: w.stub.GetTaskResult(pb.GetTaskResultRequest(task_id="long-1"))
                    .phase == pb.PHASE_CALLS, timeout=20)
    events = []
    stream = w.stub.WatchTasks(pb.WatchTasksRequest(task_ids=["long-1"]))

    def watch():
        try:
            for ev in stream:
                events.append(ev)
        except grpc.RpcError:
            pass

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    assert wait_for(lambda: events, timeout=10)  # the snapshot: the watch is attached
    t0 = time.time()
    rc = w.stop(signal.SIGTERM, timeout=30)
    assert rc == 0, w.logs[-20:]
    assert time.time() - t0 < 20  # the drain gave up on the 60 s call
    watcher.join(10)
    terminal = [e for e in events if e.kind == pb.TaskEvent.KIND_TERMINAL]
    assert len(terminal) == 1, events
    r = terminal[0].result
    assert r.state == pb.TASK_STATE_FAILED
    assert r.failure_code == pb.FAILURE_CODE_WORKER_SHUTDOWN, r
    done = finished(w, "long-1")
    assert len(done) == 1 and done[0]["failure_code"] == "WORKER_SHUTDOWN", done
    assert w.events("drain_incomplete")


def hang_current(w, function):
    """Replaces FUNCTION's CURRENT with a FIFO: reading it blocks until release()."""
    path = os.path.join(w.code_root, function, "CURRENT")
    with open(path) as f:
        epoch = f.read()
    os.remove(path)
    os.mkfifo(path)

    def release():
        fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)  # the stuck reader is there
        os.write(fd, epoch.encode())
        os.close(fd)
        os.remove(path)
        with open(path + ".new", "w") as f:
            f.write(epoch)
        os.rename(path + ".new", path)
    return release


def test_lease_lapsing_before_activation_fails_slot_lost(worker_factory):
    w = worker_factory(executors=1)
    w.wait_serving()
    w.deploy("echo")
    release = hang_current(w, "echo")
    try:
        slot = w.stub.RequestTaskSlot(pb.RequestTaskSlotRequest(task_id="lost-1", ttl_ms=300))
        assert slot.slot_id != 0
        w.submit("lost-1", "echo", {"x": 1}, slot_id=slot.slot_id)
        # activation is stuck: the lease lapses under it and the task converges
        r = w.wait_terminal("lost-1", timeout=20)
    finally:
        release()  # activation finishes late, on a task that is no longer waiting for it
    assert r.state == pb.TASK_STATE_FAILED
    assert r.failure_code == pb.FAILURE_CODE_SLOT_LOST, r
    assert "lease expired" in r.failure_message
    done = wait_for(lambda: finished(w, "lost-1"), timeout=10)  # logged after the result
    assert done and done[0]["failure_code"] == "SLOT_LOST"
    # the slot and the code store are fine afterwards
    w.submit("after-1", "echo", {"x": 2})
    r = w.wait_terminal("after-1", timeout=20)
    assert r.state == pb.TASK_STATE_SUCCEEDED, r.failure_message
    assert r.code_epoch == 1


# Uses its scratch directory (made on this first use), then sleeps args['seconds'].
SCRATCH_USER = ("import os, time\n"
                "def handler(args, ctx):\n"
                "    with open(os.path.join(ctx.scratch_dir, 'f'), 'w') as f:\n"
                "        f.write('x')\n"
                "    time.sleep(args.get('seconds', 0))\n"
                "    return {'dir': ctx.scratch_dir}\n")


def test_scratch_root_gone_fails_io_scope_failed(worker_factory, tmp_path):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    w = worker_factory("--scratch-root", str(scratch), executors=1)
    w.wait_serving()
    w.deploy("echo")
    w.deploy("uses", SCRATCH_USER)
    w.submit("io-ok", "uses", {})
    assert w.wait_terminal("io-ok").state == pb.TASK_STATE_SUCCEEDED
    # its scratch directory is removed after the result (on the threadpool)
    assert wait_for(lambda: os.listdir(str(scratch)) == [], timeout=10)
    # the scratch volume goes away under the worker (unmounted, cleaned by a tmp reaper)
    os.rmdir(str(scratch))
    w.submit("io-1", "uses", {})
    r = w.wait_terminal("io-1")
    assert r.state == pb.TASK_STATE_FAILED
    assert r.failure_code == pb.FAILURE_CODE_IO_SCOPE_FAILED, r
    assert str(scratch) in r.failure_message and "No such file or directory" in r.failure_message
    done = wait_for(lambda: finished(w, "io-1"), timeout=10)  # logged after the result
    assert done and done[0]["failure_code"] == "IO_SCOPE_FAILED"
    # a task whose function never uses its scratch directory does not need the root
    w.submit("io-noop", "echo", {})
    assert w.wait_terminal("io-noop").state == pb.TASK_STATE_SUCCEEDED
    # back again: tasks run again
    scratch.mkdir()
    w.submit("io-2", "uses", {})
    assert w.wait_terminal("io-2").state == pb.TASK_STATE_SUCCEEDED


def test_a_crashed_workers_scratch_leftover_is_no_io_scope_failure(worker_factory, tmp_path):
    """kill -9 leaves the task's scratch directory behind; the restarted worker gives the
    resubmitted task the same slot id, and its scratch directory must not collide (the
    restarted worker also removes the leftover at start)."""
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    first = worker_factory("--scratch-root", str(scratch), executors=1)
    first.wait_serving()
    first.deploy("uses", SCRATCH_USER)
    first.submit("again-1", "uses", {"seconds": 30})
    assert wait_for(lambda: os.listdir(str(scratch)), timeout=20)
    first.kill()  # SIGKILL: nothing is cleaned up
    left = os.listdir(str(scratch))
    assert left
    second = worker_factory("--scratch-root", str(scratch), executors=1)
    second.wait_serving()
    second.deploy("uses", SCRATCH_USER)
    second.submit("again-1", "uses", {"seconds": 0.1})
    r = second.wait_terminal("again-1")
    assert r.state == pb.TASK_STATE_SUCCEEDED, (r.failure_code, r.failure_message)
    # the leftover of the dead worker was removed at start (docs/security.md); its own
    # came and went (removed after the result, on the threadpool)
    assert wait_for(lambda: os.listdir(str(scratch)) == [], timeout=10), os.listdir(str(scratch))

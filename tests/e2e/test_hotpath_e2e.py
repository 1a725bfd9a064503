"""End-to-end: the per-task path of issue 12 as a watcher sees it (coalesced phase
changes, events shared by every watcher, TERMINAL never skipped)."""

import threading

import pytest

from conftest import pb

TERMINAL = (pb.TASK_STATE_SUCCEEDED, pb.TASK_STATE_FAILED, pb.TASK_STATE_CANCELLED)


@pytest.fixture
def worker(worker_factory):
    w = worker_factory("--task-slots", "128")
    w.wait_serving()
    for name in ("echo", "sleepy"):
        w.deploy(name)
    return w


def watch_all(w, ids, n_streams):
    """Opens n_streams WatchTasks streams on ids at once; each stream's events."""
    got = [None] * n_streams
    errors = []

    def one(k):
        try:
            got[k] = list(w.stub.WatchTasks(pb.WatchTasksRequest(task_ids=ids), timeout=60))
        except Exception as e:  # noqa: BLE001 (reported below)
            errors.append(e)

    threads = [threading.Thread(target=one, args=(k,)) for k in range(n_streams)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    return got


def test_many_watchers_get_every_terminal_as_the_same_bytes(worker):
    ids = ["many-%d" % i for i in range(40)]
    for t in ids:
        worker.submit(t, "echo", {"t": t})
    streams = watch_all(worker, ids, 6)
    terminal_bytes = {}
    for events in streams:
        first = {}
        terminals = {}
        for ev in events:
            first.setdefault(ev.task_id, ev)
            if ev.kind == pb.TaskEvent.KIND_TERMINAL:
                assert ev.task_id not in terminals, "one TERMINAL per task"
                terminals[ev.task_id] = ev
            else:
                assert ev.task_id not in terminals, "nothing after TERMINAL"
        assert sorted(terminals) == sorted(ids), "every task's TERMINAL reached every stream"
        for t in ids:
            assert first[t].kind == pb.TaskEvent.KIND_SNAPSHOT
            assert terminals[t].result.state == pb.TASK_STATE_SUCCEEDED
            terminal_bytes.setdefault(t, set()).add(terminals[t].SerializeToString())
    for t in ids:
        assert len(terminal_bytes[t]) == 1, "every watcher got the same TERMINAL bytes"


def test_single_builder_phase_is_never_seen(worker):
    # "single" builds on the loop in the turn its task enters the builder phase, and the
    # phase changes of a turn coalesce: no watcher (nor snapshot) sees PHASE_BUILDER.
    ids = ["one-%d" % i for i in range(8)]
    for t in ids:
        worker.submit(t, "sleepy", {"seconds": 0.3})
    for events in watch_all(worker, ids, 4):
        assert [e.kind for e in events if e.task_id == ids[0]][0] == pb.TaskEvent.KIND_SNAPSHOT
        for ev in events:
            assert ev.result.phase != pb.PHASE_BUILDER, ev
        phases = {}
        for ev in events:
            assert ev.result.phase >= phases.get(ev.task_id, 0), "phases never go backwards"
            phases[ev.task_id] = ev.result.phase
        assert all(p == pb.PHASE_DONE for p in phases.values())

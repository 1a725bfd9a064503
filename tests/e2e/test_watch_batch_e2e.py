"""WatchTasks with batch_events (issue 12, "replies and stream writes without a
wake-up per message"): events that queue up behind the message being sent go out in
one message, the first as itself and the rest in its `more` field, against the real
worker. The flattened stream must be exactly the unbatched one."""

import concurrent.futures

import pytest

from conftest import pb


@pytest.fixture
def worker(worker_factory):
    w = worker_factory("--task-slots", "1024")
    w.wait_serving()
    w.deploy("noop")
    return w


def flatten(messages):
    events = []
    for m in messages:
        assert all(len(x.more) == 0 for x in m.more), "nested batches"
        first = pb.TaskEvent()
        first.CopyFrom(m)
        del first.more[:]
        events.append(first)
        events.extend(m.more)
    return events


def submit_all(w, prefix, n):
    ids = ["%s-%d" % (prefix, i) for i in range(n)]
    with concurrent.futures.ThreadPoolExecutor(8) as ex:
        list(ex.map(lambda i: w.submit(i, "noop", {}), ids))
    return ids


def test_batched_watch_of_finished_tasks_equals_unbatched(worker):
    ids = submit_all(worker, "fin", 300)
    for i in ids:
        worker.wait_terminal(i)
    plain = list(worker.stub.WatchTasks(pb.WatchTasksRequest(task_ids=ids), timeout=60))
    batched = list(worker.stub.WatchTasks(pb.WatchTasksRequest(task_ids=ids, batch_events=True),
                                          timeout=60))
    assert all(len(m.more) == 0 for m in plain)
    events = flatten(batched)
    # the same events, byte for byte, in the same order
    assert [e.SerializeToString() for e in events] == [e.SerializeToString() for e in plain]
    assert len(events) == 2 * len(ids)
    # 600 events queued at once behind the first: some went out together
    assert len(batched) < len(events), (len(batched), len(events))


def test_batched_watch_of_live_tasks_sees_each_task_through(worker):
    ids = submit_all(worker, "live", 200)
    messages = list(worker.stub.WatchTasks(
        pb.WatchTasksRequest(task_ids=ids, batch_events=True), timeout=60))
    per_task = {}
    for e in flatten(messages):
        per_task.setdefault(e.task_id, []).append(e)
    assert sorted(per_task) == sorted(ids)
    for tid, evs in per_task.items():
        kinds = [e.kind for e in evs]
        assert kinds[0] == pb.TaskEvent.KIND_SNAPSHOT, (tid, kinds)
        assert kinds[-1] == pb.TaskEvent.KIND_TERMINAL and kinds.count(
            pb.TaskEvent.KIND_TERMINAL) == 1, (tid, kinds)
        assert evs[-1].result.state == pb.TASK_STATE_SUCCEEDED

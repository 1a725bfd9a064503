"""The per-task file system path (issue 12): a task's scratch directory is made only
when its function uses ctx.scratch_dir (executor-protocol.md §5.1), and removed only
then."""

import os

from conftest import output_json, pb
from etcd_fixture import wait_for


def run(w, task_id, function, args=None, timeout=60):
    w.submit(task_id, function, args or {})
    r = w.wait_terminal(task_id, timeout=timeout)
    assert r.state == pb.TASK_STATE_SUCCEEDED, (r.failure_code, r.failure_message)
    return r


def test_a_noop_task_makes_no_scratch_directory(worker_factory, tmp_path):
    """Before, every task's activation made (and its end removed) a directory under the
    scratch root, which changed the root's mtime; now nothing touches the root."""
    root = tmp_path / "scratch"
    root.mkdir()
    w = worker_factory("--scratch-root", str(root), executors=1)
    w.wait_serving()
    w.deploy("noop")
    run(w, "warm", "noop")
    before = os.stat(str(root)).st_mtime_ns
    os.utime(str(root), ns=(before - 10**9, before - 10**9))  # any change shows
    before = os.stat(str(root)).st_mtime_ns
    for i in range(20):
        run(w, "noop-%d" % i, "noop")
    assert os.listdir(str(root)) == []
    assert os.stat(str(root)).st_mtime_ns == before, "a no-op task created or removed an entry"


# The parent writes a file into its scratch directory from a thread it starts, then a
# child call (same task, maybe another executor) reads it back: one directory per task.
SHARED = ("import os, threading\n"
          "def handler(args, ctx):\n"
          "    if args.get('child'):\n"
          "        with open(os.path.join(ctx.scratch_dir, 'note')) as f:\n"
          "            return {'read': f.read(), 'dir': ctx.scratch_dir}\n"
          "    got = {}\n"
          "    def work():\n"
          "        got['dir'] = ctx.scratch_dir\n"
          "        with open(os.path.join(got['dir'], 'note'), 'w') as f:\n"
          "            f.write(args['text'])\n"
          "    t = threading.Thread(target=work)\n"
          "    t.start()\n"
          "    t.join()\n"
          "    child = ctx.call(None, {'child': True})\n"
          "    return {'dir': got['dir'], 'main_dir': ctx.scratch_dir, 'child': child}\n")


def test_scratch_dir_made_on_first_use_from_a_thread_and_shared_by_the_tasks_calls(
        worker_factory, tmp_path):
    root = tmp_path / "scratch"
    root.mkdir()
    w = worker_factory("--scratch-root", str(root), executors=2)
    w.wait_serving()
    w.deploy("shared", SHARED)
    out = output_json(run(w, "shared-1", "shared", {"text": "hello"}))
    assert out["dir"] == out["main_dir"] == out["child"]["dir"]
    assert out["child"]["read"] == "hello"
    assert os.path.dirname(out["dir"]) == str(root)
    # made for the task, so removed with it
    assert wait_for(lambda: os.listdir(str(root)) == [], timeout=10), os.listdir(str(root))

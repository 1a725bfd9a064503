"""Call outputs through the real worker: bounded as they arrive (a task whose calls print
a lot fails at the inline limit, early, in bounded worker memory), kept out of the
TaskResult when a writer runs, and every result small enough for max_message_bytes."""

import json
import os
import time

import grpc

from conftest import pb

# Each call prints 64 KiB: the captured stdout the executor keeps at most.
LOUD = ("import sys\n"
        "def handler(args, ctx):\n"
        "    sys.stdout.write('x' * 65536)\n"
        "    return args['start']\n")


def peak_rss_mb(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024.0
    raise AssertionError("no VmHWM for %d" % pid)


def measured_env():
    """The environment of a worker whose memory a test bounds. Under AddressSanitizer
    (the sanitizer build of the test command) freed memory sits in a 256 MB quarantine
    by default, which would count as the worker's; a small one keeps the figure the
    program's own. No effect on the builds without ASan."""
    env = dict(os.environ)
    extra = "quarantine_size_mb=8:thread_local_quarantine_size_kb=64"
    env["ASAN_OPTIONS"] = (env["ASAN_OPTIONS"] + ":" + extra) if env.get("ASAN_OPTIONS") else extra
    return env


def test_outputs_fail_the_task_as_they_pass_the_inline_limit(worker_factory):
    w = worker_factory(env=measured_env())
    w.wait_serving()
    w.deploy("loud", LOUD)
    calls = 20000
    w.submit("loud", "loud", {"start": 0, "stop": calls, "step": 1, "chunk": 1}, builder="range")
    r = w.wait_terminal("loud", timeout=300)
    assert r.state == pb.TASK_STATE_FAILED and r.failure_code == pb.FAILURE_CODE_CALL_FAILED
    assert "max_inline_output_bytes" in r.failure_message, r.failure_message
    assert "output_dir" in r.failure_message and "result_handler" in r.failure_message
    assert len(r.outputs) == 0
    done = r.statistic.calls_succeeded + r.statistic.calls_failed
    # 4 MiB of 64 KiB records: the failure comes after some 64 calls, not 20,000
    assert 0 < done < 2000, r.statistic
    assert r.statistic.calls_total == calls
    # 20,000 x 64 KiB held until the end would be 1.3 GB; bounded: the limit and the calls
    # in flight
    assert peak_rss_mb(w.proc.pid) < 400, peak_rss_mb(w.proc.pid)


# Each call returns args['size'] bytes of text and notes its scratch directory.
SIZED = ("def handler(args, ctx):\n"
         "    if 'marks' in args:\n"
         "        with open(args['marks'], 'a') as f:\n"
         "            f.write(ctx.scratch_dir + '\\n')\n"
         "    if args.get('sleep'):\n"
         "        import time; time.sleep(args['sleep'])\n"
         "    return 'x' * args['size']\n")

BIG = ("def handler(args, ctx):\n"
       "    return 'y' * 8000\n")


def test_a_writer_gets_the_outputs_and_the_result_a_count(worker_factory, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    w = worker_factory("--output-dir", str(out), env=measured_env())
    w.wait_serving()
    w.deploy("sized", SIZED)
    marks = tmp_path / "marks"
    items = [{"size": 100 + i, "marks": str(marks), "sleep": 1.5 if i == 0 else 0}
             for i in range(50)]
    w.submit("fw", "sized", items, builder="map", result_handler=pb.ResultHandler(type="file"))
    # while the calls run (call 0 sleeps 1.5 s), their outputs go to a spool file beside
    # the scratch directory: made at activation, written through a 256 KiB buffer (these
    # 50 short outputs reach the file only when the calls end)
    spool = None
    deadline = time.monotonic() + 50
    while spool is None or not os.path.exists(spool):
        assert time.monotonic() < deadline, "no spool file %s beside the scratch dir" % spool
        if spool is None and marks.exists() and marks.read_text():
            spool = marks.read_text().splitlines()[0] + ".outputs"
        time.sleep(0.02)
    r = w.wait_terminal("fw")
    assert r.state == pb.TASK_STATE_SUCCEEDED, r.failure_message
    assert len(r.outputs) == 0  # the outputs went to the writer, not into the result
    assert r.statistic.calls_total == 50 and r.statistic.calls_succeeded == 50
    assert len(r.plugin_results) == 1 and r.plugin_results[0].records == 50
    lines = open(r.plugin_results[0].location).read().splitlines()
    recs = [json.loads(l) for l in lines]
    assert [rec["index"] for rec in recs] == list(range(50))  # call order
    assert all(rec["value"] == "x" * (100 + rec["index"]) for rec in recs)
    for _ in range(100):  # removed with the scratch directory
        if not os.path.exists(spool):
            break
        time.sleep(0.05)
    assert not os.path.exists(spool)


def test_a_writer_task_runs_in_bounded_memory(worker_factory, tmp_path):
    """20,000 outputs of 8 KB (160 MB) through the file writer: the worker never holds
    them (held, and copied for the writer, they took some 500 MB)."""
    out = tmp_path / "out"
    out.mkdir()
    w = worker_factory("--output-dir", str(out), env=measured_env())
    w.wait_serving()
    w.deploy("big", BIG)
    calls = 20000
    w.submit("big", "big", {"start": 0, "stop": calls, "step": 1, "chunk": 1}, builder="range",
             result_handler=pb.ResultHandler(type="file"))
    r = w.wait_terminal("big", timeout=600)
    assert r.state == pb.TASK_STATE_SUCCEEDED, r.failure_message
    assert r.plugin_results[0].records == calls and len(r.outputs) == 0
    assert os.path.getsize(r.plugin_results[0].location) > calls * 8000
    assert peak_rss_mb(w.proc.pid) < 150, peak_rss_mb(w.proc.pid)


def test_every_result_fits_max_message_bytes(worker_factory):
    """With max_message_bytes and max_inline_output_bytes both 64 KiB, a client whose
    receive limit is max_message_bytes reads every result: outputs just under, at and
    over the limit, under the longest task id, by GetTaskResult and WatchTasks."""
    limit = 65536
    w = worker_factory("--max-message-bytes", str(limit), "--max-inline-output-bytes", str(limit))
    w.wait_serving()
    w.deploy("sized", SIZED)
    channel = grpc.insecure_channel(w.addr, options=[("grpc.max_receive_message_length", limit)])
    from conftest import pb_grpc
    stub = pb_grpc.WorkerServiceStub(channel)
    # around the inline limit (max_message_bytes less the 8 KiB a result's other fields
    # take at most) and up to max_message_bytes itself
    sizes = list(range(limit - 9000, limit - 1000, 500)) + list(range(limit - 1000, limit + 200, 40))
    states = set()
    for n, size in enumerate(sizes):
        task_id = ("t%05d-" % n) + "x" * 121  # 128 bytes: the longest task id
        w.submit(task_id, "sized", {"size": size})
        w.wait_terminal(task_id)  # the test's own client has gRPC's default 4 MiB limit
        r = stub.GetTaskResult(pb.GetTaskResultRequest(task_id=task_id), timeout=10)
        assert r.ByteSize() <= limit
        events = list(stub.WatchTasks(pb.WatchTasksRequest(task_ids=[task_id]), timeout=10))
        assert events[-1].kind == pb.TaskEvent.KIND_TERMINAL
        assert events[-1].result.state == r.state
        states.add(r.state)
        if r.state == pb.TASK_STATE_FAILED:
            assert "max_inline_output_bytes" in r.failure_message
    assert states == {pb.TASK_STATE_SUCCEEDED, pb.TASK_STATE_FAILED}
    channel.close()

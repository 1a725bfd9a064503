"""Call outputs through the real worker: bounded as they arrive (a task whose calls print
a lot fails at the inline limit, early, in bounded worker memory), kept out of the
TaskResult when a writer runs, and every result small enough for max_message_bytes."""

import json
import os

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


def test_outputs_fail_the_task_as_they_pass_the_inline_limit(worker_factory):
    w = worker_factory()
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

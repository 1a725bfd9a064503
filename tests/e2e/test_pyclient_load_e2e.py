"""10,000 tasks in flight at once from one worker_client Client, against the real worker:
every task is admitted while none can finish (their calls wait for a gate file), the
client holds them with two threads and a few WatchTasks streams (not a stream or a
thread per task), then the gate opens and every future gets its own value. Prints the
figures (CPU time per task of the client and of the worker, streams); asserts no
timing."""

import math
import os
import threading
import time

import pytest

from pyclient_support import deploy_all

import worker_client as wc

N = 10000


def cpu_seconds(pid):
    """utime + stime of a process, from /proc/PID/stat."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@pytest.fixture
def w(worker_factory):
    w = worker_factory("--task-slots", str(N + 100), "--max-retained-results", str(2 * N),
                       "--result-retention-ms", "600000")
    w.wait_serving()
    deploy_all(w)
    return w


def wait_for(pred, timeout):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if pred():
            return True
        time.sleep(0.1)
    return pred()


def test_ten_thousand_tasks_in_flight(w, tmp_path):
    gate = str(tmp_path / "gate")
    threads_before = {t.name for t in threading.enumerate()}
    worker_cpu0, client_cpu0 = cpu_seconds(w.proc.pid), time.process_time()
    t0 = time.time()
    with wc.Client(w.addr) as c:
        fs = [c.submit("gate", {"gate": gate, "i": i}) for i in range(N)]
        assert len({f.task_id for f in fs}) == N
        assert wait_for(lambda: c.stats()["submits"] == N, timeout=600), c.stats()
        admitted = time.time()
        # all admitted and none can end before the gate opens: N tasks in flight at once
        assert not any(f.done() for f in fs)
        assert all(f.address == w.addr for f in fs)
        for f in fs[:: N // 20]:
            assert c.get(f.task_id).state in ("PREPARING", "RUNNING")
        # a few shared streams: what N tasks need at 1024 a stream plus max_streams (4)
        # small ones, and during merges the streams they replace: never near one per task
        bound = math.ceil(N / 1024) + 4
        assert wait_for(lambda: c.stats()["streams_open"] <= bound, timeout=120), repr(c.stats())
        st = c.stats()
        assert st["streams_peak"] <= 4 * bound, repr(st)
        # two threads (network loop, delivery), whatever the number of tasks, besides
        # grpc.aio's one poller thread per process
        new = [t.name for t in threading.enumerate() if t.name not in threads_before]
        assert sorted(n for n in new if "_poll_wrapper" not in n) == [
            "worker-client-delivery", "worker-client-io"], new
        print("\n%d tasks admitted in %.1f s; streams open %d, opened %d, peak %d, merges %d"
              % (N, admitted - t0, st["streams_open"], st["streams_opened"], st["streams_peak"],
                 st["merges"]))
        with open(gate, "w"):
            pass
        values = [f.result(timeout=900) for f in fs]
        assert values == list(range(N))
        st = c.stats()
        assert st["submit_retries"] == 0 and st["duplicates"] == 0
        # each stream ends (OK) once its last task's TERMINAL event is read
        assert wait_for(lambda: c.stats()["streams_open"] == 0, timeout=60), repr(c.stats())
    worker_cpu, client_cpu = cpu_seconds(w.proc.pid) - worker_cpu0, time.process_time() - client_cpu0
    print("all %d done in %.1f s; CPU per task: client %.2f ms, worker %.2f ms (ratio %.2f)" % (
        N, time.time() - t0, 1000 * client_cpu / N, 1000 * worker_cpu / N,
        client_cpu / max(worker_cpu, 1e-9)))
    assert not [t.name for t in threading.enumerate() if t.name.startswith("worker-client")]

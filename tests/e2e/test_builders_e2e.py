"""Call builders through the real worker: they run on the threadpool under the builder
semaphore, so a large map does not stall the worker's RPCs, and builder_ms is the
time the builder ran; each reads the options it takes and refuses the others."""
import json
import subprocess
import time

import grpc
import pytest

from conftest import WORKERCTL, health_pb2, pb


def big_map_args(n=60000):
    """A 60,000-item JSON array of ~66-byte objects: about 4 MB."""
    items = [{"i": i, "pad": "x" * 48} for i in range(n)]
    return json.dumps(items, separators=(",", ":")).encode()


def phase_of(w, task_id):
    return w.stub.GetTaskResult(pb.GetTaskResultRequest(task_id=task_id), timeout=10).phase


def test_rpcs_answer_while_a_large_map_builds(worker_factory):
    """While one task's builder parses a 4 MB map, Health.Check and another task's
    SubmitTask and GetTaskResult are answered: the big task is seen in its builder phase both before and
    after each answer (on the old code the build ran on the loop, in the same turn as
    activation, so no RPC ever saw the phase)."""
    w = worker_factory("--max-message-bytes", "16MiB")
    w.deploy("noop")
    w.wait_serving()
    args = big_map_args()
    assert 3_500_000 < len(args) < 4_500_000
    answered_during_build = 0
    slowest = 0.0
    for attempt in range(5):
        big = "big-%d" % attempt
        w.submit(big, "noop", raw_args=args, builder="map")
        k = 0
        deadline = time.time() + 60
        while time.time() < deadline:
            before = phase_of(w, big)
            if before > pb.PHASE_BUILDER:
                break
            if before != pb.PHASE_BUILDER:
                continue
            t0 = time.monotonic()
            h = w.health.Check(health_pb2.HealthCheckRequest(), timeout=10)
            small = "small-%d" % attempt
            if k == 0:  # another task's submit, then its result
                assert not w.submit(small, "noop", args={}).duplicate
            else:
                w.stub.GetTaskResult(pb.GetTaskResultRequest(task_id=small), timeout=10)
            slowest = max(slowest, time.monotonic() - t0)
            k += 1
            assert h.status == health_pb2.HealthCheckResponse.SERVING
            if phase_of(w, big) == pb.PHASE_BUILDER:
                answered_during_build += 1
        w.stub.CancelTask(pb.CancelTaskRequest(task_id=big), timeout=10)
        r = w.wait_terminal(big, timeout=60)
        assert r.failure_code == pb.FAILURE_CODE_CANCELLED, r.failure_message  # built fine
        # measured on the builder's thread: parsing 4 MB takes more than a millisecond
        assert r.statistic.builder_ms >= 1, r.statistic
        print("attempt %d: %d answers during the build, builder_ms %d"
              % (attempt, answered_during_build, r.statistic.builder_ms))
        if answered_during_build:
            break
    assert answered_during_build > 0, "no RPC was answered while the large map was building"
    assert slowest < 5.0, "an RPC during the build took %.3f s" % slowest


def ctl(w, *args):
    return subprocess.run([WORKERCTL, "--addr", w.addr] + list(args), capture_output=True,
                          text=True, timeout=60)


def test_builder_options_are_read_or_refused(worker_factory):
    """map takes items=FIELD; an option a builder does not take is INVALID_ARGUMENT at
    submission, naming the builder and the options it takes (the old code accepted
    and ignored every option)."""
    w = worker_factory()
    w.deploy("echo")
    w.wait_serving()
    fn = pb.FunctionCallConfig(name="echo", type="map", args=b'{"data": [1, 2], "meta": "x"}',
                               options={"items": "data"})
    w.stub.SubmitTask(pb.SubmitTaskRequest(task_id="opt-map", function=fn), timeout=10)
    r = w.wait_terminal("opt-map")
    assert r.state == pb.TASK_STATE_SUCCEEDED, r.failure_message
    assert [json.loads(o.value)["echo"] for o in r.outputs] == [1, 2]

    for builder, key, known in (("", "chunk", "none"), ("map", "item", "items"),
                                ("range", "items", "none")):
        fn = pb.FunctionCallConfig(name="echo", type=builder, args=b'{"stop": 3}',
                                   options={key: "1"})
        with pytest.raises(grpc.RpcError) as e:
            w.stub.SubmitTask(pb.SubmitTaskRequest(task_id="opt-bad", function=fn), timeout=10)
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert e.value.details() == ("function.options: the %s builder: unknown option '%s' "
                                     "(known: %s)" % (builder or "single", key, known))
    # nothing was admitted under the refused id
    with pytest.raises(grpc.RpcError) as e:
        w.stub.GetTaskResult(pb.GetTaskResultRequest(task_id="opt-bad"), timeout=10)
    assert e.value.code() == grpc.StatusCode.NOT_FOUND

    out = ctl(w, "submit", "echo", '{"data": [7]}', "--builder", "map", "--option", "items=data",
              "--task-id", "opt-ctl", "--watch")
    assert out.returncode == 0 and "SUCCEEDED" in out.stdout, (out.stdout, out.stderr)
    out = ctl(w, "submit", "echo", "[7]", "--builder", "map", "--option", "chunk=2")
    assert out.returncode != 0 and "unknown option 'chunk' (known: items)" in out.stderr, out


def test_builders_never_hold_every_thread(worker_factory):
    """builder_concurrency (4) large maps building at once leave threadpool threads for
    the short jobs: another task is activated (its epoch pinned) while all four still
    build. With libuv's default 4 threads the activation waited for a build to end.
    The four are submitted at once (8 MB of args each, ~1 s of building on this VM) so
    that their builds overlap however long a submit takes; an attempt in which one
    build ended before all four were seen building is tried again."""
    w = worker_factory("--max-message-bytes", "16MiB", "--task-slots", "8")
    w.deploy("noop")
    w.wait_serving()
    args = big_map_args(120000)
    activated_during_builds = False
    for attempt in range(3):
        bigs = ["pool-%d-%d" % (attempt, i) for i in range(4)]
        futures = [w.stub.SubmitTask.future(pb.SubmitTaskRequest(
            task_id=b, function=pb.FunctionCallConfig(name="noop", type="map", args=args)),
            timeout=60) for b in bigs]
        for f in futures:
            f.result()
        small = "pool-small-%d" % attempt
        deadline = time.time() + 60
        overlapped = False
        while time.time() < deadline:  # all four building at the same time
            phases = [phase_of(w, b) for b in bigs]
            if any(p > pb.PHASE_BUILDER for p in phases):
                break  # one ended before the last started: no overlap this time
            if all(p == pb.PHASE_BUILDER for p in phases):
                overlapped = True
                break
        if overlapped:
            w.submit(small, "noop", args={})
            while time.time() < deadline:
                phases = [phase_of(w, b) for b in bigs]
                if any(p > pb.PHASE_BUILDER for p in phases):
                    break
                r = w.stub.GetTaskResult(pb.GetTaskResultRequest(task_id=small), timeout=10)
                if (r.code_epoch > 0 and all(p == pb.PHASE_BUILDER for p in phases)
                        and all(phase_of(w, b) == pb.PHASE_BUILDER for b in bigs)):
                    activated_during_builds = True
                    break
        for b in bigs:
            w.stub.CancelTask(pb.CancelTaskRequest(task_id=b), timeout=10)
        for b in bigs + ([small] if overlapped else []):
            w.wait_terminal(b, timeout=120)
        if activated_during_builds:
            break
    assert activated_during_builds, "no activation while four builders ran"

"""End-to-end tests of the gRPC server adapter (src/adapters/wk_grpc_server.c).

Drives tests/integration/grpc_server_harness.c (the server with a canned sink on an
actor thread; see the comment at its top for its answers) with python3-grpcio.

Run with /usr/bin/python3 (Debian's python3-grpcio, python3-protobuf, python3-pytest):
    WK_GRPC_HARNESS=<build>/grpc_server_harness WK_SOURCE_DIR=<repo> \\
        /usr/bin/python3 -m pytest -q tests/integration/test_grpc_server.py
Python stubs are generated at test time with protoc into a temporary directory.
WK_GRPC_HARNESS_WRAPPER, when set, prefixes the harness command line, e.g.
    WK_GRPC_HARNESS_WRAPPER="valgrind --error-exitcode=99 --leak-check=full
                             --errors-for-leak-kinds=definite"
"""

import concurrent.futures
import math
import os
import shlex
import statistics
import subprocess
import threading
import time

import grpc
import pytest

import grpc_harness
import grpc_stubs

SOURCE_DIR = os.environ.get("WK_SOURCE_DIR") or os.path.abspath(
    os.path.join(os.path.dirname(__file__), "..", ".."))
HARNESS = os.environ.get("WK_GRPC_HARNESS")
WRAPPER = shlex.split(os.environ.get("WK_GRPC_HARNESS_WRAPPER", ""))

# What the harness is configured with (grpc_server_harness.c).
MAX_TIMEOUT_MS = 3600 * 1000
MAX_WATCH_TASKS = 64
MAX_MESSAGE_BYTES = 1 << 20

pytestmark = pytest.mark.skipif(
    not HARNESS, reason="set WK_GRPC_HARNESS to the grpc_server_harness binary")

INVALID = grpc.StatusCode.INVALID_ARGUMENT


# ---- stubs ----------------------------------------------------------------------------

@pytest.fixture(scope="session")
def pb(tmp_path_factory):
    return grpc_stubs.generate(tmp_path_factory.mktemp("stubs"), SOURCE_DIR, "wk_health_pb2")


# ---- the harness process ----------------------------------------------------------------

class Harness(grpc_harness.Harness):
    def __init__(self, env_extra=None):
        env = dict(os.environ)
        env.update(env_extra or {})
        super().__init__(WRAPPER + [HARNESS], env)


assert_clean_exit = grpc_harness.assert_clean_exit


@pytest.fixture(scope="module")
def harness():
    h = Harness()
    yield h
    assert_clean_exit(h, h.stop())


@pytest.fixture(scope="module")
def channel(harness):
    ch = grpc.insecure_channel(harness.addr)
    grpc.channel_ready_future(ch).result(timeout=10)
    yield ch
    ch.close()


@pytest.fixture(scope="module")
def stub(pb, channel):
    return pb.wg.WorkerServiceStub(channel)


class Health:
    def __init__(self, pb, channel):
        self.check = channel.unary_unary(
            "/grpc.health.v1.Health/Check",
            request_serializer=pb.h.HealthCheckRequest.SerializeToString,
            response_deserializer=pb.h.HealthCheckResponse.FromString)
        self.watch = channel.unary_stream(
            "/grpc.health.v1.Health/Watch",
            request_serializer=pb.h.HealthCheckRequest.SerializeToString,
            response_deserializer=pb.h.HealthCheckResponse.FromString)


@pytest.fixture(scope="module")
def health(pb, channel):
    return Health(pb, channel)


def rpc_error(fn):
    with pytest.raises(grpc.RpcError) as e:
        fn()
    return e.value


def good_function(pb, **kw):
    args = dict(name="fn", type="single", entrypoint="main:handler")
    args.update(kw)
    return pb.w.FunctionCallConfig(**args)


def good_submit(pb, **kw):
    args = dict(task_id="task-1", function=good_function(pb))
    args.update(kw)
    return pb.w.SubmitTaskRequest(**args)


# ---- every method -----------------------------------------------------------------------

def test_request_task_slot(pb, stub):
    resp = stub.RequestTaskSlot(pb.w.RequestTaskSlotRequest(task_id="t-1", ttl_ms=5000),
                                timeout=5)
    assert resp.slot_id == 7
    assert resp.lease_expires_unix_ms == 1234
    assert resp.state == pb.w.TASK_STATE_PREPARING


def test_submit_task_echoes_task_id(pb, stub):
    resp = stub.SubmitTask(good_submit(pb, task_id="echo-me", slot_id=7), timeout=5)
    assert resp.task_id == "echo-me"
    assert resp.slot_id == 7
    assert resp.state == pb.w.TASK_STATE_PREPARING
    assert not resp.duplicate


def test_request_metadata_reaches_the_sink(pb, stub):
    resp = stub.SubmitTask(good_submit(pb), metadata=(("x-shadow-submit", "1"),), timeout=5)
    assert resp.duplicate  # the harness sets it from wk_rpc_metadata
    resp = stub.SubmitTask(good_submit(pb), metadata=(("x-shadow-submit", "0"),), timeout=5)
    assert not resp.duplicate


def test_get_task_result_not_found(pb, stub):
    e = rpc_error(lambda: stub.GetTaskResult(pb.w.GetTaskResultRequest(task_id="nope"),
                                             timeout=5))
    assert e.code() == grpc.StatusCode.NOT_FOUND
    assert e.details() == "no task"


def test_watch_tasks_streams_three_events_per_task(pb, stub):
    events = list(stub.WatchTasks(pb.w.WatchTasksRequest(task_ids=["a", "b"]), timeout=5))
    kinds = [pb.w.TaskEvent.KIND_SNAPSHOT, pb.w.TaskEvent.KIND_PHASE_CHANGED,
             pb.w.TaskEvent.KIND_TERMINAL]
    assert [(e.task_id, e.kind) for e in events] == \
        [("a", k) for k in kinds] + [("b", k) for k in kinds]
    assert events[-1].result.state == pb.w.TASK_STATE_SUCCEEDED


def test_watch_tasks_many_events_in_order(pb, stub):
    ids = ["task-%02d" % i for i in range(MAX_WATCH_TASKS)]
    events = list(stub.WatchTasks(pb.w.WatchTasksRequest(task_ids=ids), timeout=10))
    assert len(events) == 3 * len(ids)
    assert [e.task_id for e in events] == [i for i in ids for _ in range(3)]


def test_cancel_task(pb, stub):
    resp = stub.CancelTask(pb.w.CancelTaskRequest(task_id="t-9", reason="operator"),
                           timeout=5)
    assert resp.task_id == "t-9"
    assert resp.state == pb.w.TASK_STATE_CANCELLED
    assert resp.failure_code == pb.w.FAILURE_CODE_CANCELLED
    assert resp.failure_message == "operator"


def test_health_check(pb, health):
    serving = pb.h.HealthCheckResponse.SERVING
    assert health.check(pb.h.HealthCheckRequest(), timeout=5).status == serving
    assert health.check(pb.h.HealthCheckRequest(service="worker.v1.WorkerService"),
                        timeout=5).status == serving
    e = rpc_error(lambda: health.check(pb.h.HealthCheckRequest(service="other"), timeout=5))
    assert e.code() == grpc.StatusCode.NOT_FOUND


def test_health_watch_sends_serving_and_holds(pb, health):
    it = health.watch(pb.h.HealthCheckRequest(), timeout=30)
    assert next(it).status == pb.h.HealthCheckResponse.SERVING
    outcome = []

    def drain():
        try:
            outcome.extend(it)
        except grpc.RpcError as e:
            outcome.append(e.code())

    t = threading.Thread(target=drain, daemon=True)
    t.start()
    t.join(0.5)
    assert t.is_alive(), "the Health.Watch stream ended instead of staying open"
    it.cancel()
    t.join(5)
    assert not t.is_alive()
    assert outcome == [grpc.StatusCode.CANCELLED]


# ---- validation: one case per rule --------------------------------------------------------

def _cases():
    """(id, method, request builder, substrings the message must contain)."""
    nan = float("nan")
    c = []

    def add(case_id, method, build, *needles):
        c.append(pytest.param(method, build, needles, id=case_id))

    rts = lambda **kw: lambda pb: pb.w.RequestTaskSlotRequest(**kw)
    add("rts-task-id-empty", "RequestTaskSlot", rts(task_id=""), "task_id", "got 0 bytes")
    add("rts-task-id-131", "RequestTaskSlot", rts(task_id="x" * 131),
        "task_id must be 1 to 128 printable ASCII characters", "got 131 bytes")
    add("rts-task-id-space", "RequestTaskSlot", rts(task_id="a b"), "task_id", "0x20")
    add("rts-task-id-non-ascii", "RequestTaskSlot", rts(task_id="caf\u00e9"), "task_id",
        "0xc3")
    add("rts-task-id-nul", "RequestTaskSlot", rts(task_id="a\x00b"), "task_id", "NUL")
    add("rts-ttl", "RequestTaskSlot", rts(task_id="t", ttl_ms=(1 << 40) + 1), "ttl_ms",
        "2^40")

    add("get-task-id", "GetTaskResult",
        lambda pb: pb.w.GetTaskResultRequest(task_id="\t"), "task_id")
    add("cancel-task-id", "CancelTask",
        lambda pb: pb.w.CancelTaskRequest(task_id=""), "task_id")
    add("cancel-reason", "CancelTask",
        lambda pb: pb.w.CancelTaskRequest(task_id="t", reason="r" * 1025), "reason", "1024")

    sub = lambda **kw: lambda pb: good_submit(pb, **kw)
    fn = lambda **kw: lambda pb: good_submit(pb, function=good_function(pb, **kw))
    add("submit-task-id", "SubmitTask", sub(task_id="x" * 129), "task_id")
    add("submit-function-missing", "SubmitTask",
        lambda pb: pb.w.SubmitTaskRequest(task_id="t"), "function is required")
    add("function-name-empty", "SubmitTask", fn(name=""), "function.name")
    add("function-name-dot", "SubmitTask", fn(name=".hidden"), "function.name")
    add("function-name-char", "SubmitTask", fn(name="a/b"), "function.name", "0x2f")
    add("function-name-129", "SubmitTask", fn(name="n" * 129), "function.name")
    add("function-type-upper", "SubmitTask", fn(type="Single"), "function.type")
    add("function-type-33", "SubmitTask", fn(type="t" * 33), "function.type")
    add("entrypoint-no-colon", "SubmitTask", fn(entrypoint="main"), "function.entrypoint")
    add("entrypoint-digit", "SubmitTask", fn(entrypoint="1main:handler"),
        "function.entrypoint")
    add("entrypoint-empty-attr", "SubmitTask", fn(entrypoint="main:"), "function.entrypoint")
    add("entrypoint-two-colons", "SubmitTask", fn(entrypoint="a:b:c"),
        "function.entrypoint")
    add("content-type-unknown", "SubmitTask", fn(content_type=7), "function.content_type",
        "7")
    add("function-options-65", "SubmitTask",
        fn(options={"k%d" % i: "v" for i in range(65)}), "function.options", "64")
    add("timeout", "SubmitTask", sub(timeout_ms=MAX_TIMEOUT_MS + 1), "timeout_ms")
    add("failure-mode-unknown", "SubmitTask",
        lambda pb: good_submit(pb, call_failure_policy=pb.w.CallFailurePolicy(mode=5)),
        "call_failure_policy.mode", "5")
    retry = lambda **kw: lambda pb: good_submit(pb, call_retry_policy=pb.w.CallRetryPolicy(**kw))
    add("retry-attempts", "SubmitTask", retry(max_attempts=101),
        "call_retry_policy.max_attempts")
    add("retry-multiplier-low", "SubmitTask", retry(backoff_multiplier=0.5),
        "call_retry_policy.backoff_multiplier")
    add("retry-multiplier-high", "SubmitTask", retry(backoff_multiplier=100.5),
        "call_retry_policy.backoff_multiplier")
    add("retry-multiplier-nan", "SubmitTask", retry(backoff_multiplier=nan),
        "call_retry_policy.backoff_multiplier")
    add("retry-multiplier-inf", "SubmitTask", retry(backoff_multiplier=math.inf),
        "call_retry_policy.backoff_multiplier")
    add("retry-initial-backoff", "SubmitTask", retry(initial_backoff_ms=3600001),
        "call_retry_policy.initial_backoff_ms")
    add("retry-max-backoff", "SubmitTask", retry(max_backoff_ms=3600001),
        "call_retry_policy.max_backoff_ms")
    add("retry-max-below-initial", "SubmitTask",
        retry(initial_backoff_ms=1000, max_backoff_ms=10),
        "call_retry_policy.max_backoff_ms", "initial_backoff_ms")
    add("labels-65", "SubmitTask", sub(labels={"k%d" % i: "v" for i in range(65)}),
        "labels", "64")
    add("label-key-257", "SubmitTask", sub(labels={"k" * 257: "v"}), "labels key", "256")
    add("label-value-257", "SubmitTask", sub(labels={"k": "v" * 257}), "labels value",
        "256")
    add("label-value-nul", "SubmitTask", sub(labels={"k": "a\x00"}), "labels", "NUL")
    add("result-handler-type", "SubmitTask",
        lambda pb: good_submit(pb, result_handler=pb.w.ResultHandler(type="File!")),
        "result_handler.type")
    add("result-handler-options-65", "SubmitTask",
        lambda pb: good_submit(pb, result_handler=pb.w.ResultHandler(
            type="file", options={"k%d" % i: "v" for i in range(65)})),
        "result_handler.options", "64")

    watch = lambda ids: lambda pb: pb.w.WatchTasksRequest(task_ids=ids)
    add("watch-empty", "WatchTasks", watch([]), "task_ids", "got 0")
    add("watch-too-many", "WatchTasks", watch(["t%d" % i for i in range(MAX_WATCH_TASKS + 1)]),
        "task_ids", "got %d" % (MAX_WATCH_TASKS + 1))
    add("watch-bad-id", "WatchTasks", watch(["ok", "not ok"]), "task_ids[1]")
    add("watch-duplicate", "WatchTasks", watch(["a", "b", "a"]),
        "task_ids[2] duplicates task_ids[0]")

    add("health-check-service", "Health.Check",
        lambda pb: pb.h.HealthCheckRequest(service="s" * 257), "service", "256")
    add("health-watch-service", "Health.Watch",
        lambda pb: pb.h.HealthCheckRequest(service="s" * 257), "service", "256")
    return c


def invoke(pb, stub, health, method, req):
    if method == "Health.Check":
        return health.check(req, timeout=5)
    if method == "Health.Watch":
        return list(health.watch(req, timeout=5))
    fn = getattr(stub, method)
    if method == "WatchTasks":
        return list(fn(req, timeout=5))
    return fn(req, timeout=5)


@pytest.mark.parametrize("method,build,needles", _cases())
def test_validation(pb, stub, health, method, build, needles):
    e = rpc_error(lambda: invoke(pb, stub, health, method, build(pb)))
    assert e.code() == INVALID, (e.code(), e.details())
    for n in needles:
        assert n in e.details(), "%r not in %r" % (n, e.details())


def test_validation_accepts_the_limits(pb, stub, health):
    fn = good_function(pb, name="a" * 128, type="t" * 32, entrypoint="pkg.mod_1:Cls.run",
                       content_type=pb.w.CONTENT_TYPE_BYTES,
                       options={"k%d" % i: "v" for i in range(64)})
    req = pb.w.SubmitTaskRequest(
        task_id="~" * 128, function=fn, timeout_ms=MAX_TIMEOUT_MS,
        call_failure_policy=pb.w.CallFailurePolicy(mode=pb.w.CALL_FAILURE_MODE_CONTINUE),
        call_retry_policy=pb.w.CallRetryPolicy(max_attempts=100, backoff_multiplier=100.0,
                                               initial_backoff_ms=3600000,
                                               max_backoff_ms=3600000),
        labels={("k%d" % i).ljust(256, "k"): "v" * 256 for i in range(64)},
        result_handler=pb.w.ResultHandler(type="file_1",
                                          options={"k%d" % i: "v" for i in range(64)}))
    assert stub.SubmitTask(req, timeout=5).task_id == "~" * 128
    for m in (1.0, 0.0):
        req = good_submit(pb, call_retry_policy=pb.w.CallRetryPolicy(backoff_multiplier=m))
        stub.SubmitTask(req, timeout=5)
    stub.SubmitTask(good_submit(pb, function=good_function(pb, type="", entrypoint="")),
                    timeout=5)
    assert stub.RequestTaskSlot(pb.w.RequestTaskSlotRequest(task_id="!", ttl_ms=1 << 40),
                                timeout=5).slot_id == 7
    stub.CancelTask(pb.w.CancelTaskRequest(task_id="t", reason="r" * 1024), timeout=5)
    health.check(pb.h.HealthCheckRequest(service=""), timeout=5)
    e = rpc_error(lambda: health.check(pb.h.HealthCheckRequest(service="s" * 256), timeout=5))
    assert e.code() == grpc.StatusCode.NOT_FOUND  # valid, merely unknown


# ---- bytes that are not the request --------------------------------------------------------

METHODS = [
    ("/worker.v1.WorkerService/RequestTaskSlot", "worker.v1.RequestTaskSlotRequest", False),
    ("/worker.v1.WorkerService/SubmitTask", "worker.v1.SubmitTaskRequest", False),
    ("/worker.v1.WorkerService/GetTaskResult", "worker.v1.GetTaskResultRequest", False),
    ("/worker.v1.WorkerService/WatchTasks", "worker.v1.WatchTasksRequest", True),
    ("/worker.v1.WorkerService/CancelTask", "worker.v1.CancelTaskRequest", False),
    ("/grpc.health.v1.Health/Check", "grpc.health.v1.HealthCheckRequest", False),
    ("/grpc.health.v1.Health/Watch", "grpc.health.v1.HealthCheckRequest", True),
]

GARBAGE = [
    b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff",  # a varint that never ends
    b"\x0a\x40abc",                                   # a length past the end
    b"\x0f",                                          # wire type 7
    b"\x0b\x0c",                                      # a group
    b"\x80\x00\x00",                                  # field 0 (an overlong tag protobuf-c accepts)
]


def raw_call(channel, path, streaming, payload, timeout=5):
    if streaming:
        return list(channel.unary_stream(path)(payload, timeout=timeout))
    return channel.unary_unary(path)(payload, timeout=timeout)


@pytest.mark.parametrize("path,type_name,streaming", METHODS, ids=[m[0] for m in METHODS])
def test_undecodable_bytes(channel, path, type_name, streaming):
    for payload in GARBAGE:
        e = rpc_error(lambda: raw_call(channel, path, streaming, payload))
        assert e.code() == INVALID, (payload, e.code(), e.details())
        assert e.details() == "request is not a valid %s" % type_name, e.details()


def test_invalid_utf8_in_a_string(channel):
    e = rpc_error(lambda: raw_call(channel, "/worker.v1.WorkerService/GetTaskResult", False,
                                   b"\x0a\x02\xff\xfe"))
    assert e.code() == INVALID
    assert "task_id must be valid UTF-8" in e.details(), e.details()


def test_empty_request_is_decoded_then_validated(channel):
    e = rpc_error(lambda: raw_call(channel, "/worker.v1.WorkerService/RequestTaskSlot", False,
                                   b""))
    assert e.code() == INVALID
    assert "task_id" in e.details()


def test_missing_request_message(channel):
    # A client-streaming call that sends no message at all, then half-closes.
    e = rpc_error(lambda: channel.stream_unary("/worker.v1.WorkerService/GetTaskResult")(
        iter([]), timeout=5))
    assert e.code() == INVALID
    assert e.details().startswith("request message is missing"), e.details()


def test_compressed_request(pb, stub):
    resp = stub.SubmitTask(good_submit(pb, task_id="gz", function=good_function(
        pb, args=b"z" * 100000)), compression=grpc.Compression.Gzip, timeout=5)
    assert resp.task_id == "gz"


def test_unknown_fields_are_ignored(pb, channel):
    payload = pb.w.RequestTaskSlotRequest(task_id="t").SerializeToString() + b"\xf8\x07\x01"
    resp = pb.w.RequestTaskSlotResponse.FromString(
        raw_call(channel, "/worker.v1.WorkerService/RequestTaskSlot", False, payload))
    assert resp.slot_id == 7


def test_oversized_message_is_invalid_argument_naming_the_limit(pb, stub):
    # the proto's INVALID_ARGUMENT ("oversized message"), not gRPC's bare
    # RESOURCE_EXHAUSTED "Received message larger than max", which a client reads as
    # "no slot here, try another worker"
    big = good_submit(pb, function=good_function(pb, args=b"x" * (MAX_MESSAGE_BYTES + 1)))
    size = big.ByteSize()
    for compression in (None, grpc.Compression.Gzip):  # the size counted is the decoded one
        e = rpc_error(lambda: stub.SubmitTask(big, timeout=5, compression=compression))
        assert e.code() == grpc.StatusCode.INVALID_ARGUMENT, (e.code(), e.details())
        assert "request message is %d bytes, above max_message_bytes (%d bytes)" % (
            size, MAX_MESSAGE_BYTES) in e.details(), e.details()
    e = rpc_error(lambda: stub.SubmitTask(
        good_submit(pb, function=good_function(pb, args=b"x" * (8 * MAX_MESSAGE_BYTES))),
        timeout=10))
    assert e.code() == grpc.StatusCode.INVALID_ARGUMENT, (e.code(), e.details())
    assert "max_message_bytes (%d bytes)" % MAX_MESSAGE_BYTES in e.details(), e.details()
    under = good_submit(pb, function=good_function(pb, args=b"x" * (MAX_MESSAGE_BYTES - 1024)))
    assert stub.SubmitTask(under, timeout=5).task_id == "task-1"


@pytest.mark.parametrize("path", ["/worker.v1.WorkerService/Nope", "/no.such.Service/Call",
                                  "/worker.v1.WorkerService/submittask"])
def test_unknown_method_is_unimplemented_at_once(channel, path):
    for _ in range(6):  # more than the server's pre-requested generic calls
        start = time.monotonic()
        e = rpc_error(lambda: channel.unary_unary(path)(b"\x0a\x01t", timeout=5))
        elapsed = time.monotonic() - start
        assert e.code() == grpc.StatusCode.UNIMPLEMENTED, (e.code(), e.details())
        assert e.details() == "unknown method " + path
        assert elapsed < 1.0, elapsed


def test_unknown_streaming_method(channel):
    e = rpc_error(lambda: list(channel.unary_stream("/worker.v1.WorkerService/WatchAll")(
        b"", timeout=5)))
    assert e.code() == grpc.StatusCode.UNIMPLEMENTED


# ---- streams that end early ---------------------------------------------------------------

def test_client_cancels_streams_mid_way(pb, harness, stub, health):
    for _ in range(10):
        it = health.watch(pb.h.HealthCheckRequest(), timeout=30)
        assert next(it).status == pb.h.HealthCheckResponse.SERVING
        it.cancel()
        ids = ["c%d" % i for i in range(MAX_WATCH_TASKS)]
        it = stub.WatchTasks(pb.w.WatchTasksRequest(task_ids=ids), timeout=30)
        assert next(it).task_id == "c0"
        it.cancel()
        with pytest.raises(grpc.RpcError) as e:
            list(it)
        assert e.value.code() == grpc.StatusCode.CANCELLED
    time.sleep(0.2)
    assert harness.alive()
    assert stub.RequestTaskSlot(pb.w.RequestTaskSlotRequest(task_id="after"),
                                timeout=5).slot_id == 7


def test_stream_deadline_expires(pb, harness, health):
    it = health.watch(pb.h.HealthCheckRequest(), timeout=0.5)
    assert next(it).status == pb.h.HealthCheckResponse.SERVING
    with pytest.raises(grpc.RpcError) as e:
        list(it)
    assert e.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    assert health.check(pb.h.HealthCheckRequest(), timeout=5).status == \
        pb.h.HealthCheckResponse.SERVING


def test_unary_cancelled_by_client(pb, stub):
    futures = [stub.RequestTaskSlot.future(pb.w.RequestTaskSlotRequest(task_id="f%d" % i),
                                           timeout=5) for i in range(200)]
    for i, f in enumerate(futures):
        if i % 2 == 0:
            f.cancel()
    done = 0
    for i, f in enumerate(futures):
        if i % 2 == 1 or not f.cancelled():
            assert f.result().slot_id == 7
            done += 1
    assert done >= 100
    assert stub.RequestTaskSlot(pb.w.RequestTaskSlotRequest(task_id="x"), timeout=5).slot_id == 7


@pytest.mark.parametrize("defer", ["0", "1"], ids=["nudge_each", "deferring_actor"])
def test_stream_queue_bound(pb, defer):
    # deferring: the actor's sends wait in the outbox until it flushes; the bound still
    # counts the messages behind the one the first batch takes, as when it starts at once
    h = Harness({"WK_HARNESS_MAX_STREAM_QUEUE": "2", "WK_HARNESS_DEFER": defer})
    try:
        ch = grpc.insecure_channel(h.addr)
        s = pb.wg.WorkerServiceStub(ch)
        ids = ["q%02d" % i for i in range(MAX_WATCH_TASKS)]
        expected = [i for i in ids for _ in range(3)]
        overflowed = 0
        for _ in range(5):
            got = []
            try:
                for ev in s.WatchTasks(pb.w.WatchTasksRequest(task_ids=ids), timeout=10):
                    got.append(ev.task_id)
                assert got == expected
            except grpc.RpcError as e:
                assert e.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, e.code()
                assert e.details() == "stream queue full"
                assert 1 <= len(got) < len(expected)
                assert got == expected[:len(got)]  # in order, nothing skipped
                overflowed += 1
        assert overflowed > 0, "the actor never outran a 2-message queue"
        assert s.RequestTaskSlot(pb.w.RequestTaskSlotRequest(task_id="t"), timeout=5).slot_id == 7
        ch.close()
    finally:
        assert_clean_exit(h, h.stop())


def test_stream_byte_bounds(pb):
    """Unsent bytes are bounded per stream and in all (wk_rpc_send_parts, wk_rpc_abort):
    clients with a small flow-control window that do not read are ended
    RESOURCE_EXHAUSTED, even with a message gRPC holds for them; a reader is served; the
    server stops clean (its byte total back to zero)."""
    h = Harness({"WK_HARNESS_MAX_STREAM_BYTES": str(1 << 20),
                 "WK_HARNESS_MAX_TOTAL_STREAM_BYTES": str(3 << 20)})
    opts = [("grpc.http2.bdp_probe", 0), ("grpc.http2.lookahead_bytes", 1024)]
    channels = []
    try:
        def slow(ids):
            ch = grpc.insecure_channel(h.addr, options=opts)
            channels.append(ch)
            return pb.wg.WorkerServiceStub(ch).WatchTasks(
                pb.w.WatchTasksRequest(task_ids=ids), timeout=30)

        def status_of(stream):
            got = 0
            try:
                for ev in stream:
                    got += 1
                    assert len(ev.result.failure_message) == 256 * 1024
                return grpc.StatusCode.OK, "", got
            except grpc.RpcError as e:
                return e.code(), e.details(), got

        def reader_served():
            ch = grpc.insecure_channel(h.addr)
            events = list(pb.wg.WorkerServiceStub(ch).WatchTasks(
                pb.w.WatchTasksRequest(task_ids=["big:r"]), timeout=10))
            assert [e.kind for e in events] == [1, 2, 3]
            ch.close()

        # 8 results of 256 KiB on one stream: over 1 MiB unsent, ended at once
        over_stream = slow(["big:s%d" % i for i in range(8)])
        time.sleep(1)
        reader_served()  # the ended stream holds nothing of the total
        code, details, got = status_of(over_stream)
        assert code == grpc.StatusCode.RESOURCE_EXHAUSTED and details == "over stream bytes"
        assert got < 8 * 3

        # 16 streams of one 256 KiB result each (three events sharing it): a stream fits
        # its bound, 16 of them do not fit 3 MiB together
        many = [slow(["big:t%d" % i]) for i in range(16)]
        time.sleep(1)
        results = [status_of(s) for s in many]
        over_total = [r for r in results if r[1] == "over total bytes"]
        served = [r for r in results if r[0] == grpc.StatusCode.OK]
        assert all(r[0] == grpc.StatusCode.RESOURCE_EXHAUSTED for r in over_total)
        assert len(over_total) >= 4, results
        assert len(served) + len(over_total) == 16, results
        assert all(r[2] == 3 for r in served)
        reader_served()  # read or ended, they let go of the total
    finally:
        for ch in channels:
            ch.close()
        assert_clean_exit(h, h.stop())


# ---- load -----------------------------------------------------------------------------------

def test_many_calls_in_flight_on_one_channel(pb, stub):
    slots = [stub.RequestTaskSlot.future(pb.w.RequestTaskSlotRequest(task_id="m%d" % i),
                                         timeout=10) for i in range(300)]
    # each submit names its own slot: the echo shows every answer went to its own call
    submits = [stub.SubmitTask.future(good_submit(pb, task_id="s%d" % i, slot_id=100 + i),
                                      timeout=10) for i in range(100)]
    for f in slots:
        r = f.result()
        assert r.slot_id == 7
        assert r.lease_expires_unix_ms == 1234
        assert r.state == pb.w.TASK_STATE_PREPARING
    for i, f in enumerate(submits):
        r = f.result()
        assert r.task_id == "s%d" % i
        assert r.slot_id == 100 + i
        assert r.state == pb.w.TASK_STATE_PREPARING
        assert not r.duplicate


def test_64_concurrent_clients(pb, harness):
    n_clients, rounds = 64, 10
    barrier = threading.Barrier(n_clients)

    def client(k):
        ch = grpc.insecure_channel(harness.addr,
                                   options=[("grpc.use_local_subchannel_pool", 1)])
        try:
            s = pb.wg.WorkerServiceStub(ch)
            h = Health(pb, ch)
            grpc.channel_ready_future(ch).result(timeout=20)
            barrier.wait(timeout=30)
            for r in range(rounds):
                tid = "c%d-%d" % (k, r)
                assert s.RequestTaskSlot(pb.w.RequestTaskSlotRequest(task_id=tid),
                                         timeout=20).slot_id == 7
                assert s.SubmitTask(good_submit(pb, task_id=tid), timeout=20).task_id == tid
                assert len(list(s.WatchTasks(pb.w.WatchTasksRequest(task_ids=[tid]),
                                             timeout=20))) == 3
                assert h.check(pb.h.HealthCheckRequest(), timeout=20).status == \
                    pb.h.HealthCheckResponse.SERVING
                try:
                    s.GetTaskResult(pb.w.GetTaskResultRequest(task_id=tid), timeout=20)
                    raise AssertionError("GetTaskResult should be NOT_FOUND")
                except grpc.RpcError as e:
                    assert e.code() == grpc.StatusCode.NOT_FOUND
            return k
        finally:
            ch.close()

    with concurrent.futures.ThreadPoolExecutor(max_workers=n_clients) as pool:
        results = list(pool.map(client, range(n_clients)))
    assert sorted(results) == list(range(n_clients))
    assert harness.alive()


def test_a_deferring_actor_answers_everything_in_order(pb):
    """The worker's loop leaves its answers in the server's outbox and flushes once per
    turn (wk_grpc_server_defer_on_this_thread): every unary answer reaches its own call,
    every stream's events arrive in order, from many clients at once."""
    h = Harness({"WK_HARNESS_DEFER": "1"})
    try:
        ch = grpc.insecure_channel(h.addr)
        s = pb.wg.WorkerServiceStub(ch)
        slots = [s.RequestTaskSlot.future(pb.w.RequestTaskSlotRequest(task_id="m%d" % i),
                                          timeout=10) for i in range(300)]
        submits = [s.SubmitTask.future(good_submit(pb, task_id="s%d" % i, slot_id=100 + i),
                                       timeout=10) for i in range(100)]
        ids = ["task-%02d" % i for i in range(MAX_WATCH_TASKS)]
        watches = [s.WatchTasks(pb.w.WatchTasksRequest(task_ids=ids), timeout=10)
                   for _ in range(20)]
        assert all(f.result().slot_id == 7 for f in slots)
        assert [f.result().slot_id for f in submits] == [100 + i for i in range(100)]
        for it in watches:
            assert [e.task_id for e in it] == [i for i in ids for _ in range(3)]

        def client(k):
            c = grpc.insecure_channel(h.addr, options=[("grpc.use_local_subchannel_pool", 1)])
            try:
                cs = pb.wg.WorkerServiceStub(c)
                for r in range(10):
                    tid = "c%d-%d" % (k, r)
                    assert cs.SubmitTask(good_submit(pb, task_id=tid), timeout=20).task_id == tid
                    assert len(list(cs.WatchTasks(pb.w.WatchTasksRequest(task_ids=[tid]),
                                                  timeout=20))) == 3
                return k
            finally:
                c.close()

        with concurrent.futures.ThreadPoolExecutor(max_workers=32) as pool:
            assert sorted(pool.map(client, range(32))) == list(range(32))
        ch.close()
    finally:
        assert_clean_exit(h, h.stop())


# ---- latency: a hop to the actor costs about as much as answering inline ------------------

def test_reply_from_another_thread_costs_about_an_inline_reply(pb):
    h = Harness({"WK_HARNESS_INLINE_HEALTH": "1"})
    try:
        ch = grpc.insecure_channel(h.addr)
        s = pb.wg.WorkerServiceStub(ch)
        hc = Health(pb, ch)
        rts_req = pb.w.RequestTaskSlotRequest(task_id="lat")
        hc_req = pb.h.HealthCheckRequest()
        for _ in range(300):
            s.RequestTaskSlot(rts_req, timeout=5)
            hc.check(hc_req, timeout=5)
        rts, inline = [], []
        for _ in range(1500):
            t0 = time.perf_counter()
            s.RequestTaskSlot(rts_req, timeout=5)
            t1 = time.perf_counter()
            hc.check(hc_req, timeout=5)
            t2 = time.perf_counter()
            rts.append(t1 - t0)
            inline.append(t2 - t1)
        ch.close()
        p50_rts, p50_inline = statistics.median(rts), statistics.median(inline)
        p99_rts = sorted(rts)[int(len(rts) * 0.99)]
        p99_inline = sorted(inline)[int(len(inline) * 0.99)]
        print("\nRequestTaskSlot via actor: p50 %.0f us p99 %.0f us; Health.Check inline: "
              "p50 %.0f us p99 %.0f us" % (p50_rts * 1e6, p99_rts * 1e6, p50_inline * 1e6,
                                           p99_inline * 1e6))
        # Generous bounds: the Python client dominates both numbers.
        assert p50_rts <= p50_inline * 1.5 + 200e-6
    finally:
        assert_clean_exit(h, h.stop())


# ---- shutdown -------------------------------------------------------------------------------

def test_sigterm_with_open_streams_exits_cleanly(pb):
    h = Harness()
    ch = grpc.insecure_channel(h.addr)
    hc = Health(pb, ch)
    s = pb.wg.WorkerServiceStub(ch)
    streams = []
    for _ in range(3):
        it = hc.watch(pb.h.HealthCheckRequest(), timeout=30)
        assert next(it).status == pb.h.HealthCheckResponse.SERVING
        streams.append(it)
    assert s.RequestTaskSlot(pb.w.RequestTaskSlotRequest(task_id="t"), timeout=5).slot_id == 7
    start = time.monotonic()
    rc = h.stop(timeout=20)
    assert time.monotonic() - start < 10
    assert_clean_exit(h, rc)
    assert "stopped on signal 15, 3 streams cancelled" in h.err(), h.err()
    for it in streams:
        with pytest.raises(grpc.RpcError) as e:
            list(it)
        assert e.value.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED,
                                  grpc.StatusCode.UNKNOWN), e.value.code()
    ch.close()


def test_sigterm_when_idle_exits_cleanly():
    h = Harness()
    assert_clean_exit(h, h.stop(timeout=20))


def test_port_in_use_is_reported(harness):
    p = subprocess.run([HARNESS, harness.addr], capture_output=True, text=True, timeout=20)
    assert p.returncode == 1, (p.returncode, p.stderr)
    assert "cannot listen on " + harness.addr in p.stderr, p.stderr


@pytest.mark.parametrize("defer", ["0", "1"], ids=["nudge_each", "deferring_actor"])
def test_sigterm_under_load_exits_cleanly(pb, defer):
    """Stop races with replies from the actor, stream sends, client cancels and frees
    (deferring: and with batches the outbox holds when stop begins)."""
    for _ in range(5):
        h = Harness({"WK_HARNESS_DEFER": defer})
        stop = threading.Event()

        def load(k):
            ch = grpc.insecure_channel(h.addr, options=[("grpc.use_local_subchannel_pool", 1)])
            s = pb.wg.WorkerServiceStub(ch)
            hc = Health(pb, ch)
            i = 0
            try:
                while not stop.is_set():
                    i += 1
                    try:
                        if k % 4 == 0:
                            it = hc.watch(pb.h.HealthCheckRequest(), timeout=5)
                            next(it)
                            if i % 2:
                                it.cancel()
                        elif k % 4 == 1:
                            it = s.WatchTasks(pb.w.WatchTasksRequest(
                                task_ids=["w%d" % j for j in range(MAX_WATCH_TASKS)]), timeout=5)
                            next(it)
                            if i % 2:
                                it.cancel()
                            else:
                                list(it)
                        elif k % 4 == 2:
                            f = s.RequestTaskSlot.future(
                                pb.w.RequestTaskSlotRequest(task_id="t%d" % i), timeout=5)
                            if i % 3 == 0:
                                f.cancel()
                            else:
                                f.result()
                        else:
                            s.SubmitTask(good_submit(pb, task_id="s%d" % i), timeout=5)
                    except grpc.RpcError:
                        pass
            finally:
                ch.close()

        threads = [threading.Thread(target=load, args=(k,), daemon=True) for k in range(16)]
        for t in threads:
            t.start()
        time.sleep(0.7)
        rc = h.stop(timeout=30)
        stop.set()
        # Not joined for long: python3-grpcio 1.51 sometimes leaves a client stream that
        # started during the server's shutdown stuck past its deadline (a Python gRPC
        # server shows the same); the threads are daemons and end with the process.
        deadline = time.monotonic() + 2
        for t in threads:
            t.join(max(0.0, deadline - time.monotonic()))
        assert_clean_exit(h, rc)

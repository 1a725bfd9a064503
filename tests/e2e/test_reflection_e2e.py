"""gRPC server reflection (issue 13 §5) against a client no one here wrote: a Go program
(tests/e2e/go_reflection, built here against Debian's grpc-go reflection client and the
protobuf runtime's protodesc) lists the services over grpc.reflection.v1alpha and v1
and describes worker.v1.WorkerService from the descriptors the worker sends. Python's
grpcio checks the edges: several requests on one stream, a request that does not
decode, the token, and `reflection: false`."""
import json
import os
import re
import subprocess

import grpc
import pytest

from conftest import ROOT
from go_build import build_go

V1ALPHA = "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo"
V1 = "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo"


@pytest.fixture(scope="module")
def go_reflection(tmp_path_factory):
    return build_go(str(tmp_path_factory.mktemp("go")), "go_reflection")


def proto_rpcs():
    """The RPCs worker.proto declares, read from the file itself: the descriptors are
    made from proto/ at build time, so whatever is added there is served."""
    text = open(os.path.join(ROOT, "proto/worker/v1/worker.proto")).read()
    return re.findall(r"^\s*rpc\s+(\w+)\s*\(", text, re.M)


def run_go(binary, addr, *token):
    return subprocess.run([binary, addr] + list(token), capture_output=True, text=True,
                          timeout=60)


def test_go_reflection_client_lists_and_describes(go_reflection, worker_factory):
    w = worker_factory()
    w.wait_serving()
    out = run_go(go_reflection, w.addr)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    services = {"worker.v1.WorkerService", "grpc.health.v1.Health",
                "grpc.reflection.v1alpha.ServerReflection", "grpc.reflection.v1.ServerReflection"}
    assert set(doc["services"]) == services, doc["services"]
    assert set(doc["v1_services"]) == services
    assert doc["file"] == "worker/v1/worker.proto" and doc["files"][0] == "worker/v1/worker.proto"
    methods = {m["name"]: m for m in doc["methods"]}
    assert sorted(methods) == sorted(proto_rpcs())
    assert methods["SubmitTask"]["input"] == "worker.v1.SubmitTaskRequest"
    assert methods["SubmitTask"]["output"] == "worker.v1.SubmitTaskResponse"
    assert methods["WatchTasks"]["server_streaming"] and not methods["WatchTasks"]["client_streaming"]
    assert doc["submit_request_fields"]["task_id"] == "string"
    assert doc["submit_request_fields"]["call_timeout_ms"] == "uint64"
    assert doc["not_found"] == "5"  # NOT_FOUND in an ErrorResponse, the stream goes on


def test_reflection_is_behind_the_token(go_reflection, worker_factory):
    w = worker_factory("--auth-token", "s3cret-token")  # listening: reflection needs no more
    out = run_go(go_reflection, w.addr)
    assert out.returncode == 1 and "Unauthenticated" in out.stderr, out.stderr
    out = run_go(go_reflection, w.addr, "wrong-token")
    assert out.returncode == 1 and "Unauthenticated" in out.stderr
    out = run_go(go_reflection, w.addr, "s3cret-token")
    assert out.returncode == 0, out.stderr
    assert "worker.v1.WorkerService" in json.loads(out.stdout)["services"]


def test_reflection_false_turns_it_off(go_reflection, worker_factory):
    w = worker_factory("--reflection", "false")
    w.wait_serving()
    out = run_go(go_reflection, w.addr)
    assert out.returncode == 1 and "Unimplemented" in out.stderr, out.stderr
    for path in (V1ALPHA, V1):
        call = w.channel.stream_stream(path)
        with pytest.raises(grpc.RpcError) as e:
            list(call(iter([b"\x3a\x01*"]), timeout=10))
        assert e.value.code() == grpc.StatusCode.UNIMPLEMENTED


def test_many_requests_on_one_stream_and_bad_bytes(worker_factory):
    w = worker_factory()
    w.wait_serving()
    call = w.channel.stream_stream(V1ALPHA)
    # list_services (field 7) eight times, then file_by_filename (field 3) twice
    reqs = [b"\x3a\x00"] * 8 + [b"\x1a\x16worker/v1/worker.proto", b"\x1a\x07nothing"]
    answers = list(call(iter(reqs), timeout=20))
    assert len(answers) == 10
    assert all(b"worker.v1.WorkerService" in a for a in answers[:8])
    assert b"package worker.v1" not in answers[8] and b"worker.v1" in answers[8]
    assert b"no such file 'nothing'" in answers[9]
    # bytes that are no ServerReflectionRequest end the stream INVALID_ARGUMENT ...
    with pytest.raises(grpc.RpcError) as e:
        list(call(iter([b"\x3a\x00", b"\xff\xff\xff"]), timeout=10))
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "ServerReflectionRequest" in e.value.details()
    # ... and the worker serves on
    assert len(list(call(iter([b"\x3a\x00"]), timeout=10))) == 1
    # a stream with no request ends OK, with no answer
    assert list(call(iter([]), timeout=10)) == []

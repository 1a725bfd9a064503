"""Answers started together leave together (wk_grpc_server.c, "Corking"). The listener
files each accepted socket under its peer address; the server finds a call's socket
from gRPC's peer string (ipv4:..., ipv6:%5B...%5D:...), corks it while it starts a
burst of answers and uncorks it after, so the answers go out in one send.

Checked with a real gRPC client (grpcio) over IPv4 and IPv6: bursts of concurrent
SubmitTask calls are all answered and their tasks all succeed, the worker counts
answers sent corked (worker_grpc_sends_corked_total), and lone calls afterwards are
answered at once (a socket left corked holds its answers for Linux's 200 ms). The test
builds also assert, after each uncork, that the socket is no longer corked."""

import time

import grpc

from conftest import health_pb2, HealthStub, pb, pb_grpc
from test_metrics_e2e import scrape, value

BURST = 64  # concurrent SubmitTask calls on one connection


def sends_corked(w):
    samples, _, _ = scrape(w)
    assert ("worker_grpc_sends_corked_total", frozenset()) in samples, \
        "no worker_grpc_sends_corked_total in /metrics"
    return value(samples, "worker_grpc_sends_corked_total")


def submit_request(task_id):
    return pb.SubmitTaskRequest(task_id=task_id,
                                function=pb.FunctionCallConfig(name="noop", args=b"{}"))


def wait_succeeded(stub, task_ids, timeout=60):
    deadline = time.time() + timeout
    left = set(task_ids)
    while left and time.time() < deadline:
        for t in sorted(left):
            r = stub.GetTaskResult(pb.GetTaskResultRequest(task_id=t), timeout=10)
            if r.state == pb.TASK_STATE_SUCCEEDED:
                left.discard(t)
            else:
                assert r.state not in (pb.TASK_STATE_FAILED, pb.TASK_STATE_CANCELLED), r
        time.sleep(0.02)
    assert not left, "tasks never succeeded: %s" % sorted(left)[:5]


def check_bursts_leave_corked(worker_factory, host):
    w = worker_factory("--listen", host + ":0", "--metrics-addr", "127.0.0.1:0",
                       "--task-slots", "1024")
    w.deploy("noop")
    channel = grpc.insecure_channel("%s:%d" % (host, w.port))
    try:
        stub = pb_grpc.WorkerServiceStub(channel)
        health = HealthStub(channel)
        deadline = time.time() + 20
        while True:
            try:
                if health.Check(health_pb2.HealthCheckRequest(), timeout=2).status == \
                        health_pb2.HealthCheckResponse.SERVING:
                    break
            except grpc.RpcError:
                pass
            assert time.time() < deadline, "worker never became SERVING on %s" % host
            time.sleep(0.05)

        # Bursts until the counter shows corked answers (the metrics are sampled on a
        # timer, so it may lag a little); however the machine schedules the worker,
        # 64 calls in flight at once give turns that answer several.
        submitted = []
        corked = 0
        for burst in range(20):
            ids = ["cork-%s-%d-%d" % (host.strip("[]").replace(":", "_"), burst, i)
                   for i in range(BURST)]
            futures = [stub.SubmitTask.future(submit_request(t), timeout=30) for t in ids]
            for t, f in zip(ids, futures):
                r = f.result()
                assert r.task_id == t and not r.duplicate
            submitted += ids
            corked = sends_corked(w)
            if corked > 0 and burst >= 2:
                break
            time.sleep(0.3)
        assert corked > 0, "no answer went out corked over %s" % host
        wait_succeeded(stub, submitted)

        # Lone calls: nothing corked is left behind to hold them.
        lone = []
        for i in range(10):
            t0 = time.monotonic()
            stub.SubmitTask(submit_request("lone-%d" % i), timeout=30)
            lone.append(time.monotonic() - t0)
        assert min(lone) < 0.15, "every lone answer was held: %s" % lone
        wait_succeeded(stub, ["lone-%d" % i for i in range(10)])
    finally:
        channel.close()


def test_bursts_of_answers_leave_corked_over_ipv4(worker_factory):
    check_bursts_leave_corked(worker_factory, "127.0.0.1")


def test_bursts_of_answers_leave_corked_over_ipv6(worker_factory):
    check_bursts_leave_corked(worker_factory, "[::1]")

"""The worker itself with TLS and a bearer token: a real worker started with a
certificate made by openssl at test time, reached by grpcio and workerctl."""

import os
import subprocess
import time

import grpc
import pytest

from conftest import WORKERCTL, HealthStub, Worker, health_pb2, pb, pb_grpc

TOKEN = "s3cret-token"


@pytest.fixture
def cert(tmp_path):
    key, crt = str(tmp_path / "server.key"), str(tmp_path / "server.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost",
                    "-keyout", key, "-out", crt], check=True, capture_output=True)
    return crt, key


def test_tls_and_token(tmp_path, cert):
    crt, key = cert
    w = Worker.__new__(Worker)
    # the fixture's plaintext channel cannot reach a TLS worker: start it by hand
    Worker.__init__(w, str(tmp_path / "w"), extra_args=["--tls-cert-file", crt, "--tls-key-file", key,
                                                        "--auth-token", TOKEN])
    try:
        creds = grpc.ssl_channel_credentials(root_certificates=open(crt, "rb").read())
        ch = grpc.secure_channel(w.addr, creds)
        stub = pb_grpc.WorkerServiceStub(ch)
        md = [("authorization", "Bearer " + TOKEN)]
        health = HealthStub(ch)
        deadline = time.time() + 30
        while True:  # ready once its executors are up
            try:
                if health.Check(health_pb2.HealthCheckRequest(), timeout=2, metadata=md).status == \
                        health_pb2.HealthCheckResponse.SERVING:
                    break
            except grpc.RpcError:
                pass
            assert time.time() < deadline, "the TLS worker never became SERVING"
            time.sleep(0.05)
        # without the token: UNAUTHENTICATED
        with pytest.raises(grpc.RpcError) as e:
            stub.GetTaskResult(pb.GetTaskResultRequest(task_id="x"), timeout=5)
        assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED
        with pytest.raises(grpc.RpcError) as e:
            stub.GetTaskResult(pb.GetTaskResultRequest(task_id="x"), timeout=5,
                               metadata=[("authorization", "Bearer wrong")])
        assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED
        # with it: the worker answers (NOT_FOUND for an unknown task)
        with pytest.raises(grpc.RpcError) as e:
            stub.GetTaskResult(pb.GetTaskResultRequest(task_id="x"), timeout=5, metadata=md)
        assert e.value.code() == grpc.StatusCode.NOT_FOUND
        # plaintext clients cannot talk to it at all
        with pytest.raises(grpc.RpcError) as e:
            pb_grpc.WorkerServiceStub(grpc.insecure_channel(w.addr)).GetTaskResult(
                pb.GetTaskResultRequest(task_id="x"), timeout=3, metadata=md)
        assert e.value.code() == grpc.StatusCode.UNAVAILABLE
        # workerctl over TLS with the token runs a task end to end
        w.deploy("echo")
        env = dict(os.environ, WORKERCTL_TOKEN=TOKEN)
        out = subprocess.run([WORKERCTL, "--addr", w.addr, "--tls-ca", crt, "submit", "echo", '{"a": 1}',
                              "--task-id", "tls-1", "--watch"], capture_output=True, text=True, env=env,
                             timeout=60)
        assert out.returncode == 0, (out.stdout, out.stderr)
        assert "SUCCEEDED" in out.stdout
        out = subprocess.run([WORKERCTL, "--addr", w.addr, "--tls-ca", crt, "get", "tls-1"],
                             capture_output=True, text=True, timeout=30)
        assert out.returncode == 3 and "UNAUTHENTICATED" in out.stderr  # no token
        ch.close()
    finally:
        w.kill()


def test_bad_certificate_is_a_clear_start_error(tmp_path):
    bad = tmp_path / "bad.pem"
    bad.write_text("not a certificate\n")
    code = tmp_path / "code"
    code.mkdir()
    out = subprocess.run([os.path.join(os.path.dirname(WORKERCTL), "worker"), "--listen", "127.0.0.1:0",
                          "--code-root", str(code), "--tls-cert-file", str(bad), "--tls-key-file", str(bad)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode != 0
    assert "tls_cert_file" in out.stderr

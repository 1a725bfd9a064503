"""Attacks on DeployCode and SetCurrentEpoch (docs/security.md, "Deploying code over
gRPC"): a wrong token, a client outside deploy_allowed_clients (by address and by
client certificate), a digest that does not match, paths that climb out of the tree,
too many files, too many bytes, a request over the size bound. Each is refused with a
message that says what to do, and nothing on disk changes: not in the code root, not
beside it."""

import os
import subprocess

import grpc
import pytest

from conftest import Worker, pb, pb_grpc
from deploy_support import deploy_request, snapshot, tree_digest, version
from etcd_fixture import wait_for

TOKEN = "deploy-t0ken"


def refused(call, req, code, *words):
    with pytest.raises(grpc.RpcError) as e:
        call(req, timeout=60)
    assert e.value.code() == code, (e.value.code(), e.value.details())
    for w in words:
        assert w in e.value.details(), e.value.details()
    return e.value.details()


@pytest.fixture
def tokened(worker_factory):
    w = worker_factory("--deploy-enabled", "true", "--auth-token", TOKEN,
                       "--deploy-max-files", "3", "--deploy-max-bytes", "2000",
                       "--max-message-bytes", "4096")
    md = [("authorization", "Bearer " + TOKEN)]

    class Authed(object):
        def __getattr__(self, name):
            rpc = getattr(w.stub, name)
            return lambda req, timeout=60: rpc(req, timeout=timeout, metadata=md)
    w.authed = Authed()
    w.authed.DeployCode(deploy_request("fn", {"main.py": version(1)}, epoch=1))
    return w


def test_wrong_or_missing_token_is_unauthenticated(tokened):
    w = tokened
    before = snapshot(os.path.dirname(w.code_root))
    req = deploy_request("fn", {"main.py": version(2)}, epoch=2)
    refused(w.stub.DeployCode, req, grpc.StatusCode.UNAUTHENTICATED, "token")
    with pytest.raises(grpc.RpcError) as e:
        w.stub.DeployCode(req, timeout=30, metadata=[("authorization", "Bearer wrong")])
    assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED
    refused(w.stub.SetCurrentEpoch, pb.SetCurrentEpochRequest(function="fn", epoch=1),
            grpc.StatusCode.UNAUTHENTICATED)
    assert snapshot(os.path.dirname(w.code_root)) == before


def test_hostile_files_are_refused_and_nothing_changes(tokened):
    w = tokened
    parent = os.path.dirname(w.code_root)
    before = snapshot(parent)
    call = w.authed.DeployCode
    # a digest that does not match the files: both digests in the message
    files = {"main.py": version(2)}
    other = tree_digest({"main.py": version(3)})
    msg = refused(call, deploy_request("fn", files, epoch=2, digest=other),
                  grpc.StatusCode.INVALID_ARGUMENT, "digest mismatch", other, tree_digest(files))
    # paths out of the tree, or not canonical
    for path in ("../x", "../../escaped.py", "/abs", "/tmp/abs.py", "a//b", "a/./b", "a/../b",
                 "./main.py", "a/", "", "__pycache__/main.cpython-311.pyc", "a\nb"):
        bad = {"main.py": version(2), path: "print('pwned')\n"}
        msg = refused(call, deploy_request("fn", bad, epoch=2), grpc.StatusCode.INVALID_ARGUMENT,
                      "files[")
        assert "path" in msg
    # a path that is both a file and a directory, and the same path twice
    refused(call, deploy_request("fn", {"main.py": "1", "main.py/x": "2"}, epoch=2),
            grpc.StatusCode.INVALID_ARGUMENT, "both a file and a directory")
    dup = deploy_request("fn", {"main.py": version(2)}, epoch=2)
    dup.files.append(pb.CodeFile(path="main.py", content=b"x = 2\n"))
    dup.digest = "0" * 64
    refused(call, dup, grpc.StatusCode.INVALID_ARGUMENT)
    # too many files, too many bytes (the settings named), a request over the bound
    many = {"f%d.py" % i: "" for i in range(4)}
    refused(call, deploy_request("fn", many, epoch=2), grpc.StatusCode.INVALID_ARGUMENT,
            "deploy_max_files")
    big = {"main.py": version(2), "blob.bin": b"\0" * 2500}
    refused(call, deploy_request("fn", big, epoch=2), grpc.StatusCode.INVALID_ARGUMENT,
            "deploy_max_bytes")
    huge = {"main.py": version(2), "blob.bin": b"\0" * 9000}
    refused(call, deploy_request("fn", huge, epoch=2), grpc.StatusCode.INVALID_ARGUMENT,
            "deploy_max_bytes")
    # a bad function name, an epoch of its own, a digest that is not hex
    refused(call, deploy_request("../fn", files, epoch=2), grpc.StatusCode.INVALID_ARGUMENT,
            "function")
    refused(call, deploy_request("fn", files, epoch=2, digest="A" * 64),
            grpc.StatusCode.INVALID_ARGUMENT, "digest")
    refused(w.authed.SetCurrentEpoch, pb.SetCurrentEpochRequest(function="fn", epoch=0),
            grpc.StatusCode.INVALID_ARGUMENT, "epoch")
    assert snapshot(parent) == before
    assert not os.path.exists("/tmp/abs.py") or "pwned" not in open("/tmp/abs.py").read()


def test_clients_outside_the_allow_list_are_denied(worker_factory):
    w = worker_factory("--deploy-enabled", "true", "--deploy-allowed-clients",
                       "10.0.0.0/8, fd00::/8, deployer")
    w.wait_serving()
    before = snapshot(w.code_root)
    for call, req in ((w.stub.DeployCode, deploy_request("fn", {"main.py": version(1)}, epoch=1)),
                      (w.stub.SetCurrentEpoch, pb.SetCurrentEpochRequest(function="fn", epoch=1))):
        refused(call, req, grpc.StatusCode.PERMISSION_DENIED, "deploy_allowed_clients",
                "127.0.0.1")
    assert snapshot(w.code_root) == before
    assert wait_for(lambda: w.events("code_deploy_denied"))
    w2 = worker_factory("--deploy-enabled", "true", "--deploy-allowed-clients",
                        "10.0.0.0/8, 127.0.0.0/30")
    w2.wait_serving()
    assert w2.stub.DeployCode(deploy_request("fn", {"main.py": version(1)}, epoch=1),
                              timeout=60).epoch == 1


def test_a_bad_allow_list_stops_the_start(tmp_path):
    code = tmp_path / "code"
    code.mkdir()
    from conftest import WORKER
    p = subprocess.run([WORKER, "--listen", "127.0.0.1:0", "--code-root", str(code),
                        "--deploy-allowed-clients", "10.0.0.0/40"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "deploy_allowed_clients" in p.stderr, p.stderr


@pytest.fixture
def certs(tmp_path):
    def make(name, cn, ca=None):
        key, crt = str(tmp_path / (name + ".key")), str(tmp_path / (name + ".pem"))
        if ca is None:
            subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                            "-subj", "/CN=" + cn, "-addext", "subjectAltName=IP:127.0.0.1",
                            "-keyout", key, "-out", crt], check=True, capture_output=True)
        else:
            csr = str(tmp_path / (name + ".csr"))
            subprocess.run(["openssl", "req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=" + cn,
                            "-keyout", key, "-out", csr], check=True, capture_output=True)
            subprocess.run(["openssl", "x509", "-req", "-in", csr, "-CA", ca[0], "-CAkey", ca[1],
                            "-CAcreateserial", "-days", "1", "-out", crt], check=True,
                           capture_output=True)
        return crt, key
    return make


def test_client_certificates_name_who_may_deploy(tmp_path, certs):
    crt, key = certs("server", "127.0.0.1")
    ca = certs("ca", "client-ca")
    good, bad = certs("deployer", "deployer", ca=ca), certs("intruder", "intruder", ca=ca)
    w = Worker(str(tmp_path / "w"), extra_args=[
        "--tls-cert-file", crt, "--tls-key-file", key, "--tls-client-ca-file", ca[0],
        "--deploy-enabled", "true", "--deploy-allowed-clients", "deployer"])
    try:
        def stub(client):
            creds = grpc.ssl_channel_credentials(
                root_certificates=open(crt, "rb").read(), private_key=open(client[1], "rb").read(),
                certificate_chain=open(client[0], "rb").read())
            return pb_grpc.WorkerServiceStub(grpc.secure_channel(w.addr, creds))
        req = deploy_request("fn", {"main.py": version(1)}, epoch=4)
        before = snapshot(w.code_root)
        refused(stub(bad).DeployCode, req, grpc.StatusCode.PERMISSION_DENIED,
                "certificate intruder", "deploy_allowed_clients")
        assert snapshot(w.code_root) == before
        r = stub(good).DeployCode(req, timeout=60)
        assert r.epoch == 4 and r.current_epoch == 4
        ev = wait_for(lambda: w.events("code_deployed"))
        assert "certificate deployer" in ev[-1]["client"]
    finally:
        w.kill()


def test_the_code_check_runs_as_the_executor_user(tmp_path):
    """Importing deployed code is running it: a root worker runs the check as its
    executor_user (nobody by default), never as root. The check's import records who
    it ran as; the same deploy to a worker whose executors stay root says root."""
    if os.geteuid() != 0:
        pytest.skip("executor_user switches users only under a root worker")
    import shutil
    import tempfile
    probe = ("import os\n"
             "if os.getuid() == 0 or os.geteuid() == 0 or os.getgroups():\n"
             "    raise SystemExit('the check ran as uid %d euid %d groups %s' %\n"
             "                     (os.getuid(), os.geteuid(), os.getgroups()))\n" + version(1))
    d = tempfile.mkdtemp(prefix="wk-deploy-")
    try:
        os.chmod(d, 0o755)
        w = Worker(os.path.join(d, "w"), extra_args=["--executor-user", "", "--deploy-enabled", "true"])
        try:
            os.chmod(w.tmp, 0o755)
            os.chmod(w.code_root, 0o755)
            r = w.stub.DeployCode(deploy_request("fn", {"main.py": probe}, epoch=1), timeout=60)
            assert r.epoch == 1  # the probe raised nothing: not root, no groups
        finally:
            w.kill()
        root = Worker(os.path.join(d, "r"), extra_args=["--executor-user", "root",
                                                          "--deploy-enabled", "true"])
        try:
            refused(root.stub.DeployCode, deploy_request("fn", {"main.py": probe}, epoch=1),
                    grpc.StatusCode.INVALID_ARGUMENT, "the check ran as uid 0")
        finally:
            root.kill()
    finally:
        shutil.rmtree(d, ignore_errors=True)

"""The redis writer with a redis:// / rediss:// URL (issue 11 §6) against a real
redis-server: a password (requirepass), an ACL user, a database number, TLS with a
CA made by openssl here; the password masked in every error and log line (§2)."""

import os
import subprocess

import pytest

from conftest import WORKER, pb, port_open, start_error
from etcd_fixture import free_port, wait_for

PASSWORD = "s3cr%t-Pw:@x"          # percent, colon and at: must be percent-encoded in the URL
PASSWORD_URL = "s3cr%25t-Pw%3A%40x"
ALICE_PW = "alice-ACL-pw-91"


def _openssl(*args):
    subprocess.run(["openssl"] + list(args), check=True, capture_output=True)


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    d = tmp_path_factory.mktemp("redis-certs")
    p = lambda n: str(d / n)  # noqa: E731
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj",
             "/CN=test redis CA", "-keyout", p("ca.key"), "-out", p("ca.pem"))
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1",
             "-keyout", p("server.key"), "-out", p("server.csr"))
    with open(p("ext"), "w") as f:
        f.write("subjectAltName=IP:127.0.0.1\n")
    _openssl("x509", "-req", "-in", p("server.csr"), "-CA", p("ca.pem"), "-CAkey", p("ca.key"),
             "-CAcreateserial", "-days", "1", "-extfile", p("ext"), "-out", p("server.pem"))
    # another CA, which signed nothing of the server's
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj",
             "/CN=other CA", "-keyout", p("other.key"), "-out", p("other.pem"))
    return d


@pytest.fixture
def redis_auth(certs):
    """redis-server with requirepass, an ACL user alice, plain and TLS ports."""
    port, tls_port = free_port(), free_port()
    proc = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
         "--appendonly", "no", "--requirepass", PASSWORD,
         "--tls-port", str(tls_port), "--tls-cert-file", str(certs / "server.pem"),
         "--tls-key-file", str(certs / "server.key"), "--tls-ca-cert-file", str(certs / "ca.pem"),
         "--tls-auth-clients", "no"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    assert wait_for(lambda: port_open(port) and port_open(tls_port), timeout=10)
    cli(port, "ACL", "SETUSER", "alice", "on", ">" + ALICE_PW, "~*", "+@all")
    yield port, tls_port
    proc.kill()
    proc.wait()


def cli(port, *args):
    out = subprocess.run(["redis-cli", "--no-auth-warning", "-p", str(port), "-a", PASSWORD]
                         + list(args), capture_output=True, text=True, check=True).stdout
    return out.strip()


def write_one(w, task_id, stream):
    w.deploy("echo")
    w.submit(task_id, "echo", [1, 2], builder="map",
             result_handler=pb.ResultHandler(type="redis", options={"stream": stream}))
    return w.wait_terminal(task_id)


def assert_masked(text):
    for secret in (PASSWORD, PASSWORD_URL, ALICE_PW, "s3cr"):
        assert secret not in text, text


def serve_and_write(worker_factory, addr, task_id, stream, *extra):
    """A worker writing to `addr`, and one task written with it."""
    w = worker_factory("--redis-addr", addr, *extra)
    w.wait_serving()
    r = write_one(w, task_id, stream)
    assert r.state == pb.TASK_STATE_SUCCEEDED, r.failure_message
    return w


def test_password_and_database(worker_factory, redis_auth):
    port, _ = redis_auth
    w = serve_and_write(worker_factory, "redis://:%s@127.0.0.1:%d/3" % (PASSWORD_URL, port),
                        "ru-1", "s1")
    assert cli(port, "-n", "3", "XLEN", "s1") == "2"
    assert cli(port, "XLEN", "s1") == "0"  # not in database 0
    # the server goes away: the task's error names it with the password masked
    subprocess.run(["redis-cli", "--no-auth-warning", "-p", str(port), "-a", PASSWORD,
                    "SHUTDOWN", "NOSAVE"], capture_output=True)
    r = write_one(w, "ru-2", "s1")
    assert r.state == pb.TASK_STATE_FAILED and r.failure_code == pb.FAILURE_CODE_PLUGIN_FAILED
    assert "redis://:***@127.0.0.1:%d/3" % port in r.failure_message, r.failure_message
    assert_masked(r.failure_message)
    assert_masked(repr(w.logs))


def test_acl_user(worker_factory, redis_auth):
    port, _ = redis_auth
    w = serve_and_write(worker_factory, "redis://alice:%s@127.0.0.1:%d" % (ALICE_PW, port),
                        "ru-acl", "s2")
    assert cli(port, "XLEN", "s2") == "2"
    assert_masked(repr(w.logs))


def test_bad_credentials_and_unreachable_servers_are_refused_masked(tmp_path, redis_auth):
    port, _ = redis_auth
    err = start_error(tmp_path, "--redis-addr", "redis://alice:%s-wrong@127.0.0.1:%d" % (ALICE_PW, port))
    assert "WRONGPASS" in err and "AUTH as alice" in err, err
    assert_masked(err)
    err = start_error(tmp_path, "--redis-addr", "redis://127.0.0.1:%d" % port)  # no password
    assert "NOAUTH" in err, err
    dead = free_port()
    for addr in ("redis://:%s@127.0.0.1:%d" % (PASSWORD_URL, dead),
                 "redis://%s@127.0.0.1:%d" % (PASSWORD_URL, dead),
                 "rediss://alice:%s@127.0.0.1:%d/1" % (ALICE_PW, dead),
                 "redis://:%s@127.0.0.1:notaport" % PASSWORD_URL,
                 "redis://:%s@127.0.0.1:%d/db" % (PASSWORD_URL, dead),
                 "http://:%s@127.0.0.1:%d" % (PASSWORD_URL, dead)):
        err = start_error(tmp_path, "--redis-addr", addr)
        assert "redis" in err and "***" in err, err
        assert_masked(err)


def test_tls_with_the_servers_ca(worker_factory, redis_auth, certs):
    _, tls_port = redis_auth
    w = serve_and_write(worker_factory, "rediss://:%s@127.0.0.1:%d/1" % (PASSWORD_URL, tls_port),
                        "ru-tls", "s3", "--redis-tls-ca-file", str(certs / "ca.pem"))
    out = subprocess.run(["redis-cli", "--no-auth-warning", "--tls", "--cacert", str(certs / "ca.pem"),
                          "-p", str(tls_port), "-a", PASSWORD, "-n", "1", "XLEN", "s3"],
                         capture_output=True, text=True, check=True).stdout
    assert out.strip() == "2"
    assert_masked(repr(w.logs))


def test_tls_refuses_an_untrusted_or_misnamed_server(tmp_path, redis_auth, certs):
    port, tls_port = redis_auth
    url = "rediss://:%s@127.0.0.1:%d" % (PASSWORD_URL, tls_port)
    err = start_error(tmp_path, "--redis-addr", url, "--redis-tls-ca-file", str(certs / "other.pem"))
    assert "not trusted" in err and "other.pem" in err, err
    assert_masked(err)
    err = start_error(tmp_path, "--redis-addr", url)  # the system's CAs do not know it
    assert "not trusted" in err and "redis_tls_ca_file" in err, err
    # the certificate names 127.0.0.1, not localhost
    err = start_error(tmp_path, "--redis-addr", "rediss://:%s@localhost:%d" % (PASSWORD_URL, tls_port),
                      "--redis-tls-ca-file", str(certs / "ca.pem"))
    assert "not trusted" in err and "mismatch" in err, err
    err = start_error(tmp_path, "--redis-addr", url, "--redis-tls-ca-file", str(certs / "missing.pem"))
    assert "redis_tls_ca_file" in err and "missing.pem" in err, err
    # TLS to the plain port: an error, not a hang
    err = start_error(tmp_path, "--redis-addr", "rediss://:%s@127.0.0.1:%d" % (PASSWORD_URL, port),
                      "--redis-tls-ca-file", str(certs / "ca.pem"))
    assert "TLS" in err, err
    assert_masked(err)


def test_print_config_masks_the_url(tmp_path):
    code = tmp_path / "code"
    code.mkdir()
    out = subprocess.run([WORKER, "--code-root", str(code), "--print-config", "--redis-addr",
                          "rediss://alice:%s@db.example:6380/2" % ALICE_PW],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert "rediss://alice:***@db.example:6380/2" in out.stdout, out.stdout
    assert_masked(out.stdout + out.stderr)

"""Transport security of the gRPC server adapter: TLS, mutual TLS and the bearer token.

Drives tests/integration/grpc_server_harness.c (--tls-cert, --tls-key, --tls-client-ca,
--token; the canned answers are described at its top) with python3-grpcio clients and
with workerctl. Every certificate is made with `openssl` at test time in a temporary
directory:
    ca        the trusted CA (the server's tls_client_ca_file, the clients' roots)
    server    signed by ca; CN localhost, SAN IP:127.0.0.1 and DNS:localhost
    client    signed by ca (clientAuth)
    rogue_ca  a second CA nobody trusts, and rogue_client, signed by it

Run with /usr/bin/python3 (python3-grpcio, python3-protobuf, python3-pytest):
    WK_GRPC_HARNESS=<build>/tests/integration/grpc_server_harness \\
    WK_WORKERCTL=<build>/workerctl WK_SOURCE_DIR=<repo> \\
        /usr/bin/python3 -m pytest -q tests/integration/test_grpc_tls.py
Without WK_WORKERCTL the workerctl tests are skipped. WK_OPENSSL names the openssl
binary (default: openssl on PATH).
"""

import os
import shutil
import subprocess

import grpc
import pytest

import grpc_harness
import grpc_stubs

SOURCE_DIR = os.environ.get("WK_SOURCE_DIR") or os.path.abspath(
    os.path.join(os.path.dirname(__file__), "..", ".."))
HARNESS = os.environ.get("WK_GRPC_HARNESS")
WORKERCTL = os.environ.get("WK_WORKERCTL")
OPENSSL = os.environ.get("WK_OPENSSL") or shutil.which("openssl")

TOKEN = "s3cr3t-T0ken_for.tests~"
UNAUTH_MESSAGE = "missing or wrong bearer token; pass --token / WORKERCTL_TOKEN"

pytestmark = [
    pytest.mark.skipif(not HARNESS, reason="set WK_GRPC_HARNESS to the grpc_server_harness binary"),
    pytest.mark.skipif(not OPENSSL, reason="no openssl binary to make the certificates"),
]

UNAVAILABLE = grpc.StatusCode.UNAVAILABLE
UNAUTHENTICATED = grpc.StatusCode.UNAUTHENTICATED


# ---- certificates ---------------------------------------------------------------------

OPENSSL_CNF = """\
[req]
distinguished_name = dn
prompt = no
[dn]
CN = unused
[ca_ext]
basicConstraints = critical, CA:TRUE
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash
[server_ext]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = serverAuth
subjectAltName = IP:127.0.0.1, DNS:localhost
authorityKeyIdentifier = keyid
[client_ext]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = clientAuth
authorityKeyIdentifier = keyid
"""


class Certs:
    def __init__(self, d):
        self.dir = str(d)

    def path(self, name):
        return os.path.join(self.dir, name)

    def read(self, name):
        with open(self.path(name), "rb") as f:
            return f.read()


def openssl(cwd, *args):
    r = subprocess.run([OPENSSL, *args], cwd=cwd, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, "openssl %s failed:\n%s" % (" ".join(args), r.stderr)


def make_ca(d, name, cn):
    openssl(d, "req", "-x509", "-new", "-nodes", "-config", "openssl.cnf",
            "-extensions", "ca_ext", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
            "-keyout", name + ".key", "-out", name + ".pem", "-days", "2", "-subj", "/CN=" + cn)


def make_leaf(d, name, cn, ca, ext):
    openssl(d, "req", "-new", "-nodes", "-config", "openssl.cnf",
            "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
            "-keyout", name + ".key", "-out", name + ".csr", "-subj", "/CN=" + cn)
    openssl(d, "x509", "-req", "-in", name + ".csr", "-CA", ca + ".pem", "-CAkey", ca + ".key",
            "-CAcreateserial", "-out", name + ".pem", "-days", "2",
            "-extfile", "openssl.cnf", "-extensions", ext)


@pytest.fixture(scope="session")
def certs(tmp_path_factory):
    d = str(tmp_path_factory.mktemp("certs"))
    with open(os.path.join(d, "openssl.cnf"), "w") as f:
        f.write(OPENSSL_CNF)
    make_ca(d, "ca", "wk test CA")
    make_leaf(d, "server", "localhost", "ca", "server_ext")
    make_leaf(d, "client", "wk test client", "ca", "client_ext")
    make_ca(d, "rogue_ca", "wk rogue CA")
    make_leaf(d, "rogue_client", "wk rogue client", "rogue_ca", "client_ext")
    make_leaf(d, "rogue_server", "localhost", "rogue_ca", "server_ext")
    with open(os.path.join(d, "garbage.pem"), "w") as f:
        f.write("-----BEGIN CERTIFICATE-----\nthis is not base64 !!\n-----END CERTIFICATE-----\n")
    with open(os.path.join(d, "empty.pem"), "w"):
        pass
    return Certs(d)


# ---- stubs ----------------------------------------------------------------------------

@pytest.fixture(scope="session")
def pb(tmp_path_factory):
    return grpc_stubs.generate(tmp_path_factory.mktemp("stubs"), SOURCE_DIR, "wk_tls_health_pb2")


# ---- the harness process ----------------------------------------------------------------

class Harness(grpc_harness.Harness):
    def __init__(self, *args):
        super().__init__([HARNESS, *args])

    def stop(self, timeout=30):
        grpc_harness.assert_clean_exit(self, super().stop(timeout))


def tls_args(certs, mutual=False, token=None):
    a = ["--tls-cert", certs.path("server.pem"), "--tls-key", certs.path("server.key")]
    if mutual:
        a += ["--tls-client-ca", certs.path("ca.pem")]
    if token:
        a += ["--token", token]
    return a


@pytest.fixture(scope="module")
def tls_server(certs):
    h = Harness(*tls_args(certs))
    yield h
    h.stop()


@pytest.fixture(scope="module")
def mtls_server(certs):
    h = Harness(*tls_args(certs, mutual=True))
    yield h
    h.stop()


@pytest.fixture(scope="module")
def token_server(certs):
    """TLS and a bearer token."""
    h = Harness(*tls_args(certs, token=TOKEN))
    yield h
    h.stop()


@pytest.fixture(scope="module")
def full_server(certs):
    """Mutual TLS and a bearer token: what workerctl must get through."""
    h = Harness(*tls_args(certs, mutual=True, token=TOKEN))
    yield h
    h.stop()


# ---- clients ------------------------------------------------------------------------------

def creds(certs, ca="ca", client=None):
    kw = {"root_certificates": certs.read(ca + ".pem")}
    if client:
        kw["private_key"] = certs.read(client + ".key")
        kw["certificate_chain"] = certs.read(client + ".pem")
    return grpc.ssl_channel_credentials(**kw)


class Client:
    def __init__(self, pb, channel):
        self.pb = pb
        self.channel = channel
        self.stub = pb.wg.WorkerServiceStub(channel)
        self.check = channel.unary_unary(
            "/grpc.health.v1.Health/Check",
            request_serializer=pb.h.HealthCheckRequest.SerializeToString,
            response_deserializer=pb.h.HealthCheckResponse.FromString)
        self.watch = channel.unary_stream(
            "/grpc.health.v1.Health/Watch",
            request_serializer=pb.h.HealthCheckRequest.SerializeToString,
            response_deserializer=pb.h.HealthCheckResponse.FromString)

    def health(self, metadata=None):
        return self.check(self.pb.h.HealthCheckRequest(), timeout=10, metadata=metadata)

    def close(self):
        self.channel.close()


def secure(pb, addr, credentials, options=None):
    return Client(pb, grpc.secure_channel(addr, credentials, options=options or []))


def plain(pb, addr):
    return Client(pb, grpc.insecure_channel(addr))


def rpc_error(fn):
    with pytest.raises(grpc.RpcError) as e:
        fn()
    return e.value


def serving(pb, resp):
    return resp.status == pb.h.HealthCheckResponse.SERVING


def bearer(token):
    return (("authorization", "Bearer " + token),)


def good_submit(pb, task_id="t-tls"):
    fn = pb.w.FunctionCallConfig(name="fn", type="single", entrypoint="main:handler")
    return pb.w.SubmitTaskRequest(task_id=task_id, function=fn)


# ---- TLS ----------------------------------------------------------------------------------

def test_tls_ok(pb, certs, tls_server):
    c = secure(pb, tls_server.addr, creds(certs))
    try:
        assert serving(pb, c.health())
        resp = c.stub.SubmitTask(good_submit(pb, "over-tls"), timeout=10)
        assert resp.task_id == "over-tls"
        events = list(c.stub.WatchTasks(pb.w.WatchTasksRequest(task_ids=["w1"]), timeout=10))
        assert [e.kind for e in events] == [pb.w.TaskEvent.KIND_SNAPSHOT,
                                            pb.w.TaskEvent.KIND_PHASE_CHANGED,
                                            pb.w.TaskEvent.KIND_TERMINAL]
    finally:
        c.close()


def test_tls_by_host_name(pb, certs, tls_server):
    """The certificate's DNS name, checked through the target name override."""
    c = secure(pb, tls_server.addr, creds(certs),
               options=[("grpc.ssl_target_name_override", "localhost")])
    try:
        assert serving(pb, c.health())
    finally:
        c.close()


def test_tls_wrong_host_name_fails(pb, certs, tls_server):
    c = secure(pb, tls_server.addr, creds(certs),
               options=[("grpc.ssl_target_name_override", "not-this-server.example")])
    try:
        assert rpc_error(c.health).code() == UNAVAILABLE
    finally:
        c.close()


def test_plaintext_client_against_tls_server_fails(pb, tls_server):
    c = plain(pb, tls_server.addr)
    try:
        e = rpc_error(c.health)
        assert e.code() == UNAVAILABLE, (e.code(), e.details())
    finally:
        c.close()


def test_client_not_trusting_the_server_ca_fails(pb, certs, tls_server):
    c = secure(pb, tls_server.addr, creds(certs, ca="rogue_ca"))
    try:
        assert rpc_error(c.health).code() == UNAVAILABLE
    finally:
        c.close()


def test_tls_server_ignores_client_certificates_without_client_ca(pb, certs, tls_server):
    """Plain TLS does not ask for client certificates: even a rogue one is fine."""
    c = secure(pb, tls_server.addr, creds(certs, client="rogue_client"))
    try:
        assert serving(pb, c.health())
    finally:
        c.close()


def test_tls_server_survives_failed_handshakes(pb, certs, tls_server):
    for _ in range(3):
        c = plain(pb, tls_server.addr)
        rpc_error(c.health)
        c.close()
    c = secure(pb, tls_server.addr, creds(certs))
    try:
        assert serving(pb, c.health())
    finally:
        c.close()


# ---- mutual TLS ---------------------------------------------------------------------------

def test_mtls_without_client_certificate_fails(pb, certs, mtls_server):
    c = secure(pb, mtls_server.addr, creds(certs))
    try:
        e = rpc_error(c.health)
        assert e.code() == UNAVAILABLE, (e.code(), e.details())
    finally:
        c.close()


def test_mtls_untrusted_client_certificate_fails(pb, certs, mtls_server):
    c = secure(pb, mtls_server.addr, creds(certs, client="rogue_client"))
    try:
        e = rpc_error(c.health)
        assert e.code() == UNAVAILABLE, (e.code(), e.details())
    finally:
        c.close()


def test_mtls_plaintext_client_fails(pb, mtls_server):
    c = plain(pb, mtls_server.addr)
    try:
        assert rpc_error(c.health).code() == UNAVAILABLE
    finally:
        c.close()


def test_mtls_good_client_certificate_ok(pb, certs, mtls_server):
    c = secure(pb, mtls_server.addr, creds(certs, client="client"))
    try:
        assert serving(pb, c.health())
        resp = c.stub.RequestTaskSlot(pb.w.RequestTaskSlotRequest(task_id="m1"), timeout=10)
        assert resp.slot_id == 7
    finally:
        c.close()


# ---- the bearer token ------------------------------------------------------------------------

@pytest.fixture(scope="module")
def tok(pb, certs, token_server):
    c = secure(pb, token_server.addr, creds(certs))
    yield c
    c.close()


def test_token_missing_is_unauthenticated(tok):
    e = rpc_error(tok.health)
    assert e.code() == UNAUTHENTICATED, (e.code(), e.details())
    assert e.details() == UNAUTH_MESSAGE


def test_token_wrong_is_unauthenticated(tok):
    for wrong in ("nope", TOKEN[:-1], TOKEN + "x", TOKEN.upper(), "x" * len(TOKEN)):
        e = rpc_error(lambda: tok.health(metadata=bearer(wrong)))
        assert e.code() == UNAUTHENTICATED, (wrong, e.code())
        assert e.details() == UNAUTH_MESSAGE


def test_token_needs_the_bearer_scheme(tok):
    for value in (TOKEN, "Basic " + TOKEN, "Bearer", "Bearer  " + TOKEN, "Token " + TOKEN):
        e = rpc_error(lambda: tok.health(metadata=(("authorization", value),)))
        assert e.code() == UNAUTHENTICATED, (value, e.code())


def test_token_right_is_ok(pb, tok):
    assert serving(pb, tok.health(metadata=bearer(TOKEN)))
    # the scheme is case-insensitive (RFC 6750), the token is not
    assert serving(pb, tok.health(metadata=(("authorization", "bearer " + TOKEN),)))
    resp = tok.stub.SubmitTask(good_submit(pb, "with-token"), metadata=bearer(TOKEN), timeout=10)
    assert resp.task_id == "with-token"


def test_token_is_checked_on_every_method(pb, tok):
    w = pb.w
    calls = [
        lambda md: tok.stub.RequestTaskSlot(w.RequestTaskSlotRequest(task_id="a"), metadata=md,
                                            timeout=10),
        lambda md: tok.stub.SubmitTask(good_submit(pb), metadata=md, timeout=10),
        lambda md: tok.stub.GetTaskResult(w.GetTaskResultRequest(task_id="a"), metadata=md,
                                          timeout=10),
        lambda md: list(tok.stub.WatchTasks(w.WatchTasksRequest(task_ids=["a"]), metadata=md,
                                            timeout=10)),
        lambda md: tok.stub.CancelTask(w.CancelTaskRequest(task_id="a"), metadata=md,
                                       timeout=10),
        lambda md: tok.check(pb.h.HealthCheckRequest(), metadata=md, timeout=10),
        lambda md: next(iter(tok.watch(pb.h.HealthCheckRequest(), metadata=md, timeout=10))),
    ]
    for i, call in enumerate(calls):
        e = rpc_error(lambda: call(None))
        assert e.code() == UNAUTHENTICATED, (i, e.code(), e.details())
        e = rpc_error(lambda: call(bearer("wrong")))
        assert e.code() == UNAUTHENTICATED, (i, e.code(), e.details())
    # and they pass with it (GetTaskResult's canned answer is NOT_FOUND)
    for i, call in enumerate(calls):
        if i == 2:
            assert rpc_error(lambda: call(bearer(TOKEN))).code() == grpc.StatusCode.NOT_FOUND
        else:
            call(bearer(TOKEN))


def test_token_health_watch_streams_with_it(pb, tok):
    it = tok.watch(pb.h.HealthCheckRequest(), metadata=bearer(TOKEN), timeout=10)
    assert serving(pb, next(iter(it)))
    it.cancel()


def test_token_checked_before_the_request_is_decoded(tok):
    """An invalid request without the token is UNAUTHENTICATED, not INVALID_ARGUMENT."""
    call = tok.channel.unary_unary("/worker.v1.WorkerService/SubmitTask")
    e = rpc_error(lambda: call(b"\xff\xff\xff", timeout=10))
    assert e.code() == UNAUTHENTICATED
    e = rpc_error(lambda: call(b"\xff\xff\xff", metadata=bearer(TOKEN), timeout=10))
    assert e.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_token_unknown_method(tok):
    call = tok.channel.unary_unary("/worker.v1.WorkerService/NoSuchMethod")
    for _ in range(4):  # more than the server's pre-requested generic calls
        e = rpc_error(lambda: call(b"", timeout=10))
        assert e.code() == UNAUTHENTICATED, (e.code(), e.details())
    e = rpc_error(lambda: call(b"", metadata=bearer(TOKEN), timeout=10))
    assert e.code() == grpc.StatusCode.UNIMPLEMENTED


def test_token_not_shown_to_the_sink(pb, tok):
    resp = tok.stub.CancelTask(pb.w.CancelTaskRequest(task_id="c1", reason="r"),
                               metadata=bearer(TOKEN), timeout=10)
    assert resp.failure_message == "r"  # the harness says so when it sees authorization


def test_token_over_plaintext(pb):
    """The token does not need TLS (it then travels in clear text)."""
    h = Harness("--token", TOKEN)
    try:
        c = plain(pb, h.addr)
        try:
            assert rpc_error(c.health).code() == UNAUTHENTICATED
            assert serving(pb, c.health(metadata=bearer(TOKEN)))
        finally:
            c.close()
    finally:
        h.stop()


def test_mtls_and_token(pb, certs, full_server):
    c = secure(pb, full_server.addr, creds(certs, client="client"))
    try:
        assert rpc_error(c.health).code() == UNAUTHENTICATED
        assert serving(pb, c.health(metadata=bearer(TOKEN)))
    finally:
        c.close()


# ---- start failures --------------------------------------------------------------------------

def start_fails(*args):
    r = subprocess.run([HARNESS, *args], capture_output=True, text=True, timeout=60)
    assert r.returncode == 1, (r.returncode, r.stdout, r.stderr)
    assert "PORT" not in r.stdout
    return r.stderr


def test_start_fails_on_missing_file(certs):
    err = start_fails("--tls-cert", certs.path("nope.pem"), "--tls-key", certs.path("server.key"))
    assert "tls_cert_file" in err and "nope.pem" in err and "No such file" in err, err
    err = start_fails("--tls-cert", certs.path("server.pem"), "--tls-key", certs.path("nope.key"))
    assert "tls_key_file" in err and "nope.key" in err, err
    err = start_fails(*tls_args(certs)[:4], "--tls-client-ca", certs.path("nope-ca.pem"))
    assert "tls_client_ca_file" in err and "nope-ca.pem" in err, err


def test_start_fails_on_invalid_pem(certs):
    err = start_fails("--tls-cert", certs.path("garbage.pem"), "--tls-key",
                      certs.path("server.key"))
    assert "tls_cert_file" in err and "not base64" in err, err
    err = start_fails("--tls-cert", certs.path("empty.pem"), "--tls-key", certs.path("server.key"))
    assert "empty" in err, err
    # a key where the certificate goes, and the other way round
    err = start_fails("--tls-cert", certs.path("server.key"), "--tls-key",
                      certs.path("server.key"))
    assert "tls_cert_file" in err and "not a PEM certificate" in err, err
    err = start_fails("--tls-cert", certs.path("server.pem"), "--tls-key",
                      certs.path("server.pem"))
    assert "tls_key_file" in err and "not a PEM private key" in err, err
    err = start_fails(*tls_args(certs)[:4], "--tls-client-ca", certs.path("ca.key"))
    assert "tls_client_ca_file" in err, err


def test_start_fails_on_key_of_another_certificate(certs):
    err = start_fails("--tls-cert", certs.path("server.pem"), "--tls-key",
                      certs.path("client.key"))
    assert "refused the TLS certificate or key" in err, err


def test_start_fails_on_incomplete_settings(certs):
    err = start_fails("--tls-cert", certs.path("server.pem"))
    assert "tls_key_file" in err, err
    err = start_fails("--tls-key", certs.path("server.key"))
    assert "tls_cert_file" in err, err
    err = start_fails("--tls-client-ca", certs.path("ca.pem"))
    assert "tls_client_ca_file" in err and "needs tls_cert_file" in err, err
    err = start_fails("--token", "has space")
    assert "auth_token" in err, err


# ---- workerctl ----------------------------------------------------------------------------

needs_workerctl = pytest.mark.skipif(not WORKERCTL, reason="set WK_WORKERCTL to workerctl")


def workerctl(*args, env_extra=None):
    env = {k: v for k, v in os.environ.items() if not k.startswith("WORKERCTL_")}
    env.update(env_extra or {})
    return subprocess.run([WORKERCTL, "--deadline-ms", "10000", *args], capture_output=True,
                          text=True, timeout=60, env=env)


@needs_workerctl
def test_workerctl_tls_and_token(certs, token_server):
    r = workerctl("--addr", token_server.addr, "--tls-ca", certs.path("ca.pem"),
                  "--token", TOKEN, "health")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "SERVING"


@needs_workerctl
def test_workerctl_from_the_environment(certs, token_server):
    r = workerctl("--addr", token_server.addr, "--json", "health",
                  env_extra={"WORKERCTL_TLS_CA": certs.path("ca.pem"), "WORKERCTL_TOKEN": TOKEN})
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == '{"status":"SERVING"}'


@needs_workerctl
def test_workerctl_token_missing_or_wrong(certs, token_server):
    r = workerctl("--addr", token_server.addr, "--tls-ca", certs.path("ca.pem"), "health")
    assert r.returncode == 3, (r.returncode, r.stderr)
    assert "UNAUTHENTICATED" in r.stderr and "--token" in r.stderr, r.stderr
    r = workerctl("--addr", token_server.addr, "--tls-ca", certs.path("ca.pem"), "health",
                  env_extra={"WORKERCTL_TOKEN": "wrong"})
    assert r.returncode == 3, (r.returncode, r.stderr)


@needs_workerctl
def test_workerctl_mtls_token_and_streams(certs, full_server):
    base = ["--addr", full_server.addr, "--tls-ca", certs.path("ca.pem"),
            "--tls-cert", certs.path("client.pem"), "--tls-key", certs.path("client.key"),
            "--token", TOKEN]
    r = workerctl(*base, "health")
    assert r.returncode == 0, r.stderr
    # a unary call with a request, and a stream (WatchTasks) carry the token too
    r = workerctl(*base, "--json", "submit", "fn", "{}", "--task-id", "ctl-1")
    assert r.returncode == 0, r.stderr
    assert '"task_id":"ctl-1"' in r.stdout, r.stdout
    r = workerctl(*base, "--json", "watch", "w-1")
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("\n") == 3, r.stdout
    # the certificate's DNS name instead of the address
    r = workerctl(*base, "--tls-server-name", "localhost", "health")
    assert r.returncode == 0, r.stderr


@needs_workerctl
def test_workerctl_handshake_failures_are_unreachable(certs, tls_server, mtls_server):
    r = workerctl("--addr", tls_server.addr, "health")  # plaintext against TLS
    assert r.returncode == 4, (r.returncode, r.stderr)
    assert "--tls-ca" in r.stderr, r.stderr  # the hint
    r = workerctl("--addr", tls_server.addr, "--tls-ca", certs.path("rogue_ca.pem"), "health")
    assert r.returncode == 4, (r.returncode, r.stderr)
    r = workerctl("--addr", tls_server.addr, "--tls-ca", certs.path("ca.pem"),
                  "--tls-server-name", "other.example", "health")
    assert r.returncode == 4, (r.returncode, r.stderr)
    r = workerctl("--addr", mtls_server.addr, "--tls-ca", certs.path("ca.pem"), "health")
    assert r.returncode == 4, (r.returncode, r.stderr)
    assert "--tls-cert" in r.stderr, r.stderr  # the hint
    r = workerctl("--addr", mtls_server.addr, "--tls-ca", certs.path("ca.pem"),
                  "--tls-cert", certs.path("rogue_client.pem"),
                  "--tls-key", certs.path("rogue_client.key"), "health")
    assert r.returncode == 4, (r.returncode, r.stderr)


@needs_workerctl
def test_workerctl_bad_tls_options_are_usage_errors(certs, tls_server):
    a = ["--addr", tls_server.addr]
    r = workerctl(*a, "--tls-ca", certs.path("nope.pem"), "health")
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert "nope.pem" in r.stderr and "No such file" in r.stderr, r.stderr
    r = workerctl(*a, "--tls-ca", certs.path("server.key"), "health")
    assert r.returncode == 2 and "not a PEM certificate" in r.stderr, r.stderr
    r = workerctl(*a, "--tls-ca", certs.path("ca.pem"), "--tls-cert", certs.path("client.pem"),
                  "health")
    assert r.returncode == 2 and "--tls-key" in r.stderr, r.stderr
    r = workerctl(*a, "--token", "", "health")
    assert r.returncode == 2, r.stderr
    r = workerctl(*a, "--token", "with space", "health")
    assert r.returncode == 2 and "token" in r.stderr, r.stderr


@needs_workerctl
def test_workerctl_help_mentions_the_options():
    r = workerctl("--help")
    assert r.returncode == 0
    for word in ("--tls-ca", "--tls-cert", "--tls-key", "--tls-server-name", "--token",
                 "WORKERCTL_TLS_CA", "WORKERCTL_TOKEN"):
        assert word in r.stdout, word

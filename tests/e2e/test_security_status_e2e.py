"""Attacks on the status page and /status (docs/security.md, "The status page"): without
the token nothing but the login form is served; a wrong token, a forged cookie or a
token in the wrong place gets nothing; the session cookie is HttpOnly, SameSite=Strict
(Secure under TLS) and is not the token; pages forbid every other origin; under TLS the
listener speaks only HTTPS; a task's arguments never reach /status."""

import http.client
import json
import os
import ssl
import subprocess
import time

import pytest

from conftest import WORKERCTL, Worker, pb
from test_tls_e2e import cert  # noqa: F401  (the self-signed certificate fixture)

TOKEN = "status-tok-0b9e41"
SECRET = "ARG-SECRET-do-not-show-91f2"


def request(port, method, path, headers=None, body=None, tls_ctx=None):
    if tls_ctx:
        c = http.client.HTTPSConnection("127.0.0.1", port, timeout=10, context=tls_ctx)
    else:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        c.request(method, path, body=body, headers=headers or {})
        r = c.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        c.close()


def session_cookie(headers):
    cookie = headers.get("set-cookie", "")
    assert cookie.startswith("wk_session="), cookie
    return cookie, cookie.split(";")[0]


@pytest.fixture
def worker(tmp_path):
    w = Worker(str(tmp_path / "w"), extra_args=["--metrics-addr", "127.0.0.1:0",
                                                "--auth-token", TOKEN])
    yield w, w.events("metrics_listening")[0]["port"]
    w.kill()


def test_status_needs_the_token(worker):
    w, port = worker
    status, h, body = request(port, "GET", "/status")
    assert status == 401 and h["www-authenticate"].startswith("Bearer")
    assert b"worker" not in body.replace(b"\"worker\"", b"")  # an error, no document
    for auth in ("Bearer wrong", "Bearer " + TOKEN + "x", "Bearer " + TOKEN[:-1], "Basic " + TOKEN,
                 TOKEN, "Bearer"):
        assert request(port, "GET", "/status", {"Authorization": auth})[0] == 401, auth
    # a token in the query works only for the page's login, not for /status
    assert request(port, "GET", "/status?token=" + TOKEN)[0] == 401
    status, h, body = request(port, "GET", "/status", {"Authorization": "Bearer " + TOKEN})
    assert status == 200 and json.loads(body)["worker"]["service"] == "worker"
    # /metrics stays open to scrapers (documented)
    assert request(port, "GET", "/metrics")[0] == 200


def test_page_login_flow(worker):
    w, port = worker
    # the page without a session: on to the login form, which gives nothing away
    status, h, _ = request(port, "GET", "/")
    assert status == 303 and h["location"] == "/login"
    status, h, body = request(port, "GET", "/login")
    assert status == 200 and b"<form" in body and b"/status" not in body
    csp = h["content-security-policy"]
    assert "default-src 'none'" in csp and "frame-ancestors 'none'" in csp
    assert "connect-src 'self'" in csp and "http" not in csp  # no other origin, ever
    assert h["x-frame-options"] == "DENY" and h["cache-control"] == "no-store"
    # a wrong token: 401, no cookie
    form = {"Content-Type": "application/x-www-form-urlencoded"}
    status, h, body = request(port, "POST", "/login", form, "token=wrong")
    assert status == 401 and "set-cookie" not in h and b"Wrong token" in body
    status, h, _ = request(port, "GET", "/?token=wrong")
    assert status == 401 and "set-cookie" not in h
    # an oversized body is refused, not buffered without end
    status, h, _ = request(port, "POST", "/login", form, "token=" + "x" * 100000)
    assert status == 401 and "set-cookie" not in h
    # the right one (form-encoded): a session cookie that is not the token
    status, h, _ = request(port, "POST", "/login", form, "token=" + TOKEN)
    assert status == 303 and h["location"] == "/"
    cookie, pair = session_cookie(h)
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Path=/" in cookie
    assert "Secure" not in cookie  # plain HTTP here; see the TLS test
    assert TOKEN not in cookie
    assert request(port, "GET", "/", {"Cookie": pair})[0] == 200
    status, _, body = request(port, "GET", "/status", {"Cookie": pair})
    assert status == 200 and json.loads(body)["slots"]["total"] == 16
    # ?token= once: the same cookie, and a redirect that drops the token from the address
    status, h, _ = request(port, "GET", "/?token=" + TOKEN)
    assert status == 303 and h["location"] == "/" and session_cookie(h)[1] == pair
    # forged or altered cookies get nothing
    value = pair.split("=", 1)[1]
    for bad in ("0" * len(value), value[:-1], value + "0", TOKEN, ""):
        assert request(port, "GET", "/status", {"Cookie": "wk_session=" + bad})[0] == 401, bad
    # logging out clears the cookie in the browser
    status, h, _ = request(port, "GET", "/logout")
    assert status == 303 and "Max-Age=0" in h["set-cookie"]


def test_new_worker_new_sessions(tmp_path):
    """The cookie is random per start: one worker's session opens no other's."""
    pairs = []
    for i in range(2):
        w = Worker(str(tmp_path / ("w%d" % i)), extra_args=["--metrics-addr", "127.0.0.1:0",
                                                             "--auth-token", TOKEN])
        try:
            port = w.events("metrics_listening")[0]["port"]
            status, h, _ = request(port, "POST", "/login",
                                   {"Content-Type": "application/x-www-form-urlencoded"},
                                   "token=" + TOKEN)
            pairs.append((port, session_cookie(h)[1]))
            if i == 1:
                assert pairs[0][1] != pairs[1][1]
                assert request(port, "GET", "/status", {"Cookie": pairs[0][1]})[0] == 401
        finally:
            w.kill()


def test_arguments_never_in_status(tmp_path):
    w = Worker(str(tmp_path / "w"), extra_args=["--metrics-addr", "127.0.0.1:0"])
    try:
        port = w.events("metrics_listening")[0]["port"]
        w.deploy("sleepy")
        w.deploy("boom")
        w.wait_serving()
        w.submit("t-live", "sleepy", {"seconds": 30, "password": SECRET})
        w.submit("t-dead", "boom", {"password": SECRET})
        w.wait_terminal("t-dead")
        deadline = time.time() + 20
        while True:
            status, _, body = request(port, "GET", "/status")
            doc = json.loads(body)
            ids = [t["id"] for t in doc["tasks"]["list"]] + [t["id"] for t in doc["recent"]]
            if "t-live" in ids and "t-dead" in ids:
                break
            assert time.time() < deadline, body
            time.sleep(0.1)
        assert SECRET.encode() not in body
        assert b"boom:" not in body  # nor failure messages, which may quote arguments
        status, _, page = request(port, "GET", "/")
        assert status == 200 and SECRET.encode() not in page
    finally:
        w.kill()


def test_tls_applies_to_the_status_page(tmp_path, cert):
    crt, key = cert
    w = Worker(str(tmp_path / "w"), extra_args=["--metrics-addr", "127.0.0.1:0", "--tls-cert-file",
                                                crt, "--tls-key-file", key, "--auth-token", TOKEN])
    try:
        port = w.events("metrics_listening")[0]["port"]
        assert w.events("metrics_listening")[0]["tls"] is True
        ctx = ssl.create_default_context(cafile=crt)
        status, _, body = request(port, "GET", "/status", {"Authorization": "Bearer " + TOKEN},
                                  tls_ctx=ctx)
        assert status == 200 and json.loads(body)["worker"]["state"] in ("starting", "serving")
        status, h, _ = request(port, "POST", "/login",
                               {"Content-Type": "application/x-www-form-urlencoded"},
                               "token=" + TOKEN, tls_ctx=ctx)
        cookie, _ = session_cookie(h)
        assert "Secure" in cookie
        assert request(port, "GET", "/metrics", tls_ctx=ctx)[0] == 200
        # workerctl top reads it over HTTPS with --tls-ca and --token
        env = dict(os.environ, WORKERCTL_TOP_INTERVAL_MS="200")
        p = subprocess.Popen([WORKERCTL, "--tls-ca", crt, "--token", TOKEN, "top", "--addr",
                              "127.0.0.1:%d" % port], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, env=env)
        line = p.stdout.readline().decode()
        p.stdin.write(b"q\n")
        p.stdin.flush()
        assert p.wait(10) == 0
        assert "slots run" in line, line
        # plain HTTP gets no page, no JSON, no metrics
        with pytest.raises((http.client.HTTPException, ConnectionError, OSError)):
            status, _, body = request(port, "GET", "/metrics")
            assert status >= 400 or b"worker_" not in body
            raise ConnectionError("answered, but not with the metrics")
    finally:
        w.kill()

"""worker_client (python/worker_client) against the real worker: every method of Client,
TaskFuture and AsyncClient, typed errors, TLS and the token, progress, ownership."""

import asyncio
import concurrent.futures
import gc
import io
import json
import os
import socket
import subprocess
import threading
import time
import weakref

import grpc
import pytest

from conftest import Worker, pb
from pyclient_support import deploy_all

import worker_client as wc
from worker_client import progress as wc_progress


@pytest.fixture
def w(worker_factory):
    w = worker_factory("--task-slots", "64", "--watch-grace-ms", "400", "--tick-ms", "50")
    w.wait_serving()
    deploy_all(w)
    return w


@pytest.fixture
def client(w):
    with wc.Client(w.addr) as c:
        yield c


def test_submit_single_map_range_bytes(client, w):
    f = client.submit("echo", {"a": 1}, labels={"team": "x"})
    assert isinstance(f, concurrent.futures.Future)
    assert f.result(timeout=60) == {"echo": {"a": 1}, "index": 0, "epoch": 1}
    assert f.task_id.startswith("t-") and f.address == w.addr and f.duplicate is False
    r = f.task_result()
    assert r.state == "SUCCEEDED" and r.code_epoch == 1 and r.statistic["calls_total"] == 1
    assert client.map("square", range(12)).result(60) == [i * i for i in range(12)]
    assert client.map("square", iter([3])).result(60) == [9]
    chunks = client.range("chunksum", 0, 1000, chunk=100).result(60)
    assert chunks == [sum(range(s, s + 100)) for s in range(0, 1000, 100)]
    assert client.range("chunksum", 10, chunk=4).result(60) == [6, 22, 17]
    assert client.range("chunksum", 0, 10, step=3, chunk=2).result(60) == [3, 15]
    assert client.submit("rawbytes", b"\x00abc").result(60) == b"cba\x00"
    res = client.submit("printer", [1]).task_result(60)
    assert res.retries == [] and res.statistic["calls_done"] == 1
    out = res.outputs[0]
    assert out.value == "printed" and "to stdout [1]" in out.stdout and "to stderr" in out.stderr
    # the wire request had the labels: the worker's audit line says so
    assert any(e.get("task_id") == f.task_id for e in w.events("audit"))


def test_task_failed_carries_code_message_and_remote_traceback(client):
    f = client.submit("boom", "x")
    with pytest.raises(wc.TaskFailed) as e:
        f.result(60)
    err = e.value
    assert err.failure_code == "CALL_FAILED" and err.error_type == "ValueError"
    assert err.error_message == "boom: x" and err.call_index == 0
    assert "raise ValueError('boom: ' + str(args))" in err.traceback
    assert "remote traceback" in str(err) and err.task_id == f.task_id
    assert err.result.state == "FAILED" and f.exception() is err
    assert not isinstance(err, concurrent.futures.CancelledError)
    # CONTINUE: the failed call stands in the list as a CallError
    vals = client.map("flaky", [{"v": 0, "fail": 1}, {"v": 1, "fail": 1}, {"v": 2, "fail": 1}],
                      max_failed_calls=1).result(60)
    assert vals[0] == 0 and vals[2] == 2
    assert isinstance(vals[1], wc.CallError) and vals[1].type == "ValueError"
    assert "item 1 refused" in vals[1].message and vals[1].traceback


def test_submit_options_reach_the_worker(client, w):
    # call_timeout: a call past it fails DeadlineExceeded; timeout: the task TASK_TIMEOUT
    with pytest.raises(wc.TaskFailed) as e:
        client.submit("sleepy", {"seconds": 30}, call_timeout=0.3).result(60)
    assert e.value.error_type == "DeadlineExceeded"
    with pytest.raises(wc.TaskFailed) as e:
        client.submit("sleepy", {"seconds": 30}, timeout=0.5).result(60)
    assert e.value.failure_code == "TASK_TIMEOUT"
    # epoch: deploy a second epoch of echo, run the first one by number
    w.deploy("echo", "def handler(args, ctx):\n    return {'v2': args, 'epoch': ctx.epoch}\n")
    assert client.submit("echo", 1).result(60) == {"v2": 1, "epoch": 2}
    assert client.submit("echo", 1, epoch=1).result(60)["epoch"] == 1
    # retries: a call that fails with Retryable twice succeeds on its third attempt
    w.deploy("retry3", "import os, worker\n"
             "def handler(args, ctx):\n"
             "    with open(args, 'a') as f: f.write('x')\n"
             "    if os.path.getsize(args) < 3: raise worker.Retryable('not yet')\n"
             "    return os.path.getsize(args)\n")
    path = os.path.join(w.tmp, "retry3.txt")
    assert client.submit("retry3", path, retries=2).result(60) == 3
    # builder options and a wrong one: refused before anything runs
    f = client.submit("square", {"xs": [2, 3]}, builder="map", options={"items": "xs"})
    assert f.result(60) == [4, 9]
    with pytest.raises(wc.RequestRejected) as e:
        client.submit("square", [1], builder="map", options={"chunk": "3"}).result(60)
    assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT and "unknown option" in e.value.details
    # an entry point other than main:handler
    w.deploy("twoentry", "def handler(a, c):\n    return 1\ndef other(a, c):\n    return 2\n")
    assert client.submit("twoentry", None, entrypoint="main:other").result(60) == 2


def test_result_handler(worker_factory, tmp_path):
    out = tmp_path / "outputs"
    out.mkdir()
    w = worker_factory("--output-dir", str(out))
    w.wait_serving()
    deploy_all(w)
    with wc.Client(w.addr) as c:
        f = c.map("square", [1, 2], result_handler={"type": "file", "name": "sq"})
        reports = f.result(60)
        assert reports[0]["plugin"] == "file" and reports[0]["records"] == 2
        lines = open(reports[0]["location"]).read().splitlines()
        assert [json.loads(x)["value"] for x in lines] == [1, 4]
        assert c.submit("square", 3, result_handler="file").result(60)[0]["records"] == 1
        with pytest.raises(wc.RequestRejected):
            c.submit("square", 3, result_handler=("redis", {})).result(60)


def test_given_task_id_is_idempotent(client):
    f1 = client.submit("echo", {"k": 1}, task_id="mine-1")
    assert f1.result(60)["echo"] == {"k": 1} and f1.task_id == "mine-1"
    f2 = client.submit("echo", {"k": 1}, task_id="mine-1")
    assert f2.result(60) == f1.result() and f2.duplicate is True
    with pytest.raises(wc.RequestRejected) as e:
        client.submit("echo", {"k": 2}, task_id="mine-1").result(60)
    assert e.value.code == grpc.StatusCode.ALREADY_EXISTS and e.value.task_id == "mine-1"
    assert isinstance(e.value.__cause__, grpc.RpcError)


def test_cancel_from_the_future_and_from_elsewhere(client, w):
    f = client.submit("sleepy", {"seconds": 30})
    wait_state(client, f, "RUNNING")
    assert f.cancel("not needed") is True
    assert f.cancelled() and f.done()
    with pytest.raises(wc.TaskCancelled) as e:
        f.result(1)
    assert isinstance(e.value, concurrent.futures.CancelledError)
    r = w.wait_terminal(f.task_id)
    assert r.state == pb.TASK_STATE_CANCELLED and "not needed" in r.failure_message
    assert f.cancel() is False
    # a task cancelled by someone else (client.cancel by id, like workerctl cancel)
    g = client.submit("sleepy", {"seconds": 30})
    wait_state(client, g, "RUNNING")
    snap = client.cancel(g.task_id, "operator says no")
    assert snap.task_id == g.task_id
    with pytest.raises(wc.TaskCancelled) as e:
        g.result(60)
    assert not g.cancelled() and "operator says no" in e.value.message
    # a finished task: cancel() is False and the result stays
    h = client.submit("square", 7)
    assert h.result(60) == 49 and h.cancel() is False and h.result() == 49
    # cancelled right after submit, before the admission came back: still cancelled
    k = client.submit("sleepy", {"seconds": 30})
    assert k.cancel("early") is True
    # the submit may still be on its way: the worker knows the task once it came back
    deadline = time.time() + 30
    while k.address is None and time.time() < deadline:
        time.sleep(0.01)
    r = w.wait_terminal(k.task_id)
    assert r.state == pb.TASK_STATE_CANCELLED


def wait_state(client, fut, state, timeout=30):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if fut.address is not None and client.get(fut.task_id).state == state:
            return
        time.sleep(0.02)
    raise AssertionError("task %s never reached %s" % (fut.task_id, state))


def test_wait_as_completed_and_callbacks(client):
    done_order = []
    ev = threading.Event()
    fs = [client.submit("sleepy", {"seconds": s}) for s in (1.5, 0.1)]
    fs.append(client.submit("boom", 1))
    fs[0].add_done_callback(lambda f: (done_order.append(
        (f.task_id, threading.current_thread().name)), ev.set()))
    got = [f for f in concurrent.futures.as_completed(fs, timeout=60)]
    assert set(got) == set(fs) and got[-1] is fs[0]
    # a callback never runs on the network thread: on the delivery thread when added
    # before the end, in the adding thread after it
    assert ev.wait(10) and done_order == [(fs[0].task_id, "worker-client-delivery")]
    fs[0].add_done_callback(lambda f: done_order.append(threading.current_thread().name))
    assert done_order[-1] == threading.current_thread().name
    done, not_done = concurrent.futures.wait(fs, timeout=1)
    assert len(done) == 3 and not not_done
    slow = client.submit("sleepy", {"seconds": 30})
    quick = client.submit("square", 2)
    done, not_done = concurrent.futures.wait([slow, quick],
                                             return_when=concurrent.futures.FIRST_COMPLETED,
                                             timeout=60)
    assert done == {quick} and not_done == {slow}
    assert slow.cancel()
    done, _ = concurrent.futures.wait([slow], timeout=10)
    assert done == {slow}
    with pytest.raises(concurrent.futures.TimeoutError):
        client.submit("sleepy", {"seconds": 5}).result(timeout=0.2)


def test_no_slot_and_unavailable(worker_factory):
    w = worker_factory("--task-slots", "1")
    w.wait_serving()
    deploy_all(w)
    with wc.Client(w.addr) as c:
        busy = c.submit("sleepy", {"seconds": 30})
        wait_state(c, busy, "RUNNING")
        with pytest.raises(wc.NoSlot) as e:
            c.submit("square", 2).result(30)
        assert e.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED and e.value.address == w.addr
        # slot_wait: waits for the slot instead
        with wc.Client(w.addr, slot_wait=30) as patient:
            f = patient.submit("square", 5)
            time.sleep(0.3)
            assert not f.done()
            busy.cancel()
            assert f.result(60) == 25 and patient.stats()["slot_waits"] > 0
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there
    with wc.Client("127.0.0.1:%d" % port, retry_time=0.5) as c:
        with pytest.raises(wc.WorkerUnavailable) as e:
            c.submit("square", 2).result(30)
        assert e.value.code == grpc.StatusCode.UNAVAILABLE and e.value.task_id
        with pytest.raises(wc.WorkerUnavailable):
            c.health()


def test_get_health_attach_stats(client, w):
    assert client.health() == "SERVING"
    f = client.submit("sleepy", {"seconds": 0.5})
    f.result(60)
    r = client.get(f.task_id)
    assert r.state == "SUCCEEDED" and r.outputs[0].value["slept"] == 0.5
    assert f.snapshot().state == "SUCCEEDED"
    with pytest.raises(wc.RequestRejected) as e:
        client.get("no-such-task")
    assert e.value.code == grpc.StatusCode.NOT_FOUND
    # attach to a task submitted by someone else (the raw stub)
    w.submit("other-1", "sleepy", {"seconds": 0.5})
    a = client.attach("other-1", builder="single")
    assert a.result(60)["slept"] == 0.5
    w.submit("other-2", "square", raw_args=b"[1,2]", builder="map")
    assert client.attach("other-2").result(60) == [1, 4]
    with pytest.raises(wc.RequestRejected):
        client.attach("never-submitted").result(60)
    st = client.stats()
    assert st["submits"] >= 1 and st["streams_opened"] >= 1
    assert set(st) >= {"submit_retries", "duplicates", "streams_open", "streams_peak", "merges"}


def test_close_fails_futures_and_the_owned_task_is_lost(w):
    c = wc.Client(w.addr)
    f = c.submit("sleepy", {"seconds": 30})
    wait_state(c, f, "RUNNING")
    c.close()
    with pytest.raises(wc.WorkerError):
        f.result(10)
    # the future owned the task: with no watcher left it fails OWNER_LOST after the grace
    r = w.wait_terminal(f.task_id, timeout=30)
    assert r.state == pb.TASK_STATE_FAILED and r.failure_code == pb.FAILURE_CODE_OWNER_LOST
    with pytest.raises(wc.WorkerError):
        c.submit("square", 1)
    c.close()  # twice is fine


def test_close_before_the_watch_attached_still_fails_the_owned_task(worker_factory):
    """close() right after a submit, while the task still waits (watch_linger) for the
    stream that tells the worker it has an owner: close() opens that stream and waits
    until it has attached the task before ending it, so the task fails OWNER_LOST after
    the grace. Before, it ran on unowned to its end (seen as a 30 s wait in the test
    above when the machine was busy). A task lingers only while other submits are on
    their way: the second one waits for the only slot (slot_wait) all along."""
    w = worker_factory("--task-slots", "1", "--watch-grace-ms", "400", "--tick-ms", "50")
    w.wait_serving()
    deploy_all(w)
    c = wc.Client(w.addr, watch_linger=5, slot_wait=30)  # a stream: 0.25 s after its submit
    # both on their way at once: one takes the slot, the other waits for it until close()
    fs = [c.submit("sleepy", {"seconds": 30}) for _ in range(2)]
    deadline = time.time() + 30
    while all(f.address is None for f in fs) and time.time() < deadline:  # one was answered
        time.sleep(0.005)
    admitted = next(f for f in fs if f.address is not None)
    time.sleep(0.05)
    assert c.stats()["streams_opened"] == 0  # the admitted task still lingers
    c.close()
    for f in fs:
        with pytest.raises(wc.WorkerError):
            f.result(10)
    r = w.wait_terminal(admitted.task_id, timeout=20)
    assert r.state == pb.TASK_STATE_FAILED and r.failure_code == pb.FAILURE_CODE_OWNER_LOST, r


def test_a_task_submitted_alone_is_watched_at_once(w):
    """watch_linger is for tasks submitted together (they share a stream); one task at a
    time must not wait it out: a sequential submit-and-wait loop paid ~5 ms per task
    (p50 6.6-6.9 ms against 0.46 ms for the same round trip from the C generator). With
    a linger of 5 s (a wait is capped at 0.25 s), 20 sequential tasks took 5 s at least;
    now a few ms each."""
    with wc.Client(w.addr, watch_linger=5) as c:
        t0 = time.time()
        for i in range(20):
            assert c.submit("square", i).result(30) == i * i
        took = time.time() - t0
        assert took < 4.0, "20 lone tasks took %.1f s: they waited for watch_linger" % took


def test_observer_futures_do_not_own_their_tasks(w):
    c = wc.Client(w.addr)
    f = c.submit("sleepy", {"seconds": 2}, own=False)
    wait_state(c, f, "RUNNING")
    c.close()  # an observer going away starts no grace: the task runs to its end
    r = w.wait_terminal(f.task_id, timeout=30)
    assert r.state == pb.TASK_STATE_SUCCEEDED
    with wc.Client(w.addr) as c2:
        g = c2.submit("sleepy", {"seconds": 30})
        wait_state(c2, g, "RUNNING")
        with wc.Client(w.addr) as c3:
            o = c3.attach(g.task_id, own=False, builder="single")
            time.sleep(0.2)
        assert not g.done()  # the observer's end did not touch the task
        g.cancel()
        with pytest.raises(wc.WorkerError):
            o.result(10)


def test_reattach_keeps_an_owned_task(w):
    c = wc.Client(w.addr)
    f = c.submit("sleepy", {"seconds": 2})
    wait_state(c, f, "RUNNING")
    task_id = f.task_id
    c.close()
    with wc.Client(w.addr) as c2:  # within the grace (400 ms): the task goes on
        assert c2.attach(task_id, builder="single").result(60)["slept"] == 2


@pytest.fixture
def certs(tmp_path):
    def make(name, cn, ca=None):
        key, crt = str(tmp_path / (name + ".key")), str(tmp_path / (name + ".pem"))
        if ca is None:
            subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                            "-subj", "/CN=" + cn, "-addext",
                            "subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:worker.test",
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


def test_tls_token_and_client_certificate(tmp_path, certs):
    crt, key = certs("server", "127.0.0.1")
    ca = certs("ca", "client-ca")
    ccrt, ckey = certs("client", "client", ca=ca)
    w = Worker(str(tmp_path / "w"), extra_args=["--tls-cert-file", crt, "--tls-key-file", key,
                                                "--auth-token", "tok3n",
                                                "--tls-client-ca-file", ca[0]])
    try:
        w.deploy("square", "def handler(a, c):\n    return a * a\n")
        with wc.Client(w.addr, root_certificates=crt, client_cert=ccrt, client_key=open(ckey, "rb").read(),
                       token="tok3n") as c:
            wait_serving(c)
            assert c.submit("square", 6).result(60) == 36
        # the certificate names worker.test: server_name picks it for localhost's address
        with wc.Client(w.addr, root_certificates=open(crt, "rb").read(), client_cert=ccrt,
                       client_key=ckey, server_name="worker.test", token="tok3n") as c:
            assert c.submit("square", 7).result(60) == 49
        with wc.Client(w.addr, root_certificates=crt, client_cert=ccrt, client_key=ckey) as c:
            with pytest.raises(wc.RequestRejected) as e:
                c.submit("square", 2).result(30)
            assert e.value.code == grpc.StatusCode.UNAUTHENTICATED
        # no client certificate: the handshake fails, as for an unreachable worker
        with wc.Client(w.addr, root_certificates=crt, token="tok3n", retry_time=0.5) as c:
            with pytest.raises(wc.WorkerUnavailable):
                c.submit("square", 2).result(30)
        with pytest.raises(ValueError):
            wc.Client(w.addr, root_certificates=crt, client_cert=ccrt)
    finally:
        w.kill()


def wait_serving(c, timeout=30):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            if c.health() == "SERVING":
                return
        except wc.WorkerError:
            pass
        time.sleep(0.05)
    raise AssertionError("never SERVING")


def test_progress_callback_iterator_and_bar(client, w):
    seen = []
    gate = os.path.join(w.tmp, "progress-gate")
    f = client.map("gate", [{"gate": gate, "i": i} for i in range(4)], progress=seen.append)
    deadline = time.time() + 60
    while not seen and time.time() < deadline:  # attached while its calls wait at the gate
        time.sleep(0.01)
    open(gate, "w").close()
    assert f.result(60) == [0, 1, 2, 3]
    deadline = time.time() + 5
    while (not seen or seen[-1].kind != "terminal") and time.time() < deadline:
        time.sleep(0.01)
    kinds = [p.kind for p in seen]
    assert kinds[0] == "snapshot" and kinds[-1] == "terminal" and seen[0].state != "SUCCEEDED"
    # between them whatever the worker sends (PHASE_CHANGED, PROGRESS; phase changes in
    # one loop turn coalesce, so after CALLS the TERMINAL may come alone)
    assert set(kinds[1:-1]) <= {"phase", "progress"}
    assert seen[-1].calls_total == 4 and seen[-1].calls_done == 4 and seen[-1].fraction == 1
    assert seen[-1].state == "SUCCEEDED" and f.progress is seen[-1]
    phases = [p.phase for p in seen]  # in order, whenever the watch attached
    assert phases == sorted(phases, key=["PREPARING", "BUILDER", "CALLS", "WRITER",
                                         "DONE"].index)
    g = client.map("sleepy", [{"seconds": 0.2}] * 2)
    it = list(g.progress_events(timeout=60))
    assert it[-1].kind == "terminal" and it[-1].calls_done == 2
    # the plain bar (tqdm is optional): one line per phase change and the end
    buf = io.StringIO()
    bar = wc_progress.PlainBar("t-x", file=buf)
    for p in seen:
        bar.update(p)
    text = buf.getvalue()
    assert "CALLS" in text and "SUCCEEDED 4/4 calls (100%)" in text
    # progress=True draws a bar on stderr (tqdm when installed, else the plain one)
    assert client.map("square", [1, 2], progress=True).result(60) == [1, 4]
    with pytest.raises(TypeError):
        client.submit("square", 1, progress="yes")


def test_bad_arguments_raise_at_once(client):
    with pytest.raises(TypeError):
        client.submit("square", object())
    with pytest.raises(TypeError):
        client.submit(len, 1)
    with pytest.raises(ValueError):
        client.submit("square", 1, timeout=-1)
    with pytest.raises(TypeError):
        client.range("chunksum")
    with pytest.raises(ValueError):
        wc.Client("127.0.0.1:1", etcd="http://127.0.0.1:2")


def test_default_target_follows_workerctl(monkeypatch, w):
    monkeypatch.setenv("WORKERCTL_ADDR", w.addr)
    monkeypatch.delenv("WORKERCTL_ETCD", raising=False)
    with wc.Client() as c:
        assert c.submit("square", 3).result(60) == 9
    from worker_client import discovery
    monkeypatch.delenv("WORKERCTL_ADDR")
    monkeypatch.setenv("WORKERCTL_ETCD", "http://127.0.0.1:1")
    assert discovery.default_target() == (None, "http://127.0.0.1:1")
    monkeypatch.delenv("WORKERCTL_ETCD")
    assert discovery.default_target() == ("127.0.0.1:7070", None)


def test_async_client(w):
    async def main():
        async with wc.AsyncClient(w.addr) as c:
            f = c.submit("square", 4)
            assert isinstance(f, asyncio.Future) and await f == 16
            assert f.task_id and f.address == w.addr
            assert await c.map("square", [1, 2, 3]) == [1, 4, 9]
            assert await c.range("chunksum", 0, 10, chunk=5) == [10, 35]
            got = await asyncio.gather(*(c.submit("square", i) for i in range(20)))
            assert got == [i * i for i in range(20)]
            fs = [c.submit("sleepy", {"seconds": s}) for s in (0.6, 0.05)]
            got = [(await x)["slept"] for x in asyncio.as_completed(fs)]
            assert sorted(got) == [0.05, 0.6]
            with pytest.raises(wc.TaskFailed) as e:
                await c.submit("boom", 2)
            assert e.value.error_type == "ValueError" and e.value.traceback
            # progress: async for
            g = c.map("sleepy", [{"seconds": 0.1}] * 3)
            seen = [p async for p in g.progress_events()]
            assert seen[0].kind == "snapshot" and seen[-1].kind == "terminal"
            assert seen[-1].calls_done == 3 and await g == [{"slept": 0.1, "epoch": 1}] * 3
            # cancel(): the asyncio way (wait_for's timeout cancels the task too)
            s = c.submit("sleepy", {"seconds": 30})
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(s, 1.0)
            assert s.cancelled()
            r = await wait_terminal_async(c, s.task_id)
            assert r.state == "CANCELLED"
            s2 = c.submit("sleepy", {"seconds": 30})
            await asyncio.sleep(0.5)
            assert await s2.cancel_task("enough") is True and s2.cancelled()
            assert (await wait_terminal_async(c, s2.task_id)).failure_message.endswith("enough")
            done = c.submit("square", 1)
            await done
            assert await done.cancel_task() is False and done.cancel() is False
            # remote cancel: TaskCancelled
            s3 = c.submit("sleepy", {"seconds": 30})
            await asyncio.sleep(0.5)
            await c.cancel(s3.task_id, "from afar")
            with pytest.raises(wc.TaskCancelled):
                await s3
            assert (await c.get(s3.task_id)).state == "CANCELLED"
            assert await c.health() == "SERVING"
            assert (await c.stats())["submits"] >= 25
            a = c.attach(f.task_id, builder="single")
            assert await a == 16 and (await a.snapshot()).state == "SUCCEEDED"
            assert a.task_result().state == "SUCCEEDED"
            with pytest.raises(wc.NoSlot):
                # a worker with 64 slots: 70 sleeping tasks cannot all get one
                many = [c.submit("sleepy", {"seconds": 3}) for _ in range(70)]
                await asyncio.gather(*many)
            for m in many:
                m.cancel()
    asyncio.run(main())


async def wait_terminal_async(c, task_id, timeout=30):
    deadline = time.time() + timeout
    while time.time() < deadline:
        r = await c.get(task_id)
        if r.terminal:
            return r
        await asyncio.sleep(0.05)
    raise AssertionError("not terminal")


def test_private_protocol_modules_coexist_with_other_stubs():
    # conftest loaded its own worker.v1 stubs into protobuf's default pool; worker_client's
    # live in a private pool under worker_client._proto: both work in one process
    from worker_client._proto import worker_pb2
    a = pb.SubmitTaskRequest(task_id="x")
    b = worker_pb2.SubmitTaskRequest.FromString(a.SerializeToString())
    assert b.task_id == "x" and type(b).__module__ == "worker_client._proto.worker_pb2"
    assert worker_pb2.DESCRIPTOR.pool is not pb.DESCRIPTOR.pool


def _freed_without_the_cycle_collector(submit_all, stats):
    """Runs submit_all() -> futures (all done) with Python's cycle collector off, waits
    until every WatchTasks stream ended, drops the futures and says which of each
    finished task's futures and Handles are still alive: what reference counting alone
    did not free (each such record waits for a collection and makes it slower)."""
    gc.collect()
    gc.disable()
    try:
        fs = submit_all()
        refs = [weakref.ref(f) for f in fs] + [weakref.ref(f._handle) for f in fs]
        deadline = time.time() + 30
        while stats()["streams_open"] and time.time() < deadline:
            time.sleep(0.05)
        assert stats()["streams_open"] == 0, stats()
        del fs
        return [r() for r in refs if r() is not None]
    finally:
        gc.enable()
        gc.collect()


def test_finished_tasks_are_freed_by_reference_counting(w):
    """A finished task's future and Handle are not in a reference cycle (the handle's
    callbacks, the engine's tracking closure and its stream's back-reference each made
    one), in Client and in AsyncClient. The loops below read the streams' count on the
    engine's loop: stats() is safe from the caller's thread."""
    with wc.Client(w.addr) as c:
        def submit_all():
            fs = [c.submit("square", i) for i in range(20)]
            assert [f.result(60) for f in fs] == [i * i for i in range(20)]
            return fs
        left = _freed_without_the_cycle_collector(submit_all, c.stats)
        assert left == [], "%d objects only the cycle collector would free: %r" % (
            len(left), left[:4])

    async def main():
        async with wc.AsyncClient(w.addr) as c:
            fs = [c.submit("square", i) for i in range(20)]
            assert await asyncio.gather(*fs) == [i * i for i in range(20)]
            for _ in range(600):
                if not c._engine.stats["streams_open"]:
                    break
                await asyncio.sleep(0.05)
            return fs

    def submit_all_async():
        return asyncio.run(main())
    left = _freed_without_the_cycle_collector(submit_all_async, lambda: {"streams_open": 0})
    assert left == [], "%d objects only the cycle collector would free: %r" % (len(left), left[:4])


def test_max_submits_bounds_the_submits_in_flight(w):
    """max_submits=3: 30 tasks submitted at once go out three SubmitTasks at a time (the
    real RPCs, counted around the engine's per-worker submit), all admitted, in the
    order they were submitted."""
    async def main():
        async with wc.AsyncClient(w.addr, max_submits=3) as c:
            eng = c._engine
            real = eng._submit_to
            now, most, order = [0], [0], []

            async def counted(conn, h, slot_id, failover=False):
                now[0] += 1
                most[0] = max(most[0], now[0])
                order.append(h.task_id)
                try:
                    return await real(conn, h, slot_id, failover)
                finally:
                    now[0] -= 1
            eng._submit_to = counted
            fs = [c.submit("square", i) for i in range(30)]
            assert await asyncio.gather(*fs) == [i * i for i in range(30)]
            assert most[0] == 3 and now[0] == 0
            assert order == [f.task_id for f in fs]
            assert (await c.stats())["submits"] == 30
    asyncio.run(main())

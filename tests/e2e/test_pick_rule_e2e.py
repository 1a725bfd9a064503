"""The picking rule (README "Picking a worker"), the same in workerctl and the Python
client: records that say draining or not ready are skipped; a task that pins an epoch
lands only on a worker whose record lists that epoch (a record without "code", or with
code_truncated, is a last resort); a worker that refused or could not be reached is
backed off, so a SIGKILLed worker's stale record costs a client at most one attempt.

A real etcd (etcd_fixture) and real workers. Where a test needs the registry to claim
something (code it lists, draining), it writes the records itself, pointing at real
workers; the kill tests use the workers' own registrations."""

import asyncio
import json
import os
import signal
import subprocess
import time

import grpc
from conftest import WORKERCTL
from etcd_fixture import etcd, wait_for  # noqa: F401 (etcd: a fixture)
from pyclient_support import deploy_all
from test_pyclient_etcd_e2e import registered

import worker_client as wc
from worker_client.discovery import Backoff

PREFIX = "/workers/"
ECHO_V2 = ("def handler(args, ctx):\n"
           "    return {'echo': args, 'index': ctx.call_index, 'epoch': ctx.epoch, 'v': 2}\n")


def record(etcd, addr, free=4, key=None, **kw):
    value = {"address": addr, "task_slots": free, "reserved_slots": 0, "running_tasks": 0,
             "free_slots": free, "ready": True, "draining": False, "deployment": "block",
             "service": "worker", "version": "test", "updated_unix_ms": int(time.time() * 1000)}
    value.update(kw)
    etcd.put(key or PREFIX + addr, value)


def code(*epochs, fn="echo", truncated=None):
    out = {"code": {fn: {"current": max(epochs), "epochs": [
        {"epoch": e, "digest": ""} for e in sorted(epochs, reverse=True)]}}}
    if truncated is not None:
        out["code_truncated"] = truncated
    return out


def ctl(*args, state=None, check=None, timeout=60):
    env = dict(os.environ)
    env["WORKERCTL_STATE_DIR"] = state if state is not None else ""
    p = subprocess.run([WORKERCTL] + list(args), capture_output=True, text=True, env=env,
                       timeout=timeout)
    if check is not None:
        assert p.returncode == check, (p.returncode, p.stdout, p.stderr)
    return p


def submitted_on(out):
    """The worker a `workerctl --json submit` picked."""
    return json.loads(out.stdout.strip().splitlines()[-1])["worker"]


def two_code_roots(worker_factory):
    """w1 holds epoch 1 of echo; w2 holds epochs 1 and 2 (other content)."""
    w1, w2 = worker_factory(), worker_factory()
    for w in (w1, w2):
        w.wait_serving()
        w.deploy("echo")
    w2.deploy("echo", ECHO_V2)
    return w1, w2


def test_draining_and_not_ready_records_are_skipped(worker_factory, etcd):
    a, b = worker_factory(), worker_factory()
    for w in (a, b):
        w.wait_serving()
        deploy_all(w)
    record(etcd, a.addr, free=500, draining=True)
    record(etcd, b.addr, free=1)
    record(etcd, "127.0.0.1:1", free=900, ready=False)  # nothing listens there
    for i in range(3):
        out = ctl("--json", "submit", "echo", "{}", "--etcd", etcd.url, check=0)
        assert submitted_on(out) == b.addr
        assert "trying" not in out.stderr, out.stderr
    with wc.Client(etcd=etcd.url, discovery_ttl=0) as c:
        fs = [c.submit("square", i) for i in range(4)]
        assert [f.result(60) for f in fs] == [i * i for i in range(4)]
        assert {f.address for f in fs} == {b.addr}
        assert c.stats()["failovers"] == 0
        ws = {w.address: w for w in c.workers()}
        assert ws[a.addr].draining and not ws[a.addr].eligible


def test_pinned_epoch_lands_only_on_a_worker_that_holds_it(worker_factory, etcd):
    w1, w2 = two_code_roots(worker_factory)
    # w1 looks better (more free slots) but its record lists only epoch 1
    record(etcd, w1.addr, free=100, **code(1))
    record(etcd, w2.addr, free=2, **code(1, 2))
    for i in range(4):
        out = ctl("--json", "submit", "echo", "{}", "--epoch", "2", "--task-id", "p-%d" % i,
                  "--etcd", etcd.url, check=0)
        assert submitted_on(out) == w2.addr
        assert json.loads(w2.wait_terminal("p-%d" % i).outputs[0].value)["epoch"] == 2
    # unpinned tasks still go to the best worker
    assert submitted_on(ctl("--json", "submit", "echo", "{}", "--etcd", etcd.url,
                            check=0)) == w1.addr
    with wc.Client(etcd=etcd.url, discovery_ttl=0) as c:
        fs = [c.submit("echo", {"i": i}, epoch=2) for i in range(4)]
        assert [f.result(60)["epoch"] for f in fs] == [2] * 4
        assert {f.address for f in fs} == {w2.addr}
        assert {w.address: w.holds("echo", 2) for w in c.workers()} == {w1.addr: False,
                                                                       w2.addr: True}
        # an epoch nobody lists: refused before anything is sent
        try:
            c.submit("echo", {}, epoch=3).result(30)
            raise AssertionError("epoch 3 was submitted")
        except wc.WorkerUnavailable as e:
            assert "holds epoch 3 of echo" in str(e), e
    out = ctl("submit", "echo", "{}", "--epoch", "3", "--etcd", etcd.url, check=4)
    assert "holds epoch 3 of echo (2 without it)" in out.stderr, out.stderr


def test_record_without_code_or_truncated_is_a_last_resort(worker_factory, etcd):
    w1, w2 = two_code_roots(worker_factory)
    for extra in ({}, code(1, truncated=True)):  # no "code"; truncated without epoch 2
        record(etcd, w1.addr, free=100, **code(1))
        record(etcd, w2.addr, free=1, **extra)
        out = ctl("--json", "submit", "echo", "{}", "--epoch", "2", "--etcd", etcd.url,
                  check=0)
        assert submitted_on(out) == w2.addr
        with wc.Client(etcd=etcd.url, discovery_ttl=0) as c:
            f = c.submit("echo", {}, epoch=2)
            assert f.result(60)["epoch"] == 2 and f.address == w2.addr
    # a holder goes before a record that cannot tell, whatever their slots
    record(etcd, w1.addr, free=1, **code(1, 2))
    record(etcd, w2.addr, free=100)
    assert submitted_on(ctl("--json", "submit", "echo", "{}", "--epoch", "2", "--etcd",
                            etcd.url, check=0)) == w1.addr


def connection_state(client, addr):
    """The connectivity of the Python client's channel to addr (read on its loop)."""
    async def state():
        return client._engine.conn(addr).channel.get_state()
    return asyncio.run_coroutine_threadsafe(state(), client._loop).result(10)


def kill9(w):
    w.proc.send_signal(signal.SIGKILL)
    w.proc.wait()


def test_killed_worker_costs_workerctl_at_most_one_attempt(worker_factory, etcd, tmp_path):
    # dead has more free slots: every pick's first choice while its record stays (30 s lease)
    dead = registered(worker_factory, etcd, "--task-slots", "32", "--etcd-lease-ttl-s", "30")
    live = registered(worker_factory, etcd, "--task-slots", "8")
    state = str(tmp_path / "ctl-state")
    kill9(dead)
    attempts = 0
    for i in range(8):
        out = ctl("--json", "submit", "echo", "{}", "--etcd", etcd.url, state=state, check=0)
        assert submitted_on(out) == live.addr
        attempts += out.stderr.count("cannot reach %s" % dead.addr)
    assert attempts == 1
    assert PREFIX + dead.addr in etcd.range_prefix(PREFIX)  # the stale record is still there
    # without the table (a fresh state dir each time) every submit tries the dead one first
    out = ctl("--json", "submit", "echo", "{}", "--etcd", etcd.url,
              state=str(tmp_path / "fresh"), check=0)
    assert "cannot reach %s" % dead.addr in out.stderr


def test_killed_worker_costs_the_python_client_at_most_one_attempt(worker_factory, etcd):
    dead = registered(worker_factory, etcd, "--task-slots", "64", "--etcd-lease-ttl-s", "30")
    live = registered(worker_factory, etcd, "--task-slots", "32")
    with wc.Client(etcd=etcd.url, discovery_ttl=0) as c:
        # warm both channels: the dead worker's connection was up when it was killed
        assert c.submit("square", 3).result(60) == 9
        kill9(dead)
        # the burst starts once the client's connection has seen the worker go (as it
        # has for any worker that died before the burst): requests already in flight
        # in the instant between a worker's death and its connection noticing each
        # cost an attempt (README "Picking a worker")
        assert wait_for(lambda: connection_state(c, dead.addr) != grpc.ChannelConnectivity.READY,
                        timeout=30)
        fs = [c.submit("square", i) for i in range(20)]  # a burst, all at once
        assert [f.result(60) for f in fs] == [i * i for i in range(20)]
        for i in range(5):  # and one at a time
            f = c.submit("square", i)
            assert f.result(60) == i * i and f.address == live.addr
        st = c.stats()
        assert st["refused_by"].get(dead.addr, 0) <= 1, st
        assert st["refused_by"].get(live.addr, 0) == 0, st
        assert {f.address for f in fs} == {live.addr}
    assert PREFIX + dead.addr in etcd.range_prefix(PREFIX)


def test_backoff_rule():
    now = [100.0]
    b = Backoff(max_entries=2, clock=lambda: now[0])
    b.fail("a", updated_unix_ms=5)
    assert b.active("a", 5) and b.active("a", 6)  # within 2 s
    now[0] += 2.5
    assert b.active("a", 5) and not b.active("a", 6)  # stale record / re-put since
    b.fail("a", 6)
    now[0] += 3.0
    assert b.active("a", 7)  # second failure: 4 s
    now[0] += 1.5
    assert not b.active("a", 7)
    now[0] += 30
    assert not b.active("a", 6)  # a stale record is not held back past 30 s
    b.fail("x")
    b.fail("y")
    b.fail("z")
    assert len(b) == 2  # bounded
    b.ok("z")
    assert not b.active("z")

"""A submit retried after the connection broke never runs the task twice: the client
talks to a real worker through a TCP proxy that lets the SubmitTask request through,
holds back everything the worker answers from then on, waits until the function has
run (it appends its task id to a file) and drops the connection. The client sees
UNAVAILABLE, retries with the same generated task id, and the worker answers it as a
duplicate. A second proxy holds the answer past the client's deadline instead
(DEADLINE_EXCEEDED, then a retry on the same connection)."""

import os
import socket
import threading
import time

import pytest

from pyclient_support import deploy_all

import worker_client as wc


class DroppingProxy(object):
    """Forwards 127.0.0.1:port to `target`. Once `marker` has gone from the client to
    the worker on a connection, the worker's bytes on it are held back; when
    `release()` (a predicate) is true the connection is either dropped (mode "drop")
    or the held bytes are let through (mode "hold"). Only the first connection that
    carries the marker is touched; later ones are plain forwarding."""

    def __init__(self, target, marker, release, mode="drop"):
        self.target = target
        self.marker = marker
        self.release = release
        self.mode = mode
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.addr = "127.0.0.1:%d" % self.sock.getsockname()[1]
        self.triggered = threading.Event()
        self.dropped = threading.Event()
        self.connections = 0
        self.stopped = False
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while not self.stopped:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            host, port = self.target.rsplit(":", 1)
            s = socket.create_connection((host, int(port)))
            self.connections += 1
            conn = {"held": False, "closed": False, "seen": b""}
            threading.Thread(target=self._up, args=(c, s, conn), daemon=True).start()
            threading.Thread(target=self._down, args=(s, c, conn), daemon=True).start()

    def _up(self, client, server, conn):
        """client -> worker, watching for the marker."""
        try:
            while True:
                data = client.recv(65536)
                if not data:
                    break
                with self.lock:  # held before the marker goes out: the answer cannot pass
                    if not self.triggered.is_set():
                        conn["seen"] = (conn["seen"] + data)[-65536:]
                        if self.marker in conn["seen"]:
                            conn["held"] = True
                            self.triggered.set()
                server.sendall(data)
        except OSError:
            pass
        self._close(client, server, conn)

    def _down(self, server, client, conn):
        """worker -> client; held back after the marker until release()."""
        held = []
        try:
            while True:
                data = server.recv(65536)
                if not data:
                    break
                if conn["held"]:
                    held.append(data)
                    deadline = time.time() + 60
                    while not self.release() and time.time() < deadline:
                        time.sleep(0.01)
                    if self.mode == "drop":
                        self.dropped.set()
                        break
                    conn["held"] = False
                    # let through what was held, then everything after it
                    client.sendall(b"".join(held))
                    held = []
                    continue
                client.sendall(data)
        except OSError:
            pass
        self._close(client, server, conn)

    def _close(self, client, server, conn):
        if conn["closed"]:
            return
        conn["closed"] = True
        for s in (client, server):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def stop(self):
        self.stopped = True
        self.sock.close()


@pytest.fixture
def w(worker_factory):
    w = worker_factory()
    w.wait_serving()
    deploy_all(w)
    return w


def lines(path):
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return f.read().splitlines()


def test_dropped_connection_after_submit_is_retried_with_the_same_id(w, tmp_path):
    path = str(tmp_path / "ran.txt")
    marker = ("drop-marker-%d" % os.getpid()).encode()
    proxy = DroppingProxy(w.addr, marker, release=lambda: len(lines(path)) >= 1)
    try:
        with wc.Client(proxy.addr) as c:
            f = c.submit("counter", {"path": path, "marker": marker.decode()})
            assert f.result(60) == {"ok": True}
            assert proxy.dropped.is_set(), "the proxy never dropped the connection"
            assert proxy.connections >= 2  # the retry came on a new connection
            # the function ran before the drop, and never again
            assert lines(path) == [f.task_id]
            assert f.duplicate is True  # the worker recognised the retry by its task id
            st = c.stats()
            assert st["submit_retries"] >= 1 and st["duplicates"] == 1
            # the other tasks of this client are unaffected
            assert c.submit("square", 3).result(60) == 9
        time.sleep(1)
        assert lines(path) == [f.task_id]
    finally:
        proxy.stop()


def test_deadline_exceeded_submit_is_retried_with_the_same_id(w, tmp_path):
    path = str(tmp_path / "ran.txt")
    marker = ("hold-marker-%d" % os.getpid()).encode()
    t0 = []

    def release():  # the answer is held 2.5 s: past the client's 1 s deadline
        if not t0:
            t0.append(time.time())
        return time.time() - t0[0] > 2.5 and len(lines(path)) >= 1

    proxy = DroppingProxy(w.addr, marker, release=release, mode="hold")
    try:
        with wc.Client(proxy.addr, rpc_timeout=1.0, retry_time=30) as c:
            f = c.submit("counter", {"path": path, "marker": marker.decode()})
            assert f.result(60) == {"ok": True}
            assert lines(path) == [f.task_id]
            assert c.stats()["submit_retries"] >= 1 and f.duplicate is True
    finally:
        proxy.stop()

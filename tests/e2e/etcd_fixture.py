"""A real etcd (Debian's etcd-server) on loopback for the end-to-end tests, and a few
calls of its v3 JSON gateway (standard library only)."""

import base64
import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.request

import pytest

ETCD = "/usr/bin/etcd"


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Etcd(object):
    _count = 0

    def __init__(self):
        self.data = tempfile.mkdtemp(prefix="wk-etcd-")
        Etcd._count += 1
        # a name of its own: the readiness check tells this etcd from another test's
        # that got the same free port first (free_port can race with other processes)
        self.name = "wk-test-%d-%d" % (os.getpid(), Etcd._count)
        self.proc = None
        for _ in range(5):
            self.client_port = free_port()
            self.peer_port = free_port()
            self.url = "http://127.0.0.1:%d" % self.client_port
            if self.start(fresh=True):
                return
        raise RuntimeError("etcd did not start")

    def start(self, fresh=False):
        """Starts (or restarts, on the same ports and data) this etcd; True once it, not
        another process on its port, answers. A fresh start whose ports were taken
        returns False (the caller picks new ports)."""
        self.proc = subprocess.Popen(
            [ETCD, "--data-dir", self.data, "--name", self.name,
             "--listen-client-urls", self.url, "--advertise-client-urls", self.url,
             "--listen-peer-urls", "http://127.0.0.1:%d" % self.peer_port,
             "--initial-advertise-peer-urls", "http://127.0.0.1:%d" % self.peer_port,
             "--initial-cluster", "%s=http://127.0.0.1:%d" % (self.name, self.peer_port),
             "--heartbeat-interval=10", "--election-timeout=100", "--log-level=error"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 20
        while time.time() < deadline:
            if self.proc.poll() is not None and fresh:  # its port was taken: not ours
                shutil.rmtree(self.data, ignore_errors=True)
                os.makedirs(self.data)
                return False
            try:
                members = self._post("/v3/cluster/member/list", {}).get("members", [])
                if any(m.get("name") == self.name for m in members) and self.proc.poll() is None:
                    return True
            except OSError:
                pass
            time.sleep(0.05)
        if fresh:
            self.kill()
            return False
        raise RuntimeError("etcd did not start")

    def kill(self):
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def wipe(self):
        self.kill()
        shutil.rmtree(self.data, ignore_errors=True)
        os.makedirs(self.data)

    def stop(self):
        self.kill()
        shutil.rmtree(self.data, ignore_errors=True)

    def _post(self, path, body):
        req = urllib.request.Request(self.url + path, data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=2) as r:
            return json.loads(r.read())

    def range_prefix(self, prefix):
        key = prefix.encode()
        end = key[:-1] + bytes([key[-1] + 1])
        out = self._post("/v3/kv/range", {"key": base64.b64encode(key).decode(),
                                          "range_end": base64.b64encode(end).decode()})
        kvs = {}
        for kv in out.get("kvs", []):
            kvs[base64.b64decode(kv["key"]).decode()] = (json.loads(base64.b64decode(kv["value"])),
                                                         int(kv.get("lease", 0)))
        return kvs

    def first_value(self, key):
        """The first value `key` was ever given since it was created (etcd keeps the
        history: read at the key's create_revision), or None when it does not exist."""
        k = base64.b64encode(key.encode()).decode()
        kvs = self._post("/v3/kv/range", {"key": k}).get("kvs", [])
        if not kvs:
            return None
        rev = int(kvs[0]["create_revision"])
        first = self._post("/v3/kv/range", {"key": k, "revision": rev}).get("kvs", [])
        return json.loads(base64.b64decode(first[0]["value"])) if first else None

    def delete(self, key):
        self._post("/v3/kv/deleterange", {"key": base64.b64encode(key.encode()).decode()})

    def put(self, key, value):
        self._post("/v3/kv/put", {"key": base64.b64encode(key.encode()).decode(),
                                  "value": base64.b64encode(json.dumps(value).encode()).decode()})

    def lease_ttl(self, lease):
        out = self._post("/v3/lease/timetolive", {"ID": lease})
        return int(out.get("TTL", -1))


def wait_for(pred, timeout=10, step=0.05):
    deadline = time.time() + timeout
    while time.time() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(step)
    return pred()


@pytest.fixture
def etcd():
    """A real etcd for one test (import this fixture into the test module)."""
    e = Etcd()
    yield e
    e.stop()

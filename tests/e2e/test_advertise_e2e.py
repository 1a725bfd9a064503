"""A worker listening on every address (0.0.0.0 or [::]) without advertise_addr
registers an address clients can dial (issue 13 §4): this host's primary address with
the bound port, never 0.0.0.0:PORT, and says so in its log. A real etcd
(etcd_fixture) and real workers (conftest)."""

import socket

import grpc
import pytest

from conftest import HealthStub, health_pb2
from etcd_fixture import Etcd, wait_for

PREFIX = "/workers/"


@pytest.fixture
def etcd():
    e = Etcd()
    yield e
    e.stop()


def local_addresses():
    """Every address of this host's interfaces (from the kernel, via `ip`)."""
    import subprocess
    out = subprocess.run(["ip", "-o", "addr"], capture_output=True, text=True).stdout
    addrs = set()
    for line in out.splitlines():
        parts = line.split()
        if "inet" in parts:
            addrs.add(parts[parts.index("inet") + 1].split("/")[0])
        if "inet6" in parts:
            addrs.add("[%s]" % parts[parts.index("inet6") + 1].split("/")[0])
    return addrs


def registered(etcd):
    kvs = wait_for(lambda: etcd.range_prefix(PREFIX), timeout=10)
    assert len(kvs) == 1, kvs
    (key, (value, _)), = kvs.items()
    return key, value


def serving_at(addr):
    with grpc.insecure_channel(addr) as ch:
        r = HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=5)
        return r.status == health_pb2.HealthCheckResponse.SERVING


@pytest.mark.parametrize("listen", ["0.0.0.0:0", "[::]:0"])
def test_wildcard_listen_registers_a_routable_address(worker_factory, etcd, listen):
    if listen.startswith("[") and not socket.has_ipv6:
        pytest.skip("no IPv6")
    w = worker_factory("--listen", listen, "--etcd-endpoints", etcd.url,
                       "--heartbeat-interval-ms", "200")
    w.wait_serving()
    key, value = registered(etcd)
    addr = value["address"]
    host, port = addr.rsplit(":", 1)
    assert int(port) == w.port
    assert host not in ("0.0.0.0", "[::]", "::", ""), value
    assert key == PREFIX + addr
    assert host in local_addresses() | {"127.0.0.1"}, (host, local_addresses())
    assert serving_at(addr)  # what etcd says is dialable, and is this worker
    ev = w.events("advertise_addr_chosen")
    assert len(ev) == 1 and ev[0]["advertise_addr"] == addr, w.logs[:5]
    assert ev[0]["listen_addr"] == listen and "advertise_addr" in ev[0]["msg"]


def test_explicit_advertise_addr_and_a_plain_host_are_kept(worker_factory, etcd):
    w = worker_factory("--listen", "0.0.0.0:0", "--etcd-endpoints", etcd.url,
                       "--advertise-addr", "worker-7.example:7070")
    w.wait_serving()
    _, value = registered(etcd)
    assert value["address"] == "worker-7.example:7070"
    assert not w.events("advertise_addr_chosen")

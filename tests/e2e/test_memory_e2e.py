"""The worker's own memory (issue 12's memory targets):

- a worker with default settings maps none of the libraries of the features that are
  off (libcurl for etcd, libmicrohttpd for metrics, libpq for the postgres writer,
  libsystemd): they are opened when the feature is first used, and a worker with
  metrics_addr maps libmicrohttpd (and serves)."""

import os
import urllib.request

OPTIONAL_LIBS = ("libcurl", "libmicrohttpd", "libpq", "libsystemd", "libgnutls", "libkrb5")


def mapped_libs(pid):
    with open("/proc/%d/maps" % pid) as f:
        return {os.path.basename(line.split()[-1]) for line in f if ".so" in line}


def test_default_worker_maps_no_optional_library(worker_factory):
    w = worker_factory()
    w.wait_serving()
    libs = mapped_libs(w.proc.pid)
    found = sorted(lib for lib in libs if lib.startswith(OPTIONAL_LIBS))
    assert not found, "a default worker mapped %s" % found


def test_metrics_worker_opens_libmicrohttpd(worker_factory):
    w = worker_factory("--metrics-addr", "127.0.0.1:0")
    w.wait_serving()
    assert any(lib.startswith("libmicrohttpd") for lib in mapped_libs(w.proc.pid))
    ev = [e for e in w.logs if e.get("event") == "metrics_listening"]
    assert ev, w.logs[-10:]
    port = ev[0]["port"]
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=10) as r:
        assert r.status == 200
        assert b"# TYPE" in r.read()

"""`workerctl workers` over one real etcd with a block `worker` and a `bundle_worker`
registered (each under its Profile's prefix, /workers/ and /bundle-workers/): without
--prefix both are listed, with a DEPLOYMENT column; --deployment NAME keeps one kind;
--prefix still reads exactly one prefix."""

import json
import os
import subprocess

from conftest import BUILD, WORKERCTL
from etcd_fixture import Etcd, wait_for

BUNDLE = os.path.join(BUILD, "bundle_worker")


def ctl(*args):
    return subprocess.run([WORKERCTL] + list(args), capture_output=True, text=True, timeout=30)


def table(stdout):
    lines = stdout.splitlines()
    header = lines[0].split()
    return header, {l.split()[0]: l.split() for l in lines[1:]}


def test_workers_lists_every_deployment_with_a_column_and_a_filter(worker_factory):
    etcd = Etcd()
    try:
        reg = ("--etcd-endpoints", etcd.url, "--heartbeat-interval-ms", "200")
        block = worker_factory(*reg, executors=1)
        bundle = worker_factory(*reg, binary=BUNDLE, executors=1)
        block.wait_serving()
        bundle.wait_serving()
        assert wait_for(lambda: etcd.range_prefix("/workers/") and
                        etcd.range_prefix("/bundle-workers/"), timeout=15)

        out = ctl("workers", "--etcd", etcd.url)
        assert out.returncode == 0, out.stderr
        header, rows = table(out.stdout)
        assert "DEPLOYMENT" in header, out.stdout
        col = header.index("DEPLOYMENT")
        assert set(rows) == {block.addr, bundle.addr}, out.stdout
        assert rows[block.addr][col] == "block" and rows[bundle.addr][col] == "bundle", out.stdout

        out = ctl("--json", "workers", "--etcd", etcd.url)
        assert out.returncode == 0, out.stderr
        docs = {d["address"]: d for d in map(json.loads, out.stdout.splitlines())}
        assert docs[block.addr]["deployment"] == "block"
        assert docs[bundle.addr]["deployment"] == "bundle"

        for name, addr in (("bundle", bundle.addr), ("block", block.addr)):
            out = ctl("workers", "--etcd", etcd.url, "--deployment", name)
            assert out.returncode == 0, out.stderr
            assert set(table(out.stdout)[1]) == {addr}, out.stdout

        out = ctl("workers", "--etcd", etcd.url, "--deployment", "nosuch")
        assert out.returncode == 0 and out.stdout == "", out
        assert "no nosuch workers registered" in out.stderr, out.stderr

        # one prefix when asked for one
        out = ctl("workers", "--etcd", etcd.url, "--prefix", "/bundle-workers/")
        assert out.returncode == 0, out.stderr
        assert set(table(out.stdout)[1]) == {bundle.addr}, out.stdout
    finally:
        for w in (locals().get("block"), locals().get("bundle")):
            if w is not None and w.proc.poll() is None:
                w.stop()
        etcd.stop()

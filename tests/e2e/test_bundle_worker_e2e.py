"""The second entry point, `bundle_worker` (Profile "bundle"), as a process: its name in
--help and errors, its Profile's defaults in --print-config (registry prefix, executors),
the builders and writers it enables and those it does not, and its etcd registration
under its own prefix."""

import json
import os
import socket
import subprocess

import grpc
import pytest

from conftest import BUILD, WORKER, pb
from etcd_fixture import Etcd, wait_for

BUNDLE = os.path.join(BUILD, "bundle_worker")


def run(binary, args, tmp_path, timeout=60):
    code = tmp_path / "code"
    code.mkdir(exist_ok=True)
    return subprocess.run([binary, "--code-root", str(code)] + args, capture_output=True,
                          text=True, timeout=timeout)


def test_help_and_errors_name_the_program(tmp_path):
    for binary, name in ((BUNDLE, "bundle_worker"), (WORKER, "worker")):
        out = run(binary, ["--help"], tmp_path)
        assert out.returncode == 0, out.stderr
        assert out.stdout.startswith("usage: %s " % name), out.stdout[:200]
        out = run(binary, ["--task-slot", "3"], tmp_path)
        assert out.returncode == 2
        assert out.stderr.startswith("%s: unknown flag '--task-slot'" % name), out.stderr
        assert "see %s --help" % name in out.stderr, out.stderr


def test_start_up_errors_name_the_program(tmp_path):
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen(1)
    try:
        addr = "127.0.0.1:%d" % busy.getsockname()[1]
        out = run(BUNDLE, ["--listen", addr, "--executors", "1"], tmp_path, timeout=30)
    finally:
        busy.close()
    assert out.returncode != 0
    lines = [ln for ln in out.stderr.splitlines() if "cannot serve on " + addr in ln]
    assert len(lines) == 1 and lines[0].startswith("bundle_worker: "), out.stderr


def test_print_config_shows_the_profile(tmp_path):
    for binary, prefix, executors in ((BUNDLE, "/bundle-workers/", (4, 8)),
                                      (WORKER, "/workers/", (2, 4))):
        out = run(binary, ["--print-config", "--json"], tmp_path)
        assert out.returncode == 0, out.stderr
        cfg = json.loads(out.stdout)
        assert cfg["registry_prefix"]["value"] == prefix, (binary, cfg["registry_prefix"])
        assert cfg["executors"]["value"] == executors[0]
        assert cfg["executors_max"]["value"] == executors[1]
        text = run(binary, ["--print-config"], tmp_path).stdout
        line = [ln for ln in text.splitlines() if ln.startswith("registry_prefix ")]
        assert line and prefix in line[0] and "default, profile" in line[0], line
    # a configured prefix still wins over the Profile's
    out = run(BUNDLE, ["--print-config", "--json", "--registry-prefix", "/elsewhere/"], tmp_path)
    assert json.loads(out.stdout)["registry_prefix"] == {
        "value": "/elsewhere/", "source": "flag", "where": "--registry-prefix"}


@pytest.fixture
def bundle(worker_factory, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    w = worker_factory("--output-dir", str(out), binary=BUNDLE, executors=1)
    w.wait_serving()
    w.deploy("echo")
    w.out_dir = str(out)
    return w


def test_bundle_runs_its_builders_and_refuses_range(bundle):
    w = bundle
    w.submit("b-single", "echo", {"x": 1})
    r = w.wait_terminal("b-single")
    assert r.state == pb.TASK_STATE_SUCCEEDED, r.failure_message
    w.submit("b-map", "echo", [1, 2, 3], builder="map")
    r = w.wait_terminal("b-map")
    assert r.state == pb.TASK_STATE_SUCCEEDED, r.failure_message
    assert len(r.outputs) == 3
    # range is the block Profile's, not the bundle's
    w.submit("b-range", "echo", {"start": 0, "stop": 3}, builder="range")
    r = w.wait_terminal("b-range")
    assert r.state == pb.TASK_STATE_FAILED
    assert r.failure_code == pb.FAILURE_CODE_BUILDER_NOT_FOUND, r.failure_message
    assert "range" in r.failure_message


def test_bundle_writes_files_and_has_no_redis_writer(bundle):
    w = bundle
    w.submit("b-file", "echo", [1, 2], builder="map", result_handler=pb.ResultHandler(type="file"))
    r = w.wait_terminal("b-file")
    assert r.state == pb.TASK_STATE_SUCCEEDED, r.failure_message
    assert [p.plugin for p in r.plugin_results] == ["file"] and r.plugin_results[0].records == 2
    assert os.path.exists(r.plugin_results[0].location)
    assert os.path.dirname(r.plugin_results[0].location) == w.out_dir
    # redis is not enabled in the bundle Profile: refused at submit, or failed before it runs
    try:
        w.submit("b-redis", "echo", 1, result_handler=pb.ResultHandler(type="redis"))
    except grpc.RpcError as e:
        assert "redis" in e.details(), e.details()
        return
    r = w.wait_terminal("b-redis")
    assert r.state == pb.TASK_STATE_FAILED
    assert r.failure_code == pb.FAILURE_CODE_PLUGIN_NOT_FOUND, r.failure_message
    assert "redis" in r.failure_message


def test_bundle_rejects_settings_of_writers_it_does_not_enable(tmp_path):
    out = run(BUNDLE, ["--listen", "127.0.0.1:0", "--redis-addr", "127.0.0.1:1"], tmp_path,
              timeout=20)
    assert out.returncode == 2, out.stderr
    assert "redis_addr" in out.stderr and "bundle" in out.stderr, out.stderr


def test_bundle_registers_under_its_prefix(worker_factory):
    etcd = Etcd()
    try:
        w = worker_factory("--etcd-endpoints", etcd.url, "--etcd-lease-ttl-s", "2",
                           "--heartbeat-interval-ms", "200", binary=BUNDLE, executors=1)
        w.wait_serving()
        key = "/bundle-workers/" + w.addr
        kvs = wait_for(lambda: etcd.range_prefix("/bundle-workers/"), timeout=10)
        assert list(kvs) == [key]
        value = kvs[key][0]
        assert value["deployment"] == "bundle" and value["address"] == w.addr
        assert value["service"] == "bundle-worker"
        assert etcd.range_prefix("/workers/") == {}
        # workerctl finds it under that prefix only
        ctl = os.path.join(BUILD, "workerctl")
        out = subprocess.run([ctl, "--json", "workers", "--etcd", etcd.url, "--prefix",
                              "/bundle-workers/"], capture_output=True, text=True, timeout=30)
        assert out.returncode == 0, out.stderr
        assert w.addr in out.stdout
        w.stop()
        assert wait_for(lambda: etcd.range_prefix("/bundle-workers/") == {}, timeout=5)
    finally:
        etcd.stop()

"""DeployCode and SetCurrentEpoch (issue 15 §1) against a real worker, a real gRPC
client and a real etcd: off by default, a deploy under a fleet-wide epoch that a pinned
task then runs, the same deploy again reused, the same epoch with other content
refused, make_current=false then SetCurrentEpoch (the very next task gets it), a code
check that fails, a running task keeping its epoch, deploys never blocking other RPCs,
and the etcd record's "code" field (refreshed after deploys, bounded, truncated)."""

import concurrent.futures
import json
import os
import subprocess
import time
import urllib.request

import grpc
import pytest

from conftest import WORKERCTL, output_json, pb
from deploy_support import deploy_request, snapshot, tree_digest, version
from etcd_fixture import etcd, wait_for  # noqa: F401 (etcd: a fixture)

PREFIX = "/workers/"


def start(worker_factory, *extra):
    w = worker_factory("--deploy-enabled", "true", *extra)
    w.wait_serving()
    return w


def run(w, task_id, function, epoch=0, args=None):
    kw = {"epoch": epoch} if epoch else {}
    w.submit(task_id, function, args=args if args is not None else {}, **kw)
    r = w.wait_terminal(task_id)
    assert r.state == pb.TASK_STATE_SUCCEEDED, r
    return output_json(r)


def test_off_by_default_says_how_to_turn_it_on(worker_factory):
    w = worker_factory()
    w.wait_serving()
    before = snapshot(w.code_root)
    for call, req in ((w.stub.DeployCode, deploy_request("fn", {"main.py": version(1)}, epoch=1)),
                      (w.stub.SetCurrentEpoch, pb.SetCurrentEpochRequest(function="fn", epoch=1))):
        with pytest.raises(grpc.RpcError) as e:
            call(req, timeout=10)
        assert e.value.code() == grpc.StatusCode.UNIMPLEMENTED
        assert "deploy_enabled" in e.value.details()
    assert snapshot(w.code_root) == before


def test_deploy_at_a_fleet_epoch_then_pin_reuse_conflict_and_set_current(worker_factory):
    w = start(worker_factory)
    v1, v2 = {"main.py": version(1), "lib/util.py": "X = 1\n"}, {"main.py": version(2)}
    r = w.stub.DeployCode(deploy_request("fn", v1, epoch=7), timeout=60)
    assert (r.epoch, r.reused, r.current_epoch) == (7, False, 7)
    assert r.digest == tree_digest(v1)
    assert open(os.path.join(w.code_root, "fn", "7", "lib", "util.py")).read() == "X = 1\n"
    assert open(os.path.join(w.code_root, "fn", "7.sha256")).read().strip() == r.digest
    ev = wait_for(lambda: w.events("code_deployed"))
    assert ev[-1]["function"] == "fn" and ev[-1]["epoch"] == 7 and ev[-1]["digest"] == r.digest
    assert ev[-1]["client"].startswith("ipv4:127.0.0.1:")
    assert run(w, "pinned-7", "fn", epoch=7) == {"version": 1, "epoch": 7}

    # the same deploy again: reused, nothing copied
    mtime = os.stat(os.path.join(w.code_root, "fn", "7")).st_mtime_ns
    r = w.stub.DeployCode(deploy_request("fn", v1, epoch=7), timeout=60)
    assert (r.epoch, r.reused, r.current_epoch) == (7, True, 7)
    assert os.stat(os.path.join(w.code_root, "fn", "7")).st_mtime_ns == mtime

    # the same epoch with other content: refused, naming both digests; nothing changes
    before = snapshot(w.code_root)
    with pytest.raises(grpc.RpcError) as e:
        w.stub.DeployCode(deploy_request("fn", v2, epoch=7), timeout=60)
    assert e.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "got epoch 7 of 'fn' from another deploy" in e.value.details()
    assert tree_digest(v1) in e.value.details() and tree_digest(v2) in e.value.details()
    assert snapshot(w.code_root) == before

    # make_current=false: published, CURRENT stays; an unpinned task still gets 7
    r = w.stub.DeployCode(deploy_request("fn", v2, epoch=8, make_current=False), timeout=60)
    assert (r.epoch, r.reused, r.current_epoch) == (8, False, 7)
    assert run(w, "before-switch", "fn") == {"version": 1, "epoch": 7}
    # SetCurrentEpoch with another digest: refused, CURRENT unchanged
    with pytest.raises(grpc.RpcError) as e:
        w.stub.SetCurrentEpoch(pb.SetCurrentEpochRequest(function="fn", epoch=8,
                                                         digest=tree_digest(v1)), timeout=30)
    assert e.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    with pytest.raises(grpc.RpcError) as e:
        w.stub.SetCurrentEpoch(pb.SetCurrentEpochRequest(function="fn", epoch=9), timeout=30)
    assert e.value.code() == grpc.StatusCode.NOT_FOUND
    # then it moves, and the very next task (the code cache had epoch 7) gets epoch 8
    s = w.stub.SetCurrentEpoch(pb.SetCurrentEpochRequest(function="fn", epoch=8,
                                                         digest=tree_digest(v2)), timeout=30)
    assert (s.current_epoch, s.previous_epoch) == (8, 7)
    assert run(w, "after-switch", "fn") == {"version": 2, "epoch": 8}
    ev = wait_for(lambda: w.events("code_current_set"))
    assert ev[-1]["epoch"] == 8 and ev[-1]["previous"] == 7 and ev[-1]["digest"] == tree_digest(v2)

    # epoch 0: this worker's next local epoch (or the one holding the same digest)
    r = w.stub.DeployCode(deploy_request("fn", {"main.py": version(3)}, epoch=0), timeout=60)
    assert (r.epoch, r.reused, r.current_epoch) == (9, False, 9)
    r = w.stub.DeployCode(deploy_request("fn", v2, epoch=0, make_current=False), timeout=60)
    assert (r.epoch, r.reused, r.current_epoch) == (8, True, 9)


def test_code_that_fails_its_check_is_refused_and_nothing_is_published(worker_factory):
    w = start(worker_factory)
    w.stub.DeployCode(deploy_request("fn", {"main.py": version(1)}, epoch=1), timeout=60)
    before = snapshot(w.code_root)
    bad = {"main.py": "import does_not_exist_anywhere\n" + version(2)}
    with pytest.raises(grpc.RpcError) as e:
        w.stub.DeployCode(deploy_request("fn", bad, epoch=2), timeout=60)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "does_not_exist_anywhere" in e.value.details(), e.value.details()
    # a syntax error, and an entry point that is not there
    for files, ep in (({"main.py": "def handler(:\n"}, ""), ({"main.py": version(2)}, "main:nope")):
        with pytest.raises(grpc.RpcError) as e:
            w.stub.DeployCode(deploy_request("fn", files, epoch=2, entrypoint=ep), timeout=60)
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT, e.value.details()
    assert snapshot(w.code_root) == before
    assert run(w, "still-1", "fn") == {"version": 1, "epoch": 1}
    # the entry point the request names is the one checked
    ok = {"mod.py": "def go(args, ctx):\n    return 'go'\n"}
    r = w.stub.DeployCode(deploy_request("fn2", ok, epoch=1, entrypoint="mod:go"), timeout=60)
    assert r.epoch == 1
    assert wait_for(lambda: len(w.events("code_deploy_refused")) == 3)
    assert all(x["function"] == "fn" for x in w.events("code_deploy_refused"))


def test_a_running_task_keeps_its_epoch_and_deploys_never_block_other_rpcs(worker_factory):
    w = start(worker_factory)
    slow = ("import time\n"
            "def handler(args, ctx):\n"
            "    time.sleep(args.get('s', 0))\n"
            "    return {'version': %d, 'epoch': ctx.epoch}\n")
    w.stub.DeployCode(deploy_request("fn", {"main.py": slow % 1}, epoch=1), timeout=60)
    w.submit("long", "fn", args={"s": 3})
    wait_for(lambda: w.stub.GetTaskResult(pb.GetTaskResultRequest(task_id="long"),
                                          timeout=5).state == pb.TASK_STATE_RUNNING, timeout=20)
    w.stub.DeployCode(deploy_request("fn", {"main.py": slow % 2}, epoch=2), timeout=60)
    assert run(w, "new", "fn") == {"version": 2, "epoch": 2}
    r = w.wait_terminal("long")
    assert output_json(r) == {"version": 1, "epoch": 1}

    # a deploy whose import takes seconds: other RPCs (and tasks) are served meanwhile,
    # and a second deploy waits its turn and succeeds
    heavy = {"main.py": "import time\ntime.sleep(3)\n" + version(3)}
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        first = pool.submit(w.stub.DeployCode, deploy_request("fn", heavy, epoch=3), timeout=120)
        time.sleep(0.5)
        second = pool.submit(w.stub.DeployCode,
                             deploy_request("other", {"main.py": version(9)}, epoch=1), timeout=120)
        assert run(w, "during", "fn") == {"version": 2, "epoch": 2}
        assert not first.done(), "the served task should not have waited for the check"
        assert first.result().epoch == 3 and second.result().epoch == 1


def test_etcd_record_lists_the_code_and_follows_deploys(worker_factory, etcd):
    w = start(worker_factory, "--etcd-endpoints", etcd.url, "--etcd-lease-ttl-s", "5",
              "--heartbeat-interval-ms", "300", "--metrics-addr", "127.0.0.1:0")
    key = PREFIX + w.addr
    status_port = w.events("metrics_listening")[0]["port"]
    wait_for(lambda: key in etcd.range_prefix(PREFIX))
    # the very first value written already lists the code (the registration waits for
    # the first scan of the store: a coordinator never sees the worker without it)
    assert etcd.first_value(key)["code"] == {}
    assert etcd.range_prefix(PREFIX)[key][0]["code"] == {}
    assert etcd.range_prefix(PREFIX)[key][0]["code_truncated"] is False
    d = {}
    for fn, e in (("alpha", 5), ("alpha", 7), ("beta", 3)):
        files = {"main.py": version(e) + "# %s\n" % fn}
        d[(fn, e)] = tree_digest(files)
        w.stub.DeployCode(deploy_request(fn, files, epoch=e, make_current=(e != 7)), timeout=60)

    def code():
        return etcd.range_prefix(PREFIX)[key][0]["code"]
    want = {"alpha": {"current": 5, "epochs": [{"epoch": 7, "digest": d[("alpha", 7)]},
                                               {"epoch": 5, "digest": d[("alpha", 5)]}]},
            "beta": {"current": 3, "epochs": [{"epoch": 3, "digest": d[("beta", 3)]}]}}
    assert wait_for(lambda: code() == want, timeout=10), code()
    # /status shows the same
    def status():
        with urllib.request.urlopen("http://127.0.0.1:%d/status" % status_port, timeout=10) as r:
            return json.loads(r.read())
    assert wait_for(lambda: status().get("code") == want, timeout=10), status().get("code")
    assert status()["code_truncated"] is False
    w.stub.SetCurrentEpoch(pb.SetCurrentEpochRequest(function="alpha", epoch=7), timeout=30)
    assert wait_for(lambda: code()["alpha"]["current"] == 7, timeout=10), code()
    # a local `workerctl deploy` (no RPC) shows at the periodic rescan; its digest too
    src = os.path.join(w.tmp, "local")
    os.makedirs(src)
    with open(os.path.join(src, "main.py"), "w") as f:
        f.write(version(4))
    out = subprocess.run([WORKERCTL, "deploy", "--json", "--code-root", w.code_root, "gamma", src],
                         check=True, capture_output=True, text=True)
    local = json.loads(out.stdout)
    assert local["sha256"] == tree_digest({"main.py": version(4)})  # one digest rule
    assert wait_for(lambda: code().get("gamma") == {
        "current": 1, "epochs": [{"epoch": 1, "digest": local["sha256"]}]}, timeout=10), code()


def test_etcd_record_code_is_bounded_and_says_truncated(worker_factory, etcd):
    w = start(worker_factory, "--etcd-endpoints", etcd.url, "--etcd-lease-ttl-s", "5",
              "--heartbeat-interval-ms", "300", "--registry-code-max-bytes", "400",
              "--code-epochs-kept", "0")
    key = PREFIX + w.addr
    for e in range(1, 7):
        w.stub.DeployCode(deploy_request("fn", {"main.py": version(e)}, epoch=e,
                                         make_current=(e == 2)), timeout=60)

    def value():
        return etcd.range_prefix(PREFIX)[key][0]
    assert wait_for(lambda: key in etcd.range_prefix(PREFIX) and value()["code_truncated"] and
                    value()["code"]["fn"]["epochs"][0]["epoch"] == 6, timeout=10), value()
    code = value()["code"]
    assert len(json.dumps(code, separators=(",", ":"))) <= 400
    epochs = [x["epoch"] for x in code["fn"]["epochs"]]
    # CURRENT (2) first, then the highest; highest first in the list; the lowest left out
    assert code["fn"]["current"] == 2
    assert epochs == sorted(epochs, reverse=True) and 2 in epochs and 6 in epochs
    assert 1 not in epochs and len(epochs) < 6

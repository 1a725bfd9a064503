"""`workerctl deploy --fleet FN DIR` against one real etcd and real workers: the tree
rules of the local deploy, the fleet-wide epoch taken in etcd (above every epoch a
registered worker lists, the same for identical content, another for concurrent other
content), the selection of workers (--prefix, --deployment, --addr), the output."""

import json
import os
import subprocess

from conftest import WORKERCTL
from etcd_fixture import wait_for
from test_fleet_e2e import Fleet, ctl, current, fleet, ver_source, write_tree  # noqa: F401

PREFIX = "/workers/"


def listed(fleet, w, fn):
    rec = fleet.record(w)
    return sorted(e["epoch"] for e in rec.get("code", {}).get(fn, {}).get("epochs", []))


def test_epoch_starts_above_what_workers_list_and_follows_content(fleet, tmp_path):
    a, b = fleet.start(), fleet.start()
    for i in range(3):  # three local deploys on a: epochs 1..3 there
        a.deploy("ver", ver_source("local-%d" % i))
    assert wait_for(lambda: listed(fleet, a, "ver") == [1, 2, 3], timeout=10)
    v1 = write_tree(str(tmp_path / "v1"), {"main.py": ver_source(1)})
    out = fleet.deploy("ver", v1, "--json")
    j = json.loads(out.stdout)
    assert j["epoch"] == 4 and not j["epoch_existed"] and j["current_moved"]
    assert {x["worker"] for x in j["workers"]} == {a.addr, b.addr}
    assert current(a, "ver") == 4 and current(b, "ver") == 4
    keys = fleet.etcd.range_prefix("/worker-epochs/ver/")
    assert keys["/worker-epochs/ver/counter"][0] == 4
    assert keys["/worker-epochs/ver/by-digest/" + j["sha256"]][0] == 4
    # the digest is the code store's: a local deploy of the same tree records the same one
    local = str(tmp_path / "local-root")
    out = ctl("deploy", "--json", "--no-check", "--code-root", local, "ver", v1, check=0)
    assert json.loads(out.stdout)["sha256"] == j["sha256"]

    # concurrent fleet deploys: other content, other epochs; the same content, one epoch
    trees = [write_tree(str(tmp_path / ("c%d" % i)), {"main.py": ver_source("c%d" % i)})
             for i in range(3)]
    procs = [subprocess.Popen([WORKERCTL, "deploy", "--fleet", "--etcd", fleet.etcd.url,
                               "--json", "ver", t], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
             for t in trees + [trees[0]]]
    outs = [p.communicate(timeout=120) for p in procs]
    epochs = [json.loads(o[0])["epoch"] for o in outs]
    assert len(set(epochs[:3])) == 3 and min(epochs) > 4, outs
    assert epochs[3] == epochs[0]
    # each worker holds every one of them, each under its own digest
    assert wait_for(lambda: set(epochs) <= set(listed(fleet, b, "ver")), timeout=10)


def test_tree_rules_and_selection(fleet, tmp_path):
    a = fleet.start()
    other = fleet.start("--registry-prefix", "/pool-b/", name="other", prefix="/pool-b/")
    src = write_tree(str(tmp_path / "src"), {"main.py": ver_source(1), "lib/util.py": "X = 1\n",
                                             "__pycache__/main.cpython-311.pyc": "junk"})
    os.symlink("lib/util.py", os.path.join(src, "alias.py"))  # inside the tree: followed
    out = fleet.deploy("ver", src, "--json")
    j = json.loads(out.stdout)
    # the default selection is every deployment's prefix: /pool-b/ is not one of them
    assert [x["worker"] for x in j["workers"]] == [a.addr]
    epoch = j["epoch"]
    root = os.path.join(a.code_root, "ver", str(epoch))
    assert sorted(os.listdir(root)) == ["alias.py", "lib", "main.py"]  # no __pycache__
    assert not os.path.islink(os.path.join(root, "alias.py"))
    # --prefix selects that registry's workers
    out = fleet.deploy("ver", src, "--prefix", "/pool-b/", "--json")
    j2 = json.loads(out.stdout)
    assert j2["epoch"] == epoch and [x["worker"] for x in j2["workers"]] == [other.addr]
    assert current(other, "ver") == epoch
    # --deployment: workers of another kind only (none here)
    out = fleet.deploy("ver", src, "--deployment", "bundle", check=4)
    assert "no worker to deploy to" in out.stderr
    # a link out of the tree is refused before anything is sent
    bad = write_tree(str(tmp_path / "bad"), {"main.py": ver_source(2)})
    os.symlink("/etc/passwd", os.path.join(bad, "passwd"))
    out = fleet.deploy("ver", bad, check=1)
    assert "points outside the source directory" in out.stderr
    assert current(a, "ver") == epoch
    # another entry point: the workers' check imports the one given
    app = write_tree(str(tmp_path / "app"), {"app.py": "def run(args, ctx):\n    return 7\n"})
    out = fleet.deploy("app", app, check=1)
    assert "main" in out.stderr and "FAILED at DeployCode" in out.stderr, out.stderr
    fleet.deploy("app", app, "--entrypoint", "app:run")
    # usage errors
    ctl("deploy", "--fleet", "--etcd", fleet.etcd.url, "--parallel", "0", "ver", src, check=2)
    ctl("deploy", "--fleet", "--etcd", fleet.etcd.url, "--addr", a.addr, "--prefix", "/x/",
        "ver", src, check=2)
    ctl("deploy", "--fleet", "--etcd", fleet.etcd.url, "--code-root", "/tmp", "ver", src,
        check=2)


def test_plain_output_and_an_unreachable_worker(fleet, tmp_path):
    a = fleet.start()
    src = write_tree(str(tmp_path / "src"), {"main.py": ver_source(1)})
    out = fleet.deploy("ver", src)
    epoch = int(out.stdout)  # the epoch alone on stdout
    assert out.stdout == "%d\n" % epoch
    assert "%s  epoch %d deployed (no CURRENT yet)" % (a.addr, epoch) in out.stderr, out.stderr
    assert "CURRENT of ver is epoch %d on every worker (1)" % epoch in out.stderr
    out = fleet.deploy("ver", src)
    assert "%s  epoch %d reused (already held) (CURRENT %d)" % (a.addr, epoch, epoch) \
        in out.stderr, out.stderr
    # an --addr list with a worker that is not there: CURRENT moves nowhere, the rest hold it
    v2 = write_tree(str(tmp_path / "v2"), {"main.py": ver_source(2)})
    out = fleet.deploy("ver", v2, "--addr", "%s,127.0.0.1:1" % a.addr, check=1)
    assert out.stdout == ""
    assert "127.0.0.1:1  FAILED at DeployCode: unreachable: UNAVAILABLE" in out.stderr, out.stderr
    assert "moved nowhere: failed on 127.0.0.1:1" in out.stderr
    assert "run the same command again" in out.stderr
    assert current(a, "ver") == epoch

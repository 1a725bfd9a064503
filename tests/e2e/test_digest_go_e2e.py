"""The idempotency digest against a client no one here wrote: a Go program (Debian's
golang-go, grpc-go and golang/protobuf, stubs made here by protoc-gen-go) submits one
task several times with 16 labels and builder and writer options. Go encodes map
entries in its randomised map order, so the retries differ in their bytes; every one
must be a duplicate, never ALREADY_EXISTS.

The Go program is built offline in GOPATH mode against /usr/share/gocode (GO111MODULE
off); its build cache lives in the build directory, so later runs take a second."""
import json
import os
import shutil
import subprocess

from conftest import ROOT
from go_build import build_go


def build_go_retry(tmp):
    assert shutil.which("protoc-gen-go"), "protoc-gen-go is missing: scripts/deps.sh installs it"

    def stubs(gopath):
        out = os.path.join(gopath, "src", "workerpb")
        os.makedirs(out)
        subprocess.run(["protoc", "-I", os.path.join(ROOT, "proto"),
                        "--go_out=plugins=grpc,Mworker/v1/worker.proto=workerpb:" + out,
                        os.path.join(ROOT, "proto/worker/v1/worker.proto")], check=True)

    return build_go(tmp, "go_retry", stubs)


def test_go_client_retries_are_duplicates(worker_factory, tmp_path):
    binary = build_go_retry(str(tmp_path))
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    w = worker_factory("--output-dir", str(out_dir))
    w.deploy("echo")
    w.wait_serving()
    run = subprocess.run([binary, w.addr, "go-retry-1", "12"], capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0, run.stderr
    got = json.loads(run.stdout.strip().splitlines()[-1])
    assert got["errors"] == [], got
    assert got["first_duplicate"] is False and got["duplicates"] == 11, got
    # the client really sent the maps in different orders
    assert got["encodings"] > 1, got
    r = w.wait_terminal("go-retry-1")
    assert r.failure_message == "" and len(r.plugin_results) == 1, r
    assert os.path.exists(out_dir / "go-retry-1-out.jsonl")

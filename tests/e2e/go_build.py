"""Builds a Go test program offline (tests/e2e/<name>/main.go) in GOPATH mode against
Debian's /usr/share/gocode (GO111MODULE off, no proxy); its build cache lives in the
build directory, so later runs take a second. Used by the tests that check the worker
with a client no one here wrote (test_digest_go_e2e, test_reflection_e2e)."""
import os
import shutil
import subprocess

from conftest import BUILD, ROOT

GOPATH_SYSTEM = "/usr/share/gocode"


def build_go(tmp, name, prepare=None):
    """Copies tests/e2e/NAME into a GOPATH under tmp, runs prepare(gopath) (e.g. to make
    stubs) when given, builds it and returns the binary's path."""
    for tool in ("go", "protoc"):
        assert shutil.which(tool), "%s is missing: scripts/deps.sh installs it" % tool
    gopath = os.path.join(tmp, "gopath")
    os.makedirs(os.path.join(gopath, "src"), exist_ok=True)
    shutil.copytree(os.path.join(ROOT, "tests/e2e", name), os.path.join(gopath, "src", name))
    if prepare is not None:
        prepare(gopath)
    env = dict(os.environ, GOPATH=gopath + ":" + GOPATH_SYSTEM, GO111MODULE="off", GOFLAGS="",
               GOPROXY="off", GOCACHE=os.path.join(BUILD, "go-cache"), CGO_ENABLED="0")
    binary = os.path.join(tmp, name)
    out = subprocess.run(["go", "build", "-o", binary, name], env=env, capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    return binary

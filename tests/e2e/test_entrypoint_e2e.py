"""End-to-end entry points: only callables defined in the function's own code run
(not `main:shutil.rmtree` or `main:os.getenv`, which main.py merely imported), and the
audit lists can name a function's entry points ("fn:module:attr")."""

import json
import os

from conftest import pb

MAIN = ("import os, shutil\n"
        "from helper import helped\n"
        "def handler(args, ctx):\n    return 'handler'\n"
        "def danger(args, ctx):\n    return 'danger ran'\n"
        "def call_danger(args, ctx):\n    return ctx.call('', None, entrypoint='main:danger')\n")
HELPER = "def helped(args, ctx):\n    return 'helped'\n"


def deploy(w):
    w.deploy("fn", files={"main.py": MAIN, "helper.py": HELPER})


def submit(w, task_id, entrypoint, args=None):
    fn = pb.FunctionCallConfig(name="fn", entrypoint=entrypoint,
                               args=json.dumps(args).encode())
    w.stub.SubmitTask(pb.SubmitTaskRequest(task_id=task_id, function=fn), timeout=10)
    return w.wait_terminal(task_id)


def test_imported_library_callables_are_not_entry_points(worker, tmp_path):
    deploy(worker)
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep.txt").write_text("x")
    for i, ep in enumerate(("main:shutil.rmtree", "main:os.getenv", "main:os.system")):
        r = submit(worker, "lib-%d" % i, ep, str(victim))
        assert r.state == pb.TASK_STATE_FAILED, ep
        err = r.outputs[0].error
        assert err.type == "FunctionLoadError", (ep, err)
        assert "not defined in the function's own code" in err.message, err.message
    assert (victim / "keep.txt").exists()  # rmtree never ran
    for ep, want in (("main:handler", "handler"), ("main:helped", "helped"),
                     ("helper:helped", "helped")):
        r = submit(worker, "own-" + ep.replace(":", "-"), ep)
        assert r.state == pb.TASK_STATE_SUCCEEDED, (ep, r.failure_message)
        assert json.loads(r.outputs[0].value) == want


def test_audit_lists_name_entry_points(worker_factory):
    w = worker_factory("--audit-deny", "fn:main:danger")
    w.wait_serving()
    deploy(w)
    r = submit(w, "denied-ep", "main:danger")
    assert r.state == pb.TASK_STATE_FAILED
    assert r.failure_code == pb.FAILURE_CODE_ACTIVATION_FAILED
    assert "entry point main:danger" in r.failure_message and "audit_deny" in r.failure_message
    assert submit(w, "allowed-ep", "main:handler").state == pb.TASK_STATE_SUCCEEDED
    # a subcall to the denied entry point of the caller's own function is refused too
    r = submit(w, "denied-subcall", "main:call_danger")
    assert r.state == pb.TASK_STATE_FAILED
    err = r.outputs[0].error
    assert err.type == "SubcallError" and "FunctionDenied" in err.message, err
    w2 = worker_factory("--audit-allow", "fn:main:handler")
    w2.wait_serving()
    deploy(w2)
    assert submit(w2, "only-handler", "main:handler").state == pb.TASK_STATE_SUCCEEDED
    r = submit(w2, "not-allowed", "main:helped")
    assert r.failure_code == pb.FAILURE_CODE_ACTIVATION_FAILED
    assert "audit_allow" in r.failure_message


def test_deploy_checks_the_entry_point_is_the_codes_own(tmp_path):
    import subprocess
    from conftest import WORKERCTL
    src = tmp_path / "src"
    src.mkdir()
    (src / "main.py").write_text("from shutil import rmtree as handler\n")
    out = subprocess.run([WORKERCTL, "deploy", "--code-root", str(tmp_path / "code"), "fn",
                          str(src)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 1, out.stderr
    assert "not defined in the function's own code" in out.stderr
    assert not os.path.exists(tmp_path / "code" / "fn" / "1")

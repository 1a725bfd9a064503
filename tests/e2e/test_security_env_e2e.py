"""End-to-end: functions get a deliberate environment (executor_env), nothing else of
the worker's (issue 11, section 2)."""

import os
import subprocess

from conftest import WORKER, output_json, pb

ENVIRON = ("import os\n"
           "def handler(args, ctx):\n"
           "    return dict(os.environ)\n")


def test_functions_get_only_the_configured_environment(worker_factory):
    env = dict(os.environ)
    env.update({"WK_PASSED": "through", "WK_NOT_PASSED": "kept-away", "WK_UNSET_NAME": "x"})
    env.pop("WK_ABSENT", None)
    w = worker_factory("--executor-env", "WK_PASSED, WK_SET=a=b c, WK_ABSENT, LANG=C", env=env)
    w.wait_serving()
    w.deploy("environ", ENVIRON)
    w.submit("t-env", "environ", {})
    r = w.wait_terminal("t-env")
    assert r.state == pb.TASK_STATE_SUCCEEDED, r.failure_message
    seen = output_json(r)
    assert seen["WK_PASSED"] == "through"         # NAME: passed through
    assert seen["WK_SET"] == "a=b c"              # NAME=VALUE: set (the first '=' splits)
    assert seen["LANG"] == "C"                    # replaces the pool's C.UTF-8
    assert "WK_ABSENT" not in seen                # not in the worker's environment: left out
    assert "WK_NOT_PASSED" not in seen and "WK_UNSET_NAME" not in seen
    assert not [k for k in seen if k.startswith("WORKER_")]
    assert seen["PATH"] and seen["PYTHONPATH"]    # the executor's own are still there


def test_a_bad_executor_env_is_refused_at_start(tmp_path):
    code = tmp_path / "code"
    code.mkdir()
    for spec, words in (("1BAD", "not a variable name"),
                        ("PYTHONPATH=/tmp", "executor's own"),
                        ("A,,B", "empty item")):
        p = subprocess.run([WORKER, "--listen", "127.0.0.1:0", "--code-root", str(code),
                            "--executor-env", spec], capture_output=True, text=True, timeout=30)
        assert p.returncode == 2, (spec, p.returncode, p.stderr)
        assert "executor_env" in p.stderr and words in p.stderr, (spec, p.stderr)

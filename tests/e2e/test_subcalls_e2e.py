"""End-to-end subcalls to other functions: each subcall resolves its target in the code
store, a task pins each target's epoch at its first subcall, and a target that cannot
run (unknown function or epoch, refused by the audit lists) fails that subcall with a
worker.SubcallError the caller can catch, without running any other code."""

import json
import os
import time

from conftest import pb

# Every function says who ran: a subcall that ran the caller's code shows at once.
SQUARE = ("def handler(args, ctx):\n"
          "    return {'fn': ctx.function, 'epoch': ctx.epoch, 'value': args * args}\n")
PARENT = ("def handler(args, ctx):\n"
          "    one = ctx.call('square', 7)\n"
          "    many = ctx.map('square', [1, 2, 3])\n"
          "    return {'fn': ctx.function, 'one': one, 'many': many}\n")
CHAIN_A = ("def handler(args, ctx):\n"
           "    return {'fn': ctx.function, 'epoch': ctx.epoch, 'child': ctx.call('chain_b', args)}\n")
CHAIN_B = ("def handler(args, ctx):\n"
           "    if args == 'self':\n"
           "        return {'fn': ctx.function, 'self': True}\n"
           "    mine = ctx.call('', 'self')\n"
           "    return {'fn': ctx.function, 'epoch': ctx.epoch, 'self': mine,\n"
           "            'child': ctx.call('chain_c', args)}\n")
CHAIN_C = ("def handler(args, ctx):\n"
           "    return {'fn': ctx.function, 'epoch': ctx.epoch, 'args': args}\n")
CATCHER = ("import worker\n"
           "def handler(args, ctx):\n"
           "    try:\n"
           "        value = ctx.call(args, 1)\n"
           "    except worker.SubcallError as e:\n"
           "        return {'caught': True, 'type': e.type, 'message': e.message}\n"
           "    return {'caught': False, 'value': value}\n")
# Calls `version` once, waits for a file the test writes after deploying a new epoch of
# `version`, then calls it again: both subcalls must see the same epoch.
PINNER = ("import os, time\n"
          "def handler(args, ctx):\n"
          "    first = ctx.call('version', None)\n"
          "    open(args['ready'], 'w').close()\n"
          "    deadline = time.time() + 20\n"
          "    while not os.path.exists(args['go']) and time.time() < deadline:\n"
          "        time.sleep(0.02)\n"
          "    second = ctx.map('version', [None, None])\n"
          "    return {'first': first, 'second': second}\n")
VERSION = "def handler(args, ctx):\n    return {'version': %d, 'epoch': ctx.epoch}\n"


def value(result, i=0):
    out = result.outputs[i]
    assert out.WhichOneof("outcome") == "value", out.error
    return json.loads(out.value)


def run(w, task_id, fn, args, timeout=60):
    w.submit(task_id, fn, args)
    r = w.wait_terminal(task_id, timeout=timeout)
    assert r.state == pb.TASK_STATE_SUCCEEDED, (r.failure_message, list(r.outputs))
    return value(r)


def test_call_and_map_run_the_target_function(worker):
    worker.deploy("square", SQUARE)
    worker.deploy("parent", PARENT)
    v = run(worker, "cross", "parent", None)
    assert v["fn"] == "parent"
    assert v["one"] == {"fn": "square", "epoch": 1, "value": 49}
    assert [m["value"] for m in v["many"]] == [1, 4, 9]
    assert {m["fn"] for m in v["many"]} == {"square"}


def test_nested_a_b_c_each_runs_its_own_code_and_empty_name_is_the_caller(worker):
    worker.deploy("chain_c", CHAIN_C + "# first\n")
    worker.deploy("chain_c", CHAIN_C)  # epoch 2: C's CURRENT, not A's epoch, is used
    worker.deploy("chain_a", CHAIN_A)
    worker.deploy("chain_b", CHAIN_B)
    v = run(worker, "abc", "chain_a", "x")
    assert v["fn"] == "chain_a" and v["epoch"] == 1
    b = v["child"]
    assert b["fn"] == "chain_b" and b["epoch"] == 1
    assert b["self"] == {"fn": "chain_b", "self": True}  # fn="" in B means B, not the task's A
    assert b["child"] == {"fn": "chain_c", "epoch": 2, "args": "x"}


def test_unknown_function_fails_the_subcall_with_a_catchable_error(worker):
    worker.deploy("catcher", CATCHER)
    v = run(worker, "unknown-fn", "catcher", "nosuchfn")
    assert v["caught"] is True, v
    assert v["type"] == "FunctionNotFound"
    assert "nosuchfn" in v["message"] and "not deployed" in v["message"]
    v = run(worker, "bad-name", "catcher", "../catcher")
    assert v["caught"] is True and v["type"] == "FunctionNotFound", v


def test_unknown_epoch_fails_the_subcall(worker):
    worker.deploy("catcher", CATCHER)
    worker.deploy("square", SQUARE)
    with open(os.path.join(worker.code_root, "square", "CURRENT"), "w") as f:
        f.write("9\n")  # names an epoch that was never published
    v = run(worker, "unknown-epoch", "catcher", "square")
    assert v["caught"] is True and v["type"] == "FunctionNotFound", v
    assert "epoch 9" in v["message"]


def test_uncaught_subcall_error_fails_the_call_and_names_the_target(worker):
    worker.deploy("parent", "def handler(args, ctx):\n    return ctx.call('ghost', 1)\n")
    worker.submit("uncaught", "parent", None)
    r = worker.wait_terminal("uncaught")
    assert r.state == pb.TASK_STATE_FAILED
    assert r.outputs[0].error.type == "SubcallError"
    assert "FunctionNotFound" in r.outputs[0].error.message
    assert "ghost" in r.outputs[0].error.message


def test_denied_target_is_refused_and_never_runs(worker_factory, tmp_path):
    w = worker_factory("--audit-deny", "secret*")
    w.wait_serving()
    marker = tmp_path / "secret-ran"
    w.deploy("secret", "def handler(args, ctx):\n    open(%r, 'w').close()\n    return 'ran'\n"
             % str(marker))
    w.deploy("catcher", CATCHER)
    v = run(w, "denied", "catcher", "secret")
    assert v["caught"] is True and v["type"] == "FunctionDenied", v
    assert "audit_deny" in v["message"] and "secret" in v["message"]
    assert not marker.exists()
    w2 = worker_factory("--audit-allow", "catcher")
    w2.wait_serving()
    w2.deploy("secret", "def handler(args, ctx):\n    open(%r, 'w').close()\n    return 'ran'\n"
              % str(marker))
    w2.deploy("catcher", CATCHER)
    v = run(w2, "not-allowed", "catcher", "secret")
    assert v["caught"] is True and v["type"] == "FunctionDenied", v
    assert "audit_allow" in v["message"]
    assert not marker.exists()


def test_a_deploy_during_the_task_keeps_the_pinned_epoch_of_the_target(worker, tmp_path):
    worker.deploy("version", VERSION % 1)
    worker.deploy("pinner", PINNER)
    ready, go = str(tmp_path / "ready"), str(tmp_path / "go")
    worker.submit("pinned", "pinner", {"ready": ready, "go": go})
    deadline = time.time() + 20
    while not os.path.exists(ready) and time.time() < deadline:
        time.sleep(0.02)
    assert os.path.exists(ready), "the task never made its first subcall"
    worker.deploy("version", VERSION % 2)
    # a new task sees the new epoch at once
    assert run(worker, "fresh", "version", None) == {"version": 2, "epoch": 2}
    open(go, "w").close()
    r = worker.wait_terminal("pinned", timeout=30)
    assert r.state == pb.TASK_STATE_SUCCEEDED, r.failure_message
    v = value(r)
    assert v["first"] == {"version": 1, "epoch": 1}
    assert v["second"] == [{"version": 1, "epoch": 1}] * 2

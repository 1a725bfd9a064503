"""AuditGate, the audit line, usage records and the W3C traceparent, through the real
worker."""

import json

from conftest import pb
from etcd_fixture import wait_for

TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def test_audit_gate_usage_sink_and_traceparent(worker_factory, tmp_path):
    usage = tmp_path / "usage.jsonl"
    w = worker_factory("--audit-allow", "echo,trace*", "--audit-deny", "tracebad",
                       "--usage-log", str(usage))
    w.wait_serving()
    w.deploy("echo")
    w.deploy("tracer", "def handler(args, ctx):\n    return ctx.traceparent\n")
    w.deploy("tracebad", "def handler(args, ctx):\n    return 1\n")
    w.deploy("other", "def handler(args, ctx):\n    return 1\n")

    # allowed, with a traceparent: it reaches ctx, the audit line and task_finished
    fn = pb.FunctionCallConfig(name="tracer", args=b"{}")
    w.stub.SubmitTask(pb.SubmitTaskRequest(task_id="tp", function=fn), timeout=10,
                      metadata=[("traceparent", TRACEPARENT)])
    r = w.wait_terminal("tp")
    assert r.state == pb.TASK_STATE_SUCCEEDED and json.loads(r.outputs[0].value) == TRACEPARENT
    audit = [e for e in w.events("audit") if e["task_id"] == "tp"]
    assert audit and audit[0]["traceparent"] == TRACEPARENT and audit[0]["function"] == "tracer"
    finished = wait_for(lambda: [e for e in w.events("task_finished") if e["task_id"] == "tp"])
    assert finished[0]["traceparent"] == TRACEPARENT

    # denied (deny wins over the allow pattern) and not allowed: ACTIVATION_FAILED with the reason
    w.submit("denied", "tracebad", {})
    r = w.wait_terminal("denied")
    assert r.failure_code == pb.FAILURE_CODE_ACTIVATION_FAILED and "audit_deny" in r.failure_message
    w.submit("not-allowed", "other", {})
    r = w.wait_terminal("not-allowed")
    assert r.failure_code == pb.FAILURE_CODE_ACTIVATION_FAILED and "audit_allow" in r.failure_message

    # one usage record per task in the sink, with the per-phase figures
    w.submit("u1", "echo", {"x": 1})
    w.wait_terminal("u1")

    def records():
        if not usage.exists():
            return None
        lines = [json.loads(l) for l in usage.read_text().splitlines()]
        return lines if len(lines) >= 4 else None

    lines = wait_for(records, timeout=10)
    assert lines is not None
    by_id = {l["task_id"]: l for l in lines}
    assert set(by_id) == {"tp", "denied", "not-allowed", "u1"}
    u = by_id["u1"]
    assert u["state"] == "SUCCEEDED" and u["calls"] == 1 and u["bytes_in"] > 0 and u["bytes_out"] > 0
    assert u["deployment"] == "block" and u["service"] == "worker"
    assert u["wall_ms"] >= u["calls_ms"] >= 0 and "cpu_us" in u


def test_scratch_directory_is_bounded_and_removed(worker_factory):
    import os
    w = worker_factory("--io-scope-max-mb", "1")
    w.wait_serving()
    w.deploy("filler", "import os, time\n"
                       "def handler(args, ctx):\n"
                       "    with open(os.path.join(ctx.scratch_dir, 'big'), 'wb') as f:\n"
                       "        f.write(b'x' * (args['mb'] << 20))\n"
                       "        f.flush(); os.fsync(f.fileno())\n"
                       "    time.sleep(args.get('sleep', 0))\n"
                       "    return ctx.scratch_dir\n")
    w.submit("small", "filler", {"mb": 0})
    r = w.wait_terminal("small")
    assert r.state == pb.TASK_STATE_SUCCEEDED
    scratch = json.loads(r.outputs[0].value)
    assert wait_for(lambda: not os.path.exists(scratch), timeout=5), "scratch dir left behind"
    w.submit("big", "filler", {"mb": 3, "sleep": 5})
    r = w.wait_terminal("big", timeout=20)
    assert r.state == pb.TASK_STATE_FAILED and r.failure_code == pb.FAILURE_CODE_CALL_FAILED
    assert "io_scope_max_mb" in r.failure_message

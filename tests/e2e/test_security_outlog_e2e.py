"""Attacks of issue 11 §4 (docs/security.md, "Executors cannot write into the worker's
log"): a function writes straight to file descriptors 1 and 2 — a forged log record,
lines of 50 MB, prints without end — and the worker's log keeps its shape, its memory
stays bounded and other tasks are served. And §2's masking beyond --print-config:
connection errors never show a password."""

import json
import os
import re
import time
import urllib.request

from conftest import output_json, pb, start_error
from etcd_fixture import free_port

FORGED = {"ts": "2026-12-03T10:00:00.000Z", "level": "info", "event": "task_finished",
          "task_id": "forged-victim", "state": "SUCCEEDED"}

FORGER = ("import json, os, subprocess\n"
          "def handler(args, ctx):\n"
          "    line = json.dumps(args['forged']).encode()\n"
          "    os.write(2, b'\\n' + line + b'\\n')\n"
          "    os.write(1, line + b'\\n')\n"
          "    subprocess.run(['/bin/sh', '-c', 'echo \"$0\" >&2', line.decode()])\n"
          "    os.write(2, b'bad utf-8 \\xff\\xfe and an escape \\x1b[31m\\n')\n"
          "    return 'done'\n")

FLOODER = ("import os\n"
           "def handler(args, ctx):\n"
           "    chunk = b'x' * (1 << 20)\n"
           "    for _ in range(args['lines']):\n"
           "        for _ in range(args['mb']):\n"
           "            os.write(2, chunk)\n"
           "        os.write(2, b'\\n')\n"
           "    return 'flooded'\n")

ENDLESS = ("import os\n"
           "def handler(args, ctx):\n"
           "    line = ('spam ' * 20 + '\\n').encode()\n"
           "    while True:\n"
           "        os.write(1, line)\n")


def vm_kb(pid, field):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise AssertionError(field)


def test_a_function_cannot_forge_a_log_record(worker_factory):
    w = worker_factory()
    w.wait_serving()
    w.deploy("forger", FORGER)
    w.submit("t-forger", "forger", {"forged": FORGED})
    r = w.wait_terminal("t-forger")
    assert r.state == pb.TASK_STATE_SUCCEEDED, r.failure_message
    deadline = time.time() + 10
    while time.time() < deadline and len([o for o in w.events("executor_output")
                                           if "forged-victim" in o.get("line", "")]) < 3:
        time.sleep(0.05)
    with w.lock:
        logs = list(w.logs)
    # nothing the function wrote became a record of its own
    assert not [rec for rec in logs if rec.get("task_id") == "forged-victim"], logs
    assert not [rec for rec in logs if rec.get("event") == "raw"], logs
    # it is all there, as the value of a field of the worker's records
    outs = [rec for rec in logs if rec.get("event") == "executor_output"]
    forged = [o for o in outs if "forged-victim" in o["line"]]
    assert sorted(o["stream"] for o in forged) == ["stderr", "stderr", "stdout"], outs
    for o in forged:
        assert json.loads(o["line"]) == FORGED
        assert o["task_id"] == "t-forger" and o["call_index"] == 0 and o["call_id"] > 0, o
        assert o["executor"] > 0 and o["pid"] > 0, o
    bad = [o for o in outs if o["line"].startswith("bad utf-8")]
    assert bad and bad[0]["line"] == "bad utf-8 \ufffd\ufffd and an escape \x1b[31m", bad


def test_floods_are_cut_dropped_and_counted_while_others_are_served(worker_factory):
    w = worker_factory("--executors", "3", "--executors-max", "3", "--metrics-addr",
                       "127.0.0.1:0", "--cancel-grace-ms", "300")
    w.wait_serving()
    w.deploy("flooder", FLOODER)
    w.deploy("endless", ENDLESS)
    w.deploy("echo")
    rss_start = vm_kb(w.proc.pid, "VmRSS")
    # four lines of 50 MB on stderr, and a loop that prints until it is cancelled
    w.submit("t-flood", "flooder", {"lines": 4, "mb": 50})
    w.submit("t-endless", "endless", {})
    time.sleep(0.5)
    served = 0
    deadline = time.time() + 4
    while time.time() < deadline:
        tid = "t-echo-%d" % served
        w.submit(tid, "echo", {"n": served})
        r = w.wait_terminal(tid, timeout=20)
        assert r.state == pb.TASK_STATE_SUCCEEDED, r.failure_message
        assert output_json(r)["echo"] == {"n": served}
        served += 1
    r = w.wait_terminal("t-flood", timeout=120)
    assert r.state == pb.TASK_STATE_SUCCEEDED, r.failure_message
    w.stub.CancelTask(pb.CancelTaskRequest(task_id="t-endless"), timeout=10)
    r = w.wait_terminal("t-endless")
    assert r.state == pb.TASK_STATE_CANCELLED, r.state
    hwm = vm_kb(w.proc.pid, "VmHWM")
    assert served >= 5, served
    # 200 MB went through the worker: it kept a line's worth per stream, not the lines
    assert hwm < rss_start + 64 * 1024, (rss_start, hwm)

    with w.lock:
        logs = list(w.logs)
    assert max(len(json.dumps(rec)) for rec in logs) < 20000
    cut = [rec for rec in logs if rec.get("event") == "executor_output" and rec.get("truncated")]
    assert len(cut) == 4 and all(rec["task_id"] == "t-flood" for rec in cut), cut[:1]
    assert all(rec["line"].endswith("[line truncated at 16384 bytes]") for rec in cut)
    spam = [rec for rec in logs if rec.get("event") == "executor_output"
            and rec.get("task_id") == "t-endless"]
    drops = [rec for rec in logs if rec.get("event") == "executor_output_dropped"]
    assert spam and drops, (len(spam), drops)
    assert sum(d["dropped_bytes"] for d in drops) > 1000000, drops
    assert re.match(r"dropped \d+ bytes \(\d+ lines\)", drops[0]["msg"]), drops[0]
    # one drop record a second per executor at most (and one at its exit), not one per line
    assert len(drops) < 3 * 30, len(drops)
    # about 200 lines a second are logged (a second's burst, then the rate), not millions
    assert len(spam) < 200 * 30, len(spam)

    with urllib.request.urlopen("http://127.0.0.1:%d/metrics"
                                % w.events("metrics_listening")[0]["port"], timeout=5) as resp:
        text = resp.read().decode()
    rate = re.search(r'^worker_executor_output_dropped_bytes_total\{reason="rate"\} (\S+)$', text,
                     re.M)
    cutb = re.search(r'^worker_executor_output_dropped_bytes_total\{reason="truncated"\} (\S+)$',
                     text, re.M)
    assert rate and float(rate.group(1)) > 1000000, text
    assert cutb and float(cutb.group(1)) >= 4 * (50 * (1 << 20) - 16384), text


def test_output_after_the_executor_died_does_not_hold_the_worker(worker_factory):
    """A descendant keeps the executor's stdout open after the executor is gone: the
    worker reads what is there, closes its end and stops in time."""
    w = worker_factory("--executors", "1")
    w.wait_serving()
    w.deploy("leaver", "import os, subprocess\n"
             "def handler(args, ctx):\n"
             "    subprocess.Popen(['/bin/sh', '-c', 'while :; do echo left; sleep 0.01; done'],\n"
             "                     start_new_session=True)\n"
             "    os._exit(3)\n")
    w.submit("t-leaver", "leaver", {})
    r = w.wait_terminal("t-leaver")
    assert r.state == pb.TASK_STATE_FAILED
    t = time.time()
    assert w.stop() == 0
    assert time.time() - t < 15


# ---- issue 11 §2: secrets masked in errors and logs, not only in --print-config ----

def test_connection_errors_never_show_a_password(tmp_path):
    """Writer connection strings with a password the backend cannot use: the start-up
    error names the backend and why, never the password (libpq quotes the token it
    cannot parse; the redis writer used to quote the whole address)."""
    dead = free_port()
    cases = [
        ("--redis-addr", "redis://:Hunter2-redis@127.0.0.1:%d/0" % dead, "Hunter2-redis"),
        ("--redis-addr", "redis://Hunter2-bare@127.0.0.1:%d" % dead, "Hunter2-bare"),
        ("--redis-addr", "rediss://app:Hunter2-tls@127.0.0.1:%d" % dead, "Hunter2-tls"),
        ("--redis-addr", "redis://:Hunter2-port@127.0.0.1:bad", "Hunter2-port"),
        ("--postgres-dsn", "postgresql://app:Hunter2%%zzpg@127.0.0.1:%d/db" % dead, "Hunter2"),
        ("--postgres-dsn", "host=127.0.0.1 port=%d Hunter2-kv password=x" % dead, "Hunter2-kv"),
        ("--postgres-dsn", "postgresql://app:Hunter2-q@127.0.0.1:%d/db?Hunter2-q=1" % dead,
         "Hunter2-q"),
    ]
    for flag, value, secret in cases:
        err = start_error(tmp_path, flag, value)
        assert "writer plugin" in err, (value, err)
        assert secret not in err, (value, err)

"""Incident replay (README "Incident replay"): a real worker records its core's inputs
(core_journal_dir) and, in this test mode, the line of every decision it took
(core_journal_decisions); `workerctl replay` feeds the inputs to a fresh WorkerCore and
must print exactly the decisions the worker took, byte for byte: a lease that lapsed
(a slot reserved and never submitted), a watcher that left (OWNER_LOST after the grace),
a task that timed out, a cancel, a failing and a succeeding task. The simulation then
starts from the same record (sim_replay --record) and goes on with seeded random events.
"""

import glob
import json
import os
import struct
import subprocess
import time

import pytest
from conftest import BUILD, WORKERCTL, pb

SIM_REPLAY = os.path.join(BUILD, "tests", "sim", "sim_replay")


def replay(*args, check=None):
    p = subprocess.run([WORKERCTL, "replay"] + list(args), capture_output=True, text=True,
                       timeout=120)
    if check is not None:
        assert p.returncode == check, (p.returncode, p.stdout[-3000:], p.stderr[-3000:])
    return p


def wait_state(w, task_id, code, timeout=20):
    r = w.wait_terminal(task_id, timeout=timeout)
    assert r.failure_code == code, (task_id, r.state, r.failure_code, r.failure_message)
    return r


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """One recorded run: the journal's files, after the worker stopped."""
    from conftest import Worker, FUNCTIONS
    tmp = tmp_path_factory.mktemp("journal")
    jdir = str(tmp / "journal")
    w = Worker(str(tmp / "w"), extra_args=[
        "--core-journal-dir", jdir, "--core-journal-decisions", "true",
        "--watch-grace-ms", "300", "--tick-ms", "50", "--task-slots", "8"])
    try:
        w.wait_serving()
        for name in ("echo", "boom", "sleepy"):
            w.deploy(name, FUNCTIONS[name])
        # a slot reserved and never submitted: its lease lapses
        slot = w.stub.RequestTaskSlot(pb.RequestTaskSlotRequest(task_id="lease-1", ttl_ms=200))
        assert slot.slot_id
        # a task whose only watcher leaves: OWNER_LOST after the grace
        w.submit("owner-1", "sleepy", {"seconds": 30})
        stream = w.stub.WatchTasks(pb.WatchTasksRequest(task_ids=["owner-1"]))
        assert next(stream).kind == pb.TaskEvent.KIND_SNAPSHOT
        stream.cancel()
        # a task that runs past its timeout
        w.submit("timeout-1", "sleepy", {"seconds": 30}, timeout_ms=400)
        # one that succeeds, one that fails, one cancelled
        w.submit("ok-1", "echo", {"x": 1})
        w.submit("boom-1", "boom", {"why": "test"})
        w.submit("cancel-1", "sleepy", {"seconds": 30})
        time.sleep(0.2)
        w.stub.CancelTask(pb.CancelTaskRequest(task_id="cancel-1", reason="operator said so"))
        wait_state(w, "owner-1", pb.FAILURE_CODE_OWNER_LOST)
        wait_state(w, "timeout-1", pb.FAILURE_CODE_TASK_TIMEOUT)
        assert w.wait_terminal("ok-1").state == pb.TASK_STATE_SUCCEEDED
        wait_state(w, "boom-1", pb.FAILURE_CODE_CALL_FAILED)
        # the reservation lapsed long ago (200 ms): submitting on it is refused
        time.sleep(0.3)
        with pytest.raises(Exception):
            w.submit("lease-1", "echo", {}, slot_id=slot.slot_id)
    finally:
        rc = w.stop()
    assert rc == 0, w.logs[-20:]
    files = sorted(glob.glob(os.path.join(jdir, "*.wkj")))
    assert files, os.listdir(jdir)
    return tmp, files


def test_replay_reproduces_every_decision_byte_for_byte(recorded):
    _, files = recorded
    p = replay("--check", *files, check=0)
    assert " 0 differ, 0 missing" in p.stderr, p.stderr
    replayed = replay("--all", *files, check=0).stdout
    worker_took = replay("--all", "--recorded", *files, check=0).stdout
    assert replayed == worker_took
    assert replayed.count("\n") > 30


def test_replay_shows_the_incidents(recorded):
    _, files = recorded
    out = replay(*files, check=0).stdout
    # the lapsed lease names the task that held the slot
    lapse = [l for l in out.splitlines() if " slot_lease_expired " in l]
    assert any("(task=lease-1) -> OK" in l for l in lapse), lapse
    # the submit on it afterwards: SLOT_UNCERTAIN
    assert any(" submit task=lease-1 " in l and "-> SLOT_UNCERTAIN" in l
               for l in out.splitlines()), out
    owner = [l for l in out.splitlines() if "FAILED/OWNER_LOST" in l]
    assert len(owner) == 1 and " watch_grace_expired task=owner-1 " in owner[0], owner
    timeout = [l for l in out.splitlines() if "FAILED/TASK_TIMEOUT" in l]
    assert len(timeout) == 1 and " task_timed_out task=timeout-1 " in timeout[0], timeout
    assert "| CANCEL_TASK | CONVERGE FAILED/TASK_TIMEOUT" in timeout[0]
    assert any(" abort task=cancel-1 code=CANCELLED" in l and "CONVERGE CANCELLED/CANCELLED" in l
               for l in out.splitlines()), out
    assert any("phase=WRITER ok" in l and "CONVERGE SUCCEEDED" in l and "task=ok-1" in l
               for l in out.splitlines())
    # the periodic purges that purged nothing are left out unless --all
    assert " purge " not in out or all("purged=0" not in l for l in out.splitlines())
    assert "purged=0" in replay("--all", *files, check=0).stdout


def test_replay_of_one_task(recorded):
    _, files = recorded
    out = replay("--task", "timeout-1", *files, check=0).stdout.splitlines()
    kinds = [l.split()[3] for l in out]
    assert kinds[:3] == ["submit", "activation_prepared", "phase_finished"], out
    assert kinds[-1] == "task_timed_out", out
    assert all("timeout-1" in l for l in out)
    lease = replay("--task", "lease-1", *files, check=0).stdout.splitlines()
    assert [l.split()[3] for l in lease] == ["request_slot", "slot_lease_expired", "submit"], lease


def test_replay_json(recorded):
    _, files = recorded
    lines = replay("--json", "--task", "owner-1", *files, check=0).stdout.splitlines()
    objs = [json.loads(l) for l in lines]
    assert objs[0]["input"]["kind"] == "submit" and objs[0]["err"] == "OK"
    assert objs[0]["cmds"][0]["kind"] == "PREPARE_ACTIVATION"
    last = objs[-1]
    assert last["input"]["kind"] == "watch_grace_expired"
    assert [c["kind"] for c in last["cmds"]] == ["CANCEL_TASK", "CONVERGE"]
    assert last["cmds"][1]["failure_code"] == "OWNER_LOST"
    # every input that carries a clock shows it; call progress is the one input the core
    # takes without `now` (its counters change no timer), so it has none to show
    clocked = [o for o in objs if o["input"]["kind"] != "call_progress"]
    assert clocked and all("time" in o and o["time"].endswith("Z") for o in clocked), objs
    assert all("time" not in o for o in objs if o["input"]["kind"] == "call_progress")


def payload_byte_near(data, at):
    """The offset of a payload byte of the record that holds (or follows) offset `at`:
    flipping it breaks that record's CRC, and the file cut there ends inside that record.
    (A byte flipped blindly at `at` could land in a record's length and read as a
    truncated record instead.)"""
    pos = 16  # the file header
    while pos + 8 <= len(data):
        length = struct.unpack_from("<I", data, pos)[0]
        start, end = pos + 8, pos + 8 + length
        assert end <= len(data), "a recorded file is whole"
        if end > at and length > 0:
            return max(start, min(at, end - 1))
        pos = end
    raise AssertionError("no record at or after offset %d" % at)


def test_truncated_tail_and_corruption_stop_cleanly(recorded):
    tmp, files = recorded
    full = replay("--all", *files, check=0).stdout.splitlines()
    last = files[-1]
    data = open(last, "rb").read()
    cut = str(tmp / "cut.wkj")
    with open(cut, "wb") as f:
        # the writer died in the middle of a record (a blind cut at 3/5 of the file could
        # land on a record boundary, which is a clean end)
        f.write(data[:payload_byte_near(data, len(data) * 3 // 5)])
    p = replay("--all", *(files[:-1] + [cut]), check=0)
    assert "truncated record" in p.stderr and "stopping there" in p.stderr, p.stderr
    got = p.stdout.splitlines()
    assert 0 < len(got) < len(full) and got == full[:len(got)]
    bad = str(tmp / "bad.wkj")
    flipped = bytearray(data)
    flipped[payload_byte_near(data, len(data) // 2)] ^= 0xFF
    with open(bad, "wb") as f:
        f.write(bytes(flipped))
    p = replay("--all", *(files[:-1] + [bad]), check=0)
    assert "fails its CRC" in p.stderr, p.stderr
    got = p.stdout.splitlines()
    assert got == full[:len(got)] and len(got) < len(full)
    # --check over a cut record: fewer decisions, none differs
    p = replay("--check", *(files[:-1] + [cut]), check=0)
    assert " 0 differ" in p.stderr
    # not a journal at all
    junk = str(tmp / "junk.wkj")
    with open(junk, "wb") as f:
        f.write(b"hello, world\n" * 4)
    p = replay(junk, check=1)
    assert "not a core journal" in p.stderr


def test_simulation_starts_from_the_record(recorded):
    _, files = recorded
    p = subprocess.run([SIM_REPLAY, "--seed", "11", "--steps", "3000", "--record"] + files,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, (p.stdout[-2000:], p.stderr[-2000:])
    assert "loaded" in p.stdout and "inputs from the record" in p.stdout, p.stdout


def test_rotation_keeps_the_bound_and_says_where_the_record_starts(worker_factory, tmp_path):
    jdir = str(tmp_path / "j")
    w = worker_factory("--core-journal-dir", jdir, "--core-journal-max-bytes", "64KiB",
                       "--core-journal-files", "2", "--tick-ms", "10")
    w.wait_serving()
    w.deploy("echo")
    for i in range(150):  # one at a time: 16 slots
        w.submit("rot-%d" % i, "echo", {"i": i})
        w.wait_terminal("rot-%d" % i)
    assert w.stop() == 0
    files = sorted(glob.glob(os.path.join(jdir, "*.wkj")))
    assert len(files) == 2, files
    assert sum(os.path.getsize(f) for f in files) <= 64 * 1024 + 8 * 1024
    p = replay(*files, check=0)
    assert "not at the worker's start" in p.stderr, p.stderr

"""Shutdown within drain_timeout_ms + shutdown_grace_ms: SIGTERM while a call that never
ends (it ignores SIGTERM and sleeps forever) runs. The worker first waits out the drain,
then exits within the configured grace, and the call's process is gone with it. Bounds
are generous (the machine is shared); what is asserted is the order and an upper bound."""

import os
import signal
import time

from conftest import pb
from etcd_fixture import Etcd, wait_for

STUBBORN = ("import os, signal, time\n"
            "def handler(args, ctx):\n"
            "    signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
            "    with open(args['pid_file'], 'w') as f:\n"
            "        f.write(str(os.getpid()))\n"
            "    while True:\n"
            "        time.sleep(3600)\n")

DRAIN_MS = 1500
GRACE_MS = 1000
MARGIN_S = 3.0


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open("/proc/%d/stat" % pid) as f:  # a zombie is not running
        return f.read().rsplit(")", 1)[1].split()[0] != "Z"


def test_exit_within_drain_plus_grace_with_a_call_that_never_ends(worker_factory, tmp_path):
    w = worker_factory("--drain-timeout-ms", str(DRAIN_MS), "--shutdown-grace-ms", str(GRACE_MS),
                       executors=1)
    w.wait_serving()
    w.deploy("stubborn", STUBBORN)
    pid_file = str(tmp_path / "pid")
    w.submit("forever-1", "stubborn", {"pid_file": pid_file})
    assert wait_for(lambda: os.path.exists(pid_file) and open(pid_file).read(), timeout=20)
    pid = int(open(pid_file).read())
    assert alive(pid)

    t0 = time.monotonic()
    w.proc.send_signal(signal.SIGTERM)
    rc = w.proc.wait(DRAIN_MS / 1000 + GRACE_MS / 1000 + 30)
    elapsed = time.monotonic() - t0
    w.stop()  # closes the channel, joins the log reader
    print("exited %.2f s after SIGTERM (drain %d ms, grace %d ms)" % (elapsed, DRAIN_MS, GRACE_MS))
    assert rc == 0, w.logs[-20:]
    # it waited for the drain first ...
    assert elapsed >= DRAIN_MS / 1000 - 0.05, elapsed
    assert w.events("drain_incomplete"), w.logs[-20:]
    # ... then exited within the grace (and a margin for a loaded machine)
    assert elapsed < (DRAIN_MS + GRACE_MS) / 1000 + MARGIN_S, elapsed
    assert not w.events("shutdown_grace_exceeded")
    assert w.events("worker_stopped")
    assert wait_for(lambda: not alive(pid), timeout=5), "the never-ending call outlived the worker"


def test_shutdown_grace_is_a_setting(tmp_path):
    import subprocess
    from conftest import WORKER
    out = subprocess.run([WORKER, "--print-config", "--json", "--shutdown-grace-ms", "7000",
                          "--code-root", str(tmp_path)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "shutdown_grace_ms" in out.stdout and "7000" in out.stdout, out.stdout


def test_a_stuck_step_after_the_drain_ends_the_process_at_the_grace(worker_factory):
    """etcd frozen (SIGSTOP) after the worker registered: deregistering would wait out its
    own 2 s budget; the grace (300 ms here) ends the process first, exit status 1."""
    etcd = Etcd()
    try:
        w = worker_factory("--etcd-endpoints", etcd.url, "--heartbeat-interval-ms", "200",
                           "--drain-timeout-ms", "1000", "--shutdown-grace-ms", "300", executors=1)
        w.wait_serving()
        assert wait_for(lambda: etcd.range_prefix("/workers/"), timeout=15)
        etcd.proc.send_signal(signal.SIGSTOP)
        t0 = time.monotonic()
        w.proc.send_signal(signal.SIGTERM)
        rc = w.proc.wait(30)
        elapsed = time.monotonic() - t0
        w.stop()
        print("exited %.2f s after SIGTERM, status %d" % (elapsed, rc))
        assert rc == 1, w.logs[-20:]
        assert w.events("shutdown_grace_exceeded"), w.logs[-20:]
        assert elapsed < (1000 + 300) / 1000 + MARGIN_S, elapsed
    finally:
        if etcd.proc.poll() is None:
            etcd.proc.send_signal(signal.SIGCONT)
        etcd.stop()

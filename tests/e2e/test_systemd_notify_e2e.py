"""systemd's Type=notify protocol, with the test acting as the service manager: an
AF_UNIX datagram socket named by NOTIFY_SOCKET (and WATCHDOG_USEC), as systemd passes
them. Each datagram's sender is read from its credentials (SO_PASSCRED), so the test
also checks what NotifyAccess=main needs: every message comes from the worker's own pid.

- READY=1 comes once, and a gRPC health check made right after it finds SERVING;
- WATCHDOG=1 comes every half of WATCHDOG_USEC, from the event loop: while the loop's
  thread alone is stopped (ptrace-interrupted: the process's other threads go on), none
  come, and they resume when it goes on; also none while the whole process is stopped;
- libsystemd's WATCHDOG_PID rule: pings only when it is unset or names the worker;
- SIGTERM: STOPPING=1 before the process exits;
- bundle_worker notifies too;
- the unit file deploy/systemd/worker.service passes `systemd-analyze verify`, and its
  TimeoutStopSec covers drain_timeout_ms + shutdown_grace_ms at their defaults."""

import array
import ctypes
import json
import os
import re
import signal
import socket
import struct
import subprocess
import threading
import time

import grpc

from conftest import BUILD, ROOT, WORKER, health_pb2

BUNDLE = os.path.join(BUILD, "bundle_worker")
UNIT = os.path.join(ROOT, "deploy", "systemd", "worker.service")
SYSTEMD_ANALYZE = "/usr/bin/systemd-analyze"
WATCHDOG_USEC = 1000000  # pings every 0.5 s


class NotifySocket(object):
    """The service manager's end: records (monotonic time, sender pid, message)."""

    def __init__(self, path):
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(path)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
        self.sock.settimeout(0.2)
        self.messages = []
        self.lock = threading.Lock()
        self.closed = False
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        creds_len = struct.calcsize("3i")
        while not self.closed:
            try:
                data, anc, _, _ = self.sock.recvmsg(4096, socket.CMSG_SPACE(creds_len))
            except socket.timeout:
                continue
            except OSError:
                return
            pid = None
            for level, kind, payload in anc:
                if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS:
                    pid = struct.unpack("3i", payload[:creds_len])[0]
            with self.lock:
                self.messages.append((time.monotonic(), pid, data.decode()))

    def lines(self, name):
        """[(time, pid, whole message)] of the messages holding a line NAME=..."""
        with self.lock:
            return [m for m in self.messages if any(l.startswith(name + "=")
                                                    for l in m[2].split("\n"))]

    def wait(self, name, timeout=30):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = self.lines(name)
            if found:
                return found[0]
            time.sleep(0.01)
        raise AssertionError("no %s= from the worker; got %s" % (name, self.messages))

    def close(self):
        self.closed = True
        self.thread.join(2)
        self.sock.close()


def notify_env(path, **extra):
    env = dict(os.environ)
    for k in ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID"):
        env.pop(k, None)
    env["NOTIFY_SOCKET"] = path
    env.update({k: str(v) for k, v in extra.items()})
    return env


def health_serving(w):
    r = w.health.Check(health_pb2.HealthCheckRequest(), timeout=5)
    return r.status == health_pb2.HealthCheckResponse.SERVING


def pings_between(ns, t0, t1):
    return [m for m in ns.lines("WATCHDOG") if t0 <= m[0] < t1]


# ---- ptrace: stop one thread of the worker (its event loop), not the process --------

PTRACE_DETACH = 17
PTRACE_SEIZE = 0x4206
PTRACE_INTERRUPT = 0x4207
WALL = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)
_libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
_libc.ptrace.restype = ctypes.c_long


def ptrace(req, tid, data=0):
    if _libc.ptrace(req, tid, None, ctypes.c_void_p(data)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, "ptrace(%#x, %d): %s" % (req, tid, os.strerror(err)))


class LoopStopped(object):
    """Stops the worker's main thread, which runs its libuv loop (wk_app_run runs on the
    program's main thread), with PTRACE_INTERRUPT; its other threads (gRPC, the signal
    thread) go on. On exit it detaches, passing on a signal the thread stopped for."""

    def __init__(self, pid):
        self.tid = pid

    def __enter__(self):
        ptrace(PTRACE_SEIZE, self.tid)
        ptrace(PTRACE_INTERRUPT, self.tid)
        os.waitpid(self.tid, WALL)  # the interrupt's stop
        return self

    def __exit__(self, *exc):
        sig = 0
        try:  # a signal delivered to the thread while stopped: hand it back at detach
            pid, status = os.waitpid(self.tid, WALL | os.WNOHANG)
            if pid and os.WIFSTOPPED(status) and (status >> 16) == 0 and \
                    os.WSTOPSIG(status) != signal.SIGTRAP:
                sig = os.WSTOPSIG(status)
        except ChildProcessError:
            pass
        ptrace(PTRACE_DETACH, self.tid, sig)


def thread_states(pid):
    out = {}
    for tid in os.listdir("/proc/%d/task" % pid):
        with open("/proc/%d/task/%s/stat" % (pid, tid)) as f:
            out[int(tid)] = f.read().rsplit(")", 1)[1].split()[0]
    return out


# ---- the tests ---------------------------------------------------------------------------


def test_ready_watchdog_and_stopping(worker_factory, tmp_path):
    ns = NotifySocket(str(tmp_path / "notify"))
    try:
        w = worker_factory(env=notify_env(ns.path, WATCHDOG_USEC=WATCHDOG_USEC), executors=1)
        t_ready, pid, msg = ns.wait("READY", timeout=30)
        # the port serves when READY=1 arrives: a health check made now finds SERVING
        assert health_serving(w), "READY=1 came before the worker served"
        assert pid == w.proc.pid, (pid, w.proc.pid)
        assert "STATUS=serving on " + w.addr in msg.split("\n"), msg
        on = w.events("sdnotify_on")
        assert on and on[0]["watchdog_usec"] == WATCHDOG_USEC, w.logs[:10]

        # WATCHDOG=1 every half of WATCHDOG_USEC (0.5 s): several in 3 s
        time.sleep(3)
        now = time.monotonic()
        pings = pings_between(ns, now - 3, now)
        print("%d WATCHDOG=1 in 3 s (WATCHDOG_USEC %d)" % (len(pings), WATCHDOG_USEC))
        assert len(pings) >= 3, ns.messages
        assert all(p[1] == w.proc.pid for p in pings)

        # the loop's thread stopped alone: no pings, while the other threads run on
        with LoopStopped(w.proc.pid):
            t0 = time.monotonic() + 0.2  # a ping already on its way may still land
            time.sleep(2.2)
            t1 = time.monotonic()
            states = thread_states(w.proc.pid)
        assert states[w.proc.pid] == "t", states  # the loop's thread: stopped by the tracer
        assert any(s != "t" for tid, s in states.items() if tid != w.proc.pid), states
        assert pings_between(ns, t0, t1) == [], "pinged while the loop was stopped"
        t2 = time.monotonic()
        time.sleep(1.5)
        assert pings_between(ns, t2, time.monotonic()), "no pings after the loop went on"
        assert health_serving(w)

        # the whole process stopped: none either, and they resume after SIGCONT
        os.kill(w.proc.pid, signal.SIGSTOP)
        t0 = time.monotonic() + 0.2
        time.sleep(2.2)
        t1 = time.monotonic()
        os.kill(w.proc.pid, signal.SIGCONT)
        assert pings_between(ns, t0, t1) == []
        t2 = time.monotonic()
        time.sleep(1.5)
        assert pings_between(ns, t2, time.monotonic())

        # SIGTERM: STOPPING=1, then the process exits
        assert not ns.lines("STOPPING")
        w.proc.send_signal(signal.SIGTERM)
        rc = w.proc.wait(60)
        t_exit = time.monotonic()
        w.stop()
        assert rc == 0, w.logs[-10:]
        stopping = ns.lines("STOPPING")
        assert len(stopping) == 1 and stopping[0][0] < t_exit, ns.messages
        assert stopping[0][1] == w.proc.pid
        assert "STATUS=draining" in stopping[0][2].split("\n")
        assert len(ns.lines("READY")) == 1
        assert t_ready < stopping[0][0]
    finally:
        ns.close()


def test_watchdog_pid_rule(worker_factory, tmp_path):
    """libsystemd (sd_watchdog_enabled): WATCHDOG_PID set to another process means the
    watchdog is not this process's: READY=1 but no pings. Set to the worker's own pid
    (as systemd does; here a shell sets it to its own pid and execs the worker): pings."""
    ns = NotifySocket(str(tmp_path / "notify-other"))
    try:
        w = worker_factory(env=notify_env(ns.path, WATCHDOG_USEC=WATCHDOG_USEC, WATCHDOG_PID=1),
                           executors=1)
        ns.wait("READY", timeout=30)
        time.sleep(1.5)
        assert ns.lines("WATCHDOG") == [], ns.messages
        assert w.events("sdnotify_on")[0]["watchdog_usec"] == 0
    finally:
        ns.close()
    ns = NotifySocket(str(tmp_path / "notify-own"))
    try:
        own = ["/bin/sh", "-c", 'WATCHDOG_PID=$$; export WATCHDOG_PID; exec "$@"', "sh"]
        w = worker_factory(env=notify_env(ns.path, WATCHDOG_USEC=WATCHDOG_USEC), wrapper=own,
                           executors=1)
        ns.wait("READY", timeout=30)
        first = ns.wait("WATCHDOG", timeout=10)
        assert first[1] == w.proc.pid
    finally:
        ns.close()


def test_without_notify_socket_nothing_is_said(worker_factory):
    w = worker_factory(env=notify_env("", WATCHDOG_USEC=WATCHDOG_USEC), executors=1)
    w.wait_serving()
    assert not w.events("sdnotify_on") and not w.events("sdnotify_unavailable")


def test_bundle_worker_notifies(worker_factory, tmp_path):
    ns = NotifySocket(str(tmp_path / "notify"))
    try:
        out = tmp_path / "out"
        out.mkdir()
        w = worker_factory("--output-dir", str(out), binary=BUNDLE, executors=1,
                           env=notify_env(ns.path, WATCHDOG_USEC=WATCHDOG_USEC))
        ns.wait("READY", timeout=30)
        assert health_serving(w)
        ns.wait("WATCHDOG", timeout=10)
        w.proc.send_signal(signal.SIGTERM)
        assert w.proc.wait(60) == 0
        w.stop()
        assert ns.lines("STOPPING")
    finally:
        ns.close()


def analyze(unit_text, tmp_path):
    d = tmp_path / ("unit-%d" % time.monotonic_ns())
    d.mkdir()
    path = d / "worker.service"
    path.write_text(unit_text)
    return subprocess.run([SYSTEMD_ANALYZE, "verify", str(path)], capture_output=True, text=True,
                          timeout=120)


def test_unit_file_verifies(tmp_path):
    """systemd-analyze verify (Debian's systemd package): it also checks that ExecStart's
    program exists, so the copy it reads names this build's worker. It exits 0 on a
    directive it cannot parse, so its output must be empty too (checked to fail on a
    broken copy)."""
    assert os.access(SYSTEMD_ANALYZE, os.X_OK), "systemd-analyze missing (scripts/deps.sh: systemd)"
    text = open(UNIT).read()
    assert "ExecStart=/usr/local/bin/worker " in text
    local = text.replace("ExecStart=/usr/local/bin/worker ", "ExecStart=%s " % WORKER)
    out = analyze(local, tmp_path)
    assert out.returncode == 0 and out.stdout + out.stderr == "", out.stdout + out.stderr
    broken = analyze(local.replace("KillMode=mixed", "KillMode=everything"), tmp_path)
    assert "KillMode" in broken.stdout + broken.stderr or "kill mode" in broken.stderr, broken

    settings = dict(re.findall(r"^(\w+)=(.*)$", text, re.M))
    assert settings["Type"] == "notify" and settings["NotifyAccess"] == "main"
    assert settings["KillMode"] == "mixed"
    assert "WatchdogSec" in settings
    cfg = subprocess.run([WORKER, "--print-config", "--json", "--code-root", str(tmp_path)],
                         capture_output=True, text=True, check=True).stdout
    cfg = json.loads(cfg)
    values = cfg.get("settings", cfg)

    def ms(name):
        v = values[name]
        return int(v["value"] if isinstance(v, dict) else v)
    needed_s = (ms("drain_timeout_ms") + ms("shutdown_grace_ms")) / 1000.0
    stop_s = int(settings["TimeoutStopSec"])
    print("TimeoutStopSec=%d for drain %d ms + grace %d ms" %
          (stop_s, ms("drain_timeout_ms"), ms("shutdown_grace_ms")))
    assert needed_s + 3 <= stop_s <= needed_s + 15, (stop_s, needed_s)

"""`workerctl top` through a pseudo-terminal: what its screen shows for one worker
(--addr) and for every worker in etcd, selection with j/k and the arrow keys, `q`
quitting and restoring the terminal; and the plain periodic lines when stdout is not a
terminal."""

import fcntl
import json
import os
import pty
import re
import select
import struct
import subprocess
import termios
import time
import urllib.request

from conftest import WORKERCTL
from etcd_fixture import Etcd, wait_for

ESC = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


class Pty(object):
    """workerctl in a pseudo-terminal of rows x cols; screen() is the last full frame."""

    def __init__(self, args, rows=50, cols=200):
        self.master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
        env = dict(os.environ, TERM="xterm", WORKERCTL_TOP_INTERVAL_MS="300")
        self.proc = subprocess.Popen([WORKERCTL] + args, stdin=slave, stdout=slave, stderr=slave,
                                     env=env, start_new_session=True)
        os.close(slave)
        self.out = b""

    def pump(self, seconds):
        deadline = time.time() + seconds
        while time.time() < deadline:
            r, _, _ = select.select([self.master], [], [], 0.05)
            if r:
                try:
                    data = os.read(self.master, 65536)
                except OSError:
                    return
                if not data:
                    return
                self.out += data

    def screen(self):
        """The lines of the last frame drawn (each frame starts at the cursor's home)."""
        text = self.out.decode("utf-8", "replace")
        frames = text.split("\x1b[H")
        last = frames[-1] if len(frames) > 1 else text
        return [ESC.sub("", l).rstrip("\r") for l in last.split("\n")]

    def wait_screen(self, pred, timeout=20):
        deadline = time.time() + timeout
        while time.time() < deadline:
            self.pump(0.2)
            lines = self.screen()
            if pred("\n".join(lines)):
                return lines
        raise AssertionError("the screen never showed it:\n" + "\n".join(self.screen()))

    def send(self, keys):
        os.write(self.master, keys)

    def close(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        os.close(self.master)


def status_port(w):
    return w.events("metrics_listening")[0]["port"]


def test_top_one_worker_in_a_terminal(worker_factory):
    w = worker_factory("--metrics-addr", "127.0.0.1:0", "--task-slots", "4",
                       "--drain-timeout-ms", "500")
    w.deploy("sleepy")
    w.deploy("boom")
    w.wait_serving()
    w.submit("t-slow", "sleepy", {"seconds": 60})
    w.submit("t-fail", "boom", {})
    w.wait_terminal("t-fail")
    port = status_port(w)
    t = Pty(["top", "--addr", "127.0.0.1:%d" % port])
    try:
        lines = t.wait_screen(lambda s: "t-slow" in s and "t-fail" in s and "run   1" in s)
        text = "\n".join(lines)
        assert lines[0].startswith("workerctl top")
        # the summary line of the one worker, selected
        summary = next(l for l in lines if l.startswith("> 127.0.0.1:%d" % port))
        assert "serving" in summary and "slots run   1 alloc   0 free   3 of 4" in summary
        assert "failed    1" in summary and "live   1" in summary
        # the detail pane: the worker, its executors, the task in flight, the failure first
        assert "address %s" % w.addr in text
        assert re.search(r"t-slow\s+sleepy\s+1\s+CALLS\s+\[\.+\] 0/1", text), text
        assert re.search(r"t-fail\s+boom\s+FAILED\s+CALL_FAILED", text), text
        with urllib.request.urlopen("http://127.0.0.1:%d/status" % port, timeout=5) as r:
            doc = json.loads(r.read())
        for e in doc["executors"]["list"]:
            assert re.search(r"^%d\s+%d\s" % (e["id"], e["pid"]), text, re.M), text
        # it refreshes in place: a new task shows up without a key press
        w.submit("t-slow2", "sleepy", {"seconds": 60})
        t.wait_screen(lambda s: "t-slow2" in s and "run   2" in s)
        # q quits at once, and the terminal is given back (main screen, cursor shown)
        t.send(b"q")
        assert t.proc.wait(10) == 0
        t.pump(0.3)
        assert t.out.endswith(b"\x1b[?25h\x1b[?1049l")
    finally:
        t.close()


def test_top_every_worker_in_etcd(worker_factory):
    etcd = Etcd()
    t = None
    try:
        ws = [worker_factory("--metrics-addr", "127.0.0.1:0", "--etcd-endpoints", etcd.url,
                             "--task-slots", str(n), "--drain-timeout-ms", "500") for n in (3, 5)]
        for w in ws:
            w.wait_serving()
        # each registration names its status page
        wait_for(lambda: len(etcd.range_prefix("/workers/")) == 2, timeout=15)
        values = [v for v, _lease in etcd.range_prefix("/workers/").values()]
        assert sorted(v["status_addr"] for v in values) == \
            sorted("127.0.0.1:%d" % status_port(w) for w in ws)
        ws[1].deploy("sleepy")
        ws[1].submit("t-on-second", "sleepy", {"seconds": 60})
        t = Pty(["top", "--etcd", etcd.url])
        lines = t.wait_screen(lambda s: s.count("serving") >= 2)
        rows = [l for l in lines if re.match(r"^[> ] 127\.0\.0\.1:\d+ ", l)]
        assert len(rows) == 2
        assert "2 workers registered" in lines[0]
        # the first is selected; the detail pane is its
        first = next(l for l in rows if l.startswith(">"))
        sel_addr = first.split()[1]
        other = next(w for w in ws if w.addr != sel_addr)
        assert "address %s " % sel_addr in "\n".join(lines)
        # its registration as the worker itself reports it: registered, with a lease
        assert re.search(r"^etcd: registered  lease [0-9a-f]+$", "\n".join(lines), re.M), lines
        # j (or the down arrow) selects the other one
        t.send(b"j")
        lines = t.wait_screen(lambda s: "address %s " % other.addr in s)
        assert next(l for l in lines if l.startswith(">")).split()[1] == other.addr
        if other is ws[1]:
            assert "t-on-second" in "\n".join(lines)
        t.send(b"\x1b[A")  # up arrow: back
        t.wait_screen(lambda s: "address %s " % sel_addr in s)
        t.send(b"q")
        assert t.proc.wait(10) == 0
    finally:
        if t:
            t.close()
        etcd.stop()


def test_top_plain_lines_when_not_a_terminal(worker_factory):
    w = worker_factory("--metrics-addr", "127.0.0.1:0", "--task-slots", "2")
    port = status_port(w)
    w.wait_serving()
    env = dict(os.environ, WORKERCTL_TOP_INTERVAL_MS="200")
    p = subprocess.Popen([WORKERCTL, "top", "--addr", "127.0.0.1:%d" % port],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         env=env)
    try:
        lines = [p.stdout.readline().decode() for _ in range(3)]
        for l in lines:
            assert "\x1b" not in l  # no escapes in a log
            assert re.match(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ 127\.0\.0\.1:%d\s+serving\s+slots run\s+0"
                            r" alloc\s+0 free\s+2 of 2" % port, l), l
        p.stdin.write(b"q\n")
        p.stdin.flush()
        assert p.wait(10) == 0
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def test_top_says_when_the_token_is_missing(tmp_path):
    from conftest import Worker
    w = Worker(str(tmp_path / "w"), extra_args=["--metrics-addr", "127.0.0.1:0",
                                                "--auth-token", "tok-123"])
    try:
        port = status_port(w)
        env = dict(os.environ, WORKERCTL_TOP_INTERVAL_MS="200")
        base = [WORKERCTL, "top", "--addr", "127.0.0.1:%d" % port]
        p = subprocess.Popen(base, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
        line = p.stdout.readline().decode()
        p.kill()
        p.wait()
        assert "401: " in line and "--token" in line
        p = subprocess.Popen(base + ["--token", "tok-123"], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, env=env)
        line = p.stdout.readline().decode()
        p.stdin.write(b"q\n")
        p.stdin.flush()
        assert p.wait(10) == 0
        # "401: " is the error's form; a bare "401" may be part of the port in the line
        assert "slots" in line and "401: " not in line
    finally:
        w.kill()

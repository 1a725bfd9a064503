"""End-to-end: an executor's channel belongs to that executor alone (issue 11, §1).

The attack that used to work: user code kills a sibling executor, stops its replacement
with SIGSTOP, connects to the worker's executor socket and sends HELLO with the
replacement's pid; the worker then sent it other tasks' calls. Now every executor gets
one end of a socket pair at spawn and the worker listens on no Unix-domain socket at all:
the attacker finds nothing to connect to, and every victim task still gets its own result."""

import os  # also used by SOCKET_INODES, exec()uted below
import time

from conftest import output_json, pb

ECHO = "def handler(args, ctx):\n    return {'n': args['n']}\n"

# Shared by the test and the attacking function (which gets it as source).
SOCKET_INODES = r'''
def socket_inodes(pid):
    """Inodes of the sockets process `pid` holds (from /proc/<pid>/fd)."""
    inodes = set()
    for fd in os.listdir("/proc/%d/fd" % pid):
        try:
            link = os.readlink("/proc/%d/fd/%s" % (pid, fd))
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(link[8:-1])
    return inodes
'''
exec(SOCKET_INODES)

# Runs inside an executor: tries every way it has to claim another executor's channel.
ATTACK = r'''
import glob, os, signal, socket, time
from wk_executor.protocol import encode_hello
''' + SOCKET_INODES + r'''

def _children(ppid):
    out = set()
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % d) as f:
                fields = f.read().rsplit(")", 1)[1].split()
            if int(fields[1]) == ppid:
                out.add(int(d))
        except (OSError, IndexError, ValueError):
            pass
    return out

def _worker_unix_paths(wpid):
    """Paths of every Unix socket the worker holds, plus anything socket-like in the
    directories an executor can see (HOME is the pool's private directory)."""
    home = os.environ.get("HOME", "/nonexistent")
    try:
        inodes = socket_inodes(wpid)
    except OSError:  # a non-dumpable worker: take every socket under the pool directory
        inodes = None
    paths = set()
    with open("/proc/self/net/unix") as f:
        next(f)
        for line in f:
            parts = line.split()
            if len(parts) < 8:
                continue
            path = parts[7].lstrip("@")
            if (parts[6] in inodes) if inodes is not None else path.startswith(home + "/"):
                paths.add(path)
    paths.update(glob.glob(os.path.join(home, "*")))
    return sorted(paths)

def handler(args, ctx):
    wpid = os.getppid()
    me = os.getpid()
    found = _worker_unix_paths(wpid)
    before = _children(wpid)
    siblings = sorted(p for p in before if p != me)
    killed = stopped = None
    if siblings:
        killed = siblings[0]
        os.kill(killed, signal.SIGKILL)
        deadline = time.time() + 10
        while time.time() < deadline and stopped is None:
            fresh = _children(wpid) - before
            for p in fresh:
                try:
                    os.kill(p, signal.SIGSTOP)
                    stopped = p
                    break
                except OSError:
                    pass
            time.sleep(0.001)
    connected, received = [], 0
    for path in found:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.connect(path)
        except OSError:
            s.close()
            continue
        connected.append(path)
        try:
            s.sendall(encode_hello(stopped or me))
            s.settimeout(3)
            end = time.time() + 3
            while time.time() < end:
                b = s.recv(65536)
                if not b:
                    break
                received += len(b)
        except OSError:
            pass
        s.close()
    if stopped:
        try:
            os.kill(stopped, signal.SIGCONT)
        except OSError:
            pass  # the worker may have replaced it meanwhile
    return {"found": found, "connected": connected, "received": received,
            "killed": killed, "stopped": stopped}
'''


def listening_unix_sockets(pid):
    """(inode, path) of the Unix sockets in LISTEN state that process `pid` holds."""
    inodes = socket_inodes(pid)
    out = []
    with open("/proc/%d/net/unix" % pid) as f:
        next(f)
        for line in f:
            parts = line.split()
            # Flags 00010000 is __SO_ACCEPTCON: a listening socket
            if parts[6] in inodes and int(parts[3], 16) & 0x10000:
                out.append((parts[6], parts[7] if len(parts) > 7 else ""))
    return out


def test_worker_listens_on_no_unix_socket(worker_factory):
    w = worker_factory(executors=2)
    w.wait_serving()
    w.deploy("echo", ECHO)
    w.submit("warm", "echo", {"n": 1})
    assert w.wait_terminal("warm").state == pb.TASK_STATE_SUCCEEDED  # SUCCEEDED: the executors are connected
    assert listening_unix_sockets(w.proc.pid) == []


def test_attacker_claims_no_other_executors_channel(worker_factory):
    w = worker_factory("--executors-max", "2", "--task-slots", "64", executors=2)
    w.wait_serving()
    w.deploy("echo", ECHO)
    w.deploy("attack", ATTACK)
    w.submit("warm", "echo", {"n": 0})
    w.wait_terminal("warm")

    w.submit("attacker", "attack", {}, call_timeout_ms=60000)
    time.sleep(0.3)  # the attack runs while the victims stream
    victims = []
    for i in range(40):
        tid = "victim-%02d" % i
        w.submit(tid, "echo", {"n": 1000 + i})
        victims.append(tid)
        time.sleep(0.05)
    r = w.wait_terminal("attacker", timeout=60)
    assert r.state == pb.TASK_STATE_SUCCEEDED, (r.failure_message, r.outputs)  # the attack itself ran to the end
    got = output_json(r)
    assert got["killed"] and got["stopped"], got  # it did kill and stop executors
    assert got["connected"] == [], got
    assert got["received"] == 0, got
    for i, tid in enumerate(victims):
        v = w.wait_terminal(tid, timeout=60)
        assert v.state == pb.TASK_STATE_SUCCEEDED, (tid, v)
        assert output_json(v) == {"n": 1000 + i}, (tid, v)


def test_hello_naming_another_pid_is_refused(worker_factory, tmp_path):
    """HELLO's pid is checked against the process spawned with the channel: an executor
    that names another pid is killed and never gets a call."""
    py = tmp_path / "lying-python"
    py.write_text("#!/usr/bin/python3\n"
                  "import os, struct, time\n"
                  "os.write(3, struct.pack('<IBII', 9, 1, 5, os.getppid()))\n"  # HELLO v5
                  "time.sleep(30)\n")
    py.chmod(0o755)
    w = worker_factory(executors=1, python=str(py))
    deadline = time.time() + 20
    while time.time() < deadline and not w.events("executors_unavailable"):
        time.sleep(0.05)
    killed = [e for e in w.events("executor_killed")
              if e.get("reason") == "its HELLO named another pid"]
    assert killed, w.logs[-20:]
    assert w.events("executors_unavailable")
    assert not w.events("executors_available")

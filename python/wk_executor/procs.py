"""What a function starts ends with it (docs/security.md): the executor's own process
settings, made before any user code runs, and the end of every process a call left
behind.

- Non-dumpable (prctl PR_SET_DUMPABLE 0): its /proc/<pid>/mem, environ, maps... become
  root's and ptrace is refused, so a function in a sibling executor (the same user)
  reads and traces nothing here.
- A child subreaper (PR_SET_CHILD_SUBREAPER): a process a call starts stays in this
  executor's tree even when its parent dies (`sleep 300 &` from a shell, double forks,
  `start_new_session=True`): orphans come back to the executor, not to init or the
  Worker, so end_descendants() finds every one of them among its own children.
- RLIMIT_CORE 0: no core dumps (a dump holds the call's arguments and results).
"""

from __future__ import annotations

import ctypes
import os
import resource
import signal
import time

from .state import log

PR_SET_DUMPABLE = 4
PR_SET_CHILD_SUBREAPER = 36
END_TIMEOUT_S = 5.0  # at most this long ending one call's processes


def _prctl(option: int, value: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(option, ctypes.c_ulong(value), ctypes.c_ulong(0), ctypes.c_ulong(0),
                  ctypes.c_ulong(0)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def harden() -> bool:
    """Makes this process non-dumpable and a child subreaper and turns core dumps off.
    False, after a log line, when one of them fails (the executor must not run then)."""
    try:
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        _prctl(PR_SET_DUMPABLE, 0)
        _prctl(PR_SET_CHILD_SUBREAPER, 1)
    except (OSError, ValueError, AttributeError) as e:
        log(f"cannot harden the executor process: {e}")
        return False
    return True


def _children_walk(me: int) -> list[int]:
    """Live processes whose parent is `me`, from /proc/<pid>/stat of every process on
    the host (a look costs milliseconds with thousands of them)."""
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue  # gone meanwhile
        fields = stat[stat.rfind(b")") + 2:].split()  # after "pid (comm) "
        if len(fields) > 1 and int(fields[1]) == me:
            out.append(int(name))
    return out


def _children_files(me: int) -> list[int]:
    """Live children of `me` from the kernel's /proc/<me>/task/<tid>/children files, one
    per thread (a function's own thread may fork too)."""
    out = []
    try:
        tids = os.listdir(f"/proc/{me}/task")
    except OSError:
        return out
    for tid in tids:
        try:
            with open(f"/proc/{me}/task/{tid}/children", "rb") as f:
                out.extend(int(pid) for pid in f.read().split())
        except OSError:
            continue  # the thread ended meanwhile
    return out


_have_children_files: bool | None = None  # probed on the first look


def _children(me: int) -> list[int]:
    """Live processes whose parent is `me`: from the children files when the kernel has
    them (CONFIG_PROC_CHILDREN), else from a walk of /proc."""
    global _have_children_files
    if _have_children_files is None:
        _have_children_files = os.path.exists(f"/proc/{me}/task/{me}/children")
    return _children_files(me) if _have_children_files else _children_walk(me)


# waitpid through ctypes.PyDLL keeps the GIL: os.waitpid lets it go, and a GIL released
# at the end of every call handed it to the watchdog (which waits for it while a call
# spins) exactly when the call had ended, every time, so the watchdog never read while a
# call ran and PINGs behind a queue of short calls waited for the whole queue
# (tests/integration/test_executor_features.c, test_input_while_queue_of_calls).
# Called without argtypes (Python ints pass as C ints, None as NULL) and without errno:
# with WNOHANG it never blocks, so -1 can only mean ECHILD. This runs after every call,
# with the caches the call left cold: each conversion ctypes skips counts.
_waitpid = ctypes.PyDLL(None).waitpid
_WNOHANG = os.WNOHANG


def _no_child() -> bool:
    """True when this process has no child at all (ECHILD), without letting the GIL go.
    A child that ended is reaped here too; False when any child is left."""
    while True:
        pid = _waitpid(-1, None, _WNOHANG)
        if pid > 0:
            continue
        return pid < 0


def end_descendants() -> int:
    """Kills (SIGKILL) and reaps every process this executor has as a child: the
    processes the call that just ended started, and, since the executor is a subreaper,
    every descendant whose own parent died. Killing a child hands its children to the
    executor, so this goes on until none is left. Returns how many were killed. The
    common case, no child at all, costs one waitpid."""
    if _no_child():
        return 0
    me = os.getpid()
    killed: set[int] = set()
    give_up = None
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return len(killed)  # no child (left)
        except InterruptedError:
            continue
        if pid:
            continue  # reaped one that had ended; look again
        now = time.monotonic()
        if give_up is None:
            give_up = now + END_TIMEOUT_S
        elif now > give_up:
            log("gave up ending the processes a call left behind (the Worker ends them with "
                "this executor)")
            return len(killed)
        for child in _children(me):
            try:
                os.kill(child, signal.SIGKILL)
                killed.add(child)
            except OSError:  # gone, or a setuid program the executor may not signal
                pass
        time.sleep(0.001)  # let the killed ones die before the next look

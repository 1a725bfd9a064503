"""The executor's shared state, in one place with its locking rules, and its diagnostics.

The executor is one object (runner.Executor) assembled from parts that each keep one
concept in their own file and share this state: channel.Channel (the socket: batched
writes, reads), inbox.Inbox (received frames: the queue, CANCEL, SHUTDOWN, EOF),
subcalls.Subcalls (a call waiting for child calls), watchdog.Watchdog (the second
thread: liveness while a call runs, stack capture) and runner.Runner (the main loop).
They are mixins over one object rather than separate objects so the per-call path reads
plain attributes of `self`, as it did when the executor was a single class.
"""

from __future__ import annotations

import collections
import os
import socket
import threading

from .capture import Capture
from .loader import Loader
from .protocol import Call

DEFAULT_MAX_NESTING = 32  # running calls at once: one outer call plus nested ones
RECV_SIZE = 256 << 10
SHUTDOWN_ITEM = object()  # queued after the CALLs that came before SHUTDOWN


def log(msg: str) -> None:
    """Executor diagnostics go to the real stderr (fd 2), never to a call's capture."""
    try:
        os.write(2, f"worker_executor[{os.getpid()}]: {msg}\n".encode("utf-8", "replace"))
    except OSError:
        pass


class State:
    """Every field of the executor. Locks: `wlock` serialises the socket's writes and
    `olock` guards obuf (taken inside wlock, never the other way); `rlock` is the socket's
    read side and rbuf (the main thread between calls, the watchdog while a call runs
    long); `cv` guards the queue, `pending`, `running`, `requests` and the flags marked
    below; `fcv` wakes the watchdog."""

    def __init__(self, sock: socket.socket, max_frame: int, capture_max: int,
                 max_nesting: int = DEFAULT_MAX_NESTING) -> None:
        self.sock = sock
        self.max_frame = max_frame
        self.capture_max = capture_max
        self.max_nesting = max_nesting
        self.loader = Loader()
        self.main_ident = threading.get_ident()  # the executor is built on the main thread
        self.wlock = threading.Lock()  # the socket's write side
        self.olock = threading.Lock()  # obuf; taken inside wlock, never the other way
        self.obuf: list[bytes] = []  # encoded RESULTs not written yet (main thread appends)
        self.obytes = 0
        self.flushed = 0  # frames written since the main thread last read the socket
        # The socket's read side and rbuf: the main thread between calls, the watchdog
        # while one call runs long (watch_reading, changed under cv).
        self.rlock = threading.Lock()
        self.rspace = bytearray(RECV_SIZE)  # recv_into target (parsed frames copy out)
        self.rbuf = bytearray()  # the start of a frame not complete yet
        self.watch_reading = False
        self.in_take = False  # the main thread is between calls (take); changed under cv
        self.progress = 0  # calls the main thread has taken
        # the Worker's started file (executor-protocol.md §7): the id of the call the main
        # thread starts is written here before it runs; None without --started-file
        self.started = None
        self.last_task = ""  # task id of the call the main thread took last
        self.reads = 0  # times the main thread read the socket (the watchdog's clock)
        self.fcv = threading.Condition(threading.Lock())
        self.idle = False  # the main thread blocks for input: the watchdog sleeps (fcv)
        self.cv = threading.Condition(threading.Lock())
        self.queue: collections.deque = collections.deque()  # Call items and SHUTDOWN_ITEM, in arrival order
        self.pending: dict[int, Call] = {}  # call_id -> queued Call
        self.running: list[Call] = []  # the running calls, outermost first (main thread only changes it)
        self.requests: dict = {}  # request_id -> subcalls.Request awaiting its SUBCALLS_RESULT
        self.next_request_id = 1
        self.scratch_made: set[str] = set()  # scratch directories the Worker said exist
        self.closed = False  # the Worker hung up
        self.shutdown_seen = False
        # process CPU seconds read at the end of the last call, while the main thread has
        # not waited since: the next call's start (one getrusage per call, not two)
        self.cpu_mark: float | None = None
        self.out = Capture(capture_max)  # sys.stdout during calls
        self.err = Capture(capture_max)  # sys.stderr during calls

#!/usr/bin/env python3
"""worker_executor.py: the Python executor process of the Worker.

    python3 worker_executor.py --socket PATH [--max-frame BYTES] [--capture-max BYTES]
                               [--pycache-prefix DIR] [--max-nesting N]
                               [--rlimit-as-mb N] [--rlimit-nofile N] [--rlimit-cpu-s N]

Connects to the Worker's Unix-domain socket PATH, sends HELLO, then runs the CALL frames
it receives, one at a time and in order, answering each with exactly one RESULT frame.
The wire format is in docs/executor-protocol.md (C side: src/adapters/wk_frame.c).

Threads: the main thread runs calls (user code sees an ordinary main thread) and, between
calls, reads the socket itself: a burst of short calls costs no thread switch. RESULTs
are buffered and written in batches, and written early, once more than half of the calls
the executor holds have run (so the Worker sends the next ones while the rest run: the
pipeline never drains), when the buffer passes FLUSH_BYTES, and when the main thread runs
out of calls. A watchdog thread ticks every WATCH_PERIOD_S while calls run: it writes
RESULTs that a long call would hold back, and when one call has been running for a whole
tick it takes over the socket's read side until the call ends, so PING is answered,
CANCEL is noted and STACK_REQUEST is answered even while a call runs (or loops). A call
that waits for its subcalls (ctx.call / ctx.map) keeps running the CALLs that arrive
meanwhile, nested on the main thread. Writes are serialised by a lock, reads by another.

Exit status: 0 after SHUTDOWN (once every call sent before it has its RESULT) or when
the Worker closes the socket; 2 on a protocol error from the Worker; 1 when the socket
cannot be reached at start-up.

Standard library only; Python 3.9 or later.
"""

import argparse
import collections
import hashlib
import importlib
import importlib.machinery
import importlib.util
import io
import json
import logging
import math
import os
import re
import resource
import select
import signal
import socket
import struct
import sys
import threading
import time
import traceback

import worker  # python/worker/__init__.py, next to this file (sys.path[0])

PROTOCOL_VERSION = 2

HELLO, CALL, RESULT, CANCEL, PING, PONG, SHUTDOWN = 1, 2, 3, 4, 5, 6, 7
SUBCALLS, SUBCALLS_RESULT, STACK_REQUEST, STACK = 8, 9, 10, 11
_TO_WORKER_ONLY = (HELLO, RESULT, SUBCALLS, STACK)

CONTENT_JSON, CONTENT_BYTES = 0, 1
STATUS_OK, STATUS_ERROR, STATUS_RETRYABLE = 0, 1, 2

DEFAULT_MAX_FRAME = 16 << 20
DEFAULT_CAPTURE_MAX = 64 << 10
ERROR_TEXT_MAX = 64 << 10  # cap on error message and traceback, each
EOF_GRACE_S = 2.0  # after the Worker hung up, a running call gets this long to finish
RECV_SIZE = 256 << 10
FLUSH_BYTES = 64 << 10  # buffered RESULT bytes that force a write
EARLY_FLUSH_MIN = 4  # RESULTs buffered before an early write (more than half the calls held)
WATCH_PERIOD_S = 0.005  # the watchdog's tick while calls run
DEFAULT_ENTRYPOINT = "main:handler"
DEFAULT_MAX_NESTING = 32  # running calls at once: one outer call plus nested ones
THREAD_STACK = 512 << 10  # the executor's own threads (matters under --rlimit-as-mb)

_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
_QI = struct.Struct("<QI")
_BIII = struct.Struct("<BIII")
_RESULT_START = struct.Struct("<IBQBBI")  # prefix, type, call_id, status, content_type, len(output)
_QQI = struct.Struct("<QQI")
_PREFIX_TYPE = struct.Struct("<IB")
_SUBCALLS_HEAD = struct.Struct("<QQ")
_SUBCALLS_COUNT = struct.Struct("<BI")
_CHILD_HEAD = struct.Struct("<BB")
_RUSAGE_SELF = resource.RUSAGE_SELF
_THIS_FILE = os.path.abspath(__file__)


# compact JSON, no NaN/Infinity (== json.dumps(v, ensure_ascii=False, allow_nan=False,
# separators=(",", ":")), without building an encoder per call)
_json_encode = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode


class ProtocolError(Exception):
    """The Worker sent bytes that are not a valid frame: the stream cannot be trusted."""


def _log(msg):
    """Executor diagnostics go to the real stderr (fd 2), never to a call's capture."""
    try:
        os.write(2, ("worker_executor[%d]: %s\n" % (os.getpid(), msg)).encode("utf-8", "replace"))
    except OSError:
        pass


# ---- frames -----------------------------------------------------------------------


def _frame(ftype, body):
    return _PREFIX_TYPE.pack(len(body) + 1, ftype) + body


def _bstr(b):
    return _U32.pack(len(b)) + b


def encode_hello(pid):
    return _frame(HELLO, _U32.pack(PROTOCOL_VERSION) + _U32.pack(pid & 0xFFFFFFFF))


def encode_u64_frame(ftype, value):
    return _frame(ftype, _U64.pack(value))


def encode_result(call_id, status, content_type, output, error_type, error_message,
                  tb, cpu_us, max_rss_kb, out, err):
    u32 = _U32.pack
    length = (1 + 8 + 2 + 16 + 4 * 6 + len(output) + len(error_type) + len(error_message)
              + len(tb) + len(out) + len(err))
    return b"".join((
        _RESULT_START.pack(length, RESULT, call_id, status, content_type, len(output)), output,
        u32(len(error_type)), error_type, u32(len(error_message)), error_message,
        u32(len(tb)), tb, _QQI.pack(cpu_us, max_rss_kb, len(out)), out, u32(len(err)), err,
    ))


def subcalls_head_size(function, entrypoint):
    """Bytes of a SUBCALLS frame before its args (length prefix included)."""
    return 5 + 16 + 4 + len(function) + 4 + len(entrypoint) + 5


def encode_subcalls(parent_call_id, request_id, function, entrypoint, content_type, args):
    body = b"".join((
        _SUBCALLS_HEAD.pack(parent_call_id, request_id), _bstr(function), _bstr(entrypoint),
        _SUBCALLS_COUNT.pack(content_type, len(args)),
        b"".join(_bstr(a) for a in args),
    ))
    return _frame(SUBCALLS, body)


def encode_stack(call_id, text):
    return _frame(STACK, _U64.pack(call_id) + _bstr(text))


class _Call(object):
    """A CALL frame as received, plus its queue state."""

    __slots__ = ("call_id", "task_id", "function", "epoch", "code_dir", "entrypoint",
                 "content_type", "call_index", "deadline", "scratch_dir", "traceparent",
                 "args", "cancelled", "nested_cpu")


class _Wait(object):
    """A running call waiting for the SUBCALLS_RESULTs of one ctx.call / ctx.map."""

    __slots__ = ("call", "outstanding")

    def __init__(self, call, outstanding):
        self.call = call
        self.outstanding = outstanding  # SUBCALLS frames not answered yet


class _Request(object):
    """One SUBCALLS frame in flight."""

    __slots__ = ("request_id", "count", "wait", "children")

    def __init__(self, request_id, count, wait):
        self.request_id = request_id
        self.count = count
        self.wait = wait
        self.children = None  # [(status, content_type, output, etype, emsg, tb)] once answered


def _take(mv, pos, end, n):
    if n > end - pos:
        raise ProtocolError("a field runs past the end of its frame")
    return pos + n


def _get_bytes(mv, pos, end):
    p = _take(mv, pos, end, 4)
    (n,) = _U32.unpack_from(mv, pos)
    q = _take(mv, p, end, n)
    return bytes(mv[p:q]), q


_TEXT_CACHE = {}  # bytes -> str for CALL text fields, which repeat call after call
_FS_ENCODING = sys.getfilesystemencoding()
_FS_ERRORS = sys.getfilesystemencodeerrors()


def _text(b, encoding="utf-8"):
    key = (b, encoding)
    t = _TEXT_CACHE.get(key)
    if t is None:
        t = b.decode(encoding, "surrogateescape" if encoding == "utf-8" else _FS_ERRORS)
        if len(_TEXT_CACHE) >= 4096:
            _TEXT_CACHE.clear()
        _TEXT_CACHE[key] = t
    return t


def parse_call(mv, pos, end, now):
    """A CALL body at mv[pos:end]. Offsets are computed first and checked once against
    the frame's end: a read past `end` (but inside the buffer) only yields garbage that
    the final check rejects; one past the buffer raises struct.error."""
    u32 = _U32.unpack_from
    try:
        call_id, n = _QI.unpack_from(mv, pos)
        p = pos + 12
        task_id = mv[p:p + n]
        p += n
        (n,) = u32(mv, p)
        p += 4
        function = mv[p:p + n]
        p += n
        epoch, n = _QI.unpack_from(mv, p)
        p += 12
        code_dir = mv[p:p + n]
        p += n
        (n,) = u32(mv, p)
        p += 4
        entrypoint = mv[p:p + n]
        p += n
        ctype, call_index, deadline_ms, n = _BIII.unpack_from(mv, p)
        p += 13
        scratch_dir = mv[p:p + n]
        p += n
        (n,) = u32(mv, p)
        p += 4
        traceparent = mv[p:p + n]
        p += n
        (n,) = u32(mv, p)
        p += 4
        args = mv[p:p + n]
        p += n
    except struct.error:
        p = end + 1
    if p > end:
        raise ProtocolError("a field runs past the end of its frame")
    if p != end:
        raise ProtocolError("bytes left in the CALL frame after its last field")
    if ctype > CONTENT_BYTES:
        raise ProtocolError("CALL content_type %d out of range" % ctype)
    c = _Call()
    c.call_id = call_id
    c.task_id = _text(bytes(task_id))
    c.function = _text(bytes(function))
    c.epoch = epoch
    c.code_dir = _text(bytes(code_dir), _FS_ENCODING)
    c.entrypoint = _text(bytes(entrypoint))
    c.content_type = ctype
    c.call_index = call_index
    c.deadline = now + deadline_ms / 1000.0 if deadline_ms else math.inf
    c.scratch_dir = _text(bytes(scratch_dir), _FS_ENCODING)
    c.traceparent = _text(bytes(traceparent))
    c.args = bytes(args)
    c.cancelled = False
    return c


def _parse_u64_body(mv, pos, end, name):
    if end - pos != 8:
        raise ProtocolError("%s body is %d bytes, not 8" % (name, end - pos))
    return _U64.unpack_from(mv, pos)[0]


def parse_subcalls_result(mv, pos, end):
    """(request_id, [(status, content_type, output, error_type, error_message, traceback)])"""
    p = _take(mv, pos, end, 12)
    (request_id,) = _U64.unpack_from(mv, pos)
    (count,) = _U32.unpack_from(mv, pos + 8)
    if count > (end - p) // 18:  # every child takes at least 18 bytes
        raise ProtocolError("a field runs past the end of its frame")
    children = []
    bad = False
    for _ in range(count):
        q = _take(mv, p, end, 2)
        status, ctype = _CHILD_HEAD.unpack_from(mv, p)
        if status > STATUS_RETRYABLE or ctype > CONTENT_BYTES:
            bad = True
        output, q = _get_bytes(mv, q, end)
        etype, q = _get_bytes(mv, q, end)
        emsg, q = _get_bytes(mv, q, end)
        tb, p = _get_bytes(mv, q, end)
        children.append((status, ctype, output, etype, emsg, tb))
    if bad or count == 0:
        raise ProtocolError("SUBCALLS_RESULT with a status or content_type out of range, or no children")
    if p != end:
        raise ProtocolError("bytes left in the SUBCALLS_RESULT frame after its last field")
    return request_id, children


# ---- output capture ---------------------------------------------------------------


class _Capture(object):
    """A text stream that keeps the first `cap` bytes written to it (UTF-8) and counts
    the rest. Stands in for sys.stdout / sys.stderr during calls.

    One pair of streams serves every call, so a logging handler a module bound to
    sys.stderr at import time keeps writing into the current call's capture. Calls nest
    (a call waiting for subcalls runs other calls), so the stream keeps a stack of
    buffers: push() when a call starts, pop() when it ends; writes go to the innermost
    running call."""

    encoding = "utf-8"
    errors = "backslashreplace"
    closed = False

    def __init__(self, cap):
        self._cap = cap
        self._buf = bytearray()  # the innermost call's (between calls: discarded)
        self._dropped = 0
        self._saved = []  # (buf, dropped) of the calls outside the innermost one
        self.buffer = _CaptureBinary(self)

    def push(self):
        """A call starts: its output goes to a fresh buffer."""
        self._saved.append((self._buf, self._dropped))
        self._buf = bytearray()
        self._dropped = 0

    def pop(self):
        """The innermost call ends: returns its captured bytes (see getvalue) and goes
        back to the enclosing call's buffer."""
        value = self.getvalue()
        self._buf, self._dropped = self._saved.pop()
        if not self._saved:  # between calls: writes are dropped
            del self._buf[:]
            self._dropped = 0
        return value

    def _add(self, b):
        room = self._cap - len(self._buf)
        if len(b) <= room:
            self._buf += b
        else:
            if room > 0:
                self._buf += b[:room]
            self._dropped += len(b) - max(room, 0)

    def write(self, s):
        if not isinstance(s, str):
            raise TypeError("write() argument must be str, not %s" % type(s).__name__)
        self._add(s.encode("utf-8", "backslashreplace"))
        return len(s)

    def writelines(self, lines):
        for s in lines:
            self.write(s)

    def flush(self):
        pass

    def isatty(self):
        return False

    def readable(self):
        return False

    def writable(self):
        return True

    def seekable(self):
        return False

    def fileno(self):
        raise io.UnsupportedOperation("captured stream has no file descriptor")

    def getvalue(self):
        """The captured bytes, at most `cap`; a marker at the end says how many were dropped."""
        if not self._dropped:
            return bytes(self._buf)
        total = len(self._buf) + self._dropped
        fmt = "\n[... output truncated: %d of %d bytes dropped]\n"
        # the dropped count has no more digits than the total, so this marker is the longest
        keep = max(self._cap - len(fmt % (total, total)), 0)
        marker = (fmt % (total - keep, total)).encode("ascii")
        return bytes(self._buf[:keep]) + marker


class _CaptureBinary(object):
    """sys.stdout.buffer for a _Capture."""

    closed = False

    def __init__(self, owner):
        self._owner = owner

    def write(self, b):
        b = bytes(b)
        self._owner._add(b)
        return len(b)

    def flush(self):
        pass

    def writable(self):
        return True


# ---- what a function sees ---------------------------------------------------------


class Context(object):
    """The `ctx` argument of handler(args, ctx)."""

    __slots__ = ("task_id", "call_index", "epoch", "function", "scratch_dir", "deadline",
                 "traceparent", "_call", "_stderr", "_logger", "_ex")

    def __init__(self, call, stderr, executor):
        self.task_id = call.task_id
        self.call_index = call.call_index
        self.epoch = call.epoch
        self.function = call.function
        self.scratch_dir = call.scratch_dir
        self.deadline = call.deadline  # absolute time.monotonic() value; inf = none
        self.traceparent = call.traceparent
        self._call = call
        self._stderr = stderr
        self._logger = None
        self._ex = executor

    @property
    def logger(self):
        """A logging.Logger writing to this call's captured stderr (level INFO)."""
        if self._logger is None:
            lg = logging.Logger("worker.fn.%s" % self.function, logging.INFO)
            h = logging.StreamHandler(self._stderr)
            h.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
            lg.addHandler(h)
            lg.propagate = False
            self._logger = lg
        return self._logger

    @property
    def cancelled(self):
        """True once the Worker sent CANCEL for this call."""
        return self._call.cancelled

    def check_cancelled(self):
        """Raises worker.Cancelled when the Worker cancelled this call."""
        if self._call.cancelled:
            raise worker.Cancelled("call cancelled by the worker")

    def remaining(self):
        """Seconds left before the deadline (inf when the call has none; may be < 0)."""
        return self.deadline - time.monotonic()

    def call(self, fn, args, entrypoint=None):
        """Runs one child call and returns its value; raises worker.SubcallError when it
        failed. `fn` is a function name; None or "" means this call's function (same
        epoch, same entrypoint). `entrypoint` ("module:attr") defaults to this call's for
        the same function and to main:handler for another. `args` is JSON-serialisable,
        or bytes (sent raw). While it waits, this executor runs other calls (the child
        itself, possibly)."""
        ok, value = self._ex.subcalls(self._call, fn, (args,), entrypoint)[0]
        if not ok:
            raise value
        return value

    def map(self, fn, items, return_exceptions=False, entrypoint=None):
        """Runs one child call per item (concurrently, as the Worker schedules them) and
        returns their values in order. Raises worker.SubcallError for the first failed
        child, or with return_exceptions=True puts the SubcallError in its place. Items
        are JSON-serialisable, or all bytes (sent raw). `fn` and `entrypoint` as for
        call()."""
        out = []
        for ok, value in self._ex.subcalls(self._call, fn, items, entrypoint):
            if not ok and not return_exceptions:
                raise value
            out.append(value)
        return out


class FunctionLoadError(Exception):
    pass


_DOTTED = re.compile(r"\A[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*\Z")


class Loader(object):
    """Imports each code_dir in its own namespace and caches the entrypoints.

    Every code_dir becomes a synthetic package named _wk_code_<hash of the path>, whose
    __path__ is [code_dir]; entrypoint "mod.sub:attr" imports <package>.mod.sub. The
    code_dir is on sys.path only while the entry module is imported, so plain
    `import helper` of a sibling module at the module's top level works too; such
    modules are then removed from sys.modules so that another epoch gets its own copy.
    """

    def __init__(self):
        self._entries = {}

    def load(self, code_dir, entrypoint):
        key = (code_dir, entrypoint)
        fn = self._entries.get(key)
        if fn is not None:
            return fn
        modname, sep, attr = entrypoint.partition(":")
        if not sep or not _DOTTED.match(modname) or not _DOTTED.match(attr):
            raise FunctionLoadError("entrypoint %r is not of the form 'module:attr' (dotted "
                                    "Python identifiers, e.g. main:handler)" % entrypoint)
        if not os.path.isabs(code_dir) or not os.path.isdir(code_dir):
            raise FunctionLoadError("code_dir %r is not an absolute path to a directory" % code_dir)
        pkg = self._package(code_dir)
        mod = self._import(code_dir, pkg + "." + modname)
        obj = mod
        for part in attr.split("."):
            try:
                obj = getattr(obj, part)
            except AttributeError:
                raise FunctionLoadError("module %r of %s has no attribute %r"
                                        % (modname, code_dir, attr)) from None
        if not callable(obj):
            raise FunctionLoadError("%s in %s is not callable" % (entrypoint, code_dir))
        self._entries[key] = obj
        return obj

    @staticmethod
    def _package(code_dir):
        name = "_wk_code_" + hashlib.sha1(os.fsencode(code_dir)).hexdigest()[:16]
        if name not in sys.modules:
            spec = importlib.machinery.ModuleSpec(name, None, is_package=True)
            spec.submodule_search_locations = [code_dir]
            pkg = importlib.util.module_from_spec(spec)
            pkg.__path__ = [code_dir]
            sys.modules[name] = pkg
        return name

    @staticmethod
    def _import(code_dir, fullname):
        importlib.invalidate_caches()
        before = set(sys.modules)
        sys.path.insert(0, code_dir)
        try:
            return importlib.import_module(fullname)
        finally:
            try:
                sys.path.remove(code_dir)
            except ValueError:
                pass
            prefix = os.path.join(code_dir, "")
            pkg = fullname.split(".", 1)[0]
            for name in set(sys.modules) - before:
                if name == pkg or name.startswith(pkg + "."):
                    continue
                f = getattr(sys.modules.get(name), "__file__", None) or ""
                if f.startswith(prefix):
                    del sys.modules[name]


# ---- the executor -----------------------------------------------------------------


_SHUTDOWN_ITEM = object()


class Executor(object):
    def __init__(self, sock, max_frame, capture_max, max_nesting=DEFAULT_MAX_NESTING):
        self.sock = sock
        self.max_frame = max_frame
        self.capture_max = capture_max
        self.max_nesting = max_nesting
        self.loader = Loader()
        self.main_ident = threading.get_ident()  # Executor is built on the main thread
        self.wlock = threading.Lock()  # the socket's write side
        self.olock = threading.Lock()  # obuf; taken inside wlock, never the other way
        self.obuf = []  # encoded RESULTs not written yet (main thread appends)
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
        self.reads = 0  # times the main thread read the socket (the watchdog's clock)
        self.fcv = threading.Condition(threading.Lock())
        self.idle = False  # the main thread blocks for input: the watchdog sleeps (fcv)
        self.cv = threading.Condition(threading.Lock())
        self.queue = collections.deque()  # _Call items and _SHUTDOWN_ITEM, in arrival order
        self.pending = {}  # call_id -> queued _Call
        self.running = []  # the running calls, outermost first (main thread only changes it)
        self.requests = {}  # request_id -> _Request awaiting its SUBCALLS_RESULT
        self.next_request_id = 1
        self.closed = False  # the Worker hung up
        self.shutdown_seen = False
        # process CPU seconds read at the end of the last call, while the main thread has
        # not waited since: the next call's start (one getrusage per call, not two)
        self.cpu_mark = None
        self.out = _Capture(capture_max)  # sys.stdout during calls
        self.err = _Capture(capture_max)  # sys.stderr during calls

    # -- writing (any thread) --

    def send(self, data):
        """Writes `data` now, after any buffered RESULTs (so frames keep their order)."""
        with self.wlock:
            with self.olock:
                if self.obuf:
                    self.flushed += len(self.obuf)
                    self.obuf.append(data)
                    data = b"".join(self.obuf)
                    del self.obuf[:]
                    self.obytes = 0
            self.sock.sendall(data)

    def send_quietly(self, data):
        try:
            self.send(data)
        except OSError:
            pass  # the Worker is gone; a read notices EOF

    def post(self, frame):
        """Buffers a RESULT (main thread); returns the bytes buffered."""
        with self.olock:
            self.obuf.append(frame)
            self.obytes += len(frame)
            return self.obytes

    def flush(self):
        """Writes the buffered RESULTs, if any."""
        with self.wlock:
            with self.olock:
                if not self.obuf:
                    return
                self.flushed += len(self.obuf)
                data = b"".join(self.obuf) if len(self.obuf) > 1 else self.obuf[0]
                del self.obuf[:]
                self.obytes = 0
            try:
                self.sock.sendall(data)
            except OSError:
                pass  # the Worker is gone; a read notices EOF

    def error_result(self, call_id, etype, message):
        return encode_result(call_id, STATUS_ERROR, CONTENT_JSON, b"", etype.encode(),
                             message.encode("utf-8", "replace"), b"", 0, 0, b"", b"")

    # -- reading (the holder of rlock) --

    def read_input(self, block):
        """Main thread, between calls: reads what the socket holds and handles its frames;
        with `block`, waits for input first. Does nothing while the watchdog reads."""
        if self.closed:
            return
        if not self.rlock.acquire(False):
            # the watchdog holds it; when blocking, take() saw it letting go: wait a moment
            if not block or not self.rlock.acquire(True, WATCH_PERIOD_S):
                return
        try:
            self.flushed = 0
            self.reads += 1
            if block:
                self.idle = True  # the watchdog has nothing to do until input comes
                try:
                    n = self.recv(0)
                finally:
                    with self.fcv:
                        self.idle = False
                        self.fcv.notify()
            else:
                try:
                    n = self.recv(socket.MSG_DONTWAIT)
                except BlockingIOError:
                    return
            self.feed(n)
        except ProtocolError as e:
            _log("protocol error from the worker: %s; exiting" % e)
            os._exit(2)
        finally:
            self.rlock.release()

    def recv(self, flags):
        """Bytes received into rspace (0 at EOF); retries EINTR."""
        while True:
            try:
                return self.sock.recv_into(self.rspace, RECV_SIZE, flags)
            except InterruptedError:
                continue
            except BlockingIOError:
                raise
            except OSError:
                return 0

    def feed(self, n):
        """Handles the `n` bytes just received into rspace (n == 0: the Worker hung up)."""
        if n == 0:
            self.mark_closed()
            return
        if self.rbuf:
            self.rbuf += memoryview(self.rspace)[:n]
            used = self.dispatch(self.rbuf, len(self.rbuf))
            if used:
                del self.rbuf[:used]
        else:
            used = self.dispatch(self.rspace, n)
            if used < n:  # a frame not complete yet: keep its start
                self.rbuf += memoryview(self.rspace)[used:n]

    def dispatch(self, buf, n):
        """Handles every complete frame in buf[:n]; returns the bytes they took. Parsed
        frames keep no reference into buf."""
        off = 0
        calls = []
        replies = []
        now = time.monotonic()
        with memoryview(buf) as mv:
            while n - off >= 4:
                (length,) = _U32.unpack_from(mv, off)
                if length > self.max_frame:
                    raise ProtocolError("frame length %d above the limit %d" % (length, self.max_frame))
                if length == 0:
                    raise ProtocolError("frame length 0")
                if n - off - 4 < length:
                    break
                ftype = mv[off + 4]
                body, end = off + 5, off + 4 + length
                off = end
                if ftype == CALL:
                    calls.append(parse_call(mv, body, end, now))
                    continue
                if calls:  # keep order: CALLs before this frame are queued first
                    self.enqueue(calls, replies)
                    calls = []
                if ftype == CANCEL:
                    self.cancel(_parse_u64_body(mv, body, end, "CANCEL"), replies)
                elif ftype == PING:
                    replies.append(encode_u64_frame(PONG, _parse_u64_body(mv, body, end, "PING")))
                elif ftype == PONG:
                    _parse_u64_body(mv, body, end, "PONG")
                elif ftype == SUBCALLS_RESULT:
                    self.deliver(*parse_subcalls_result(mv, body, end))
                elif ftype == STACK_REQUEST:
                    call_id = _parse_u64_body(mv, body, end, "STACK_REQUEST")
                    replies.append(encode_stack(call_id, self.format_stack(call_id)))
                elif ftype == SHUTDOWN:
                    if end != body:
                        raise ProtocolError("SHUTDOWN has a body")
                    with self.cv:
                        if not self.shutdown_seen:
                            self.shutdown_seen = True
                            self.queue.append(_SHUTDOWN_ITEM)
                            self.cv.notify()
                elif ftype in _TO_WORKER_ONLY:
                    raise ProtocolError("frame type %d travels executor -> worker only" % ftype)
                else:
                    raise ProtocolError("unknown frame type %d" % ftype)
        if calls:
            self.enqueue(calls, replies)
        if replies:
            self.send_quietly(b"".join(replies))
        return off

    def enqueue(self, calls, replies):
        with self.cv:
            if self.shutdown_seen:
                for c in calls:
                    replies.append(self.error_result(c.call_id, "ShuttingDown",
                                                     "CALL after SHUTDOWN: not run"))
                return
            for c in calls:
                self.pending[c.call_id] = c
                self.queue.append(c)
            self.cv.notify()

    def cancel(self, call_id, replies):
        with self.cv:
            for cur in self.running:
                if cur.call_id == call_id:
                    # cooperative: ctx.cancelled / ctx.check_cancelled(); a call waiting
                    # for subcalls stops waiting (raises worker.Cancelled)
                    cur.cancelled = True
                    self.cv.notify()
                    return
            c = self.pending.pop(call_id, None)
            if c is None:
                return  # finished already: its RESULT is on the way
            c.cancelled = True  # the main thread skips it
        replies.append(self.error_result(call_id, "Cancelled", "cancelled before it started"))

    def deliver(self, request_id, children):
        """A SUBCALLS_RESULT arrived: wakes the call waiting for it."""
        with self.cv:
            req = self.requests.pop(request_id, None)
            if req is None:
                return  # its call stopped waiting (cancelled): nobody wants it
            if len(children) != req.count:
                raise ProtocolError("SUBCALLS_RESULT %d has %d children, the request had %d"
                                    % (request_id, len(children), req.count))
            req.children = children
            req.wait.outstanding -= 1
            if req.wait.outstanding == 0:
                self.cv.notify()

    def format_stack(self, call_id):
        """The main thread's Python stack (UTF-8) when call `call_id` is running, else b""."""
        with self.cv:
            ids = [c.call_id for c in self.running]
        if call_id not in ids:
            return b""
        try:
            frame = sys._current_frames().get(self.main_ident)
            if frame is None:
                return b""
            entries = traceback.extract_stack(frame)
            del frame
            skip = 0  # the executor's own outermost frames (main, run, serve, execute)
            while skip < len(entries) - 1 and entries[skip].filename == _THIS_FILE:
                skip += 1
            last = len(entries)  # and its innermost ones when the main thread asks (take, read)
            if threading.get_ident() == self.main_ident:
                while last > skip + 1 and entries[last - 1].filename == _THIS_FILE:
                    last -= 1
            text = ("Python stack of call %d (executor pid %d, main thread, most recent call "
                    "last; running calls, outermost first: %s):\n"
                    % (call_id, os.getpid(), ", ".join(str(i) for i in ids)))
            text += "".join(traceback.format_list(entries[skip:last]))
        except Exception as e:  # never let a formatting problem kill the reader
            text = "cannot format the stack of call %d: %r\n" % (call_id, e)
        return _cap_text(text)

    def mark_closed(self):
        """The Worker hung up: running calls are cancelled, queued ones dropped."""
        with self.cv:
            self.closed = True
            for c in self.running:
                c.cancelled = True
            self.queue.clear()
            self.pending.clear()
            self.cv.notify()

    # -- watchdog thread --

    def watchdog(self):
        """Ticks every WATCH_PERIOD_S while the main thread runs calls: writes buffered
        RESULTs, and when the main thread has not read the socket for a whole tick (a long
        call, or a long queue of slower ones), reads it until that call ends. After the
        Worker hung up, gives a running call EOF_GRACE_S, then leaves regardless."""
        try:
            last = -1
            while True:
                with self.fcv:
                    while self.idle and not self.closed:
                        self.fcv.wait()
                time.sleep(WATCH_PERIOD_S)
                if self.closed:
                    break
                if self.obuf:
                    self.flush()
                reads = self.reads
                if reads != last:
                    last = reads
                    continue
                progress = self.progress
                with self.cv:  # no read for a whole tick, in a call: read for the main thread
                    if self.in_take or not self.rlock.acquire(False):
                        continue
                    self.watch_reading = True
                try:
                    self.read_while_running(progress)
                finally:
                    self.rlock.release()
                    with self.cv:
                        self.watch_reading = False
                        self.cv.notify()
                if self.closed:
                    break
            time.sleep(EOF_GRACE_S)
            _log("worker closed the socket and the running call did not finish; exiting")
            os._exit(0)
        except ProtocolError as e:
            _log("protocol error from the worker: %s; exiting" % e)
            os._exit(2)
        except BaseException as e:  # a bug here must not leave a zombie executor
            _log("watchdog thread failed: %r; exiting" % (e,))
            os._exit(3)

    def read_while_running(self, progress):
        """Watchdog, holding rlock: reads and handles input until the main thread takes
        another call or waits for input (or the Worker hangs up)."""
        poller = select.poll()
        poller.register(self.sock, select.POLLIN)
        timeout_ms = max(int(WATCH_PERIOD_S * 1000), 1)
        while not self.closed and self.progress == progress and not self.in_take:
            if self.obuf:
                self.flush()
            try:
                if not poller.poll(timeout_ms):
                    continue
                n = self.recv(socket.MSG_DONTWAIT)
            except (InterruptedError, BlockingIOError):
                continue
            self.feed(n)

    # -- main thread --

    def run(self):
        self.serve(None)
        self.flush()
        return 0

    def serve(self, wait):
        """Runs queued calls, one at a time. With `wait` None (the outer level): until
        SHUTDOWN or EOF. With a _Wait (a call waiting for its subcalls): until its
        SUBCALLS_RESULTs are in, its call is cancelled, or EOF; the calls it runs
        meanwhile are nested inside the waiting one."""
        while True:
            item = self.take(wait)
            if item is None:
                return
            if len(self.running) >= self.max_nesting:
                self.post(self.error_result(
                    item.call_id, "NestingTooDeep",
                    "%d calls already running in this executor (waiting for subcalls); "
                    "limit %d" % (len(self.running), self.max_nesting)))
                continue
            if self.post(self.execute(item)) >= FLUSH_BYTES:
                self.flush()

    def take(self, wait):
        """The next call to run, or None when serve() should return. Reads input between
        calls; RESULTs are written once more than half of the calls held have run (the
        Worker refills the pipeline while the rest run), and before the main thread
        blocks for input."""
        cv = self.cv
        queue = self.queue
        while True:
            nres = len(self.obuf)
            if nres >= EARLY_FLUSH_MIN and nres > len(queue):
                if self.flushed:  # the Worker's answer to the last write may be in
                    self.read_input(False)
                if len(self.obuf) > len(queue):
                    self.flush()
            with cv:
                self.in_take = True
                item = None
                stop = False
                while True:
                    if wait is not None:
                        if wait.outstanding == 0 or wait.call.cancelled or self.closed:
                            stop = True
                            break
                    elif self.closed:
                        self.in_take = False
                        return None
                    if queue and (wait is None or queue[0] is not _SHUTDOWN_ITEM):
                        item = queue.popleft()
                        if item is _SHUTDOWN_ITEM:
                            self.in_take = False
                            return None  # every CALL before it has run
                        if item.cancelled:
                            item = None
                            continue  # already answered
                        if self.pending.get(item.call_id) is item:
                            del self.pending[item.call_id]
                        break
                    if self.obuf or not self.watch_reading:
                        break
                    cv.wait()  # the watchdog reads: it wakes us when it queues or lets go
                if item is not None:
                    self.in_take = False
                    self.progress += 1
                    return item
            if stop:
                self.flush()  # the waiting call resumes: nested RESULTs go out now
                with cv:
                    self.in_take = False
                return None
            if self.obuf:
                self.flush()
                continue
            self.cpu_mark = None  # waiting: the next call takes its own reading
            self.read_input(True)

    def subcalls(self, call, fn, items, entrypoint):
        """ctx.call / ctx.map: sends SUBCALLS for `items` and runs other calls until the
        SUBCALLS_RESULTs are in. Returns [(True, value) or (False, SubcallError)]."""
        if threading.get_ident() != self.main_ident or not self.running or self.running[-1] is not call:
            raise RuntimeError("ctx.call/ctx.map must be called from the call's own thread "
                               "while the call runs")
        items = list(items)
        if not items:
            return []
        if fn is None:
            fn = ""
        if not isinstance(fn, str):
            raise TypeError("function name must be a str, not %s" % type(fn).__name__)
        if entrypoint is None:
            entrypoint = "" if fn in ("", call.function) else DEFAULT_ENTRYPOINT
        elif not isinstance(entrypoint, str):
            raise TypeError("entrypoint must be a str, not %s" % type(entrypoint).__name__)
        if all(isinstance(x, (bytes, bytearray, memoryview)) for x in items):
            ctype = CONTENT_BYTES
            args = [bytes(x) for x in items]
        else:
            ctype = CONTENT_JSON
            args = [_json_encode(x).encode("utf-8") for x in items]
        fn_b = fn.encode("utf-8")
        ep_b = entrypoint.encode("utf-8")
        # one SUBCALLS frame per run of args that fits the frame limit
        head = subcalls_head_size(fn_b, ep_b)
        limit = 4 + self.max_frame  # a whole frame, length prefix included
        chunks = []
        cur, size = [], head
        for i, a in enumerate(args):
            if head + 4 + len(a) > limit:
                raise ValueError("subcall argument %d is %d bytes encoded: above the frame limit "
                                 "of %d bytes" % (i, len(a), self.max_frame))
            if cur and size + 4 + len(a) > limit:
                chunks.append(cur)
                cur, size = [], head
            cur.append(a)
            size += 4 + len(a)
        chunks.append(cur)
        wait = _Wait(call, len(chunks))
        reqs = []
        frames = []
        with self.cv:
            for chunk in chunks:
                req = _Request(self.next_request_id, len(chunk), wait)
                self.next_request_id += 1
                self.requests[req.request_id] = req
                reqs.append(req)
                frames.append(encode_subcalls(call.call_id, req.request_id, fn_b, ep_b, ctype, chunk))
        self.send_quietly(b"".join(frames))
        self.cpu_mark = None  # the waiting call ran since the last reading
        self.serve(wait)
        self.cpu_mark = None
        if wait.outstanding:
            with self.cv:
                for req in reqs:
                    self.requests.pop(req.request_id, None)
            if self.closed:
                raise worker.Cancelled("the worker closed the connection while the call "
                                       "waited for subcalls")
            raise worker.Cancelled("call cancelled by the worker while waiting for subcalls")
        out = []
        for req in reqs:
            for status, ctype_k, output, etype, emsg, tb in req.children:
                if status == STATUS_OK:
                    if ctype_k == CONTENT_BYTES:
                        out.append((True, output))
                        continue
                    try:
                        out.append((True, json.loads(output.decode("utf-8"))))
                    except ValueError as e:
                        out.append((False, worker.SubcallError(
                            "OutputDecodeError", "child output is not valid JSON: %s" % e)))
                    continue
                out.append((False, worker.SubcallError(
                    etype.decode("utf-8", "replace"), emsg.decode("utf-8", "replace"),
                    tb.decode("utf-8", "replace"), status == STATUS_RETRYABLE)))
        return out

    def execute(self, call):
        if call.deadline <= time.monotonic():
            return self.error_result(call.call_id, "DeadlineExceeded",
                                     "deadline passed before the call started")
        out, err = self.out, self.err
        out.push()
        err.push()
        call.nested_cpu = 0.0
        with self.cv:
            self.running.append(call)
        cpu0 = self.cpu_mark
        if cpu0 is None:
            ru0 = resource.getrusage(_RUSAGE_SELF)
            cpu0 = ru0.ru_utime + ru0.ru_stime
        else:
            self.cpu_mark = None
        status, ctype, output = STATUS_OK, CONTENT_JSON, b""
        etype = emsg = tb = ""
        saved = sys.stdout, sys.stderr
        sys.stdout, sys.stderr = out, err
        try:
            stage = "load"
            try:
                fn = self.loader.load(call.code_dir, call.entrypoint or DEFAULT_ENTRYPOINT)
                stage = "args"
                if call.content_type == CONTENT_JSON:
                    args = json.loads(call.args.decode("utf-8"))
                else:
                    args = call.args
                stage = "call"
                value = fn(args, Context(call, err, self))
                stage = "output"
                if isinstance(value, (bytes, bytearray, memoryview)):
                    output, ctype = bytes(value), CONTENT_BYTES
                else:
                    output = _json_encode(value).encode("utf-8")
            except BaseException as e:  # SystemExit and KeyboardInterrupt fail the call only
                status, ctype, output = STATUS_ERROR, CONTENT_JSON, b""
                etype, emsg, tb = self.describe(e, stage, call)
                if stage == "call" and isinstance(e, worker.Retryable):
                    status = STATUS_RETRYABLE
        finally:
            sys.stdout, sys.stderr = saved
            with self.cv:
                self.running.pop()
        ru1 = resource.getrusage(_RUSAGE_SELF)
        cpu1 = ru1.ru_utime + ru1.ru_stime
        self.cpu_mark = cpu1  # the next call starts here unless the main thread waits first
        cpu = cpu1 - cpu0
        if self.running:  # nested: the waiting call does not pay for this one
            self.running[-1].nested_cpu += cpu
        cpu_us = int(round((cpu - call.nested_cpu) * 1e6))
        max_rss_kb = ru1.ru_maxrss  # kB on Linux
        if status == STATUS_OK:
            fields = [call.call_id, status, ctype, output, b"", b"", b"", max(cpu_us, 0),
                      max(max_rss_kb, 0), out.pop(), err.pop()]
        else:
            fields = [call.call_id, status, ctype, output, etype.encode("utf-8", "replace"),
                      _cap_text(emsg), _cap_text(tb), max(cpu_us, 0), max(max_rss_kb, 0),
                      out.pop(), err.pop()]
        frame = encode_result(*fields)
        if len(frame) - 4 > self.max_frame:
            fields[1:7] = [STATUS_ERROR, CONTENT_JSON, b"", b"OutputTooLarge",
                           ("RESULT of %d bytes exceeds the frame limit of %d bytes"
                            % (len(frame) - 4, self.max_frame)).encode(), b""]
            frame = encode_result(*fields)
        return frame

    @staticmethod
    def describe(e, stage, call):
        """(type, message, traceback) of a failed call; the executor's own frame is left
        out of the traceback."""
        if stage == "load":
            ep = call.entrypoint or DEFAULT_ENTRYPOINT
            etype = "FunctionLoadError"
            msg = "cannot load %s from %s: %s: %s" % (ep, call.code_dir, type(e).__name__, e)
        elif stage == "args":
            etype = "ArgsDecodeError"
            msg = "args are not valid JSON: %s" % (e,)
        elif stage == "output":
            etype = "OutputEncodeError"
            msg = "return value is not JSON-serialisable (return bytes for raw output): %s" % (e,)
        else:
            etype = type(e).__name__
            msg = str(e)
        tb_obj = e.__traceback__.tb_next if e.__traceback__ is not None else None
        tb = "".join(traceback.format_exception(type(e), e, tb_obj))
        return etype, msg, tb


def _cap_text(s):
    b = s.encode("utf-8", "replace")
    if len(b) <= ERROR_TEXT_MAX:
        return b
    marker = b"\n[... truncated]"
    return b[:ERROR_TEXT_MAX - len(marker)] + marker


def _set_rlimit(which, value, flag):
    """Sets soft and hard limit `which` to `value` (not above the current hard limit,
    which an unprivileged process cannot raise). False, after a log line, on failure."""
    try:
        soft, hard = resource.getrlimit(which)
        if hard != resource.RLIM_INFINITY and value > hard:
            _log("%s %d is above the hard limit %d; using %d" % (flag, value, hard, hard))
            value = hard
        resource.setrlimit(which, (value, value))
        return True
    except (ValueError, OSError) as e:
        _log("cannot apply %s: %s" % (flag, e))
        return False


def main(argv=None):
    ap = argparse.ArgumentParser(description="Python executor of the Worker")
    ap.add_argument("--socket", required=True, help="the Worker's Unix-domain socket path")
    ap.add_argument("--max-frame", type=int, default=DEFAULT_MAX_FRAME,
                    help="largest frame accepted or sent, bytes after the length prefix")
    ap.add_argument("--capture-max", type=int, default=DEFAULT_CAPTURE_MAX,
                    help="bytes of stdout and of stderr kept per call")
    ap.add_argument("--pycache-prefix", default=None,
                    help="directory for compiled bytecode; without it none is written, so "
                         "the code store is never modified")
    ap.add_argument("--max-nesting", type=int, default=DEFAULT_MAX_NESTING,
                    help="most calls running at once (calls waiting for subcalls run other "
                         "calls nested); a CALL beyond it is answered NestingTooDeep")
    ap.add_argument("--rlimit-as-mb", type=int, default=0,
                    help="RLIMIT_AS (address space) in MiB; 0 leaves it unchanged")
    ap.add_argument("--rlimit-nofile", type=int, default=0,
                    help="RLIMIT_NOFILE (open files); 0 leaves it unchanged")
    ap.add_argument("--rlimit-cpu-s", type=int, default=0,
                    help="RLIMIT_CPU (CPU seconds over the executor's life); 0 leaves it "
                         "unchanged")
    opts = ap.parse_args(argv)
    if opts.pycache_prefix:
        sys.pycache_prefix = opts.pycache_prefix
    else:
        sys.dont_write_bytecode = True
    if not (1024 <= opts.max_frame <= 0xFFFFFFFF) or opts.capture_max < 64:
        ap.error("--max-frame must be 1024..4294967295 and --capture-max at least 64")
    if not (1 <= opts.max_nesting <= 100):
        ap.error("--max-nesting must be 1..100")
    if min(opts.rlimit_as_mb, opts.rlimit_nofile, opts.rlimit_cpu_s) < 0:
        ap.error("--rlimit-* values must be 0 (unchanged) or positive")
    for value, which, unit, flag in ((opts.rlimit_as_mb, resource.RLIMIT_AS, 1 << 20, "--rlimit-as-mb"),
                                     (opts.rlimit_nofile, resource.RLIMIT_NOFILE, 1, "--rlimit-nofile"),
                                     (opts.rlimit_cpu_s, resource.RLIMIT_CPU, 1, "--rlimit-cpu-s")):
        if value and not _set_rlimit(which, value * unit, flag):
            return 1

    # The Worker owns our lifetime (SHUTDOWN, EOF, SIGTERM/SIGKILL): a terminal Ctrl-C
    # aimed at the Worker must not kill calls under it.
    signal.signal(signal.SIGINT, signal.SIG_IGN)

    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(opts.socket)
    except OSError as e:
        _log("cannot connect to %s: %s" % (opts.socket, e))
        return 1
    ex = Executor(sock, opts.max_frame, opts.capture_max, opts.max_nesting)
    try:
        ex.send(encode_hello(os.getpid()))
    except OSError as e:
        _log("cannot send HELLO: %s" % e)
        return 1
    # small stacks for our own threads (the default 8 MiB counts against RLIMIT_AS);
    # threads the user's code starts get the default again
    old_stack = threading.stack_size(THREAD_STACK)
    try:
        threading.Thread(target=ex.watchdog, name="wk-watchdog", daemon=True).start()
    finally:
        threading.stack_size(old_stack)
    rc = ex.run()
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()
    return rc


if __name__ == "__main__":
    sys.exit(main())

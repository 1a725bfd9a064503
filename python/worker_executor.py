#!/usr/bin/env python3
"""worker_executor.py: the Python executor process of the Worker.

    python3 worker_executor.py --socket PATH [--max-frame BYTES] [--capture-max BYTES]
                               [--pycache-prefix DIR]

Connects to the Worker's Unix-domain socket PATH, sends HELLO, then runs the CALL frames
it receives, one at a time and in order, answering each with exactly one RESULT frame.
The wire format is in docs/executor-protocol.md (C side: src/adapters/wk_frame.c).

Threads: the main thread runs calls (user code sees an ordinary main thread); a reader
thread owns the socket's read side, so PING is answered and CANCEL is noted even while a
call runs. Writes are serialised by a lock.

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
import signal
import socket
import struct
import sys
import threading
import time
import traceback

import worker  # python/worker/__init__.py, next to this file (sys.path[0])

PROTOCOL_VERSION = 1

HELLO, CALL, RESULT, CANCEL, PING, PONG, SHUTDOWN = 1, 2, 3, 4, 5, 6, 7

CONTENT_JSON, CONTENT_BYTES = 0, 1
STATUS_OK, STATUS_ERROR, STATUS_RETRYABLE = 0, 1, 2

DEFAULT_MAX_FRAME = 16 << 20
DEFAULT_CAPTURE_MAX = 64 << 10
ERROR_TEXT_MAX = 64 << 10  # cap on error message and traceback, each
EOF_GRACE_S = 2.0  # after the Worker hung up, a running call gets this long to finish
RECV_SIZE = 256 << 10
DEFAULT_ENTRYPOINT = "main:handler"

_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
_PREFIX_TYPE = struct.Struct("<IB")
_RESULT_HEAD = struct.Struct("<QBB")
_RUSAGE_SELF = resource.RUSAGE_SELF


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
    body = b"".join((
        _RESULT_HEAD.pack(call_id, status, content_type),
        _bstr(output), _bstr(error_type), _bstr(error_message), _bstr(tb),
        _U64.pack(cpu_us), _U64.pack(max_rss_kb),
        _bstr(out), _bstr(err),
    ))
    return _frame(RESULT, body)


class _Call(object):
    """A CALL frame as received, plus its queue state."""

    __slots__ = ("call_id", "task_id", "function", "epoch", "code_dir", "entrypoint",
                 "content_type", "call_index", "deadline", "scratch_dir", "traceparent",
                 "args", "cancelled")


def _take(mv, pos, end, n):
    if n > end - pos:
        raise ProtocolError("a field runs past the end of its frame")
    return pos + n


def _get_bytes(mv, pos, end):
    p = _take(mv, pos, end, 4)
    (n,) = _U32.unpack_from(mv, pos)
    q = _take(mv, p, end, n)
    return bytes(mv[p:q]), q


def _get_str(mv, pos, end):
    b, pos = _get_bytes(mv, pos, end)
    return b.decode("utf-8", "surrogateescape"), pos


def parse_call(mv, pos, end, now):
    c = _Call()
    p = _take(mv, pos, end, 8)
    (c.call_id,) = _U64.unpack_from(mv, pos)
    c.task_id, p = _get_str(mv, p, end)
    c.function, p = _get_str(mv, p, end)
    q = _take(mv, p, end, 8)
    (c.epoch,) = _U64.unpack_from(mv, p)
    c.code_dir, p = _get_bytes(mv, q, end)
    c.code_dir = os.fsdecode(c.code_dir)
    c.entrypoint, p = _get_str(mv, p, end)
    q = _take(mv, p, end, 9)
    c.content_type = mv[p]
    (c.call_index,) = _U32.unpack_from(mv, p + 1)
    (deadline_ms,) = _U32.unpack_from(mv, p + 5)
    c.scratch_dir, p = _get_bytes(mv, q, end)
    c.scratch_dir = os.fsdecode(c.scratch_dir)
    c.traceparent, p = _get_str(mv, p, end)
    c.args, p = _get_bytes(mv, p, end)
    if p != end:
        raise ProtocolError("bytes left in the CALL frame after its last field")
    if c.content_type not in (CONTENT_JSON, CONTENT_BYTES):
        raise ProtocolError("CALL content_type %d out of range" % c.content_type)
    c.deadline = now + deadline_ms / 1000.0 if deadline_ms else math.inf
    c.cancelled = False
    return c


def _parse_u64_body(mv, pos, end, name):
    if end - pos != 8:
        raise ProtocolError("%s body is %d bytes, not 8" % (name, end - pos))
    return _U64.unpack_from(mv, pos)[0]


# ---- output capture ---------------------------------------------------------------


class _Capture(object):
    """A text stream that keeps the first `cap` bytes written to it (UTF-8) and counts
    the rest. Stands in for sys.stdout / sys.stderr during a call."""

    encoding = "utf-8"
    errors = "backslashreplace"
    closed = False

    def __init__(self, cap):
        self._cap = cap
        self._buf = bytearray()
        self._dropped = 0
        self.buffer = _CaptureBinary(self)

    def reset(self):
        """Empties the stream for the next call. One pair of streams serves every call, so
        a logging handler a module bound to sys.stderr at import time keeps writing into
        the current call's capture."""
        del self._buf[:]
        self._dropped = 0

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
                 "traceparent", "_call", "_stderr", "_logger")

    def __init__(self, call, stderr):
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

    def call(self, fn, args):
        raise NotImplementedError("subcalls arrive in a later version")

    def map(self, fn, items):
        raise NotImplementedError("subcalls arrive in a later version")


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
    def __init__(self, sock, max_frame, capture_max):
        self.sock = sock
        self.max_frame = max_frame
        self.capture_max = capture_max
        self.loader = Loader()
        self.wlock = threading.Lock()
        self.cv = threading.Condition(threading.Lock())
        self.queue = collections.deque()  # _Call items and _SHUTDOWN_ITEM, in arrival order
        self.pending = {}  # call_id -> queued _Call
        self.current = None  # the _Call being run
        self.closed = False  # the Worker hung up
        self.shutdown_seen = False
        self.out = _Capture(capture_max)  # sys.stdout during calls
        self.err = _Capture(capture_max)  # sys.stderr during calls

    # -- writing (any thread) --

    def send(self, data):
        with self.wlock:
            self.sock.sendall(data)

    def send_quietly(self, data):
        try:
            self.send(data)
        except OSError:
            pass  # the Worker is gone; the reader notices EOF

    def error_result(self, call_id, etype, message):
        return encode_result(call_id, STATUS_ERROR, CONTENT_JSON, b"", etype.encode(),
                             message.encode("utf-8", "replace"), b"", 0, 0, b"", b"")

    # -- reader thread --

    def reader(self):
        buf = bytearray()
        try:
            while True:
                try:
                    chunk = self.sock.recv(RECV_SIZE)
                except InterruptedError:
                    continue
                except OSError:
                    chunk = b""
                if not chunk:
                    self.on_eof()
                    return
                buf += chunk
                used = self.dispatch(buf)
                if used:
                    del buf[:used]
        except ProtocolError as e:
            _log("protocol error from the worker: %s; exiting" % e)
            os._exit(2)
        except BaseException as e:  # a bug here must not leave a zombie executor
            _log("reader thread failed: %r; exiting" % (e,))
            os._exit(3)

    def dispatch(self, buf):
        """Handles every complete frame in buf; returns the bytes they took."""
        off = 0
        n = len(buf)
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
                elif ftype == CANCEL:
                    if calls:  # keep order: CALLs before this CANCEL are queued first
                        self.enqueue(calls, replies)
                        calls = []
                    self.cancel(_parse_u64_body(mv, body, end, "CANCEL"), replies)
                elif ftype == PING:
                    replies.append(encode_u64_frame(PONG, _parse_u64_body(mv, body, end, "PING")))
                elif ftype == PONG:
                    _parse_u64_body(mv, body, end, "PONG")
                elif ftype == SHUTDOWN:
                    if end != body:
                        raise ProtocolError("SHUTDOWN has a body")
                    if calls:
                        self.enqueue(calls, replies)
                        calls = []
                    with self.cv:
                        if not self.shutdown_seen:
                            self.shutdown_seen = True
                            self.queue.append(_SHUTDOWN_ITEM)
                            self.cv.notify()
                elif ftype in (HELLO, RESULT):
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
            cur = self.current
            if cur is not None and cur.call_id == call_id:
                cur.cancelled = True  # cooperative: ctx.cancelled / ctx.check_cancelled()
                return
            c = self.pending.pop(call_id, None)
            if c is None:
                return  # finished already: its RESULT is on the way
            c.cancelled = True  # the main thread skips it
        replies.append(self.error_result(call_id, "Cancelled", "cancelled before it started"))

    def on_eof(self):
        with self.cv:
            self.closed = True
            if self.current is not None:
                self.current.cancelled = True
            self.queue.clear()
            self.pending.clear()
            self.cv.notify()
        # the Worker is gone; give a running call a moment, then leave regardless
        time.sleep(EOF_GRACE_S)
        _log("worker closed the socket and the running call did not finish; exiting")
        os._exit(0)

    # -- main thread --

    def run(self):
        while True:
            with self.cv:
                while not self.queue and not self.closed:
                    self.cv.wait()
                if self.closed:
                    return 0
                item = self.queue.popleft()
                if item is _SHUTDOWN_ITEM:
                    return 0
                if item.cancelled:
                    continue  # the reader already answered it
                if self.pending.get(item.call_id) is item:
                    del self.pending[item.call_id]
                self.current = item
            frame = self.execute(item)
            with self.cv:
                self.current = None
            try:
                self.send(frame)
            except OSError:
                return 0  # the Worker is gone

    def execute(self, call):
        if call.deadline <= time.monotonic():
            return self.error_result(call.call_id, "DeadlineExceeded",
                                     "deadline passed before the call started")
        out, err = self.out, self.err
        out.reset()
        err.reset()
        ru0 = resource.getrusage(_RUSAGE_SELF)
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
                value = fn(args, Context(call, err))
                stage = "output"
                if isinstance(value, (bytes, bytearray, memoryview)):
                    output, ctype = bytes(value), CONTENT_BYTES
                else:
                    output = json.dumps(value, ensure_ascii=False, allow_nan=False,
                                        separators=(",", ":")).encode("utf-8")
            except BaseException as e:  # SystemExit and KeyboardInterrupt fail the call only
                status, ctype, output = STATUS_ERROR, CONTENT_JSON, b""
                etype, emsg, tb = self.describe(e, stage, call)
                if stage == "call" and isinstance(e, worker.Retryable):
                    status = STATUS_RETRYABLE
        finally:
            sys.stdout, sys.stderr = saved
        ru1 = resource.getrusage(_RUSAGE_SELF)
        cpu_us = int(round(((ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)) * 1e6))
        max_rss_kb = ru1.ru_maxrss  # kB on Linux
        fields = [call.call_id, status, ctype, output, etype.encode("utf-8", "replace"),
                  _cap_text(emsg), _cap_text(tb), max(cpu_us, 0), max(max_rss_kb, 0),
                  out.getvalue(), err.getvalue()]
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
    opts = ap.parse_args(argv)
    if opts.pycache_prefix:
        sys.pycache_prefix = opts.pycache_prefix
    else:
        sys.dont_write_bytecode = True
    if not (1024 <= opts.max_frame <= 0xFFFFFFFF) or opts.capture_max < 64:
        ap.error("--max-frame must be 1024..4294967295 and --capture-max at least 64")

    # The Worker owns our lifetime (SHUTDOWN, EOF, SIGTERM/SIGKILL): a terminal Ctrl-C
    # aimed at the Worker must not kill calls under it.
    signal.signal(signal.SIGINT, signal.SIG_IGN)

    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(opts.socket)
    except OSError as e:
        _log("cannot connect to %s: %s" % (opts.socket, e))
        return 1
    ex = Executor(sock, opts.max_frame, opts.capture_max)
    try:
        ex.send(encode_hello(os.getpid()))
    except OSError as e:
        _log("cannot send HELLO: %s" % e)
        return 1
    t = threading.Thread(target=ex.reader, name="wk-reader", daemon=True)
    t.start()
    rc = ex.run()
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()
    return rc


if __name__ == "__main__":
    sys.exit(main())

"""Subcalls: a running call asks for child calls (ctx.call / ctx.map) and waits for their
outcomes, running the CALLs that arrive meanwhile nested (docs/specs/executor-protocol.md §5).
The first use of ctx.scratch_dir asks the Worker for the task's scratch directory the
same way (SCRATCH, §5.1)."""

from __future__ import annotations

import threading

import worker  # python/worker/__init__.py, beside this package

from .protocol import (CONTENT_BYTES, CONTENT_JSON, DEFAULT_ENTRYPOINT, STATUS_OK,
                       STATUS_RETRYABLE, Call, ProtocolError, encode_scratch, encode_subcalls,
                       json_bytes, json_value, subcalls_head_size)
from .state import State


class Wait:
    """A running call waiting for the SUBCALLS_RESULTs of one ctx.call / ctx.map."""

    __slots__ = ("call", "outstanding")

    def __init__(self, call: Call, outstanding: int) -> None:
        self.call = call
        self.outstanding = outstanding  # SUBCALLS frames not answered yet


class Request:
    """One SUBCALLS frame in flight."""

    __slots__ = ("request_id", "count", "wait", "children")

    def __init__(self, request_id: int, count: int, wait: Wait) -> None:
        self.request_id = request_id
        self.count = count
        self.wait = wait
        self.children: list[tuple] | None = None  # [(status, content_type, output, etype, emsg, tb)] once answered


class ScratchRequest:
    """One SCRATCH frame in flight (in `requests` beside the SUBCALLS ones)."""

    __slots__ = ("request_id", "wait", "error", "done")

    def __init__(self, request_id: int, wait: Wait) -> None:
        self.request_id = request_id
        self.wait = wait
        self.error: str | None = None  # "" once the directory exists
        self.done = threading.Event()  # for a waiter that is not the call's own thread


def encode_args(items: list) -> tuple[int, list[bytes]]:
    """(content_type, encoded items): all bytes-like items are sent raw, else every item
    as compact JSON (raises what json raises for a non-JSON item)."""
    if all(isinstance(x, (bytes, bytearray, memoryview)) for x in items):
        return CONTENT_BYTES, [bytes(x) for x in items]
    return CONTENT_JSON, [json_bytes(x) for x in items]


def split_args(args: list[bytes], head: int, max_frame: int) -> list[list[bytes]]:
    """`args` cut into runs that each fit one SUBCALLS frame of `head` bytes before its
    args. Raises ValueError for an arg that cannot fit even alone."""
    limit = 4 + max_frame  # a whole frame, length prefix included
    chunks = []
    cur, size = [], head
    for i, a in enumerate(args):
        if head + 4 + len(a) > limit:
            raise ValueError(f"subcall argument {i} is {len(a)} bytes encoded: above the frame "
                             f"limit of {max_frame} bytes")
        if cur and size + 4 + len(a) > limit:
            chunks.append(cur)
            cur, size = [], head
        cur.append(a)
        size += 4 + len(a)
    chunks.append(cur)
    return chunks


def outcomes(children: list[tuple]) -> list[tuple[bool, object]]:
    """[(True, value) or (False, worker.SubcallError)] of a SUBCALLS_RESULT's children."""
    out = []
    for status, ctype, output, etype, emsg, tb in children:
        if status == STATUS_OK:
            if ctype == CONTENT_BYTES:
                out.append((True, output))
                continue
            try:
                out.append((True, json_value(output)))
            except ValueError as e:
                out.append((False, worker.SubcallError(
                    "OutputDecodeError", f"child output is not valid JSON: {e}")))
            continue
        out.append((False, worker.SubcallError(
            etype.decode("utf-8", "replace"), emsg.decode("utf-8", "replace"),
            tb.decode("utf-8", "replace"), status == STATUS_RETRYABLE)))
    return out


class Subcalls(State):
    """Uses send_quietly() of channel.Channel and serve() of runner.Runner."""

    def subcalls(self, call: Call, fn: str | None, items, entrypoint: str | None) -> list:
        """ctx.call / ctx.map: sends SUBCALLS for `items` and runs other calls until the
        SUBCALLS_RESULTs are in. Returns [(True, value) or (False, SubcallError)]. Raises
        worker.Cancelled when the call is cancelled (or the Worker hangs up) meanwhile,
        TypeError / ValueError for bad arguments."""
        if threading.get_ident() != self.main_ident or not self.running or self.running[-1] is not call:
            raise RuntimeError("ctx.call/ctx.map must be called from the call's own thread "
                               "while the call runs")
        items = list(items)
        if not items:
            return []
        if fn is None:
            fn = ""
        if not isinstance(fn, str):
            raise TypeError(f"function name must be a str, not {type(fn).__name__}")
        if entrypoint is None:
            entrypoint = "" if fn in ("", call.function) else DEFAULT_ENTRYPOINT
        elif not isinstance(entrypoint, str):
            raise TypeError(f"entrypoint must be a str, not {type(entrypoint).__name__}")
        ctype, args = encode_args(items)
        fn_b = fn.encode("utf-8")
        ep_b = entrypoint.encode("utf-8")
        # one SUBCALLS frame per run of args that fits the frame limit
        chunks = split_args(args, subcalls_head_size(fn_b, ep_b), self.max_frame)
        wait = Wait(call, len(chunks))
        reqs = []
        frames = []
        with self.cv:
            for chunk in chunks:
                req = Request(self.next_request_id, len(chunk), wait)
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
            out += outcomes(req.children)
        return out

    def scratch(self, call: Call) -> str:
        """ctx.scratch_dir: the task's scratch directory, made by the Worker on its first
        use (SCRATCH; the answer is remembered). From the call's own thread the executor
        runs the CALLs that arrive while it waits, as for subcalls; from another thread
        it waits while the watchdog reads. Raises OSError when the Worker could not make
        it (the task then fails IO_SCOPE_FAILED), worker.Cancelled when the call is
        cancelled meanwhile."""
        path = call.scratch_dir
        if path in self.scratch_made:
            return path
        wait = Wait(call, 1)
        with self.cv:
            req = ScratchRequest(self.next_request_id, wait)
            self.next_request_id += 1
            self.requests[req.request_id] = req
        self.send_quietly(encode_scratch(call.call_id, req.request_id))
        if (threading.get_ident() == self.main_ident and self.running
                and self.running[-1] is call):
            self.cpu_mark = None
            self.serve(wait)
            self.cpu_mark = None
        else:  # never on self.cv: this thread must not take the main thread's wake-ups
            while not req.done.wait(0.05) and not call.cancelled and not self.closed:
                pass
        if wait.outstanding:
            with self.cv:
                self.requests.pop(req.request_id, None)
            raise worker.Cancelled("call cancelled while its scratch directory was made")
        if req.error:
            raise OSError(req.error)
        if len(self.scratch_made) >= 1024:
            self.scratch_made.clear()
        self.scratch_made.add(path)
        return path

    def deliver_scratch(self, request_id: int, error: str) -> None:
        """A SCRATCH_RESULT arrived: wakes the call waiting for it."""
        with self.cv:
            req = self.requests.get(request_id)
            if req is None:
                return  # its call stopped waiting (cancelled): nobody wants it
            if not isinstance(req, ScratchRequest):
                raise ProtocolError(f"SCRATCH_RESULT {request_id} answers a SUBCALLS request")
            del self.requests[request_id]
            req.error = error
            req.wait.outstanding -= 1
            req.done.set()
            self.cv.notify_all()

    def deliver(self, request_id: int, children: list[tuple]) -> None:
        """A SUBCALLS_RESULT arrived: wakes the call waiting for it. Raises ProtocolError
        when its count is not its request's."""
        with self.cv:
            req = self.requests.pop(request_id, None)
            if req is None:
                return  # its call stopped waiting (cancelled): nobody wants it
            if not isinstance(req, Request):
                raise ProtocolError(f"SUBCALLS_RESULT {request_id} answers a SCRATCH request")
            if len(children) != req.count:
                raise ProtocolError(f"SUBCALLS_RESULT {request_id} has {len(children)} children, "
                                    f"the request had {req.count}")
            req.children = children
            req.wait.outstanding -= 1
            if req.wait.outstanding == 0:
                self.cv.notify()

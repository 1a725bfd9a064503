"""The main thread's loop: takes the queued calls one at a time, runs each (load, decode
the args, call the handler with its output captured, encode the outcome) and buffers its
RESULT (docs/specs/executor-protocol.md §3, §4)."""

from __future__ import annotations

import resource
import struct
import sys
import time

import worker  # python/worker/__init__.py, beside this package

from .channel import Channel, FLUSH_BYTES
from .context import Context
from .inbox import Inbox
from .procs import end_descendants
from .protocol import (CONTENT_BYTES, CONTENT_JSON, DEFAULT_ENTRYPOINT, STATUS_ERROR, STATUS_OK,
                       STATUS_RETRYABLE, Call, cap_text, encode_error_result, encode_result,
                       json_bytes, json_value)
from .state import SHUTDOWN_ITEM, State
from .subcalls import Subcalls, Wait
from .watchdog import Watchdog

_U64 = struct.Struct("<Q")
EARLY_FLUSH_MIN = 4  # RESULTs buffered before an early write (more than half the calls held)
_RUSAGE_SELF = resource.RUSAGE_SELF


class Runner(State):
    """The main thread. Uses the write side and read_input() of channel.Channel."""

    def run(self) -> int:
        """Runs calls until SHUTDOWN or EOF; the exit status (0)."""
        self.serve(None)
        self.flush()
        return 0

    def serve(self, wait: Wait | None) -> None:
        """Runs queued calls, one at a time. With `wait` None (the outer level): until
        SHUTDOWN or EOF. With a Wait (a call waiting for its subcalls): until its
        SUBCALLS_RESULTs are in, its call is cancelled, or EOF; the calls it runs
        meanwhile are nested inside the waiting one."""
        while True:
            item = self.take(wait)
            if item is None:
                return
            if self.obuf and item.task_id != self.last_task:
                # RESULTs of another task's calls go out before this one starts: a call
                # that ends the process (os._exit, a crash) loses only its own task's
                self.flush()
            self.last_task = item.task_id
            if len(self.running) >= self.max_nesting:
                self.post(encode_error_result(
                    item.call_id, "NestingTooDeep",
                    f"{len(self.running)} calls already running in this executor (waiting for "
                    f"subcalls); limit {self.max_nesting}"))
                continue
            if self.post(self.execute(item)) >= FLUSH_BYTES:
                self.flush()

    def take(self, wait: Wait | None) -> Call | None:
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
                    if queue and (wait is None or queue[0] is not SHUTDOWN_ITEM):
                        item = queue.popleft()
                        if item is SHUTDOWN_ITEM:
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
                    if self.started is not None:  # before it runs: §7
                        _U64.pack_into(self.started, 0, item.call_id)
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

    def execute(self, call: Call) -> bytes:
        """Runs `call`; its encoded RESULT."""
        if call.deadline <= time.monotonic():
            return encode_error_result(call.call_id, "DeadlineExceeded",
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
                    args = json_value(call.args)
                else:
                    args = call.args
                stage = "call"
                value = fn(args, Context(call, err, self))
                stage = "output"
                if isinstance(value, (bytes, bytearray, memoryview)):
                    output, ctype = bytes(value), CONTENT_BYTES
                else:
                    output = json_bytes(value)
            except BaseException as e:  # SystemExit and KeyboardInterrupt fail the call only
                status, ctype, output = STATUS_ERROR, CONTENT_JSON, b""
                etype, emsg, tb = describe(e, stage, call)
                if stage == "call" and isinstance(e, worker.Retryable):
                    status = STATUS_RETRYABLE
        finally:
            sys.stdout, sys.stderr = saved
            with self.cv:
                self.running.pop()
                outer = not self.running
            if outer:  # what the call started ends with it (not while a parent waits)
                end_descendants()
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
                      cap_text(emsg), cap_text(tb), max(cpu_us, 0), max(max_rss_kb, 0),
                      out.pop(), err.pop()]
        frame = encode_result(*fields)
        if len(frame) - 4 > self.max_frame:
            fields[1:7] = [STATUS_ERROR, CONTENT_JSON, b"", b"OutputTooLarge",
                           (f"RESULT of {len(frame) - 4} bytes exceeds the frame limit of "
                            f"{self.max_frame} bytes").encode(), b""]
            frame = encode_result(*fields)
        return frame


def describe(e: BaseException, stage: str, call: Call) -> tuple[str, str, str]:
    """(type, message, traceback) of a failed call; the executor's own frame is left
    out of the traceback."""
    if stage == "load":
        ep = call.entrypoint or DEFAULT_ENTRYPOINT
        etype = "FunctionLoadError"
        msg = f"cannot load {ep} from {call.code_dir}: {type(e).__name__}: {e}"
    elif stage == "args":
        etype = "ArgsDecodeError"
        msg = f"args are not valid JSON: {e}"
    elif stage == "output":
        etype = "OutputEncodeError"
        msg = f"return value is not JSON-serialisable (return bytes for raw output): {e}"
    else:
        etype = type(e).__name__
        msg = str(e)
    tb_obj = e.__traceback__.tb_next if e.__traceback__ is not None else None
    import traceback  # on the first failure only: an idle executor does not hold it

    tb = "".join(traceback.format_exception(type(e), e, tb_obj))
    return etype, msg, tb


class Executor(Runner, Subcalls, Watchdog, Inbox, Channel):
    """One executor: the parts over one State (see state.py). Built on the main thread;
    run() there, watchdog() on a thread of its own."""

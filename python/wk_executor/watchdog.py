"""Liveness while a call runs (docs/specs/executor-protocol.md §7): the watchdog thread writes
RESULTs a long call would hold back and takes over the socket's read side when the main
thread has not read for a whole tick, so PING, CANCEL and STACK_REQUEST are answered
while user code runs; and the stack capture that answers STACK_REQUEST."""

from __future__ import annotations

import os
import select
import socket
import sys
import threading
import time

from .channel import WATCH_PERIOD_S
from .protocol import ProtocolError, cap_text
from .state import State, log

EOF_GRACE_S = 2.0  # after the Worker hung up, a running call gets this long to finish


def _executor_files() -> frozenset[str]:
    """The files whose frames are the executor's own: this package's modules and the
    script that started it (python/worker_executor.py, the __main__ module)."""
    files = {m.__file__ for name, m in list(sys.modules.items())
             if (name == __package__ or name.startswith(__package__ + "."))
             and getattr(m, "__file__", None)}
    main_file = getattr(sys.modules.get("__main__"), "__file__", None)
    if main_file:
        files.add(main_file)
    return frozenset(files)


class Watchdog(State):
    """The second thread. Uses flush(), recv() and feed() of channel.Channel."""

    def watchdog(self) -> None:
        """Ticks every WATCH_PERIOD_S while the main thread runs calls: writes buffered
        RESULTs, and when the main thread has not read the socket for a whole tick (a long
        call, or a long queue of slower ones), reads it until that call ends. After the
        Worker hung up, gives a running call EOF_GRACE_S, then leaves regardless. Ends the
        process: 0 after EOF, 2 on a protocol error, 3 on a bug of its own."""
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
            log("worker closed the socket and the running call did not finish; exiting")
            os._exit(0)
        except ProtocolError as e:
            log(f"protocol error from the worker: {e}; exiting")
            os._exit(2)
        except BaseException as e:  # a bug here must not leave a zombie executor
            log(f"watchdog thread failed: {e!r}; exiting")
            os._exit(3)

    def read_while_running(self, progress: int) -> None:
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

    def format_stack(self, call_id: int) -> bytes:
        """The main thread's Python stack (UTF-8) when call `call_id` is running, else b""."""
        with self.cv:
            ids = [c.call_id for c in self.running]
        if call_id not in ids:
            return b""
        try:
            # imported on the first STACK_REQUEST only: an idle executor does not hold it
            # (per-module import locks: a call wedged in another import does not block it)
            import traceback

            frame = sys._current_frames().get(self.main_ident)
            if frame is None:
                return b""
            entries = traceback.extract_stack(frame)
            del frame
            own = _executor_files()
            skip = 0  # the executor's own outermost frames (main, run, serve, execute)
            while skip < len(entries) - 1 and entries[skip].filename in own:
                skip += 1
            last = len(entries)  # and its innermost ones when the main thread asks (take, read)
            if threading.get_ident() == self.main_ident:
                while last > skip + 1 and entries[last - 1].filename in own:
                    last -= 1
            text = (f"Python stack of call {call_id} (executor pid {os.getpid()}, main thread, "
                    "most recent call last; running calls, outermost first: "
                    f"{', '.join(str(i) for i in ids)}):\n")
            text += "".join(traceback.format_list(entries[skip:last]))
        except Exception as e:  # never let a formatting problem kill the reader
            text = f"cannot format the stack of call {call_id}: {e!r}\n"
        return cap_text(text)

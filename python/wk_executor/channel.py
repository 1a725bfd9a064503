"""The socket to the Worker: RESULTs buffered and written in batches, frames written in
order, and the read side (docs/specs/executor-protocol.md §3)."""

from __future__ import annotations

import os
import socket

from .protocol import ProtocolError
from .state import RECV_SIZE, State, log

FLUSH_BYTES = 64 << 10  # buffered RESULT bytes that force a write
WATCH_PERIOD_S = 0.005  # the watchdog's tick while calls run


class Channel(State):
    """The socket's write side (any thread) and read side (whoever holds rlock). Received
    bytes go to inbox.Inbox.dispatch(); EOF to inbox.Inbox.mark_closed()."""

    # -- writing (any thread) --

    def send(self, data: bytes) -> None:
        """Writes `data` now, after any buffered RESULTs (so frames keep their order).
        Raises OSError when the Worker is gone."""
        with self.wlock:
            with self.olock:
                if self.obuf:
                    self.flushed += len(self.obuf)
                    self.obuf.append(data)
                    data = b"".join(self.obuf)
                    del self.obuf[:]
                    self.obytes = 0
            self.sock.sendall(data)

    def send_quietly(self, data: bytes) -> None:
        """send(), ignoring a Worker that is gone (a read notices EOF)."""
        try:
            self.send(data)
        except OSError:
            pass  # the Worker is gone; a read notices EOF

    def post(self, frame: bytes) -> int:
        """Buffers a RESULT (main thread); returns the bytes buffered."""
        with self.olock:
            self.obuf.append(frame)
            self.obytes += len(frame)
            return self.obytes

    def flush(self) -> None:
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

    # -- reading (the holder of rlock) --

    def read_input(self, block: bool) -> None:
        """Main thread, between calls: reads what the socket holds and handles its frames;
        with `block`, waits for input first. Does nothing while the watchdog reads. Exits
        the process (status 2) on a protocol error."""
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
            log(f"protocol error from the worker: {e}; exiting")
            os._exit(2)
        finally:
            self.rlock.release()

    def recv(self, flags: int) -> int:
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

    def feed(self, n: int) -> None:
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


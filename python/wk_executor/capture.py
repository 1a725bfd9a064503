"""Per-call capture of sys.stdout and sys.stderr (docs/specs/executor-protocol.md §4.5)."""

from __future__ import annotations

import io

DEFAULT_CAPTURE_MAX = 64 << 10


def _truncation_marker(dropped: int, total: int) -> str:
    return f"\n[... output truncated: {dropped} of {total} bytes dropped]\n"


class Capture:
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

    def __init__(self, cap: int) -> None:
        self._cap = cap
        self._buf = bytearray()  # the innermost call's (between calls: discarded)
        self._dropped = 0
        self._saved: list[tuple[bytearray, int]] = []  # (buf, dropped) of the calls outside the innermost one
        self.buffer = CaptureBinary(self)

    def push(self) -> None:
        """A call starts: its output goes to a fresh buffer."""
        self._saved.append((self._buf, self._dropped))
        self._buf = bytearray()
        self._dropped = 0

    def pop(self) -> bytes:
        """The innermost call ends: returns its captured bytes (see getvalue) and goes
        back to the enclosing call's buffer."""
        value = self.getvalue() if self._buf or self._dropped else b""
        self._buf, self._dropped = self._saved.pop()
        if not self._saved:  # between calls: writes are dropped
            del self._buf[:]
            self._dropped = 0
        return value

    def _add(self, b: bytes) -> None:
        """Keeps what fits of the bytes `b`, counts the rest."""
        room = self._cap - len(self._buf)
        if len(b) <= room:
            self._buf += b
        else:
            if room > 0:
                self._buf += b[:room]
            self._dropped += len(b) - max(room, 0)

    def write(self, s: str) -> int:
        if not isinstance(s, str):
            raise TypeError(f"write() argument must be str, not {type(s).__name__}")
        self._add(s.encode("utf-8", "backslashreplace"))
        return len(s)

    def writelines(self, lines) -> None:
        for s in lines:
            self.write(s)

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False

    def readable(self) -> bool:
        return False

    def writable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return False

    def fileno(self) -> int:
        raise io.UnsupportedOperation("captured stream has no file descriptor")

    def getvalue(self) -> bytes:
        """The captured bytes, at most `cap`; a marker at the end says how many were dropped."""
        if not self._dropped:
            return bytes(self._buf)
        total = len(self._buf) + self._dropped
        # the dropped count has no more digits than the total, so this marker is the longest
        keep = max(self._cap - len(_truncation_marker(total, total)), 0)
        marker = _truncation_marker(total - keep, total).encode("ascii")
        return bytes(self._buf[:keep]) + marker


class CaptureBinary:
    """sys.stdout.buffer for a Capture."""

    closed = False

    def __init__(self, owner: Capture) -> None:
        self._owner = owner

    def write(self, b) -> int:
        b = bytes(b)
        self._owner._add(b)
        return len(b)

    def flush(self) -> None:
        pass

    def writable(self) -> bool:
        return True

"""What a function sees: the `ctx` argument of handler(args, ctx)
(docs/specs/executor-protocol.md §4.3)."""

from __future__ import annotations

import math
import time

import worker  # python/worker/__init__.py, beside this package

from .capture import Capture
from .protocol import Call

TYPE_CHECKING = False
if TYPE_CHECKING:
    import logging

    from .subcalls import Subcalls


class Context:
    """The `ctx` argument of handler(args, ctx)."""

    __slots__ = ("task_id", "call_index", "epoch", "function", "traceparent", "_call",
                 "_stderr", "_logger", "_ex")

    def __init__(self, call: Call, stderr: Capture, executor: Subcalls) -> None:
        self.task_id = call.task_id
        self.call_index = call.call_index
        self.epoch = call.epoch
        self.function = call.function
        self.traceparent = call.traceparent
        self._call = call
        self._stderr = stderr
        self._logger = None
        self._ex = executor

    @property
    def deadline(self) -> float:
        """The call's deadline in wall-clock Unix seconds, comparable with time.time();
        math.inf when it has none. Read from the call's monotonic deadline when asked
        (remaining() uses that one: a clock step does not move it), so a call that never
        asks reads no clock for it."""
        d = self._call.deadline
        return d - time.monotonic() + time.time() if d != math.inf else math.inf

    @property
    def scratch_dir(self) -> str:
        """The task's scratch directory (its IO scope, private to the task), made on the
        first use: a function that never reads this makes no directory. Raises OSError
        when it cannot be made."""
        return self._ex.scratch(self._call)

    @property
    def logger(self) -> logging.Logger:
        """A logging.Logger writing to this call's captured stderr (level INFO)."""
        if self._logger is None:
            import logging  # on first use: an idle executor does not hold it

            lg = logging.Logger(f"worker.fn.{self.function}", logging.INFO)
            h = logging.StreamHandler(self._stderr)
            h.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
            lg.addHandler(h)
            lg.propagate = False
            self._logger = lg
        return self._logger

    @property
    def cancelled(self) -> bool:
        """True once the Worker sent CANCEL for this call."""
        return self._call.cancelled

    def check_cancelled(self) -> None:
        """Raises worker.Cancelled when the Worker cancelled this call."""
        if self._call.cancelled:
            raise worker.Cancelled("call cancelled by the worker")

    def remaining(self) -> float:
        """Seconds left before the deadline (inf when the call has none; may be < 0),
        measured on the monotonic clock."""
        return self._call.deadline - time.monotonic()

    def call(self, fn: str | None, args, entrypoint: str | None = None):
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

    def map(self, fn: str | None, items, return_exceptions: bool = False,
            entrypoint: str | None = None) -> list:
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

"""worker: what a function running inside the Worker's Python executor imports.

    import worker

    def handler(args, ctx):
        if not ready(args):
            raise worker.Retryable("backend not ready")   # failed, but retry it
        ctx.check_cancelled()                              # raises worker.Cancelled
        squares = ctx.map("square", [1, 2, 3])            # subcalls: [1, 4, 9]
        try:
            ctx.call("validate", squares)
        except worker.SubcallError as e:                   # the child failed
            return {"ok": False, "why": e.type}
        return {"ok": True}

Standard library only; see docs/specs/executor-protocol.md for the executor that loads it.
"""

__all__ = ["Retryable", "Cancelled", "SubcallError"]


class Retryable(Exception):
    """Raise to fail the current call as retryable: the Worker runs it again within the
    task's call_retry_policy (max_attempts, backoff). Any other exception fails the call
    for good."""


class Cancelled(Exception):
    """Raised by ctx.check_cancelled() once the Worker has cancelled the current call
    (task cancelled, timed out, or another call failed under FAIL_FAST)."""


class SubcallError(Exception):
    """A subcall (ctx.call / ctx.map) failed. Attributes: `type` (the child's exception
    type name, e.g. "ValueError", or an executor/worker error type such as
    "FunctionLoadError"), `message`, `traceback` (the child's formatted traceback, may
    be empty) and `retryable` (the child's final status was "retryable error"; whatever
    retrying the Worker does has happened by then). str(e) is "type: message"."""

    def __init__(self, error_type: str, message: str, traceback: str = "",
                 retryable: bool = False) -> None:
        super().__init__(error_type, message, traceback, retryable)
        self.type = error_type
        self.message = message
        self.traceback = traceback
        self.retryable = retryable

    def __str__(self) -> str:
        return f"{self.type}: {self.message}"

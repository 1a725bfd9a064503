"""worker: what a function running inside the Worker's Python executor imports.

    import worker

    def handler(args, ctx):
        if not ready(args):
            raise worker.Retryable("backend not ready")   # failed, but retry it
        ctx.check_cancelled()                              # raises worker.Cancelled
        return {"ok": True}

Standard library only; see docs/executor-protocol.md for the executor that loads it.
"""

__all__ = ["Retryable", "Cancelled"]


class Retryable(Exception):
    """Raise to fail the current call as retryable: the Worker runs it again within the
    task's call_retry_policy (max_attempts, backoff). Any other exception fails the call
    for good."""


class Cancelled(Exception):
    """Raised by ctx.check_cancelled() once the Worker has cancelled the current call
    (task cancelled, timed out, or another call failed under FAIL_FAST)."""

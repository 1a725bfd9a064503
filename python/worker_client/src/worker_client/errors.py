"""The exceptions worker_client raises. Every one is a WorkerError; those that come from
a gRPC status keep it (`code`: a grpc.StatusCode, `details`: the worker's message) and
chain the grpc.RpcError as `__cause__`."""

import concurrent.futures

import grpc


class WorkerError(Exception):
    """Base class. `code` (grpc.StatusCode or None), `details` (str), `task_id` and
    `address` (the worker, when known)."""

    def __init__(self, message, *, code=None, details="", task_id=None, address=None):
        super().__init__(message)
        self.code = code
        self.details = details
        self.task_id = task_id
        self.address = address


class NoSlot(WorkerError):
    """The worker (every worker tried, with etcd discovery) had no free task slot:
    RESOURCE_EXHAUSTED. Nothing was admitted; submitting again later is safe."""


class WorkerUnavailable(WorkerError):
    """No worker could be reached or every one answered UNAVAILABLE (not ready,
    draining), within the client's retry budget; or the worker running a task went away
    and did not come back while the task was watched. For a submit, the task may have
    been admitted (the id is in `task_id`): submitting again with that task_id is safe,
    the worker admits by id at most once."""


class RequestRejected(WorkerError):
    """The worker refused the request: INVALID_ARGUMENT (a bad field, an option the
    builder or writer does not take), ALREADY_EXISTS (the task id was used for a
    different request), NOT_FOUND (unknown task), UNAUTHENTICATED, ... Retrying the
    same request would fail the same way."""


class TaskFailed(WorkerError):
    """The task ended FAILED. `failure_code` ("CALL_FAILED", "TASK_TIMEOUT",
    "OWNER_LOST", ...), `message` (the worker's failure message), and for a failed call
    `error_type` ("ValueError"), `error_message`, `traceback` (the call's remote
    traceback, as text) and `call_index`; `result` is the whole TaskResult."""

    def __init__(self, message, *, failure_code="", result=None, error_type="", error_message="",
                 traceback="", call_index=None, **kw):
        super().__init__(message, **kw)
        self.failure_code = failure_code
        self.message = message
        self.result = result
        self.error_type = error_type
        self.error_message = error_message
        self.traceback = traceback
        self.call_index = call_index

    def __str__(self):
        s = "%s: %s" % (self.failure_code, self.message)
        if self.traceback:
            s += "\nremote traceback (call %s):\n%s" % (self.call_index, self.traceback.rstrip())
        return s


class TaskCancelled(TaskFailed, concurrent.futures.CancelledError):
    """The task ended CANCELLED (failure code CANCELLED): cancelled by this client
    (`future.cancel()`) or by someone else (`workerctl cancel`); `message` holds the
    reason. Also a concurrent.futures.CancelledError."""


class CallError(Exception):
    """One failed call inside a task that succeeded anyway (CONTINUE with
    max_failed_calls): it stands in the result list at the call's place. `type`,
    `message`, `traceback`, `retryable`, `index`."""

    def __init__(self, index, error_type, message, traceback="", retryable=False):
        super().__init__(error_type, message)
        self.index = index
        self.type = error_type
        self.message = message
        self.traceback = traceback
        self.retryable = retryable

    def __str__(self):
        return "call %d: %s: %s" % (self.index, self.type, self.message)

    def __eq__(self, other):
        return isinstance(other, CallError) and (self.index, self.type, self.message) == (
            other.index, other.type, other.message)

    __hash__ = Exception.__hash__


def from_rpc_error(err, *, task_id=None, address=None, what="call"):
    """Maps a grpc.RpcError to the typed exception (RESOURCE_EXHAUSTED: NoSlot,
    UNAVAILABLE / DEADLINE_EXCEEDED: WorkerUnavailable, else RequestRejected), keeping
    its status. The caller raises it `from err`."""
    code = err.code() if hasattr(err, "code") else None
    details = (err.details() if hasattr(err, "details") else "") or ""
    msg = "%s %s: %s%s" % (address or "worker", what, code.name if code else "ERROR",
                           ": " + details if details else "")
    kw = dict(code=code, details=details, task_id=task_id, address=address)
    if code == grpc.StatusCode.RESOURCE_EXHAUSTED and "larger than max" not in details \
            and "max_message_bytes" not in details:
        return NoSlot(msg, **kw)
    if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
        return WorkerUnavailable(msg, **kw)
    return RequestRejected(msg, **kw)

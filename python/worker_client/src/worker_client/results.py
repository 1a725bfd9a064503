"""What a task gives back: TaskResult (the whole result, decoded), CallOutput (one
call's output) and Progress (one progress observation of a running task)."""

import json
import time

from ._proto import worker_pb2 as pb
from .errors import CallError, TaskCancelled, TaskFailed

TERMINAL_STATES = ("SUCCEEDED", "FAILED", "CANCELLED")


_NAMES = {}  # (enum wrapper, prefix) -> {number: name without prefix}, built once


def _enum_name(enum, value, prefix):
    """enum's name for value without prefix; str(value) for a value this client does not
    know. A dict lookup: a client decodes a few per event, thousands of events a second."""
    key = (enum, prefix)  # the module-level wrapper itself: no descriptor lookup per call
    names = _NAMES.get(key)
    if names is None:
        names = _NAMES[key] = {v.number: v.name[len(prefix):] for v in enum.DESCRIPTOR.values}
    name = names.get(value)
    return name if name is not None else str(value)


def state_name(value):
    """"RUNNING" for pb.TASK_STATE_RUNNING; str(value) for a value this client does
    not know."""
    return _enum_name(pb.TaskState, value, "TASK_STATE_")


def decode_value(data, content_type):
    """A call's value: JSON decoded, bytes (CONTENT_TYPE_BYTES) as they are; None for
    an empty JSON value."""
    if content_type == pb.CONTENT_TYPE_BYTES:
        return bytes(data)
    if not data:
        return None
    return json.loads(data)


class CallOutput(object):
    """One call's output: `index`, `ok`, `value` (decoded; None when it failed),
    `error` (a CallError when it failed), `stdout` and `stderr` (captured text)."""

    __slots__ = ("index", "ok", "value", "error", "stdout", "stderr")

    def __init__(self, out):
        self.index = out.index
        self.ok = out.WhichOneof("outcome") != "error"
        self.value = decode_value(out.value, out.content_type) if self.ok else None
        self.error = None if self.ok else CallError(out.index, out.error.type, out.error.message,
                                                    out.error.traceback, out.error.retryable)
        self.stdout = out.stdout.decode("utf-8", "replace")
        self.stderr = out.stderr.decode("utf-8", "replace")

    def __repr__(self):
        return "CallOutput(index=%d, %s)" % (self.index, ("value=%r" % (self.value,)) if self.ok
                                             else ("error=%s" % self.error))


class TaskResult(object):
    """A task's result or live snapshot: `task_id`, `state` ("RUNNING", "SUCCEEDED",
    ...), `phase`, `failure_code` ("" when none), `failure_message`, `code_epoch`,
    `outputs` (list of CallOutput, inline outputs only), `plugin_results` (a writer's
    reports: dicts with plugin, location, records, bytes), `statistic` (dict of
    TaskStatistic), `retries` (the first retried attempts: dicts with index, attempt,
    error_type, error_message) and `raw` (the protobuf message)."""

    def __init__(self, raw):
        self.raw = raw
        self.task_id = raw.task_id
        self.state = state_name(raw.state)
        self.phase = _enum_name(pb.Phase, raw.phase, "PHASE_")
        self.failure_code = "" if raw.failure_code == 0 else _enum_name(
            pb.FailureCode, raw.failure_code, "FAILURE_CODE_")
        self.failure_message = raw.failure_message
        self.code_epoch = raw.code_epoch
        self.outputs = [CallOutput(o) for o in raw.outputs]
        self.plugin_results = [{"plugin": p.plugin, "location": p.location, "records": p.records,
                                "bytes": p.bytes} for p in raw.plugin_results]
        self.retries = [{"index": r.index, "attempt": r.attempt, "error_type": r.error_type,
                         "error_message": r.error_message} for r in raw.retries]
        self._statistic = None

    @property
    def statistic(self):
        """The TaskStatistic as a dict (made when first read: most results never are)."""
        if self._statistic is None:
            st = self.raw.statistic
            self._statistic = {f.name: getattr(st, f.name) for f in st.DESCRIPTOR.fields}
        return self._statistic

    @property
    def terminal(self):
        return self.state in TERMINAL_STATES

    def values(self):
        """The outputs' values in call order, a CallError in place of a failed call."""
        return [o.value if o.ok else o.error for o in self.outputs]

    def __repr__(self):
        return "TaskResult(%s, %s%s, %d outputs)" % (
            self.task_id, self.state, " " + self.failure_code if self.failure_code else "",
            len(self.outputs))


def task_value(result, builder, has_handler):
    """What future.result() returns for a SUCCEEDED task: the value of its single call
    (builder "single"), the list of values in call order (map, range, others), or,
    with a result handler, the writer's reports (result.plugin_results)."""
    if has_handler:
        return result.plugin_results
    values = result.values()
    if builder in ("", "single"):
        if not values:
            return None
        return values[0]
    return values


def task_exception(result, address=None):
    """The exception for a FAILED or CANCELLED TaskResult (TaskFailed, TaskCancelled),
    naming the first failed call with its remote traceback."""
    failed = next((o for o in result.outputs if not o.ok), None)
    kw = dict(failure_code=result.failure_code, result=result, task_id=result.task_id,
              address=address)
    if failed is not None:
        kw.update(error_type=failed.error.type, error_message=failed.error.message,
                  traceback=failed.error.traceback, call_index=failed.index)
    cls = TaskCancelled if result.state == "CANCELLED" else TaskFailed
    return cls(result.failure_message or result.failure_code, **kw)


class Progress(object):
    """A progress observation: `task_id`, `kind` ("snapshot", "phase", "progress",
    "terminal"), `state`, `phase`, `calls_total` (0 while unknown), `calls_done`
    (succeeded + failed), `calls_succeeded`, `calls_failed`, `calls_retried`, `time`
    (time.time() when received) and `result` (the TaskResult, None for a progress
    event that carries only counts; decoded when first read)."""

    __slots__ = ("task_id", "kind", "state", "phase", "calls_total", "calls_done",
                 "calls_succeeded", "calls_failed", "calls_retried", "time", "_result", "_raw")

    def __init__(self, task_id, kind, state, phase, calls_total=0, calls_succeeded=0,
                 calls_failed=0, calls_retried=0, result=None, raw=None):
        self.task_id = task_id
        self.kind = kind
        self.state = state
        self.phase = phase
        self.calls_total = calls_total
        self.calls_succeeded = calls_succeeded
        self.calls_failed = calls_failed
        self.calls_done = calls_succeeded + calls_failed
        self.calls_retried = calls_retried
        self.time = time.time()
        self._result = result
        self._raw = raw  # a TaskResult message, decoded into `result` on demand

    @property
    def result(self):
        if self._result is None and self._raw is not None:
            self._result = TaskResult(self._raw)
        return self._result

    @property
    def fraction(self):
        """calls_done / calls_total, None while the total is unknown."""
        return self.calls_done / self.calls_total if self.calls_total else None

    def __repr__(self):
        return "Progress(%s %s %s %s/%s)" % (self.task_id, self.kind, self.state, self.calls_done,
                                             self.calls_total or "?")


_KIND_NAMES = {pb.TaskEvent.KIND_SNAPSHOT: "snapshot", pb.TaskEvent.KIND_PHASE_CHANGED: "phase",
               pb.TaskEvent.KIND_TERMINAL: "terminal", pb.TaskEvent.KIND_PROGRESS: "progress"}


def progress_from_event(event):
    """A Progress from a TaskEvent: a PROGRESS event's counts (TaskProgress), or the
    counts of the result's statistic (SNAPSHOT, PHASE_CHANGED, TERMINAL)."""
    kind = _KIND_NAMES.get(event.kind, "progress")
    if event.HasField("progress"):
        p = event.progress
        return Progress(event.task_id, kind, "RUNNING", _enum_name(pb.Phase, p.phase, "PHASE_"),
                        calls_total=p.calls_total if p.total_known else 0,
                        calls_succeeded=p.calls_succeeded, calls_failed=p.calls_failed,
                        calls_retried=p.calls_retried)
    raw = event.result
    st = raw.statistic
    return Progress(event.task_id, kind, state_name(raw.state),
                    _enum_name(pb.Phase, raw.phase, "PHASE_"), calls_total=st.calls_total,
                    calls_succeeded=st.calls_succeeded, calls_failed=st.calls_failed,
                    calls_retried=st.calls_retried, raw=raw)

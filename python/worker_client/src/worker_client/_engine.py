"""The asyncio engine both clients share (Client runs it on a private event-loop
thread, AsyncClient on the caller's loop): gRPC channels per worker, submissions with
retries and etcd failover, and the shared WatchTasks streams that deliver every task's
events. Private; the public surface is client.Client and aio.AsyncClient."""

import asyncio
import collections
import json
import math
import os
import random
import time

import grpc
import grpc.aio

from ._proto import health_pb2, health_pb2_grpc
from ._proto import worker_pb2 as pb
from ._proto import worker_pb2_grpc as pb_grpc
from .discovery import Backoff, EtcdError, Registry, pick_order
from .errors import NoSlot, RequestRejected, TaskCancelled, WorkerError, WorkerUnavailable, \
    from_rpc_error
from .results import TaskResult, progress_from_event, task_exception, task_value

RETRY_CODES = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
MAX_CANDIDATES = 8  # workers tried per submit with etcd discovery, as workerctl
FAILOVER_CONNECT_TRIES = 3  # SubmitTasks that could not connect before another worker is tried


# What a worker answers when it refuses a new task outright (src/app/wk_wire.c,
# wk_orch_rpc.c, wk_orchestrator.c): nothing was admitted.
_REFUSALS = ("is not accepting tasks", "is shutting down", "event queue full")


def _not_connected(err):
    """The call failed before anything reached the worker (no connection could be made):
    the request was certainly not admitted."""
    d = (err.details() or "").lower()
    return err.code() == grpc.StatusCode.UNAVAILABLE and (
        "failed to connect" in d or "connection refused" in d)


def _refused(err):
    """The worker answered that it takes no new task (draining, shutting down, its queue
    full): the request was not admitted."""
    d = err.details() or ""
    return err.code() == grpc.StatusCode.UNAVAILABLE and any(r in d for r in _REFUSALS)


class NotSent(Exception):
    """A SubmitTask that never reached its worker; `error` is the WorkerError."""

    def __init__(self, error):
        super().__init__(str(error))
        self.error = error


class Options(object):
    """Client tuning (every one is a keyword of Client/AsyncClient):
    rpc_timeout       seconds each unary RPC may take (10)
    retry_time        seconds a submit keeps retrying UNAVAILABLE/DEADLINE_EXCEEDED on
                      its worker, with the same task id (10)
    reconnect_time    seconds a broken watch keeps re-attaching (within a second or
                      two each time, well inside the worker's watch grace) before its
                      tasks fail WorkerUnavailable (30)
    max_submits       SubmitTask RPCs in flight at once (64)
    max_watch_ids     tasks per WatchTasks stream (1024, the worker's limit)
    max_streams       extra streams per worker before small ones are merged (4)
    watch_linger      seconds new tasks wait to share a new stream while other submits
                      are on their way (0.005); a task submitted alone is watched at
                      once, so one task at a time costs no wait
    slot_ttl_ms       lease of a slot reserved with etcd discovery (30000)
    max_message_bytes receive limit (64 MiB; at least the worker's max_message_bytes)
    discovery_ttl     seconds a registry listing is reused (1.0)
    slot_wait         seconds a submit waits for a free slot, trying again with backoff
                      while every worker answers RESOURCE_EXHAUSTED (0: NoSlot at once)"""

    def __init__(self, rpc_timeout=10.0, retry_time=10.0, reconnect_time=30.0, max_submits=64,
                 max_watch_ids=1024, max_streams=4, watch_linger=0.005, slot_ttl_ms=30000,
                 max_message_bytes=64 << 20, discovery_ttl=1.0, slot_wait=0.0):
        self.slot_wait = slot_wait
        self.rpc_timeout = rpc_timeout
        self.retry_time = retry_time
        self.reconnect_time = reconnect_time
        self.max_submits = max_submits
        self.max_watch_ids = max_watch_ids
        self.max_streams = max_streams
        self.watch_linger = watch_linger
        self.slot_ttl_ms = slot_ttl_ms
        self.max_message_bytes = max_message_bytes
        self.discovery_ttl = discovery_ttl


# json.dumps with separators builds an encoder per call (~6 us); one serves every submit
_COMPACT_JSON = json.JSONEncoder(separators=(",", ":"))


_SYSTEM_RANDOM = random.SystemRandom()  # os.urandom underneath: ids unpredictable across processes


def new_task_id():
    """t-<unix ms hex>-<64 random bits hex>, the form workerctl generates."""
    return "t-%x-%016x" % (int(time.time() * 1000), _SYSTEM_RANDOM.getrandbits(64))


def _handler_pb(result_handler):
    if result_handler is None:
        return None
    if isinstance(result_handler, str):
        return pb.ResultHandler(type=result_handler)
    if isinstance(result_handler, dict):
        opts = dict(result_handler)
        kind = opts.pop("type", "")
        return pb.ResultHandler(type=kind, options={str(k): str(v) for k, v in opts.items()})
    kind, opts = result_handler
    return pb.ResultHandler(type=kind, options={str(k): str(v) for k, v in (opts or {}).items()})


def _ms(seconds, what):
    if seconds is None:
        return 0
    if seconds < 0:
        raise ValueError("%s must be >= 0 seconds, got %r" % (what, seconds))
    return max(1, int(math.ceil(seconds * 1000))) if seconds > 0 else 0


def build_request(fn, args, *, builder="single", epoch=None, retries=None, timeout=None,
                  call_timeout=None, task_id=None, labels=None, result_handler=None,
                  options=None, entrypoint=None, max_failed_calls=None):
    """The SubmitTaskRequest for one submit (slot 0). args: bytes travel as they are
    (CONTENT_TYPE_BYTES), anything else as JSON (TypeError when it is not JSON
    serialisable). retries=N: N+1 attempts per call, 100 ms doubling to 10 s, executor
    loss retried (as workerctl --retries). timeout/call_timeout in seconds.
    result_handler: "file", {"type": "file", "name": "x"} or ("file", {"name": "x"})."""
    if not isinstance(fn, str) or not fn:
        raise TypeError("fn must be the function's name (a non-empty str), got %r" % (fn,))
    if isinstance(args, (bytes, bytearray, memoryview)):
        data, ctype = bytes(args), pb.CONTENT_TYPE_BYTES
    else:
        data, ctype = _COMPACT_JSON.encode(args).encode(), pb.CONTENT_TYPE_JSON
    func = pb.FunctionCallConfig(type=builder or "single", name=fn, epoch=epoch or 0,
                                 entrypoint=entrypoint or "", args=data, content_type=ctype)
    if options:
        func.options.update({str(k): str(v) for k, v in options.items()})
    req = pb.SubmitTaskRequest(task_id=task_id or new_task_id(), function=func,
                               timeout_ms=_ms(timeout, "timeout"),
                               call_timeout_ms=_ms(call_timeout, "call_timeout"))
    if labels:
        req.labels.update({str(k): str(v) for k, v in labels.items()})
    rh = _handler_pb(result_handler)
    if rh is not None:
        req.result_handler.CopyFrom(rh)
    if retries:
        req.call_retry_policy.CopyFrom(pb.CallRetryPolicy(
            max_attempts=int(retries) + 1, initial_backoff_ms=100, max_backoff_ms=10000,
            backoff_multiplier=2.0, retry_on_executor_lost=True))
    if max_failed_calls is not None:
        req.call_failure_policy.CopyFrom(pb.CallFailurePolicy(
            mode=pb.CALL_FAILURE_MODE_CONTINUE, max_failed_calls=int(max_failed_calls)))
    return req


class Handle(object):
    """The engine's record of one task. The frontend sets `on_progress(Progress)` and
    `on_finish(value, exception, TaskResult)`; the engine calls them on its loop, each
    at most ... on_finish exactly once."""

    def __init__(self, request, own=True, address=None):
        self.request = request
        self.task_id = request.task_id if request is not None else None
        self.builder = request.function.type if request is not None else ""
        self.has_handler = request is not None and request.HasField("result_handler")
        self.own = own
        self.address = address
        self.duplicate = False
        self.submit_attempts = 0
        self.done = False
        self.result = None
        self.exc = None
        self.stream = None
        self.watch_failed_since = None
        self.cancel_reason = None
        self.last_progress = None
        self.on_progress = None
        self.on_finish = None
        self.tracker = None  # the engine's set of unfinished handles, while in it

    def finish(self, value=None, exc=None, result=None):
        if self.done:
            return
        self.done = True
        self.result = result
        self.exc = exc
        if self.tracker is not None:
            self.tracker.discard(self)
            self.tracker = None
        # The callbacks lead back to this handle (its future holds it) and its stream
        # holds it: let go of them once they ran, so reference counting frees a
        # finished task. Kept, each such cycle waited for the cycle collector, whose
        # passes over thousands of them took 35-50% of a Python client's CPU per task.
        on_finish = self.on_finish
        self.on_finish = self.on_progress = None
        self.stream = None
        if on_finish is not None:
            on_finish(value, exc, result)

    def finish_result(self, result):
        """Ends the handle with a terminal TaskResult (value or TaskFailed/Cancelled)."""
        if result.state == "SUCCEEDED":
            try:
                value = task_value(result, self.builder, self.has_handler)
            except ValueError as e:  # an output that is not the JSON its content type says
                self.finish(exc=WorkerError("task %s: output not decodable: %s"
                                            % (self.task_id, e), task_id=self.task_id,
                                            address=self.address), result=result)
                return
            self.finish(value=value, result=result)
        else:
            exc = task_exception(result, self.address)
            if result.state == "CANCELLED" and self.cancel_reason is not None:
                exc.by_client = True  # this client's own cancel() (the event came first)
            self.finish(exc=exc, result=result)

    def progress(self, p):
        self.last_progress = p
        if self.on_progress is not None:
            self.on_progress(p)


class _Stream(object):
    """One WatchTasks stream over a batch of handles of one worker."""

    def __init__(self, group, handles):
        self.group = group
        self.handles = {h.task_id: h for h in handles}
        self.snapshots = set()
        self.ready = asyncio.Event()
        self.retiring = False
        self.task = None
        for h in handles:
            if not h.done:  # a finished handle keeps no stream (Handle.finish)
                h.stream = self

    def live(self):
        return [h for h in self.handles.values() if not h.done and h.stream is self]

    async def run(self):
        g = self.group
        eng = g.conn.engine
        # an observer's stream never counts for the worker's watch-disconnect grace
        # PROGRESS events are opt-in; batch_events: events that queued up on the worker
        # come in one message (the first, then the rest in order in its `more`)
        req = pb.WatchTasksRequest(task_ids=list(self.handles), observe=not g.own,
                                   progress=True, batch_events=True)
        err = None
        try:
            call = g.conn.stub.WatchTasks(req, metadata=eng.metadata)
            async for ev in call:
                self._event(ev)
                for more in ev.more:
                    self._event(more)
        except asyncio.CancelledError:
            g.streams.discard(self)
            return
        except grpc.RpcError as e:
            err = e
        except Exception as e:  # noqa: BLE001 (a bug must not leave futures hanging)
            err = e
        g.streams.discard(self)
        eng.stats["streams_open"] -= 1
        self.ready.set()
        left = self.live()
        if left:
            await g.broken(left, err)

    def _event(self, ev):
        h = self.handles.get(ev.task_id)
        if h is None:
            return
        if ev.kind == pb.TaskEvent.KIND_SNAPSHOT:
            self.snapshots.add(ev.task_id)
            h.watch_failed_since = None
            if len(self.snapshots) == len(self.handles):
                self.ready.set()
        if h.done:
            return
        p = progress_from_event(ev)
        if ev.HasField("result") and (ev.kind == pb.TaskEvent.KIND_TERMINAL or p.state in (
                "SUCCEEDED", "FAILED", "CANCELLED")):
            h.progress(p)
            h.finish_result(p.result)  # decoded once, shared with the Progress
        else:
            h.progress(p)


class _WatchGroup(object):
    """The WatchTasks streams of one worker for owners (or observers). New handles wait
    `watch_linger` (longer while there are many streams) to share a stream. Active
    streams never exceed ceil(live / max_watch_ids) + max_streams: past that a new
    batch is merged with the smallest streams into one new stream, which replaces them
    once it has attached every task; one merge at a time, new batches waiting for it.
    So a worker has at most twice that many streams open, whatever the submit rate."""

    def __init__(self, conn, own):
        self.conn = conn
        self.own = own
        self.pending = []
        self.streams = set()
        self.wake = asyncio.Event()
        self.runner = None
        self.merging = None  # the merge in flight (its _retire task)

    def add(self, handles):
        self.pending.extend(handles)
        self.wake.set()
        if self.runner is None or self.runner.done():
            self.runner = asyncio.ensure_future(self._run())

    def _active(self):
        return [s for s in self.streams if not s.retiring]

    def _bound(self, live):
        opts = self.conn.engine.opts
        return math.ceil(live / opts.max_watch_ids) + opts.max_streams

    async def _run(self):
        eng = self.conn.engine
        opts = eng.opts
        while not eng.closed:
            await self.wake.wait()
            self.wake.clear()
            if opts.watch_linger and len(self.pending) < opts.max_watch_ids and \
                    eng.submitting > 0:
                # more tasks are on their way: new ones wait to share a stream with them;
                # the more streams beyond what the live tasks need, the longer they wait
                # (a burst of submits makes a few big streams)
                extra = len(self.streams) - math.ceil(
                    sum(len(s.live()) for s in self.streams) / opts.max_watch_ids)
                await asyncio.sleep(min(opts.watch_linger * 2 ** max(0, min(extra, 10)), 0.25))
            # in a frame of its own: this one waits for the next wake, and locals kept
            # here (a batch, the active streams) would hold finished tasks until then
            self._place_pending()

    def _place_pending(self):
        """Puts the pending handles on streams: new ones, or a merge."""
        opts = self.conn.engine.opts
        self.pending = [h for h in self.pending if not h.done]
        while self.pending:
            active = self._active()
            live = sum(len(s.live()) for s in active)
            if len(self.pending) >= opts.max_watch_ids or \
                    len(active) < self._bound(live + len(self.pending)):
                batch = self.pending[:opts.max_watch_ids]
                del self.pending[:opts.max_watch_ids]
                self._start(batch)
            elif self.merging is None:
                self._merge(active, self.pending)
                self.pending = []
            else:
                break  # the merge in flight wakes _run when it is done
        if self.merging is None and len(self._active()) > self._bound(
                sum(len(s.live()) for s in self._active())):
            self._merge(self._active(), [])

    def _start(self, batch):
        eng = self.conn.engine
        s = _Stream(self, batch)
        self.streams.add(s)
        eng.stats["streams_opened"] += 1
        eng.stats["streams_open"] += 1
        eng.stats["streams_peak"] = max(eng.stats["streams_peak"], eng.stats["streams_open"])
        s.task = asyncio.ensure_future(s.run())
        return s

    def _merge(self, active, fresh):
        """One new stream for `fresh` handles plus the smallest active streams' (up to
        max_watch_ids in all); those streams end once it has attached everything."""
        opts = self.conn.engine.opts
        handles = list(fresh)  # fewer than max_watch_ids (else they get a stream of their own)
        merged = []
        for s in sorted(active, key=lambda s: len(s.live())):
            live = s.live()
            if len(handles) + len(live) > opts.max_watch_ids:
                break
            merged.append(s)
            handles.extend(live)
        if not merged and not handles:
            return
        for s in merged:
            s.retiring = True
        self.conn.engine.stats["merges"] += 1
        new = self._start(handles) if handles else None
        self.merging = asyncio.ensure_future(self._retire(new, merged))

    async def _retire(self, new, old):
        """Ends the merged streams once the new one has attached every task (its
        SNAPSHOTs arrived, or it ended), so no task is left without a watcher. New
        batches wait for the merge at most rpc_timeout; the old streams end whenever the
        new one is ready."""
        try:
            if new is not None:
                try:
                    await asyncio.wait_for(asyncio.shield(new.ready.wait()),
                                           self.conn.engine.opts.rpc_timeout)
                except asyncio.TimeoutError:
                    self.merging = None  # a slow worker: the batches waiting go on
                    self.wake.set()
                    await new.ready.wait()
            for s in old:
                if s.task is not None and not s.task.done():
                    s.task.cancel()
                    self.conn.engine.stats["streams_open"] -= 1
        finally:
            if self.merging is asyncio.current_task():
                self.merging = None
            self.wake.set()  # batches waiting for this merge go on

    async def broken(self, handles, err):
        """A stream ended with tasks still live: watch them again, resolve unknown ones,
        or fail them once the worker stayed away for reconnect_time."""
        eng = self.conn.engine
        code = err.code() if isinstance(err, grpc.RpcError) else None
        now = time.monotonic()
        if code == grpc.StatusCode.NOT_FOUND or err is None:
            # an id the worker does not know (restarted, purged), or a stream that ended OK
            # without a terminal event: ask about each one
            await asyncio.gather(*(self._resolve(h) for h in handles))
            return
        if code is not None and code not in RETRY_CODES + (grpc.StatusCode.RESOURCE_EXHAUSTED,
                                                           grpc.StatusCode.CANCELLED,
                                                           grpc.StatusCode.INTERNAL,
                                                           grpc.StatusCode.UNKNOWN):
            for h in handles:
                h.finish(exc=from_rpc_error(err, task_id=h.task_id, address=self.conn.addr,
                                            what="WatchTasks"))
            return
        if code is None and err is not None and not isinstance(err, grpc.RpcError):
            for h in handles:
                h.finish(exc=WorkerError("watching task %s failed: %r" % (h.task_id, err),
                                         task_id=h.task_id, address=self.conn.addr))
            return
        again = []
        for h in handles:
            if h.watch_failed_since is None:
                h.watch_failed_since = now
            if now - h.watch_failed_since > eng.opts.reconnect_time:
                e = from_rpc_error(err, task_id=h.task_id, address=self.conn.addr,
                                   what="WatchTasks")
                h.finish(exc=WorkerUnavailable(
                    "lost task %s: its worker %s could not be watched for %.0f s (last: %s)" % (
                        h.task_id, self.conn.addr, eng.opts.reconnect_time, e),
                    code=e.code, details=e.details, task_id=h.task_id, address=self.conn.addr))
            else:
                again.append(h)
        eng.stats["rewatches"] += len(again)
        if again:
            await asyncio.sleep(min(2.0, 0.1 + 0.05 * len(self.streams)) * random.uniform(0.5, 1.5))
            self.add(again)

    async def _resolve(self, h):
        try:
            r = await self.conn.get(h.task_id)
        except WorkerError as e:
            if e.code == grpc.StatusCode.NOT_FOUND:
                h.finish(exc=RequestRejected(
                    "task %s: the worker %s does not know it (restarted, or its result was "
                    "purged)" % (h.task_id, self.conn.addr), code=e.code, details=e.details,
                    task_id=h.task_id, address=self.conn.addr))
            else:
                self.add([h])
            return
        if r.terminal:
            h.finish_result(r)
        else:
            self.add([h])


class _Conn(object):
    """One worker: its channel and stubs, and its watch groups (owners, observers)."""

    def __init__(self, engine, addr):
        self.engine = engine
        self.addr = addr
        self.probe = None  # a Future while a reservation finds out whether the worker is up
        options = [("grpc.max_receive_message_length", engine.opts.max_message_bytes),
                   ("grpc.max_send_message_length", engine.opts.max_message_bytes)]
        if engine.server_name:
            options.append(("grpc.ssl_target_name_override", engine.server_name))
        if engine.credentials is not None:
            self.channel = grpc.aio.secure_channel(addr, engine.credentials, options=options)
        else:
            self.channel = grpc.aio.insecure_channel(addr, options=options)
        self.stub = pb_grpc.WorkerServiceStub(self.channel)
        self.health = health_pb2_grpc.HealthStub(self.channel)
        self.groups = {True: _WatchGroup(self, True), False: _WatchGroup(self, False)}

    async def unary(self, method, request, task_id=None, what=None):
        try:
            return await getattr(self.stub, method)(request, timeout=self.engine.opts.rpc_timeout,
                                                    metadata=self.engine.metadata)
        except grpc.RpcError as e:
            raise from_rpc_error(e, task_id=task_id, address=self.addr, what=what or method) from e

    async def get(self, task_id):
        r = await self.unary("GetTaskResult", pb.GetTaskResultRequest(task_id=task_id), task_id)
        return TaskResult(r)


class Engine(object):
    """Shared by Client and AsyncClient; every method runs on the engine's loop."""

    def __init__(self, addr, etcd, prefix, credentials, server_name, token, opts):
        self.addr = addr
        self.registry = Registry(etcd, prefix) if etcd else None
        self.credentials = credentials
        self.server_name = server_name
        self.metadata = (("authorization", "Bearer " + token),) if token else ()
        self.opts = opts
        self.conns = {}
        self.closed = False
        self.handles = set()
        self.cancels = set()
        self.submit_queue = collections.deque()  # handles waiting for a submitter
        self.submitters = 0  # _submitter coroutines running, at most opts.max_submits
        self.submitting = 0  # submits started and not yet admitted or failed
        self.stats = dict(submits=0, submit_retries=0, duplicates=0, streams_opened=0,
                          streams_open=0, streams_peak=0, merges=0, rewatches=0,
                          failovers=0, slot_waits=0, refused_by={})
        self._cands = None
        self._cands_at = 0.0
        self.backoff = Backoff()  # workers that refused or were unreachable

    def conn(self, addr):
        c = self.conns.get(addr)
        if c is None:
            c = self.conns[addr] = _Conn(self, addr)
        return c

    def _track(self, h):
        """h is in self.handles until it finishes (close() fails what is left)."""
        self.handles.add(h)
        h.tracker = self.handles

    def start_submit(self, h):
        """Submits h in the background; its outcome arrives through h.on_finish. At
        most max_submits submitters run; the others' handles wait in a queue (not an
        asyncio task each: thousands of tasks waiting on a semaphore cost the client
        more CPU than their RPCs)."""
        self._track(h)
        self.submitting += 1
        self.submit_queue.append(h)
        if self.submitters < self.opts.max_submits:
            self.submitters += 1
            asyncio.ensure_future(self._submitter())

    def start_attach(self, h):
        """Watches an existing task (h.address set) until it is terminal."""
        self._track(h)
        self.conn(h.address).groups[h.own].add([h])

    async def _submitter(self):
        """Submits queued handles, one at a time, until the queue is empty."""
        try:
            while self.submit_queue:
                try:
                    await self._submit_one(self.submit_queue.popleft())
                finally:
                    # before the group's runner looks (it runs after this returns): a
                    # handle that was the last one on its way is watched without lingering
                    self.submitting -= 1
        finally:
            self.submitters -= 1

    async def _submit_one(self, h):
        if self.closed:
            h.finish(exc=WorkerError("the client was closed", task_id=h.task_id))
            return
        try:
            addr, resp = await self._submit_waiting(h)
        except WorkerError as e:
            h.finish(exc=e)
            return
        except Exception as e:  # noqa: BLE001
            h.finish(exc=WorkerError("submit of %s failed: %r" % (h.task_id, e),
                                     task_id=h.task_id))
            return
        self.stats["submits"] += 1
        h.address = addr
        if resp is not None:
            h.duplicate = resp.duplicate
            if resp.duplicate:
                self.stats["duplicates"] += 1
        if h.cancel_reason is not None:  # cancelled while the submit was on its way
            t = asyncio.ensure_future(self._cancel_quietly(h))
            self.cancels.add(t)
            t.add_done_callback(self.cancels.discard)
        if not h.done:
            self.conn(addr).groups[h.own].add([h])

    async def _submit_waiting(self, h):
        """One submit (to the worker, or failing over through etcd), tried again while
        it is NoSlot for up to slot_wait seconds."""
        deadline = time.monotonic() + self.opts.slot_wait
        delay = 0.05
        while True:
            try:
                if self.registry is not None:
                    return await self._submit_discovered(h)
                return self.addr, await self._submit_to(self.conn(self.addr), h, 0)
            except NoSlot:
                if time.monotonic() + delay >= deadline or self.closed:
                    raise
                self.stats["slot_waits"] += 1
                await asyncio.sleep(delay * random.uniform(0.5, 1.5))
                delay = min(delay * 2, 1.0)

    async def _submit_to(self, conn, h, slot_id, failover=False):
        """SubmitTask on one worker, retried with the same request (same task id) on
        UNAVAILABLE and DEADLINE_EXCEEDED for up to retry_time: the worker admits by id
        once, so a retry never runs the task twice. An ABORTED slot (its lease lapsed)
        is reserved again on the same worker. failover: the caller can pick another
        worker, so when every attempt so far was certainly not admitted, NotSent is
        raised rather than waiting out retry_time: at once when the worker refused
        (draining or shutting down after giving the slot), after FAILOVER_CONNECT_TRIES
        attempts that could not connect (it went away)."""
        deadline = time.monotonic() + self.opts.retry_time
        delay = 0.05
        req = h.request
        if slot_id:  # a copy only when it changes: h.request stays as built (args and all)
            req = pb.SubmitTaskRequest()
            req.CopyFrom(h.request)
            req.slot_id = slot_id
        unsent = tries = 0  # unsent: attempts (from the first) that never reached the worker
        while True:
            h.submit_attempts += 1
            tries += 1
            try:
                return await conn.stub.SubmitTask(req, timeout=self.opts.rpc_timeout,
                                                  metadata=self.metadata)
            except grpc.RpcError as e:
                code = e.code()
                if unsent == tries - 1 and (_not_connected(e) or _refused(e)):
                    unsent += 1
                    if failover and (unsent >= FAILOVER_CONNECT_TRIES or _refused(e)):
                        raise NotSent(from_rpc_error(e, task_id=h.task_id, address=conn.addr,
                                                     what="SubmitTask")) from e
                if code in RETRY_CODES and time.monotonic() + delay < deadline and not self.closed:
                    self.stats["submit_retries"] += 1
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, 1.0)
                    continue
                if code == grpc.StatusCode.ABORTED and req.slot_id and \
                        time.monotonic() < deadline:
                    req.slot_id = (await self._reserve(conn, h)).slot_id
                    continue
                raise from_rpc_error(e, task_id=h.task_id, address=conn.addr,
                                     what="SubmitTask") from e

    async def _reserve(self, conn, h):
        return await conn.unary("RequestTaskSlot", pb.RequestTaskSlotRequest(
            task_id=h.task_id, ttl_ms=self.opts.slot_ttl_ms), h.task_id)

    async def _candidates(self, h):
        """The registered candidates in the picking rule's order for h's task
        (discovery.pick_order): the epoch it pins, then the back-off."""
        now = time.monotonic()
        if self._cands is None or now - self._cands_at > self.opts.discovery_ttl:
            loop = asyncio.get_running_loop()
            try:
                self._cands = await loop.run_in_executor(None, self.registry.candidates)
            except EtcdError as e:
                cls = WorkerUnavailable if e.unreachable else RequestRejected
                raise cls(str(e)) from e
            self._cands_at = now
        fn = h.request.function
        return pick_order(self._cands, fn.name, fn.epoch, self.backoff)

    async def _next_candidate(self, pending):
        """Takes the next worker to try from `pending` (in the picking order). While
        another submit is probing it (a reservation in flight on a connection that is
        not up yet), waits for that probe (at most rpc_timeout) instead of piling on; a
        worker backed off meanwhile goes behind the others (once)."""
        moved = set()
        while True:
            w = pending[0]
            c = self.conn(w.address)
            probe = c.probe
            if probe is not None and c.channel.get_state() != grpc.ChannelConnectivity.READY:
                await asyncio.wait([asyncio.shield(probe)], timeout=self.opts.rpc_timeout)
                if not probe.done():
                    return pending.pop(0)  # no answer in time: go ahead
                continue
            if w.address not in moved and len(pending) > 1 and \
                    self.backoff.active(w.address, w.updated_unix_ms):
                moved.add(w.address)
                pending.append(pending.pop(0))
                continue
            return pending.pop(0)

    async def _submit_discovered(self, h):
        """workerctl's rule: the registered workers in the picking order, moving on
        while one answers RESOURCE_EXHAUSTED (not for the request's size) or
        UNAVAILABLE, at most 8 workers; each of those is backed off. The move happens
        at RequestTaskSlot, which runs nothing; once a worker gave a slot the task goes
        to that worker only (SubmitTask retried there), so a failover never runs a task
        twice."""
        reg = self.registry
        cands, dropped = await self._candidates(h)
        where = "registered under %s in etcd %s" % (reg.prefix, ",".join(reg.endpoints))
        if not cands:
            self._cands = None
            fn = h.request.function
            if fn.epoch and dropped:
                raise WorkerUnavailable("no ready worker with free slots %s holds epoch %d of %s "
                                        "(%d without it)" % (where, fn.epoch, fn.name, dropped),
                                        task_id=h.task_id)
            if reg.full:
                raise NoSlot("every ready worker %s is out of slots (%d workers)" % (
                    where, reg.full), code=grpc.StatusCode.RESOURCE_EXHAUSTED, task_id=h.task_id)
            raise WorkerUnavailable("no ready worker with free slots %s" % where,
                                    task_id=h.task_id)
        last = None
        tried = []
        pending = cands[:MAX_CANDIDATES]
        while pending:
            w = await self._next_candidate(pending)
            conn = self.conn(w.address)
            tried.append(w.address)
            # the first reservation on a connection that is not up finds out whether the
            # worker is there; other submits wait for it (_next_candidate)
            probe = conn.probe is None and \
                conn.channel.get_state() != grpc.ChannelConnectivity.READY
            if probe:
                conn.probe = asyncio.get_running_loop().create_future()
            try:
                slot = await self._reserve(conn, h)
            except (NoSlot, WorkerUnavailable) as e:
                # a reservation runs nothing: moving on after a deadline is safe too (the
                # lease of a slot reserved there lapses)
                last = e
                self.backoff.fail(w.address, w.updated_unix_ms)
                self._cands = None
                self.stats["failovers"] += 1
                self.stats["refused_by"][w.address] = self.stats["refused_by"].get(
                    w.address, 0) + 1
                continue
            finally:
                if probe:
                    conn.probe.set_result(None)
                    conn.probe = None
            self.backoff.ok(w.address)
            if slot.state in (pb.TASK_STATE_SUCCEEDED, pb.TASK_STATE_FAILED,
                              pb.TASK_STATE_CANCELLED):
                return w.address, None  # the id already ran here: the watch delivers it
            try:
                return w.address, await self._submit_to(conn, h, slot.slot_id, failover=True)
            except NotSent as e:
                # it went away after giving the slot, and nothing reached it: the task
                # was not admitted there, so another worker may take it
                last = e.error
                self.backoff.fail(w.address, w.updated_unix_ms)
                self._cands = None
                self.stats["failovers"] += 1
                self.stats["refused_by"][w.address] = self.stats["refused_by"].get(
                    w.address, 0) + 1
        msg = "none of the %d workers tried (%s) took task %s (%s); last: %s" % (
            len(tried), ", ".join(tried), h.task_id, where, last)
        raise type(last)(msg, code=last.code, details=last.details, task_id=h.task_id,
                         address=last.address)

    def start_cancel(self, h, reason):
        """cancel(h, reason) in the background; close() waits for it to be sent."""
        t = asyncio.ensure_future(self.cancel(h, reason))
        self.cancels.add(t)
        t.add_done_callback(self.cancels.discard)
        t.add_done_callback(lambda t: t.cancelled() or t.exception())  # retrieved: no warning

    async def _cancel_quietly(self, h):
        try:
            await self.cancel_task(h.address, h.task_id, h.cancel_reason or "")
        except WorkerError:
            pass

    async def cancel_task(self, addr, task_id, reason=""):
        """CancelTask; the task's TaskResult as it stood after the request."""
        r = await self.conn(addr).unary("CancelTask", pb.CancelTaskRequest(
            task_id=task_id, reason=reason), task_id)
        return TaskResult(r)

    async def cancel(self, h, reason):
        """Cancels h's task. When it was still running (or not yet admitted: CancelTask
        follows the admission) h finishes with a TaskCancelled marked by_client, which
        is returned; None (h finished with its result) when it had already ended."""
        if h.done:
            return None
        reason = reason or "cancelled by the client"
        h.cancel_reason = reason  # not admitted yet: _submit sends CancelTask once it is
        if h.address is not None:
            r = await self.cancel_task(h.address, h.task_id, reason)
            if h.done:  # its terminal event came meanwhile
                return h.exc if getattr(h.exc, "by_client", False) else None
            if r.terminal and r.state != "CANCELLED":
                # it ended before the cancel: its result (outputs included) stands
                h.finish_result(await self.conn(h.address).get(h.task_id))
                return None
        exc = TaskCancelled(reason, failure_code="CANCELLED", task_id=h.task_id,
                            address=h.address)
        exc.by_client = True
        h.finish(exc=exc)
        return exc

    async def get(self, task_id, addr=None):
        return await self.conn(addr or self._default_addr()).get(task_id)

    def _default_addr(self):
        if self.addr:
            return self.addr
        raise ValueError("with etcd discovery, name the worker: address=HOST:PORT (a "
                         "future's .address says where its task went)")

    async def health(self, addr=None):
        """'SERVING' or 'NOT_SERVING' (UNKNOWN...) from grpc.health.v1 on the worker."""
        c = self.conn(addr or self._default_addr())
        try:
            r = await c.health.Check(health_pb2.HealthCheckRequest(),
                                     timeout=self.opts.rpc_timeout, metadata=self.metadata)
        except grpc.RpcError as e:
            raise from_rpc_error(e, address=c.addr, what="Health.Check") from e
        return health_pb2.HealthCheckResponse.ServingStatus.Name(r.status)

    async def workers(self):
        if self.registry is None:
            raise ValueError("workers() needs etcd discovery: Client(etcd=...)")
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(None, self.registry.workers)
        except EtcdError as e:
            raise (WorkerUnavailable if e.unreachable else RequestRejected)(str(e)) from e

    async def _attach_owned(self):
        """close(): the worker learns that a task has an owner only from a WatchTasks
        stream, so owned tasks still waiting for theirs (watch_linger) get one now, and
        this waits (rpc_timeout at most) until every owned task's stream has attached it
        (its SNAPSHOT came, or the stream ended). Ending the streams then starts the
        worker's watch grace: the task fails OWNER_LOST unless someone attaches. Before,
        a client closed within watch_linger of a submit left its task running unowned
        to its end."""
        waits = []
        for c in self.conns.values():
            g = c.groups[True]
            pending = [h for h in g.pending if not h.done]
            g.pending = []
            for i in range(0, len(pending), self.opts.max_watch_ids):
                g._start(pending[i:i + self.opts.max_watch_ids])
            waits.extend(asyncio.ensure_future(s.ready.wait()) for s in list(g.streams)
                         if not s.retiring)
        if waits:
            _, late = await asyncio.wait(waits, timeout=self.opts.rpc_timeout)
            for t in late:
                t.cancel()

    async def close(self):
        """Ends every stream and channel; unfinished futures fail WorkerError. Tasks this
        client owned fail OWNER_LOST after the worker's watch grace unless re-attached."""
        if self.closed:
            return
        self.closed = True
        if self.cancels:  # cancels asked for just before: sent before the channels close
            await asyncio.wait(list(self.cancels), timeout=self.opts.rpc_timeout)
        await self._attach_owned()
        for h in list(self.handles):
            h.finish(exc=WorkerError("the client was closed before task %s ended (it owned "
                                     "the task: the worker fails it OWNER_LOST after its "
                                     "watch grace unless someone watches it)" % h.task_id,
                                     task_id=h.task_id, address=h.address))
        tasks = []
        for c in self.conns.values():
            for g in c.groups.values():
                if g.runner is not None:
                    g.runner.cancel()
                    tasks.append(g.runner)
                for s in list(g.streams):
                    if s.task is not None:
                        s.task.cancel()
                        tasks.append(s.task)
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        for c in self.conns.values():
            await c.channel.close()


def channel_credentials(tls, root_certificates, client_cert, client_key, server_name):
    """grpc.ChannelCredentials, or None for plaintext. PEM arguments are bytes or file
    paths; TLS is on when any of them (or tls=True: the system's roots) is given."""
    def pem(v):
        if v is None or isinstance(v, bytes):
            return v
        with open(os.fspath(v), "rb") as f:
            return f.read()
    if not (tls or root_certificates or client_cert or client_key or server_name):
        return None
    if bool(client_cert) != bool(client_key):
        raise ValueError("client_cert and client_key go together")
    return grpc.ssl_channel_credentials(root_certificates=pem(root_certificates),
                                        private_key=pem(client_key),
                                        certificate_chain=pem(client_cert))

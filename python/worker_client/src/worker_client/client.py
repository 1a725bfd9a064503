"""Client: the blocking client. Every RPC runs on one private event-loop thread (all
tasks share a few WatchTasks streams per worker); futures complete, and their callbacks
and progress callbacks run, on one delivery thread, so a slow callback never stalls the
network. Two threads per Client, whatever the number of tasks."""

import asyncio
import collections
import concurrent.futures
import queue
import threading

from . import _common
from .errors import WorkerError


class _Delivery(object):
    """One thread running the callables put to it, in order."""

    def __init__(self):
        self.q = queue.SimpleQueue()
        self.thread = threading.Thread(target=self._run, name="worker-client-delivery",
                                       daemon=True)
        self.thread.start()

    def _run(self):
        while True:
            fn = self.q.get()
            if fn is None:
                return
            try:
                fn()
            except Exception:  # noqa: BLE001 (a user callback's error must not end delivery)
                import traceback
                traceback.print_exc()
            fn = None  # not held (with the future it delivered to) until the next one

    def put(self, fn):
        self.q.put(fn)

    def stop(self):
        self.q.put(None)
        if threading.current_thread() is not self.thread:
            self.thread.join(10)


class TaskFuture(concurrent.futures.Future):
    """A task on a worker, as a concurrent.futures.Future: result(timeout), exception(),
    add_done_callback, concurrent.futures.wait / as_completed. result() is the call's
    value (builder single), the list of values in call order (map, range), or with a
    result_handler the writer's reports; it raises TaskFailed (failure code, message,
    the failed call's remote traceback), TaskCancelled, NoSlot, WorkerUnavailable or
    RequestRejected. cancel() sends CancelTask. Attributes: task_id, address (the
    worker, once admitted), duplicate (the worker already had this id), progress (the
    last Progress)."""

    def __init__(self, client, handle):
        super().__init__()
        self._client = client
        self._handle = handle
        self._cancel_exc = None
        self._progress_callbacks = []
        self._plock = threading.Lock()
        self._notified = False

    task_id = property(lambda self: self._handle.task_id)
    address = property(lambda self: self._handle.address)
    duplicate = property(lambda self: self._handle.duplicate)
    progress = property(lambda self: self._handle.last_progress)

    def __repr__(self):
        return "<TaskFuture %s %s>" % (self.task_id, self._state)

    def cancel(self, reason=None):
        """Cancels the task (CancelTask with `reason`). True when the future is now
        cancelled (result() raises TaskCancelled); False when the task had already ended
        (its result stays). A failed CancelTask raises its WorkerError."""
        if self.done():
            return False
        exc = self._client._run(self._client._engine.cancel(self._handle, reason))
        if exc is None:
            return False
        self._cancel_exc = exc
        self._cancel_now()
        return True

    def _cancel_now(self):
        with self._plock:
            if super().cancel() and not self._notified:
                self._notified = True
                self.set_running_or_notify_cancel()  # wakes wait() / as_completed()

    def result(self, timeout=None):
        try:
            return super().result(timeout)
        except concurrent.futures.CancelledError:
            if self._cancel_exc is not None:
                raise self._cancel_exc from None
            raise

    def exception(self, timeout=None):
        try:
            return super().exception(timeout)
        except concurrent.futures.CancelledError:
            if self._cancel_exc is not None:
                raise self._cancel_exc from None
            raise

    def task_result(self, timeout=None):
        """The task's whole TaskResult once it ended (None when it never ran: a submit
        refused, a client closed)."""
        try:
            self.exception(timeout)
        except concurrent.futures.CancelledError:
            pass
        return self._handle.result

    def snapshot(self):
        """GetTaskResult now: the live TaskResult (calls counted so far)."""
        return self._client.get(self.task_id, address=self.address)

    def add_progress_callback(self, fn):
        """fn(Progress) for every later progress observation (delivery thread)."""
        with self._plock:
            self._progress_callbacks.append(fn)

    def progress_events(self, timeout=None):
        """An iterator over the task's progress observations until it ends (the
        terminal one included); queue.Empty after `timeout` seconds without one."""
        q = queue.SimpleQueue()
        self.add_progress_callback(q.put)
        self.add_done_callback(lambda f: q.put(None))
        while True:
            p = q.get(timeout=timeout)
            if p is None:
                return
            yield p
            if p.kind == "terminal":
                return

    def _finish_from_loop(self, value, exc, result):
        """The handle's on_finish, on the network thread. A future nobody added a
        callback to is completed here (set_result only wakes the threads waiting in
        result()/wait()); otherwise on the delivery thread, after its progress
        callbacks, so no user code runs on the network thread. Deciding under the
        future's condition: a callback added after that runs in its adder's thread."""
        with self._condition:
            if not self._done_callbacks and not self._progress_callbacks and (
                    exc is None or not getattr(exc, "by_client", False)):
                self._deliver_finish(value, exc)
                return
        self._client._delivery.put(lambda: self._deliver_finish(value, exc))

    # called on the delivery thread
    def _deliver_progress(self, p):
        with self._plock:
            cbs = list(self._progress_callbacks)
        for cb in cbs:
            cb(p)

    def _deliver_finish(self, value, exc):
        if self.done():
            return
        if exc is not None and getattr(exc, "by_client", False):
            self._cancel_exc = exc
            self._cancel_now()
        elif exc is not None:
            self.set_exception(exc)
        else:
            self.set_result(value)


class Client(_common.ClientBase):
    """A client of one worker (`Client("host:port")`) or of the workers registered in
    etcd (`Client(etcd="http://127.0.0.1:2379", prefix="/workers/")`: each submit goes to
    the best ready worker with free slots, moving on at RESOURCE_EXHAUSTED or
    UNAVAILABLE, as workerctl does; a task that pins an epoch only to workers whose
    record lists it (a record without "code" or code_truncated: a last resort); a worker
    that refused or was unreachable is backed off, 2 s doubling to 30 s and while its
    record is not re-put, so a killed worker's stale record costs one attempt: the
    picking rule of discovery.py and the README's "Picking a worker"). With neither: $WORKERCTL_ADDR, else
    $WORKERCTL_ETCD, else 127.0.0.1:7070.

    TLS: root_certificates (PEM bytes or a file path; tls=True alone trusts the
    system's roots), client_cert and client_key for mutual TLS, server_name when the
    certificate names another host. token: sent as "authorization: Bearer TOKEN".
    Tuning keywords: see worker_client.Options. A context manager; close() ends it.
    submit, map, range and attach (see ClientBase) return TaskFutures."""

    def __init__(self, addr=None, *, etcd=None, prefix=None, tls=False, root_certificates=None,
                 client_cert=None, client_key=None, server_name=None, token=None, **options):
        self._engine = _common.make_engine(addr, etcd, prefix, tls, root_certificates,
                                           client_cert, client_key, server_name, token, options)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="worker-client-io",
                                        daemon=True)
        self._thread.start()
        self._delivery = _Delivery()
        self._closed = False
        self._inbox = collections.deque()  # (engine method, handle) for the network thread
        self._inbox_woken = False

    # ---- plumbing ----
    def _on_loop(self):
        return threading.current_thread() is self._thread

    def _run(self, coro, timeout=None):
        if self._closed:
            coro.close()
            raise WorkerError("the client is closed")
        if self._on_loop():
            coro.close()
            raise RuntimeError("a blocking Client method was called from a callback on the "
                               "client's network thread")
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    def _start(self, engine_method, handle):
        """Hands (engine_method, handle) to the network thread: a burst of submits
        wakes it once (call_soon_threadsafe writes to the loop's wake-up pipe), not
        once per submit."""
        if self._closed:
            raise WorkerError("the client is closed")
        self._inbox.append((engine_method, handle))
        if not self._inbox_woken:
            self._inbox_woken = True
            self._loop.call_soon_threadsafe(self._take_inbox)

    def _take_inbox(self):
        # cleared before the queue is read: a _start that still sees it set appended
        # before this reads the queue
        self._inbox_woken = False
        inbox = self._inbox
        while inbox:
            engine_method, handle = inbox.popleft()
            try:
                engine_method(handle)
            except Exception as e:  # noqa: BLE001 (a bug must not strand the handles after it)
                handle.finish(exc=WorkerError("starting task %s failed: %r" % (handle.task_id, e),
                                              task_id=handle.task_id))

    def _bind(self, handle, sink):
        fut = TaskFuture(self, handle)
        if sink is not None:
            fut.add_progress_callback(sink)
        d = self._delivery

        def on_progress(p):  # the handle keeps the last one; only callbacks need the thread
            if fut._progress_callbacks:
                d.put(lambda: fut._deliver_progress(p))
        handle.on_progress = on_progress
        handle.on_finish = fut._finish_from_loop
        return fut

    def get(self, task_id, *, address=None):
        """GetTaskResult: the task's TaskResult (live snapshot or terminal result)."""
        return self._run(self._engine.get(task_id, address))

    def cancel(self, task_id, reason="", *, address=None):
        """CancelTask by id; the TaskResult as it stood after the request."""
        addr = address or self._engine._default_addr()
        return self._run(self._engine.cancel_task(addr, task_id, reason))

    def health(self, *, address=None):
        """The worker's grpc.health.v1 status: "SERVING" or "NOT_SERVING"."""
        return self._run(self._engine.health(address))

    def workers(self):
        """The workers registered in etcd (discovery.Worker: address, ready, draining,
        free_slots, code / holds(fn, epoch) / epochs(fn), ...), invalid entries included."""
        return self._run(self._engine.workers())

    def stats(self):
        """Counters: submits, submit_retries, duplicates, streams_opened, streams_open,
        streams_peak, merges, rewatches, failovers, slot_waits; refused_by: {address:
        how many reservations that worker refused or did not answer} (etcd discovery)."""
        return self._run(self._stats())

    async def _stats(self):
        st = self._engine.stats
        return dict(st, refused_by=dict(st["refused_by"]))

    def close(self):
        """Ends the streams and channels and the client's threads; futures not done
        fail with WorkerError. Tasks they owned fail OWNER_LOST after the worker's
        watch grace unless another client attaches to them (a task submitted just
        before is attached first, so the worker knows it had an owner)."""
        if self._closed:
            return
        self._run(self._engine.close())
        self._closed = True
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()
        self._delivery.stop()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

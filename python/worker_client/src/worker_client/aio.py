"""AsyncClient: the same surface as Client for asyncio. Its futures are asyncio
futures (await them; asyncio.wait / as_completed / gather / wait_for work), and
`async for p in future.progress_events()` follows a task's progress. Everything runs
on the loop the client is first used on; no thread is started (etcd reads run on the
loop's default executor)."""

import asyncio

from . import _common


class AsyncTaskFuture(asyncio.Future):
    """A task as an asyncio.Future: `await fut` gives the value (as
    TaskFuture.result()) or raises TaskFailed, TaskCancelled, NoSlot, ...
    cancel() cancels the future at once and sends CancelTask in the background;
    `await fut.cancel_task(reason)` sends it and says whether the task was still
    running. Attributes: task_id, address, duplicate, progress."""

    def __init__(self, client, handle):
        super().__init__(loop=client._loop)
        self._client = client
        self._handle = handle
        self._queues = []
        self._progress_callbacks = []

    task_id = property(lambda self: self._handle.task_id)
    address = property(lambda self: self._handle.address)
    duplicate = property(lambda self: self._handle.duplicate)
    progress = property(lambda self: self._handle.last_progress)

    def cancel(self, msg=None):
        if self.done():
            return False
        self._client._engine.start_cancel(self._handle, msg)
        return super().cancel(msg)

    async def cancel_task(self, reason=None):
        """Sends CancelTask: True when the future is now cancelled, False when the task
        had already ended (its result stays)."""
        if self.done():
            return False
        exc = await self._client._engine.cancel(self._handle, reason)
        if exc is None:
            return False
        super().cancel(str(exc))
        return True

    def task_result(self):
        """The whole TaskResult once the task ended (None if it never ran)."""
        return self._handle.result

    async def snapshot(self):
        """GetTaskResult now: the live TaskResult."""
        return await self._client.get(self.task_id, address=self.address)

    def add_progress_callback(self, fn):
        """fn(Progress) for every later progress observation (on the loop)."""
        self._progress_callbacks.append(fn)

    async def progress_events(self):
        """Async iterator over the task's progress observations until it ends."""
        q = asyncio.Queue()
        self._queues.append(q)
        if self.done():
            return
        try:
            while True:
                p = await q.get()
                if p is None:
                    return
                yield p
                if p.kind == "terminal":
                    return
        finally:
            self._queues.remove(q)

    def _on_progress(self, p):
        for q in self._queues:
            q.put_nowait(p)
        for cb in list(self._progress_callbacks):
            cb(p)

    def _on_finish(self, value, exc, result):
        for q in self._queues:
            q.put_nowait(None)
        if self.done():
            return
        if exc is not None and getattr(exc, "by_client", False):
            super().cancel(str(exc))
        elif exc is not None:
            self.set_exception(exc)
        else:
            self.set_result(value)


class AsyncClient(_common.ClientBase):
    """Client's twin for asyncio: the same constructor arguments; submit, map, range
    and attach return AsyncTaskFutures at once (call them inside the running loop);
    get, cancel, health, workers, stats and close are coroutines. `async with`."""

    def __init__(self, addr=None, *, etcd=None, prefix=None, tls=False, root_certificates=None,
                 client_cert=None, client_key=None, server_name=None, token=None, **options):
        self._engine = _common.make_engine(addr, etcd, prefix, tls, root_certificates,
                                           client_cert, client_key, server_name, token, options)
        self._loop = None

    def _start(self, engine_method, handle):
        engine_method(handle)

    def _bind(self, handle, sink):
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
        fut = AsyncTaskFuture(self, handle)
        if sink is not None:
            fut.add_progress_callback(sink)
        handle.on_progress = fut._on_progress
        handle.on_finish = fut._on_finish
        return fut

    async def get(self, task_id, *, address=None):
        """As Client.get."""
        return await self._engine.get(task_id, address)

    async def cancel(self, task_id, reason="", *, address=None):
        """As Client.cancel."""
        return await self._engine.cancel_task(address or self._engine._default_addr(), task_id,
                                              reason)

    async def health(self, *, address=None):
        """As Client.health."""
        return await self._engine.health(address)

    async def workers(self):
        """As Client.workers."""
        return await self._engine.workers()

    async def stats(self):
        """As Client.stats."""
        st = self._engine.stats
        return dict(st, refused_by=dict(st["refused_by"]))

    async def close(self):
        """As Client.close."""
        await self._engine.close()

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        await self.close()

"""What Client and AsyncClient share above the engine: their constructor arguments and
the arguments of submit/map/range/attach turned into engine Handles."""

from ._engine import Engine, Handle, Options, build_request, channel_credentials
from .discovery import DEFAULT_PREFIX, default_target
from .progress import make_bar


def make_engine(addr, etcd, prefix, tls, root_certificates, client_cert, client_key, server_name,
                token, options):
    """The engine for a client's arguments (see Client). addr and etcd together are a
    ValueError; neither: workerctl's rule ($WORKERCTL_ADDR, $WORKERCTL_ETCD,
    127.0.0.1:7070)."""
    if addr and etcd:
        raise ValueError("give an address (this worker) or etcd= (discover workers), not both")
    if not addr and not etcd:
        addr, etcd = default_target()
    creds = channel_credentials(tls, root_certificates, client_cert, client_key, server_name)
    return Engine(addr, etcd, DEFAULT_PREFIX if prefix is None else prefix, creds, server_name, token,
                  Options(**options))


def range_args(start_stop, step, chunk):
    """range(stop) / range(start, stop) / range(start, stop, step) as the range
    builder's args {"start","stop","step"[,"chunk"]}."""
    if not 1 <= len(start_stop) <= 2:
        raise TypeError("range(fn, stop) or range(fn, start, stop, step=1, chunk=N)")
    start, stop = (0, start_stop[0]) if len(start_stop) == 1 else start_stop
    args = {"start": int(start), "stop": int(stop), "step": int(step)}
    if chunk is not None:
        args["chunk"] = int(chunk)
    return args


def new_handle(fn, args, own, progress, kw):
    """A Handle for submit(fn, args, **kw) (the request built and checked here, in the
    caller: bad arguments raise at once), and the progress bar when progress is True."""
    h = Handle(build_request(fn, args, **kw), own=own)
    return h, _progress_sink(h.task_id, progress)


def attach_handle(task_id, address, own, progress):
    h = Handle(None, own=own, address=address)
    h.task_id = task_id
    h.builder = None  # unknown: result() is the list of values (one per call)
    return h, _progress_sink(task_id, progress)


def _progress_sink(task_id, progress):
    """progress=True: a bar (tqdm when importable); a callable: itself; else None."""
    if progress is True:
        return make_bar(task_id).update
    if progress is None or progress is False:
        return None
    if not callable(progress):
        raise TypeError("progress must be a callable or True (a progress bar)")
    return progress


class ClientBase(object):
    """submit, map, range and attach, shared by Client and AsyncClient: each builds the
    engine Handle here, then the subclass binds its future type (_bind) and hands the
    handle to the engine on the engine's loop (_start)."""

    def _bind(self, handle, sink):
        raise NotImplementedError

    def _start(self, engine_method, handle):
        raise NotImplementedError

    def submit(self, fn, args=None, *, builder="single", epoch=None, retries=None, timeout=None,
               call_timeout=None, task_id=None, labels=None, result_handler=None, options=None,
               entrypoint=None, max_failed_calls=None, own=True, progress=None):
        """Submits function `fn` (its name in the code store) with `args` (JSON-able, or
        bytes) and returns its future at once; the SubmitTask runs in the background.
        builder: "single", "map" or "range" (options: its options); epoch: None =
        CURRENT; retries=N: N retries per call; timeout / call_timeout: seconds for the
        task / each call attempt; task_id: None = generated (the same id on every retry
        of this submit); labels: dict; result_handler: "file" or {"type": "file",
        "name": ...}; max_failed_calls: tolerate that many failed calls (CONTINUE); own:
        the future's watch owns the task (the worker fails it OWNER_LOST if this client
        goes away; False: an observer); progress: a callable(Progress) or True for a
        progress bar. TypeError/ValueError for bad arguments."""
        h, sink = new_handle(fn, args, own, progress, dict(
            builder=builder, epoch=epoch, retries=retries, timeout=timeout,
            call_timeout=call_timeout, task_id=task_id, labels=labels,
            result_handler=result_handler, options=options, entrypoint=entrypoint,
            max_failed_calls=max_failed_calls))
        fut = self._bind(h, sink)
        self._start(self._engine.start_submit, h)
        return fut

    def map(self, fn, items, **kw):
        """One map task: a call of fn per item; its value is the list of values in item
        order. Keywords as submit."""
        return self.submit(fn, list(items), builder="map", **kw)

    def range(self, fn, *start_stop, step=1, chunk=None, **kw):
        """One range task, range(fn, stop) or range(fn, start, stop, step=1, chunk=N):
        a call per chunk of the range with args {"start","stop","step"}; its value is the
        list of the chunks' values in order. Keywords as submit."""
        return self.submit(fn, range_args(start_stop, step, chunk), builder="range", **kw)

    def attach(self, task_id, address=None, *, own=True, builder=None, progress=None):
        """A future for a task already on a worker (submitted by another client, or
        re-attached after a restart within the worker's watch grace). address: the
        worker (required with etcd discovery). Its value is the list of values, or the
        single value with builder="single"."""
        h, sink = attach_handle(task_id, address or self._engine._default_addr(), own,
                                progress)
        h.builder = builder
        fut = self._bind(h, sink)
        self._start(self._engine.start_attach, h)
        return fut

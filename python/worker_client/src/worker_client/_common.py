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

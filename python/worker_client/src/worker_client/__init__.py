"""worker_client: the Python client of the Worker.

    from worker_client import Client

    with Client("127.0.0.1:7070") as client:
        fut = client.submit("hello", {"name": "Ada"})       # a concurrent.futures.Future
        print(fut.result(timeout=60))
        squares = client.map("square", [1, 2, 3]).result()  # one map task, values in order

Client(etcd="http://127.0.0.1:2379") discovers workers as workerctl does; AsyncClient
is the same for asyncio. Errors: NoSlot, WorkerUnavailable, RequestRejected,
TaskFailed, TaskCancelled (all WorkerError). See the README section "From Python:
worker_client".
"""

from ._engine import Options, new_task_id
from .aio import AsyncClient, AsyncTaskFuture
from .client import Client, TaskFuture
from .discovery import Registry
from .errors import (CallError, NoSlot, RequestRejected, TaskCancelled, TaskFailed, WorkerError,
                     WorkerUnavailable)
from .results import CallOutput, Progress, TaskResult

__version__ = "0.1.0"

__all__ = ["AsyncClient", "AsyncTaskFuture", "CallError", "CallOutput", "Client", "NoSlot",
           "Options", "Progress", "Registry", "RequestRejected", "TaskCancelled", "TaskFailed",
           "TaskFuture", "TaskResult", "WorkerError", "WorkerUnavailable", "new_task_id"]

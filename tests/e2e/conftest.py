"""Fixtures for the end-to-end tests: a real `worker` process with real Python
executors, driven by a real gRPC client (Debian's python3-grpcio).

Environment: WK_BUILD_DIR names the build directory holding `worker` and `workerctl`
(the test command sets it)."""

import atexit
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

import grpc
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.environ.get("WK_BUILD_DIR", os.path.join(ROOT, "build"))
WORKER = os.path.join(BUILD, "worker")
WORKERCTL = os.path.join(BUILD, "workerctl")
# workerctl's per-worker back-off table (a file shared by a user's invocations) is off in
# the tests, so one test's refusals never reorder another's picks; the tests of the
# back-off (test_pick_rule_e2e.py) give each run its own directory.
os.environ["WORKERCTL_STATE_DIR"] = ""


def _generate_stubs():
    out = tempfile.mkdtemp(prefix="wk-stubs-")
    subprocess.run(
        ["protoc", "--python_out=" + out, "--grpc_python_out=" + out,
         "--plugin=protoc-gen-grpc_python=/usr/bin/grpc_python_plugin",
         "-I", os.path.join(ROOT, "proto"),
         os.path.join(ROOT, "proto/worker/v1/worker.proto"),
         os.path.join(ROOT, "proto/grpc/health/v1/health.proto")],
        check=True)
    sys.path.insert(0, out)
    return out


def _load_by_path(name, path):
    import importlib.util
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


STUBS = _generate_stubs()
from worker.v1 import worker_pb2 as pb  # noqa: E402
from worker.v1 import worker_pb2_grpc as pb_grpc  # noqa: E402
# grpc.health.v1 would collide with the grpc package itself: load it under another name
health_pb2 = _load_by_path("wk_health_pb2", os.path.join(STUBS, "grpc/health/v1/health_pb2.py"))


class HealthStub(object):
    def __init__(self, channel):
        self.Check = channel.unary_unary(
            "/grpc.health.v1.Health/Check",
            request_serializer=health_pb2.HealthCheckRequest.SerializeToString,
            response_deserializer=health_pb2.HealthCheckResponse.FromString)
        self.Watch = channel.unary_stream(
            "/grpc.health.v1.Health/Watch",
            request_serializer=health_pb2.HealthCheckRequest.SerializeToString,
            response_deserializer=health_pb2.HealthCheckResponse.FromString)

FUNCTIONS = {
    "echo": "def handler(args, ctx):\n    return {'echo': args, 'index': ctx.call_index, 'epoch': ctx.epoch}\n",
    "boom": ("def handler(args, ctx):\n"
             "    raise ValueError('boom: ' + str(args))\n"),
    "sleepy": ("import time\n"
               "def handler(args, ctx):\n"
               "    time.sleep(args.get('seconds', 1))\n"
               "    return {'slept': args.get('seconds', 1), 'epoch': ctx.epoch}\n"),
    "counter": ("import os\n"
                "def handler(args, ctx):\n"
                "    with open(args['path'], 'a') as f:\n"
                "        f.write(ctx.task_id + '\\n')\n"
                "    return {'ok': True}\n"),
    "noop": "def handler(args, ctx):\n    return None\n",
    "printer": ("import sys\n"
                "def handler(args, ctx):\n"
                "    print('to stdout', args)\n"
                "    print('to stderr', file=sys.stderr)\n"
                "    return 'printed'\n"),
}


# Functions the fixtures published, per process: (name, files) -> (a copy of the
# function's directory in the code store as its first `workerctl deploy` left it, that
# code root, what the deploy printed). Epoch 1 of the same files is the same tree in every
# code root, so the next worker gets a copy instead of another deploy and its check (a
# Python start, ~0.1 s of CPU, six or more per test). The tests of deploying itself run
# workerctl directly.
_PUBLISHED = {}
_published_root = None  # where the copies are kept: made at the first one


def _published_dir():
    global _published_root
    if _published_root is None:
        _published_root = temp_dir("wk-published-")
    return _published_root


def temp_dir(prefix):
    """A new temporary directory, removed with everything in it (a worker's code store
    and log file) when this process exits: for the benchmarks (tests use tmp_path)."""
    d = tempfile.mkdtemp(prefix=prefix)
    atexit.register(shutil.rmtree, d, True)
    return d


class Worker(object):
    """A running worker process."""

    def __init__(self, tmp, extra_args=(), executors=2, python="/usr/bin/python3", env=None,
                 wrapper=(), start_timeout=20, binary=WORKER, cwd=None, keep_logs=True):
        """keep_logs False (benchmarks): the worker's stderr goes to the file
        `log_path` instead of a pipe this process reads and parses as it comes, and
        events() parses that file when asked. Reading and parsing the records as they
        came (two or more per task) cost this process ~23 us of CPU per task, about what
        the C load generator spends, on the cores the worker and the generator share;
        reading them off the pipe unparsed still ~6 us."""
        self.tmp = tmp
        self.code_root = os.path.join(tmp, "code")
        os.makedirs(self.code_root, exist_ok=True)
        self.logs = []
        self.lock = threading.Lock()
        extra_args = list(extra_args)
        as_root = os.geteuid() == 0 and not any(a.startswith("--reuid") for a in wrapper)
        if as_root and not any(a.startswith("--executor-user") for a in extra_args):
            # Run as root, the worker would start executors as `nobody`, which cannot
            # reach pytest's 0700 directories (code, files the functions write): executors
            # stay root here. test_security_procs_e2e.py tests the default account.
            extra_args += ["--executor-user", "root"]
        args = list(wrapper) + [binary, "--listen", "127.0.0.1:0", "--code-root", self.code_root,
                "--executors", str(executors), "--python", python] + extra_args
        self.log_path = None
        stderr = subprocess.PIPE
        if not keep_logs:
            self.log_path = os.path.join(tmp, "worker-stderr.log")
            stderr = open(self.log_path, "wb")
        self.proc = subprocess.Popen(args, stderr=stderr, stdout=subprocess.DEVNULL,
                                     env=env, cwd=cwd)
        if not keep_logs:
            stderr.close()  # the worker holds its own descriptor
        self.port = None
        self.listening = threading.Event()
        self.reader = threading.Thread(target=self._read if keep_logs else self._wait_listening,
                                       daemon=True)
        self.reader.start()
        if not self.listening.wait(start_timeout):
            self.kill()
            raise RuntimeError("worker did not start listening: %s" % self.logs)
        self.addr = "127.0.0.1:%d" % self.port
        self.channel = grpc.insecure_channel(self.addr)
        self.stub = pb_grpc.WorkerServiceStub(self.channel)
        self.health = HealthStub(self.channel)

    def _read(self):
        for raw in self.proc.stderr:
            self._keep(raw)

    @staticmethod
    def _parse(raw):
        line = raw.decode("utf-8", "replace").rstrip("\n")
        try:
            return json.loads(line)
        except ValueError:
            return {"event": "raw", "line": line}

    def _keep(self, raw):
        rec = self._parse(raw)
        with self.lock:
            self.logs.append(rec)
        if rec.get("event") == "worker_listening":
            self.port = rec["port"]
            self.listening.set()

    def _wait_listening(self):
        """keep_logs False: follows log_path until the worker_listening record (or the
        worker's exit), then stops reading."""
        with open(self.log_path, "rb") as f:
            data = b""
            while self.port is None:
                chunk = f.read()
                if not chunk:
                    if self.proc.poll() is not None:
                        return
                    time.sleep(0.01)
                    continue
                data += chunk
                lines = data.split(b"\n")
                data = lines.pop()
                for line in lines:
                    self._keep(line)

    def events(self, name):
        if self.log_path is not None:  # keep_logs False: read the file now
            with open(self.log_path, "rb") as f:
                logs = [self._parse(raw) for raw in f if raw.endswith(b"\n")]
            with self.lock:
                self.logs = logs
        with self.lock:
            return [r for r in self.logs if r.get("event") == name]

    def wait_serving(self, timeout=20):
        deadline = time.time() + timeout
        while time.time() < deadline:
            try:
                r = self.health.Check(health_pb2.HealthCheckRequest(), timeout=2)
                if r.status == health_pb2.HealthCheckResponse.SERVING:
                    return
            except grpc.RpcError:
                pass
            time.sleep(0.05)
        raise RuntimeError("worker never became SERVING")

    def deploy(self, name, source=None, files=None):
        """Publishes `files` (default {"main.py": source or FUNCTIONS[name]}) as `name`
        with `workerctl deploy`; returns what it printed. The first deploy of a (name,
        files) pair in this process runs it for real; the same pair into a code root
        without `name` yet copies what that deploy published (see _PUBLISHED)."""
        files = files or {"main.py": source if source is not None else FUNCTIONS[name]}
        key = (name, tuple(sorted(files.items())))
        published = os.path.join(self.code_root, name)
        fresh = not os.path.exists(published)
        if fresh and key in _PUBLISHED:
            template, template_root, stdout = _PUBLISHED[key]
            stage = os.path.join(self.tmp, "stage-%s-%d" % (name, time.time_ns()))
            shutil.copytree(template, stage, symlinks=True)
            os.rename(stage, published)  # whole, at once, as a deploy's CURRENT appears
            return stdout.replace(template_root, self.code_root)
        src = os.path.join(self.tmp, "src-%s-%d" % (name, time.time_ns()))
        os.makedirs(src)
        for rel, text in files.items():
            with open(os.path.join(src, rel), "w") as f:
                f.write(text)
        out = subprocess.run([WORKERCTL, "deploy", "--code-root", self.code_root, name, src],
                             check=True, capture_output=True, text=True)
        if fresh:
            template = os.path.join(_published_dir(), "%d" % len(_PUBLISHED))
            shutil.copytree(published, template, symlinks=True)
            _PUBLISHED[key] = (template, self.code_root, out.stdout)
        return out.stdout

    def submit(self, task_id, function, args=None, raw_args=None, **kw):
        fn = pb.FunctionCallConfig(name=function, type=kw.pop("builder", ""),
                                   args=raw_args if raw_args is not None
                                   else json.dumps(args if args is not None else {}).encode())
        if "epoch" in kw:
            fn.epoch = kw.pop("epoch")
        req = pb.SubmitTaskRequest(task_id=task_id, function=fn, **kw)
        return self.stub.SubmitTask(req, timeout=10)

    def wait_terminal(self, task_id, timeout=30):
        deadline = time.time() + timeout
        while time.time() < deadline:
            r = self.stub.GetTaskResult(pb.GetTaskResultRequest(task_id=task_id), timeout=5)
            if r.state in (pb.TASK_STATE_SUCCEEDED, pb.TASK_STATE_FAILED, pb.TASK_STATE_CANCELLED):
                return r
            time.sleep(0.02)
        raise AssertionError("task %s did not finish" % task_id)

    def stop(self, sig=signal.SIGTERM, timeout=30):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            rc = self.proc.wait(timeout)
        finally:
            self.channel.close()
        self.reader.join(5)
        return rc

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def worker_factory(tmp_path):
    started = []

    def make(*extra, **kw):
        w = Worker(str(tmp_path / ("w%d" % len(started))), extra_args=extra, **kw)
        started.append(w)
        return w

    yield make
    for w in started:
        if w.proc.poll() is None:
            rc = w.stop()
            assert rc == 0, "worker exited %s; logs: %s" % (rc, w.logs[-20:])


@pytest.fixture
def worker(worker_factory):
    w = worker_factory()
    w.wait_serving()
    for name in FUNCTIONS:
        w.deploy(name)
    return w


def output_json(result, i=0):
    out = result.outputs[i]
    assert out.WhichOneof("outcome") == "value", out
    return json.loads(out.value)


def port_open(port, host="127.0.0.1"):
    """True when something accepts TCP connections on host:port."""
    try:
        socket.create_connection((host, port), timeout=0.2).close()
        return True
    except OSError:
        return False


def start_error(tmp_path, *args):
    """Starts the worker with `args`, expects the start to fail with exit status 2 (a
    bad configuration) and returns its stderr."""
    code = tmp_path / "code"
    code.mkdir(exist_ok=True)
    p = subprocess.run([WORKER, "--listen", "127.0.0.1:0", "--code-root", str(code)] + list(args),
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2, (p.returncode, p.stderr)
    return p.stderr

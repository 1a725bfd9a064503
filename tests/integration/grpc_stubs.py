"""Python stubs for worker.v1 and grpc.health.v1, generated at test time with protoc
and grpc_python_plugin (Debian's protobuf-compiler-grpc). Shared by the gRPC
integration tests."""

import importlib
import importlib.util
import os
import subprocess
import sys


class Stubs:
    """w: worker_pb2, wg: worker_pb2_grpc, h: health_pb2."""


def generate(out, source_dir, health_module_name):
    """Generates the stubs into `out` and imports them. The health module is loaded by
    path under `health_module_name`: as grpc/health/... it would shadow grpc itself."""
    subprocess.run(
        ["protoc", f"--python_out={out}", f"--grpc_python_out={out}",
         "--plugin=protoc-gen-grpc_python=/usr/bin/grpc_python_plugin",
         "-I", "proto", "proto/worker/v1/worker.proto", "proto/grpc/health/v1/health.proto"],
        cwd=source_dir, check=True)
    # Regular packages, so nothing else named "worker" on sys.path can shadow them.
    for d in ("worker", os.path.join("worker", "v1")):
        open(os.path.join(out, d, "__init__.py"), "w").close()
    sys.path.insert(0, str(out))
    s = Stubs()
    s.w = importlib.import_module("worker.v1.worker_pb2")
    s.wg = importlib.import_module("worker.v1.worker_pb2_grpc")
    spec = importlib.util.spec_from_file_location(
        health_module_name, os.path.join(out, "grpc", "health", "v1", "health_pb2.py"))
    s.h = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(s.h)
    return s

# worker_client's gRPC code (python/worker_client/src/worker_client/_proto) is generated
# from proto/ by python/worker_client/gen_proto.py (protoc + grpc_python_plugin, imports
# and descriptor pool made private). The build generates it into the build tree on every
# change of a .proto file; the test pyclient.proto_current fails, naming the command that
# fixes it, while the committed copy (what `pip install ./python/worker_client` ships,
# so a user needs no protoc) differs from it.
find_program(WK_PROTOC protoc REQUIRED)
find_program(WK_GRPC_PYTHON_PLUGIN grpc_python_plugin REQUIRED)
set(WK_PYCLIENT_GEN ${PROJECT_BINARY_DIR}/pyclient_proto)
set(WK_PYCLIENT_GEN_SCRIPT ${PROJECT_SOURCE_DIR}/python/worker_client/gen_proto.py)
add_custom_command(
  OUTPUT ${WK_PYCLIENT_GEN}/worker_pb2.py ${WK_PYCLIENT_GEN}/worker_pb2_grpc.py
         ${WK_PYCLIENT_GEN}/health_pb2.py ${WK_PYCLIENT_GEN}/health_pb2_grpc.py
         ${WK_PYCLIENT_GEN}/__init__.py
  COMMAND ${CMAKE_COMMAND} -E env PROTOC=${WK_PROTOC} GRPC_PYTHON_PLUGIN=${WK_GRPC_PYTHON_PLUGIN}
          /usr/bin/python3 ${WK_PYCLIENT_GEN_SCRIPT} --out ${WK_PYCLIENT_GEN}
  DEPENDS ${PROJECT_SOURCE_DIR}/proto/worker/v1/worker.proto
          ${PROJECT_SOURCE_DIR}/proto/grpc/health/v1/health.proto ${WK_PYCLIENT_GEN_SCRIPT}
  COMMENT "worker_client: gRPC code from proto/"
  VERBATIM)
add_custom_target(pyclient_proto ALL DEPENDS ${WK_PYCLIENT_GEN}/worker_pb2.py)

# The gRPC server adapter end to end: grpc_server_harness (the server with a canned
# sink on an actor thread) driven by tests/integration/test_grpc_server.py through
# python3-grpcio. Include from tests/integration/CMakeLists.txt:
#   include(${PROJECT_SOURCE_DIR}/tests/integration/CMakeLists_grpc.cmake)
# Needs the wk_grpc_server and wk_proto targets (cmake/GrpcServer.cmake, cmake/Proto.cmake).
# The test itself needs /usr/bin/python3 with python3-grpcio, python3-protobuf and
# python3-pytest, plus protoc and grpc_python_plugin (protobuf-compiler-grpc).

add_executable(grpc_server_harness ${PROJECT_SOURCE_DIR}/tests/integration/grpc_server_harness.c)
target_link_libraries(grpc_server_harness PRIVATE wk_grpc_server wk_proto)
target_compile_options(grpc_server_harness PRIVATE ${WK_WARNINGS})

add_test(NAME grpc_server
  COMMAND /usr/bin/python3 -m pytest -q -p no:cacheprovider
          ${PROJECT_SOURCE_DIR}/tests/integration/test_grpc_server.py)
set_tests_properties(grpc_server PROPERTIES
  ENVIRONMENT "WK_GRPC_HARNESS=$<TARGET_FILE:grpc_server_harness>;WK_SOURCE_DIR=${PROJECT_SOURCE_DIR}"
  LABELS integration
  TIMEOUT 300)

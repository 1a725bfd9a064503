# Transport security of the gRPC server adapter end to end: TLS, mutual TLS and the
# bearer token (wk_grpc_server_config.tls_cert_file, tls_key_file, tls_client_ca_file,
# auth_token), driven by tests/integration/test_grpc_tls.py through python3-grpcio and
# workerctl. Certificates are made with openssl at test time. Include from
# tests/integration/CMakeLists.txt after grpc_server_harness
# (tests/integration/CMakeLists_grpc.cmake). Needs /usr/bin/python3 with python3-grpcio,
# python3-protobuf and python3-pytest, protoc and grpc_python_plugin, and openssl.

set(WK_GRPC_TLS_ENV
    "WK_GRPC_HARNESS=$<TARGET_FILE:grpc_server_harness>"
    "WK_SOURCE_DIR=${PROJECT_SOURCE_DIR}"
    "WK_OPENSSL=${WK_OPENSSL_EXECUTABLE}"
    "WK_WORKERCTL=$<TARGET_FILE:workerctl>")

add_test(NAME grpc_tls
  COMMAND /usr/bin/python3 -m pytest -q -p no:cacheprovider
          ${PROJECT_SOURCE_DIR}/tests/integration/test_grpc_tls.py)
set_tests_properties(grpc_tls PROPERTIES
  ENVIRONMENT "${WK_GRPC_TLS_ENV}"
  LABELS integration
  TIMEOUT 300)

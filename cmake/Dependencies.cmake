# Every external dependency of the build, looked up once, here: included from the
# top-level CMakeLists.txt before any target. Each lookup is REQUIRED: a missing
# dependency is a configure error, never a component or test left out silently.
# libcurl, libmicrohttpd and libpq are compiled against here but opened by the worker
# only when etcd, metrics or the postgres writer are used (src/lib/wk_dl.h).
# The Debian packages that provide them: scripts/deps.sh.
find_package(PkgConfig REQUIRED)
find_package(Threads REQUIRED)

# ---- the product --------------------------------------------------------------
# protoc-c and its runtime (cmake/Proto.cmake)
find_program(PROTOC_C protoc-c REQUIRED)
pkg_check_modules(PROTOBUF_C REQUIRED IMPORTED_TARGET libprotobuf-c)
# JSON: logging, the app, etcd, writers, builders
pkg_check_modules(JANSSON REQUIRED IMPORTED_TARGET jansson)
# gRPC core: the server and client adapters
pkg_check_modules(GRPC REQUIRED IMPORTED_TARGET grpc)
# the event loop of the app and the executor pool
pkg_check_modules(LIBUV REQUIRED IMPORTED_TARGET libuv)
# the YAML configuration file
pkg_check_modules(YAML REQUIRED IMPORTED_TARGET yaml-0.1)
# etcd's JSON gateway (wk_etcd); also the metrics test's HTTP client
pkg_check_modules(LIBCURL REQUIRED IMPORTED_TARGET libcurl)
# GET /metrics (wk_metrics)
pkg_check_modules(MICROHTTPD REQUIRED IMPORTED_TARGET libmicrohttpd)
# the redis and postgres writers
pkg_check_modules(HIREDIS REQUIRED IMPORTED_TARGET hiredis)
pkg_check_modules(LIBPQ REQUIRED IMPORTED_TARGET libpq)
# TLS to Redis (hiredis 0.14 has none: plugins/wk_redis_conn.c)
pkg_check_modules(LIBSSL REQUIRED IMPORTED_TARGET libssl)
# the code store's content digests (sha256)
pkg_check_modules(LIBCRYPTO REQUIRED IMPORTED_TARGET libcrypto)
# ---- the tests ----------------------------------------------------------------
if(BUILD_TESTING)
  pkg_check_modules(CMOCKA REQUIRED IMPORTED_TARGET cmocka)
  # certificates for the TLS tests (tests/integration/CMakeLists_tls.cmake)
  find_program(WK_OPENSSL_EXECUTABLE openssl REQUIRED)
endif()

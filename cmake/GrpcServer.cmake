# The gRPC server adapter (src/adapters/wk_grpc_server.c, with its security in
# wk_grpc_auth.c and its TCP accept loop in wk_grpc_listener.c), its request validation (src/adapters/wk_validate.c, pure: the fuzz
# targets link it alone through wk_validate), and the PEM checks (src/adapters/wk_pem.c)
# it shares with the gRPC client (cmake/Workerctl.cmake).
# Needs wk_proto (cmake/Proto.cmake) and WK_WARNINGS (cmake/Warnings.cmake). wk_validate
# includes only <grpc/status.h> from gRPC (found in the default include path).

add_library(wk_validate STATIC
  ${PROJECT_SOURCE_DIR}/src/adapters/wk_validate.c
  ${PROJECT_SOURCE_DIR}/src/adapters/wk_digest.c)
wk_headers(wk_validate PUBLIC adapters/wk_validate.h adapters/wk_rpc_method.h adapters/wk_digest.h)
target_link_libraries(wk_validate PUBLIC wk_proto PRIVATE wk_lib m)
target_compile_options(wk_validate PRIVATE ${WK_WARNINGS})

add_library(wk_pem STATIC
  ${PROJECT_SOURCE_DIR}/src/adapters/wk_pem.c)
wk_headers(wk_pem PUBLIC adapters/wk_pem.h)
target_link_libraries(wk_pem PRIVATE wk_lib)
target_compile_options(wk_pem PRIVATE ${WK_WARNINGS})

# host:port addresses (src/adapters/wk_netaddr.c): split by the listener, the metrics
# server and the gRPC client's direct connection (cmake/Metrics.cmake, Workerctl.cmake)
add_library(wk_netaddr STATIC ${PROJECT_SOURCE_DIR}/src/adapters/wk_netaddr.c)
wk_headers(wk_netaddr PUBLIC adapters/wk_netaddr.h)
target_compile_options(wk_netaddr PRIVATE ${WK_WARNINGS})

# accepted connections by peer address (src/adapters/wk_peer_index.c): filed by the
# listener, looked up by the server to cork a connection's burst of answers
add_library(wk_peer_index STATIC ${PROJECT_SOURCE_DIR}/src/adapters/wk_peer_index.c)
wk_headers(wk_peer_index PUBLIC adapters/wk_peer_index.h)
target_link_libraries(wk_peer_index PRIVATE wk_lib)
target_compile_options(wk_peer_index PRIVATE ${WK_WARNINGS})

add_library(wk_grpc_server STATIC
  ${PROJECT_SOURCE_DIR}/src/adapters/wk_grpc_server.c
  ${PROJECT_SOURCE_DIR}/src/adapters/wk_grpc_auth.c
  ${PROJECT_SOURCE_DIR}/src/adapters/wk_grpc_listener.c)
wk_headers(wk_grpc_server PUBLIC adapters/wk_grpc_server.h adapters/wk_grpc_auth.h
  adapters/wk_grpc_listener.h)
# PUBLIC wk_validate: wk_grpc_server.h names the methods by wk_rpc_method.h
target_link_libraries(wk_grpc_server PUBLIC PkgConfig::GRPC wk_validate wk_netaddr
  PRIVATE wk_peer_index wk_lib wk_log wk_pem wk_proto wk_reflection Threads::Threads)
target_compile_options(wk_grpc_server PRIVATE ${WK_WARNINGS})

# abseil's lock settings (src/adapters/wk_absl_locks.cc): the project's one C++ file,
# since abseil has no C API; its own flags (WK_WARNINGS are C flags).
enable_language(CXX)
pkg_check_modules(ABSL_SYNC REQUIRED IMPORTED_TARGET absl_synchronization)
add_library(wk_absl_locks STATIC ${PROJECT_SOURCE_DIR}/src/adapters/wk_absl_locks.cc)
wk_headers(wk_absl_locks PUBLIC adapters/wk_absl_locks.h)
set_target_properties(wk_absl_locks PROPERTIES CXX_STANDARD 17 CXX_STANDARD_REQUIRED ON)
target_compile_options(wk_absl_locks PRIVATE -Wall -Wextra -Werror)
target_link_libraries(wk_absl_locks PRIVATE PkgConfig::ABSL_SYNC)

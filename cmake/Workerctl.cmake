# The client side: the synchronous gRPC client (also used by the Worker's shadow
# forwarder), the function code store (also used by the Worker at activation), and the
# workerctl CLI. Included from the top-level CMakeLists.txt after cmake/Warnings.cmake,
# cmake/Proto.cmake and cmake/Etcd.cmake (for ${WK_WARNINGS}, wk_proto and wk_etcd_registry).

add_library(wk_grpc_client STATIC ${PROJECT_SOURCE_DIR}/src/adapters/wk_grpc_client.c)
wk_headers(wk_grpc_client PUBLIC adapters/wk_grpc_client.h)
target_link_libraries(wk_grpc_client PUBLIC PkgConfig::GRPC PRIVATE wk_lib wk_pem wk_netaddr wk_absl_locks)
target_compile_options(wk_grpc_client PRIVATE ${WK_WARNINGS})

add_library(wk_code_store STATIC ${PROJECT_SOURCE_DIR}/src/adapters/wk_code_store.c
  ${PROJECT_SOURCE_DIR}/src/adapters/wk_code_check.c)
wk_headers(wk_code_store PUBLIC adapters/wk_code_store.h adapters/wk_code_check.h)
target_compile_options(wk_code_store PRIVATE ${WK_WARNINGS})
target_link_libraries(wk_code_store PRIVATE wk_lib PkgConfig::LIBCRYPTO Threads::Threads)

add_executable(workerctl
  ${PROJECT_SOURCE_DIR}/cmd/workerctl/main.c
  ${PROJECT_SOURCE_DIR}/cmd/workerctl/workerctl_args.c
  ${PROJECT_SOURCE_DIR}/cmd/workerctl/workerctl_cmds.c
  ${PROJECT_SOURCE_DIR}/cmd/workerctl/workerctl_check.c
  ${PROJECT_SOURCE_DIR}/cmd/workerctl/workerctl_format.c
  ${PROJECT_SOURCE_DIR}/cmd/workerctl/workerctl_workers.c
  ${PROJECT_SOURCE_DIR}/cmd/workerctl/workerctl_top.c
  ${PROJECT_SOURCE_DIR}/cmd/workerctl/workerctl_target.c
  ${PROJECT_SOURCE_DIR}/cmd/workerctl/workerctl_replay.c
  ${PROJECT_SOURCE_DIR}/cmd/workerctl/workerctl_progress.c
  ${PROJECT_SOURCE_DIR}/cmd/workerctl/workerctl_tasks.c
  ${PROJECT_SOURCE_DIR}/cmd/workerctl/workerctl_logs.c
  ${PROJECT_SOURCE_DIR}/cmd/workerctl/workerctl_backoff.c
  ${PROJECT_SOURCE_DIR}/cmd/workerctl/workerctl_fleet_deploy.c)
target_include_directories(workerctl PRIVATE ${PROJECT_SOURCE_DIR}/cmd/workerctl)
target_link_libraries(workerctl PRIVATE wk_grpc_client wk_code_store wk_proto wk_lib wk_version
  PkgConfig::JANSSON)
# `workerctl workers` and `submit` without --addr read the registry (cmake/Etcd.cmake).
target_link_libraries(workerctl PRIVATE wk_etcd_registry)
# `workerctl top` reads the workers' GET /status over HTTP(S).
target_link_libraries(workerctl PRIVATE PkgConfig::LIBCURL)
# `workerctl replay` reads core journals and replays them through WorkerCore.
target_link_libraries(workerctl PRIVATE wk_journal)
target_compile_options(workerctl PRIVATE ${WK_WARNINGS})
# the deploy check runs the source tree's executor program unless installed beside it
target_compile_definitions(workerctl PRIVATE WK_PYTHON_DIR="${PROJECT_SOURCE_DIR}/python")

# etcd registration against a real etcd: the wk_etcd client, the EtcdPublisher (register,
# coalescing, deregister, lease expiry, etcd killed / wiped / hung / late) and
# `workerctl workers`. Each test starts its own /usr/bin/etcd
# (Debian etcd-server) on loopback with free ports. Needs wk_etcd_publisher
# (cmake/Etcd.cmake) and PkgConfig::CMOCKA (cmake/Dependencies.cmake).
add_executable(test_etcd_publisher ${CMAKE_CURRENT_SOURCE_DIR}/test_etcd_publisher.c)
target_link_libraries(test_etcd_publisher PRIVATE wk_etcd_publisher wk_etcd_registry PkgConfig::JANSSON
  PkgConfig::CMOCKA)
target_compile_options(test_etcd_publisher PRIVATE ${WK_WARNINGS})
target_compile_definitions(test_etcd_publisher PRIVATE _GNU_SOURCE)
target_compile_definitions(test_etcd_publisher PRIVATE WK_WORKERCTL="$<TARGET_FILE:workerctl>"
  WK_GRPC_HARNESS="$<TARGET_FILE:grpc_server_harness>")
add_dependencies(test_etcd_publisher workerctl grpc_server_harness)
add_test(NAME integration.etcd_publisher COMMAND test_etcd_publisher)
set_tests_properties(integration.etcd_publisher PROPERTIES LABELS integration TIMEOUT 300)

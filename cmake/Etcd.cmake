# etcd registration: wk_etcd (a small synchronous client of etcd's v3 JSON gateway,
# libcurl + jansson), wk_etcd_publisher (the EtcdPublisher thread that keeps the
# Worker's leased key and heartbeat value in etcd) and wk_etcd_registry (reading and
# ranking the registered Workers; cmake/Workerctl.cmake links workerctl to it for
# `workerctl workers` and `workerctl submit` without --addr). Included from the top-level
# CMakeLists.txt after cmake/Warnings.cmake (for ${WK_WARNINGS}).
add_library(wk_etcd STATIC ${PROJECT_SOURCE_DIR}/src/adapters/wk_etcd.c)
wk_headers(wk_etcd PUBLIC adapters/wk_etcd.h PRIVATE adapters/wk_etcd_int.h)
target_compile_definitions(wk_etcd PRIVATE _GNU_SOURCE)
target_compile_options(wk_etcd PRIVATE ${WK_WARNINGS})
# libcurl's headers only: wk_etcd.c opens libcurl on first use (lib/wk_dl.h)
target_include_directories(wk_etcd SYSTEM PRIVATE
  $<TARGET_PROPERTY:PkgConfig::LIBCURL,INTERFACE_INCLUDE_DIRECTORIES>)
target_link_libraries(wk_etcd PRIVATE wk_lib PkgConfig::JANSSON Threads::Threads)

add_library(wk_etcd_publisher STATIC ${PROJECT_SOURCE_DIR}/src/adapters/wk_etcd_publisher.c)
wk_headers(wk_etcd_publisher PUBLIC adapters/wk_etcd_publisher.h)
target_compile_definitions(wk_etcd_publisher PRIVATE _GNU_SOURCE)
target_compile_options(wk_etcd_publisher PRIVATE ${WK_WARNINGS})
target_link_libraries(wk_etcd_publisher PRIVATE wk_etcd wk_lib wk_log PkgConfig::JANSSON Threads::Threads)

add_library(wk_etcd_registry STATIC ${PROJECT_SOURCE_DIR}/src/adapters/wk_etcd_registry.c)
wk_headers(wk_etcd_registry PUBLIC adapters/wk_etcd_registry.h PRIVATE adapters/wk_etcd_int.h)
target_compile_definitions(wk_etcd_registry PRIVATE _GNU_SOURCE)
target_compile_options(wk_etcd_registry PRIVATE ${WK_WARNINGS})
target_link_libraries(wk_etcd_registry PUBLIC wk_etcd PRIVATE wk_lib PkgConfig::JANSSON)

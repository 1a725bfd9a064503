# The shadow forwarder (src/adapters/wk_shadow.c): mirrors sampled SubmitTask requests
# to another Worker through wk_grpc_client. Included from the top-level CMakeLists.txt
# after cmake/Workerctl.cmake (wk_grpc_client) and cmake/Etcd.cmake (wk_log).
find_package(Threads REQUIRED)
if(NOT TARGET PkgConfig::JANSSON)
  find_package(PkgConfig REQUIRED)
  pkg_check_modules(JANSSON REQUIRED IMPORTED_TARGET jansson)
endif()
# JSON-lines logging on its own (as in cmake/Etcd.cmake, which normally defines it).
if(NOT TARGET wk_log)
  add_library(wk_log STATIC ${CMAKE_SOURCE_DIR}/src/app/wk_log.c)
  target_include_directories(wk_log PUBLIC ${CMAKE_SOURCE_DIR}/src)
  target_compile_definitions(wk_log PRIVATE _GNU_SOURCE)
  target_compile_options(wk_log PRIVATE ${WK_WARNINGS})
  target_link_libraries(wk_log PUBLIC PkgConfig::JANSSON)
endif()

add_library(wk_shadow STATIC ${CMAKE_SOURCE_DIR}/src/adapters/wk_shadow.c)
target_include_directories(wk_shadow PUBLIC ${CMAKE_SOURCE_DIR}/src)
target_compile_options(wk_shadow PRIVATE ${WK_WARNINGS})
target_link_libraries(wk_shadow PUBLIC wk_grpc_client wk_lib wk_log PkgConfig::JANSSON
  Threads::Threads m)

# The shadow forwarder (src/adapters/wk_shadow.c): mirrors sampled SubmitTask requests
# to another Worker through wk_grpc_client. Included from the top-level CMakeLists.txt
# after cmake/Workerctl.cmake (wk_grpc_client).

add_library(wk_shadow STATIC ${PROJECT_SOURCE_DIR}/src/adapters/wk_shadow.c)
wk_headers(wk_shadow PUBLIC adapters/wk_shadow.h)
target_compile_options(wk_shadow PRIVATE ${WK_WARNINGS})
target_link_libraries(wk_shadow PRIVATE wk_grpc_client wk_lib wk_log PkgConfig::JANSSON
  Threads::Threads m)

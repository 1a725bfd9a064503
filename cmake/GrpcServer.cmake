# The gRPC server adapter (src/adapters/wk_grpc_server.c) and its request validation
# (src/adapters/wk_validate.c, pure: the fuzz targets link it alone through wk_validate).
# Needs wk_proto (cmake/Proto.cmake) and WK_WARNINGS (cmake/Warnings.cmake). wk_validate
# includes only <grpc/status.h> from gRPC (found in the default include path).

add_library(wk_validate STATIC
  ${PROJECT_SOURCE_DIR}/src/adapters/wk_validate.c)
target_include_directories(wk_validate PUBLIC ${PROJECT_SOURCE_DIR}/src)
target_link_libraries(wk_validate PUBLIC wk_proto PRIVATE wk_lib m)
target_compile_options(wk_validate PRIVATE ${WK_WARNINGS})

add_library(wk_grpc_server STATIC
  ${PROJECT_SOURCE_DIR}/src/adapters/wk_grpc_server.c)
target_include_directories(wk_grpc_server PUBLIC ${PROJECT_SOURCE_DIR}/src)
target_link_libraries(wk_grpc_server PUBLIC PkgConfig::GRPC
  PRIVATE wk_lib wk_validate wk_proto Threads::Threads)
target_compile_options(wk_grpc_server PRIVATE ${WK_WARNINGS})

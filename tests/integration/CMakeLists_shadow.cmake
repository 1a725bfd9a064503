# The shadow forwarder (src/adapters/wk_shadow.c) against real targets in one process:
# the Worker's gRPC server adapter with a recording sink (bytes and x-shadow-submit
# metadata), optionally slow; a closed port; a TCP listener that never answers.
# Included from tests/integration/CMakeLists.txt (targets: cmake/Shadow.cmake,
# cmake/GrpcServer.cmake, cmake/Proto.cmake).
add_executable(test_shadow ${CMAKE_CURRENT_SOURCE_DIR}/test_shadow.c)
target_link_libraries(test_shadow PRIVATE wk_shadow wk_grpc_server wk_proto PkgConfig::CMOCKA m)
target_compile_options(test_shadow PRIVATE ${WK_WARNINGS})
add_test(NAME integration.shadow COMMAND test_shadow)
set_tests_properties(integration.shadow PROPERTIES LABELS integration TIMEOUT 180)

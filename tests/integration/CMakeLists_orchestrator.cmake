# The orchestrator and gRPC server in-process with a fake executor adapter (no Python).
add_executable(test_orchestrator ${CMAKE_CURRENT_SOURCE_DIR}/test_orchestrator.c)
target_link_libraries(test_orchestrator PRIVATE wk_app wk_grpc_client PkgConfig::CMOCKA)
target_compile_options(test_orchestrator PRIVATE ${WK_WARNINGS})
target_compile_definitions(test_orchestrator PRIVATE _GNU_SOURCE)
add_test(NAME integration.orchestrator COMMAND test_orchestrator)
set_tests_properties(integration.orchestrator PROPERTIES TIMEOUT 120 LABELS integration)

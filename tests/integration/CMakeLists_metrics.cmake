# The metrics registry (cmake/Metrics.cmake) served on a free loopback port and
# scraped with libcurl. Included from tests/integration/CMakeLists.txt.
add_executable(test_metrics ${CMAKE_CURRENT_SOURCE_DIR}/test_metrics.c)
target_link_libraries(test_metrics PRIVATE wk_metrics PkgConfig::LIBCURL PkgConfig::CMOCKA
  Threads::Threads)
target_compile_options(test_metrics PRIVATE ${WK_WARNINGS})
target_compile_definitions(test_metrics PRIVATE _GNU_SOURCE)
add_test(NAME integration.metrics COMMAND test_metrics)
set_tests_properties(integration.metrics PROPERTIES LABELS integration TIMEOUT 60)

# The writer plugins (cmake/Writers.cmake) against a real directory, redis-server and
# PostgreSQL, which the test starts itself on free loopback ports (Debian's
# redis-server and postgresql packages, scripts/deps.sh). Included from
# tests/integration/CMakeLists.txt.
add_executable(test_writers ${CMAKE_CURRENT_SOURCE_DIR}/test_writers.c)
target_link_libraries(test_writers PRIVATE wk_writers wk_proto PkgConfig::JANSSON PkgConfig::HIREDIS
  PkgConfig::LIBPQ PkgConfig::CMOCKA Threads::Threads)
target_compile_options(test_writers PRIVATE ${WK_WARNINGS})
target_compile_definitions(test_writers PRIVATE _GNU_SOURCE)
add_test(NAME integration.writers COMMAND test_writers)
set_tests_properties(integration.writers PROPERTIES LABELS integration TIMEOUT 180)

# Unit tests of the function code store (cmocka). Included from tests/unit/CMakeLists.txt;
# needs the wk_code_store target (cmake/Workerctl.cmake).
add_executable(test_code_store ${PROJECT_SOURCE_DIR}/tests/unit/test_code_store.c)
target_link_libraries(test_code_store PRIVATE wk_code_store PkgConfig::CMOCKA)
target_compile_options(test_code_store PRIVATE ${WK_WARNINGS})
add_test(NAME unit.test_code_store COMMAND test_code_store)
set_tests_properties(unit.test_code_store PROPERTIES LABELS unit TIMEOUT 60)

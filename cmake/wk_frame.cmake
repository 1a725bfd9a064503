# wk_frame.cmake: the executor frame codec (src/adapters/wk_frame.c), a pure library
# (no I/O) shared by the executor pool adapter and its tests.
# Include from the top CMakeLists.txt after cmake/Warnings.cmake and the wk_lib target:
#   include(cmake/wk_frame.cmake)
add_library(wk_adapters_frame STATIC ${PROJECT_SOURCE_DIR}/src/adapters/wk_frame.c)
wk_headers(wk_adapters_frame PUBLIC adapters/wk_frame.h)
target_link_libraries(wk_adapters_frame PUBLIC wk_lib)  # wk_alloc: buffer memory
target_compile_options(wk_adapters_frame PRIVATE ${WK_WARNINGS})

# Journal.cmake: the incident journal (src/adapters/wk_journal*.c): WorkerCore's inputs
# recorded at its input boundary (core/wk_core_tap.h) into rotating files by a thread of
# its own, read back by `workerctl replay`, the simulation and the tests.
# Include from the top CMakeLists.txt after the wk_core target.
add_library(wk_journal STATIC
  ${PROJECT_SOURCE_DIR}/src/adapters/wk_journal.c
  ${PROJECT_SOURCE_DIR}/src/adapters/wk_journal_writer.c)
wk_headers(wk_journal PUBLIC adapters/wk_journal.h adapters/wk_journal_writer.h)
target_link_libraries(wk_journal PUBLIC wk_core wk_lib Threads::Threads)
target_compile_options(wk_journal PRIVATE ${WK_WARNINGS})

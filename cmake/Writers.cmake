# Writer plugins (src/plugins/wk_writer_*.c, DESIGN.md §6): file (JSON lines, temp file
# + rename), redis (XADD with hiredis), postgres (COPY with libpq), and their registry
# (src/plugins/wk_writers.h). Needs wk_proto (cmake/Proto.cmake) for CallOutput.

add_library(wk_writers STATIC
  ${PROJECT_SOURCE_DIR}/src/plugins/wk_writers.c
  ${PROJECT_SOURCE_DIR}/src/plugins/wk_writer_file.c
  ${PROJECT_SOURCE_DIR}/src/plugins/wk_writer_redis.c
  ${PROJECT_SOURCE_DIR}/src/plugins/wk_redis_conn.c
  ${PROJECT_SOURCE_DIR}/src/plugins/wk_writer_postgres.c)
wk_headers(wk_writers PUBLIC plugins/wk_writers.h PRIVATE plugins/wk_writers_int.h
  plugins/wk_redis_conn_int.h)
target_compile_definitions(wk_writers PRIVATE _GNU_SOURCE)
target_compile_options(wk_writers PRIVATE ${WK_WARNINGS})
target_link_libraries(wk_writers PUBLIC wk_lib
  PRIVATE wk_proto PkgConfig::JANSSON PkgConfig::HIREDIS PkgConfig::LIBSSL PkgConfig::LIBCRYPTO)
# libpq's headers only: wk_writer_postgres.c opens libpq on first use (lib/wk_dl.h)
target_include_directories(wk_writers SYSTEM PRIVATE
  $<TARGET_PROPERTY:PkgConfig::LIBPQ,INTERFACE_INCLUDE_DIRECTORIES>)

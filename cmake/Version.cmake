# The version and the git commit the programs print with --version (wk_version), and
# the registration and user agents carry. The commit is read at build time, not at
# configure time, so a new commit needs no re-configure (cmake/version_gen.cmake).

set(WK_VERSION_C ${PROJECT_BINARY_DIR}/gen/wk_version.c)
add_custom_target(wk_version_gen
  COMMAND ${CMAKE_COMMAND} -DSRC=${PROJECT_SOURCE_DIR} -DOUT=${WK_VERSION_C}
          -DVERSION=${PROJECT_VERSION} -P ${PROJECT_SOURCE_DIR}/cmake/version_gen.cmake
  BYPRODUCTS ${WK_VERSION_C}
  COMMENT "Reading the version and git commit"
  VERBATIM)
add_library(wk_version STATIC ${WK_VERSION_C})
wk_headers(wk_version PUBLIC lib/wk_version.h)
add_dependencies(wk_version wk_version_gen)

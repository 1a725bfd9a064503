# Libraries export only their own public headers.
#
#   wk_headers(TARGET [PUBLIC PATH...] [PRIVATE PATH...] [EXCLUDE PATH...])
#
# PATHs are relative to src/ and may be globs ("lib/*.h"); EXCLUDE drops headers a glob
# matched (another library's). The PUBLIC headers are what
# the library's users may include: they are linked (symlinks, so edits need no
# re-configure) into ${PROJECT_BINARY_DIR}/include/TARGET under their path below src/,
# and that directory is the library's PUBLIC include directory. An internal header
# (*_int.h) is never exported: matched by a PUBLIC glob, or listed PRIVATE, it goes to
# ${PROJECT_BINARY_DIR}/include-private/TARGET, which only the library's own files see.
#
# So `#include "core/wk_core.h"` keeps working everywhere, but a file finds a header only
# when its target links the library that exports it (and the library its own internal
# headers): a missing link is a compile error, not a silent reach into src/. Tests and
# benchmarks are white-box and see all of src/ (tests/CMakeLists.txt, bench/).
# A module split over two libraries shares an internal header by listing it PRIVATE in
# both (wk_etcd_int.h: wk_etcd and wk_etcd_registry).
function(wk_headers target)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "" "PUBLIC;PRIVATE;EXCLUDE")
  if(arg_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "wk_headers(${target}): unexpected ${arg_UNPARSED_ARGUMENTS}")
  endif()
  set(src ${PROJECT_SOURCE_DIR}/src)
  set(pub ${PROJECT_BINARY_DIR}/include/${target})
  set(priv ${PROJECT_BINARY_DIR}/include-private/${target})
  file(REMOVE_RECURSE ${pub} ${priv}) # a header no longer listed is no longer exported
  foreach(kind PUBLIC PRIVATE)
    foreach(pattern ${arg_${kind}})
      file(GLOB found CONFIGURE_DEPENDS RELATIVE ${src} ${src}/${pattern})
      if(NOT found)
        message(FATAL_ERROR "wk_headers(${target}): no header src/${pattern}")
      endif()
      foreach(rel ${found})
        if(rel IN_LIST arg_EXCLUDE)
          continue()
        endif()
        if(kind STREQUAL "PRIVATE" OR rel MATCHES "_int\\.h$")
          set(dst ${priv}/${rel})
        else()
          set(dst ${pub}/${rel})
        endif()
        get_filename_component(dir ${dst} DIRECTORY)
        file(MAKE_DIRECTORY ${dir})
        file(CREATE_LINK ${src}/${rel} ${dst} SYMBOLIC)
      endforeach()
    endforeach()
  endforeach()
  file(MAKE_DIRECTORY ${pub})
  target_include_directories(${target} PUBLIC ${pub})
  if(EXISTS ${priv})
    target_include_directories(${target} PRIVATE ${priv})
  endif()
endfunction()

# Generates C code for the .proto files under proto/ with protoc-c at build time and
# builds it as the wk_proto library. Generated code gets no project warnings.

set(WK_PROTO_FILES
  worker/v1/worker.proto
  grpc/health/v1/health.proto)
set(WK_PROTO_OUT ${PROJECT_BINARY_DIR}/gen)
set(WK_PROTO_SRCS)
foreach(proto ${WK_PROTO_FILES})
  string(REGEX REPLACE "\\.proto$" "" base ${proto})
  set(c ${WK_PROTO_OUT}/${base}.pb-c.c)
  set(h ${WK_PROTO_OUT}/${base}.pb-c.h)
  add_custom_command(
    OUTPUT ${c} ${h}
    COMMAND ${CMAKE_COMMAND} -E make_directory ${WK_PROTO_OUT}
    COMMAND ${PROTOC_C} --c_out=${WK_PROTO_OUT} -I${PROJECT_SOURCE_DIR}/proto ${PROJECT_SOURCE_DIR}/proto/${proto}
    DEPENDS ${PROJECT_SOURCE_DIR}/proto/${proto}
    COMMENT "protoc-c ${proto}"
    VERBATIM)
  list(APPEND WK_PROTO_SRCS ${c})
endforeach()
add_library(wk_proto STATIC ${WK_PROTO_SRCS})
target_include_directories(wk_proto SYSTEM PUBLIC ${WK_PROTO_OUT})
target_link_libraries(wk_proto PUBLIC PkgConfig::PROTOBUF_C)

# gRPC server reflection (src/adapters/wk_reflection.c): the reflection protocol compiled
# with protoc-c like the other protos, descriptor.proto (to read descriptors), and the
# FileDescriptorSet of every service the worker offers, made at build time from proto/
# (protoc --descriptor_set_out --include_imports) and embedded as a C array, so it
# follows every change of the .proto files. Included after cmake/Proto.cmake.

set(WK_REFLECTION_PROTOS
  worker/v1/worker.proto
  grpc/health/v1/health.proto
  grpc/reflection/v1alpha/reflection.proto)
set(WK_REFLECTION_PROTO_PATHS)
foreach(proto ${WK_REFLECTION_PROTOS})
  list(APPEND WK_REFLECTION_PROTO_PATHS ${PROJECT_SOURCE_DIR}/proto/${proto})
endforeach()
# grpc.reflection.v1: made from the v1alpha file (cmake/reflection_v1.cmake)
set(WK_REFLECTION_V1 ${WK_PROTO_OUT}/proto/grpc/reflection/v1/reflection.proto)

find_program(WK_PROTOC protoc REQUIRED)
set(WK_DESCRIPTOR_PROTO_DIR /usr/include CACHE PATH "where google/protobuf/descriptor.proto is")
set(gen ${WK_PROTO_OUT})
add_custom_command(
  OUTPUT ${gen}/grpc/reflection/v1alpha/reflection.pb-c.c ${gen}/grpc/reflection/v1alpha/reflection.pb-c.h
  COMMAND ${CMAKE_COMMAND} -E make_directory ${gen}
  COMMAND ${PROTOC_C} --c_out=${gen} -I${PROJECT_SOURCE_DIR}/proto
          ${PROJECT_SOURCE_DIR}/proto/grpc/reflection/v1alpha/reflection.proto
  DEPENDS ${PROJECT_SOURCE_DIR}/proto/grpc/reflection/v1alpha/reflection.proto
  COMMENT "protoc-c grpc/reflection/v1alpha/reflection.proto"
  VERBATIM)
add_custom_command(
  OUTPUT ${gen}/google/protobuf/descriptor.pb-c.c ${gen}/google/protobuf/descriptor.pb-c.h
  COMMAND ${CMAKE_COMMAND} -E make_directory ${gen}
  COMMAND ${PROTOC_C} --c_out=${gen} -I${WK_DESCRIPTOR_PROTO_DIR}
          ${WK_DESCRIPTOR_PROTO_DIR}/google/protobuf/descriptor.proto
  DEPENDS ${WK_DESCRIPTOR_PROTO_DIR}/google/protobuf/descriptor.proto
  COMMENT "protoc-c google/protobuf/descriptor.proto"
  VERBATIM)
add_custom_command(
  OUTPUT ${WK_REFLECTION_V1}
  COMMAND ${CMAKE_COMMAND} -DIN=${PROJECT_SOURCE_DIR}/proto/grpc/reflection/v1alpha/reflection.proto
          -DOUT=${WK_REFLECTION_V1} -P ${PROJECT_SOURCE_DIR}/cmake/reflection_v1.cmake
  DEPENDS ${PROJECT_SOURCE_DIR}/proto/grpc/reflection/v1alpha/reflection.proto
          ${PROJECT_SOURCE_DIR}/cmake/reflection_v1.cmake
  COMMENT "grpc/reflection/v1/reflection.proto from v1alpha"
  VERBATIM)
add_custom_command(
  OUTPUT ${gen}/wk_descriptor_set.bin
  COMMAND ${WK_PROTOC} -I${PROJECT_SOURCE_DIR}/proto -I${WK_PROTO_OUT}/proto --include_imports
          --descriptor_set_out=${gen}/wk_descriptor_set.bin ${WK_REFLECTION_PROTO_PATHS}
          ${WK_REFLECTION_V1}
  DEPENDS ${WK_REFLECTION_PROTO_PATHS} ${WK_REFLECTION_V1}
  COMMENT "protoc --descriptor_set_out: the descriptors reflection serves"
  VERBATIM)
add_custom_command(
  OUTPUT ${gen}/wk_descriptor_set.c
  COMMAND ${CMAKE_COMMAND} -DIN=${gen}/wk_descriptor_set.bin -DOUT=${gen}/wk_descriptor_set.c
          -P ${PROJECT_SOURCE_DIR}/cmake/embed_bytes.cmake
  DEPENDS ${gen}/wk_descriptor_set.bin ${PROJECT_SOURCE_DIR}/cmake/embed_bytes.cmake
  COMMENT "Embedding the descriptor set"
  VERBATIM)

# Generated code gets no project warnings; wk_reflection.c does.
add_library(wk_reflection_gen STATIC
  ${gen}/grpc/reflection/v1alpha/reflection.pb-c.c
  ${gen}/google/protobuf/descriptor.pb-c.c
  ${gen}/wk_descriptor_set.c)
target_include_directories(wk_reflection_gen SYSTEM PUBLIC ${gen})
target_link_libraries(wk_reflection_gen PUBLIC PkgConfig::PROTOBUF_C)

add_library(wk_reflection STATIC ${PROJECT_SOURCE_DIR}/src/adapters/wk_reflection.c)
wk_headers(wk_reflection PUBLIC adapters/wk_reflection.h)
target_link_libraries(wk_reflection PUBLIC wk_reflection_gen PRIVATE wk_lib Threads::Threads)
target_compile_options(wk_reflection PRIVATE ${WK_WARNINGS})

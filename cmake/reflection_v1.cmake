# Writes OUT, grpc/reflection/v1/reflection.proto, from IN, the v1alpha one: the same
# protocol under the package gRPC adopted for it (grpc/grpc-proto), whose messages are
# the same on the wire. Newer tools (grpcurl, grpcui, Postman) ask for v1 first; the
# worker serves both from one implementation (wk_reflection.c). Run at build time by
# cmake/Reflection.cmake.
file(READ "${IN}" text)
string(REPLACE "package grpc.reflection.v1alpha;" "package grpc.reflection.v1;" text "${text}")
string(REPLACE "grpc_reflection_v1alpha" "grpc_reflection_v1" text "${text}")
string(FIND "${text}" "package grpc.reflection.v1;" at)
if(at LESS 0)
  message(FATAL_ERROR "${IN} has no 'package grpc.reflection.v1alpha;' line")
endif()
file(WRITE "${OUT}" "// Generated from ${IN} by cmake/reflection_v1.cmake: do not edit.\n${text}")

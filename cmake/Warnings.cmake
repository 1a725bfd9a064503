# Warnings for our own code (not for generated code). Every warning is an error.
set(WK_WARNINGS
  -Wall -Wextra -Werror -pedantic
  -Wshadow -Wconversion -Wsign-conversion -Wstrict-prototypes -Wmissing-prototypes
  -Wold-style-definition -Wpointer-arith -Wcast-qual -Wwrite-strings -Wundef
  -Wformat=2 -Wvla -Wnull-dereference -Wdouble-promotion -Wimplicit-fallthrough
  -Wswitch-enum)
if(CMAKE_C_COMPILER_ID STREQUAL "GNU")
  list(APPEND WK_WARNINGS -Wduplicated-cond -Wduplicated-branches -Wlogical-op)
endif()

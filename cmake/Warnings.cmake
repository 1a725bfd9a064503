# Warnings for our own code (not for generated code). WK_WERROR makes every warning an
# error: OFF by default (a newer compiler's new warning must not break a user's build),
# ON in every build scripts/test.sh makes.
option(WK_WERROR "Treat warnings in our own code as errors (-Werror)" OFF)
set(WK_WARNINGS
  -Wall -Wextra -pedantic
  -Wshadow -Wconversion -Wsign-conversion -Wstrict-prototypes -Wmissing-prototypes
  -Wold-style-definition -Wpointer-arith -Wcast-qual -Wwrite-strings -Wundef
  -Wformat=2 -Wvla -Wnull-dereference -Wdouble-promotion -Wimplicit-fallthrough
  -Wswitch-enum)
if(CMAKE_C_COMPILER_ID STREQUAL "GNU")
  list(APPEND WK_WARNINGS -Wduplicated-cond -Wduplicated-branches -Wlogical-op)
endif()
if(WK_WERROR)
  list(APPEND WK_WARNINGS -Werror)
endif()

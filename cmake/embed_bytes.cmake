# Writes OUT, a C file defining wk_reflection_descriptor_set (the bytes of IN) and
# wk_reflection_descriptor_set_len. Run at build time by cmake/Reflection.cmake.
file(READ "${IN}" hex HEX)
string(LENGTH "${hex}" n)
math(EXPR len "${n} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
string(REGEX REPLACE "((0x[0-9a-f][0-9a-f],){16})" "\\1\n  " bytes "${bytes}")
file(WRITE "${OUT}" "/* Generated from ${IN} by cmake/embed_bytes.cmake: do not edit. */
#include <stddef.h>
#include <stdint.h>

const uint8_t wk_reflection_descriptor_set[${len} + 1] = {
  ${bytes}0};
const size_t wk_reflection_descriptor_set_len = ${len};
")

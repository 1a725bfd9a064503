/* fuzz_check.h: what every fuzz target in this folder shares: libFuzzer's entry point,
 * the rule that targets are built with the decoders' expensive assertions on, and
 * CHECK, an invariant that holds in release builds too (it aborts, so libFuzzer keeps
 * the input that broke it). */
#ifndef WK_FUZZ_CHECK_H
#define WK_FUZZ_CHECK_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "lib/wk_assert.h"

/* the decoders' expensive checks run under the fuzzer (tests/fuzz/CMakeLists.txt) */
_Static_assert(WK_DEBUG_ASSERTS_ON, "fuzz targets are built with WK_DEBUG_ASSERTS");

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)       \
  do {                    \
    if (!(cond)) abort(); \
  } while (0)

#endif

# A short libFuzzer mutation run for the fuzz.*_mutate tests (tests/fuzz/CMakeLists.txt):
#   cmake -DFUZZER=<target> -DSEEDS=<corpus/x> -DSCRATCH=<dir> -DARTIFACTS=<dir>
#         -DSECONDS=<n> -P mutate.cmake
# SCRATCH (in the build directory) is recreated as a copy of the seed corpus and is the
# only corpus directory given, so new inputs land there and never in the source tree.
# A crash, leak, timeout or out-of-memory input is written to ARTIFACTS/ and fails the
# test. Inputs longer than 4096 bytes are not generated.
foreach(v FUZZER SEEDS SCRATCH ARTIFACTS SECONDS)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "mutate.cmake: -D${v}=... is required")
  endif()
endforeach()
file(REMOVE_RECURSE ${SCRATCH})
file(MAKE_DIRECTORY ${SCRATCH} ${ARTIFACTS})
file(GLOB seeds ${SEEDS}/*)
file(COPY ${seeds} DESTINATION ${SCRATCH})
execute_process(
  COMMAND ${FUZZER} -max_total_time=${SECONDS} -max_len=4096 -timeout=10
          -print_final_stats=1 -artifact_prefix=${ARTIFACTS}/ ${SCRATCH}
  RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${FUZZER} failed (${rc}); the input is in ${ARTIFACTS}/")
endif()

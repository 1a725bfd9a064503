#!/usr/bin/env bash
# The whole test suite: installs what is missing, then builds and runs every layer
# twice — a Release build, and an ASan+UBSan build — then the tests that run our own
# threads under ThreadSanitizer (build/tsan), then the libFuzzer targets in a Clang
# build (build/fuzz), and fails when any test fails.
#   unit         cmocka tests of the cores and containers
#   sim          the deterministic simulation (>= 2 million steps over many seeds)
#   integration  adapters with real peers (frame codec, Python executor, gRPC server)
#   e2e          the real worker binary, real executors, real gRPC clients
#   tsan         the tests of our threads (completion queue <-> loop, thread pool,
#                metrics server, etcd publisher, shadow, writers, gRPC server) built
#                with -fsanitize=thread; suppressions for third-party frames only
#                (tests/tsan.supp); two at a time (the longest, grpc_server, takes
#                ~40 s of the ~45 s)
#   fuzz         each libFuzzer target: its seed corpus replayed, then a short mutation
#                run (clang builds only: the last build below; about a minute)
# Every build here turns warnings into errors (-DWK_WERROR=ON, cmake/Warnings.cmake).
# Usage: scripts/test.sh [ctest -L label regex]   (e.g. scripts/test.sh unit)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

# Run as root, the worker starts executors (and its deploy check) as `nobody`, which
# must read python/ of this tree; the security tests run that account for real. A
# clone under a directory closed to others (root's home, mktemp -d) keeps it out, so
# the suite then runs from a copy in an open directory under /tmp, removed after.
if [ "$(id -u)" = 0 ] && [ -z "${WK_TEST_STAGED:-}" ] &&
  ! setpriv --reuid=65534 --regid=65534 --clear-groups \
    test -r "$root/python/worker_executor.py" 2>/dev/null; then
  stage=$(mktemp -d /tmp/wk-test-XXXXXX)
  echo "test.sh: $root is closed to the executor account (nobody): running the suite" \
    "from a copy in $stage"
  cp -a "$root/." "$stage/"
  chmod 755 "$stage" # after the copy: cp -a gives it the closed mode of $root
  rc=0
  WK_TEST_STAGED=1 bash "$stage/scripts/test.sh" "$@" || rc=$?
  rm -rf "$stage"
  exit "$rc"
fi

bash scripts/deps.sh
jobs=$(nproc)
# Tests at once: one more than the cores. The e2e tests spend much of their time
# waiting (on workers starting, tasks sleeping, deadlines); with 2 cores, 3 at once
# keep the cores ~75% busy where 2 left them half idle (release tests 366 s -> 282 s).
test_jobs=$((jobs + 1))
label=${1:-}

run_build() { # name, cmake args...
  local dir="build/$1"; shift
  cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Release -DWK_WERROR=ON "$@" >/dev/null
  cmake --build "$dir" -j "$jobs"
  # the longest tests start first when ctest knows their times: a build without its
  # own (a clean clone's asan) borrows the Release build's
  local costs="Testing/Temporary/CTestCostData.txt"
  if [ ! -f "$dir/$costs" ] && [ -f "build/release/$costs" ]; then
    mkdir -p "$dir/Testing/Temporary"
    cp "build/release/$costs" "$dir/$costs"
  fi
  echo "== ctest in $dir"
  WK_BUILD_DIR="$root/$dir" ctest --test-dir "$dir" --output-on-failure -j "$test_jobs" ${label:+-L "$label"}
}

# libFuzzer needs Clang: configure build/fuzz with it and build only the fuzz targets
# (tests/fuzz/CMakeLists.txt compiles the decoders' sources into each one).
run_fuzz() {
  local dir="build/fuzz"
  CC=clang cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DWK_WERROR=ON >/dev/null
  cmake --build "$dir" -j "$jobs" --target fuzz_targets
  echo "== ctest in $dir"
  ctest --test-dir "$dir" --output-on-failure -j "$jobs" -L fuzz
}

# ThreadSanitizer: build only the thread tests (tests/integration/CMakeLists.txt,
# target thread_tests) and run those labelled tsan, as many at once as there are cores
# (they mostly wait: 45 s of CPU in 44 s on 2 cores, where one at a time took 85 s).
run_tsan() {
  local dir="build/tsan"
  cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DWK_WERROR=ON -DWK_TSAN=ON >/dev/null
  cmake --build "$dir" -j "$jobs" --target thread_tests
  echo "== ctest in $dir"
  WK_BUILD_DIR="$root/$dir" ctest --test-dir "$dir" --output-on-failure -j "$jobs" -L tsan
}

run_build release
WK_SIM_STEPS=${WK_SIM_STEPS_ASAN:-500000} run_build asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DWK_SANITIZE=ON
if [ -z "$label" ] || [[ tsan =~ $label ]]; then
  run_tsan
fi
if [ -z "$label" ] || [[ fuzz =~ $label ]]; then
  run_fuzz
fi
echo "all tests passed"

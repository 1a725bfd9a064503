#!/bin/sh
# Checks how the assertions of src/lib/wk_assert.h end a process (test_assert_trip.c).
# Usage: test_assert.sh TRIP_BINARY always
#        test_assert.sh TRIP_BINARY debug EXPECTED   (EXPECTED 1: debug assertions on)
set -u
bin=$1 mode=$2 want=${3:-1}
err=$(mktemp)
trap 'rm -f "$err"' EXIT

# runs `bin $1`, expects it to die of SIGABRT naming the file, line, function and expression
expect_abort() {
  "$bin" "$1" 2>"$err"
  rc=$?
  if [ $rc -ne 134 ]; then
    echo "FAIL: '$bin $1' exited $rc, want 134 (SIGABRT); stderr:" >&2
    cat "$err" >&2
    exit 1
  fi
  if ! grep -Eq 'test_assert_trip\.c:[0-9]+: main: assertion failed: zero == 1' "$err"; then
    echo "FAIL: '$bin $1' aborted without 'file:line: main: assertion failed: zero == 1':" >&2
    cat "$err" >&2
    exit 1
  fi
  echo "ok: '$1' aborted: $(head -n 1 "$err")"
}

case $mode in
  always) expect_abort always ;;
  debug)
    lib=$("$bin" lib) || { echo "FAIL: this program and wk_lib disagree on WK_DEBUG_ASSERTS" >&2; exit 1; }
    if [ "$lib" != "$want" ]; then
      echo "FAIL: wk_lib was built with debug assertions = $lib, the build asks for $want" >&2
      exit 1
    fi
    if [ "$want" = 1 ]; then
      expect_abort debug
    else
      "$bin" debug 2>"$err" || { echo "FAIL: WK_DEBUG_ASSERT fired in a build without it:" >&2; cat "$err" >&2; exit 1; }
      echo "ok: debug assertions are compiled out, as this build asks"
    fi ;;
  *) echo "usage: test_assert.sh BIN always|debug [EXPECTED]" >&2; exit 2 ;;
esac

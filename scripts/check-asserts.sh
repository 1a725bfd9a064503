#!/bin/sh
# Fails when C code under src/ or cmd/ uses assert() or includes <assert.h>: NDEBUG
# removes them from the Release and RelWithDebInfo builds every test runs, so they
# would never be checked. Use WK_ASSERT / WK_DEBUG_ASSERT (src/lib/wk_assert.h).
# Usage: check-asserts.sh ROOT
set -eu
root=${1:?usage: check-asserts.sh ROOT}
status=0
for f in $(find "$root/src" "$root/cmd" -name '*.[ch]' | sort); do
  if grep -nE '^[[:space:]]*#[[:space:]]*include[[:space:]]*<assert\.h>' "$f"; then
    echo "check-asserts: $f includes <assert.h>: use lib/wk_assert.h" >&2
    status=1
  fi
  # strip comments (// ..., /* ... */ on one line, the lines of a block comment) and strings
  if sed -e 's://.*$::' -e 's:/\*.*\*/::g' -e 's:^[[:space:]]*\*.*$::' -e 's:"[^"]*"::g' "$f" |
    grep -nE '(^|[^A-Za-z0-9_])assert[[:space:]]*\('; then
    echo "check-asserts: $f calls assert(), which Release builds remove: use WK_ASSERT" >&2
    status=1
  fi
done
[ $status -eq 0 ] && echo "check-asserts: no assert() under src/ or cmd/"
exit $status

#!/bin/sh
# Lists the C files (src/ cmd/ tests/ bench/) that clang-format (.clang-format at the
# root) would change, and fails when there is any. Usage: scripts/check-format.sh
# Fix one file with `clang-format -i FILE`. The files go to clang-format in batches, one
# batch per core (a process per file spent ~30 s of the suite starting clang-format).
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
command -v clang-format >/dev/null || { echo "check-format: clang-format not found" >&2; exit 2; }

list=$(mktemp)
out=$(mktemp)
trap 'rm -f "$list" "$out"' EXIT
git ls-files 'src/*.[ch]' 'cmd/*.[ch]' 'tests/*.[ch]' 'bench/*.[ch]' >"$list"
total=$(wc -l <"$list")
rc=0
xargs -P "$(nproc)" -n 64 clang-format --dry-run --Werror <"$list" >/dev/null 2>"$out" || rc=$?
bad=$(sed -n 's/^\([^:]*\):[0-9]*:[0-9]*: error: .*clang-format-violations.*/\1/p' "$out" | sort -u)
if [ -n "$bad" ]; then
  printf '%s\n' "$bad"
  echo "check-format: $(printf '%s\n' "$bad" | wc -l) of $total files are not formatted (clang-format -i FILE)" >&2
  exit 1
fi
if [ "$rc" -ne 0 ]; then # clang-format failed without naming a file: say what it said
  cat "$out" >&2
  echo "check-format: clang-format failed (exit $rc)" >&2
  exit 2
fi
echo "check-format: $total files formatted"

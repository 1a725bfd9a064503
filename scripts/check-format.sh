#!/bin/sh
# Lists the C files (src/ cmd/ tests/ bench/) that clang-format (.clang-format at the
# root) would change, and fails when there is any. Usage: scripts/check-format.sh
# Fix one file with `clang-format -i FILE`.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
command -v clang-format >/dev/null || { echo "check-format: clang-format not found" >&2; exit 2; }

bad=0
total=0
for f in $(git ls-files 'src/*.[ch]' 'cmd/*.[ch]' 'tests/*.[ch]' 'bench/*.[ch]'); do
  total=$((total + 1))
  if ! clang-format --dry-run --Werror "$f" >/dev/null 2>&1; then
    echo "$f"
    bad=$((bad + 1))
  fi
done
if [ $bad -gt 0 ]; then
  echo "check-format: $bad of $total files are not formatted (clang-format -i FILE)" >&2
  exit 1
fi
echo "check-format: $total files formatted"

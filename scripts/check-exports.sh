#!/bin/sh
# Checks what the libraries export (cmake/Headers.cmake stages each library's public
# headers under BUILD/include/LIBRARY): every public header of src/ is exported by exactly
# one library, no internal header (*_int.h) by any, each export is a link into src/, and
# a file compiled against a library's exports finds its public headers but not its
# internal ones. Usage: check-exports.sh SRC_DIR BUILD_DIR CC
set -eu
src=${1:?usage: check-exports.sh SRC_DIR BUILD_DIR CC}
build=${2:?usage: check-exports.sh SRC_DIR BUILD_DIR CC}
cc=${3:?usage: check-exports.sh SRC_DIR BUILD_DIR CC}
inc="$build/include"
[ -d "$inc" ] || { echo "exports: $inc is missing (configure first)" >&2; exit 1; }
status=0

for h in $(cd "$src" && find . -name '*.h' ! -name '*_int.h' | sed 's|^\./||' | sort); do
  owners=$(cd "$inc" && for d in */; do [ -e "$d$h" ] && printf '%s ' "${d%/}"; done; true)
  case $owners in
    "") echo "exports: src/$h is exported by no library: list it in its library's wk_headers(... PUBLIC ...)" >&2; status=1 ;;
    *" "?*) echo "exports: src/$h is exported by several libraries: $owners" >&2; status=1 ;;
  esac
done

for f in $(cd "$inc" && find . -name '*.h' | sed 's|^\./||' | sort); do
  case $f in
    *_int.h) echo "exports: $inc/$f: an internal header is exported" >&2; status=1 ;;
  esac
  target=$(readlink -f "$inc/$f")
  case $target in
    "$(readlink -f "$src")"/*) ;;
    *) echo "exports: $inc/$f is not a link into $src" >&2; status=1 ;;
  esac
done

# the mechanism: against wk_core's and wk_lib's exports, the core's public header
# compiles and its internal header is not found
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
printf '#include "core/wk_core.h"\nint wk_probe;\n' >"$tmp/public.c"
printf '#include "core/wk_core_int.h"\nint wk_probe;\n' >"$tmp/internal.c"
if ! "$cc" -std=c17 -fsyntax-only -I "$inc/wk_core" -I "$inc/wk_lib" "$tmp/public.c" 2>"$tmp/err"; then
  echo "exports: core/wk_core.h does not compile against wk_core's exports:" >&2
  cat "$tmp/err" >&2
  status=1
fi
if "$cc" -std=c17 -fsyntax-only -I "$inc/wk_core" -I "$inc/wk_lib" "$tmp/internal.c" 2>/dev/null; then
  echo "exports: core/wk_core_int.h is reachable through wk_core's exports" >&2
  status=1
fi

[ $status -eq 0 ] && echo "exports: each public header exported once, internal headers never"
exit $status

#!/bin/sh
# The layer check (scripts/check-layers.sh) passes on the source tree and fails on each
# copy of it with one include planted upward (core -> app, lib -> core, adapters -> app)
# or sideways (adapters <-> plugins). Usage: test_check_layers.sh SOURCE_DIR
set -eu
root=${1:?usage: test_check_layers.sh SOURCE_DIR}
check="$root/scripts/check-layers.sh"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

cp -R "$root/src" "$tmp/src"
"$check" "$tmp/src" || { echo "FAIL: the clean tree does not pass" >&2; exit 1; }

plant() { # layer, include line: the check fails on a copy with the line atop one of
  # the layer's .c files (the first by name), and names that file
  set -- "$(cd "$tmp/src" && ls "$1"/*.c | head -n 1)" "$2"
  rm -rf "$tmp/bad" && cp -R "$tmp/src" "$tmp/bad"
  printf '%s\n' "$2" | cat - "$tmp/bad/$1" >"$tmp/bad/$1.new" && mv "$tmp/bad/$1.new" "$tmp/bad/$1"
  if "$check" "$tmp/bad" 2>"$tmp/err"; then
    echo "FAIL: $1 with '$2' passed the layer check" >&2
    exit 1
  fi
  grep -q "$1" "$tmp/err" || { echo "FAIL: the report does not name $1:" >&2; cat "$tmp/err" >&2; exit 1; }
  echo "ok: $1 with '$2' fails the check"
}

plant core '#include "app/wk_app.h"'
plant lib '#include "core/wk_types.h"'
plant adapters '#include "app/wk_fs.h"'
plant adapters '#include "plugins/wk_writers.h"'
plant plugins '#include "adapters/wk_frame.h"'
echo "layer check: passes clean, fails on each planted include"

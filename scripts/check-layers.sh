#!/bin/sh
# Fails when a file under src/ includes a header from a layer above its own, or another
# module's internal header. The layers, each including only itself and what is below:
#   lib                 lib
#   core                core, lib
#   adapters, plugins   themselves, core, lib, generated protocol headers
#                       (worker/v1/..., grpc/health/...); not app, not each other
#   app                 anything under src/ (not cmd/)
#   cmd                 anything (not checked)
# An internal header (*_int.h) is included only from its own directory, and no include
# climbs out of its directory with "..". Usage: check-layers.sh SRC_DIR
set -eu
src=${1:?usage: check-layers.sh SRC_DIR}

allowed() { # layer -> the include prefixes it may use
  case $1 in
    lib) echo "lib" ;;
    core) echo "core lib" ;;
    adapters) echo "adapters core lib worker grpc" ;;
    plugins) echo "plugins core lib worker grpc" ;;
    app) echo "app adapters plugins core lib worker grpc" ;;
  esac
}

status=0
files=0
for layer in lib core adapters plugins app; do
  [ -d "$src/$layer" ] || { echo "layers: $src/$layer is missing" >&2; exit 1; }
  ok=$(allowed $layer)
  for f in $(find "$src/$layer" -name '*.[ch]' | sort); do
    files=$((files + 1))
    # "line:path" for each #include "..." or #include <...> of this file
    for inc in $(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*["<]\([^">]*\)[">].*/\1/p' "$f"); do
      case $inc in
        *..*)
          echo "layers: $f includes \"$inc\": no include climbs out with .." >&2
          status=1; continue ;;
      esac
      top=${inc%%/*}
      [ "$top" = "$inc" ] && continue # no directory: a system header, or one beside the file
      case $top in
        lib|core|adapters|plugins|app|cmd) ;;
        worker) case $inc in worker/v1/*) ;; *) continue ;; esac ;;  # generated
        grpc) case $inc in grpc/health/*) ;; *) continue ;; esac ;;  # generated; else gRPC's own
        *) continue ;; # a third-party header (<uv.h>, <grpc/grpc.h>, <curl/curl.h>, ...)
      esac
      case " $ok " in
        *" $top "*) ;;
        *)
          echo "layers: $f ($layer) includes \"$inc\" from $top, a layer above or beside it" >&2
          status=1 ;;
      esac
      case $inc in
        *_int.h)
          if [ "$top" != "$layer" ]; then
            echo "layers: $f includes \"$inc\", an internal header of another directory" >&2
            status=1
          fi ;;
      esac
    done
  done
done
[ $status -eq 0 ] && echo "layers: $files files include only downward"
exit $status

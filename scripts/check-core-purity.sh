#!/bin/sh
# Fails when a file of the pure cores (src/core/, and the src/lib/ containers the core
# includes) pulls in a clock, I/O, socket or thread header, or calls a clock or I/O
# function. Usage: check-core-purity.sh SRC_DIR
set -eu
src=${1:?usage: check-core-purity.sh SRC_DIR}

files=$(find "$src/core" -name '*.[ch]' | sort)
# lib headers the core includes, and their .c files, must be pure as well
for inc in $(grep -ho '#include "lib/[a-z_]*\.h"' $files | sed 's/.*"\(lib\/[a-z_]*\)\.h"/\1/' | sort -u); do
  for f in "$src/$inc.h" "$src/$inc.c"; do [ -f "$f" ] && files="$files $f"; done
done
# The one exception: lib/wk_assert.c reports a failed assertion on stderr and aborts,
# the last act of a process whose invariants broke (its header stays pure).
files=$(echo $files | tr ' ' '\n' | grep -v "/lib/wk_assert\.c$" || true)

headers='time\.h|sys/time\.h|sys/times\.h|stdio\.h|unistd\.h|fcntl\.h|pthread\.h|threads\.h|signal\.h|sys/socket\.h|sys/un\.h|netinet/[a-z_]*\.h|arpa/inet\.h|netdb\.h|poll\.h|sys/epoll\.h|sys/select\.h|sys/stat\.h|sys/types\.h|dirent\.h|uv\.h|grpc/[a-z_/]*\.h|curl/curl\.h|sys/mman\.h|stdatomic\.h|semaphore\.h|sched\.h|syslog\.h'
calls='(clock_gettime|gettimeofday|clock|time|timespec_get|nanosleep|usleep|sleep|printf|fprintf|puts|fopen|fread|fwrite|open|read|write|close|socket|connect|send|recv|pthread_[a-z_]*|thrd_[a-z_]*|rand|srand|random|getenv|system|fork|exec[lv]p?e?)[[:space:]]*\('

status=0
for f in $files; do
  if grep -nE "^[[:space:]]*#[[:space:]]*include[[:space:]]*<($headers)>" "$f"; then
    echo "core purity: $f includes a clock, I/O, socket or thread header" >&2
    status=1
  fi
  # strip comments and strings crudely, then look for forbidden calls not preceded by an identifier char
  if sed -e 's://.*$::' -e 's:/\*.*\*/::g' -e 's:"[^"]*"::g' "$f" | grep -nE "(^|[^A-Za-z0-9_.>])$calls"; then
    echo "core purity: $f calls a clock, I/O, thread or randomness function" >&2
    status=1
  fi
done
[ $status -eq 0 ] && echo "core purity: $(echo $files | wc -w) files clean"
exit $status

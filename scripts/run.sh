#!/usr/bin/env bash
# The main job, from nothing: installs what is missing, builds, starts a worker on
# the example function in examples/hello, deploys it with workerctl, submits a task,
# prints its result and stops the worker.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
bash scripts/deps.sh
cmake -S . -B build/release -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build/release -j "$(nproc)" --target worker workerctl

bin="$root/build/release"
work=$(mktemp -d)
chmod 755 "$work" # run as root, the worker starts its executors as nobody: they read the code here
trap 'kill -TERM $worker_pid 2>/dev/null || true; wait $worker_pid 2>/dev/null || true; rm -rf "$work"' EXIT
mkdir -p "$work/code"
port=${WORKER_PORT:-7070}

# Run as root, the executors are `nobody`: they must read the executor program too. A
# clone under a directory closed to others (root's home, mktemp -d) keeps it from them,
# so the executor's Python files are used from a copy in the (open) work directory.
exec_args=()
if [ "$(id -u)" = 0 ]; then
  cp -r "$root/python" "$work/python"
  exec_args=(--executor-script "$work/python/worker_executor.py" --python-path "$work/python")
fi

env -u WORKER_PORT "$bin/worker" --listen "127.0.0.1:$port" --code-root "$work/code" --executors 2 \
  "${exec_args[@]}" 2>"$work/worker.log" &
worker_pid=$!
export WORKERCTL_ADDR="127.0.0.1:$port"

echo "== deploying examples/hello"
"$bin/workerctl" deploy --code-root "$work/code" hello "$root/examples/hello"
for _ in $(seq 1 100); do
  "$bin/workerctl" health >/dev/null 2>&1 && break
  sleep 0.1
done
echo "== submitting a task and watching it"
"$bin/workerctl" submit hello '{"name": "Ada"}' --watch
echo "== the worker's task_finished log line"
grep '"task_finished"' "$work/worker.log" || true
kill -TERM $worker_pid
wait $worker_pid
echo "== worker stopped cleanly"

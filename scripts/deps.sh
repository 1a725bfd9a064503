#!/usr/bin/env bash
# Installs every Debian package the Worker needs to build, test and run.
# Idempotent: runs `apt-get update` and `apt-get install` only when something is missing.
set -euo pipefail

PACKAGES=(
  # build
  build-essential cmake pkg-config clang libclang-rt-14-dev clang-format
  # test framework and tools (strace: the no-file-syscall test of a no-op task)
  libcmocka-dev valgrind strace
  # runtime libraries
  libgrpc-dev protobuf-c-compiler libprotobuf-c-dev libuv1-dev
  libcurl4-openssl-dev libjansson-dev libmicrohttpd-dev
  # the code store's sha256 digests (libcrypto)
  libssl-dev
  # sd_notify for systemd's Type=notify (src/adapters/wk_sdnotify.c), and systemd-analyze
  # for the unit file's test (tests/e2e/test_systemd_notify_e2e.py)
  libsystemd-dev systemd
  # protocol tooling and end-to-end test clients
  protobuf-compiler protobuf-compiler-grpc python3 python3-grpcio python3-protobuf python3-pytest
  python3-prometheus-client
  # worker_client installed with pip into a fresh venv (tests/e2e/test_pyclient_package_e2e.py)
  python3-venv python3-pip python3-setuptools
  # a Go client for the idempotency test (tests/e2e/test_digest_go_e2e.py): built offline
  # in GOPATH mode against /usr/share/gocode, stubs from protoc-gen-go
  golang-go golang-google-grpc-dev golang-google-protobuf-dev golang-goprotobuf-dev
  # servers started by the tests
  etcd-server
  # certificates made at test time
  openssl
  # configuration file (YAML)
  libyaml-dev
  # writer plugins (redis, postgres) and the servers their tests start
  libhiredis-dev redis-server postgresql
  # the status page's browser test (tests/e2e/test_status_page_e2e.py): headless Chromium
  # driven over its DevTools protocol, and fonts for its screenshot
  chromium fonts-dejavu-core
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "deps: all ${#PACKAGES[@]} packages present"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "deps: installing ${missing[*]}"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"

#!/usr/bin/env bash
# Installs everything fullband needs to build and test on a fresh Debian 12 machine (as root,
# or with sudo), then the npm packages of the tokenizer (scripts/fetch_deps.sh). Idempotent:
# packages already present are left alone.
set -euo pipefail

packages=(
  build-essential cmake ninja-build ccache pkg-config git
  libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc
  librocksdb-dev libopenmpi-dev openmpi-bin
  libopenblas-dev libopenblas0-pthread libdnnl-dev
  libyaml-cpp-dev libxxhash-dev libsimdjson-dev libgtest-dev libgmock-dev nlohmann-json3-dev
  libcli11-dev libcpp-httplib-dev  # the command line's flags; the coordinator's /metrics server
  clang-format python3 python3-numpy python3-yaml python3-torch
  prometheus  # promtool validates the /metrics exposition in tests; a real scrape test
  gnuplot-nox  # `fullband plot`
  slurmctld slurmd slurm-client munge iproute2 util-linux  # the slurm launcher's tests: a private
                                                           # cluster, simulated hosts
  libssl-dev linux-doc-6.1 nodejs  # tokenizer: SHA-256; parity/bench text; the tiktoken reference
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# npm: Debian's package, unless the installed nodejs already brings its own (NodeSource's does).
command -v npm >/dev/null || missing+=(npm)

if ((${#missing[@]})); then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "setup: installing ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
echo "setup: all packages present"
"$(dirname "$0")/fetch_deps.sh"

#!/usr/bin/env bash
# Configures and builds fullband into build/ (or $FULLBAND_BUILD_DIR). Extra arguments go to
# cmake, e.g. scripts/build.sh -DFULLBAND_CUDA=OFF. CUDA is built when nvcc is found.
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${FULLBAND_BUILD_DIR:-build}
jobs=${FULLBAND_JOBS:-$(nproc)}
cmake -S . -B "$build_dir" -G Ninja "$@" >"$build_dir.configure.log" 2>&1 || {
  cat "$build_dir.configure.log"
  exit 1
}
grep -E '^-- fullband:' "$build_dir.configure.log" || true
ninja -C "$build_dir" -j "$jobs" ${FULLBAND_TARGETS:-}

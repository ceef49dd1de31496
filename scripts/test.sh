#!/usr/bin/env bash
# The test command of the README: installs dependencies, builds everything (CUDA code compiles
# and links even without a GPU; GPU tests then skip with a message), runs every CTest test,
# then rebuilds the unit tests with AddressSanitizer + UndefinedBehaviorSanitizer and runs them.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh

echo "== build (Release)"
scripts/build.sh
echo "== tests (Release)"
ctest --test-dir build --output-on-failure -j "$(nproc)"

echo "== build (ASan + UBSan, CPU only)"
FULLBAND_BUILD_DIR=build-asan FULLBAND_TARGETS="common_test proto_test checkpoint_test ops_test worker_test" \
  scripts/build.sh -DFULLBAND_SANITIZE=ON -DFULLBAND_CUDA=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo
echo "== unit tests (ASan + UBSan)"
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
ctest --test-dir build-asan -L unit --output-on-failure -j "$(nproc)"

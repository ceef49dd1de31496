#!/usr/bin/env bash
# The main-job command of the README. Until the trainer lands, the most complete real job is
# the op library itself: it installs dependencies, builds, lists the backends and runs the op
# benchmarks (GEMM, attention, cross-entropy against same-run baselines), printing JSON lines.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
FULLBAND_TARGETS="fullband ops_bench" scripts/build.sh
build/cli/fullband backends
build/bench/ops_bench "$@"

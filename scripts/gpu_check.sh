#!/usr/bin/env bash
# GPU check, for a machine with an NVIDIA GPU: builds with CUDA, runs the op suite (every op on
# CPU and CUDA against float64 references, which makes it the CUDA-vs-CPU parity suite), the
# NCCL communicator against the in-process one (and across two ranks under mpirun where there
# are two GPUs) and the op benchmarks on both backends. Writes logs to ${OUT:-gpu-check}/.
# Aims for < 5 minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-gpu-check}
mkdir -p "$out"
command -v ninja >/dev/null || scripts/setup.sh
nvidia-smi | tee "$out/nvidia-smi.txt" || true
FULLBAND_TARGETS="ops_test nccl_communicator_test ops_bench fullband" \
  scripts/build.sh -DFULLBAND_CUDA=ON 2>&1 | tail -n 20 | tee "$out/build.txt"
build/cli/fullband backends | tee "$out/backends.txt"
# A CUDA backend that cannot be created fails every CUDA test here, with the plugin's error.
FULLBAND_REQUIRE_CUDA=1 build/tests/ops/ops_test --gtest_brief=1 2>&1 | tee "$out/ops_test.txt"
FULLBAND_REQUIRE_CUDA=1 build/tests/worker/nccl_communicator_test --gtest_brief=1 2>&1 |
  tee "$out/nccl_communicator_test.txt"
if (($(nvidia-smi -L 2>/dev/null | wc -l) >= 2)); then
  FULLBAND_REQUIRE_CUDA=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
    mpirun --oversubscribe --bind-to none -np 2 build/tests/worker/nccl_communicator_test \
    --gtest_brief=1 2>&1 | tee "$out/nccl_communicator_test_np2.txt"
fi
build/bench/ops_bench --device cuda 2>&1 | tee "$out/bench_cuda.jsonl"
build/bench/ops_bench --quick 2>&1 | tee "$out/bench_cpu.jsonl"

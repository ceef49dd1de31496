#!/usr/bin/env bash
# GPU check, for a machine with an NVIDIA GPU: builds with CUDA, runs the op suite (every op on
# CPU and CUDA against float64 references, which makes it the CUDA-vs-CPU parity suite), the
# NCCL communicator against the in-process one (and across two ranks under mpirun where there
# are two GPUs), a short training run on one GPU against the same run on the CPU, and the op
# benchmarks on both backends. Writes logs to ${OUT:-gpu-check}/.
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
FULLBAND_REQUIRE_CUDA=1 build/tests/comm/nccl_communicator_test --gtest_brief=1 2>&1 |
  tee "$out/nccl_communicator_test.txt"
if (($(nvidia-smi -L 2>/dev/null | wc -l) >= 2)); then
  FULLBAND_REQUIRE_CUDA=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
    mpirun --oversubscribe --bind-to none -np 2 build/tests/comm/nccl_communicator_test \
    --gtest_brief=1 2>&1 | tee "$out/nccl_communicator_test_np2.txt"
fi
# The trainer on one GPU: 8 steps with K = 1, 2, 3 of the tests' tiny model at d_model 128; its
# per-pass losses must match the CPU's run of the same config (1e-3 relative: cuBLAS and the
# CPU sum differently).
source tests/e2e_lib.sh  # tiny_model, write_token_ids
write_token_ids "$out/tokens.bin" 3 40
python3 - "$out" "$(tiny_model vocab_size=260 d_model=128 max_seq_len=64 window=16)" <<'PY'
import json, subprocess, sys
out, model = sys.argv[1], sys.argv[2]
runs = {}
for device in ("cpu", "cuda"):
    open(f"{out}/train-{device}.yaml", "w").write(f"""
{model}
data: {{path: {out}/tokens.bin, batch_size: 8, seq_len: 64}}
schedule: {{steps: 8, seed: 2, phases: [{{until: 1.0, mix: {{1: 0.4, 2: 0.4, 3: 0.2}}}}]}}
runtime: {{device: {device}, threads: 2, log_every: 1, peak_gflops: 1}}
""")
    p = subprocess.run(["build/cli/fullband", "train", f"{out}/train-{device}.yaml", "--json"],
                       capture_output=True, text=True)
    open(f"{out}/train-{device}.log", "w").write(p.stdout + p.stderr)
    if p.returncode != 0:
        sys.exit(f"fullband train on {device} failed: {p.stderr[-2000:]}")
    runs[device] = [json.loads(l) for l in p.stdout.splitlines() if l.startswith("{") and '"step"' in l]
for a, b in zip(runs["cpu"], runs["cuda"]):
    for x, y in zip(a["pass_loss"], b["pass_loss"]):
        assert abs(x - y) <= 1e-3 * abs(x), (a["step"], x, y)
print("one GPU trains like the CPU:", len(runs["cuda"]), "steps")
PY
build/bench/ops_bench --device cuda 2>&1 | tee "$out/bench_cuda.jsonl"
build/bench/ops_bench --quick 2>&1 | tee "$out/bench_cpu.jsonl"

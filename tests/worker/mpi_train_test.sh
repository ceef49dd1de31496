#!/usr/bin/env bash
# `fullband train` as an mpirun group against one rank (docs/PARALLEL.md): DP2 with ZeRO-1 off
# and on, TP2, and TP2 × DP2 with ZeRO-1 (one thread a rank), over 6 steps with K = 1, 2, 3,
# jitter and prefix mixin on, must log the same loss for every pass of every step as one rank,
# within 1e-5 relative; then a TP2 rank killed with SIGKILL in the middle of a run must take the
# whole group down, non-zero, within 10 s.
# usage: mpi_train_test.sh FULLBAND MPIRUN
set -euo pipefail
fullband=$1 mpirun=$2
source "$(dirname "$0")/../e2e_lib.sh"
scratch_dir
write_token_ids "$dir/tokens.bin" 5 40
config() {  # $1 = dp, $2 = steps, $3 = zero1 (default false), $4 = tp (default 1)
  cat <<YAML
$(tiny_model vocab_size=260)
parallel: {tp: ${4:-1}, dp: $1, zero1: ${3:-false}}
data: {path: $dir/tokens.bin, batch_size: 8, seq_len: 24}
optim: {lr: 1.0e-3, warmup_steps: 2}
schedule: {steps: $2, seed: 3, phases: [{until: 1.0, mix: {1: 0.4, 2: 0.4, 3: 0.2}}]}
runtime: {threads: 1, log_every: 1, peak_gflops: 1}
YAML
}
config 1 6 >"$dir/one.yaml"
config 2 6 >"$dir/dp2.yaml"
config 2 6 true >"$dir/dp2-zero1.yaml"
config 1 6 false 2 >"$dir/tp2.yaml"
config 2 6 true 2 >"$dir/tp2xdp2-zero1.yaml"
"$fullband" train "$dir/one.yaml" --json >"$dir/one.jsonl"
for run in dp2:2 dp2-zero1:2 tp2:2 tp2xdp2-zero1:4; do
  np=${run#*:} run=${run%:*}
  "$mpirun" --oversubscribe --bind-to none -np "$np" "$fullband" train "$dir/$run.yaml" --json \
    >"$dir/$run.jsonl"
  python3 - "$dir/one.jsonl" "$dir/$run.jsonl" "$run" <<'PY'
import json, sys
def steps(path):
    return [r for r in map(json.loads, open(path)) if "step" in r]
one, dp2 = steps(sys.argv[1]), steps(sys.argv[2])
assert len(one) == len(dp2) == 6, (len(one), len(dp2))
passes = set()
for a, b in zip(one, dp2):
    assert a["passes"] == b["passes"], (a, b)
    passes.add(a["passes"])
    for x, y in zip(a["pass_loss"], b["pass_loss"]):
        assert abs(x - y) <= 1e-5 * abs(x), (a["step"], x, y)
assert passes >= {1, 2}, passes
print(sys.argv[3], "matches one rank on", len(one), "steps, pass counts", sorted(passes))
PY
done

# A rank killed mid-run: the group ends, non-zero, within 10 s.
config 1 100000 false 2 >"$dir/long.yaml"
"$mpirun" --oversubscribe --bind-to none -np 2 "$fullband" train "$dir/long.yaml" \
  >"$dir/long.out" 2>&1 &
launcher=$!
rank1_trained() {  # sets $victim once rank 1 is found and step 3 is logged
  grep -q '^step *3/' "$dir/long.out" 2>/dev/null || return 1
  for p in $(pgrep -f "fullband train $dir/long.yaml" || true); do
    if tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx 'OMPI_COMM_WORLD_RANK=1'; then
      victim=$p
    fi
  done
  [ -n "$victim" ]
}
victim=""
wait_for 60 rank1_trained || fail "rank 1 never trained: $(cat "$dir/long.out")"
start=$(date +%s%N)
kill -9 "$victim"
set +e
timeout 30 tail --pid="$launcher" -f /dev/null
wait "$launcher"
rc=$?
set -e
took_ms=$((($(date +%s%N) - start) / 1000000))
echo "group exited with code $rc ${took_ms} ms after rank 1 was killed"
[ "$rc" -ne 0 ] || { echo "the group exited 0 after losing a rank"; exit 1; }
((took_ms < 10000)) || { echo "took ${took_ms} ms (limit 10 s)"; exit 1; }
if pgrep -f "fullband train $dir/long.yaml" >/dev/null; then
  echo "ranks left running"; exit 1
fi
echo "passed"

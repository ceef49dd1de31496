#!/usr/bin/env bash
# Crash safety of checkpoints in coordinated jobs (Note [Checkpoint commit] in
# checkpoint/sharded.h): a DP2 + ZeRO-1 job saving every 4 steps, on a local coordinator that
# restarts it, against the same job run without faults.
#   1. rank 1 is killed (SIGKILL) after writing its shard of step 8, before the manifest;
#   2. rank 0 is killed after renaming step-8 into place, before CommitCheckpoint;
#   3. a rank is killed, and while the job waits to restart, a byte of its newest committed
#      checkpoint is flipped: the relaunched group falls back to the one before and tells the
#      coordinator (RollBackCheckpoint).
# Each job must COMPLETE with exactly steps × batch × seq_len tokens, the rolled-back steps
# counted as wasted, one restart, and a final checkpoint whose shards are byte for byte those of
# the uninterrupted run (every parameter and moment bitwise).
# usage: checkpoint_e2e_test.sh FULLBAND
set -euo pipefail
fullband=$(realpath "$1")
source "$(dirname "$0")/../coordinator/e2e_lib.sh"

python3 - "$dir/tokens.bin" <<'PY'
import random, struct, sys
rng = random.Random(11)
ids = [256 if rng.randrange(50) == 0 else rng.randrange(256) for _ in range(1 << 16)]
open(sys.argv[1], "wb").write(struct.pack("<%dI" % len(ids), *ids))
PY
write_coordinator_config "$dir/coordinator.yaml"
job() {  # $1 = name (its checkpoint directory), $2 = extra worker arguments (YAML list items)
  cat <<YAML
model: {vocab_size: 258, eod_id: 256, d_model: 32, n_layers: 2, n_heads: 4, n_kv_heads: 2,
        head_dim: 8, ffn_dim: 64, max_seq_len: 32, window: 8, full_attention_every: 2}
parallel: {dp: 2, zero1: true}
data: {path: $dir/tokens.bin, batch_size: 8, seq_len: 24}
optim: {lr: 3.0e-3, warmup_steps: 2}
schedule: {seed: 4, phases: [{until: 1.0, mix: {1: 0.5, 2: 0.3, 3: 0.2}}]}
checkpoint: {dir: $dir/ckpt-$1, every_steps: 4, keep: 3}
budget: {kind: tokens, amount: 3840}
runtime: {threads: 1, log_every: 1, peak_gflops: 1}
launcher: {command: [$fullband, worker], extra_args: [$2], max_restarts: 2, backoff_seconds: 2}
YAML
}
json() { "$fullband" status "$1" --json; }
field() { json "$1" | python3 -c "import json,sys; print(json.load(sys.stdin)$2)"; }
wait_until() {  # $1 = job, $2 = python condition on the status JSON `j`, $3 = what
  for _ in $(seq 600); do
    json "$1" | python3 -c "import json,sys; j=json.load(sys.stdin); sys.exit(0 if ($2) else 1)" &&
      return 0
    sleep 0.1
  done
  fail "$3: $(json "$1")"
}
final_shards() { sha256sum "$dir/ckpt-$1/step-20"/*.safetensors | awk '{print $1}'; }

start_coordinator "$fullband" "$dir/coordinator.yaml"

# The uninterrupted run: 20 steps of 192 tokens.
job clean "" > "$dir/clean.yaml"
out=$(timeout 300 "$fullband" submit "$dir/clean.yaml" --wait) || fail "clean: $out"
clean=$(head -1 <<< "$out")
grep -q COMPLETED <<< "$out" || fail "clean: $out $(cat "$dir/jobs/$clean/attempt-0.err")"
wait_until "$clean" "int(j.get('committed_step', 0)) == 20" "the clean job's final checkpoint"
reference=$(final_shards clean)
[[ $(wc -l <<< "$reference") == 2 ]] || fail "the clean run has no two final shards"

check() {  # $1 = name, $2 = job: completed, exact ledger, wasted steps, bitwise final state
  wait_until "$2" "j['state'].endswith('COMPLETED') and int(j.get('committed_step', 0)) == 20" \
    "$1 did not complete with its final checkpoint"
  python3 - "$(json "$2")" "$1" <<'PY'
import json, sys
j, name = json.loads(sys.argv[1]), sys.argv[2]
l = j["ledger"]
assert int(l["steps"]) == 20 and int(l["tokens"]) == 20 * 8 * 24, (name, l)
assert int(l.get("wasted_steps", 0)) > 0, (name, l)
assert int(j.get("restarts", 0)) == 1, (name, j.get("restarts"))
print(f"{name}: COMPLETED, 20 steps, {l['tokens']} tokens, {l['wasted_steps']} steps wasted, "
      f"1 restart")
PY
  [[ $(final_shards "$1") == "$reference" ]] || fail "$1: final shards differ from the clean run's"
  "$fullband" ckpt verify "$dir/ckpt-$1/step-20" > /dev/null || fail "$1: final checkpoint"
  echo "$1: final parameters and moments bitwise equal to the uninterrupted run"
}

# 1. Rank 1 dies between its shard write and the manifest of step 8.
job after-shard "--failpoint, checkpoint.after_shard@8, --failpoint-rank, 1" > "$dir/a.yaml"
a=$("$fullband" submit "$dir/a.yaml")
check after-shard "$a"
grep -q "failpoint checkpoint.after_shard@8" "$dir/jobs/$a/attempt-0.err" ||
  fail "after-shard: the failpoint did not fire"

# 2. Rank 0 dies after step-8 is renamed into place, before the coordinator hears of it: the
# relaunch resumes from step 4 and replaces the uncommitted step-8.
job after-rename "--failpoint, checkpoint.after_rename@8" > "$dir/b.yaml"
b=$("$fullband" submit "$dir/b.yaml")
check after-rename "$b"
grep -q "failpoint checkpoint.after_rename@8" "$dir/jobs/$b/attempt-0.err" ||
  fail "after-rename: the failpoint did not fire"
grep -q "resuming at step 4" "$dir/jobs/$b/attempt-1.err" ||
  fail "after-rename: attempt 1 did not resume at step 4: $(cat "$dir/jobs/$b/attempt-1.err")"

# 3. Rank 1 dies while saving step 16; while the job waits to restart, a byte of its newest
# committed checkpoint (step 12) is flipped.
job corrupt "--failpoint, checkpoint.after_shard@16, --failpoint-rank, 1" > "$dir/c.yaml"
c=$("$fullband" submit "$dir/c.yaml")
wait_until "$c" "j['state'].endswith('RESTARTING')" "corrupt: no restart after the failpoint"
path=$(field "$c" "['checkpoint_path']")
[[ $path == */step-12 ]] || fail "corrupt: the committed checkpoint is $path, not step-12"
python3 - "$path/rank-00001.safetensors" <<'PY'
import os, sys
with open(sys.argv[1], "r+b") as f:
    f.seek(os.path.getsize(sys.argv[1]) - 64)
    b = f.read(1)
    f.seek(-1, 1)
    f.write(bytes([b[0] ^ 0x40]))
PY
! "$fullband" ckpt verify "$path" > /dev/null 2>&1 || fail "corrupt: verify missed the flip"
check corrupt "$c"
grep -q "step-12 is unusable" "$dir/jobs/$c/attempt-1.err" || fail "corrupt: no fallback logged"
grep -q "resuming at step 8" "$dir/jobs/$c/attempt-1.err" || fail "corrupt: not resumed at 8"
grep -q "unusable, the worker group restarted from step 8" "$dir/coordinator.err" ||
  fail "corrupt: the coordinator was not told"

kill -TERM "$coordinator_pid"
coordinator_pid=
echo "checkpoint_e2e_test: ok"

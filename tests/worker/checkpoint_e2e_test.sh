#!/usr/bin/env bash
# Crash safety of checkpoints in coordinated jobs (Note [Checkpoint commit] in
# checkpoint/sharded.h): a DP2 + ZeRO-1 job saving every 4 steps, on a local coordinator that
# restarts it, against the same job run without faults.
#   1. rank 1, then rank 0, is killed (SIGKILL) after writing its shard of step 8, before the
#      manifest;
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
source "$(dirname "$0")/../e2e_lib.sh"
scratch_dir
source "$(dirname "$0")/chaos_lib.sh"
write_coordinator_config "$dir/coordinator.yaml"
start_coordinator "$fullband" "$dir/coordinator.yaml"
run_reference

# 1. Rank 1 dies between its shard write and the manifest of step 8.
job after-shard "--failpoint, checkpoint.after_shard@8, --failpoint-rank, 1" > "$dir/a.yaml"
a=$("$fullband" submit "$dir/a.yaml")
check after-shard "$a"
grep -q "failpoint checkpoint.after_shard@8" "$dir/jobs/$a/attempt-0.err" ||
  fail "after-shard: the failpoint did not fire"

# 1b. Rank 0, the one that commits, dies after writing its own shard of step 8.
job rank0-after-shard "--failpoint, checkpoint.after_shard@8" > "$dir/a0.yaml"
a0=$("$fullband" submit "$dir/a0.yaml")
check rank0-after-shard "$a0"
grep -q "failpoint checkpoint.after_shard@8" "$dir/jobs/$a0/attempt-0.err" ||
  fail "rank0-after-shard: the failpoint did not fire"

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
# The shard is damaged while the job waits to restart: a back-off of 10 s leaves room for the
# status polls (which can take seconds on a loaded machine) before the new attempt reads it.
backoff=10 job corrupt "--failpoint, checkpoint.after_shard@16, --failpoint-rank, 1" > "$dir/c.yaml"
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

stop_coordinator
echo "checkpoint_e2e_test: ok"

#!/usr/bin/env bash
# Faults of a running coordinated job (docs/COORDINATOR.md, "Faults"), each on a DP2 + ZeRO-1
# job of 320 steps that checkpoints every 4, against the same job run without faults:
#   1. kill -9 of worker rank 1 mid-run: the launcher sees the exit, the job restarts from its
#      last checkpoint;
#   2. rank 0 stopped with SIGSTOP (a hang, not an exit): the heartbeat deadline (3 s here)
#      finds it, the group is killed and the job restarts;
#   3. kill -9 of the coordinator mid-job, restarted at once on the same store and address: the
#      worker group rides through on its retries; no restart, nothing counted twice;
#   4. the checkpoint disk full (a tmpfs with room for about one and a half checkpoints): saves
#      fail with ENOSPC, the job restarts and finally FAILS with that reason, and its last
#      committed checkpoint stays intact;
#   5. a worker that fails on every attempt (its data file is missing): FAILED after
#      max_restarts with the worker's reason.
# Jobs 1–3 must COMPLETE with exactly steps × batch × seq_len tokens, the rolled-back steps
# counted as wasted, and final parameters and moments bitwise equal to the uninterrupted run's.
# usage: fault_e2e_test.sh FULLBAND
set -euo pipefail
fullband=$(realpath "$1")
source "$(dirname "$0")/../e2e_lib.sh"
scratch_dir
# 320 steps: a fast CPU runs this model at about 0.04 s a step, and a fault must still land
# mid-run after the status polls have seen step 10, which takes them up to about 3 s (at 40
# steps the job could end before the first kill; at 160 the kill landed at step 92).
steps=320 d_model=128 seq_len=64
source "$(dirname "$0")/chaos_lib.sh"
full_disk=$dir/ckpt-disk-full
trap 'mountpoint -q "$full_disk" && umount "$full_disk"; cleanup' EXIT

listen=127.0.0.1:$(free_port)  # a fixed address: the coordinator restarts on it
write_coordinator_config "$dir/coordinator.yaml" "heartbeat_timeout_seconds: 3"
start_coordinator "$fullband" "$dir/coordinator.yaml"
run_reference

# Waits until job $1 has counted at least $2 steps; it must still be running then.
wait_steps() {
  wait_until "$1" "int(j['ledger'].get('steps', 0)) >= $2 or
                  j['state'].split('_')[-1] in ('RESTARTING', 'COMPLETED', 'FAILED', 'CANCELLED')" \
    "$1 never reached step $2"
  [[ $(field "$1" "['state']") == JOB_STATE_RUNNING ]] || fail "$1 ended before step $2: $(json "$1")"
}
now() { date +%s.%N; }

# 1. kill -9 of rank 1.
job kill-rank > "$dir/a.yaml"
a=$("$fullband" submit "$dir/a.yaml")
wait_steps "$a" 10
pid=$(worker_pids "$a" 1)
[[ -n $pid ]] || fail "kill-rank: no rank 1"
kill -9 "$pid"
echo "kill-rank: kill -9 of rank 1 at step $(field "$a" "['ledger']['steps']")"
check kill-rank "$a" 1 0

# 2. SIGSTOP of rank 0: its heartbeats stop; the deadline, not an exit, finds it.
job hang > "$dir/b.yaml"
b=$("$fullband" submit "$dir/b.yaml")
wait_steps "$b" 10
pid=$(worker_pids "$b" 0)
[[ -n $pid ]] || fail "hang: no rank 0"
stopped=$(now)
kill -STOP "$pid"
wait_until "$b" "int(j.get('restarts', 0)) >= 1" "hang: not detected"
detected=$(now)
reason=$(field "$b" "['reason']")
[[ $reason == *heartbeat* ]] || fail "hang: restart reason '$reason'"
echo "hang: rank 0 stopped; restarted after $(python3 -c "print(f'{$detected - $stopped:.1f}')") s: $reason"
check hang "$b" 1 0
! kill -0 "$pid" 2> /dev/null || fail "hang: the stopped rank 0 (pid $pid) is still there"

# 3. kill -9 of the coordinator; a new one on the same store and address.
job coordinator-kill > "$dir/c.yaml"
c=$("$fullband" submit "$dir/c.yaml")
wait_steps "$c" 10
at=$(field "$c" "['ledger']['steps']")
stop_coordinator KILL
start_coordinator "$fullband" "$dir/coordinator.yaml"
echo "coordinator-kill: the coordinator was killed at step $at and restarted"
check coordinator-kill "$c" 0 0
[[ $(field "$c" "['ledger'].get('wasted_steps', '0')") == 0 ]] || fail "coordinator-kill: waste"

# 4. The checkpoint disk full.
size=$(du -sb "$dir/ckpt-clean/step-$steps" | cut -f1)
mkdir -p "$full_disk"
if mount -t tmpfs -o size=$((size * 3 / 2)) tmpfs "$full_disk" 2> "$dir/mount.err"; then
  job disk-full > "$dir/d.yaml"  # its checkpoint directory is the tmpfs
  d=$("$fullband" submit "$dir/d.yaml")
  wait_until "$d" "j['state'].endswith('FAILED')" "disk-full: the job did not fail"
  reason=$(field "$d" "['reason']")
  [[ $reason == *"No space left on device"* ]] || fail "disk-full: reason '$reason'"
  [[ $(field "$d" "['restarts']") == 2 ]] || fail "disk-full: restarts"
  path=$(field "$d" "['checkpoint_path']")
  "$fullband" ckpt verify "$path" > /dev/null || fail "disk-full: the committed $path is damaged"
  echo "disk-full: FAILED after 2 restarts, $path intact: $reason"
  umount "$full_disk"
else
  echo "disk-full: SKIPPED, cannot mount a tmpfs here: $(cat "$dir/mount.err")"
fi

# 5. A worker that fails on every attempt.
data=$dir/missing.bin job always-fails > "$dir/e.yaml"
e=$("$fullband" submit "$dir/e.yaml")
wait_until "$e" "j['state'].endswith('FAILED')" "always-fails: the job did not fail"
reason=$(field "$e" "['reason']")
[[ $reason == "failed after 2 restarts: "*missing.bin* ]] || fail "always-fails: reason '$reason'"
echo "always-fails: $reason"

stop_coordinator
echo "fault_e2e_test: ok"

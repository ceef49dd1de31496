#!/usr/bin/env bash
# Jobs with `launcher.kind: slurm` on a real Slurm (docs/SLURM.md): a private single-node
# cluster from scripts/slurm_cluster.sh, a coordinator, and the DP2 + ZeRO-1 job of chaos_lib.sh,
# held to the same job run by the local launcher:
#   1. a job runs through sbatch to COMPLETED with an exact ledger, final state bitwise equal to
#      the local run; its sbatch script is kept; the worker token reaches the ranks but no
#      command line and no file of the job; time from submit to the
#      first counted step, Slurm against local, and the squeue calls per minute per job;
#   2. `fullband cancel` → the Slurm job is CANCELLED and no process of it is left (Kill returns
#      once Slurm says the job ended);
#   3. kill -9 of rank 1 inside the allocation → a new Slurm job, the job completes;
#   4. a job over its time limit (1 minute) → TIMEOUT is the failure reason;
#   5. the coordinator killed and restarted while the Slurm job runs → no second launch;
#   6. errors that name their cause: a partition Slurm does not have, a job queued past
#      launcher.slurm.pending_timeout_seconds (held by --begin), slurmctld down.
# usage: slurm_e2e_test.sh FULLBAND
set -euo pipefail
[[ $(id -u) == 0 ]] || { echo "SKIP: needs root (Slurm's daemons, network namespaces)"; exit 77; }
fullband=$(realpath "$1")
root=$(cd "$(dirname "$0")/../.." && pwd)
source "$root/tests/e2e_lib.sh"
scratch_dir
steps=320 d_model=128 seq_len=64  # still running after seconds of status polls at 0.04 s a step
source "$root/tests/worker/chaos_lib.sh"
cluster=$dir/slurm
trap '"$root/scripts/slurm_cluster.sh" stop "$cluster" > /dev/null 2>&1 || true; cleanup' EXIT
"$root/scripts/slurm_cluster.sh" start "$cluster" > /dev/null
source "$cluster/env"

listen=127.0.0.1:$(free_port)  # a fixed address: the coordinator restarts on it
# With a tokens file, so that every attempt gets a worker token to keep out of sight.
FULLBAND_TOKEN=$(write_user_token "$dir/tokens.yaml" test)
export FULLBAND_TOKEN
write_coordinator_config "$dir/coordinator.yaml" "slurm_poll_seconds: 1
tokens_file: $dir/tokens.yaml
metrics_listen: 127.0.0.1:0"
start_coordinator "$fullband" "$dir/coordinator.yaml"
read -r -u 3 line || fail "no metrics port"
metrics=127.0.0.1:${line##* }
slurm=", kind: slurm, slurm: {cpus_per_task: 1}"

now() { date +%s.%N; }
# Seconds from now until job $1 has counted its first step.
first_step_after() {
  local start
  start=$(now)
  wait_until "$1" "int(j['ledger'].get('steps', 0)) >= 1" "$1: no first step"
  python3 -c "print(f'{$(now) - $start:.2f}')"
}
# The Slurm job ids of job $1's attempts, from the coordinator's log.
slurm_ids() { grep -o "job $1: launched attempt [0-9]* (slurm [0-9]*)" "$dir/coordinator.err" |
                grep -o "[0-9]*)$" | tr -d ')' | tr '\n' ' '; }
# Slurm's state of Slurm job $1: squeue while it knows the job, else the completion log.
slurm_state() {
  local s
  s=$(squeue --noheader --states=all --jobs="$1" --format=%T 2> /dev/null || true)
  [[ -n $s ]] || s=$(grep -o "^JobId=$1 .*JobState=[A-Z_]*" "$cluster/jobcomp.log" | sed 's/.*=//')
  echo "$s"
}
slurm_state_is() { [[ $(slurm_state "$1") == "$2" ]]; }
# Every process of job $1 (ranks, srun, the batch script): its FULLBAND_JOB_DIR is the job's.
job_processes() {
  grep -lxs "FULLBAND_JOB_DIR=$dir/jobs/$1" --null-data /proc/[0-9]*/environ | cut -d/ -f3 || true
}
no_processes() { [[ -z $(job_processes "$1") ]]; }
gone() { ! kill -0 "$1" 2> /dev/null; }
squeue_calls() {
  curl -s "http://$metrics/metrics" |
    awk '/^fullband_launcher_slurm_commands_total\{command="squeue"\}/ {n = $2} END {print n + 0}'
}

# 1. The reference under the local launcher, then the same job under Slurm.
job clean > "$dir/clean.yaml"
clean=$("$fullband" submit "$dir/clean.yaml")
local_first=$(first_step_after "$clean")
check_reference() {
  wait_until "$clean" "j['state'].endswith('COMPLETED') and int(j.get('committed_step', 0)) == $steps" \
    "the local run"
  reference=$(final_shards clean)
}
check_reference
job slurm-clean "" "$slurm" > "$dir/a.yaml"
calls_before=$(squeue_calls)
started=$(now)
a=$("$fullband" submit "$dir/a.yaml")
slurm_first=$(first_step_after "$a")
# The worker token reached the ranks, and no command line and no file of the job holds it.
rank=$(worker_pids "$a" 0)
token=$(tr '\0' '\n' < "/proc/$rank/environ" | sed -n 's/^FULLBAND_WORKER_TOKEN=//p')
[[ -n $token ]] || fail "slurm-clean: rank 0 has no worker token"
TOKEN=$token python3 - <<'PY' || fail "slurm-clean: the worker token is on a command line"
import glob, os, sys
token = os.environ["TOKEN"].encode()  # from the environment: this process's argv must not hold it
for path in glob.glob("/proc/[0-9]*/cmdline"):
    try:
        if token in open(path, "rb").read():
            sys.exit(f"{path}: {open(path, 'rb').read()!r}")
    except OSError:
        pass
PY
! grep -rqF "$token" "$dir/jobs/$a" || fail "slurm-clean: the token is in a file of $dir/jobs/$a"
check slurm-clean "$a" 0 0
ended=$(now)
calls=$(($(squeue_calls) - calls_before))
script=$dir/jobs/$a/attempt-0.sbatch
[[ -f $script ]] || fail "slurm-clean: no $script"
grep -q "^exec srun --mpi=pmix" "$script" || fail "slurm-clean: $script does not srun"
id=$(slurm_ids "$a")
[[ $(slurm_state "$id") == COMPLETED ]] || fail "slurm-clean: Slurm job $id is $(slurm_state "$id")"
python3 - "$local_first" "$slurm_first" "$calls" "$started" "$ended" <<'PY'
import json, sys
local, slurm, calls, start, end = map(float, sys.argv[1:])
print(json.dumps({"submit_to_first_step_s": {"local": local, "slurm": slurm},
                  "squeue_calls_per_minute_per_job": round(calls / ((end - start) / 60), 1)}))
PY

# 2. Cancel: Slurm's job ends CANCELLED, and no worker is left.
job slurm-cancel "" "$slurm" > "$dir/b.yaml"
b=$("$fullband" submit "$dir/b.yaml")
wait_until "$b" "int(j['ledger'].get('steps', 0)) >= 3" "slurm-cancel: no steps"
id=$(slurm_ids "$b" | awk '{print $NF}')
"$fullband" cancel "$b" --reason "test" > /dev/null
wait_until "$b" "j['state'].endswith('CANCELLED')" "slurm-cancel: not cancelled"
wait_for 20 slurm_state_is "$id" CANCELLED ||
  fail "slurm-cancel: Slurm job $id is $(slurm_state "$id")"
wait_for 60 no_processes "$b" || fail "slurm-cancel: processes left: $(job_processes "$b")"
echo "slurm-cancel: Slurm job $id CANCELLED, no process of it left"

# 3. kill -9 of rank 1: a new Slurm job, then COMPLETED.
job slurm-kill-rank "" "$slurm" > "$dir/c.yaml"
c=$("$fullband" submit "$dir/c.yaml")
wait_until "$c" "int(j['ledger'].get('steps', 0)) >= 10" "slurm-kill-rank: no steps"
pid=$(worker_pids "$c" 1)
[[ -n $pid ]] || fail "slurm-kill-rank: no rank 1"
kill -9 "$pid"
check slurm-kill-rank "$c" 1 0
ids=($(slurm_ids "$c"))
[[ ${#ids[@]} == 2 && ${ids[0]} != "${ids[1]}" ]] || fail "slurm-kill-rank: Slurm jobs ${ids[*]}"
echo "slurm-kill-rank: reason of the restart: $(grep "job $c restarting" "$dir/coordinator.err" | sed 's/.*: //')"

# 5. kill -9 of the coordinator while the Slurm job runs; a new one on the same store.
job slurm-coordinator-kill "" "$slurm" > "$dir/e.yaml"
e=$("$fullband" submit "$dir/e.yaml")
wait_until "$e" "int(j['ledger'].get('steps', 0)) >= 10" "slurm-coordinator-kill: no steps"
stop_coordinator KILL
cp "$dir/coordinator.err" "$dir/coordinator-1.err"
start_coordinator "$fullband" "$dir/coordinator.yaml"
check slurm-coordinator-kill "$e" 0 0
cat "$dir/coordinator-1.err" "$dir/coordinator.err" > "$dir/all.err"
n=$(grep -c "job $e: launched attempt" "$dir/all.err")
[[ $n == 1 ]] || fail "slurm-coordinator-kill: $n launches"
named=$(grep -c "Name=fullband-$e-" "$cluster/jobcomp.log")
[[ $named == 1 ]] || fail "slurm-coordinator-kill: $named Slurm jobs"
echo "slurm-coordinator-kill: one Slurm job, no restart"

# 6. Errors. The failure reason of a job that cannot restart ($1, YAML $2); it must hold $3.
fails_with() {
  max_restarts=0 job "$1" "" ", kind: slurm, $2" > "$dir/$1.yaml"
  local id reason
  id=$("$fullband" submit "$dir/$1.yaml")
  wait_until "$id" "j['state'].endswith('FAILED')" "$1: did not fail"
  reason=$(field "$id" "['reason']")
  [[ $reason == *"$3"* ]] || fail "$1: reason '$reason'"
  echo "$1: $reason"
}
fails_with bad-partition "slurm: {partition: nope}" "Slurm rejected"
fails_with held "slurm: {pending_timeout_seconds: 3, sbatch_args: [--begin=now+3600]}" \
  "(BeginTime)"

# 4. Over the time limit (1 minute; Slurm enforces it within about 30 s more).
steps=100000 max_restarts=0 job slurm-timeout "" ", kind: slurm, slurm: {time_limit: '1'}" > "$dir/d.yaml"
d=$("$fullband" submit "$dir/d.yaml")
wait_for 300 holds "$d" "j['state'] == 'JOB_STATE_FAILED'" || true  # the reason says why not
reason=$(field "$d" "['reason']")
[[ $reason == *TIMEOUT* ]] || fail "slurm-timeout: reason '$reason'"
echo "slurm-timeout: $reason"

# 6. (last: it stops Slurm) slurmctld down: sbatch is retried, then the launch fails.
pid=$(cat "$cluster/run/slurmctld.pid")
kill -TERM "$pid"
wait_for 60 gone "$pid" || fail "slurmctld ($pid) did not stop on SIGTERM"
fails_with slurm-down "slurm: {}" "Slurm did not accept"

stop_coordinator
echo "slurm_e2e_test: ok"

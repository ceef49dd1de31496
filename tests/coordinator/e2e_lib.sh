# Sourced by the end-to-end test scripts: a scratch directory `$dir` removed on exit (with the
# coordinator, if still running), `fail MESSAGE`, `start_coordinator FULLBAND CONFIG`,
# `write_coordinator_config FILE [EXTRA]`, `write_fake_job FILE FAKE_WORKER [ARGS...]` and
# `worker_pids JOB [RANK]`.
dir=$(mktemp -d)
coordinator_pid=
cleanup() {
  [[ -n $coordinator_pid ]] && kill "$coordinator_pid" 2>/dev/null || true
  rm -rf "$dir"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# Runs `FULLBAND coordinator --config CONFIG` (stderr to $dir/coordinator.err) and exports
# FULLBAND_COORDINATOR with the port it prints on its first line, read from a pipe (no
# polling). The coordinator is the child of the process substitution, not of this shell, so
# that subshell writes "exit N" on the same pipe (fd 3) when it ends.
start_coordinator() {
  exec 3< <("$1" coordinator --config "$2" 2> "$dir/coordinator.err" &
            echo "pid $!"; wait $!; echo "exit $?")
  read -r -u 3 _ coordinator_pid
  local line
  read -r -u 3 line || fail "coordinator did not start: $(cat "$dir/coordinator.err")"
  export FULLBAND_COORDINATOR=127.0.0.1:${line##* }
}

# Writes a coordinator.yaml for a local test to $1: loopback on a free port (or on $listen when
# set), its store and job directories under $dir, fast ticks and heartbeats; lines of $2 are
# appended.
write_coordinator_config() {
  cat > "$1" <<YAML
listen: ${listen:-127.0.0.1:0}
store_dir: $dir/store
jobs_dir: $dir/jobs
tick_seconds: 0.05
heartbeat_interval_seconds: 0.5
${2:-}
YAML
}

# The pids of the `fullband worker` ranks (not mpirun or srun) of job $1 that this test's coordinator launched (their
# FULLBAND_JOB_DIR is under $dir, so tests running side by side never see each other's), or of
# its rank $2 only (OMPI_COMM_WORLD_RANK under mpirun, SLURM_PROCID under srun).
worker_pids() {
  local p env
  for p in $(pgrep -f "fullband worker" || true); do
    [[ $(cat "/proc/$p/comm" 2> /dev/null) == fullband ]] || continue  # not mpirun or srun
    env=$(tr '\0' '\n' 2> /dev/null < "/proc/$p/environ" || true)
    grep -qx "FULLBAND_JOB_DIR=$dir/jobs/$1" <<< "$env" || continue
    [[ -z ${2:-} ]] || grep -qxE "(OMPI_COMM_WORLD_RANK|SLURM_PROCID)=$2" <<< "$env" || continue
    echo "$p"
  done
}

# Writes to $1 a job of fake_worker ($2, run with the arguments after it) with a budget of 5120
# token-equivalents: 128 tokens a step, 20 one-pass steps, then 10 two-pass steps.
write_fake_job() {
  local file=$1 args=""
  shift
  for a in "$@"; do args+="${args:+, }\"$a\""; done
  cat > "$file" <<YAML
model: {vocab_size: 512, eod_id: 0, d_model: 64, n_layers: 2, n_heads: 4, n_kv_heads: 2, head_dim: 16, ffn_dim: 128}
data: {batch_size: 4, seq_len: 32}
schedule:
  phases: [{until: 0.5, mix: {1: 1.0}}, {until: 1.0, mix: {2: 1.0}}]
budget: {kind: token_equivalents, amount: 5120}
launcher:
  command: [$args]
YAML
}

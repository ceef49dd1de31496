# The facts the shell tests share, each defined once. Sourcing defines functions and nothing
# else (scripts under scripts/ source it too); a test calls `scratch_dir` first.
#   scratch_dir                      sets $dir, a directory removed on exit (`cleanup`, which
#                                    also stops a coordinator still running); `fail MESSAGE`
#   tiny_model [KEY=VALUE...]        the `model:` line of the tiny model every test trains
#   write_token_ids FILE SEED ONE_IN random byte-vocabulary token ids for data.path
#   write_user_token FILE USER       a coordinator tokens_file with one new user token
#   free_port [N]                    N (default 1) distinct TCP ports free on every address
#   wait_for SECONDS COMMAND...      polls COMMAND until it succeeds (else returns 1)
#   start_coordinator FULLBAND CONFIG · stop_coordinator [SIGNAL] · write_coordinator_config
#   FILE [EXTRA] · write_fake_job FILE FAKE_WORKER [ARGS...] · worker_pids JOB [RANK]

scratch_dir() {
  dir=$(mktemp -d)
  coordinator_pid=
  trap cleanup EXIT
}
cleanup() {
  [[ -n ${coordinator_pid:-} ]] && kill "$coordinator_pid" 2>/dev/null || true
  rm -rf "$dir"
}
fail() { echo "FAIL: ${0##*/}: $*" >&2; exit 1; }

# Prints the `model:` line of the tiny model: 2 layers, 4 query heads in 2 KV groups of
# head_dim d_model / 4, FFN width 2 d_model, a 258-id vocabulary (bytes, EOD 256, one spare),
# attention windowed (window 8) on every other layer, max_seq_len 32. KEY=VALUE arguments set
# model fields (docs/MODEL.md names); head_dim and ffn_dim follow d_model unless set.
tiny_model() {
  local -A fields=([vocab_size]=258 [eod_id]=256 [d_model]=32 [n_layers]=2 [n_heads]=4
                   [n_kv_heads]=2 [max_seq_len]=32 [window]=8 [full_attention_every]=2)
  local kv key line=
  for kv in "$@"; do fields[${kv%%=*}]=${kv#*=}; done
  : "${fields[head_dim]:=$((fields[d_model] / 4))}" "${fields[ffn_dim]:=$((2 * fields[d_model]))}"
  for key in vocab_size eod_id d_model n_layers n_heads n_kv_heads head_dim ffn_dim max_seq_len \
             window full_attention_every; do
    line+="${line:+, }$key: ${fields[$key]}"
    unset "fields[$key]"
  done
  for key in "${!fields[@]}"; do line+=", $key: ${fields[$key]}"; done  # any other field set
  echo "model: {$line}"
}

# Writes 65536 token ids (little-endian uint32) to FILE: EOD (256) with probability 1/ONE_IN,
# else a byte drawn uniformly, from Python's random.Random(SEED).
write_token_ids() {
  python3 - "$@" <<'PY'
import random, struct, sys
path, seed, one_in = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rng = random.Random(seed)
ids = [256 if rng.randrange(one_in) == 0 else rng.randrange(256) for _ in range(1 << 16)]
open(path, "wb").write(struct.pack("<%dI" % len(ids), *ids))
PY
}

# Writes a coordinator tokens_file (docs/COORDINATOR.md) to FILE, readable by its owner only,
# holding one new random token of role user for USER; prints the token.
write_user_token() {
  local token
  token=$(openssl rand -hex 32)
  (umask 077 && printf 'version: 1\ntokens:\n  - {token: %s, role: user, user: %s}\n' \
    "$token" "$2" > "$1")
  echo "$token"
}

# Prints N (default 1) distinct TCP ports, one a line, that were free on all addresses a moment
# ago (the sockets are held until all are bound, so no two are the same).
free_port() {
  python3 - "${1:-1}" <<'PY'
import socket, sys
socks = [socket.socket() for _ in range(int(sys.argv[1]))]
for s in socks:
    s.bind(("", 0))
print("\n".join(str(s.getsockname()[1]) for s in socks))
PY
}

# Runs COMMAND (with its arguments) every 0.1 s until it exits 0, for at most SECONDS; returns
# 1 if it never did. Callers say what they waited for: `wait_for 60 cmd args || fail "..."`.
wait_for() {
  local deadline=$((SECONDS + $1))
  shift
  until "$@"; do
    ((SECONDS < deadline)) || return 1
    sleep 0.1
  done
}

# Runs `FULLBAND coordinator --config CONFIG` (stderr to $dir/coordinator.err) and exports
# FULLBAND_COORDINATOR with the port it prints on its first line, read from a pipe (no
# polling). The coordinator is the child of the process substitution, not of this shell, so
# that subshell writes "exit N" on the same pipe (fd 3) when it ends. Later lines the
# coordinator prints (the /metrics port) are read from fd 3 by the caller.
start_coordinator() {
  exec 3< <("$1" coordinator --config "$2" 2> "$dir/coordinator.err" &
            echo "pid $!"; wait $!; echo "exit $?")
  read -r -u 3 _ coordinator_pid
  local line
  read -r -u 3 line || fail "coordinator did not start: $(cat "$dir/coordinator.err")"
  export FULLBAND_COORDINATOR=127.0.0.1:${line##* }
}

# Sends SIGNAL (default TERM) to the coordinator and waits until it has exited; sets
# $coordinator_rc to its exit status.
stop_coordinator() {
  local word rest
  kill "-${1:-TERM}" "$coordinator_pid"
  coordinator_pid=
  coordinator_rc=
  while read -r -u 3 word rest; do
    [[ $word == exit ]] && coordinator_rc=$rest && break
  done
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

# The pids of the `fullband worker` ranks (not mpirun or srun) of job $1 that this test's
# coordinator launched (their FULLBAND_JOB_DIR is under $dir, so tests running side by side
# never see each other's), or of its rank $2 only (OMPI_COMM_WORLD_RANK under mpirun,
# SLURM_PROCID under srun).
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
# token-equivalents: 128 tokens a step, 20 one-pass steps, then 10 two-pass steps. The model
# (the tiny one at d_model 64) is only validated: fake_worker trains nothing.
write_fake_job() {
  local file=$1 args="" a
  shift
  for a in "$@"; do args+="${args:+, }\"$a\""; done
  cat > "$file" <<YAML
$(tiny_model d_model=64)
data: {batch_size: 4, seq_len: 32}
schedule:
  phases: [{until: 0.5, mix: {1: 1.0}}, {until: 1.0, mix: {2: 1.0}}]
budget: {kind: token_equivalents, amount: 5120}
launcher:
  command: [$args]
YAML
}

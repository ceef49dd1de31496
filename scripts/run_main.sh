#!/usr/bin/env bash
# The main-job command of the README: installs dependencies, builds, Phi-4-tokenizes real text
# into two token stores (the Brown corpus; the Linux kernel's reStructuredText documentation),
# then runs the small latent-feedback model of scripts/demo/train.yaml as a coordinator job:
#   - starts a local coordinator in build/demo/run: TLS certificates, a user token, its RocksDB
#     store, /metrics (docs/COORDINATOR.md);
#   - submits the job as that user (scripts/demo/make_job.py: DP2 over the two cores, a budget of
#     360,448 token-equivalents, the 75/22/3 pass mix in the second half, a checkpoint every 25
#     steps) and follows it with `fullband watch`;
#   - midway, kills worker rank 1 with SIGKILL, once, as a deliberate fault: the coordinator
#     restarts the job from its last checkpoint by itself;
#   - ends with the job's ledger (tokens, token-equivalents, FLOPs, wasted compute, restarts),
#     the first and last loss of each pass count from the job's history, and a plot of the
#     losses (build/demo/run/loss.png), and stops the coordinator.
# Re-running skips what is already ingested; the run directory is made afresh.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
scripts/setup.sh
FULLBAND_TARGETS="fullband" scripts/build.sh
fullband=$root/build/cli/fullband
$fullband backends
python3 scripts/demo/make_corpus.py build/demo/corpus
for name in brown linux-doc; do
  $fullband ingest --input "build/demo/corpus/$name.jsonl" --out "build/demo/$name.store" --seq-len 256
done
$fullband data info build/demo/linux-doc.store

# ---- The coordinator, in a run directory of its own.
run=$root/build/demo/run
rm -rf "$run"
mkdir -p "$run"
chmod 700 "$run"
scripts/gen_certs.sh --dir "$run/tls" > /dev/null
source tests/e2e_lib.sh  # write_user_token
token=$(write_user_token "$run/tokens.yaml" demo)
cat > "$run/coordinator.yaml" <<YAML
listen: 127.0.0.1:0
store_dir: $run/store
jobs_dir: $run/jobs
tls_cert: $run/tls/server.crt
tls_key: $run/tls/server.key
worker_tls_ca: $run/tls/ca.crt
tokens_file: $run/tokens.yaml
metrics_listen: 127.0.0.1:0
heartbeat_interval_seconds: 2
heartbeat_timeout_seconds: 30
tick_seconds: 0.2
YAML
# Its first line names the gRPC port, its second the /metrics port.
coproc COORDINATOR { exec "$fullband" coordinator --config "$run/coordinator.yaml" 2> "$run/coordinator.log"; }
coordinator_pid=$COORDINATOR_PID
trap 'kill "$coordinator_pid" 2> /dev/null || true' EXIT
read -r -u "${COORDINATOR[0]}" grpc_line || { cat "$run/coordinator.log"; exit 1; }
read -r -u "${COORDINATOR[0]}" metrics_line || { cat "$run/coordinator.log"; exit 1; }
export FULLBAND_COORDINATOR=127.0.0.1:${grpc_line##* } FULLBAND_TOKEN=$token
export FULLBAND_TLS_CA=$run/tls/ca.crt
echo "coordinator on $FULLBAND_COORDINATOR (TLS, token auth); metrics: http://127.0.0.1:${metrics_line##* }/metrics"

# ---- The job.
python3 scripts/demo/make_job.py scripts/demo/train.yaml "$run/job.yaml" \
  --fullband "$fullband" --root "$root"
job=$($fullband submit "$run/job.yaml")
echo "submitted $job ($run/job.yaml); its logs: $run/jobs/$job/"

# The deliberate fault, in the background: once the job has counted 85 of its about 155 steps
# (its checkpoint of step 75 is committed by then), SIGKILL to worker rank 1.
(
  while sleep 2; do
    # "<state> <counted steps>", or nothing when the coordinator did not answer (asked again)
    now=$($fullband status "$job" --json 2> /dev/null | python3 -c '
import json, sys
j = json.load(sys.stdin)
print(j["state"], j["ledger"].get("steps", 0))' 2> /dev/null) || continue
    [[ $now == JOB_STATE_RUNNING* ]] || [[ $now == JOB_STATE_LAUNCHING* ]] || exit 0
    steps=${now##* }
    ((steps >= 85)) && break
  done
  for p in $(pgrep -f "$fullband worker" || true); do
    env=$(tr '\0' '\n' < "/proc/$p/environ" 2> /dev/null || true)
    if grep -qx "FULLBAND_JOB_DIR=$run/jobs/$job" <<< "$env" &&
      grep -qx "OMPI_COMM_WORLD_RANK=1" <<< "$env"; then
      echo ">>> deliberate fault: kill -9 of worker rank 1 (pid $p) after step $steps;" \
        "the coordinator restarts $job from its last checkpoint"
      kill -9 "$p"
      exit 0
    fi
  done
) &
fault_pid=$!

$fullband watch "$job" || true
wait "$fault_pid" || true

# ---- The summary: the ledger, the first and last loss of each pass count (from the job's
# history in the coordinator), and a plot of them.
$fullband status "$job"
$fullband status "$job" --history --json | python3 -c '
import json, sys
steps = json.load(sys.stdin).get("steps", [])
restarts = sum(1 for a, b in zip(steps, steps[1:]) if a.get("attempt") != b.get("attempt"))
print(f"history: {len(steps)} counted steps, {restarts} restart(s) among them")
print("loss of each pass count (the pass-k loss of the steps that ran k or more passes):")
for k in (1, 2, 3):
    runs = [(int(s.get("step", 0)), s["losses"][k - 1]) for s in steps if int(s["passes"]) >= k]
    if runs:
        print(f"  pass {k}: {runs[0][1]:.3f} at step {runs[0][0]} -> {runs[-1][1]:.3f} at step "
              f"{runs[-1][0]} ({len(runs)} steps)")'
$fullband plot "$job" --out "$run/loss.png"
# The coordinator's own cost: its CPU time (user + system, /proc) against the job's wall time.
python3 - "$coordinator_pid" "$($fullband status "$job" --json)" <<'PY'
import json, os, sys
fields = open(f"/proc/{sys.argv[1]}/stat").read().rsplit(")", 1)[1].split()
cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
wall = json.loads(sys.argv[2])["ledger"]["wall_seconds"]
print(f"coordinator: {cpu:.2f} s of CPU over the job's {wall:.0f} s ({100 * cpu / wall:.2f}% of one core)")
PY
kill -TERM "$coordinator_pid"
wait "$coordinator_pid" 2> /dev/null || true
trap - EXIT
echo "coordinator stopped; its store and the job's checkpoints stay in $run"

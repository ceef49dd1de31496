# Sourced by the fault tests of coordinated jobs (checkpoint_e2e_test.sh, fault_e2e_test.sh,
# slurm_e2e_test.sh, multinode_e2e_test.sh), after tests/e2e_lib.sh and scratch_dir, with
# `fullband` set: a token file, the job they all run (a DP2 + ZeRO-1 job of the tiny model, of
# `steps` steps, default 20, checkpointing every 4; `d_model` (32) and `seq_len` (24) set how
# long a step takes), its uninterrupted run as the reference, and `check`, which holds a
# faulted job to that reference.
#   job NAME [WORKER_ARGS] [LAUNCHER_EXTRA]   prints the job's YAML (checkpoints in $dir/ckpt-NAME,
#                                              tokens from $data, default $dir/tokens.bin;
#                                              restarts after $backoff s, default 2)
#   json JOB · field JOB PYEXPR · holds JOB PYCOND · wait_until JOB PYCOND WHAT (240 s)
#   final_shards NAME
#   run_reference                              runs the clean job; sets $reference
#   check NAME JOB [RESTARTS] [MIN_WASTED]     COMPLETED, exact ledger, bitwise final state
steps=${steps:-20}
d_model=${d_model:-32}
seq_len=${seq_len:-24}

write_token_ids "$dir/tokens.bin" 11 50

job() {
  cat <<YAML
$(tiny_model d_model="$d_model" max_seq_len=$((seq_len + 8)))
parallel: {dp: 2, zero1: true}
data: {path: ${data:-$dir/tokens.bin}, batch_size: 8, seq_len: $seq_len}
optim: {lr: 3.0e-3, warmup_steps: 2}
schedule: {seed: 4, phases: [{until: 1.0, mix: {1: 0.5, 2: 0.3, 3: 0.2}}]}
checkpoint: {dir: $dir/ckpt-$1, every_steps: 4, keep: 3}
budget: {kind: tokens, amount: $((steps * 8 * seq_len))}
runtime: {threads: 1, log_every: 1, peak_gflops: 1}
launcher: {command: [$fullband, worker], extra_args: [${2:-}], max_restarts: ${max_restarts:-2}, backoff_seconds: ${backoff:-2}${3:-}}
YAML
}
json() { "$fullband" status "$1" --json; }
field() { json "$1" | python3 -c "import json,sys; print(json.load(sys.stdin)$2)"; }
# True if PYCOND holds of job JOB's status as JSON (`j`).
holds() {
  json "$1" | python3 -c "import json,sys; j=json.load(sys.stdin); sys.exit(0 if ($2) else 1)" \
    2> /dev/null
}
wait_until() { wait_for 240 holds "$1" "$2" || fail "$3: $(json "$1")"; }
final_shards() { sha256sum "$dir/ckpt-$1/step-$steps"/*.safetensors | awk '{print $1}'; }

run_reference() {
  job clean > "$dir/clean.yaml"
  local out clean
  out=$(timeout 300 "$fullband" submit "$dir/clean.yaml" --wait) || fail "clean: $out"
  clean=$(head -1 <<< "$out")
  grep -q COMPLETED <<< "$out" || fail "clean: $out $(cat "$dir/jobs/$clean/attempt-0.err")"
  wait_until "$clean" "int(j.get('committed_step', 0)) == $steps" "the clean job's final checkpoint"
  reference=$(final_shards clean)
  [[ $(wc -l <<< "$reference") == 2 ]] || fail "the clean run has no two final shards"
}

check() {
  wait_until "$2" "j['state'].endswith('COMPLETED') and int(j.get('committed_step', 0)) == $steps" \
    "$1 did not complete with its final checkpoint"
  python3 - "$(json "$2")" "$1" "$steps" "$seq_len" "${3:-1}" "${4:-1}" <<'PY'
import json, sys
j, name = json.loads(sys.argv[1]), sys.argv[2]
steps, seq_len, restarts, min_wasted = map(int, sys.argv[3:])
l = j["ledger"]
assert int(l["steps"]) == steps and int(l["tokens"]) == steps * 8 * seq_len, (name, l)
wasted = int(l.get("wasted_steps", 0))
assert wasted >= min_wasted, (name, l)
assert int(j.get("restarts", 0)) == restarts, (name, j.get("restarts"))
print(f"{name}: COMPLETED, {steps} steps, {l['tokens']} tokens, {wasted} steps wasted, "
      f"{restarts} restart(s)")
PY
  [[ $(final_shards "$1") == "$reference" ]] || fail "$1: final shards differ from the clean run's"
  "$fullband" ckpt verify "$dir/ckpt-$1/step-$steps" > /dev/null || fail "$1: final checkpoint"
  echo "$1: final parameters and moments bitwise equal to the uninterrupted run"
}

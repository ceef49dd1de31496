#!/usr/bin/env bash
# The coordinator's commands end to end: `fullband coordinator` on a free loopback port, then
# the /metrics port it printed, submit --wait (a job of fake_worker runs to completion), status
# [--json], its history and plot, a bad job file,
# an unknown job, cancel, and a clean stop on SIGTERM.
# Usage: cli_e2e_test.sh FULLBAND FAKE_WORKER
set -euo pipefail
fullband=$1
fake_worker=$2
source "$(dirname "$0")/../e2e_lib.sh"
scratch_dir

write_coordinator_config "$dir/coordinator.yaml" "direct_single_process: true
metrics_listen: 127.0.0.1:0"
write_fake_job "$dir/job.yaml" "$fake_worker" --step-ms 1 --checkpoint-every 5 --ckpt-dir "$dir/ckpt"
printf 'parallel:\n  tp: 3\n' > "$dir/bad.yaml"

start_coordinator "$fullband" "$dir/coordinator.yaml"
# The /metrics port it picked is on the second line.
read -r -u 3 line || fail "no second line from the coordinator"
[[ $line == "fullband coordinator: /metrics on port "* ]] || fail "second line: $line"
metrics_port=${line##* }
python3 -c "import sys, urllib.request as u; sys.stdout.write(u.urlopen(sys.argv[1]).read().decode())" \
  "http://127.0.0.1:$metrics_port/metrics" | grep -q '^# TYPE fullband_job_tokens' ||
  fail "no metrics on the printed port $metrics_port"

out=$("$fullband" submit "$dir/job.yaml" --wait) || fail "submit --wait: $out"
job=$(head -1 <<< "$out")
[[ $job == job-000001 ]] || fail "job id '$job'"
tail -1 <<< "$out" | grep -q "COMPLETED" || fail "last line: $(tail -1 <<< "$out")"

json=$("$fullband" status "$job" --json)
grep -q '"state":"JOB_STATE_COMPLETED"' <<< "$json" || fail "status --json: $json"
# 5120 token-equivalents, two passes from half of them: 20 one-pass steps (2560), then 10
# two-pass steps (2560).
grep -q '"steps":"30"' <<< "$json" || fail "ledger steps: $json"
text=$("$fullband" status "$job")
grep -q "passes: 20×1 10×2" <<< "$text" || fail "pass histogram: $text"

# The history: every counted step, a line each (and a header), or as JSON; then the plot.
history=$("$fullband" status "$job" --history)
[[ $(wc -l <<< "$history") == 31 ]] || fail "status --history: $history"
# Step 29, the last, is a two-pass step: fake_worker reports 10 / (1 + step) + 0.1 k.
tail -1 <<< "$history" | grep -Eq '^ +29 +0 +2 +128 .* 0\.3333 0\.4333$' ||
  fail "last history line: $(tail -1 <<< "$history")"
json=$("$fullband" status "$job" --history --json)
[[ $(grep -o '"passes":' <<< "$json" | wc -l) == 30 ]] || fail "status --history --json: $json"
"$fullband" plot "$job" --out "$dir/loss.png" | grep -q "30 steps plotted" || fail "plot"
[[ $(head -c 8 "$dir/loss.png" | od -An -tx1 | tr -d ' ') == 89504e470d0a1a0a ]] ||
  fail "plot: not a PNG"
(($(stat -c %s "$dir/loss.png") > 5000)) || fail "plot: $(stat -c %s "$dir/loss.png") bytes"
set +e
"$fullband" plot "$job" --out "$dir/no/such/dir/loss.png" 2> "$dir/plot.err"; rc=$?
set -e
[[ $rc == 1 ]] || fail "plot into a missing directory: exit code $rc"
grep -q "gnuplot failed writing $dir/no/such/dir/loss.png (exit code 1)" "$dir/plot.err" ||
  fail "plot into a missing directory: $(cat "$dir/plot.err")"

set +e
"$fullband" submit "$dir/bad.yaml" 2> "$dir/bad.err"; rc=$?
set -e
[[ $rc == 2 ]] || fail "bad job exit code $rc"
grep -q "parallel.tp: 3 does not divide model.n_heads" "$dir/bad.err" || fail "$(cat "$dir/bad.err")"

set +e
"$fullband" status job-999999 2> "$dir/missing.err"; rc=$?
set -e
[[ $rc == 1 ]] || fail "unknown job exit code $rc"
grep -q NOT_FOUND "$dir/missing.err" || fail "$(cat "$dir/missing.err")"

second=$("$fullband" submit "$dir/job.yaml" --name second)
"$fullband" cancel "$second" --reason "not needed" | grep -q "CANCELLED" || fail "cancel"
"$fullband" status --all | grep -c "^job-" | grep -q '^2$' || fail "status --all"

stop_coordinator TERM
[[ $coordinator_rc == 0 ]] || fail "coordinator exit status '$coordinator_rc' after SIGTERM"
grep -q "stopping" "$dir/coordinator.err" || fail "no clean stop: $(cat "$dir/coordinator.err")"
echo "cli_e2e_test: ok"

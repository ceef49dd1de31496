#!/usr/bin/env bash
# Live monitoring with a real Prometheus (Debian's `prometheus`): it scrapes the coordinator's
# /metrics every second while a job of fake_worker runs; afterwards PromQL gives the job's
# token-equivalents, steps and pass histogram exactly as the ledger (`fullband status --json`)
# has them, and shows values from before the end (it watched the job run, not just its end).
# Usage: prometheus_e2e_test.sh FULLBAND FAKE_WORKER
set -euo pipefail
fullband=$1
fake_worker=$2
source "$(dirname "$0")/../e2e_lib.sh"
scratch_dir
command -v prometheus > /dev/null || fail "prometheus is not installed (Debian: prometheus)"

write_coordinator_config "$dir/coordinator.yaml" "direct_single_process: true
metrics_listen: 127.0.0.1:0"
# 30 steps of 200 ms: 20 one-pass, then 10 two-pass (5120 token-equivalents).
write_fake_job "$dir/job.yaml" "$fake_worker" --step-ms 200
start_coordinator "$fullband" "$dir/coordinator.yaml"
read -r -u 3 line || fail "no second line from the coordinator"
metrics_port=${line##* }

# Prometheus on a free loopback port, scraping every second; stopped (by pid) on exit.
prom_port=$(free_port)
cat > "$dir/prometheus.yml" <<YAML
global: {scrape_interval: 1s, evaluation_interval: 1s}
scrape_configs:
  - job_name: fullband
    static_configs: [{targets: ["127.0.0.1:$metrics_port"]}]
YAML
prometheus --config.file="$dir/prometheus.yml" --storage.tsdb.path="$dir/tsdb" \
  --web.listen-address="127.0.0.1:$prom_port" > "$dir/prometheus.log" 2>&1 &
prom_pid=$!
trap 'kill "$prom_pid" 2> /dev/null || true; wait "$prom_pid" 2> /dev/null || true; cleanup' EXIT

# `query PROMQL`: the value of an instant query's single sample, or nothing while it has none.
query() {
  python3 - "http://127.0.0.1:$prom_port/api/v1/query" "$1" <<'PY'
import json, sys, urllib.parse, urllib.request
url = sys.argv[1] + "?" + urllib.parse.urlencode({"query": sys.argv[2]})
try:
    result = json.load(urllib.request.urlopen(url, timeout=5))["data"]["result"]
except OSError:
    sys.exit(0)  # not answering yet
if len(result) == 1:
    print(result[0]["value"][1])
PY
}
# `answers PROMQL VALUE`: true once the query answers VALUE; fails if Prometheus has exited.
answers() {
  [[ $(query "$1") == "$2" ]] && return 0
  kill -0 "$prom_pid" 2> /dev/null || fail "prometheus exited: $(tail -5 "$dir/prometheus.log")"
  return 1
}
# `query_is PROMQL VALUE`: waits (60 s at most) until the query answers VALUE.
query_is() {
  wait_for 60 answers "$1" "$2" || fail "PromQL '$1' = '$(query "$1")' after 60 s, expected '$2'"
}

query_is 'up{job="fullband"}' 1  # Prometheus runs and reaches /metrics
job=$("$fullband" submit "$dir/job.yaml")
"$fullband" watch "$job" > /dev/null || fail "job $job did not complete"
json=$("$fullband" status "$job" --json)
ledger() { python3 -c "import json, sys; print(json.loads(sys.argv[1])['ledger'][sys.argv[2]])" "$json" "$1"; }
te=$(ledger token_equivalents)
[[ $te == 5120 ]] || fail "ledger token-equivalents $te"
sel="job_id=\"$job\""
query_is "fullband_job_token_equivalents{$sel}" "$te"
query_is "fullband_job_steps{$sel}" "$(ledger steps)"
query_is "fullband_job_tokens{$sel}" "$(ledger tokens)"
query_is "fullband_job_pass_steps{$sel,passes=\"2\"}" 10
query_is "fullband_job_state{$sel,state=\"COMPLETED\"}" 1
# It watched the job run: some scrape saw it part-way.
seen=$(query "min_over_time(fullband_job_token_equivalents{$sel}[5m]) < $te")
[[ -n $seen ]] || fail "Prometheus saw no value of the running job below the final $te"
echo "prometheus_e2e_test: ok (PromQL token-equivalents $te = the ledger's; saw $seen part-way)"

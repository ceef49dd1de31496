#!/usr/bin/env bash
# A submitted job is trained by `fullband worker` groups (docs/PARALLEL.md): a local coordinator
# launches `mpirun -np 2 fullband worker` for a DP2 job and for a TP2 job, and `fullband worker`
# alone for a one-rank job, on the same data (bytes of /usr/share/common-licenses as token ids, a
# 60/30/10 pass mix). All must COMPLETE with a ledger of exactly steps × batch × seq_len tokens
# and Σ tokens × passes token-equivalents, the pass histogram of the schedule, the same losses
# (DP2 and TP2 against one rank, 1e-5 relative), and a loss that falls for each pass count with
# enough steps to tell (pass 1 and pass 2). Then a DP2 job whose rank 1 is killed
# with SIGKILL mid-run must end FAILED (no restarts allowed) with the worker group's exit as the
# reason, within 10 s, with no rank left.
# usage: worker_e2e_test.sh FULLBAND
set -euo pipefail
fullband=$(realpath "$1")
source "$(dirname "$0")/../e2e_lib.sh"
scratch_dir

python3 - "$dir/tokens.bin" <<'PY'
import os, struct, sys
ids = []
root = "/usr/share/common-licenses"
for name in sorted(os.listdir(root)):
    path = os.path.join(root, name)
    if os.path.isfile(path):
        ids += list(open(path, "rb").read()) + [256]
open(sys.argv[1], "wb").write(struct.pack("<%dI" % len(ids), *ids))
PY

write_coordinator_config "$dir/coordinator.yaml"
job() {  # $1 = dp, $2 = budget in token-equivalents (default 40960), $3 = tp (default 1)
  cat <<YAML
$(tiny_model d_model=64 max_seq_len=64 window=16)
parallel: {tp: ${3:-1}, dp: $1}
data: {path: $dir/tokens.bin, batch_size: 8, seq_len: 64}
optim: {lr: 3.0e-3, warmup_steps: 5}
schedule: {seed: 2, phases: [{until: 1.0, mix: {1: 0.6, 2: 0.3, 3: 0.1}}]}
budget: {kind: token_equivalents, amount: ${2:-40960}}
runtime: {threads: 1, log_every: 1, peak_gflops: 1}
launcher: {command: [$fullband, worker], max_restarts: 0}
YAML
}
job 2 > "$dir/DP2.yaml"
job 1 40960 2 > "$dir/TP2.yaml"
job 1 > "$dir/one.yaml"

start_coordinator "$fullband" "$dir/coordinator.yaml"

for layout in DP2 TP2 one; do
  out=$(timeout 300 "$fullband" submit "$dir/$layout.yaml" --wait) ||
    fail "$layout: $out $(cat "$dir"/jobs/*/attempt-0.err 2>/dev/null)"
  job=$(head -1 <<< "$out")
  tail -1 <<< "$out" | grep -q "COMPLETED" ||
    fail "$layout: $(tail -1 <<< "$out") $(cat "$dir/jobs/$job/attempt-0.err")"
  "$fullband" status "$job" --json > "$dir/$layout.json"
  cp "$dir/jobs/$job/attempt-0.out" "$dir/$layout.log"
done

python3 - "$dir" <<'PY'
import json, re, sys
d = sys.argv[1]
def ledger(layout):
    return json.load(open(f"{d}/{layout}.json"))["ledger"]
def steps(layout):
    out = {}
    for line in open(f"{d}/{layout}.log"):
        m = re.match(r"step +(\d+)/\d+ +K=(\d+) +loss \S+ \[([^\]]*)\]", line)
        if m:
            out[int(m[1])] = (int(m[2]), [float(x) for x in m[3].split()])
    return out
for dp in ("DP2", "TP2", "one"):
    l = ledger(dp)
    n, tokens, te = int(l["steps"]), int(l["tokens"]), int(l["token_equivalents"])
    hist = {int(k): int(v) for k, v in l["pass_histogram"].items()}
    assert tokens == n * 8 * 64, (dp, tokens, n)
    assert te == sum(k * v for k, v in hist.items()) * 8 * 64, (dp, te, hist)
    assert 40960 - 3 * 512 < te <= 40960, (dp, te)  # the next step would overrun the budget
    s = steps(dp)
    assert len(s) == n, (dp, len(s), n)
    assert hist == {k: sum(1 for v in s.values() if v[0] == k) for k in hist}, (dp, hist)
    falls = []
    for k in (1, 2, 3):  # pass k's loss over the steps that ran it: first three against last three
        runs = [s[i][1][k - 1] for i in sorted(s) if s[i][0] >= k]
        if len(runs) < 6:
            continue  # too few steps of this pass count to say (the 10% of K = 3)
        first, last = sum(runs[:3]) / 3, sum(runs[-3:]) / 3
        assert last < first - 0.5, (dp, k, first, last)
        falls.append(f"pass-{k} loss {first:.3f} -> {last:.3f}")
    assert len(falls) >= 2, (dp, falls)
    print(f"{dp}: {n} steps, {tokens} tokens, {te} token-equivalents, passes {hist}, "
          + ", ".join(falls))
b = steps("one")
for layout in ("DP2", "TP2"):
    a = steps(layout)
    assert a.keys() == b.keys(), (layout, len(a), len(b))
    for i in a:
        assert a[i][0] == b[i][0]
        for x, y in zip(a[i][1], b[i][1]):
            assert abs(x - y) <= 1e-5 * abs(y), (layout, i, x, y)
print("DP2 and TP2 agree with one rank on every pass of every step")
PY

# A rank killed mid-run.
job 2 100000000 > "$dir/long.yaml"
job=$("$fullband" submit "$dir/long.yaml")
counted() {  # true once job $1 has counted a step
  "$fullband" status "$1" --json |
    python3 -c 'import json, sys; sys.exit(int(json.load(sys.stdin)["ledger"].get("steps", 0)) < 1)'
}
wait_for 60 counted "$job" || true  # the search for rank 1 below says what went wrong
victim=$(worker_pids "$job" 1 | head -1)
[[ -n $victim ]] || fail "rank 1 of $job not found: $("$fullband" status "$job")"
start=$(date +%s%N)
kill -9 "$victim"
timeout 30 "$fullband" watch "$job" > /dev/null || true  # ends at the terminal state
took_ms=$((($(date +%s%N) - start) / 1000000))
status=$("$fullband" status "$job")
grep -q FAILED <<< "$status" || fail "after the kill: $status"
grep -q "worker group ended" <<< "$status" || fail "reason: $status"
((took_ms < 10000)) || fail "FAILED only ${took_ms} ms after the kill"
[[ -z $(worker_pids "$job") ]] || fail "worker ranks left running"
echo "killed rank 1: ${took_ms} ms later $(head -1 <<< "$status")"

stop_coordinator
echo "worker_e2e_test: ok"

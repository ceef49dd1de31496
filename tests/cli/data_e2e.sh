#!/usr/bin/env bash
# End to end through the fullband binary: ingest JSONL from stdin and a directory of text, read
# the store back with `data info --json` and `data verify`, re-ingest (nothing added), refuse a
# malformed line naming file:line, and train a few steps from the store.
#   data_e2e.sh FULLBAND
set -euo pipefail
fullband=$1
source "$(dirname "$0")/../e2e_lib.sh"
scratch_dir

mkdir -p "$dir/docs/sub"
cp /usr/share/common-licenses/GPL-3 "$dir/docs/gpl3.txt"
cp /usr/share/common-licenses/Apache-2.0 "$dir/docs/sub/apache.txt"
python3 - "$dir/web.jsonl" <<'PY'
import json, sys
with open(sys.argv[1], "w") as f:
    for i in range(300):
        f.write(json.dumps({"text": f"Document {i}: the quick brown fox jumps over {i} lazy dogs.\n"}) + "\n")
PY

"$fullband" ingest --input - --format jsonl --out "$dir/store" --seq-len 64 --json \
  <"$dir/web.jsonl" >"$dir/ingest1.json"
"$fullband" ingest --input "$dir/docs" --out "$dir/store" --seq-len 64 --json >"$dir/ingest2.json"
python3 - "$dir/ingest1.json" "$dir/ingest2.json" <<'PY' || fail "ingest summaries"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:])
assert a["sources_added"] == 1 and a["documents"] == 300, a
assert b["sources_added"] == 2 and b["documents"] == 2, b
assert b["sequences"] == (a["tokens"] + b["tokens"]) // 65, (a, b)
PY

"$fullband" data info "$dir/store" --json >"$dir/info.json"
python3 - "$dir/info.json" <<'PY' || fail "data info"
import json, sys
m = json.load(open(sys.argv[1]))
assert m["magic"] == "fullband-token-store" and m["version"] == 1, m
assert m["tokenizer"]["sha256"] == "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7"
assert m["num_documents"] == 302 and m["num_sources"] == 3, m
assert m["num_tokens"] == m["num_sequences"] * 65 + m["tail"], m
PY
"$fullband" data verify "$dir/store" | grep -q '^ok: ' || fail "data verify"

"$fullband" ingest --input - --format jsonl --out "$dir/store" --seq-len 64 --json \
  <"$dir/web.jsonl" | grep -q '"sources_added":0' || fail "re-ingest of stdin added data"
"$fullband" ingest --input "$dir/docs" --out "$dir/store" --seq-len 64 --json |
  grep -q '"sources_added":0' || fail "re-ingest of the directory added data"

printf '{"text": "fine"}\n{"txt": "typo"}\n' >"$dir/bad.jsonl"
if "$fullband" ingest --input "$dir/bad.jsonl" --out "$dir/store2" --seq-len 64 2>"$dir/err"; then
  fail "a malformed line was accepted"
fi
grep -q "bad.jsonl:2: no string field \"text\"" "$dir/err" || fail "error does not name file:line: $(cat "$dir/err")"

# The tiny model at the tokenizer's vocabulary (cl100k_base, EOD <|endoftext|>), with two heads
# of 32 and an FFN of 3 d_model.
cat >"$dir/train.yaml" <<YAML
$(tiny_model vocab_size=100352 eod_id=100257 d_model=64 n_heads=2 n_kv_heads=1 head_dim=32 \
             ffn_dim=192 max_seq_len=64 window=32)
data: {sources: [{store: $dir/store}], batch_size: 4, seq_len: 64}
schedule: {steps: 4, phases: [{until: 1.0, mix: {1: 0.5, 2: 0.5}}]}
runtime: {log_every: 1, peak_gflops: 100}
YAML
"$fullband" train "$dir/train.yaml" --json >"$dir/train.jsonl"
python3 - "$dir/train.jsonl" <<'PY' || fail "training from the store"
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
steps = [l for l in lines if "step" in l]
assert len(steps) == 4 and all(len(s["pass_loss"]) == s["passes"] for s in steps), lines
assert lines[-1]["summary"] and lines[-1]["tokens"] == 4 * 4 * 64, lines[-1]
PY
echo "data_e2e: ok"

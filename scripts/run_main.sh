#!/usr/bin/env bash
# The main-job command of the README: installs dependencies, builds, Phi-4-tokenizes real text
# into two token stores (the Brown corpus; the Linux kernel's reStructuredText documentation),
# and trains a small latent-feedback model single-process on their 50/50 blend
# (scripts/demo/train.yaml), logging loss per pass, tokens, token-equivalents, tokens/s and MFU.
# Re-running skips what is already ingested. Extra arguments go to `fullband train`
# (e.g. --steps 50, --json).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
FULLBAND_TARGETS="fullband" scripts/build.sh
fullband=build/cli/fullband
$fullband backends
python3 scripts/demo/make_corpus.py build/demo/corpus
for name in brown linux-doc; do
  $fullband ingest --input "build/demo/corpus/$name.jsonl" --out "build/demo/$name.store" --seq-len 256
done
$fullband data info build/demo/linux-doc.store
$fullband train scripts/demo/train.yaml "$@"

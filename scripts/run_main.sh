#!/usr/bin/env bash
# The main-job command of the README: installs dependencies, builds, and trains a small
# latent-feedback model single-process on real text (scripts/demo/train.yaml), logging loss per
# pass, tokens, token-equivalents, tokens/s and MFU. It becomes a job under the coordinator when
# that lands. Extra arguments go to `fullband train` (e.g. --steps 50, --json).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
FULLBAND_TARGETS="fullband" scripts/build.sh
build/cli/fullband backends
mkdir -p build/demo
python3 scripts/bytes_to_tokens.py build/demo/tokens.bin /usr/share/common-licenses/*
build/cli/fullband train scripts/demo/train.yaml "$@"

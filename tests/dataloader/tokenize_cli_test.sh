#!/usr/bin/env bash
# `fullband tokenize` end to end: ids of a file and of stdin, JSON with the replacement count,
# special tokens only with --allow-special, --decode back to the bytes, and exit 2 with one line
# on bad input. Expected ids were printed by tiktoken@1.0.22 (cl100k_base).
#   tokenize_cli_test.sh PATH/TO/fullband
set -euo pipefail
fullband=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

printf 'hello world' >"$tmp/in.txt"
[ "$("$fullband" tokenize --input "$tmp/in.txt")" = "15339 1917" ] || fail "ids of a file"
[ "$(printf 'hello world' | "$fullband" tokenize)" = "15339 1917" ] || fail "ids of stdin"
json=$(printf 'a\xed\xa0\x80' | "$fullband" tokenize --json 2>/dev/null)
[[ "$json" == *'"replaced":3}' ]] || fail "json replacement count: $json"
[ "$(printf 'a<|endoftext|>b' | "$fullband" tokenize --allow-special)" = "64 100257 65" ] ||
  fail "--allow-special"
[ "$(printf 'a<|endoftext|>b' | "$fullband" tokenize | wc -w)" -gt 3 ] || fail "specials as text"
printf 'caf\xc3\xa9 \xf0\x9f\x98\x80 x\r\n\ty' >"$tmp/text"
"$fullband" tokenize --input "$tmp/text" | "$fullband" tokenize --decode >"$tmp/back"
cmp -s "$tmp/text" "$tmp/back" || fail "decode(encode(x)) != x"

for bad in "--input $tmp/missing" "--bogus" "--decode --input $tmp/text" \
           "--tokenizer $tmp/text --input $tmp/in.txt"; do
  set +e
  err=$("$fullband" tokenize $bad </dev/null 2>&1 >/dev/null)
  rc=$?
  set -e
  [ "$rc" -eq 2 ] || fail "'tokenize $bad' exited $rc, expected 2"
  [ "$(printf '%s\n' "$err" | wc -l)" -eq 1 ] || fail "'tokenize $bad' printed: $err"
done
echo "tokenize_cli_test: all checks passed"

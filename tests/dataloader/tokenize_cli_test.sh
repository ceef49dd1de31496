#!/usr/bin/env bash
# `fullband tokenize` end to end: ids of a file and of stdin, JSON with the replacement count,
# special tokens only with --allow-special, --decode back to the bytes, and exit 2 with one line
# on bad input. Expected ids were printed by tiktoken@1.0.22 (cl100k_base).
#   tokenize_cli_test.sh PATH/TO/fullband
set -euo pipefail
fullband=$1
source "$(dirname "$0")/../e2e_lib.sh"
scratch_dir

printf 'hello world' >"$dir/in.txt"
[ "$("$fullband" tokenize --input "$dir/in.txt")" = "15339 1917" ] || fail "ids of a file"
[ "$(printf 'hello world' | "$fullband" tokenize)" = "15339 1917" ] || fail "ids of stdin"
json=$(printf 'a\xed\xa0\x80' | "$fullband" tokenize --json 2>/dev/null)
[[ "$json" == *'"replaced":3}' ]] || fail "json replacement count: $json"
[ "$(printf 'a<|endoftext|>b' | "$fullband" tokenize --allow-special)" = "64 100257 65" ] ||
  fail "--allow-special"
[ "$(printf 'a<|endoftext|>b' | "$fullband" tokenize | wc -w)" -gt 3 ] || fail "specials as text"
printf 'caf\xc3\xa9 \xf0\x9f\x98\x80 x\r\n\ty' >"$dir/text"
"$fullband" tokenize --input "$dir/text" | "$fullband" tokenize --decode >"$dir/back"
cmp -s "$dir/text" "$dir/back" || fail "decode(encode(x)) != x"

for bad in "--input $dir/missing" "--bogus" "--decode --input $dir/text" \
           "--tokenizer $dir/text --input $dir/in.txt"; do
  set +e
  err=$("$fullband" tokenize $bad </dev/null 2>&1 >/dev/null)
  rc=$?
  set -e
  [ "$rc" -eq 2 ] || fail "'tokenize $bad' exited $rc, expected 2"
  [ "$(printf '%s\n' "$err" | wc -l)" -eq 1 ] || fail "'tokenize $bad' printed: $err"
done
echo "tokenize_cli_test: all checks passed"

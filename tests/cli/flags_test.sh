#!/usr/bin/env bash
# The fullband binary's command line: `--name value` and `--name=value`, --help on stdout with
# exit 0, and bad usage — an unknown flag, garbage or an out-of-range value for an integer or
# number flag, a missing required flag, a stray argument — refused with exit 2 and one line on
# stderr naming the flag or argument, before any work starts; and the environment variables
# flags fall back to.
#   flags_test.sh FULLBAND
set -euo pipefail
fullband=$1
source "$(dirname "$0")/../e2e_lib.sh"
scratch_dir

# `fullband --help` lists every subcommand; a subcommand's --help shows its flags.
help=$("$fullband" --help) || fail "fullband --help exited $?"
for command in backends config model train worker ckpt ingest data tokenize coordinator submit \
               status watch cancel plot; do
  grep -Eq "^  $command " <<< "$help" || fail "fullband --help does not list $command"
done
"$fullband" ingest --help | grep -q -- "--seq-len" || fail "ingest --help"
"$fullband" model grad --help | grep -q -- "--passes" || fail "model grad --help"

# refused ARGS... NAME: `fullband ARGS` exits 2, printing one line that contains NAME.
refused() {
  local name=${*: -1} rc=0 err
  err=$("$fullband" "${@:1:$#-1}" </dev/null 2>&1 >/dev/null) || rc=$?
  [[ $rc == 2 ]] || fail "'fullband ${*:1:$#-1}' exited $rc, expected 2: $err"
  [[ $(wc -l <<< "$err") == 1 ]] || fail "'fullband ${*:1:$#-1}' printed more than a line: $err"
  [[ $err == *"$name"* ]] || fail "'fullband ${*:1:$#-1}' does not name $name: $err"
}
refused train "$dir/none.yaml" --steps abc --steps
refused train "$dir/none.yaml" --steps=0 --steps
refused train "$dir/none.yaml" --steps 99999999999999999999 --steps
refused train "$dir/none.yaml" --bogus --bogus
refused train "$dir/none.yaml" extra extra
refused ingest --input a --out b --seq-len 12x --seq-len
refused ingest --input a --out b --seq-len 8 --threads 2000 --threads
refused ingest --input a --out b --seq-len 8 --format csv --format
refused ingest --out b --seq-len 8 --input
refused model grad --config c --weights w --batch b --out g --passes 65 --passes
refused model grad --config c --weights w --batch b --out g --jitter nan --jitter
refused model grad --config c --weights w --batch b --out g --mixin maybe --mixin
refused worker --collective-timeout 0 --collective-timeout
refused status --history --history
refused tokenize --bogus --bogus
refused ckpt export "$dir/ckpt" --out
refused bogus bogus
FULLBAND_LOG_LEVEL=LOUD refused backends --log-level
FULLBAND_TOKENIZER_RANKS="$dir/none" refused tokenize "$dir/none"
FULLBAND_TOKENIZER_RANKS="$dir/none" refused tokenize --tokenizer "$dir/other" "$dir/other"

# A flag wins over its environment variable, which wins over the default.
if [[ $(uname -m) == x86_64 ]]; then
  FULLBAND_CPU_ISA=sse "$fullband" backends | grep -q "^cpu .*(sse, " || fail "FULLBAND_CPU_ISA"
  FULLBAND_CPU_ISA=bogus "$fullband" backends --cpu-isa sse | grep -q "(sse, " || fail "--cpu-isa"
fi
FULLBAND_CPU_ISA=bogus "$fullband" backends | grep -q "^cpu .*unavailable.*'bogus'" ||
  fail "FULLBAND_CPU_ISA=bogus: $("$fullband" backends)"

# Both spellings of a value, and a repeated flag's values collected.
printf 'hello world' >"$dir/in.txt"
[[ $("$fullband" tokenize --input "$dir/in.txt") == "15339 1917" ]] || fail "--input FILE"
[[ $("$fullband" tokenize --input="$dir/in.txt") == "15339 1917" ]] || fail "--input=FILE"
mkdir "$dir/docs"
printf 'one document\n' >"$dir/docs/a.txt"
printf 'another one\n' >"$dir/b.txt"
"$fullband" ingest --input "$dir/docs" --input="$dir/b.txt" --out "$dir/store" --seq-len=4 \
  --json | grep -q '"sources_added":2' || fail "two --input flags"
echo "flags_test: ok"

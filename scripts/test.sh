#!/usr/bin/env bash
# The test command of the README: installs dependencies, builds everything (CUDA code compiles
# and links even without a GPU; GPU tests then skip with a message), runs every CTest test,
# then rebuilds the unit tests with AddressSanitizer + UndefinedBehaviorSanitizer and runs them.
# Ends with one line: "tests: N passed, N failed, N skipped" over both runs.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
logs=$(mktemp -d)

echo "== build (Release)"
scripts/build.sh
echo "== tests (Release)"
status=0
ctest --test-dir build --output-on-failure --timeout 900 -j "$(nproc)" 2>&1 | tee "$logs/release.log" || status=1

echo "== build (ASan + UBSan, CPU only)"
FULLBAND_BUILD_DIR=build-asan FULLBAND_TARGETS="common_test proto_test checkpoint_test ops_test comm_test model_test worker_test dataloader_test tokenizer_test \
  coordinator_auth_test coordinator_metrics_http_test coordinator_local_launcher_test coordinator_slurm_launcher_test coordinator_tls_test \
  coordinator_test coordinator_grpc_test coordinator_rpc_handler_test fullband" \
  scripts/build.sh -DFULLBAND_SANITIZE=ON -DFULLBAND_CUDA=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo
echo "== unit tests (ASan + UBSan)"
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
ctest --test-dir build-asan -L unit --output-on-failure --timeout 900 -j "$(nproc)" 2>&1 |
  tee "$logs/asan.log" || status=1

# CTest counts skipped tests as passed; report them apart.
total=0 failed=0 skipped=0
for log in "$logs/release.log" "$logs/asan.log"; do
  line=$(grep -E '[0-9]+% tests passed, [0-9]+ tests? failed out of [0-9]+' "$log" | tail -n 1)
  [ -n "$line" ] || { echo "no CTest summary in $log"; status=1; continue; }
  f=$(sed -E 's/.* ([0-9]+) tests? failed out of ([0-9]+).*/\1/' <<<"$line")
  t=$(sed -E 's/.* ([0-9]+) tests? failed out of ([0-9]+).*/\2/' <<<"$line")
  s=$(grep -cE '^[[:space:]]+[0-9]+ - .*\(Skipped\)' "$log" || true)
  total=$((total + t)) failed=$((failed + f)) skipped=$((skipped + s))
done
echo "tests: $((total - failed - skipped)) passed, $failed failed, $skipped skipped"
exit $status

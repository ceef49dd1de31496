#!/usr/bin/env bash
# FULLBAND_REQUIRE_CUDA=1 turns a missing CUDA backend from a skip into a failure that says why
# (the plugin's load error, the missing device, or a build without CUDA): where the CUDA op
# tests skip, they must fail with that reason under it; where they run, they must pass.
# usage: require_cuda_test.sh OPS_TEST
set -uo pipefail
ops_test=$1
filter='--gtest_filter=Backends/RmsNormTest.*/cuda'
plain=$("$ops_test" "$filter" 2>&1)
out=$(FULLBAND_REQUIRE_CUDA=1 "$ops_test" "$filter" 2>&1)
rc=$?
if ! grep -q "SKIPPED" <<< "$plain"; then
  [[ $rc == 0 ]] || { echo "FAIL: the CUDA tests run here but failed: $out"; exit 1; }
  echo "require_cuda_test: ok (a CUDA backend is here and its tests passed)"
else
  [[ $rc != 0 ]] || { echo "FAIL: no CUDA backend, and FULLBAND_REQUIRE_CUDA=1 still passed"; exit 1; }
  grep -q "FULLBAND_REQUIRE_CUDA=1 and no CUDA backend: UNAVAILABLE" <<< "$out" ||
    { echo "FAIL: the failure does not say why: $out"; exit 1; }
  echo "require_cuda_test: ok ($(grep -m1 -o 'no CUDA backend: .*' <<< "$out"))"
fi

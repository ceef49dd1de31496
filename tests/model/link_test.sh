#!/usr/bin/env bash
# The model's floor (docs/DESIGN.md §3) holds neither MPI nor gRPC: the program given, linked
# against fullband_model, must load neither library, directly or through another (ldd lists
# every shared library the loader would map). Usage: link_test.sh PROGRAM
set -euo pipefail
program=$1
libs=$(ldd "$program")
# A sanity check that ldd read the program at all: every C++ program here loads libstdc++.
grep -q 'libstdc++' <<<"$libs" || { echo "ldd $program listed no libstdc++:"; echo "$libs"; exit 1; }
if bad=$(grep -E 'lib(mpi|open-pal|open-rte|grpc|gpr)[^ ]*\.so' <<<"$libs"); then
  echo "$program loads libraries of a floor above the model's:"
  echo "$bad"
  exit 1
fi
echo "$program loads no MPI and no gRPC library ($(wc -l <<<"$libs") libraries in all)"

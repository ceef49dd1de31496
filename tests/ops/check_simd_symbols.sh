#!/bin/sh
# Fails if a per-instruction-set build of ops/cpu/simd_kernels.cc defines a weak or unique
# symbol: the linker keeps one copy of such a symbol for all three builds, so an AVX-512 copy
# could run on a CPU without AVX-512 (Note [No shared inline functions] in that file).
# Usage: check_simd_symbols.sh NM OBJECT...
nm_program=$1
shift
status=0
for object in "$@"; do
  shared=$("$nm_program" -C --defined-only "$object" | grep -E ' [WVuiw] ')
  if [ -n "$shared" ]; then
    echo "$object defines symbols shared across instruction sets:"
    echo "$shared"
    status=1
  else
    echo "$object: no shared symbols"
  fi
done
exit $status

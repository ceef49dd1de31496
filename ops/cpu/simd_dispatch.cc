// Picks the SimdKernels table for this CPU (ops/cpu/simd_kernels.h).
#include <string>
#include <vector>

#include "common/check.h"
#include "ops/cpu/simd_kernels.h"

namespace fullband::ops::cpu {

// One table per build of ops/cpu/simd_kernels.cc (ops/CMakeLists.txt).
#if FULLBAND_SIMD_X86
namespace sse {
extern const SimdKernels kKernels;
}
namespace avx2 {
extern const SimdKernels kKernels;
}
namespace avx512 {
extern const SimdKernels kKernels;
}
#else
namespace generic {
extern const SimdKernels kKernels;
}
#endif

namespace {

struct Candidate {
  const SimdKernels* kernels;
  bool supported;
};

// Widest first. The x86-64-v3/v4 levels are what the avx2/avx512 builds were compiled for.
std::vector<Candidate> Candidates() {
#if FULLBAND_SIMD_X86
  __builtin_cpu_init();
  return {{&avx512::kKernels, __builtin_cpu_supports("x86-64-v4") != 0},
          {&avx2::kKernels, __builtin_cpu_supports("x86-64-v3") != 0},
          {&sse::kKernels, true}};
#else
  return {{&generic::kKernels, true}};
#endif
}

std::string Join(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

}  // namespace

std::vector<std::string> SupportedSimdIsas() {
  std::vector<std::string> isas;
  for (const Candidate& c : Candidates()) {
    if (c.supported) isas.push_back(c.kernels->isa);
  }
  return isas;
}

StatusOr<const SimdKernels*> SimdKernelsFor(const std::string& isa) {
  for (const Candidate& c : Candidates()) {
    if (c.supported && isa == c.kernels->isa) return c.kernels;
  }
  return UnavailableError("CPU kernels for '" + isa +
                          "' are not available here; this CPU runs: " + Join(SupportedSimdIsas()));
}

const SimdKernels& DefaultSimdKernels() {
  for (const Candidate& c : Candidates()) {
    if (c.supported) return *c.kernels;
  }
  FB_CHECK(false) << "no CPU kernels at all";  // the baseline build is always supported
  return *Candidates().back().kernels;
}

}  // namespace fullband::ops::cpu

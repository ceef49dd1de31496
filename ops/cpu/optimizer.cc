// CpuBackend: AdamW and the reductions behind global-norm clipping.

#include <algorithm>
#include <cmath>
#include <vector>

#include "ops/cpu/cpu_backend.h"
#include "ops/cpu/simd_kernels.h"

namespace fullband::ops::cpu {
void CpuBackend::AdamWStep(Tensor param, Tensor grad, Tensor m, Tensor v, const AdamWOptions& o) {
  const int64_t n = param.numel();
  FB_CHECK(grad.numel() == n && m.numel() == n && v.numel() == n);
  FB_CHECK(o.step >= 1) << "AdamW step numbers start at 1, got " << o.step;
  const float bias1 = static_cast<float>(1.0 - std::pow(static_cast<double>(o.beta1), o.step));
  const float bias2 = static_cast<float>(1.0 - std::pow(static_cast<double>(o.beta2), o.step));
  simd_->adamw(param.f32(), grad.f32(), m.f32(), v.f32(), n, o.lr, o.beta1, o.beta2, o.eps,
               1.0f - o.lr * o.weight_decay, o.grad_scale, bias1, bias2, threads_);
}

double CpuBackend::SumSquares(Tensor x) {
  const float* p = x.f32();
  const int64_t n = x.numel();
  // Fixed chunks summed in order: the result does not depend on the thread count.
  constexpr int64_t kChunk = 1 << 14;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  std::vector<double> partial(chunks);
#pragma omp parallel for num_threads(threads_) schedule(static)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t end = std::min(n, (c + 1) * kChunk);
    double acc = 0.0;
#pragma omp simd reduction(+ : acc)
    for (int64_t i = c * kChunk; i < end; ++i) acc += static_cast<double>(p[i]) * p[i];
    partial[c] = acc;
  }
  double total = 0.0;
  for (double s : partial) total += s;
  return total;
}

}  // namespace fullband::ops::cpu

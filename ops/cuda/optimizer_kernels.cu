// Optimizer kernels of the CUDA backend: the AdamW step (PyTorch order: decoupled decay, moment
// updates, bias-corrected step; float32 math) and Σx² in float64 for global-norm clipping,
// reduced deterministically (a fixed grid of per-block partials, then one block in fixed order).
#include <cmath>

#include "ops/cuda/device_utils.cuh"
#include "ops/cuda/kernels.h"

namespace fullband::ops::kernels {
namespace {

__global__ void AdamWKernel(float* param, const float* grad, float* m, float* v, int64_t n,
                            AdamWParams a) {
  for (int64_t i = GlobalThread(); i < n; i += GridStride()) {
    const float g = a.grad_scale * grad[i];
    const float p = param[i] * a.decay;
    const float mi = a.beta1 * m[i] + (1.0f - a.beta1) * g;
    const float vi = a.beta2 * v[i] + (1.0f - a.beta2) * g * g;
    m[i] = mi;
    v[i] = vi;
    const float m_hat = mi / a.bias1;
    const float v_hat = vi / a.bias2;
    param[i] = p - a.lr * m_hat / (sqrtf(v_hat) + a.eps);
  }
}

constexpr int kSumThreads = 256;

// partials[blockIdx.x] = Σ x² over this block's grid-stride share, in float64.
__global__ void __launch_bounds__(kSumThreads)
    SumSquaresPartialKernel(double* partials, const float* x, int64_t n) {
  __shared__ double scratch[kWarpSize];
  double sum = 0.0;
  for (int64_t i = GlobalThread(); i < n; i += GridStride()) {
    const double value = x[i];
    sum += value * value;
  }
  sum = BlockSum(sum, scratch);
  if (threadIdx.x == 0) partials[blockIdx.x] = sum;
}

// partials[count] = Σ partials[0 .. count), one block.
__global__ void __launch_bounds__(kSumThreads) SumSquaresFinalKernel(double* partials, int count) {
  __shared__ double scratch[kWarpSize];
  double sum = 0.0;
  for (int i = threadIdx.x; i < count; i += blockDim.x) sum += partials[i];
  sum = BlockSum(sum, scratch);
  if (threadIdx.x == 0) partials[count] = sum;
}

}  // namespace

void AdamW(cudaStream_t stream, float* param, const float* grad, float* m, float* v, int64_t n,
           const AdamWParams& params) {
  if (n == 0) return;
  AdamWKernel<<<GridFor(n), kBlockThreads, 0, stream>>>(param, grad, m, v, n, params);
  CheckLaunch();
}

void SumSquares(cudaStream_t stream, double* partials, const float* x, int64_t n) {
  // Always launched (n == 0 gives 0): the grid is fixed so that the result is deterministic.
  SumSquaresPartialKernel<<<kSumSquaresBlocks, kSumThreads, 0, stream>>>(partials, x, n);
  CheckLaunch();
  SumSquaresFinalKernel<<<1, kSumThreads, 0, stream>>>(partials, kSumSquaresBlocks);
  CheckLaunch();
}

}  // namespace fullband::ops::kernels

// Cross-entropy kernels of the CUDA backend over logits (N, V), one block per row.
// Forward: one pass with a per-thread online (max, Σexp) pair, merged across the block;
// writes lse for every row and loss = lse - logits[target] (0 for ignored rows). Backward:
// dlogits = ce_scale (p - onehot) + z_scale · 2 · lse · p, zero for ignored rows; dlogits may
// alias logits (each element is read, then written, by one thread).
#include <cmath>

#include "ops/backend.h"
#include "ops/cuda/device_utils.cuh"
#include "ops/cuda/kernels.h"

namespace fullband::ops::kernels {
namespace {

constexpr int kForwardThreads = 512;
constexpr int kBackwardThreads = 256;

// Running (max, Σ exp(x - max)). Adding -inf contributes nothing; a NaN makes the sum NaN.
struct MaxSum {
  float max = -INFINITY;
  float sum = 0.0f;

  __device__ void Add(float x) {
    if (x > max) {
      sum = sum * expf(max - x) + 1.0f;
      max = x;
    } else if (max != -INFINITY) {
      sum += expf(x - max);
    } else if (isnan(x)) {
      sum = x;  // NaN while max is still -inf
    }
  }

  __device__ void Merge(float other_max, float other_sum) {
    const float m = fmaxf(max, other_max);
    if (m == -INFINITY) return;  // both empty
    const float a = max == -INFINITY ? 0.0f : sum * expf(max - m);
    const float b = other_max == -INFINITY ? 0.0f : other_sum * expf(other_max - m);
    max = m;
    sum = a + b;
  }
};

__device__ MaxSum WarpMerge(MaxSum x) {
#pragma unroll
  for (int offset = kWarpSize / 2; offset > 0; offset >>= 1) {
    const float other_max = __shfl_xor_sync(kFullMask, x.max, offset);
    const float other_sum = __shfl_xor_sync(kFullMask, x.sum, offset);
    x.Merge(other_max, other_sum);
  }
  return x;
}

__global__ void __launch_bounds__(kForwardThreads)
    CrossEntropyForwardKernel(float* loss, float* lse, const float* logits, const int32_t* targets,
                              int64_t v, int64_t ld, int32_t ignore_id) {
  __shared__ float maxes[kWarpSize];
  __shared__ float sums[kWarpSize];
  const int64_t row = blockIdx.x;
  const float* x = logits + row * ld;
  MaxSum acc;
  for (int64_t i = threadIdx.x; i < v; i += blockDim.x) acc.Add(x[i]);
  acc = WarpMerge(acc);
  const int lane = threadIdx.x % kWarpSize;
  const int warp = threadIdx.x / kWarpSize;
  if (lane == 0) {
    maxes[warp] = acc.max;
    sums[warp] = acc.sum;
  }
  __syncthreads();
  if (warp != 0) return;
  MaxSum total;
  if (lane < static_cast<int>(blockDim.x / kWarpSize)) {
    total.max = maxes[lane];
    total.sum = sums[lane];
  }
  total = WarpMerge(total);
  if (lane != 0) return;
  const float row_lse = total.max + logf(total.sum);
  lse[row] = row_lse;
  const int32_t target = targets[row];
  float row_loss = 0.0f;
  if (target != ignore_id && target != kOtherShard) {
    // A target outside [0, V) is a caller bug the host cannot see: report NaN, do not read.
    row_loss = (target >= 0 && target < v) ? row_lse - x[target] : NAN;
  }
  loss[row] = row_loss;
}

__global__ void __launch_bounds__(kBackwardThreads)
    CrossEntropyBackwardKernel(float* dlogits, const float* logits, const float* lse,
                               const int32_t* targets, int64_t v, int64_t ld, float ce_scale,
                               float z_scale, int32_t ignore_id) {
  const int64_t row = blockIdx.x;
  const float* x = logits + row * ld;
  float* dx = dlogits + row * ld;
  const int32_t target = targets[row];
  if (target == ignore_id) {
    for (int64_t i = threadIdx.x; i < v; i += blockDim.x) dx[i] = 0.0f;
    return;
  }
  // ce_scale (p - onehot) + z_scale · 2 · lse · p, grouped as on the CPU backend:
  // (ce_scale + 2 · z_scale · lse) · p, minus ce_scale at the target.
  const float row_lse = lse[row];
  const float coef = ce_scale + 2.0f * z_scale * row_lse;
  for (int64_t i = threadIdx.x; i < v; i += blockDim.x) {
    const float g = coef * expf(x[i] - row_lse);
    dx[i] = i == target ? g - ce_scale : g;
  }
}

}  // namespace

void CrossEntropyForward(cudaStream_t stream, float* loss, float* lse, const float* logits,
                         const int32_t* targets, int64_t n, int64_t v, int64_t ld,
                         int32_t ignore_id) {
  if (n == 0) return;
  CrossEntropyForwardKernel<<<static_cast<unsigned>(n), kForwardThreads, 0, stream>>>(
      loss, lse, logits, targets, v, ld, ignore_id);
  CheckLaunch();
}

void CrossEntropyBackward(cudaStream_t stream, float* dlogits, const float* logits,
                          const float* lse, const int32_t* targets, int64_t n, int64_t v,
                          int64_t ld, float ce_scale, float z_scale, int32_t ignore_id) {
  if (n == 0) return;
  CrossEntropyBackwardKernel<<<static_cast<unsigned>(n), kBackwardThreads, 0, stream>>>(
      dlogits, logits, lse, targets, v, ld, ce_scale, z_scale, ignore_id);
  CheckLaunch();
}

}  // namespace fullband::ops::kernels

// Device helpers shared by the kernels of ops/cuda/: warp and block reductions, sigmoid,
// grid-stride sizing and the launch check. Internal to ops/cuda/.
// Reductions use every lane of a full warp: call them from warp-uniform control flow only.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "ops/cuda/cuda_call.h"

namespace fullband::ops::kernels {

inline constexpr int kWarpSize = 32;
inline constexpr int kBlockThreads = 256;  // default block size of the elementwise kernels
inline constexpr unsigned kFullMask = 0xffffffffu;

template <typename T>
__device__ __forceinline__ T WarpSum(T x) {
#pragma unroll
  for (int offset = kWarpSize / 2; offset > 0; offset >>= 1) {
    x += __shfl_xor_sync(kFullMask, x, offset);
  }
  return x;
}

__device__ __forceinline__ float WarpMax(float x) {
#pragma unroll
  for (int offset = kWarpSize / 2; offset > 0; offset >>= 1) {
    x = fmaxf(x, __shfl_xor_sync(kFullMask, x, offset));
  }
  return x;
}

// Sum over the block; every thread gets the result. blockDim.x is a multiple of 32 (at most
// 1024); `scratch` holds 32 values. Safe to call repeatedly with the same scratch.
template <typename T>
__device__ T BlockSum(T x, T* scratch) {
  const int lane = threadIdx.x % kWarpSize;
  const int warp = threadIdx.x / kWarpSize;
  const int warps = blockDim.x / kWarpSize;
  x = WarpSum(x);
  __syncthreads();  // earlier readers of scratch are done
  if (lane == 0) scratch[warp] = x;
  __syncthreads();
  x = lane < warps ? scratch[lane] : T(0);
  return WarpSum(x);
}

__device__ __forceinline__ float Sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

// Index of this thread in a 1-D grid, and the grid's stride, for grid-stride loops.
__device__ __forceinline__ int64_t GlobalThread() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ int64_t GridStride() {
  return static_cast<int64_t>(gridDim.x) * blockDim.x;
}

// Blocks for a grid-stride loop over n > 0 items, capped (the loop covers the rest).
inline unsigned GridFor(int64_t n, int threads = kBlockThreads) {
  constexpr int64_t kMaxBlocks = int64_t{1} << 20;
  return static_cast<unsigned>(std::min<int64_t>((n + threads - 1) / threads, kMaxBlocks));
}

// Aborts on a bad launch configuration (or an earlier asynchronous fault).
inline void CheckLaunch() { FB_CALL_CHECK(cudaGetLastError()); }

}  // namespace fullband::ops::kernels

// RMSNorm kernels of the CUDA backend: out = x · rstd ⊙ gain, rstd = 1/sqrt(mean(x²) + eps)
// over the last axis of x (n, d). One warp per row, float32 accumulation. The backward pass
// runs the dgain reduction (column blocks over row chunks, one atomicAdd per column per block)
// before the dx kernel, because dx may alias dout.
#include <cmath>

#include "ops/cuda/device_utils.cuh"
#include "ops/cuda/kernels.h"

namespace fullband::ops::kernels {
namespace {

constexpr int kRowsPerBlock = kBlockThreads / kWarpSize;  // one warp per row

__device__ __forceinline__ int64_t WarpRow() {
  return static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarpSize;
}

// out, x (n, d); gain (d); rstd (n). out may alias x: each lane rewrites only what it read.
__global__ void RmsNormForwardKernel(float* out, float* rstd, const float* x, const float* gain,
                                     int64_t n, int64_t d, float eps) {
  const int64_t row = WarpRow();
  const int lane = threadIdx.x % kWarpSize;
  if (row >= n) return;  // warp-uniform
  const float* x_row = x + row * d;
  float* out_row = out + row * d;
  float sum = 0.0f;
  for (int64_t i = lane; i < d; i += kWarpSize) sum += x_row[i] * x_row[i];
  sum = WarpSum(sum);
  const float r = 1.0f / sqrtf(sum / static_cast<float>(d) + eps);
  for (int64_t i = lane; i < d; i += kWarpSize) out_row[i] = x_row[i] * r * gain[i];
  if (lane == 0) rstd[row] = r;
}

// dx = r · g ⊙ dy - x · r³ · Σ(g ⊙ dy ⊙ x) / d, per row (the CPU backend's expression order).
// dx may alias dout.
__global__ void RmsNormBackwardDxKernel(float* dx, const float* dout, const float* x,
                                        const float* gain, const float* rstd, int64_t n,
                                        int64_t d) {
  const int64_t row = WarpRow();
  const int lane = threadIdx.x % kWarpSize;
  if (row >= n) return;  // warp-uniform
  const float* dy_row = dout + row * d;
  const float* x_row = x + row * d;
  float* dx_row = dx + row * d;
  float dot = 0.0f;
  for (int64_t i = lane; i < d; i += kWarpSize) dot += gain[i] * dy_row[i] * x_row[i];
  dot = WarpSum(dot);
  const float r = rstd[row];
  const float coef = r * r * r * dot / static_cast<float>(d);
  for (int64_t i = lane; i < d; i += kWarpSize)
    dx_row[i] = r * gain[i] * dy_row[i] - coef * x_row[i];
}

// dgain[c] += Σ_rows dy[row, c] · x[row, c] · r[row]. Block (32, 8): threadIdx.x a column,
// threadIdx.y a row phase; blockIdx.y a chunk of rows.
constexpr int kDgainCols = 32;
constexpr int kDgainRowThreads = 8;

__global__ void RmsNormBackwardDgainKernel(float* dgain, const float* dout, const float* x,
                                           const float* rstd, int64_t n, int64_t d,
                                           int64_t rows_per_chunk) {
  __shared__ float partial[kDgainRowThreads][kDgainCols];
  const int64_t col = static_cast<int64_t>(blockIdx.x) * kDgainCols + threadIdx.x;
  const int64_t row_begin = static_cast<int64_t>(blockIdx.y) * rows_per_chunk;
  const int64_t row_end = row_begin + rows_per_chunk < n ? row_begin + rows_per_chunk : n;
  float sum = 0.0f;
  if (col < d) {
    for (int64_t row = row_begin + threadIdx.y; row < row_end; row += kDgainRowThreads) {
      sum += dout[row * d + col] * x[row * d + col] * rstd[row];
    }
  }
  partial[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.y == 0 && col < d) {
    float total = 0.0f;
#pragma unroll
    for (int i = 0; i < kDgainRowThreads; ++i) total += partial[i][threadIdx.x];
    atomicAdd(&dgain[col], total);
  }
}

}  // namespace

void RmsNormForward(cudaStream_t stream, float* out, float* rstd, const float* x, const float* gain,
                    int64_t n, int64_t d, float eps) {
  if (n == 0) return;
  const int64_t blocks = (n + kRowsPerBlock - 1) / kRowsPerBlock;
  RmsNormForwardKernel<<<static_cast<unsigned>(blocks), kBlockThreads, 0, stream>>>(
      out, rstd, x, gain, n, d, eps);
  CheckLaunch();
}

void RmsNormBackward(cudaStream_t stream, float* dx, float* dgain, const float* dout,
                     const float* x, const float* gain, const float* rstd, int64_t n, int64_t d) {
  if (n == 0 || d == 0) return;
  // dgain first: it reads dout, which the dx kernel may overwrite.
  constexpr int64_t kMaxChunks = 256;
  constexpr int64_t kMinRowsPerChunk = 64;
  int64_t chunks = (n + kMinRowsPerChunk - 1) / kMinRowsPerChunk;
  if (chunks > kMaxChunks) chunks = kMaxChunks;
  const int64_t rows_per_chunk = (n + chunks - 1) / chunks;
  chunks = (n + rows_per_chunk - 1) / rows_per_chunk;
  const dim3 grid(static_cast<unsigned>((d + kDgainCols - 1) / kDgainCols),
                  static_cast<unsigned>(chunks));
  const dim3 block(kDgainCols, kDgainRowThreads);
  RmsNormBackwardDgainKernel<<<grid, block, 0, stream>>>(dgain, dout, x, rstd, n, d,
                                                         rows_per_chunk);
  CheckLaunch();
  const int64_t blocks = (n + kRowsPerBlock - 1) / kRowsPerBlock;
  RmsNormBackwardDxKernel<<<static_cast<unsigned>(blocks), kBlockThreads, 0, stream>>>(
      dx, dout, x, gain, rstd, n, d);
  CheckLaunch();
}

}  // namespace fullband::ops::kernels

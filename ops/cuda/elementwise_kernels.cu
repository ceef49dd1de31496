// Elementwise and gather/scatter kernels of the CUDA backend: Fill, ScaledCopy (Scale,
// ResidualBackward), Residual, Embedding, HeadGate, SwiGLU, ShiftRight and FeedbackMix.
// Each output element is written by the thread that reads its inputs, so the in-place aliasing
// that ops/backend.h allows is safe. Math is float32, as on the CPU backend.
#include <cmath>
#include <string>

#include "ops/backend.h"
#include "ops/cuda/device_utils.cuh"
#include "ops/cuda/kernels.h"

namespace fullband::ops::kernels {
namespace {

__global__ void FillKernel(float* x, int64_t n, float value) {
  for (int64_t i = GlobalThread(); i < n; i += GridStride()) x[i] = value;
}

__global__ void ScaledCopyKernel(float* dst, const float* src, float alpha, int64_t n) {
  for (int64_t i = GlobalThread(); i < n; i += GridStride()) dst[i] = alpha * src[i];
}

__global__ void ResidualForwardKernel(float* x, const float* branch, float scale, int64_t n) {
  for (int64_t i = GlobalThread(); i < n; i += GridStride()) x[i] += scale * branch[i];
}

// out (n, d) = table[ids] (v, d). An id outside [0, v) (a caller bug the host cannot see)
// yields a NaN row rather than an out-of-bounds read.
__global__ void EmbeddingForwardKernel(float* out, const float* table, const int32_t* ids,
                                       int64_t n, int64_t d, int64_t v) {
  for (int64_t i = GlobalThread(); i < n * d; i += GridStride()) {
    const int64_t row = i / d;
    const int64_t col = i - row * d;
    const int64_t id = ids[row];
    out[i] = (id >= 0 && id < v) ? table[id * d + col] : (id == kOtherShard ? 0.0f : NAN);
  }
}

// dtable[ids[row]] += dout[row]; repeated ids add up (atomics). Out-of-range ids are skipped.
__global__ void EmbeddingBackwardKernel(float* dtable, const float* dout, const int32_t* ids,
                                        int64_t n, int64_t d, int64_t v) {
  for (int64_t i = GlobalThread(); i < n * d; i += GridStride()) {
    const int64_t row = i / d;
    const int64_t col = i - row * d;
    const int64_t id = ids[row];
    if (id >= 0 && id < v) atomicAdd(&dtable[id * d + col], dout[i]);
  }
}

// out (rows, dh) = x (rows, dh) · sigmoid(gate (rows)).
__global__ void HeadGateForwardKernel(float* out, const float* x, const float* gate, int64_t rows,
                                      int64_t dh) {
  for (int64_t i = GlobalThread(); i < rows * dh; i += GridStride()) {
    out[i] = x[i] * Sigmoid(gate[i / dh]);
  }
}

// One warp per row: dgate = Σ_d dout·x · s(1 - s), dx = dout · s with s = sigmoid(gate).
__global__ void HeadGateBackwardKernel(float* dx, float* dgate, const float* dout, const float* x,
                                       const float* gate, int64_t rows, int64_t dh) {
  const int64_t row =
      static_cast<int64_t>(blockIdx.x) * (blockDim.x / kWarpSize) + threadIdx.x / kWarpSize;
  const int lane = threadIdx.x % kWarpSize;
  if (row >= rows) return;  // warp-uniform
  const float s = Sigmoid(gate[row]);
  const float* dout_row = dout + row * dh;
  const float* x_row = x + row * dh;
  float* dx_row = dx + row * dh;
  float sum = 0.0f;
  for (int64_t i = lane; i < dh; i += kWarpSize) sum += dout_row[i] * x_row[i];
  sum = WarpSum(sum);
  // All reads of dout and x for this row are done (the shuffles converge the warp): dx may
  // now overwrite either.
  for (int64_t i = lane; i < dh; i += kWarpSize) dx_row[i] = dout_row[i] * s;
  if (lane == 0) dgate[row] = sum * s * (1.0f - s);
}

// out = silu(gate) ⊙ up, silu(g) = g · sigmoid(g).
__global__ void SwiGluForwardKernel(float* out, const float* gate, const float* up, int64_t n) {
  for (int64_t i = GlobalThread(); i < n; i += GridStride()) {
    const float g = gate[i];
    out[i] = g * Sigmoid(g) * up[i];
  }
}

// dup = dout · silu(g); dgate = dout · up · s · (1 + g (1 - s)), s = sigmoid(g).
__global__ void SwiGluBackwardKernel(float* dgate, float* dup, const float* dout, const float* gate,
                                     const float* up, int64_t n) {
  for (int64_t i = GlobalThread(); i < n; i += GridStride()) {
    const float g = gate[i];
    const float u = up[i];
    const float dy = dout[i];
    const float s = Sigmoid(g);
    dup[i] = dy * (g * s);
    dgate[i] = dy * u * s * (1.0f + g * (1.0f - s));
  }
}

// out[b, t] = x[b, t - 1], out[b, 0] = 0; x, out (b, t, d).
__global__ void ShiftRightForwardKernel(float* out, const float* x, int64_t b, int64_t t,
                                        int64_t d) {
  for (int64_t i = GlobalThread(); i < b * t * d; i += GridStride()) {
    const int64_t pos = (i / d) % t;
    out[i] = pos == 0 ? 0.0f : x[i - d];
  }
}

// dx[b, t] = dout[b, t + 1], dx[b, T - 1] = 0.
__global__ void ShiftRightBackwardKernel(float* dx, const float* dout, int64_t b, int64_t t,
                                         int64_t d) {
  for (int64_t i = GlobalThread(); i < b * t * d; i += GridStride()) {
    const int64_t pos = (i / d) % t;
    dx[i] = pos == t - 1 ? 0.0f : dout[i + d];
  }
}

// out = plain ? e : value ⊙ sigmoid(gate); (n, d) tensors, plain (n).
__global__ void FeedbackMixForwardKernel(float* out, const float* value, const float* gate,
                                         const float* e, const uint8_t* plain, int64_t n,
                                         int64_t d) {
  for (int64_t i = GlobalThread(); i < n * d; i += GridStride()) {
    out[i] = plain[i / d] != 0 ? e[i] : value[i] * Sigmoid(gate[i]);
  }
}

// Plain rows: de = dout, dvalue = dgate = 0. Fused rows: dvalue = dout · s,
// dgate = dout · value · s (1 - s), de = 0.
__global__ void FeedbackMixBackwardKernel(float* dvalue, float* dgate, float* de, const float* dout,
                                          const float* value, const float* gate,
                                          const uint8_t* plain, int64_t n, int64_t d) {
  for (int64_t i = GlobalThread(); i < n * d; i += GridStride()) {
    const float dy = dout[i];
    if (plain[i / d] != 0) {
      dvalue[i] = 0.0f;
      dgate[i] = 0.0f;
      de[i] = dy;
    } else {
      const float s = Sigmoid(gate[i]);
      const float val = value[i];
      dvalue[i] = dy * s;
      dgate[i] = dy * val * s * (1.0f - s);
      de[i] = 0.0f;
    }
  }
}

}  // namespace

Status ProbeKernelImage() {
  cudaFuncAttributes attributes;
  const cudaError_t err = cudaFuncGetAttributes(&attributes, FillKernel);
  if (err == cudaSuccess) return OkStatus();
  (void)cudaGetLastError();  // clear the error so later calls do not report it
  return UnavailableError(std::string("CUDA backend: this build has no kernels for the device (") +
                          cudaGetErrorString(err) + "); rebuild with its architecture in " +
                          "CMAKE_CUDA_ARCHITECTURES");
}

void Fill(cudaStream_t stream, float* x, int64_t n, float value) {
  if (n == 0) return;
  FillKernel<<<GridFor(n), kBlockThreads, 0, stream>>>(x, n, value);
  CheckLaunch();
}

void ScaledCopy(cudaStream_t stream, float* dst, const float* src, float alpha, int64_t n) {
  if (n == 0) return;
  ScaledCopyKernel<<<GridFor(n), kBlockThreads, 0, stream>>>(dst, src, alpha, n);
  CheckLaunch();
}

void ResidualForward(cudaStream_t stream, float* x, const float* branch, float scale, int64_t n) {
  if (n == 0) return;
  ResidualForwardKernel<<<GridFor(n), kBlockThreads, 0, stream>>>(x, branch, scale, n);
  CheckLaunch();
}

void EmbeddingForward(cudaStream_t stream, float* out, const float* table, const int32_t* ids,
                      int64_t n, int64_t d, int64_t v) {
  if (n * d == 0) return;
  EmbeddingForwardKernel<<<GridFor(n * d), kBlockThreads, 0, stream>>>(out, table, ids, n, d, v);
  CheckLaunch();
}

void EmbeddingBackward(cudaStream_t stream, float* dtable, const float* dout, const int32_t* ids,
                       int64_t n, int64_t d, int64_t v) {
  if (n * d == 0) return;
  EmbeddingBackwardKernel<<<GridFor(n * d), kBlockThreads, 0, stream>>>(dtable, dout, ids, n, d, v);
  CheckLaunch();
}

void HeadGateForward(cudaStream_t stream, float* out, const float* x, const float* gate,
                     int64_t rows, int64_t dh) {
  if (rows * dh == 0) return;
  HeadGateForwardKernel<<<GridFor(rows * dh), kBlockThreads, 0, stream>>>(out, x, gate, rows, dh);
  CheckLaunch();
}

void HeadGateBackward(cudaStream_t stream, float* dx, float* dgate, const float* dout,
                      const float* x, const float* gate, int64_t rows, int64_t dh) {
  if (rows == 0) return;
  constexpr int kRowsPerBlock = kBlockThreads / kWarpSize;
  const int64_t blocks = (rows + kRowsPerBlock - 1) / kRowsPerBlock;
  HeadGateBackwardKernel<<<static_cast<unsigned>(blocks), kBlockThreads, 0, stream>>>(
      dx, dgate, dout, x, gate, rows, dh);
  CheckLaunch();
}

void SwiGluForward(cudaStream_t stream, float* out, const float* gate, const float* up, int64_t n) {
  if (n == 0) return;
  SwiGluForwardKernel<<<GridFor(n), kBlockThreads, 0, stream>>>(out, gate, up, n);
  CheckLaunch();
}

void SwiGluBackward(cudaStream_t stream, float* dgate, float* dup, const float* dout,
                    const float* gate, const float* up, int64_t n) {
  if (n == 0) return;
  SwiGluBackwardKernel<<<GridFor(n), kBlockThreads, 0, stream>>>(dgate, dup, dout, gate, up, n);
  CheckLaunch();
}

void ShiftRightForward(cudaStream_t stream, float* out, const float* x, int64_t b, int64_t t,
                       int64_t d) {
  if (b * t * d == 0) return;
  ShiftRightForwardKernel<<<GridFor(b * t * d), kBlockThreads, 0, stream>>>(out, x, b, t, d);
  CheckLaunch();
}

void ShiftRightBackward(cudaStream_t stream, float* dx, const float* dout, int64_t b, int64_t t,
                        int64_t d) {
  if (b * t * d == 0) return;
  ShiftRightBackwardKernel<<<GridFor(b * t * d), kBlockThreads, 0, stream>>>(dx, dout, b, t, d);
  CheckLaunch();
}

void FeedbackMixForward(cudaStream_t stream, float* out, const float* value, const float* gate,
                        const float* e, const uint8_t* plain, int64_t n, int64_t d) {
  if (n * d == 0) return;
  FeedbackMixForwardKernel<<<GridFor(n * d), kBlockThreads, 0, stream>>>(out, value, gate, e, plain,
                                                                         n, d);
  CheckLaunch();
}

void FeedbackMixBackward(cudaStream_t stream, float* dvalue, float* dgate, float* de,
                         const float* dout, const float* value, const float* gate,
                         const uint8_t* plain, int64_t n, int64_t d) {
  if (n * d == 0) return;
  FeedbackMixBackwardKernel<<<GridFor(n * d), kBlockThreads, 0, stream>>>(dvalue, dgate, de, dout,
                                                                          value, gate, plain, n, d);
  CheckLaunch();
}

}  // namespace fullband::ops::kernels

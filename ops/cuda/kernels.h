// Launchers of the CUDA kernels behind CudaBackend (ops/cuda/cuda_backend.cu), one group per
// op family and .cu file. Internal to ops/cuda/: raw device pointers, sizes already checked by
// the backend, every launch enqueued on `stream` (asynchronous) and checked with
// FB_CALL_CHECK(cudaGetLastError()). Empty inputs (a zero size) launch nothing.
// Semantics, aliasing and the gradient convention are those of ops/backend.h.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "common/status.h"

namespace fullband::ops::kernels {

// OK when this build has a kernel image the current device can run (UNAVAILABLE otherwise).
Status ProbeKernelImage();

// ---- elementwise_kernels.cu
void Fill(cudaStream_t stream, float* x, int64_t n, float value);
// dst = alpha * src; dst may alias src (Scale is ScaledCopy in place).
void ScaledCopy(cudaStream_t stream, float* dst, const float* src, float alpha, int64_t n);
// x += scale * branch.
void ResidualForward(cudaStream_t stream, float* x, const float* branch, float scale, int64_t n);
// out (n, d), table (v, d), ids (n).
void EmbeddingForward(cudaStream_t stream, float* out, const float* table, const int32_t* ids,
                      int64_t n, int64_t d, int64_t v);
void EmbeddingBackward(cudaStream_t stream, float* dtable, const float* dout, const int32_t* ids,
                       int64_t n, int64_t d, int64_t v);
// x, out (rows, dh); gate (rows).
void HeadGateForward(cudaStream_t stream, float* out, const float* x, const float* gate,
                     int64_t rows, int64_t dh);
void HeadGateBackward(cudaStream_t stream, float* dx, float* dgate, const float* dout,
                      const float* x, const float* gate, int64_t rows, int64_t dh);
// All (n) elements.
void SwiGluForward(cudaStream_t stream, float* out, const float* gate, const float* up, int64_t n);
void SwiGluBackward(cudaStream_t stream, float* dgate, float* dup, const float* dout,
                    const float* gate, const float* up, int64_t n);
// x, out (b, t, d).
void ShiftRightForward(cudaStream_t stream, float* out, const float* x, int64_t b, int64_t t,
                       int64_t d);
void ShiftRightBackward(cudaStream_t stream, float* dx, const float* dout, int64_t b, int64_t t,
                        int64_t d);
// (n, d) tensors; plain (n).
void FeedbackMixForward(cudaStream_t stream, float* out, const float* value, const float* gate,
                        const float* e, const uint8_t* plain, int64_t n, int64_t d);
void FeedbackMixBackward(cudaStream_t stream, float* dvalue, float* dgate, float* de,
                         const float* dout, const float* value, const float* gate,
                         const uint8_t* plain, int64_t n, int64_t d);

// ---- norm_kernels.cu: x, out (n, d); gain (d); rstd (n).
void RmsNormForward(cudaStream_t stream, float* out, float* rstd, const float* x, const float* gain,
                    int64_t n, int64_t d, float eps);
void RmsNormBackward(cudaStream_t stream, float* dx, float* dgain, const float* dout,
                     const float* x, const float* gain, const float* rstd, int64_t n, int64_t d);

// ---- rope_kernels.cu: x, out (b, t, heads, dh). inverse = true rotates by -angle (backward).
void Rope(cudaStream_t stream, float* out, const float* x, int64_t b, int64_t t, int64_t heads,
          int64_t dh, float theta, bool inverse);

// ---- attention_kernels.cu
inline constexpr int64_t kMaxAttentionHeadDim = 256;
struct AttentionDims {
  int64_t b = 0, t = 0, h = 0, hkv = 0, dh = 0;
  int64_t window = 0;  // 0: causal only
  float scale = 0.0f;  // already resolved (never 0)
};
// q, out (b, t, h, dh); k, v (b, t, hkv, dh); lse (b, h, t).
void AttentionForward(cudaStream_t stream, float* out, float* lse, const float* q, const float* k,
                      const float* v, const AttentionDims& dims);
void AttentionBackward(cudaStream_t stream, float* dq, float* dk, float* dv, const float* dout,
                       const float* q, const float* k, const float* v, const float* out,
                       const float* lse, const AttentionDims& dims);

// ---- cross_entropy_kernels.cu: logits (n, v), rows ld apart; loss, lse, targets (n).
void CrossEntropyForward(cudaStream_t stream, float* loss, float* lse, const float* logits,
                         const int32_t* targets, int64_t n, int64_t v, int64_t ld,
                         int32_t ignore_id);
void CrossEntropyBackward(cudaStream_t stream, float* dlogits, const float* logits,
                          const float* lse, const int32_t* targets, int64_t n, int64_t v,
                          int64_t ld, float ce_scale, float z_scale, int32_t ignore_id);

// ---- optimizer_kernels.cu
struct AdamWParams {
  float lr, beta1, beta2, eps;
  float decay;  // 1 - lr * weight_decay
  float grad_scale;
  float bias1;  // 1 - beta1^step
  float bias2;  // 1 - beta2^step
};
void AdamW(cudaStream_t stream, float* param, const float* grad, float* m, float* v, int64_t n,
           const AdamWParams& params);
// Σ x² in float64. `partials` is device scratch of kSumSquaresBlocks + 1 doubles; the sum lands
// in partials[kSumSquaresBlocks]. Deterministic: a fixed grid and a fixed reduction order.
inline constexpr int kSumSquaresBlocks = 512;
void SumSquares(cudaStream_t stream, double* partials, const float* x, int64_t n);

}  // namespace fullband::ops::kernels

// The CPU backend's vectorized loops, compiled once per instruction set.
//
// Note [One kernel file per instruction set]: ops/cpu/simd_kernels.cc is compiled three times
// on x86-64: for the x86-64-v2 baseline (namespace sse, 4-lane vectors), for x86-64-v3
// (avx2, 8 lanes) and for x86-64-v4 (avx512, 16 lanes); each build fills one SimdKernels
// table. The backend takes the widest table the CPU runs once, at construction.
//
// The vector type has the target's native width in each build. A single 16-lane type compiled
// for every target (GCC target clones) was tried: GCC 12 lowers compares and selects on vectors
// wider than the target lane by lane, and keeps such vectors on the stack, so the AVX2 build
// of the cross-entropy ran several times slower than this one.
//
// Results are bitwise reproducible for one instruction set. Between instruction sets they
// differ in the last bits: sums over vector lanes are added in a different order, and the
// baseline has no fused multiply-add.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace fullband::ops::cpu {

struct SimdKernels {
  const char* isa;  // "sse", "avx2" or "avx512"

  // Cross-entropy (ops/cpu/cross_entropy.cc): log Σ exp over one row of v logits, and
  // drow = coef · exp(row - lse).
  float (*row_log_sum_exp)(const float* row, int64_t v);
  void (*row_softmax_scaled)(float* drow, const float* row, int64_t v, float lse, float coef);

  // Attention score blocks (ops/cpu/attention.cc). Row i is query t0 + i over keys
  // [k0, k0 + n); keys outside [max(0, t - window + 1), t] (window 0: [0, t]) become 0.
  // softmax_rows soft-maxes in place and writes each row's log-sum-exp;
  // softmax_backward_rows turns saved scores into P and dP into P ⊙ (dP - rowdot).
  void (*softmax_rows)(float* s, float* lse, int64_t rows, int64_t n, int64_t t0, int64_t k0,
                       int64_t window);
  void (*softmax_backward_rows)(float* p, float* dp, const float* lse, const float* rowdot,
                                int64_t rows, int64_t n, int64_t t0, int64_t k0, int64_t window);

  // Elementwise ops (ops/cpu/elementwise.cc), each parallel over `threads` OpenMP threads.
  void (*sigmoid_gate_rows)(float* out, const float* x, const float* gate, int64_t rows,
                            int64_t width, int threads);
  void (*sigmoid_gate_rows_backward)(float* dx, float* dgate, const float* dout, const float* x,
                                     const float* gate, int64_t rows, int64_t width, int threads);
  void (*swiglu)(float* out, const float* gate, const float* up, int64_t n, int threads);
  void (*swiglu_backward)(float* dgate, float* dup, const float* dout, const float* gate,
                          const float* up, int64_t n, int threads);
  void (*feedback_mix)(float* out, const float* value, const float* gate, const float* e,
                       const uint8_t* plain, int64_t rows, int64_t width, int threads);
  void (*feedback_mix_backward)(float* dvalue, float* dgate, float* de, const float* dout,
                                const float* value, const float* gate, const uint8_t* plain,
                                int64_t rows, int64_t width, int threads);
  void (*axpy)(float* y, const float* x, float alpha, int64_t n, int threads);
  void (*scale_copy)(float* y, const float* x, float alpha, int64_t n, int threads);

  // RMSNorm and RoPE (ops/cpu/norm.cc).
  void (*rms_norm_rows)(float* out, float* rstd, const float* x, const float* gain, int64_t rows,
                        int64_t d, float eps, int threads);
  void (*rms_norm_backward_rows)(float* dx, float* dgain_partials, const float* dout,
                                 const float* x, const float* gain, const float* rstd, int64_t rows,
                                 int64_t d, int threads);
  void (*rope_rows)(float* out, const float* x, const float* cos_table, const float* sin_table,
                    int64_t b, int64_t t, int64_t heads, int64_t dh, float sign, int threads);

  // AdamW (ops/cpu/optimizer.cc).
  void (*adamw)(float* p, const float* g, float* m, float* v, int64_t n, float lr, float beta1,
                float beta2, float eps, float decay, float grad_scale, float bias1, float bias2,
                int threads);

  // C = alpha·A·B + beta·C, row-major, neither transposed, for a long inner dimension k (Note
  // [Long-K GEMM] in ops/cpu/simd_kernels.cc). n must be a multiple of gemm_nr and k > 0;
  // pack holds gemm_kc · n floats. beta = 0 never reads C.
  void (*gemm_long_k)(int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
                      const float* b, int64_t ldb, float beta, float* c, int64_t ldc, float* pack,
                      int threads);
  int64_t gemm_nr;
  int64_t gemm_kc;
};

// The instruction sets this build has kernels for and this CPU runs, widest first.
std::vector<std::string> SupportedSimdIsas();

// The kernels for `isa`; UNAVAILABLE, naming the ones this CPU runs, when this build or this
// CPU has none for it.
StatusOr<const SimdKernels*> SimdKernelsFor(const std::string& isa);

// The widest supported table (BackendOptions::cpu_isa picks another).
const SimdKernels& DefaultSimdKernels();

}  // namespace fullband::ops::cpu

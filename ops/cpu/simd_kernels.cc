// The CPU backend's vectorized loops; compiled once per instruction set, each build in its own
// namespace FB_SIMD_NS (Note [One kernel file per instruction set] in ops/cpu/simd_kernels.h).
#include "ops/cpu/simd_kernels.h"

#include <math.h>
#include <omp.h>

#include <cstring>

#include "ops/cpu/vec_math.h"

namespace fullband::ops::cpu::FB_SIMD_NS {
namespace {

// Note [No shared inline functions]: every function this file defines has internal linkage
// (or is force-inlined). An inline function with external linkage, such as an instantiation of
// std::min or std::fill that the compiler did not inline (as at -O0), would be emitted by each
// of the three builds under one name, and the linker would keep any one of them: the AVX-512
// copy could then run on a CPU without AVX-512. So this file uses these small helpers and the C
// math functions instead of <algorithm> and <cmath>; the simd_kernels_symbols test checks the
// built objects.
constexpr float kInf = __builtin_inff();
int64_t MinI(int64_t a, int64_t b) { return a < b ? a : b; }
int64_t MaxI(int64_t a, int64_t b) { return a > b ? a : b; }
float MaxF(float a, float b) { return a > b ? a : b; }
void Fill(float* begin, float* end, float value) {
  for (float* p = begin; p < end; ++p) *p = value;
}

// ---- Cross-entropy

// log Σ exp(row) in two passes over the row, which stays in L2 between them: the maximum,
// then the sum of exp(x - max). Four independent accumulators keep the SIMD units busy; the
// lanes are combined in a fixed order.
float RowLogSumExp(const float* row, int64_t v) {
  const float kNegInf = -kInf;
  VecF m0 = Broadcast(kNegInf), m1 = m0, m2 = m0, m3 = m0;
  int64_t j = 0;
  for (; j + 4 * kLanes <= v; j += 4 * kLanes) {
    m0 = Max(m0, LoadU(row + j));
    m1 = Max(m1, LoadU(row + j + kLanes));
    m2 = Max(m2, LoadU(row + j + 2 * kLanes));
    m3 = Max(m3, LoadU(row + j + 3 * kLanes));
  }
  for (; j < v; j += kLanes) {
    m0 = Max(m0, LoadPartial(row + j, static_cast<int>(MinI(kLanes, v - j)), kNegInf));
  }
  const float m = ReduceMax(Max(Max(m0, m1), Max(m2, m3)));
  if (m == kNegInf) return kNegInf;  // every logit is -inf
  const VecF vm = Broadcast(m);
  VecF s0 = Broadcast(0.0f), s1 = s0, s2 = s0, s3 = s0;
  for (j = 0; j + 4 * kLanes <= v; j += 4 * kLanes) {
    s0 += Exp(LoadU(row + j) - vm);
    s1 += Exp(LoadU(row + j + kLanes) - vm);
    s2 += Exp(LoadU(row + j + 2 * kLanes) - vm);
    s3 += Exp(LoadU(row + j + 3 * kLanes) - vm);
  }
  for (; j < v; j += kLanes) {
    const int rem = static_cast<int>(MinI(kLanes, v - j));
    s0 += Exp(LoadPartial(row + j, rem, kNegInf) - vm);
  }
  return m + logf(ReduceSum((s0 + s1) + (s2 + s3)));
}

void RowSoftmaxScaled(float* drow, const float* row, int64_t v, float lse, float coef) {
  const VecF vl = Broadcast(lse);
  const VecF vc = Broadcast(coef);
  int64_t j = 0;
  for (; j + kLanes <= v; j += kLanes) StoreU(drow + j, vc * Exp(LoadU(row + j) - vl));
  if (j < v) {
    const int rem = static_cast<int>(v - j);
    StorePartial(drow + j, vc * Exp(LoadPartial(row + j, rem, 0.0f) - vl), rem);
  }
}

// ---- Attention score blocks

// First key visible from query t.
int64_t KeyBegin(int64_t t, int64_t window) { return window > 0 ? MaxI(0, t - window + 1) : 0; }

// Softmax of score rows in place. Row i (query t0 + i) covers keys [k0, k0 + n); entries
// outside [KeyBegin(t), t] become 0. Writes lse of each row.
void SoftmaxRows(float* s, float* lse, int64_t rows, int64_t n, int64_t t0, int64_t k0,
                 int64_t window) {
  for (int64_t i = 0; i < rows; ++i) {
    const int64_t t = t0 + i;
    const int64_t lo = KeyBegin(t, window) - k0, hi = t - k0 + 1;  // valid columns [lo, hi)
    float* row = s + i * n;
    VecF vmax = Broadcast(-kInf);
    int64_t j = lo;
    for (; j + kLanes <= hi; j += kLanes) vmax = Max(vmax, LoadU(row + j));
    float m = ReduceMax(vmax);
    for (; j < hi; ++j) m = MaxF(m, row[j]);
    VecF vsum = Broadcast(0.0f);
    const VecF vm = Broadcast(m);
    for (j = lo; j + kLanes <= hi; j += kLanes) {
      const VecF e = Exp(LoadU(row + j) - vm);
      StoreU(row + j, e);
      vsum += e;
    }
    if (j < hi) {
      const int rem = static_cast<int>(hi - j);
      const VecF e = Exp(LoadPartial(row + j, rem, -kInf) - vm);
      StorePartial(row + j, e, rem);
      vsum += e;
    }
    const float sum = ReduceSum(vsum);
    const float inv = 1.0f / sum;
    for (j = lo; j < hi; ++j) row[j] *= inv;
    Fill(row, row + lo, 0.0f);
    Fill(row + hi, row + n, 0.0f);
    lse[i] = m + logf(sum);
  }
}

// P = exp(S - lse) on the valid entries, 0 elsewhere; then dS = P ⊙ (dP - rowdot) in place of
// dP, where rowdot[i] = Σ_d dO[i,d]·O[i,d].
void SoftmaxBackwardRows(float* p, float* dp, const float* lse, const float* rowdot, int64_t rows,
                         int64_t n, int64_t t0, int64_t k0, int64_t window) {
  for (int64_t i = 0; i < rows; ++i) {
    const int64_t t = t0 + i;
    const int64_t lo = KeyBegin(t, window) - k0, hi = t - k0 + 1;
    float* pr = p + i * n;
    float* dr = dp + i * n;
    const VecF vl = Broadcast(lse[i]);
    const VecF vd = Broadcast(rowdot[i]);
    int64_t j = lo;
    for (; j + kLanes <= hi; j += kLanes) {
      const VecF e = Exp(LoadU(pr + j) - vl);
      StoreU(pr + j, e);
      StoreU(dr + j, e * (LoadU(dr + j) - vd));
    }
    if (j < hi) {
      const int rem = static_cast<int>(hi - j);
      const VecF e = Exp(LoadPartial(pr + j, rem, 0.0f) - vl);
      StorePartial(pr + j, e, rem);
      StorePartial(dr + j, e * (LoadPartial(dr + j, rem, 0.0f) - vd), rem);
    }
    Fill(pr, pr + lo, 0.0f);
    Fill(pr + hi, pr + n, 0.0f);
    Fill(dr, dr + lo, 0.0f);
    Fill(dr + hi, dr + n, 0.0f);
  }
}

// ---- Elementwise

void SigmoidGateRows(float* out, const float* x, const float* gate, int64_t rows, int64_t width,
                     int threads) {
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const float s = 1.0f / (1.0f + expf(-gate[r]));
    const float* xr = x + r * width;
    float* o = out + r * width;
#pragma omp simd
    for (int64_t j = 0; j < width; ++j) o[j] = xr[j] * s;
  }
}

void SigmoidGateRowsBackward(float* dx, float* dgate, const float* dout, const float* x,
                             const float* gate, int64_t rows, int64_t width, int threads) {
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const float s = 1.0f / (1.0f + expf(-gate[r]));
    const float* xr = x + r * width;
    const float* d = dout + r * width;
    float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
    for (int64_t j = 0; j < width; ++j) dot += d[j] * xr[j];
    float* dxr = dx + r * width;
#pragma omp simd
    for (int64_t j = 0; j < width; ++j) dxr[j] = d[j] * s;
    dgate[r] = dot * s * (1.0f - s);
  }
}

void SwiGluKernel(float* out, const float* gate, const float* up, int64_t n, int threads) {
  const int64_t blocks = (n + kLanes - 1) / kLanes;
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const int64_t i = blk * kLanes;
    const int rem = static_cast<int>(MinI(kLanes, n - i));
    const VecF g = LoadUpTo(gate + i, rem);
    const VecF u = LoadUpTo(up + i, rem);
    const VecF y = g * Sigmoid(g) * u;
    StoreUpTo(out + i, y, rem);
  }
}

void SwiGluBackwardKernel(float* dgate, float* dup, const float* dout, const float* gate,
                          const float* up, int64_t n, int threads) {
  const int64_t blocks = (n + kLanes - 1) / kLanes;
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const int64_t i = blk * kLanes;
    const int rem = static_cast<int>(MinI(kLanes, n - i));
    const VecF g = LoadUpTo(gate + i, rem);
    const VecF u = LoadUpTo(up + i, rem);
    const VecF d = LoadUpTo(dout + i, rem);
    const VecF s = Sigmoid(g);
    const VecF silu = g * s;
    // d silu / dg = s · (1 + g · (1 - s))
    const VecF dg = d * u * s * (Broadcast(1.0f) + g * (Broadcast(1.0f) - s));
    const VecF du = d * silu;
    StoreUpTo(dgate + i, dg, rem);
    StoreUpTo(dup + i, du, rem);
  }
}

void FeedbackMixKernel(float* out, const float* value, const float* gate, const float* e,
                       const uint8_t* plain, int64_t rows, int64_t width, int threads) {
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    float* o = out + r * width;
    if (plain[r]) {
      std::memcpy(o, e + r * width, width * sizeof(float));
      continue;
    }
    const float* vr = value + r * width;
    const float* gr = gate + r * width;
    int64_t j = 0;
    for (; j + kLanes <= width; j += kLanes) StoreU(o + j, LoadU(vr + j) * Sigmoid(LoadU(gr + j)));
    if (j < width) {
      const int rem = static_cast<int>(width - j);
      StorePartial(o + j, LoadPartial(vr + j, rem, 0) * Sigmoid(LoadPartial(gr + j, rem, 0)), rem);
    }
  }
}

void FeedbackMixBackwardKernel(float* dvalue, float* dgate, float* de, const float* dout,
                               const float* value, const float* gate, const uint8_t* plain,
                               int64_t rows, int64_t width, int threads) {
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t off = r * width;
    if (plain[r]) {
      std::memcpy(de + off, dout + off, width * sizeof(float));
      std::memset(dvalue + off, 0, width * sizeof(float));
      std::memset(dgate + off, 0, width * sizeof(float));
      continue;
    }
    std::memset(de + off, 0, width * sizeof(float));
    for (int64_t j = 0; j < width; j += kLanes) {
      const int rem = static_cast<int>(MinI(kLanes, width - j));
      const VecF d = LoadPartial(dout + off + j, rem, 0);
      const VecF v = LoadPartial(value + off + j, rem, 0);
      const VecF s = Sigmoid(LoadPartial(gate + off + j, rem, 0));
      StorePartial(dvalue + off + j, d * s, rem);
      StorePartial(dgate + off + j, d * v * s * (Broadcast(1.0f) - s), rem);
    }
  }
}

void AxpyKernel(float* y, const float* x, float alpha, int64_t n, int threads) {
#pragma omp parallel for simd num_threads(threads) schedule(static)
  for (int64_t i = 0; i < n; ++i) y[i] += alpha * x[i];
}

void ScaleCopyKernel(float* y, const float* x, float alpha, int64_t n, int threads) {
#pragma omp parallel for simd num_threads(threads) schedule(static)
  for (int64_t i = 0; i < n; ++i) y[i] = alpha * x[i];
}

// ---- RMSNorm and RoPE

void RmsNormRows(float* out, float* rstd, const float* x, const float* gain, int64_t rows,
                 int64_t d, float eps, int threads) {
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * d;
    float ss = 0.0f;
#pragma omp simd reduction(+ : ss)
    for (int64_t j = 0; j < d; ++j) ss += xr[j] * xr[j];
    const float s = 1.0f / sqrtf(ss / static_cast<float>(d) + eps);
    rstd[r] = s;
    float* o = out + r * d;
#pragma omp simd
    for (int64_t j = 0; j < d; ++j) o[j] = xr[j] * s * gain[j];
  }
}

// dx = s·(g⊙dy) - s³·x·Σ(g⊙dy⊙x)/D per row; dgain += Σ_rows dy⊙x·s, summed per thread over
// a fixed row range and then across threads in thread order (deterministic).
void RmsNormBackwardRows(float* dx, float* dgain_partials, const float* dout, const float* x,
                         const float* gain, const float* rstd, int64_t rows, int64_t d,
                         int threads) {
#pragma omp parallel num_threads(threads)
  {
    float* dg = dgain_partials + static_cast<int64_t>(omp_get_thread_num()) * d;
    std::memset(dg, 0, d * sizeof(float));
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      const float* xr = x + r * d;
      const float* dy = dout + r * d;
      const float s = rstd[r];
      float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
      for (int64_t j = 0; j < d; ++j) dot += gain[j] * dy[j] * xr[j];
      const float c = s * s * s * dot / static_cast<float>(d);
#pragma omp simd
      for (int64_t j = 0; j < d; ++j) dg[j] += dy[j] * xr[j] * s;
      float* dxr = dx + r * d;  // may alias dy: every dy[j] is read before dx[j] is written
#pragma omp simd
      for (int64_t j = 0; j < d; ++j) dxr[j] = s * gain[j] * dy[j] - c * xr[j];
    }
  }
}

// Rotates pairs (i, i + half) of every head of every row by angle t·inv_freq[i], t = row's
// position along T; sign = +1 forward, -1 for the inverse (backward).
void RopeRows(float* out, const float* x, const float* cos_table, const float* sin_table, int64_t b,
              int64_t t, int64_t heads, int64_t dh, float sign, int threads) {
  const int64_t half = dh / 2;
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t row = 0; row < b * t; ++row) {
    const int64_t pos = row % t;
    const float* c = cos_table + pos * half;
    const float* s = sin_table + pos * half;
    for (int64_t h = 0; h < heads; ++h) {
      const float* xr = x + (row * heads + h) * dh;
      float* o = out + (row * heads + h) * dh;
#pragma omp simd
      for (int64_t i = 0; i < half; ++i) {
        const float x1 = xr[i], x2 = xr[i + half];
        const float si = sign * s[i];
        o[i] = x1 * c[i] - x2 * si;
        o[i + half] = x2 * c[i] + x1 * si;
      }
    }
  }
}

// ---- AdamW

void AdamWKernel(float* p, const float* g, float* m, float* v, int64_t n, float lr, float beta1,
                 float beta2, float eps, float decay, float grad_scale, float bias1, float bias2,
                 int threads) {
  // PyTorch AdamW order: p *= 1 - lr·wd; then p -= lr · m̂ / (sqrt(v̂) + eps).
#pragma omp parallel for simd num_threads(threads) schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const float gi = g[i] * grad_scale;
    const float mi = beta1 * m[i] + (1.0f - beta1) * gi;
    const float vi = beta2 * v[i] + (1.0f - beta2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    const float pi = p[i] * decay;
    p[i] = pi - lr * (mi / bias1) / (sqrtf(vi / bias2) + eps);
  }
}

}  // namespace

#define FB_STRINGIFY_(x) #x
#define FB_STRINGIFY(x) FB_STRINGIFY_(x)

extern const SimdKernels kKernels = {
    .isa = FB_STRINGIFY(FB_SIMD_NS),
    .row_log_sum_exp = RowLogSumExp,
    .row_softmax_scaled = RowSoftmaxScaled,
    .softmax_rows = SoftmaxRows,
    .softmax_backward_rows = SoftmaxBackwardRows,
    .sigmoid_gate_rows = SigmoidGateRows,
    .sigmoid_gate_rows_backward = SigmoidGateRowsBackward,
    .swiglu = SwiGluKernel,
    .swiglu_backward = SwiGluBackwardKernel,
    .feedback_mix = FeedbackMixKernel,
    .feedback_mix_backward = FeedbackMixBackwardKernel,
    .axpy = AxpyKernel,
    .scale_copy = ScaleCopyKernel,
    .rms_norm_rows = RmsNormRows,
    .rms_norm_backward_rows = RmsNormBackwardRows,
    .rope_rows = RopeRows,
    .adamw = AdamWKernel,
};

}  // namespace fullband::ops::cpu::FB_SIMD_NS

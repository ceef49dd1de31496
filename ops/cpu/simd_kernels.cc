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

// ---- GEMM with a long inner dimension

// Note [Long-K GEMM]: the readout's dh = dlogits · E multiplies a chunk's rows (m = 128) by the
// whole vocabulary (k = 100,352) into a small m × D result. oneDNN's sgemm ran this shape well
// below its rate on the model's other GEMMs, however it was posed (transposed, split over k or over
// n). A plain blocked kernel does better (docs/PERF.md, "Op library", times the two on this shape):
// each thread owns a range of C's columns, copies a kc × range panel of B into contiguous nr-wide
// strips (B's rows are D floats apart, so kc rows of one strip would otherwise share a few L1
// sets), and sweeps blocks of A's rows over each strip with a 6 × nr register tile (12
// accumulators, as in BLIS's Haswell kernel). A's rows are read straight from the caller (one
// broadcast per row per k). Each C element is summed by one thread in k order, kc terms at a time,
// whatever the thread count.
constexpr int64_t kGemmNr = 2 * kLanes;
constexpr int64_t kGemmKc = 256;
constexpr int64_t kGemmMc = 132;  // rows of A per sweep over a strip: 22 tiles

// Writes alpha·acc into C's row, adding C (later panels) or beta·C (first panel; beta 0 never
// reads C, so NaN there does not propagate, as in BLAS).
FB_VEC_INLINE void GemmStoreRow(float* c, VecF acc0, VecF acc1, float alpha, float beta,
                                bool first) {
  VecF v0 = Broadcast(alpha) * acc0, v1 = Broadcast(alpha) * acc1;
  if (!first) {
    v0 += LoadU(c);
    v1 += LoadU(c + kLanes);
  } else if (beta != 0.0f) {
    v0 += Broadcast(beta) * LoadU(c);
    v1 += Broadcast(beta) * LoadU(c + kLanes);
  }
  StoreU(c, v0);
  StoreU(c + kLanes, v1);
}

// C[0:6, 0:nr] (+)= alpha · A[0:6, 0:kc] · strip, the strip kc × nr contiguous. The twelve
// accumulators are named, not an array: with acc[6][2] GCC 12 stored them to the stack on every
// k and the kernel ran at a third of this speed.
void GemmTile6(const float* a, int64_t lda, const float* strip, int64_t kc, float* c, int64_t ldc,
               float alpha, float beta, bool first) {
  const float *a0 = a, *a1 = a + lda, *a2 = a + 2 * lda, *a3 = a + 3 * lda, *a4 = a + 4 * lda,
              *a5 = a + 5 * lda;
  VecF c00 = Broadcast(0.0f), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00, c30 = c00,
       c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00;
  for (int64_t p = 0; p < kc; ++p) {
    const VecF b0 = LoadU(strip + p * kGemmNr), b1 = LoadU(strip + p * kGemmNr + kLanes);
    VecF x = Broadcast(a0[p]);
    c00 += x * b0;
    c01 += x * b1;
    x = Broadcast(a1[p]);
    c10 += x * b0;
    c11 += x * b1;
    x = Broadcast(a2[p]);
    c20 += x * b0;
    c21 += x * b1;
    x = Broadcast(a3[p]);
    c30 += x * b0;
    c31 += x * b1;
    x = Broadcast(a4[p]);
    c40 += x * b0;
    c41 += x * b1;
    x = Broadcast(a5[p]);
    c50 += x * b0;
    c51 += x * b1;
  }
  GemmStoreRow(c, c00, c01, alpha, beta, first);
  GemmStoreRow(c + ldc, c10, c11, alpha, beta, first);
  GemmStoreRow(c + 2 * ldc, c20, c21, alpha, beta, first);
  GemmStoreRow(c + 3 * ldc, c30, c31, alpha, beta, first);
  GemmStoreRow(c + 4 * ldc, c40, c41, alpha, beta, first);
  GemmStoreRow(c + 5 * ldc, c50, c51, alpha, beta, first);
}

// The same for the last (fewer than 6) rows of a block, one row at a time.
void GemmTileRows(const float* a, int64_t lda, const float* strip, int64_t kc, float* c,
                  int64_t ldc, float alpha, float beta, bool first, int64_t rows) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* ar = a + r * lda;
    VecF c0 = Broadcast(0.0f), c1 = c0;
    for (int64_t p = 0; p < kc; ++p) {
      const VecF x = Broadcast(ar[p]);
      c0 += x * LoadU(strip + p * kGemmNr);
      c1 += x * LoadU(strip + p * kGemmNr + kLanes);
    }
    GemmStoreRow(c + r * ldc, c0, c1, alpha, beta, first);
  }
}

// C = alpha·A·B + beta·C, all row-major and untransposed; n a multiple of kGemmNr, k > 0.
// pack: kGemmKc · n floats.
void GemmLongK(int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
               const float* b, int64_t ldb, float beta, float* c, int64_t ldc, float* pack,
               int threads) {
  const int64_t strips = n / kGemmNr;
#pragma omp parallel num_threads(threads)
  {
    const int64_t t = omp_get_thread_num(), nt = omp_get_num_threads();
    const int64_t s0 = strips * t / nt, s1 = strips * (t + 1) / nt;
    for (int64_t k0 = 0; k0 < k; k0 += kGemmKc) {
      const int64_t kc = MinI(kGemmKc, k - k0);
      for (int64_t p = 0; p < kc; ++p) {
        const float* brow = b + (k0 + p) * ldb;
        for (int64_t s = s0; s < s1; ++s) {
          float* dst = pack + s * kGemmKc * kGemmNr + p * kGemmNr;
          StoreU(dst, LoadU(brow + s * kGemmNr));
          StoreU(dst + kLanes, LoadU(brow + s * kGemmNr + kLanes));
        }
      }
      const bool first = k0 == 0;
      for (int64_t i0 = 0; i0 < m; i0 += kGemmMc) {
        const int64_t i1 = MinI(m, i0 + kGemmMc);
        for (int64_t s = s0; s < s1; ++s) {
          const float* strip = pack + s * kGemmKc * kGemmNr;
          float* cs = c + s * kGemmNr;
          int64_t i = i0;
          for (; i + 6 <= i1; i += 6) {
            GemmTile6(a + i * lda + k0, lda, strip, kc, cs + i * ldc, ldc, alpha, beta, first);
          }
          GemmTileRows(a + i * lda + k0, lda, strip, kc, cs + i * ldc, ldc, alpha, beta, first,
                       i1 - i);
        }
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
    .gemm_long_k = GemmLongK,
    .gemm_nr = kGemmNr,
    .gemm_kc = kGemmKc,
};

}  // namespace fullband::ops::cpu::FB_SIMD_NS

// CpuBackend: causal grouped-query attention with an optional sliding window.
//
// Note [CPU attention blocking]: work is split into (sequence, head) units over threads; each
// unit walks its queries in blocks of kQueryBlock rows. A block's scores against the keys it
// can see, (kQueryBlock × visible keys) ≤ one (T × T) block per head, are computed with one
// single-threaded GEMM, soft-maxed in place, and multiplied into V with another; no more than
// that block exists per thread at a time. Keys above the diagonal block or below the window
// are never multiplied. Backward recomputes P from the saved log-sum-exp (FlashAttention
// style) and runs per KV head, looping over its query heads, so dK and dV never race.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "ops/cpu/cpu_backend.h"
#include "ops/cpu/simd_kernels.h"

namespace fullband::ops::cpu {
namespace {

constexpr int64_t kQueryBlock = 128;

struct Geometry {
  int64_t b, t, h, hkv, dh, group;
  int64_t window;
  float scale;
  int64_t ldq() const { return h * dh; }
  int64_t ldkv() const { return hkv * dh; }
  // Keys visible from query `row`: [KeyBegin(row), row].
  int64_t KeyBegin(int64_t row) const {
    return window > 0 ? std::max<int64_t>(0, row - window + 1) : 0;
  }
};

Geometry MakeGeometry(const Tensor& q, const Tensor& k, const Tensor& v,
                      const AttentionOptions& options) {
  FB_CHECK(q.rank() == 4 && k.rank() == 4 && v.shape == k.shape)
      << q.ToString() << " " << k.ToString();
  Geometry g;
  g.b = q.dim(0);
  g.t = q.dim(1);
  g.h = q.dim(2);
  g.dh = q.dim(3);
  g.hkv = k.dim(2);
  FB_CHECK(k.dim(0) == g.b && k.dim(1) == g.t && k.dim(3) == g.dh) << k.ToString();
  FB_CHECK(g.hkv > 0 && g.h % g.hkv == 0) << "H " << g.h << " Hkv " << g.hkv;
  FB_CHECK(options.window >= 0);
  g.group = g.h / g.hkv;
  g.window = options.window;
  g.scale = options.scale != 0.0f ? options.scale : 1.0f / std::sqrt(static_cast<float>(g.dh));
  return g;
}

}  // namespace

void CpuBackend::AttentionForward(Tensor out, Tensor lse, Tensor q, Tensor k, Tensor v,
                                  const AttentionOptions& options) {
  const Geometry g = MakeGeometry(q, k, v, options);
  FB_CHECK(out.shape == q.shape) << out.ToString();
  FB_CHECK(lse.shape == Shape({g.b, g.h, g.t})) << lse.ToString();
  const float* qp = q.f32();
  const float* kp = k.f32();
  const float* vp = v.f32();
  float* op = out.f32();
  float* lp = lse.f32();
  const int64_t units = g.b * g.h;
#pragma omp parallel num_threads(threads_)
  {
    float* s = ThreadScratch(omp_get_thread_num(), 0).Floats(kQueryBlock * g.t);
#pragma omp for schedule(static)
    for (int64_t u = 0; u < units; ++u) {
      const int64_t bi = u / g.h, hi = u % g.h, kv = hi / g.group;
      const float* qh = qp + bi * g.t * g.ldq() + hi * g.dh;
      const float* kh = kp + bi * g.t * g.ldkv() + kv * g.dh;
      const float* vh = vp + bi * g.t * g.ldkv() + kv * g.dh;
      float* oh = op + bi * g.t * g.ldq() + hi * g.dh;
      float* lh = lp + (bi * g.h + hi) * g.t;
      for (int64_t t0 = 0; t0 < g.t; t0 += kQueryBlock) {
        const int64_t rows = std::min(kQueryBlock, g.t - t0);
        const int64_t k0 = g.KeyBegin(t0), n = t0 + rows - k0;
        GemmSerial(false, true, rows, n, g.dh, g.scale, qh + t0 * g.ldq(), g.ldq(),
                   kh + k0 * g.ldkv(), g.ldkv(), 0.0f, s, n);
        simd_->softmax_rows(s, lh + t0, rows, n, t0, k0, g.window);
        GemmSerial(false, false, rows, g.dh, n, 1.0f, s, n, vh + k0 * g.ldkv(), g.ldkv(), 0.0f,
                   oh + t0 * g.ldq(), g.ldq());
      }
    }
  }
}

void CpuBackend::AttentionBackward(Tensor dq, Tensor dk, Tensor dv, Tensor dout, Tensor q, Tensor k,
                                   Tensor v, Tensor out, Tensor lse,
                                   const AttentionOptions& options) {
  const Geometry g = MakeGeometry(q, k, v, options);
  FB_CHECK(dq.shape == q.shape && dout.shape == q.shape && out.shape == q.shape);
  FB_CHECK(dk.shape == k.shape && dv.shape == k.shape);
  FB_CHECK(lse.shape == Shape({g.b, g.h, g.t})) << lse.ToString();
  const float* qp = q.f32();
  const float* kp = k.f32();
  const float* vp = v.f32();
  const float* op = out.f32();
  const float* dop = dout.f32();
  const float* lp = lse.f32();
  float* dqp = dq.f32();
  float* dkp = dk.f32();
  float* dvp = dv.f32();
  const int64_t units = g.b * g.hkv;
#pragma omp parallel num_threads(threads_)
  {
    const int me = omp_get_thread_num();
    float* p = ThreadScratch(me, 0).Floats(kQueryBlock * g.t);
    float* dp = ThreadScratch(me, 1).Floats(kQueryBlock * g.t);
    float* rowdot = ThreadScratch(me, 2).Floats(kQueryBlock);
#pragma omp for schedule(static)
    for (int64_t u = 0; u < units; ++u) {
      const int64_t bi = u / g.hkv, kv = u % g.hkv;
      const float* kh = kp + bi * g.t * g.ldkv() + kv * g.dh;
      const float* vh = vp + bi * g.t * g.ldkv() + kv * g.dh;
      float* dkh = dkp + bi * g.t * g.ldkv() + kv * g.dh;
      float* dvh = dvp + bi * g.t * g.ldkv() + kv * g.dh;
      for (int64_t t = 0; t < g.t; ++t) {
        std::memset(dkh + t * g.ldkv(), 0, g.dh * sizeof(float));
        std::memset(dvh + t * g.ldkv(), 0, g.dh * sizeof(float));
      }
      for (int64_t hi = kv * g.group; hi < (kv + 1) * g.group; ++hi) {
        const int64_t qoff = bi * g.t * g.ldq() + hi * g.dh;
        const float* lh = lp + (bi * g.h + hi) * g.t;
        for (int64_t t0 = 0; t0 < g.t; t0 += kQueryBlock) {
          const int64_t rows = std::min(kQueryBlock, g.t - t0);
          const int64_t k0 = g.KeyBegin(t0), n = t0 + rows - k0;
          const float* qb = qp + qoff + t0 * g.ldq();
          const float* dob = dop + qoff + t0 * g.ldq();
          const float* ob = op + qoff + t0 * g.ldq();
          for (int64_t i = 0; i < rows; ++i) {
            float acc = 0.0f;
            for (int64_t d = 0; d < g.dh; ++d) acc += dob[i * g.ldq() + d] * ob[i * g.ldq() + d];
            rowdot[i] = acc;
          }
          GemmSerial(false, true, rows, n, g.dh, g.scale, qb, g.ldq(), kh + k0 * g.ldkv(), g.ldkv(),
                     0.0f, p, n);
          GemmSerial(false, true, rows, n, g.dh, 1.0f, dob, g.ldq(), vh + k0 * g.ldkv(), g.ldkv(),
                     0.0f, dp, n);
          simd_->softmax_backward_rows(p, dp, lh + t0, rowdot, rows, n, t0, k0, g.window);
          // dQ = scale·dS·K, dK += scale·dSᵀ·Q, dV += Pᵀ·dO.
          GemmSerial(false, false, rows, g.dh, n, g.scale, dp, n, kh + k0 * g.ldkv(), g.ldkv(),
                     0.0f, dqp + qoff + t0 * g.ldq(), g.ldq());
          GemmSerial(true, false, n, g.dh, rows, g.scale, dp, n, qb, g.ldq(), 1.0f,
                     dkh + k0 * g.ldkv(), g.ldkv());
          GemmSerial(true, false, n, g.dh, rows, 1.0f, p, n, dob, g.ldq(), 1.0f,
                     dvh + k0 * g.ldkv(), g.ldkv());
        }
      }
    }
  }
}

}  // namespace fullband::ops::cpu

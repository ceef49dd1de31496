// CpuBackend: cross-entropy over a block of logits. Memory-bound: forward reads each logit
// once (online max and sum of exponentials); backward reads it once more and writes dlogits.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "ops/cpu/cpu_backend.h"
#include "ops/cpu/vec_math.h"

namespace fullband::ops::cpu {
namespace {

// log Σ exp(row) in two passes over the row, which stays in L2 between them: the maximum,
// then the sum of exp(x - max). Four independent accumulators keep the SIMD units busy; the
// lanes are combined in a fixed order.
FB_CPU_CLONES float RowLogSumExp(const float* row, int64_t v) {
  const float kNegInf = -std::numeric_limits<float>::infinity();
  VecF m0 = Broadcast(kNegInf), m1 = m0, m2 = m0, m3 = m0;
  int64_t j = 0;
  for (; j + 4 * kLanes <= v; j += 4 * kLanes) {
    m0 = Max(m0, LoadU(row + j));
    m1 = Max(m1, LoadU(row + j + kLanes));
    m2 = Max(m2, LoadU(row + j + 2 * kLanes));
    m3 = Max(m3, LoadU(row + j + 3 * kLanes));
  }
  for (; j < v; j += kLanes) {
    m0 = Max(m0, LoadPartial(row + j, static_cast<int>(std::min<int64_t>(kLanes, v - j)), kNegInf));
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
    const int rem = static_cast<int>(std::min<int64_t>(kLanes, v - j));
    s0 += Exp(LoadPartial(row + j, rem, kNegInf) - vm);
  }
  return m + std::log(ReduceSum((s0 + s1) + (s2 + s3)));
}

FB_CPU_CLONES void RowGrad(float* drow, const float* row, int64_t v, float lse, float coef) {
  const VecF vl = Broadcast(lse);
  const VecF vc = Broadcast(coef);
  int64_t j = 0;
  for (; j + kLanes <= v; j += kLanes) StoreU(drow + j, vc * Exp(LoadU(row + j) - vl));
  if (j < v) {
    const int rem = static_cast<int>(v - j);
    StorePartial(drow + j, vc * Exp(LoadPartial(row + j, rem, 0.0f) - vl), rem);
  }
}

}  // namespace

void CpuBackend::CrossEntropyForward(Tensor loss, Tensor lse, Tensor logits, Tensor targets,
                                     int32_t ignore_id) {
  FB_CHECK(logits.rank() == 2) << logits.ToString();
  const int64_t n = logits.dim(0), v = logits.dim(1);
  FB_CHECK(loss.numel() == n && lse.numel() == n && targets.numel() == n);
  const float* x = logits.f32();
  const int32_t* tg = targets.i32();
  float* lp = loss.f32();
  float* lsep = lse.f32();
#pragma omp parallel for num_threads(threads_) schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const float* row = x + i * v;
    const float l = RowLogSumExp(row, v);
    lsep[i] = l;
    if (tg[i] == ignore_id) {
      lp[i] = 0.0f;
    } else {
      FB_CHECK(tg[i] >= 0 && tg[i] < v) << "target " << tg[i] << " outside [0, " << v << ")";
      lp[i] = l - row[tg[i]];
    }
  }
}

void CpuBackend::CrossEntropyBackward(Tensor dlogits, Tensor logits, Tensor lse, Tensor targets,
                                      float ce_scale, float z_scale, int32_t ignore_id) {
  FB_CHECK(logits.rank() == 2 && dlogits.shape == logits.shape) << logits.ToString();
  const int64_t n = logits.dim(0), v = logits.dim(1);
  FB_CHECK(lse.numel() == n && targets.numel() == n);
  const float* x = logits.f32();
  float* dx = dlogits.f32();
  const int32_t* tg = targets.i32();
  const float* lsep = lse.f32();
#pragma omp parallel for num_threads(threads_) schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    float* drow = dx + i * v;
    if (tg[i] == ignore_id) {
      std::fill(drow, drow + v, 0.0f);
      continue;
    }
    FB_CHECK(tg[i] >= 0 && tg[i] < v) << "target " << tg[i] << " outside [0, " << v << ")";
    // d/dx of ce_scale·(lse - x_t) + z_scale·lse² is (ce_scale + 2·z_scale·lse)·p - ce_scale·1_t.
    RowGrad(drow, x + i * v, v, lsep[i], ce_scale + 2.0f * z_scale * lsep[i]);
    drow[tg[i]] -= ce_scale;
  }
}

}  // namespace fullband::ops::cpu

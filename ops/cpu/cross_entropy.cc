// CpuBackend: cross-entropy over a block of logits. Memory-bound: forward reads each logit
// once (online max and sum of exponentials); backward reads it once more and writes dlogits.

#include <algorithm>

#include "ops/cpu/cpu_backend.h"
#include "ops/cpu/simd_kernels.h"

namespace fullband::ops::cpu {
void CpuBackend::CrossEntropyForward(Tensor loss, Tensor lse, Tensor logits, int64_t ld,
                                     Tensor targets, int32_t ignore_id) {
  FB_CHECK(logits.rank() == 2) << logits.ToString();
  const int64_t n = logits.dim(0), v = logits.dim(1);
  FB_CHECK(ld >= v) << "CrossEntropyForward: row pitch " << ld << " < V = " << v;
  FB_CHECK(loss.numel() == n && lse.numel() == n && targets.numel() == n);
  const float* x = logits.f32();
  const int32_t* tg = targets.i32();
  float* lp = loss.f32();
  float* lsep = lse.f32();
#pragma omp parallel for num_threads(threads_) schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const float* row = x + i * ld;
    const float l = simd_->row_log_sum_exp(row, v);
    lsep[i] = l;
    if (tg[i] == ignore_id || tg[i] == kOtherShard) {
      lp[i] = 0.0f;
    } else {
      FB_CHECK(tg[i] >= 0 && tg[i] < v) << "target " << tg[i] << " outside [0, " << v << ")";
      lp[i] = l - row[tg[i]];
    }
  }
}

void CpuBackend::CrossEntropyBackward(Tensor dlogits, Tensor logits, int64_t ld, Tensor lse,
                                      Tensor targets, float ce_scale, float z_scale,
                                      int32_t ignore_id) {
  FB_CHECK(logits.rank() == 2 && dlogits.shape == logits.shape) << logits.ToString();
  const int64_t n = logits.dim(0), v = logits.dim(1);
  FB_CHECK(ld >= v) << "CrossEntropyBackward: row pitch " << ld << " < V = " << v;
  FB_CHECK(lse.numel() == n && targets.numel() == n);
  const float* x = logits.f32();
  float* dx = dlogits.f32();
  const int32_t* tg = targets.i32();
  const float* lsep = lse.f32();
#pragma omp parallel for num_threads(threads_) schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    float* drow = dx + i * ld;
    if (tg[i] == ignore_id) {
      std::fill(drow, drow + v, 0.0f);
      continue;
    }
    FB_CHECK(tg[i] == kOtherShard || (tg[i] >= 0 && tg[i] < v))
        << "target " << tg[i] << " outside [0, " << v << ")";
    // d/dx of ce_scale·(lse - x_t) + z_scale·lse² is (ce_scale + 2·z_scale·lse)·p - ce_scale·1_t.
    simd_->row_softmax_scaled(drow, x + i * ld, v, lsep[i], ce_scale + 2.0f * z_scale * lsep[i]);
    if (tg[i] != kOtherShard) drow[tg[i]] -= ce_scale;
  }
}

}  // namespace fullband::ops::cpu

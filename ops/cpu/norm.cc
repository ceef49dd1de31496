// CpuBackend: RMSNorm (also the per-head QK norm) and RoPE.

#include <algorithm>
#include <cmath>
#include <vector>

#include "ops/cpu/cpu_backend.h"
#include "ops/cpu/simd_kernels.h"

namespace fullband::ops::cpu {
void CpuBackend::RmsNormForward(Tensor out, Tensor rstd, Tensor x, Tensor gain, float eps) {
  FB_CHECK(x.rank() >= 1 && out.shape == x.shape) << out.ToString() << " vs " << x.ToString();
  const int64_t d = x.dim(x.rank() - 1);
  const int64_t rows = x.numel() / std::max<int64_t>(d, 1);
  FB_CHECK_EQ(gain.numel(), d);
  FB_CHECK_EQ(rstd.numel(), rows);
  simd_->rms_norm_rows(out.f32(), rstd.f32(), x.f32(), gain.f32(), rows, d, eps, threads_);
}

void CpuBackend::RmsNormBackward(Tensor dx, Tensor dgain, Tensor dout, Tensor x, Tensor gain,
                                 Tensor rstd) {
  FB_CHECK(dx.shape == x.shape && dout.shape == x.shape);
  const int64_t d = x.dim(x.rank() - 1);
  const int64_t rows = x.numel() / std::max<int64_t>(d, 1);
  FB_CHECK_EQ(gain.numel(), d);
  FB_CHECK_EQ(dgain.numel(), d);
  FB_CHECK_EQ(rstd.numel(), rows);
  float* partials = ThreadScratch(0, 0).Floats(static_cast<size_t>(threads_) * d);
  simd_->rms_norm_backward_rows(dx.f32(), partials, dout.f32(), x.f32(), gain.f32(), rstd.f32(),
                                rows, d, threads_);
  float* dg = dgain.f32();
  for (int th = 0; th < threads_; ++th) {
    const float* p = partials + static_cast<int64_t>(th) * d;
    for (int64_t j = 0; j < d; ++j) dg[j] += p[j];
  }
}

namespace {

// cos/sin of t·theta^(-2i/Dh) for t < T, i < Dh/2, computed in double and rounded once.
void RopeTables(float* cos_table, float* sin_table, int64_t t, int64_t dh, double theta) {
  const int64_t half = dh / 2;
  std::vector<double> inv_freq(half);
  for (int64_t i = 0; i < half; ++i) {
    inv_freq[i] = std::pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(dh));
  }
  for (int64_t pos = 0; pos < t; ++pos) {
    for (int64_t i = 0; i < half; ++i) {
      const double angle = static_cast<double>(pos) * inv_freq[i];
      cos_table[pos * half + i] = static_cast<float>(std::cos(angle));
      sin_table[pos * half + i] = static_cast<float>(std::sin(angle));
    }
  }
}

}  // namespace

const float* CpuBackend::RopeTable(int64_t t, int64_t dh, float theta) {
  if (rope_t_ < t || rope_dh_ != dh || rope_theta_ != theta) {
    rope_table_.resize(static_cast<size_t>(t * dh));
    RopeTables(rope_table_.data(), rope_table_.data() + t * dh / 2, t, dh, theta);
    rope_t_ = t;
    rope_dh_ = dh;
    rope_theta_ = theta;
  }
  // Rows of the cos table for positions < t, then the sin table at offset rope_t_·Dh/2.
  return rope_table_.data();
}

void CpuBackend::RopeForward(Tensor out, Tensor x, float theta) {
  FB_CHECK(x.rank() == 4 && out.shape == x.shape) << x.ToString();
  const int64_t b = x.dim(0), t = x.dim(1), heads = x.dim(2), dh = x.dim(3);
  FB_CHECK(dh % 2 == 0) << "RoPE needs an even head_dim, got " << dh;
  const float* table = RopeTable(t, dh, theta);
  simd_->rope_rows(out.f32(), x.f32(), table, table + rope_t_ * dh / 2, b, t, heads, dh, 1.0f,
                   threads_);
}

void CpuBackend::RopeBackward(Tensor dx, Tensor dout, float theta) {
  FB_CHECK(dout.rank() == 4 && dx.shape == dout.shape) << dout.ToString();
  const int64_t b = dout.dim(0), t = dout.dim(1), heads = dout.dim(2), dh = dout.dim(3);
  FB_CHECK(dh % 2 == 0) << "RoPE needs an even head_dim, got " << dh;
  const float* table = RopeTable(t, dh, theta);
  simd_->rope_rows(dx.f32(), dout.f32(), table, table + rope_t_ * dh / 2, b, t, heads, dh, -1.0f,
                   threads_);
}

}  // namespace fullband::ops::cpu

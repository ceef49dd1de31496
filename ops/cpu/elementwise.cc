// CpuBackend: embedding, head gate, SwiGLU, shift, feedback mix, residual, fill/scale.
// The vectorized loops are in ops/cpu/simd_kernels.cc.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "ops/cpu/cpu_backend.h"
#include "ops/cpu/simd_kernels.h"

namespace fullband::ops::cpu {
namespace {

void CheckF32Cpu(const Tensor& t) {
  FB_CHECK(t.dtype == DType::kF32 && t.device == Device::kCpu) << t.ToString();
}

}  // namespace

void CpuBackend::Fill(Tensor x, float value) {
  CheckF32Cpu(x);
  float* p = x.f32();
  const int64_t n = x.numel();
#pragma omp parallel for simd num_threads(threads_) schedule(static)
  for (int64_t i = 0; i < n; ++i) p[i] = value;
}

void CpuBackend::Zero(Tensor x) {
  FB_CHECK(x.device == Device::kCpu);
  std::memset(x.data, 0, x.bytes());
}

void CpuBackend::Scale(Tensor x, float alpha) {
  CheckF32Cpu(x);
  simd_->scale_copy(x.f32(), x.f32(), alpha, x.numel(), threads_);
}

void CpuBackend::EmbeddingForward(Tensor out, Tensor table, Tensor ids) {
  CheckF32Cpu(out);
  CheckF32Cpu(table);
  FB_CHECK(table.rank() == 2 && out.rank() == 2 && ids.rank() == 1);
  const int64_t n = ids.dim(0), d = table.dim(1), v = table.dim(0);
  FB_CHECK(out.shape == Shape({n, d})) << out.ToString() << " vs " << table.ToString();
  const int32_t* id = ids.i32();
  const float* t = table.f32();
  float* o = out.f32();
#pragma omp parallel for num_threads(threads_) schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    if (id[i] == kOtherShard) {
      std::memset(o + i * d, 0, d * sizeof(float));
      continue;
    }
    FB_CHECK(id[i] >= 0 && id[i] < v) << "token id " << id[i] << " outside [0, " << v << ")";
    std::memcpy(o + i * d, t + static_cast<int64_t>(id[i]) * d, d * sizeof(float));
  }
}

void CpuBackend::EmbeddingBackward(Tensor dtable, Tensor dout, Tensor ids) {
  CheckF32Cpu(dtable);
  CheckF32Cpu(dout);
  FB_CHECK(dtable.rank() == 2 && dout.rank() == 2 && ids.rank() == 1);
  const int64_t n = ids.dim(0), d = dtable.dim(1), v = dtable.dim(0);
  FB_CHECK(dout.shape == Shape({n, d}));
  const int32_t* id = ids.i32();
  const float* g = dout.f32();
  float* t = dtable.f32();
  // Threads own disjoint column ranges, so repeated ids never race and the order of
  // accumulation (row order) is fixed.
#pragma omp parallel num_threads(threads_)
  {
    const int nt = omp_get_num_threads(), me = omp_get_thread_num();
    const int64_t per = (d + nt - 1) / nt;
    const int64_t c0 = std::min(d, me * per), c1 = std::min(d, c0 + per);
    for (int64_t i = 0; i < n; ++i) {
      if (id[i] == kOtherShard) continue;
      FB_CHECK(id[i] >= 0 && id[i] < v) << "token id " << id[i] << " outside [0, " << v << ")";
      float* row = t + static_cast<int64_t>(id[i]) * d;
      const float* src = g + i * d;
      for (int64_t j = c0; j < c1; ++j) row[j] += src[j];
    }
  }
}

void CpuBackend::HeadGateForward(Tensor out, Tensor x, Tensor gate) {
  CheckF32Cpu(out);
  CheckF32Cpu(x);
  CheckF32Cpu(gate);
  FB_CHECK(out.shape == x.shape && x.rank() >= 2);
  const int64_t dh = x.dim(x.rank() - 1);
  const int64_t rows = x.numel() / dh;
  FB_CHECK_EQ(gate.numel(), rows) << "gate " << gate.ToString() << " for x " << x.ToString();
  simd_->sigmoid_gate_rows(out.f32(), x.f32(), gate.f32(), rows, dh, threads_);
}

void CpuBackend::HeadGateBackward(Tensor dx, Tensor dgate, Tensor dout, Tensor x, Tensor gate) {
  CheckF32Cpu(dx);
  CheckF32Cpu(dgate);
  FB_CHECK(dx.shape == x.shape && dout.shape == x.shape && dgate.shape == gate.shape);
  const int64_t dh = x.dim(x.rank() - 1);
  const int64_t rows = x.numel() / dh;
  FB_CHECK_EQ(gate.numel(), rows);
  simd_->sigmoid_gate_rows_backward(dx.f32(), dgate.f32(), dout.f32(), x.f32(), gate.f32(), rows,
                                    dh, threads_);
}

void CpuBackend::SwiGluForward(Tensor out, Tensor gate, Tensor up) {
  CheckF32Cpu(out);
  FB_CHECK(out.shape == gate.shape && gate.shape == up.shape);
  simd_->swiglu(out.f32(), gate.f32(), up.f32(), out.numel(), threads_);
}

void CpuBackend::SwiGluBackward(Tensor dgate, Tensor dup, Tensor dout, Tensor gate, Tensor up) {
  CheckF32Cpu(dgate);
  FB_CHECK(dgate.shape == gate.shape && dup.shape == gate.shape && dout.shape == gate.shape &&
           up.shape == gate.shape);
  simd_->swiglu_backward(dgate.f32(), dup.f32(), dout.f32(), gate.f32(), up.f32(), gate.numel(),
                         threads_);
}

void CpuBackend::ShiftRightForward(Tensor out, Tensor x) {
  CheckF32Cpu(out);
  FB_CHECK(x.rank() == 3 && out.shape == x.shape) << x.ToString();
  FB_CHECK(out.data != x.data) << "ShiftRight does not work in place";
  const int64_t b = x.dim(0), t = x.dim(1), d = x.dim(2);
  const float* src = x.f32();
  float* dst = out.f32();
#pragma omp parallel for num_threads(threads_) schedule(static)
  for (int64_t i = 0; i < b * t; ++i) {
    if (i % t == 0) {
      std::memset(dst + i * d, 0, d * sizeof(float));
    } else {
      std::memcpy(dst + i * d, src + (i - 1) * d, d * sizeof(float));
    }
  }
}

void CpuBackend::ShiftRightBackward(Tensor dx, Tensor dout) {
  CheckF32Cpu(dx);
  FB_CHECK(dout.rank() == 3 && dx.shape == dout.shape);
  FB_CHECK(dx.data != dout.data) << "ShiftRight does not work in place";
  const int64_t b = dout.dim(0), t = dout.dim(1), d = dout.dim(2);
  const float* src = dout.f32();
  float* dst = dx.f32();
#pragma omp parallel for num_threads(threads_) schedule(static)
  for (int64_t i = 0; i < b * t; ++i) {
    if (i % t == t - 1) {
      std::memset(dst + i * d, 0, d * sizeof(float));
    } else {
      std::memcpy(dst + i * d, src + (i + 1) * d, d * sizeof(float));
    }
  }
}

void CpuBackend::FeedbackMixForward(Tensor out, Tensor value, Tensor gate, Tensor e, Tensor plain) {
  CheckF32Cpu(out);
  FB_CHECK(out.rank() == 2 && value.shape == out.shape && gate.shape == out.shape &&
           e.shape == out.shape);
  FB_CHECK_EQ(plain.numel(), out.dim(0));
  simd_->feedback_mix(out.f32(), value.f32(), gate.f32(), e.f32(), plain.u8(), out.dim(0),
                      out.dim(1), threads_);
}

void CpuBackend::FeedbackMixBackward(Tensor dvalue, Tensor dgate, Tensor de, Tensor dout,
                                     Tensor value, Tensor gate, Tensor plain) {
  CheckF32Cpu(dvalue);
  FB_CHECK(dout.rank() == 2 && dvalue.shape == dout.shape && dgate.shape == dout.shape &&
           de.shape == dout.shape && value.shape == dout.shape && gate.shape == dout.shape);
  FB_CHECK_EQ(plain.numel(), dout.dim(0));
  simd_->feedback_mix_backward(dvalue.f32(), dgate.f32(), de.f32(), dout.f32(), value.f32(),
                               gate.f32(), plain.u8(), dout.dim(0), dout.dim(1), threads_);
}

void CpuBackend::ResidualForward(Tensor x, Tensor branch, float scale) {
  CheckF32Cpu(x);
  FB_CHECK(x.shape == branch.shape);
  simd_->axpy(x.f32(), branch.f32(), scale, x.numel(), threads_);
}

void CpuBackend::ResidualBackward(Tensor dbranch, Tensor dx, float scale) {
  CheckF32Cpu(dbranch);
  FB_CHECK(dbranch.shape == dx.shape);
  simd_->scale_copy(dbranch.f32(), dx.f32(), scale, dx.numel(), threads_);
}

}  // namespace fullband::ops::cpu

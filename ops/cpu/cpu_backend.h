// CpuBackend: the reference-grade, fast CPU implementation of ops::Backend.
//
// GEMMs go to oneDNN's sgemm (JIT AVX-512/AVX2 kernels chosen by CPUID, so the result does not
// depend on OPENBLAS_CORETYPE), except products with a long inner dimension, which have their
// own kernel (Note [Long-K GEMM] in ops/cpu/simd_kernels.cc); every other op is a loop nest here,
// vectorized for the widest instruction set the CPU runs (ops/cpu/simd_kernels.h) and parallelized
// with OpenMP over `num_threads` threads using static schedules, so a given thread count gives
// bitwise-identical results run to run. Large allocations are mmapped with transparent huge pages
// and pre-faulted in parallel. Per-op temporaries come from per-thread scratch buffers that grow
// once and are reused.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "ops/backend.h"
#include "ops/cpu/simd_kernels.h"

namespace fullband::ops::cpu {

// A per-thread scratch buffer: grows (never shrinks) and is reused across calls.
class Scratch {
 public:
  Scratch() = default;
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  ~Scratch();
  // At least `count` floats, 64-byte aligned; contents unspecified.
  float* Floats(size_t count);

 private:
  float* data_ = nullptr;
  size_t capacity_ = 0;  // floats
};

// Single-threaded row-major sgemm (the caller is already inside a parallel region), and the
// one on `threads` threads. Same semantics as Backend::Gemm for one matrix.
void GemmSerial(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
                int64_t ldc);
void GemmThreaded(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                  const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
                  int64_t ldc, int threads);

// Whether the backend runs this product on `simd`'s long-K kernel (Note [Long-K GEMM] in
// ops/cpu/simd_kernels.cc) rather than oneDNN: untransposed, and k at least 32·max(m, n). The
// kernel beats oneDNN where k dwarfs m and n (the readout's dh GEMM on small, k = 196·max(m, n);
// docs/PERF.md, "Op library"), matches it on square-ish shapes and loses to it where k is only
// a few times max(m, n), hence the threshold.
bool UsesLongKGemm(const SimdKernels& simd, bool trans_a, bool trans_b, int64_t m, int64_t n,
                   int64_t k);

class CpuBackend final : public Backend {
 public:
  // num_threads 0: all cores. simd: the vectorized loops to run (DefaultSimdKernels()).
  CpuBackend(int num_threads, const SimdKernels* simd);
  ~CpuBackend() override;

  Device device() const override { return Device::kCpu; }
  std::string name() const override;
  int num_threads() const { return threads_; }

  StatusOr<void*> Allocate(size_t bytes) override;
  void Free(void* ptr) override;
  void CopyFromHost(void* dst, const void* host_src, size_t bytes) override;
  void CopyToHost(void* host_dst, const void* src, size_t bytes) override;
  void Copy(void* dst, const void* src, size_t bytes) override;
  void Fill(Tensor x, float value) override;
  void Zero(Tensor x) override;
  void Synchronize() override {}

  using Backend::Gemm;
  void Gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
            const float* a, int64_t lda, int64_t stride_a, const float* b, int64_t ldb,
            int64_t stride_b, float beta, float* c, int64_t ldc, int64_t stride_c,
            int64_t batch) override;

  void EmbeddingForward(Tensor out, Tensor table, Tensor ids) override;
  void EmbeddingBackward(Tensor dtable, Tensor dout, Tensor ids) override;
  void RmsNormForward(Tensor out, Tensor rstd, Tensor x, Tensor gain, float eps) override;
  void RmsNormBackward(Tensor dx, Tensor dgain, Tensor dout, Tensor x, Tensor gain,
                       Tensor rstd) override;
  void RopeForward(Tensor out, Tensor x, float theta) override;
  void RopeBackward(Tensor dx, Tensor dout, float theta) override;
  void AttentionForward(Tensor out, Tensor lse, Tensor q, Tensor k, Tensor v,
                        const AttentionOptions& options) override;
  void AttentionBackward(Tensor dq, Tensor dk, Tensor dv, Tensor dout, Tensor q, Tensor k, Tensor v,
                         Tensor out, Tensor lse, const AttentionOptions& options) override;
  void HeadGateForward(Tensor out, Tensor x, Tensor gate) override;
  void HeadGateBackward(Tensor dx, Tensor dgate, Tensor dout, Tensor x, Tensor gate) override;
  void SwiGluForward(Tensor out, Tensor gate, Tensor up) override;
  void SwiGluBackward(Tensor dgate, Tensor dup, Tensor dout, Tensor gate, Tensor up) override;
  void ShiftRightForward(Tensor out, Tensor x) override;
  void ShiftRightBackward(Tensor dx, Tensor dout) override;
  void FeedbackMixForward(Tensor out, Tensor value, Tensor gate, Tensor e, Tensor plain) override;
  void FeedbackMixBackward(Tensor dvalue, Tensor dgate, Tensor de, Tensor dout, Tensor value,
                           Tensor gate, Tensor plain) override;
  void ResidualForward(Tensor x, Tensor branch, float scale) override;
  void ResidualBackward(Tensor dbranch, Tensor dx, float scale) override;
  void CrossEntropyForward(Tensor loss, Tensor lse, Tensor logits, int64_t ld, Tensor targets,
                           int32_t ignore_id) override;
  void CrossEntropyBackward(Tensor dlogits, Tensor logits, int64_t ld, Tensor lse, Tensor targets,
                            float ce_scale, float z_scale, int32_t ignore_id) override;
  void AdamWStep(Tensor param, Tensor grad, Tensor m, Tensor v,
                 const AdamWOptions& options) override;
  double SumSquares(Tensor x) override;
  void Scale(Tensor x, float alpha) override;

 private:
  // One product: the long-K kernel where it wins, else oneDNN.
  void GemmOne(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
               const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
               int64_t ldc);
  Scratch& ThreadScratch(int thread, int slot);
  // cos/sin tables for RoPE, cached for the last (T, Dh, theta) seen (ops/cpu/norm.cc).
  const float* RopeTable(int64_t t, int64_t dh, float theta);

  int threads_;
  const SimdKernels* simd_;  // the vectorized loops for this CPU
  std::mutex alloc_mu_;      // guards sizes_
  std::unordered_map<void*, size_t> sizes_;
  static constexpr int kScratchSlots = 3;
  std::vector<std::unique_ptr<Scratch>> scratch_;  // threads_ * kScratchSlots
  Scratch gemm_pack_;                              // B panels of the long-K GEMM
  std::vector<float> rope_table_;
  int64_t rope_t_ = 0, rope_dh_ = 0;
  float rope_theta_ = 0.0f;
};

}  // namespace fullband::ops::cpu

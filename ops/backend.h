// ops::Backend: the op library's interface. One method pair (forward, backward) per op of the
// model (docs/MODEL.md), implemented by the CPU backend (ops/cpu/) and the CUDA backend
// (ops/cuda/), and checked op by op against float64 references (tests/ops/).
//
// Conventions, for every op:
//  - Arguments come in one order: outputs, saved-for-backward, inputs, then sizes/options.
//  - Tensors are contiguous row-major views on this backend's device (ops/tensor.h); shapes
//    are checked with FB_CHECK. Shape comments use N = B·T rows.
//  - Note [Gradient accumulation]: backward ops ADD into parameter gradients (dgain,
//    dtable, ...) and OVERWRITE activation gradients (dx, dq, ...). Callers zero parameter
//    gradients once per step and sum activation gradients that meet at a fork themselves.
//  - All float math is float32; reductions accumulate in float32 unless stated. On the CPU,
//    a given backend configuration (thread count) gives bitwise-identical results run to run.
//  - Ops are asynchronous on CUDA (one stream per backend) and synchronous on the CPU;
//    methods that return host values (SumSquares) synchronize.
// Thread-safety: a Backend is used by one thread at a time; it may use threads internally.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "common/status.h"
#include "ops/tensor.h"

namespace fullband::ops {

// An embedding id or cross-entropy target that names a row of another rank's vocabulary shard
// (tensor parallelism, docs/PARALLEL.md): the embedding gives it a zero row and no gradient;
// cross-entropy counts its row with the log-sum-exp of the local logits, loss 0, and a gradient
// without the one-hot term. The caller combines the shards' rows.
constexpr int32_t kOtherShard = INT32_MIN;

struct AttentionOptions {
  // 0: plain causal attention. W > 0: query t sees key s only when t - W < s <= t
  // (docs/MODEL.md: query t sees keys t − W < s ≤ t).
  int64_t window = 0;
  // Scale of q·k; 0 means 1/sqrt(Dh).
  float scale = 0.0f;
};

struct AdamWOptions {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;  // decoupled: p -= lr * weight_decay * p (PyTorch AdamW order)
  int64_t step = 1;           // 1-based step number, for bias correction
  float grad_scale = 1.0f;    // gradients are multiplied by this first (global-norm clipping)
};

class Backend {
 public:
  virtual ~Backend() = default;

  virtual Device device() const = 0;
  virtual std::string name() const = 0;  // "cpu (avx512, 2 threads)", "cuda (NVIDIA H200)"

  // ---- Memory. Allocation is for arenas (ops/arena.h), not for per-op temporaries.
  // Returns RESOURCE_EXHAUSTED when the device is out of memory. Memory is 64-byte aligned.
  virtual StatusOr<void*> Allocate(size_t bytes) = 0;
  virtual void Free(void* ptr) = 0;
  // Host copies are synchronous: on return the host buffer may be reused (FromHost) or read
  // (ToHost), and earlier ops on the backend have completed.
  virtual void CopyFromHost(void* dst, const void* host_src, size_t bytes) = 0;
  virtual void CopyToHost(void* host_dst, const void* src, size_t bytes) = 0;
  virtual void Copy(void* dst, const void* src, size_t bytes) = 0;  // device to device
  virtual void Fill(Tensor x, float value) = 0;                     // f32 only
  virtual void Zero(Tensor x) = 0;                                  // any dtype
  virtual void Synchronize() = 0;

  // ---- GEMM. Row-major C[i] = alpha * op(A[i]) op(B[i]) + beta * C[i] for i < batch, with
  // op(A) (m, k), op(B) (k, n), C (m, n); op(X) = Xᵀ when trans_x. Leading dimensions are
  // row strides of the stored matrices; stride_x is the element offset between batch items
  // (0 broadcasts one matrix). beta = 0 ignores C's previous contents (even NaN).
  virtual void Gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                    const float* a, int64_t lda, int64_t stride_a, const float* b, int64_t ldb,
                    int64_t stride_b, float beta, float* c, int64_t ldc, int64_t stride_c,
                    int64_t batch) = 0;
  // Single matrix product, the common case.
  void Gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
            const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
            int64_t ldc) {
    Gemm(trans_a, trans_b, m, n, k, alpha, a, lda, 0, b, ldb, 0, beta, c, ldc, 0, 1);
  }

  // ---- Embedding. out[n] = table[ids[n]].  out (N, D), table (V, D), ids (N) i32 in [0, V)
  // or kOtherShard (a zero row, no gradient).
  virtual void EmbeddingForward(Tensor out, Tensor table, Tensor ids) = 0;
  // dtable[ids[n]] += dout[n] (a parameter gradient: accumulates, repeated ids add up).
  virtual void EmbeddingBackward(Tensor dtable, Tensor dout, Tensor ids) = 0;

  // ---- RMSNorm over the last axis: out = x / sqrt(mean(x²) + eps) ⊙ gain.
  // x, out (N, D); gain (D); rstd (N) saves 1/sqrt(mean(x²) + eps). Also the per-head QK
  // norm, with x viewed as (B·T·H, Dh). out may alias x.
  virtual void RmsNormForward(Tensor out, Tensor rstd, Tensor x, Tensor gain, float eps) = 0;
  // dx (N, D) overwritten (may alias dout), dgain (D) accumulated.
  virtual void RmsNormBackward(Tensor dx, Tensor dgain, Tensor dout, Tensor x, Tensor gain,
                               Tensor rstd) = 0;

  // ---- RoPE, rotate-half (NeoX) pairing (i, i + Dh/2), angle pos·theta^(-2i/Dh), position of
  // row t = t (positions run over the packed sequence). x, out (B, T, nH, Dh), Dh even; out
  // may alias x.
  virtual void RopeForward(Tensor out, Tensor x, float theta) = 0;
  // The inverse rotation applied to dout. dx may alias dout.
  virtual void RopeBackward(Tensor dx, Tensor dout, float theta) = 0;

  // ---- Causal grouped-query attention. q (B, T, H, Dh), k and v (B, T, Hkv, Dh) with
  // H % Hkv == 0 (query head h reads kv head h / (H / Hkv)); out (B, T, H, Dh);
  // lse (B, H, T) saves each query row's log-sum-exp of scaled scores.
  virtual void AttentionForward(Tensor out, Tensor lse, Tensor q, Tensor k, Tensor v,
                                const AttentionOptions& options) = 0;
  // dq (B, T, H, Dh), dk and dv (B, T, Hkv, Dh), all overwritten.
  virtual void AttentionBackward(Tensor dq, Tensor dk, Tensor dv, Tensor dout, Tensor q, Tensor k,
                                 Tensor v, Tensor out, Tensor lse,
                                 const AttentionOptions& options) = 0;

  // ---- Headwise output gate: out[b,t,h,:] = x[b,t,h,:] · sigmoid(gate[b,t,h]).
  // x, out (B, T, H, Dh) (or any (N, H, Dh)); gate (B, T, H) logits. out may alias x.
  virtual void HeadGateForward(Tensor out, Tensor x, Tensor gate) = 0;
  // dx (N, H, Dh) and dgate (N, H) overwritten.
  virtual void HeadGateBackward(Tensor dx, Tensor dgate, Tensor dout, Tensor x, Tensor gate) = 0;

  // ---- SwiGLU: out = silu(gate) ⊙ up, all (N, F).
  virtual void SwiGluForward(Tensor out, Tensor gate, Tensor up) = 0;
  // dgate, dup (N, F) overwritten; elementwise, so dgate may alias gate and dup may alias up.
  virtual void SwiGluBackward(Tensor dgate, Tensor dup, Tensor dout, Tensor gate, Tensor up) = 0;

  // ---- Shift right along T: out[b, 0] = 0, out[b, t] = x[b, t-1]. x, out (B, T, D), no alias.
  virtual void ShiftRightForward(Tensor out, Tensor x) = 0;
  // dx[b, t] = dout[b, t+1], dx[b, T-1] = 0. No alias.
  virtual void ShiftRightBackward(Tensor dx, Tensor dout) = 0;

  // ---- Feedback mix (docs/MODEL.md): out[n] = plain[n] ? e[n] : value[n] ⊙ sigmoid(gate[n]),
  // where value = shift(ĥ) W_uᵀ and gate = RMSNorm(e; norm_g) W_gᵀ are computed by the caller. out,
  // value, gate, e (N, D); plain (N) u8, nonzero = plain position.
  virtual void FeedbackMixForward(Tensor out, Tensor value, Tensor gate, Tensor e,
                                  Tensor plain) = 0;
  // dvalue, dgate, de (N, D) overwritten (zero where they do not contribute).
  virtual void FeedbackMixBackward(Tensor dvalue, Tensor dgate, Tensor de, Tensor dout,
                                   Tensor value, Tensor gate, Tensor plain) = 0;

  // ---- Scaled residual add (depth scaling): x += scale · branch, both (N, D).
  virtual void ResidualForward(Tensor x, Tensor branch, float scale) = 0;
  // dbranch = scale · dx (overwritten); dx itself flows on unchanged to the earlier layer.
  virtual void ResidualBackward(Tensor dbranch, Tensor dx, float scale) = 0;

  // ---- Cross-entropy over a block of logits (N, V); the readout (ops/readout_loss.h) feeds it
  // chunks of rows so that (B·T, V) logits never exist at once. Row i starts at element i·ld
  // (ld ≥ V; the readout pads it, Note [Logits pitch] in ops/readout_loss.cc). targets (N) i32;
  // rows whose target == ignore_id are not counted. Writes lse (N) and loss (N) =
  // lse - logits[target] (0 for ignored rows and for targets kOtherShard). The z-loss term of a
  // row is lse².
  virtual void CrossEntropyForward(Tensor loss, Tensor lse, Tensor logits, int64_t ld,
                                   Tensor targets, int32_t ignore_id) = 0;
  // dlogits (N, V), rows ld apart like logits, overwritten, may alias logits: for counted rows
  // with p = softmax(logits),
  //   dlogits = ce_scale · (p - onehot(target)) + z_scale · 2 · lse · p;  ignored rows get 0,
  // rows whose target is kOtherShard no one-hot term (p then uses the given lse: the global
  // one, for a vocabulary shard).
  virtual void CrossEntropyBackward(Tensor dlogits, Tensor logits, int64_t ld, Tensor lse,
                                    Tensor targets, float ce_scale, float z_scale,
                                    int32_t ignore_id) = 0;

  // ---- Optimizer. One AdamW step over flat f32 tensors of equal numel (param, grad, m, v).
  virtual void AdamWStep(Tensor param, Tensor grad, Tensor m, Tensor v,
                         const AdamWOptions& options) = 0;
  // Σ x² accumulated in float64, returned to the host (synchronizes). For global-norm clipping.
  virtual double SumSquares(Tensor x) = 0;
  // x *= alpha.
  virtual void Scale(Tensor x, float alpha) = 0;
};

struct BackendOptions {
  Device device = Device::kCpu;
  int num_threads = 0;   // CPU: worker threads, 0 = all cores
  int device_index = 0;  // CUDA: which GPU
  // CPU: the instruction set of the vectorized loops ("sse", "avx2", "avx512"); empty = the
  // widest this CPU runs (ops/cpu/simd_kernels.h).
  std::string cpu_isa{};
  // CUDA: the plugin file to try first (Note [CUDA plugin] below).
  std::string cuda_plugin{};
};

// Creates a backend. UNAVAILABLE when the device is not present or fullband was built
// without it (the message says which).
StatusOr<std::unique_ptr<Backend>> CreateBackend(const BackendOptions& options);

// Note [CUDA plugin]: the CUDA backend lives in a plugin, libfullband_cuda.so, loaded once per
// process by the first call below that needs it, and never unloaded (backends may outlive any
// owner). It is looked for at `cuda_plugin` (when given), then next to the running executable
// and in its ../ops, then in the build tree it was compiled in; later calls use the plugin
// loaded then, whatever `cuda_plugin` they name.

// The backend's sgemm rate at 2048³ in GFLOP/s (best of 3 after a warmup): the peak that MFU
// is measured against.
double MeasurePeakGflops(Backend& backend);

// True when a CUDA backend can be created here (built with CUDA and a GPU is visible).
bool CudaAvailable(const std::string& cuda_plugin = {});

// The CUDA plugin's C entry point `symbol` (ops/cuda/plugin.h), for the components above ops
// that the plugin implements (ops/nccl_communicator.cc); cast it to the plugin.h type of that
// name. UNAVAILABLE when the plugin cannot be loaded or fullband was built without CUDA (the
// message says which), or when the plugin lacks `symbol`.
StatusOr<void*> CudaPluginSymbol(const char* symbol);

}  // namespace fullband::ops

// The layer of the K-pass step as forward/backward pairs (internal to model/model.cc): the
// attention half and the FFN half of one transformer layer on the activation layout of
// model/activations.h, the linear maps they are built from, and the views of a layer's
// parameters. Backward overwrites the activation gradients of Scratch and adds into the
// parameter gradients (ops/backend.h). Note [Recomputation] in layers.cc says how `selective`
// and `full` recompute a layer.
//
// Tensor parallelism (Megatron, docs/PARALLEL.md): a layer's Q, K, V, gate, W1 and W3 are
// column-parallel (this rank's heads and FFN columns), Wo and W2 row-parallel; the layer sums
// the row-parallel outputs over the group in forward (one all-reduce per half) and the
// gradient at the normed input in backward (one per half), through TpGroup. Dims are a rank's:
// its heads, KV heads and FFN width.
#pragma once

#include <cstdint>

#include "comm/communicator.h"
#include "common/config.h"
#include "common/status.h"
#include "model/activations.h"
#include "model/param_table.h"
#include "ops/backend.h"

namespace fullband::model {

constexpr float kEps = 1e-6f;  // every RMSNorm's epsilon

// The parameters of one layer (views into the parameter or the gradient arena).
struct LayerParams {
  Tensor attn_norm, wq, wk, wv, q_norm, k_norm, wgate, wo, ffn_norm, w1, w3, w2;
};

// The parameters of layer `l` inside an arena carved by `table` (parameters or gradients).
LayerParams ViewLayer(const ParameterTable& table, float* base, ops::Device device, int64_t l);

// The tensor-parallel group of a model (none: one rank): the sums the layers and the readout
// need, in place. `device` reduces the backend's memory, `host` host memory (the same
// communicator on the CPU; NCCL and MPI on CUDA). A failed collective is kept and the later
// ones skipped, so the step runs to its end and returns the first error (the group is then
// unusable).
class TpGroup {
 public:
  TpGroup(comm::Communicator* device, comm::Communicator* host) : device_(device), host_(host) {}
  int size() const { return host_ == nullptr ? 1 : host_->size(); }
  int rank() const { return host_ == nullptr ? 0 : host_->rank(); }
  // x (the backend's memory) summed over the group (a no-op alone).
  void Sum(Tensor x);
  // The same for host memory.
  void SumHost(void* data, int64_t count, comm::CommType type);
  // `count` elements of every rank, rank r's at out + r·count (host memory; a group of two or
  // more ranks).
  void Gather(const void* in, void* out, int64_t count, comm::CommType type);
  const Status& status() const { return status_; }
  void ClearStatus() { status_ = OkStatus(); }

 private:
  comm::Communicator* device_;
  comm::Communicator* host_;
  Status status_;
};

struct Dims {
  int64_t b, t, n, d, h, kv, dh, f, l;  // h, kv, f: this tensor-parallel rank's
  float r;                              // residual branch scale
  TpGroup* tp;
};
// For `m` as one tensor-parallel rank holds it (LocalConfig).
Dims MakeDims(const ModelConfig& m, int64_t b, int64_t t, TpGroup* tp);
// The config of one of `tp` ranks' share: heads, KV heads, FFN width and vocabulary divided.
ModelConfig LocalConfig(const ModelConfig& m, int tp);

// out (N, O) = in (N, I) wᵀ with w (O, I).
void Linear(ops::Backend& be, Tensor out, Tensor in, Tensor w);
// din (N, I) = beta·din + dout (N, O) w.
void LinearBackwardInput(ops::Backend& be, Tensor din, Tensor dout, Tensor w, float beta);
// dw (O, I) += doutᵀ in.
void LinearBackwardWeight(ops::Backend& be, Tensor dw, Tensor dout, Tensor in);
void CopyTensor(ops::Backend& be, Tensor dst, Tensor src);

// g1, g3 and s again from the saved ffn-norm output (Note [Recomputation]).
void RecomputeFfn(ops::Backend& be, const LayerParams& p, const LayerActs& a);
// Attention half of `layer` on x_in: the saved state in `a` and, with `project`,
// x_mid = x_in + r · (gated attention) Woᵀ (branch: the projection's output).
void AttentionHalfForward(ops::Backend& be, const ModelConfig& cfg, const Dims& d,
                          const LayerParams& p, const LayerActs& a, Tensor x_in, Tensor branch,
                          int64_t layer, bool project);
// FFN half from a.x_mid: m, g1, g3, s and, unless x_out is empty,
// x_out = x_mid + r · s W2ᵀ (branch: the projection's output).
void FfnHalfForward(ops::Backend& be, const Dims& d, const LayerParams& p, const LayerActs& a,
                    Tensor x_out, Tensor branch);
// s.dx: the gradient at the layer's output on entry, at x_mid on return.
void FfnHalfBackward(ops::Backend& be, const Dims& d, const LayerParams& p, const LayerParams& g,
                     const LayerActs& a, const Scratch& s);
// s.dx: the gradient at x_mid on entry, at x_in on return.
void AttentionHalfBackward(ops::Backend& be, const ModelConfig& cfg, const Dims& d,
                           const LayerParams& p, const LayerParams& g, const LayerActs& a,
                           Tensor x_in, const Scratch& s, int64_t layer);

}  // namespace fullband::model

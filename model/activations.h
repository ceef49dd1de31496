// The activation layout of the K-pass step: the shape a model is built for (ModelShape), what
// each layer and pass keeps for backward (LayerActs, PassActs), the step-wide scratch
// (Scratch), and CarveActivations, which lays all of them out in one arena (Note [Activation
// layout] in activations.cc). Only ModelShape is for callers of the model (model.h); the rest
// is model.cc's and layers.cc's. Tensors are views; nothing here owns memory.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <vector>

#include "common/check.h"
#include "common/config.h"
#include "ops/tensor.h"

namespace fullband::model {

// The largest step a model is built for: its activation arena holds exactly this much.
struct ModelShape {
  int64_t max_batch = 1;  // B
  int64_t max_seq = 1;    // T (inputs; a batch row holds T + 1 tokens)
  int max_passes = 1;     // K
  Recompute recompute = Recompute::kNone;
  // The parameter and gradient arenas (params(), grads()) hold a multiple of this many floats,
  // zero past the table's total_numel(): ZeRO-1 cuts them into equal shards.
  int64_t param_multiple = 1;
};

// Carves tensors out of one block of the activation arena by a bump offset, or (with a null
// base) only measures how many bytes they need. Overlay() lays tensors whose lifetimes are
// disjoint over the same bytes (Note [Activation layout]); every view stays 64-byte aligned.
class Carver {
 public:
  Carver(char* base, ops::Device device) : base_(base), device_(device) {}
  ops::Tensor Take(ops::DType dtype, ops::Shape shape) {
    const size_t start = (offset_ + kAlign - 1) / kAlign * kAlign;
    offset_ = start + static_cast<size_t>(shape.numel()) * ops::DTypeSize(dtype);
    end_ = std::max(end_, offset_);
    return ops::Tensor(base_ == nullptr ? nullptr : base_ + start, dtype, shape, device_);
  }
  ops::Tensor F32(ops::Shape shape) { return Take(ops::DType::kF32, shape); }
  // Carves every alternative from the same offset and continues past the largest one.
  void Overlay(std::initializer_list<std::function<void()>> alternatives) {
    const size_t start = offset_;
    size_t end = start;
    for (const std::function<void()>& carve : alternatives) {
      offset_ = start;
      carve();
      end = std::max(end, offset_);
    }
    offset_ = end;
  }
  size_t bytes() const { return end_; }

 private:
  static constexpr size_t kAlign = 64;
  char* base_;
  ops::Device device_;
  size_t offset_ = 0, end_ = 0;
};

// A view of the first shape.numel() floats of `t` (two shapes over one buffer).
inline ops::Tensor View(ops::Tensor t, ops::Shape shape) {
  FB_CHECK_LE(shape.numel(), t.numel());
  return ops::Tensor(t.data, ops::DType::kF32, shape, t.device);
}

using ops::Tensor;

// What one layer's forward keeps for its backward, and the attention backward's scratch.
// N = B·T rows.
struct LayerActs {
  // Attention half.
  Tensor a, rstd_a;            // (N, D), (N): attention-norm output
  Tensor q_raw, rstd_q, q;     // (N, H, Dh) projection, (N·H), normed + rotated
  Tensor k_raw, rstd_k, k, v;  // (N, Hkv, Dh) ...
  Tensor o, lse;               // (N, H, Dh) attention output, (B, H, T)
  Tensor gate, og;             // (N, H) gate logits, (N, H, Dh) gated output
  // FFN half. The backward overwrites s, g1 and g3 with their own gradients.
  Tensor x_mid;      // (N, D) residual after attention
  Tensor m, rstd_m;  // (N, D), (N): ffn-norm output
  Tensor g1, g3, s;  // (N, F): gate, up, swiglu
  // Attention backward, over the FFN half (dead by then). dog is og itself with attn_gate.
  Tensor dog, dgate;  // (N, H, Dh), (N, H)
  Tensor dk, dv;      // (N, Hkv, Dh)
};

// One pass. Under `full`, x[0], x[L], value, u and every LayerActs are shared scratch.
struct PassActs {
  std::vector<Tensor> x;          // L + 1 tensors (N, D): x[l] enters layer l, x[L] is the top
  std::vector<LayerActs> layers;  // L
  Tensor rstd_in, rstd_f;         // (N): norm_in of the pass input, the final norm
  Tensor dh;  // (N, D) gradient at h: the readout's (written in forward) + post-norm feedback
  // Feedback passes (k >= 2) only.
  Tensor shifted, value, u;  // (N, D): shift(ĥ), shift(ĥ) W_uᵀ, the fused input before norm_in
  Tensor plain;              // (N) u8
};

// Step-wide tensors. The forward-only and the backward-only ones share bytes.
struct Scratch {
  Tensor tokens, targets;    // (N) i32
  Tensor row_loss, row_lse;  // (N) readout scratch
  Tensor e;                  // (N, D) token embeddings
  Tensor gate_fb, rstd_g;    // (N, D) RMSNorm(e; norm_g) W_gᵀ, (N)              [K >= 2]
  // Forward only.
  Tensor h;          // (N, D) latest pass's top state; ĥ of the next pass (jitter added in place)
  Tensor branch;     // (N, D) a residual branch's output; jitter upload
  Tensor ng;         // (N, D) RMSNorm(e; norm_g)                                     [K >= 2]
  Tensor logits;     // (rows, V) readout chunk (under `full`, in the layer scratch)
  Tensor x0, x_top;  // (N, D) the current pass's x[0] and x[L]                       [full]
  // Backward only.
  Tensor dx;                 // (N, D) gradient flowing down the residual stream
  Tensor dbranch, dout_att;  // (N, D) a branch's gradient; (N, H, Dh) over the same bytes
  Tensor dxn, dq;            // (N, D) a norm's input gradient; (N, H, Dh) over the same bytes
  Tensor da, du;             // (N, D)
  Tensor de, dg_fb;          // (N, D) gradients at e and at gate_fb, summed over passes
  Tensor dxl;                // (N, D) gradient at x_L from the next pass      [pre_norm, K >= 2]
};

// Rows of one readout chunk for `rows` rows of a model of `vocab_size` (Note [Readout chunk]).
int64_t ReadoutChunkRows(int64_t vocab_size, int64_t rows);

// Lays out every activation and scratch tensor of a step for `shape`; with a measuring Carver
// (null base) this only computes the arena size (Note [Activation layout]).
void CarveActivations(Carver& c, const ModelConfig& m, const ModelShape& shape, Scratch& s,
                      LayerActs& shared, std::vector<PassActs>& passes);

}  // namespace fullband::model

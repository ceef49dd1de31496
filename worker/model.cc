// The K-pass step. Reading order: activation layout (Carver, LayerActs, PassActs, Scratch and
// Note [Activation layout]), the layer's attention and FFN halves as forward/backward pairs, the
// input stage (pass 1 / feedback fusion), then Step().
#include "worker/model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <optional>

#include "checkpoint/safetensors.h"
#include "ops/readout_loss.h"

namespace fullband::worker {

using ops::Backend;
using ops::DType;
using ops::Shape;
using ops::Tensor;

StatusOr<Recompute> ParseRecompute(const std::string& s) {
  if (s == "none") return Recompute::kNone;
  if (s == "selective") return Recompute::kSelective;
  if (s == "full") return Recompute::kFull;
  return InvalidArgumentError("recompute: expected one of none, selective, full, got '" + s + "'");
}

void PlainMask(const int32_t* inputs, int64_t t, int64_t eod_id, bool mixin, Rng& rng,
               uint8_t* plain) {
  int64_t a = 0;
  while (a < t) {
    int64_t b = a + 1;  // segment [a, b): ends after the next EOD input token
    while (b < t && inputs[b - 1] != eod_id) ++b;
    const int64_t len = b - a;
    const int64_t p = mixin ? 1 + static_cast<int64_t>(rng.Below(static_cast<uint64_t>(len))) : 1;
    for (int64_t i = a; i < b; ++i) plain[i] = (i - a) < p ? 1 : 0;
    a = b;
  }
}

Rng StepDrawRng(uint64_t seed, int pass, int64_t row, int kind) {
  return Rng(seed ^ (static_cast<uint64_t>(pass) * 0x9E3779B97F4A7C15ull) ^
             (static_cast<uint64_t>(row) * 0xD1B54A32D192ED03ull) ^
             (static_cast<uint64_t>(kind) * 0xBF58476D1CE4E5B9ull));
}

namespace {

// Carves tensors out of one block of the activation arena by a bump offset, or (with a null
// base) only measures how many bytes they need. Overlay() lays tensors whose lifetimes are
// disjoint over the same bytes (Note [Activation layout]); every view stays 64-byte aligned.
class Carver {
 public:
  Carver(char* base, ops::Device device) : base_(base), device_(device) {}
  Tensor Take(DType dtype, Shape shape) {
    const size_t start = (offset_ + kAlign - 1) / kAlign * kAlign;
    offset_ = start + static_cast<size_t>(shape.numel()) * ops::DTypeSize(dtype);
    end_ = std::max(end_, offset_);
    return Tensor(base_ == nullptr ? nullptr : base_ + start, dtype, shape, device_);
  }
  Tensor F32(Shape shape) { return Take(DType::kF32, shape); }
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
Tensor View(Tensor t, Shape shape) {
  FB_CHECK_LE(shape.numel(), t.numel());
  return Tensor(t.data, DType::kF32, shape, t.device);
}

// The parameters of one layer (views into the parameter or the gradient arena).
struct LayerParams {
  Tensor attn_norm, wq, wk, wv, q_norm, k_norm, wgate, wo, ffn_norm, w1, w3, w2;
};

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

void CarveAttentionHalf(Carver& c, const ModelConfig& m, int64_t b, int64_t t, LayerActs& x) {
  const int64_t n = b * t, h = m.n_heads, kv = m.n_kv_heads, dh = m.head_dim;
  x.a = c.F32({n, m.d_model});
  x.rstd_a = c.F32({n});
  x.q_raw = c.F32({n, h, dh});
  x.rstd_q = c.F32({n * h});
  x.q = c.F32({n, h, dh});
  x.k_raw = c.F32({n, kv, dh});
  x.rstd_k = c.F32({n * kv});
  x.k = c.F32({n, kv, dh});
  x.v = c.F32({n, kv, dh});
  x.o = c.F32({n, h, dh});
  x.lse = c.F32({b, h, t});
  x.gate = c.F32({n, h});
  x.og = c.F32({n, h, dh});
}

// `ffn`: whether to carve g1, g3 and s (selective recomputation shares them instead).
void CarveFfnHalf(Carver& c, const ModelConfig& m, int64_t n, bool ffn, LayerActs& x) {
  x.x_mid = c.F32({n, m.d_model});
  x.m = c.F32({n, m.d_model});
  x.rstd_m = c.F32({n});
  if (ffn) {
    x.g1 = c.F32({n, m.ffn_dim});
    x.g3 = c.F32({n, m.ffn_dim});
    x.s = c.F32({n, m.ffn_dim});
  }
}

void CarveAttentionGrads(Carver& c, const ModelConfig& m, int64_t n, LayerActs& x) {
  const int64_t h = m.n_heads, kv = m.n_kv_heads, dh = m.head_dim;
  x.dog = m.attn_gate ? x.og : c.F32({n, h, dh});
  x.dgate = c.F32({n, h});
  x.dk = c.F32({n, kv, dh});
  x.dv = c.F32({n, kv, dh});
}

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

// Note [Activation layout]: one arena, carved once by CarveActivations() (the table), with
// tensors whose lifetimes are disjoint laid over the same bytes by Carver::Overlay():
// - Forward-only tensors (h, branch, ng, logits, x0, x_top) over backward-only ones (dx, …,
//   dg_fb): the first backward write follows the last forward read.
// - In every layer, the attention backward's scratch (dgate, dk, dv; dog too without the gate,
//   with it dog overwrites og) over the FFN half (x_mid, m, g1, g3, s), which the FFN
//   backward, run first, is the last to read. dout_att and dq live in dbranch and dxn, whose
//   contents are dead when they are written. The FFN backward writes ds, dg1 and dg3 over s,
//   g1 and g3 (each read for the last time just before).
// - Under `full`, one LayerActs serves every layer and pass, and its attention half (with its
//   gradient scratch) lies over its FFN half: the backward of a layer recomputes the attention
//   half twice, once for x_mid and once after the FFN backward (Note [Recomputation]). The
//   readout's logits chunk and the feedback input stage (value, u) lie there too, as they are
//   used only between layers. x[0] and x[L] are recomputed in backward into du and dxn.
// Pass 1 carves no feedback tensors.
// How much this saves: docs/PERF.md (training step).

constexpr float kEps = 1e-6f;
// Note [Readout chunk]: the readout (ops/readout_loss.h) runs in chunks of rows whose logits
// take at most kReadoutChunkFloats. Each chunk streams the whole (V, D) embedding through three
// GEMMs and reads and writes all of dE, and a chunk's rows are the inner dimension of the dE
// GEMM, so larger chunks are faster: on small (V = 100,352) one pass's readout took 6.35 s in
// chunks of 64 rows, 5.64 s in 128 and 5.52 s in 256 (medians of 7 interleaved runs, Zen 3).
// Under `full` the chunk adds to the peak memory: 128 rows of 100,352 keep small within 45% of
// `none`. The budget gives small those 128 rows and tiny (V = 4,096) its whole batch. The chunk
// depends on the model and batch only, the same in every recomputation mode, so that they stay
// bit-identical (dE is summed chunk by chunk).
constexpr int64_t kReadoutChunkFloats = int64_t{128} * 100352;

int64_t ReadoutChunkRows(int64_t vocab_size, int64_t rows) {
  return std::min(rows, std::max<int64_t>(64, kReadoutChunkFloats / vocab_size));
}

// Lays out every activation and scratch tensor of a step; with a measuring Carver this only
// computes the arena size.
void CarveActivations(Carver& c, const ModelConfig& m, const ModelShape& shape, Scratch& s,
                      LayerActs& shared, std::vector<PassActs>& passes) {
  const int64_t b = shape.max_batch, t = shape.max_seq, n = b * t, d = m.d_model;
  const int64_t h = m.n_heads, dh = m.head_dim;
  const int64_t wide = std::max(d, h * dh);  // dbranch / dout_att and dxn / dq
  const bool feedback = shape.max_passes >= 2;
  const bool full = shape.recompute == Recompute::kFull;
  const bool selective = shape.recompute == Recompute::kSelective;
  const Shape logits_shape{ReadoutChunkRows(m.vocab_size, n), ops::LogitsPitch(m.vocab_size)};
  s.tokens = c.Take(DType::kI32, {n});
  s.targets = c.Take(DType::kI32, {n});
  s.row_loss = c.F32({n});
  s.row_lse = c.F32({n});
  s.e = c.F32({n, d});
  if (feedback) {
    s.gate_fb = c.F32({n, d});
    s.rstd_g = c.F32({n});
  }
  c.Overlay({[&] {  // forward only
               s.h = c.F32({n, d});
               s.branch = c.F32({n, d});
               if (feedback) s.ng = c.F32({n, d});
               if (!full) s.logits = c.F32(logits_shape);
               if (full) {
                 s.x0 = c.F32({n, d});
                 s.x_top = c.F32({n, d});
               }
             },
             [&] {  // backward only
               s.dx = c.F32({n, d});
               const Tensor db = c.F32({n, wide}), dn = c.F32({n, wide});
               s.dbranch = View(db, {n, d});
               s.dout_att = View(db, {n, h, dh});
               s.dxn = View(dn, {n, d});
               s.dq = View(dn, {n, h, dh});
               s.da = c.F32({n, d});
               s.du = c.F32({n, d});
               s.de = c.F32({n, d});
               if (feedback) s.dg_fb = c.F32({n, d});
               if (feedback && m.feedback_state == FeedbackState::kPreNorm) s.dxl = c.F32({n, d});
             }});

  // The recomputation scratch: under `full` one whole layer, under `selective` the FFN.
  Tensor shared_value, shared_u;
  if (full) {
    c.Overlay({[&] {
                 CarveAttentionHalf(c, m, b, t, shared);
                 CarveAttentionGrads(c, m, n, shared);
               },
               [&] { CarveFfnHalf(c, m, n, /*ffn=*/true, shared); },
               [&] { s.logits = c.F32(logits_shape); },
               [&] {
                 if (!feedback) return;
                 shared_value = c.F32({n, d});
                 shared_u = c.F32({n, d});
               }});
  } else if (selective) {
    c.Overlay({[&] {
                 shared.g1 = c.F32({n, m.ffn_dim});
                 shared.g3 = c.F32({n, m.ffn_dim});
                 shared.s = c.F32({n, m.ffn_dim});
               },
               [&] { CarveAttentionGrads(c, m, n, shared); }});
  }

  passes.assign(shape.max_passes, PassActs{});
  for (int k = 1; k <= shape.max_passes; ++k) {
    PassActs& p = passes[k - 1];
    for (int64_t l = 0; l <= m.n_layers; ++l) {
      if (full && l == 0) {
        p.x.push_back(s.x0);
      } else if (full && l == m.n_layers) {
        p.x.push_back(s.x_top);
      } else {
        p.x.push_back(c.F32({n, d}));
      }
    }
    for (int64_t l = 0; l < m.n_layers; ++l) {
      if (full) {
        p.layers.push_back(shared);
        continue;
      }
      LayerActs a;
      CarveAttentionHalf(c, m, b, t, a);
      if (selective) {
        CarveFfnHalf(c, m, n, /*ffn=*/false, a);
        a.g1 = shared.g1;
        a.g3 = shared.g3;
        a.s = shared.s;
        a.dog = m.attn_gate ? a.og : shared.dog;
        a.dgate = shared.dgate;
        a.dk = shared.dk;
        a.dv = shared.dv;
      } else {
        c.Overlay({[&] { CarveFfnHalf(c, m, n, /*ffn=*/true, a); },
                   [&] { CarveAttentionGrads(c, m, n, a); }});
      }
      p.layers.push_back(a);
    }
    p.rstd_in = c.F32({n});
    p.rstd_f = c.F32({n});
    p.dh = c.F32({n, d});
    if (k >= 2) {
      p.shifted = c.F32({n, d});
      p.plain = c.Take(DType::kU8, {n});
      p.value = full ? shared_value : c.F32({n, d});
      p.u = full ? shared_u : c.F32({n, d});
    }
  }
}

// out (N, O) = in (N, I) wᵀ with w (O, I).
void Linear(Backend& be, Tensor out, Tensor in, Tensor w) {
  const int64_t o = w.dim(0), i = w.dim(1), n = in.numel() / i;
  FB_CHECK_EQ(out.numel(), n * o);
  be.Gemm(false, true, n, o, i, 1.0f, in.f32(), i, w.f32(), i, 0.0f, out.f32(), o);
}
// din (N, I) = beta·din + dout (N, O) w.
void LinearBackwardInput(Backend& be, Tensor din, Tensor dout, Tensor w, float beta) {
  const int64_t o = w.dim(0), i = w.dim(1), n = dout.numel() / o;
  FB_CHECK_EQ(din.numel(), n * i);
  be.Gemm(false, false, n, i, o, 1.0f, dout.f32(), o, w.f32(), i, beta, din.f32(), i);
}
// dw (O, I) += doutᵀ in.
void LinearBackwardWeight(Backend& be, Tensor dw, Tensor dout, Tensor in) {
  const int64_t o = dw.dim(0), i = dw.dim(1), n = dout.numel() / o;
  FB_CHECK_EQ(in.numel(), n * i);
  be.Gemm(true, false, o, i, n, 1.0f, dout.f32(), o, in.f32(), i, 1.0f, dw.f32(), i);
}
void CopyTensor(Backend& be, Tensor dst, Tensor src) {
  FB_CHECK_EQ(dst.numel(), src.numel());
  be.Copy(dst.data, src.data, src.bytes());
}

struct Dims {
  int64_t b, t, n, d, h, kv, dh, f, l;
  float r;  // residual branch scale
};

Dims MakeDims(const ModelConfig& m, int64_t b, int64_t t) {
  return Dims{
      b,          t,
      b * t,      m.d_model,
      m.n_heads,  m.n_kv_heads,
      m.head_dim, m.ffn_dim,
      m.n_layers, m.depth_scaling ? 1.0f / std::sqrt(static_cast<float>(m.n_layers)) : 1.0f};
}

// Note [Recomputation]: with `selective`, g1, g3 and s of every layer share one scratch and
// are recomputed from the saved ffn-norm output m in backward (two GEMMs and a SwiGLU). With
// `full`, a pass keeps only x[1..L-1] (and its feedback input shift(ĥ)); the backward of pass k
// first recomputes the input stage (x[0]), then for each layer, top down: the attention half
// (for x_mid), the FFN half (its output only for the top layer, whose x[L] the final norm's
// backward needs), the FFN backward, the attention half again without its output projection,
// and the attention backward. Every recomputation repeats the forward's operations on the same
// inputs, so all three modes give the same gradients bit for bit.
void RecomputeFfn(Backend& be, const LayerParams& p, const LayerActs& a) {
  Linear(be, a.g1, a.m, p.w1);
  Linear(be, a.g3, a.m, p.w3);
  be.SwiGluForward(a.s, a.g1, a.g3);
}

// Attention half of `layer` on x_in: the saved state in `a` and, with `project`,
// x_mid = x_in + r · (gated attention) Woᵀ (branch: the projection's output).
void AttentionHalfForward(Backend& be, const ModelConfig& cfg, const Dims& d, const LayerParams& p,
                          const LayerActs& a, Tensor x_in, Tensor branch, int64_t layer,
                          bool project) {
  be.RmsNormForward(a.a, a.rstd_a, x_in, p.attn_norm, kEps);
  Linear(be, a.q_raw, a.a, p.wq);
  Linear(be, a.k_raw, a.a, p.wk);
  Linear(be, a.v, a.a, p.wv);
  if (cfg.qk_norm) {
    be.RmsNormForward(a.q.Reshape({d.n * d.h, d.dh}), a.rstd_q, a.q_raw.Reshape({d.n * d.h, d.dh}),
                      p.q_norm, kEps);
    be.RmsNormForward(a.k.Reshape({d.n * d.kv, d.dh}), a.rstd_k,
                      a.k_raw.Reshape({d.n * d.kv, d.dh}), p.k_norm, kEps);
  } else {
    CopyTensor(be, a.q, a.q_raw);
    CopyTensor(be, a.k, a.k_raw);
  }
  const float theta = static_cast<float>(cfg.rope_theta);
  const Tensor q4 = a.q.Reshape({d.b, d.t, d.h, d.dh}), k4 = a.k.Reshape({d.b, d.t, d.kv, d.dh});
  be.RopeForward(q4, q4, theta);
  be.RopeForward(k4, k4, theta);
  ops::AttentionOptions ao;
  ao.window = cfg.IsFullAttentionLayer(layer) ? 0 : cfg.window;
  be.AttentionForward(a.o.Reshape({d.b, d.t, d.h, d.dh}), a.lse, q4, k4,
                      a.v.Reshape({d.b, d.t, d.kv, d.dh}), ao);
  Tensor att = a.o;
  if (cfg.attn_gate) {
    Linear(be, a.gate, a.a, p.wgate);
    be.HeadGateForward(a.og, a.o, a.gate);
    att = a.og;
  }
  if (!project) return;
  Linear(be, branch, att, p.wo);
  // Under `full`, x_mid lies over the attention half, dead from here on.
  CopyTensor(be, a.x_mid, x_in);
  be.ResidualForward(a.x_mid, branch, d.r);
}

// FFN half from a.x_mid: m, g1, g3, s and, unless x_out is empty,
// x_out = x_mid + r · s W2ᵀ (branch: the projection's output).
void FfnHalfForward(Backend& be, const Dims& d, const LayerParams& p, const LayerActs& a,
                    Tensor x_out, Tensor branch) {
  be.RmsNormForward(a.m, a.rstd_m, a.x_mid, p.ffn_norm, kEps);
  RecomputeFfn(be, p, a);
  if (x_out.empty()) return;
  Linear(be, branch, a.s, p.w2);
  CopyTensor(be, x_out, a.x_mid);
  be.ResidualForward(x_out, branch, d.r);
}

// s.dx: the gradient at the layer's output on entry, at x_mid on return.
void FfnHalfBackward(Backend& be, const Dims& d, const LayerParams& p, const LayerParams& g,
                     const LayerActs& a, const Scratch& s) {
  be.ResidualBackward(s.dbranch, s.dx, d.r);
  LinearBackwardWeight(be, g.w2, s.dbranch, a.s);
  LinearBackwardInput(be, a.s, s.dbranch, p.w2, 0.0f);  // a.s now holds ds
  be.SwiGluBackward(a.g1, a.g3, a.s, a.g1, a.g3);       // g1, g3 now hold dg1, dg3
  LinearBackwardInput(be, s.da, a.g1, p.w1, 0.0f);
  LinearBackwardInput(be, s.da, a.g3, p.w3, 1.0f);
  LinearBackwardWeight(be, g.w1, a.g1, a.m);
  LinearBackwardWeight(be, g.w3, a.g3, a.m);
  be.RmsNormBackward(s.dxn, g.ffn_norm, s.da, a.x_mid, p.ffn_norm, a.rstd_m);
  be.ResidualForward(s.dx, s.dxn, 1.0f);
}

// s.dx: the gradient at x_mid on entry, at x_in on return.
void AttentionHalfBackward(Backend& be, const ModelConfig& cfg, const Dims& d, const LayerParams& p,
                           const LayerParams& g, const LayerActs& a, Tensor x_in, const Scratch& s,
                           int64_t layer) {
  be.ResidualBackward(s.dbranch, s.dx, d.r);
  const Tensor att = cfg.attn_gate ? a.og : a.o;
  LinearBackwardWeight(be, g.wo, s.dbranch, att);
  LinearBackwardInput(be, a.dog, s.dbranch, p.wo, 0.0f);  // with the gate, over og
  Tensor datt = a.dog;
  float da_beta = 0.0f;
  if (cfg.attn_gate) {
    be.HeadGateBackward(s.dout_att, a.dgate, a.dog, a.o, a.gate);  // over dbranch
    LinearBackwardWeight(be, g.wgate, a.dgate, a.a);
    LinearBackwardInput(be, s.da, a.dgate, p.wgate, 0.0f);
    datt = s.dout_att;
    da_beta = 1.0f;
  }
  ops::AttentionOptions ao;
  ao.window = cfg.IsFullAttentionLayer(layer) ? 0 : cfg.window;
  const Tensor dq4 = s.dq.Reshape({d.b, d.t, d.h, d.dh});  // over dxn
  const Tensor dk4 = a.dk.Reshape({d.b, d.t, d.kv, d.dh});
  be.AttentionBackward(dq4, dk4, a.dv.Reshape({d.b, d.t, d.kv, d.dh}),
                       datt.Reshape({d.b, d.t, d.h, d.dh}), a.q.Reshape({d.b, d.t, d.h, d.dh}),
                       a.k.Reshape({d.b, d.t, d.kv, d.dh}), a.v.Reshape({d.b, d.t, d.kv, d.dh}),
                       a.o.Reshape({d.b, d.t, d.h, d.dh}), a.lse, ao);
  const float theta = static_cast<float>(cfg.rope_theta);
  be.RopeBackward(dq4, dq4, theta);
  be.RopeBackward(dk4, dk4, theta);
  if (cfg.qk_norm) {  // in place: gradients at q_raw and k_raw
    const Tensor dqr = s.dq.Reshape({d.n * d.h, d.dh}), dkr = a.dk.Reshape({d.n * d.kv, d.dh});
    be.RmsNormBackward(dqr, g.q_norm, dqr, a.q_raw.Reshape({d.n * d.h, d.dh}), p.q_norm, a.rstd_q);
    be.RmsNormBackward(dkr, g.k_norm, dkr, a.k_raw.Reshape({d.n * d.kv, d.dh}), p.k_norm, a.rstd_k);
  }
  LinearBackwardWeight(be, g.wq, s.dq, a.a);
  LinearBackwardWeight(be, g.wk, a.dk, a.a);
  LinearBackwardWeight(be, g.wv, a.dv, a.a);
  LinearBackwardInput(be, s.da, s.dq, p.wq, da_beta);
  LinearBackwardInput(be, s.da, a.dk, p.wk, 1.0f);
  LinearBackwardInput(be, s.da, a.dv, p.wv, 1.0f);
  be.RmsNormBackward(s.dxn, g.attn_norm, s.da, x_in, p.attn_norm, a.rstd_a);  // dq is dead
  be.ResidualForward(s.dx, s.dxn, 1.0f);  // the gradient at x_in
}

// h (rows of T·D) += ξ, ξ ~ U(-jitter, jitter): row r's drawn in order from its own generator
// (Note [Step draws]) on the host and uploaded into `staging` a bounded piece at a time (a
// whole (N, D) host buffer would add to the peak memory).
void AddJitter(Backend& be, Tensor h, Tensor staging, int64_t rows, double jitter,
               const StepOptions& options, int pass) {
  constexpr int64_t kPiece = 1 << 14;
  const int64_t row_len = h.numel() / rows;
  std::vector<float> host(std::min(kPiece, row_len));
  for (int64_t r = 0; r < rows; ++r) {
    Rng rng = StepDrawRng(options.seed, pass, options.row_offset + r, /*kind=*/0);
    for (int64_t start = 0; start < row_len; start += kPiece) {
      const int64_t len = std::min(kPiece, row_len - start);
      for (int64_t i = 0; i < len; ++i) {
        host[i] = static_cast<float>((2.0 * rng.Uniform() - 1.0) * jitter);
      }
      be.CopyFromHost(staging.f32() + r * row_len + start, host.data(), len * sizeof(float));
    }
  }
  be.ResidualForward(h, staging, 1.0f);
}

}  // namespace

// ---------------------------------------------------------------------------------------------

struct Model::Impl {
  std::optional<ops::Arena> params, grads, acts;
  // Views of the global parameters (p_) and their gradients (g_).
  Tensor embed, final_norm, norm_g, w_g, w_u, norm_in;
  Tensor d_embed, d_final_norm, d_norm_g, d_w_g, d_w_u, d_norm_in;
  std::vector<LayerParams> layer_p, layer_g;
  // Ranges [begin, end) of the arenas, in floats: each layer's parameters, the final norm's.
  std::vector<std::pair<int64_t, int64_t>> layer_range;
  std::pair<int64_t, int64_t> final_norm_range;
  std::vector<PassActs> passes;
  LayerActs shared;  // recomputation scratch: selective, the FFN; full, one whole layer
  Scratch s;
  int64_t b = 0, t = 0;
};

namespace {

LayerParams ViewLayer(const ParameterTable& table, const ModelConfig& cfg, float* base,
                      ops::Device device, int64_t l) {
  const std::string p = "layers." + std::to_string(l) + ".";
  const auto view = [&](const std::string& name) {
    const ParamSpec* spec = table.Find(p + name);
    FB_CHECK(spec != nullptr) << p + name;
    return ViewOf(*spec, base, device);
  };
  LayerParams lp;
  lp.attn_norm = view("attn_norm.weight");
  lp.wq = view("attn.wq.weight");
  lp.wk = view("attn.wk.weight");
  lp.wv = view("attn.wv.weight");
  if (cfg.qk_norm) {
    lp.q_norm = view("attn.q_norm.weight");
    lp.k_norm = view("attn.k_norm.weight");
  }
  if (cfg.attn_gate) lp.wgate = view("attn.wgate.weight");
  lp.wo = view("attn.wo.weight");
  lp.ffn_norm = view("ffn_norm.weight");
  lp.w1 = view("ffn.w1.weight");
  lp.w3 = view("ffn.w3.weight");
  lp.w2 = view("ffn.w2.weight");
  return lp;
}

}  // namespace

// ---------------------------------------------------------------------------------------------

Model::Model(const ModelConfig& config, const ModelShape& shape, Backend* backend)
    : config_(config),
      shape_(shape),
      backend_(backend),
      table_(ParameterTable::Build(config)),
      impl_(std::make_unique<Impl>()) {}

Model::~Model() = default;

StatusOr<std::unique_ptr<Model>> Model::Create(const ModelConfig& config, const ModelShape& shape,
                                               Backend* backend) {
  FB_RETURN_IF_ERROR(config.Validate());
  if (shape.max_batch < 1 || shape.max_seq < 1 || shape.max_passes < 1) {
    return InvalidArgumentError("model shape: batch " + std::to_string(shape.max_batch) + ", seq " +
                                std::to_string(shape.max_seq) + ", passes " +
                                std::to_string(shape.max_passes) + " must all be >= 1");
  }
  if (shape.max_seq > config.max_seq_len) {
    return InvalidArgumentError("sequence length " + std::to_string(shape.max_seq) +
                                " exceeds model.max_seq_len " + std::to_string(config.max_seq_len));
  }
  std::unique_ptr<Model> model(new Model(config, shape, backend));
  Impl& im = *model->impl_;
  if (shape.param_multiple < 1) {
    return InvalidArgumentError("model shape: param_multiple " +
                                std::to_string(shape.param_multiple) + " must be >= 1");
  }
  // The arenas hold whole multiples of param_multiple floats; the tail past the table is zero.
  const int64_t total = (model->table_.total_numel() + shape.param_multiple - 1) /
                        shape.param_multiple * shape.param_multiple;
  const size_t param_bytes = static_cast<size_t>(total) * sizeof(float);
  FB_ASSIGN_OR_RETURN(ops::Arena params, ops::Arena::Create(backend, param_bytes));
  FB_ASSIGN_OR_RETURN(ops::Arena grads, ops::Arena::Create(backend, param_bytes));
  Carver measure(nullptr, backend->device());
  CarveActivations(measure, config, shape, im.s, im.shared, im.passes);
  FB_ASSIGN_OR_RETURN(ops::Arena acts, ops::Arena::Create(backend, measure.bytes()));
  im.params.emplace(std::move(params));
  im.grads.emplace(std::move(grads));
  im.acts.emplace(std::move(acts));
  const Tensor block = im.acts->Take(DType::kU8, {static_cast<int64_t>(measure.bytes())});
  Carver carve(static_cast<char*>(block.data), backend->device());
  CarveActivations(carve, config, shape, im.s, im.shared, im.passes);
  FB_CHECK_EQ(carve.bytes(), measure.bytes());

  model->params_all_ = im.params->TakeF32({total});
  model->grads_all_ = im.grads->TakeF32({total});
  const auto global = [&](const char* name, bool grad) {
    return grad ? model->Grad(*model->table_.Find(name)) : model->Param(*model->table_.Find(name));
  };
  im.embed = global("embed.weight", false);
  im.final_norm = global("final_norm.weight", false);
  im.norm_g = global("feedback.norm_g.weight", false);
  im.w_g = global("feedback.w_g.weight", false);
  im.w_u = global("feedback.w_u.weight", false);
  im.norm_in = global("feedback.norm_in.weight", false);
  im.d_embed = global("embed.weight", true);
  im.d_final_norm = global("final_norm.weight", true);
  im.d_norm_g = global("feedback.norm_g.weight", true);
  im.d_w_g = global("feedback.w_g.weight", true);
  im.d_w_u = global("feedback.w_u.weight", true);
  im.d_norm_in = global("feedback.norm_in.weight", true);
  const auto range = [&](const std::string& first, const std::string& last) {
    const ParamSpec* a = model->table_.Find(first);
    const ParamSpec* b = model->table_.Find(last);
    FB_CHECK(a != nullptr && b != nullptr) << first << " .. " << last;
    return std::make_pair(a->offset, b->offset + b->numel);
  };
  im.final_norm_range = range("final_norm.weight", "final_norm.weight");
  for (int64_t l = 0; l < config.n_layers; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    im.layer_range.push_back(range(p + "attn_norm.weight", p + "ffn.w2.weight"));
    im.layer_p.push_back(
        ViewLayer(model->table_, config, model->params_all_.f32(), backend->device(), l));
    im.layer_g.push_back(
        ViewLayer(model->table_, config, model->grads_all_.f32(), backend->device(), l));
  }
  backend->Zero(model->params_all_);
  backend->Zero(model->grads_all_);
  return model;
}

size_t Model::activation_bytes() const { return impl_->acts->capacity(); }

Tensor Model::Param(const ParamSpec& spec) const {
  return ViewOf(spec, params_all_.f32(), backend_->device());
}

Tensor Model::Grad(const ParamSpec& spec) const {
  return ViewOf(spec, grads_all_.f32(), backend_->device());
}

void Model::ZeroGradients() { backend_->Zero(grads_all_); }

void Model::InitParameters(uint64_t seed) {
  // Filled through a bounded host buffer: a whole (V, D) embedding on the host would add its
  // size to the process's peak memory on top of the arenas.
  constexpr int64_t kChunk = 1 << 16;
  std::vector<float> host(kChunk);
  for (const ParamSpec& spec : table_.specs()) {
    Rng rng = Rng::ForStream(seed, spec.name);
    float* dst = Param(spec).f32();
    for (int64_t start = 0; start < spec.numel; start += kChunk) {
      const int64_t n = std::min(kChunk, spec.numel - start);
      for (int64_t i = 0; i < n; ++i) {
        host[i] = spec.kind == ParamKind::kNormGain
                      ? 1.0f
                      : static_cast<float>(rng.Normal() * spec.init_std);
      }
      backend_->CopyFromHost(dst + start, host.data(), n * sizeof(float));
    }
  }
}

Status Model::LoadParameters(const std::string& path) {
  FB_ASSIGN_OR_RETURN(checkpoint::SafetensorsFile file, checkpoint::SafetensorsFile::Read(path));
  for (const auto& [name, entry] : file.entries()) {
    if (table_.Find(name) == nullptr) {
      return InvalidArgumentError(path + ": tensor " + name +
                                  " is not a parameter of this model config");
    }
  }
  for (const ParamSpec& spec : table_.specs()) {
    FB_ASSIGN_OR_RETURN(const checkpoint::SafetensorsFile::Entry* e,
                        file.Find(spec.name, checkpoint::StDType::kF32, spec.shape));
    backend_->CopyFromHost(Param(spec).data, file.data(*e), e->bytes);
  }
  return OkStatus();
}

namespace {

// Host copies of every tensor of an arena carved by `table`, named prefix + key.
std::vector<std::vector<float>> DownloadAll(Backend& be, const ParameterTable& table,
                                            const float* base) {
  std::vector<std::vector<float>> out;
  for (const ParamSpec& spec : table.specs()) {
    out.emplace_back(spec.numel);
    be.CopyToHost(out.back().data(), base + spec.offset, spec.numel * sizeof(float));
  }
  return out;
}

}  // namespace

Status Model::SaveParameters(const std::string& path) const {
  const std::vector<std::vector<float>> host = DownloadAll(*backend_, table_, params_all_.f32());
  std::vector<checkpoint::StTensorRef> refs;
  for (size_t i = 0; i < table_.specs().size(); ++i) {
    const ParamSpec& spec = table_.specs()[i];
    refs.push_back({spec.name, checkpoint::StDType::kF32, spec.shape, host[i].data()});
  }
  return checkpoint::WriteSafetensors(path, refs, {{"format", "pt"}, {"producer", "fullband"}});
}

Status Model::SaveGradients(const std::string& path,
                            const std::vector<std::pair<std::string, float>>& scalars,
                            const std::vector<std::pair<std::string, std::vector<uint8_t>>>& masks,
                            int64_t batch, int64_t seq) const {
  const std::vector<std::vector<float>> host = DownloadAll(*backend_, table_, grads_all_.f32());
  std::vector<checkpoint::StTensorRef> refs;
  for (const auto& [name, value] : scalars) {
    refs.push_back({name, checkpoint::StDType::kF32, {}, &value});
  }
  for (const auto& [name, mask] : masks) {
    FB_CHECK_EQ(static_cast<int64_t>(mask.size()), batch * seq);
    refs.push_back({name, checkpoint::StDType::kU8, {batch, seq}, mask.data()});
  }
  for (size_t i = 0; i < table_.specs().size(); ++i) {
    const ParamSpec& spec = table_.specs()[i];
    refs.push_back({"grad." + spec.name, checkpoint::StDType::kF32, spec.shape, host[i].data()});
  }
  return checkpoint::WriteSafetensors(path, refs, {{"format", "pt"}, {"producer", "fullband"}});
}

StatusOr<StepResult> Model::Step(const int32_t* tokens, int64_t batch, int64_t seq,
                                 const StepOptions& options) {
  const ModelConfig& cfg = config_;
  if (batch != shape_.max_batch || seq != shape_.max_seq) {
    return InvalidArgumentError("batch (" + std::to_string(batch) + ", " + std::to_string(seq) +
                                ") differs from the model's shape (" +
                                std::to_string(shape_.max_batch) + ", " +
                                std::to_string(shape_.max_seq) + ")");
  }
  const int k_passes = options.passes;
  if (k_passes < 1 || k_passes > shape_.max_passes) {
    return InvalidArgumentError("passes " + std::to_string(k_passes) + " outside [1, " +
                                std::to_string(shape_.max_passes) + "]");
  }
  if (options.jitter < 0) return InvalidArgumentError("jitter must be >= 0");
  Backend& be = *backend_;
  Impl& im = *impl_;
  Scratch& s = im.s;
  const Dims d = MakeDims(cfg, batch, seq);
  const int64_t n = d.n;
  const bool full = shape_.recompute == Recompute::kFull;
  const bool pre_norm = cfg.feedback_state == FeedbackState::kPreNorm;

  // Inputs and targets on the host, checked, then uploaded. Position t of a row is the input
  // of step t (t < T) and the target of step t - 1 (t > 0).
  for (int64_t bi = 0; bi < batch; ++bi) {
    for (int64_t ti = 0; ti <= seq; ++ti) {
      const int32_t tok = tokens[bi * (seq + 1) + ti];
      const std::string where =
          " at batch row " + std::to_string(bi) + ", position " + std::to_string(ti);
      if (tok == cfg.ignore_id && ti < seq) {
        return InvalidArgumentError("token " + std::to_string(tok) + where +
                                    " is ignore_id, which an input (positions 0..T-1) may not be");
      }
      if (tok != cfg.ignore_id && (tok < 0 || tok >= cfg.vocab_size)) {
        return InvalidArgumentError("token " + std::to_string(tok) + where +
                                    " is outside the vocabulary [0, " +
                                    std::to_string(cfg.vocab_size) + ")");
      }
    }
  }
  std::vector<int32_t> inputs(n), targets(n);
  int64_t counted = 0;
  for (int64_t bi = 0; bi < batch; ++bi) {
    for (int64_t ti = 0; ti < seq; ++ti) {
      inputs[bi * seq + ti] = tokens[bi * (seq + 1) + ti];
      targets[bi * seq + ti] = tokens[bi * (seq + 1) + ti + 1];
      counted += targets[bi * seq + ti] != cfg.ignore_id;
    }
  }
  be.CopyFromHost(s.tokens.data, inputs.data(), n * sizeof(int32_t));
  be.CopyFromHost(s.targets.data, targets.data(), n * sizeof(int32_t));

  StepResult result;
  result.counted = counted;
  if (options.loss_count < 0) return InvalidArgumentError("loss_count must be >= 0");
  const int64_t denominator = options.loss_count > 0 ? options.loss_count : counted;
  const auto pass_weight = [&](int k) {  // k is 1-based
    if (k == 1 || cfg.feedback_loss == FeedbackLoss::kSum) return 1.0;
    return 1.0 / (k_passes - 1);
  };
  // The input stage. Pass 1: x0 = RMSNorm(e; norm_in) (or e). Pass k >= 2, from p.shifted:
  // value = shift(ĥ) W_uᵀ, u = the feedback mix, and unless x0 is empty x0 = RMSNorm(u; norm_in).
  const auto input_stage = [&](int k, PassActs& p, Tensor x0) {
    if (k == 1) {
      if (cfg.pass1_input_norm) {
        be.RmsNormForward(x0, p.rstd_in, s.e, im.norm_in, kEps);
      } else {
        CopyTensor(be, x0, s.e);
      }
      return;
    }
    Linear(be, p.value, p.shifted, im.w_u);
    be.FeedbackMixForward(p.u, p.value, s.gate_fb, s.e, p.plain);
    if (!x0.empty()) be.RmsNormForward(x0, p.rstd_in, p.u, im.norm_in, kEps);
  };

  // ---- Forward, pass by pass.
  be.EmbeddingForward(s.e, im.embed, s.tokens);
  if (k_passes >= 2) {
    be.RmsNormForward(s.ng, s.rstd_g, s.e, im.norm_g, kEps);
    Linear(be, s.gate_fb, s.ng, im.w_g);
  }
  for (int k = 1; k <= k_passes; ++k) {
    PassActs& p = im.passes[k - 1];
    if (k >= 2) {
      // ĥ = h[k-1] + ξ in s.h (post-norm: the readout left h[k-1] there).
      if (pre_norm) CopyTensor(be, s.h, im.passes[k - 2].x[d.l]);
      if (options.jitter > 0) AddJitter(be, s.h, s.branch, batch, options.jitter, options, k);
      be.ShiftRightForward(p.shifted.Reshape({d.b, d.t, d.d}), s.h.Reshape({d.b, d.t, d.d}));
      std::vector<uint8_t> plain(n);
      for (int64_t bi = 0; bi < batch; ++bi) {
        Rng rng = StepDrawRng(options.seed, k, options.row_offset + bi, /*kind=*/1);
        PlainMask(inputs.data() + bi * seq, seq, cfg.eod_id, options.prefix_mixin, rng,
                  plain.data() + bi * seq);
      }
      be.CopyFromHost(p.plain.data, plain.data(), n);
      result.plain.push_back(std::move(plain));
    }
    input_stage(k, p, p.x[0]);
    for (int64_t l = 0; l < d.l; ++l) {
      const LayerActs& a = p.layers[l];
      AttentionHalfForward(be, cfg, d, im.layer_p[l], a, p.x[l], s.branch, l, /*project=*/true);
      FfnHalfForward(be, d, im.layer_p[l], a, p.x[l + 1], s.branch);
    }
    be.RmsNormForward(s.h, p.rstd_f, p.x[d.l], im.final_norm, kEps);
    // The readout's backward is fused into its forward (ops/readout_loss.h): dh gets the
    // gradient of w_k·ℓ_k at h, dE its share.
    const double w = pass_weight(k);
    const float ce_scale = denominator ? static_cast<float>(w / denominator) : 0.0f;
    const float z_scale = denominator ? static_cast<float>(w * cfg.z_loss / denominator) : 0.0f;
    const ops::ReadoutLossSums sums = ops::ReadoutCrossEntropy(
        be, s.h, im.embed, s.targets, targets.data(), static_cast<int32_t>(cfg.ignore_id),
        {s.logits, s.row_loss, s.row_lse}, ce_scale, z_scale, options.backward ? p.dh : Tensor(),
        options.backward ? im.d_embed : Tensor());
    const double ce = denominator ? sums.ce_sum / denominator : 0.0;
    const double z = denominator ? sums.z_sum / denominator : 0.0;
    result.pass_ce.push_back(ce);
    result.pass_loss.push_back(ce + cfg.z_loss * z);
    result.total += w * result.pass_loss.back();
  }
  if (!options.backward) return result;

  // ---- Backward, pass K down to pass 1; each pass hands the gradient at its input state
  // to the pass before it (post-norm: at h, pre-norm: at x_L). From here on the forward-only
  // scratch is dead (Note [Activation layout]).
  be.Zero(s.de);
  if (k_passes >= 2) be.Zero(s.dg_fb);
  for (int k = k_passes; k >= 1; --k) {
    PassActs& p = im.passes[k - 1];
    std::vector<Tensor> x = p.x;
    if (full) {  // Note [Recomputation]
      x[0] = s.du;
      x[d.l] = s.dxn;
      input_stage(k, p, x[0]);
    }
    for (int64_t l = d.l - 1; l >= 0; --l) {
      const LayerActs& a = p.layers[l];
      const bool top = l == d.l - 1;
      if (full) {
        AttentionHalfForward(be, cfg, d, im.layer_p[l], a, x[l], s.dbranch, l, /*project=*/true);
        FfnHalfForward(be, d, im.layer_p[l], a, top ? x[d.l] : Tensor(), s.dbranch);
      }
      if (top) {
        be.RmsNormBackward(s.dx, im.d_final_norm, p.dh, x[d.l], im.final_norm, p.rstd_f);
        if (pre_norm && k < k_passes) be.ResidualForward(s.dx, s.dxl, 1.0f);
        if (k == 1 && options.grads_final) {
          options.grads_final(im.final_norm_range.first, im.final_norm_range.second);
        }
      }
      if (shape_.recompute == Recompute::kSelective) RecomputeFfn(be, im.layer_p[l], a);
      FfnHalfBackward(be, d, im.layer_p[l], im.layer_g[l], a, s);
      if (full) {
        AttentionHalfForward(be, cfg, d, im.layer_p[l], a, x[l], Tensor(), l, /*project=*/false);
      }
      AttentionHalfBackward(be, cfg, d, im.layer_p[l], im.layer_g[l], a, x[l], s, l);
      if (k == 1 && options.grads_final) {
        options.grads_final(im.layer_range[l].first, im.layer_range[l].second);
      }
    }
    // s.dx is now the gradient at x[0], the normed input of this pass.
    if (k == 1) {
      if (cfg.pass1_input_norm) {
        be.RmsNormBackward(s.du, im.d_norm_in, s.dx, s.e, im.norm_in, p.rstd_in);
        be.ResidualForward(s.de, s.du, 1.0f);
      } else {
        be.ResidualForward(s.de, s.dx, 1.0f);
      }
      continue;
    }
    if (full) input_stage(k, p, Tensor());  // value and u again; x[0] (in du) is dead
    be.RmsNormBackward(s.du, im.d_norm_in, s.dx, p.u, im.norm_in, p.rstd_in);
    // dvalue -> dbranch, d(gate) of this pass -> dxn, de of the plain positions -> da.
    be.FeedbackMixBackward(s.dbranch, s.dxn, s.da, s.du, p.value, s.gate_fb, p.plain);
    be.ResidualForward(s.de, s.da, 1.0f);
    be.ResidualForward(s.dg_fb, s.dxn, 1.0f);
    LinearBackwardWeight(be, im.d_w_u, s.dbranch, p.shifted);
    LinearBackwardInput(be, s.du, s.dbranch, im.w_u, 0.0f);  // gradient at shift(ĥ)
    be.ShiftRightBackward(s.dx.Reshape({d.b, d.t, d.d}), s.du.Reshape({d.b, d.t, d.d}));
    if (pre_norm) {
      CopyTensor(be, s.dxl, s.dx);
    } else {
      be.ResidualForward(im.passes[k - 2].dh, s.dx, 1.0f);
    }
  }
  if (k_passes >= 2) {       // the feedback gate, shared by every feedback pass
    const Tensor ng = s.da;  // RMSNorm(e; norm_g) again: the forward's copy was forward-only
    be.RmsNormForward(ng, s.rstd_g, s.e, im.norm_g, kEps);
    LinearBackwardWeight(be, im.d_w_g, s.dg_fb, ng);
    LinearBackwardInput(be, s.dxn, s.dg_fb, im.w_g, 0.0f);
    be.RmsNormBackward(s.du, im.d_norm_g, s.dxn, s.e, im.norm_g, s.rstd_g);
    be.ResidualForward(s.de, s.du, 1.0f);
  }
  be.EmbeddingBackward(im.d_embed, s.de, s.tokens);
  be.Synchronize();
  return result;
}

}  // namespace fullband::worker

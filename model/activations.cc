#include "model/activations.h"

#include <algorithm>

#include "ops/readout_loss.h"

namespace fullband::model {

using ops::DType;
using ops::Shape;

namespace {

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

}  // namespace

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
// How much this saves: docs/PERF.md, "Training step".

// Note [Readout chunk]: the readout (ops/readout_loss.h) runs in chunks of rows whose logits take
// at most kReadoutChunkFloats. Each chunk streams the whole (V, D) embedding through three GEMMs
// and reads and writes all of dE, and a chunk's rows are the inner dimension of the dE GEMM, so
// larger chunks are faster; on small (V = 100,352) the gain flattens out past 128 rows. Under
// `full` the chunk adds to the peak memory: 128 rows of 100,352 keep small within 45% of `none`.
// The budget gives small those 128 rows and tiny (V = 4,096) its whole batch. The chunk depends on
// the model and batch only, the same in every recomputation mode, so that they stay bit-identical
// (dE is summed chunk by chunk).
constexpr int64_t kReadoutChunkFloats = int64_t{128} * 100352;

int64_t ReadoutChunkRows(int64_t vocab_size, int64_t rows) {
  return std::min(rows, std::max<int64_t>(64, kReadoutChunkFloats / vocab_size));
}

namespace {

// What every K-pass step of `shape` needs: the dims CarveActivations' parts share.
struct StepDims {
  int64_t b, t, n, d, h, dh;
  int64_t wide;  // dbranch / dout_att and dxn / dq
  bool feedback, full, selective;
  Shape logits;
};

StepDims MakeStepDims(const ModelConfig& m, const ModelShape& shape) {
  StepDims sd;
  sd.b = shape.max_batch;
  sd.t = shape.max_seq;
  sd.n = sd.b * sd.t;
  sd.d = m.d_model;
  sd.h = m.n_heads;
  sd.dh = m.head_dim;
  sd.wide = std::max(sd.d, sd.h * sd.dh);
  sd.feedback = shape.max_passes >= 2;
  sd.full = shape.recompute == Recompute::kFull;
  sd.selective = shape.recompute == Recompute::kSelective;
  sd.logits = Shape{ReadoutChunkRows(m.vocab_size, sd.n), ops::LogitsPitch(m.vocab_size)};
  return sd;
}

// The step-wide scratch: the batch, the input stage, and what forward and backward use apart.
void CarveScratch(Carver& c, const ModelConfig& m, const StepDims& sd, Scratch& s) {
  const int64_t n = sd.n, d = sd.d;
  s.tokens = c.Take(DType::kI32, {n});
  s.targets = c.Take(DType::kI32, {n});
  s.row_loss = c.F32({n});
  s.row_lse = c.F32({n});
  s.e = c.F32({n, d});
  if (sd.feedback) {
    s.gate_fb = c.F32({n, d});
    s.rstd_g = c.F32({n});
  }
  c.Overlay({[&] {  // forward only
               s.h = c.F32({n, d});
               s.branch = c.F32({n, d});
               if (sd.feedback) s.ng = c.F32({n, d});
               if (!sd.full) s.logits = c.F32(sd.logits);
               if (sd.full) {
                 s.x0 = c.F32({n, d});
                 s.x_top = c.F32({n, d});
               }
             },
             [&] {  // backward only
               s.dx = c.F32({n, d});
               const Tensor db = c.F32({n, sd.wide}), dn = c.F32({n, sd.wide});
               s.dbranch = View(db, {n, d});
               s.dout_att = View(db, {n, sd.h, sd.dh});
               s.dxn = View(dn, {n, d});
               s.dq = View(dn, {n, sd.h, sd.dh});
               s.da = c.F32({n, d});
               s.du = c.F32({n, d});
               s.de = c.F32({n, d});
               if (sd.feedback) s.dg_fb = c.F32({n, d});
               if (sd.feedback && m.feedback_state == FeedbackState::kPreNorm) {
                 s.dxl = c.F32({n, d});
               }
             }});
}

// The feedback input stage's tensors that every pass shares under `full`.
struct SharedInput {
  Tensor value, u;
};

// The recomputation scratch: under `full` one whole layer (with the readout's logits chunk and
// the feedback input stage over it), under `selective` the FFN; nothing under `none`.
SharedInput CarveRecomputation(Carver& c, const ModelConfig& m, const StepDims& sd, Scratch& s,
                               LayerActs& shared) {
  const int64_t n = sd.n;
  SharedInput in;
  if (sd.full) {
    c.Overlay({[&] {
                 CarveAttentionHalf(c, m, sd.b, sd.t, shared);
                 CarveAttentionGrads(c, m, n, shared);
               },
               [&] { CarveFfnHalf(c, m, n, /*ffn=*/true, shared); },
               [&] { s.logits = c.F32(sd.logits); },
               [&] {
                 if (!sd.feedback) return;
                 in.value = c.F32({n, sd.d});
                 in.u = c.F32({n, sd.d});
               }});
  } else if (sd.selective) {
    c.Overlay({[&] {
                 shared.g1 = c.F32({n, m.ffn_dim});
                 shared.g3 = c.F32({n, m.ffn_dim});
                 shared.s = c.F32({n, m.ffn_dim});
               },
               [&] { CarveAttentionGrads(c, m, n, shared); }});
  }
  return in;
}

// One layer's activations of one pass, under `none` or `selective`.
LayerActs CarveLayer(Carver& c, const ModelConfig& m, const StepDims& sd, const LayerActs& shared) {
  LayerActs a;
  CarveAttentionHalf(c, m, sd.b, sd.t, a);
  if (sd.selective) {
    CarveFfnHalf(c, m, sd.n, /*ffn=*/false, a);
    a.g1 = shared.g1;
    a.g3 = shared.g3;
    a.s = shared.s;
    a.dog = m.attn_gate ? a.og : shared.dog;
    a.dgate = shared.dgate;
    a.dk = shared.dk;
    a.dv = shared.dv;
  } else {
    c.Overlay({[&] { CarveFfnHalf(c, m, sd.n, /*ffn=*/true, a); },
               [&] { CarveAttentionGrads(c, m, sd.n, a); }});
  }
  return a;
}

// What pass k keeps: the layers' inputs, each layer's activations, and its input stage's.
void CarvePass(Carver& c, const ModelConfig& m, const StepDims& sd, const Scratch& s,
               const LayerActs& shared, const SharedInput& in, int k, PassActs& p) {
  const int64_t n = sd.n, d = sd.d;
  for (int64_t l = 0; l <= m.n_layers; ++l) {
    if (sd.full && l == 0) {
      p.x.push_back(s.x0);
    } else if (sd.full && l == m.n_layers) {
      p.x.push_back(s.x_top);
    } else {
      p.x.push_back(c.F32({n, d}));
    }
  }
  for (int64_t l = 0; l < m.n_layers; ++l) {
    p.layers.push_back(sd.full ? shared : CarveLayer(c, m, sd, shared));
  }
  p.rstd_in = c.F32({n});
  p.rstd_f = c.F32({n});
  p.dh = c.F32({n, d});
  if (k >= 2) {
    p.shifted = c.F32({n, d});
    p.plain = c.Take(DType::kU8, {n});
    p.value = sd.full ? in.value : c.F32({n, d});
    p.u = sd.full ? in.u : c.F32({n, d});
  }
}

}  // namespace

// Lays out every activation and scratch tensor of a step; with a measuring Carver this only
// computes the arena size.
void CarveActivations(Carver& c, const ModelConfig& m, const ModelShape& shape, Scratch& s,
                      LayerActs& shared, std::vector<PassActs>& passes) {
  const StepDims sd = MakeStepDims(m, shape);
  CarveScratch(c, m, sd, s);
  const SharedInput in = CarveRecomputation(c, m, sd, s, shared);
  passes.assign(shape.max_passes, PassActs{});
  for (int k = 1; k <= shape.max_passes; ++k) {
    CarvePass(c, m, sd, s, shared, in, k, passes[k - 1]);
  }
}

}  // namespace fullband::model

#include "model/layers.h"

#include <cmath>
#include <string>

namespace fullband::model {

using ops::Backend;

void Linear(Backend& be, Tensor out, Tensor in, Tensor w) {
  const int64_t o = w.dim(0), i = w.dim(1), n = in.numel() / i;
  FB_CHECK_EQ(out.numel(), n * o);
  be.Gemm(false, true, n, o, i, 1.0f, in.f32(), i, w.f32(), i, 0.0f, out.f32(), o);
}
void LinearBackwardInput(Backend& be, Tensor din, Tensor dout, Tensor w, float beta) {
  const int64_t o = w.dim(0), i = w.dim(1), n = dout.numel() / o;
  FB_CHECK_EQ(din.numel(), n * i);
  be.Gemm(false, false, n, i, o, 1.0f, dout.f32(), o, w.f32(), i, beta, din.f32(), i);
}
void LinearBackwardWeight(Backend& be, Tensor dw, Tensor dout, Tensor in) {
  const int64_t o = dw.dim(0), i = dw.dim(1), n = dout.numel() / o;
  FB_CHECK_EQ(in.numel(), n * i);
  be.Gemm(true, false, o, i, n, 1.0f, dout.f32(), o, in.f32(), i, 1.0f, dw.f32(), i);
}
void CopyTensor(Backend& be, Tensor dst, Tensor src) {
  FB_CHECK_EQ(dst.numel(), src.numel());
  be.Copy(dst.data, src.data, src.bytes());
}

void TpGroup::Sum(Tensor x) {
  if (size() == 1 || !status_.ok()) return;
  status_ = device_->AllReduce(x.data, x.numel(), comm::CommType::kF32, comm::ReduceOp::kSum);
}

void TpGroup::SumHost(void* data, int64_t count, comm::CommType type) {
  if (size() == 1 || !status_.ok()) return;
  status_ = host_->AllReduce(data, count, type, comm::ReduceOp::kSum);
}

void TpGroup::Gather(const void* in, void* out, int64_t count, comm::CommType type) {
  FB_CHECK_GT(size(), 1) << "Gather of a tensor-parallel group of one rank";
  if (status_.ok()) status_ = host_->AllGather(in, out, count, type);
}

Dims MakeDims(const ModelConfig& m, int64_t b, int64_t t, TpGroup* tp) {
  return Dims{b,          t,
              b * t,      m.d_model,
              m.n_heads,  m.n_kv_heads,
              m.head_dim, m.ffn_dim,
              m.n_layers, m.depth_scaling ? 1.0f / std::sqrt(static_cast<float>(m.n_layers)) : 1.0f,
              tp};
}

ModelConfig LocalConfig(const ModelConfig& m, int tp) {
  ModelConfig local = m;
  local.n_heads /= tp;
  local.n_kv_heads /= tp;
  local.ffn_dim /= tp;
  local.vocab_size /= tp;
  return local;
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
  d.tp->Sum(branch);  // the row-parallel Wo's parts
  // Under `full`, x_mid lies over the attention half, dead from here on.
  CopyTensor(be, a.x_mid, x_in);
  be.ResidualForward(a.x_mid, branch, d.r);
}

void FfnHalfForward(Backend& be, const Dims& d, const LayerParams& p, const LayerActs& a,
                    Tensor x_out, Tensor branch) {
  be.RmsNormForward(a.m, a.rstd_m, a.x_mid, p.ffn_norm, kEps);
  RecomputeFfn(be, p, a);
  if (x_out.empty()) return;
  Linear(be, branch, a.s, p.w2);
  d.tp->Sum(branch);  // the row-parallel W2's parts
  CopyTensor(be, x_out, a.x_mid);
  be.ResidualForward(x_out, branch, d.r);
}

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
  d.tp->Sum(s.da);  // the column-parallel W1's and W3's parts
  be.RmsNormBackward(s.dxn, g.ffn_norm, s.da, a.x_mid, p.ffn_norm, a.rstd_m);
  be.ResidualForward(s.dx, s.dxn, 1.0f);
}

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
  d.tp->Sum(s.da);  // the column-parallel Q's, K's, V's and gate's parts
  be.RmsNormBackward(s.dxn, g.attn_norm, s.da, x_in, p.attn_norm, a.rstd_a);  // dq is dead
  be.ResidualForward(s.dx, s.dxn, 1.0f);  // the gradient at x_in
}

LayerParams ViewLayer(const ParameterTable& table, float* base, ops::Device device, int64_t l) {
  using R = ParamRole;
  static constexpr std::pair<ParamRole, Tensor LayerParams::*> kViews[] = {
      {R::kAttnNorm, &LayerParams::attn_norm},
      {R::kWq, &LayerParams::wq},
      {R::kWk, &LayerParams::wk},
      {R::kWv, &LayerParams::wv},
      {R::kQNorm, &LayerParams::q_norm},
      {R::kKNorm, &LayerParams::k_norm},
      {R::kWgate, &LayerParams::wgate},
      {R::kWo, &LayerParams::wo},
      {R::kFfnNorm, &LayerParams::ffn_norm},
      {R::kW1, &LayerParams::w1},
      {R::kW3, &LayerParams::w3},
      {R::kW2, &LayerParams::w2}};
  LayerParams lp;
  for (const auto& [role, view] : kViews) {
    if (const ParamSpec* spec = table.Find(role, l)) lp.*view = ViewOf(*spec, base, device);
  }
  return lp;
}

}  // namespace fullband::model

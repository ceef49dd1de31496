#include "worker/param_table.h"

#include <cmath>

#include "common/check.h"

namespace fullband::worker {

void ParameterTable::Add(std::string name, std::vector<int64_t> global_shape, ParamKind kind,
                         double init_std, TpSplit split) {
  ParamSpec spec;
  spec.name = std::move(name);
  spec.shape = global_shape;
  spec.box_offset.assign(global_shape.size(), 0);
  if (split != TpSplit::kReplicated) {
    const size_t axis = split == TpSplit::kRows ? 0 : 1;
    FB_CHECK(axis < global_shape.size() && global_shape[axis] % tp_ == 0)
        << spec.name << ": tp " << tp_ << " does not divide axis " << axis;
    spec.shape[axis] = global_shape[axis] / tp_;
    spec.box_offset[axis] = spec.shape[axis] * tp_rank_;
  }
  spec.global_shape = std::move(global_shape);
  spec.split = split;
  spec.numel = 1;
  for (int64_t d : spec.shape) spec.numel *= d;
  spec.kind = kind;
  spec.init_std = init_std;
  constexpr int64_t kAlign = 16;  // floats: every tensor starts on a 64-byte boundary
  spec.offset = (total_ + kAlign - 1) / kAlign * kAlign;
  total_ = spec.offset + spec.numel;
  specs_.push_back(std::move(spec));
}

ParameterTable ParameterTable::Build(const ModelConfig& m, int tp, int tp_rank) {
  FB_CHECK(tp >= 1 && tp_rank >= 0 && tp_rank < tp) << "tp rank " << tp_rank << " of " << tp;
  ParameterTable t;
  t.tp_ = tp;
  t.tp_rank_ = tp_rank;
  const int64_t d = m.d_model, hd = m.n_heads * m.head_dim, kvd = m.n_kv_heads * m.head_dim;
  constexpr double kStd = 0.02;
  constexpr TpSplit kRows = TpSplit::kRows, kCols = TpSplit::kColumns;
  t.Add("embed.weight", {m.vocab_size, d}, ParamKind::kEmbedding, kStd, kRows);
  for (int64_t l = 0; l < m.n_layers; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    t.Add(p + "attn_norm.weight", {d}, ParamKind::kNormGain, 0);
    t.Add(p + "attn.wq.weight", {hd, d}, ParamKind::kMatrix, kStd, kRows);
    t.Add(p + "attn.wk.weight", {kvd, d}, ParamKind::kMatrix, kStd, kRows);
    t.Add(p + "attn.wv.weight", {kvd, d}, ParamKind::kMatrix, kStd, kRows);
    if (m.qk_norm) {
      t.Add(p + "attn.q_norm.weight", {m.head_dim}, ParamKind::kNormGain, 0);
      t.Add(p + "attn.k_norm.weight", {m.head_dim}, ParamKind::kNormGain, 0);
      t.specs_[t.specs_.size() - 2].tp_partial_grad = t.specs_.back().tp_partial_grad = tp > 1;
    }
    if (m.attn_gate) {
      t.Add(p + "attn.wgate.weight", {m.n_heads, d}, ParamKind::kMatrix, kStd, kRows);
    }
    t.Add(p + "attn.wo.weight", {d, hd}, ParamKind::kMatrix, kStd, kCols);
    t.Add(p + "ffn_norm.weight", {d}, ParamKind::kNormGain, 0);
    t.Add(p + "ffn.w1.weight", {m.ffn_dim, d}, ParamKind::kMatrix, kStd, kRows);
    t.Add(p + "ffn.w3.weight", {m.ffn_dim, d}, ParamKind::kMatrix, kStd, kRows);
    t.Add(p + "ffn.w2.weight", {d, m.ffn_dim}, ParamKind::kMatrix, kStd, kCols);
  }
  t.Add("final_norm.weight", {d}, ParamKind::kNormGain, 0);
  const double fusion_std = 1.0 / std::sqrt(static_cast<double>(d));  // N(0, 1/D)
  t.Add("feedback.norm_g.weight", {d}, ParamKind::kNormGain, 0);
  t.Add("feedback.w_g.weight", {d, d}, ParamKind::kMatrix, fusion_std);
  t.Add("feedback.w_u.weight", {d, d}, ParamKind::kMatrix, fusion_std);
  t.Add("feedback.norm_in.weight", {d}, ParamKind::kNormGain, 0);
  return t;
}

ops::Tensor ViewOf(const ParamSpec& spec, float* arena_base, ops::Device device) {
  ops::Shape shape;
  for (int64_t d : spec.shape) shape.dims[shape.rank++] = d;
  return ops::Tensor(arena_base + spec.offset, ops::DType::kF32, shape, device);
}

const ParamSpec* ParameterTable::Find(const std::string& name) const {
  for (const ParamSpec& s : specs_) {
    if (s.name == name) return &s;
  }
  return nullptr;
}

int64_t ParameterTable::CountParameters() const {
  int64_t n = 0;
  for (const ParamSpec& s : specs_) {
    int64_t global = 1;
    for (int64_t d : s.global_shape) global *= d;
    n += global;
  }
  return n;
}

}  // namespace fullband::worker

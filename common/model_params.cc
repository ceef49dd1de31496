#include "common/model_params.h"

#include <cmath>

namespace fullband {

std::vector<ParamDef> ModelParameters(const ModelConfig& m) {
  std::vector<ParamDef> out;
  const auto add = [&](std::string name, std::vector<int64_t> shape, ParamKind kind,
                       double init_std, TpSplit split = TpSplit::kReplicated) {
    out.push_back({std::move(name), std::move(shape), kind, init_std, split});
  };
  const int64_t d = m.d_model, hd = m.n_heads * m.head_dim, kvd = m.n_kv_heads * m.head_dim;
  constexpr double kStd = 0.02;
  constexpr TpSplit kRows = TpSplit::kRows, kCols = TpSplit::kColumns;
  add("embed.weight", {m.vocab_size, d}, ParamKind::kEmbedding, kStd, kRows);
  for (int64_t l = 0; l < m.n_layers; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    add(p + "attn_norm.weight", {d}, ParamKind::kNormGain, 0);
    add(p + "attn.wq.weight", {hd, d}, ParamKind::kMatrix, kStd, kRows);
    add(p + "attn.wk.weight", {kvd, d}, ParamKind::kMatrix, kStd, kRows);
    add(p + "attn.wv.weight", {kvd, d}, ParamKind::kMatrix, kStd, kRows);
    if (m.qk_norm) {
      add(p + "attn.q_norm.weight", {m.head_dim}, ParamKind::kNormGain, 0);
      add(p + "attn.k_norm.weight", {m.head_dim}, ParamKind::kNormGain, 0);
    }
    if (m.attn_gate) add(p + "attn.wgate.weight", {m.n_heads, d}, ParamKind::kMatrix, kStd, kRows);
    add(p + "attn.wo.weight", {d, hd}, ParamKind::kMatrix, kStd, kCols);
    add(p + "ffn_norm.weight", {d}, ParamKind::kNormGain, 0);
    add(p + "ffn.w1.weight", {m.ffn_dim, d}, ParamKind::kMatrix, kStd, kRows);
    add(p + "ffn.w3.weight", {m.ffn_dim, d}, ParamKind::kMatrix, kStd, kRows);
    add(p + "ffn.w2.weight", {d, m.ffn_dim}, ParamKind::kMatrix, kStd, kCols);
  }
  add("final_norm.weight", {d}, ParamKind::kNormGain, 0);
  const double fusion_std = 1.0 / std::sqrt(static_cast<double>(d));  // N(0, 1/D)
  add("feedback.norm_g.weight", {d}, ParamKind::kNormGain, 0);
  add("feedback.w_g.weight", {d, d}, ParamKind::kMatrix, fusion_std);
  add("feedback.w_u.weight", {d, d}, ParamKind::kMatrix, fusion_std);
  add("feedback.norm_in.weight", {d}, ParamKind::kNormGain, 0);
  return out;
}

int64_t ModelParameterCount(const ModelConfig& m) {
  int64_t n = 0;
  for (const ParamDef& p : ModelParameters(m)) {
    int64_t numel = 1;
    for (int64_t d : p.shape) numel *= d;
    n += numel;
  }
  return n;
}

}  // namespace fullband

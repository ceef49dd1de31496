#include "common/model_params.h"

#include <cmath>

namespace fullband {

namespace {

// The key of each role, without the "layers.N." of a per-layer one.
constexpr std::array<std::string_view, kParamRoles> kParamKeys = {
    "embed.weight",        "attn_norm.weight",    "attn.wq.weight",
    "attn.wk.weight",      "attn.wv.weight",      "attn.q_norm.weight",
    "attn.k_norm.weight",  "attn.wgate.weight",   "attn.wo.weight",
    "ffn_norm.weight",     "ffn.w1.weight",       "ffn.w3.weight",
    "ffn.w2.weight",       "final_norm.weight",   "feedback.norm_g.weight",
    "feedback.w_g.weight", "feedback.w_u.weight", "feedback.norm_in.weight"};

}  // namespace

std::string ParamName(ParamRole role, int64_t layer) {
  const std::string key(kParamKeys[static_cast<size_t>(role)]);
  return layer < 0 ? key : "layers." + std::to_string(layer) + "." + key;
}

std::vector<ParamDef> ModelParameters(const ModelConfig& m) {
  std::vector<ParamDef> out;
  int64_t layer = -1;  // of the tensors being added
  const auto add = [&](ParamRole role, std::vector<int64_t> shape, ParamKind kind, double init_std,
                       TpSplit split = TpSplit::kReplicated) {
    out.push_back({role, layer, std::move(shape), kind, init_std, split});
  };
  using R = ParamRole;
  const int64_t d = m.d_model, hd = m.n_heads * m.head_dim, kvd = m.n_kv_heads * m.head_dim;
  constexpr double kStd = 0.02;
  constexpr TpSplit kRows = TpSplit::kRows, kCols = TpSplit::kColumns;
  add(R::kEmbed, {m.vocab_size, d}, ParamKind::kEmbedding, kStd, kRows);
  for (layer = 0; layer < m.n_layers; ++layer) {
    add(R::kAttnNorm, {d}, ParamKind::kNormGain, 0);
    add(R::kWq, {hd, d}, ParamKind::kMatrix, kStd, kRows);
    add(R::kWk, {kvd, d}, ParamKind::kMatrix, kStd, kRows);
    add(R::kWv, {kvd, d}, ParamKind::kMatrix, kStd, kRows);
    if (m.qk_norm) {
      add(R::kQNorm, {m.head_dim}, ParamKind::kNormGain, 0);
      add(R::kKNorm, {m.head_dim}, ParamKind::kNormGain, 0);
    }
    if (m.attn_gate) add(R::kWgate, {m.n_heads, d}, ParamKind::kMatrix, kStd, kRows);
    add(R::kWo, {d, hd}, ParamKind::kMatrix, kStd, kCols);
    add(R::kFfnNorm, {d}, ParamKind::kNormGain, 0);
    add(R::kW1, {m.ffn_dim, d}, ParamKind::kMatrix, kStd, kRows);
    add(R::kW3, {m.ffn_dim, d}, ParamKind::kMatrix, kStd, kRows);
    add(R::kW2, {d, m.ffn_dim}, ParamKind::kMatrix, kStd, kCols);
  }
  layer = -1;
  add(R::kFinalNorm, {d}, ParamKind::kNormGain, 0);
  const double fusion_std = 1.0 / std::sqrt(static_cast<double>(d));  // N(0, 1/D)
  add(R::kFeedbackNormG, {d}, ParamKind::kNormGain, 0);
  add(R::kFeedbackWg, {d, d}, ParamKind::kMatrix, fusion_std);
  add(R::kFeedbackWu, {d, d}, ParamKind::kMatrix, fusion_std);
  add(R::kFeedbackNormIn, {d}, ParamKind::kNormGain, 0);
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

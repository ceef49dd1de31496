// The model's parameters, listed once (docs/MODEL.md): each one's safetensors key, whole shape,
// kind, initialization and how tensor parallelism splits it. The worker's ParameterTable
// (model/param_table.h) carves its arenas from this list and the coordinator counts the
// model's FLOPs from it (common/schedule.h), so the two always agree.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/config.h"

namespace fullband {

// What a parameter is, for weight decay and initialization.
enum class ParamKind {
  kEmbedding,  // the tied embedding / readout table
  kMatrix,     // a projection matrix
  kNormGain,   // an RMSNorm gain
};

// How tensor parallelism splits a parameter (docs/PARALLEL.md).
enum class TpSplit {
  kReplicated,  // every rank holds it whole
  kRows,        // rank r holds rows [r·R/tp, (r+1)·R/tp): QKV, the head gate, W1, W3, embedding
  kColumns,     // rank r holds columns [r·C/tp, (r+1)·C/tp): the output projections Wo, W2
};

// Which of the model's tensors a parameter is; the per-layer ones exist once per layer
// (ParamDef::layer). How code finds a parameter: its name is for files.
enum class ParamRole : uint8_t {
  kEmbed,
  kAttnNorm,  // the layer tensors, in table order
  kWq,
  kWk,
  kWv,
  kQNorm,
  kKNorm,
  kWgate,
  kWo,
  kFfnNorm,
  kW1,
  kW3,
  kW2,
  kFinalNorm,
  kFeedbackNormG,
  kFeedbackWg,
  kFeedbackWu,
  kFeedbackNormIn,
};
inline constexpr int kParamRoles = static_cast<int>(ParamRole::kFeedbackNormIn) + 1;

struct ParamDef {
  ParamRole role = ParamRole::kEmbed;  // with `layer`, its key: ParamName(role, layer)
  int64_t layer = -1;                  // of a per-layer tensor; -1 for the others
  std::vector<int64_t> shape;          // whole: (rows, cols) in PyTorch Linear convention, or (D)
  ParamKind kind = ParamKind::kMatrix;
  double init_std = 0.0;  // N(0, init_std²) for matrices and the embedding; gains start at 1
  TpSplit split = TpSplit::kReplicated;
};

// The safetensors key of docs/MODEL.md of a parameter: "embed.weight", "layers.3.attn.wq.weight".
std::string ParamName(ParamRole role, int64_t layer = -1);

// The parameters of `model` in table order: the embedding, each layer's, the final norm's and
// the feedback fusion's.
std::vector<ParamDef> ModelParameters(const ModelConfig& model);

// Σ over ModelParameters of the elements of each shape.
int64_t ModelParameterCount(const ModelConfig& model);

}  // namespace fullband

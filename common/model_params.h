// The model's parameters, listed once (docs/MODEL.md): each one's safetensors key, whole shape,
// kind, initialization and how tensor parallelism splits it. The worker's ParameterTable
// (worker/param_table.h) carves its arenas from this list and the coordinator counts the
// model's FLOPs from it (common/schedule.h), so the two always agree.
#pragma once

#include <cstdint>
#include <string>
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

struct ParamDef {
  std::string name;            // "layers.3.attn.wq.weight"
  std::vector<int64_t> shape;  // whole: (rows, cols) in PyTorch Linear convention, or (D)
  ParamKind kind = ParamKind::kMatrix;
  double init_std = 0.0;  // N(0, init_std²) for matrices and the embedding; gains start at 1
  TpSplit split = TpSplit::kReplicated;
};

// The parameters of `model` in table order: the embedding, each layer's, the final norm's and
// the feedback fusion's.
std::vector<ParamDef> ModelParameters(const ModelConfig& model);

// Σ over ModelParameters of the elements of each shape.
int64_t ModelParameterCount(const ModelConfig& model);

}  // namespace fullband

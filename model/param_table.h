// ParameterTable: the one table of the model's parameters — name (the safetensors key of
// docs/MODEL.md), shape, element offset — that carves the parameter, gradient and optimizer
// arenas alike (llm.c). Every tensor is a contiguous, 16-float-aligned range, so a
// data-parallel optimizer shard is an offset range of the same table, never a copy.
//
// Under tensor parallelism (docs/PARALLEL.md) the table is one rank's: each parameter is either
// replicated (the norms, the feedback fusion) or this rank's slice of the global tensor — a box
// of it, rows of a column-parallel matrix and of the embedding, columns of a row-parallel one
// (whose elements are strided in the global tensor, contiguous here).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/config.h"
#include "common/model_params.h"
#include "common/status.h"
#include "ops/tensor.h"

namespace fullband::model {

struct ParamSpec {
  ParamRole role = ParamRole::kEmbed;
  int64_t layer = -1;          // of a per-layer tensor; -1 for the others
  std::string name;            // "layers.3.attn.wq.weight"
  std::vector<int64_t> shape;  // this rank's: (rows, cols) in PyTorch Linear convention, or (D)
  std::vector<int64_t> global_shape;  // of the whole tensor (= shape when replicated)
  std::vector<int64_t> box_offset;    // where this rank's box starts in the whole tensor
  TpSplit split = TpSplit::kReplicated;
  int64_t offset = 0;  // in floats, from the start of the arena
  int64_t numel = 0;
  ParamKind kind = ParamKind::kMatrix;
  double init_std = 0.0;  // N(0, init_std²) for matrices and the embedding; gains start at 1
};

// A parameter seen as a matrix (a vector is one row): its whole tensor is rows × cols, and this
// rank's box is box_rows × box_cols from (row0, col0). Row i of the box is elements
// [i·box_cols, (i+1)·box_cols) of the rank's tensor and starts at element WholeIndex(i) of the
// whole tensor (row-major).
struct MatrixBox {
  int64_t rows, cols, row0, col0, box_rows, box_cols;
  int64_t WholeIndex(int64_t i) const { return (row0 + i) * cols + col0; }
};
MatrixBox AsMatrix(const ParamSpec& spec);

// The view of `spec` inside an arena carved by the table (parameters, gradients, moments).
ops::Tensor ViewOf(const ParamSpec& spec, float* arena_base, ops::Device device);

class ParameterTable {
 public:
  // The table of ModelParameters (common/model_params.h) for a validated model config, as rank
  // `tp_rank` of `tp` tensor-parallel ranks holds it (tp must divide what it splits:
  // Config::Validate checks parallel.tp).
  static ParameterTable Build(const ModelConfig& config, int tp = 1, int tp_rank = 0);

  const std::vector<ParamSpec>& specs() const { return specs_; }
  int64_t total_numel() const { return total_; }
  // The spec named `name`, or nullptr (for names read from files).
  const ParamSpec* Find(const std::string& name) const;
  // The spec of `role` (of `layer` for a per-layer role), or nullptr when the config has no
  // such tensor (q_norm without qk_norm, say).
  const ParamSpec* Find(ParamRole role, int64_t layer = -1) const;
  // The same for a tensor every config has.
  const ParamSpec& Get(ParamRole role, int64_t layer = -1) const;
  int tp() const { return tp_; }
  int tp_rank() const { return tp_rank_; }
  // Whether this rank's copy of `spec` is the one that counts: every rank's share of a split
  // parameter, TP rank 0's copy of a replicated one (what a checkpoint writes and the gradient
  // norm sums, once).
  bool Owns(const ParamSpec& spec) const {
    return spec.split != TpSplit::kReplicated || tp_rank_ == 0;
  }

 private:
  void Add(const ParamDef& def);

  int tp_ = 1, tp_rank_ = 0;
  std::vector<ParamSpec> specs_;
  // specs_ index of (layer + 1, role), -1 where the config has none.
  std::vector<int> by_role_;
  int64_t total_ = 0;
};

}  // namespace fullband::model
